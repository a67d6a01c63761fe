//! Helpers shared by the integration tests: a tiny JSON reader and base64
//! decoder, so that the shared gunicorn corpus can be read without adding
//! dependencies to the workspace.

pub mod json;
