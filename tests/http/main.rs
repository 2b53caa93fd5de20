//! Integration tests: the real `manifold` binary serving hosts over HTTP (Streamable HTTP and
//! the 2024-11-05 HTTP+SSE transport) in front of fixture upstreams.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod auth;
mod cache;
mod cache_hints;
mod console;
mod discovery;
mod drain;
mod extensions;
mod faults;
mod health;
mod legacy;
mod protocol;
mod reload;
mod sessions;
mod shared_cache;
mod skills;
mod stateless;
mod streamable;
mod tls;
mod upstreams;
