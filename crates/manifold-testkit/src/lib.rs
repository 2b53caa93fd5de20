//! Test support shared by Manifold's integration tests (the top-level `tests/` folder, test
//! targets of the `manifold` package), the tests of `manifold-policy`, and the `manifold-load`
//! benchmark tool. Not part of the product: nothing that ships depends on it.
//!
//! - [`process`]: the paths of the workspace's binaries, fixture upstream configs,
//!   [`process::TempDir`], runs of the `manifold` CLI, signals, [`process::eventually`] and
//!   other bounded waits, and readers of answers ([`process::text_of`]).
//! - [`stdio`]: the real `manifold serve` over stdio ([`stdio::Manifold`], also exported by
//!   [`process`]).
//! - [`requests`]: what a host asks, written once for stdio and HTTP ([`requests::Requests`]:
//!   calls, reads, paginated lists, the fixture's own call counts).
//! - `http` (feature `http`): `manifold serve --listen` (`http::Server`, its `/metrics`),
//!   hosts speaking Streamable HTTP (`http::Host`) with the credentials they present
//!   (`http::Cred`), SSE streams (`http::Events`) and the fixture as an HTTP upstream
//!   (`http::FixtureHttp`).
//! - `jwt` (feature `jwt`): an Ed25519 token issuer and a JWKS server.
//! - [`metrics`]: samples of `/metrics` (the Prometheus text format) by name and labels.
//! - [`redis_server`]: a real `redis-server` on a free loopback port, and key prefixes of a
//!   test's own.
//!
//! # Finding the binaries
//!
//! Cargo gives `CARGO_BIN_EXE_<name>` only to a package's own integration tests, never to a
//! library. The kit finds `manifold` and `manifold-fixture` in the folder of the profile being
//! tested (`target/<profile>/`), the parent of the `deps/` folder that holds the running test
//! executable. `cargo test -p manifold` builds the `manifold` binary before its tests run, and
//! [`process::fixture_bin`] builds `manifold-fixture` on first use; a binary that is still
//! missing fails the test with a message naming it and the command that builds it.
//!
//! # The benchmark tool
//!
//! `manifold-bench` depends on this crate as a normal dependency, without features, for
//! [`redis_server`] alone: it is benchmark tooling rather than product, and one copy of the
//! Redis helper keeps the benchmark measuring against the same server setup as the tests.

// Clippy does not count a library as test code, but every caller is a test or the benchmark
// tool, where a failed unwrap is a failed run with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[cfg(feature = "http")]
pub mod http;
#[cfg(feature = "jwt")]
pub mod jwt;
pub mod metrics;
pub mod process;
pub mod redis_server;
pub mod requests;
pub mod rest;
pub mod skills;
pub mod stdio;
