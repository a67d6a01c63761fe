"""An app module that fails while being imported."""

raise ZeroDivisionError("division by zero at import")
