"""The Django-shaped project docs/migrating.md's gunicorn and uWSGI examples serve."""
