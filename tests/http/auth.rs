//! Authentication of HTTP hosts.
