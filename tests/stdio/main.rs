//! Integration tests: the real `manifold` binary over stdio against fixture upstreams.

#[path = "../common/mod.rs"]
mod common;

mod catalog;
mod cli;
mod errors;
mod lifecycle;
mod routing;
