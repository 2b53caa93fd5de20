//! The downstream side of Manifold: host sessions, the transports hosts use, and the router
//! that answers from the merged catalog or forwards to the owning upstream. Only this crate
//! knows about host-facing transports, and within it only the transport modules do: the
//! router sees an [`Origin`] (a session, if any, and an [`Outlet`]) and makes a [`Context`]
//! per request.
#![forbid(unsafe_code)]

pub mod cache;
pub mod context;
pub mod credentials;
pub mod discovery;
pub mod error;
pub mod extensions;
mod fanout;
pub mod layer;
pub mod outlet;
pub mod policy;
pub mod replicas;
pub mod request_state;
pub mod router;
pub mod scrape;
pub mod session;
pub mod sessions;
pub mod stateless;
pub mod stdio;
pub mod target;
mod tasks;
#[cfg(test)]
mod testing;

pub use context::{Context, Origin};
pub use error::RouteError;
pub use outlet::Outlet;
pub use router::{Handled, Router};
pub use session::{Session, Transport};
pub use sessions::Sessions;
