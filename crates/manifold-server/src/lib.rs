//! The downstream side of Manifold: sessions with hosts, the stdio transport, and the router
//! that answers from the merged catalog or forwards to the owning upstream. Only this crate
//! knows about host-facing transports.
#![forbid(unsafe_code)]

pub mod error;
mod initialize;
pub mod router;
pub mod session;
pub mod stdio;

pub use error::RouteError;
pub use router::Router;
pub use session::{Output, Session};
