//! Manifold as the OAuth client of its upstreams.
//!
//! An HTTP upstream may need a token Manifold obtains itself (`[upstreams.NAME.auth]`): an
//! authorization made by each caller (per user) or once by an operator (shared), client
//! credentials, or the caller's own token exchanged for one the upstream accepts. The
//! [`Broker`] holds every such credential: it finds what a connection must send, refreshes
//! or exchanges before expiry (once across replicas), and runs the consent a caller completes
//! in a browser. Tokens are kept in a [`TokenStore`]: in memory, an encrypted file, or (in
//! another crate) Redis.
//!
//! The caller's own token is never sent to an upstream as it is (token passthrough, which the
//! MCP specification forbids); token exchange trades it for one meant for the upstream.

pub mod broker;
pub mod oauth;
// The seam's listing returns (upstream, owner, grant) triples, spelled out on purpose.
#[allow(clippy::type_complexity)]
pub mod store;

pub use broker::{
    Broker, Caller, Completed, ConnectionInfo, ConsentLink, CredentialError, Observe,
    PendingConsent, Rejection,
};
pub use store::{Grant, Owner, StoreError, TokenStore};
