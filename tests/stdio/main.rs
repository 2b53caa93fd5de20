//! Integration tests: the real `manifold` binary over stdio against fixture upstreams.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod cache;
mod catalog;
mod cli;
mod errors;
mod extensions;
mod first_exchange;
mod hostile;
mod lifecycle;
mod openapi;
mod openapi_auth;
mod openapi_faults;
mod openapi_policy;
mod pinning;
mod protocol;
mod reload;
mod routing;
mod skills;
mod slow_host;
mod stateless;
mod teams;
