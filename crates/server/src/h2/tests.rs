//! Tests of the HTTP/2 connection.
