//! Limits shared across Manifold processes through a real Redis.
