//! Limits counted in this process (see the crate docs).
