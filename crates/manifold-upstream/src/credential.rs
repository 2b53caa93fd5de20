//! The token an HTTP upstream with `[upstreams.NAME.auth]` is sent, from outside this crate.
//!
//! A connection to such an upstream holds a [`Credential`]: before each request it asks for
//! the token to send (`Authorization: Bearer`), and when the upstream refuses one (401, or 403
//! asking for more scope) it says so once and sends the request again with the fresh token it
//! gets; a second refusal fails the request. The credential broker implements the trait; this
//! crate never sees how a token is obtained, and never logs one.

use std::sync::Arc;

use futures::future::BoxFuture;

/// Why a connection has no token to send: the text names the upstream's authorization, never
/// a secret. `consent`: the caller must authorize in a browser (the router asks the host).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unauthorized {
    pub consent: bool,
    pub reason: String,
}

/// Where one connection's token comes from.
pub trait Credential: Send + Sync {
    /// The token to send with the next request.
    fn token(&self) -> BoxFuture<'_, Result<String, Unauthorized>>;

    /// The upstream refused `sent` with `status` (401, 403) and this `WWW-Authenticate`
    /// value: the token to send the request with once more.
    fn rejected<'a>(
        &'a self,
        sent: &'a str,
        status: u16,
        challenge: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, Unauthorized>>;
}

/// Gives the shared connection of each upstream with `auth` its credential (set once on the
/// [`crate::Hub`] by the server).
pub trait Credentials: Send + Sync {
    /// The shared connection's credential for `upstream`; `None`: it sends none.
    fn shared(&self, upstream: &str) -> Option<Arc<dyn Credential>>;
}
