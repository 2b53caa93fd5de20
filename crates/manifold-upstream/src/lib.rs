//! Upstream MCP servers. Each upstream is an actor (actix) that owns its connection (a child
//! process over stdio, or an HTTP session), its handshake, its slice of the catalog, its health
//! and its restarts; callers hold an [`UpstreamHandle`] and send requests through the live
//! [`Connection`] directly, so the hot path never waits on a mailbox. The [`Hub`] merges every
//! slice into the served catalog and tells its [`Listener`] what hosts should hear.
//!
//! This crate knows no host sessions or host transports: a forwarded request carries an
//! [`Exchange`], through which the server learns of its progress and its end.
//!
//! stdio upstreams use dedicated threads with blocking reads and non-blocking writes rather
//! than async pipes: on two cores that is the lowest-latency relay measured (BENCHMARKS.md).
#![forbid(unsafe_code)]

mod actor;
mod connection;
mod credential;
mod error;
mod handle;
mod handshake;
mod health;
mod http;
mod hub;
mod openapi;
mod outbound;
mod param_headers;
mod pending;
pub mod pipe;
mod pool;
mod process;
#[cfg(any(test, feature = "scripted"))]
pub mod scripted;
mod stdio;

pub use connection::{Connection, Timing};
pub use credential::{Credential, Credentials, Unauthorized};
pub use error::UpstreamError;
pub use handle::{Isolation, UpstreamHandle};
pub use health::BreakerView;
pub use hub::{Hub, Listener};
pub use manifold_telemetry::BreakerState;
pub use openapi::OpenApiReport;
pub use outbound::Outbound;
pub use pending::{
    guards_held, Answer, Exchange, Finish, Forward, Peer, RequestKey, ServerReply, ServerRequest,
    TableGuard as CountedGuard,
};
pub use pool::{CallerFor, Pool, SessionFor, TeamFor};
