//! Upstream MCP servers. Each upstream is an actor (actix) that owns its child process, its
//! handshake, its slice of the catalog, its health and its restarts; callers hold an
//! [`UpstreamHandle`] and send requests through the live [`Connection`] directly, so the hot
//! path never waits on a mailbox. The [`Hub`] merges every slice into the served catalog.
//!
//! I/O on the hot path uses dedicated threads with blocking reads and non-blocking writes
//! rather than async pipes: on two cores that is the lowest-latency relay measured (PERF.md).
#![forbid(unsafe_code)]

mod actor;
mod connection;
mod error;
mod handle;
mod handshake;
mod hub;
mod pending;
pub mod pipe;
mod process;
mod reader;

pub use connection::{error_object, Connection};
pub use error::UpstreamError;
pub use handle::UpstreamHandle;
pub use hub::Hub;
pub use pending::{Answer, Downstream, Forward};
