//! Upstream credentials seen from the router: who a request's caller is to the credential
//! broker, and the token sources the broker gives connections (a caller's own connection,
//! and the shared connection of an upstream with `auth`).
//!
//! The host's own token is never sent upstream: a caller's token for an upstream is one the
//! broker obtained for that upstream (an authorization the caller made, a refresh of it, or
//! an exchange of the caller's token for one meant for the upstream).

use std::sync::Arc;

use futures::future::BoxFuture;
use manifold_auth::{Broker, CredentialError, Rejection};
use manifold_config::{Identity, UpstreamAuth};
use manifold_upstream::{Credential, Credentials, Unauthorized};

use crate::context::Context;
use crate::session::Transport;

/// Who `ctx`'s caller is to the broker: its team and principal (`local` over stdio, the one
/// person at this machine), and the token it authenticated with, for an exchange.
pub fn caller_of(ctx: &Context) -> manifold_auth::Caller {
    let caller = &ctx.caller;
    let team = Arc::clone(caller.label());
    let stdio = ctx
        .session
        .as_ref()
        .is_some_and(|s| s.transport() == Transport::Stdio);
    if stdio {
        return manifold_auth::Caller::local(team);
    }
    manifold_auth::Caller::new(team, Arc::clone(&caller.id), caller.token.clone())
}

/// A connection's token source for one caller (or the shared identity).
pub struct BrokerCredential {
    pub broker: Arc<Broker>,
    pub upstream: String,
    pub caller: manifold_auth::Caller,
}

impl Credential for BrokerCredential {
    fn token(&self) -> BoxFuture<'_, Result<String, Unauthorized>> {
        Box::pin(async move {
            self.broker
                .token(&self.upstream, &self.caller)
                .await
                .map_err(unauthorized)
        })
    }

    fn rejected<'a>(
        &'a self,
        sent: &'a str,
        status: u16,
        challenge: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, Unauthorized>> {
        Box::pin(async move {
            let rejection = Rejection {
                status,
                www_authenticate: challenge.map(str::to_owned),
            };
            self.broker
                .rejected(&self.upstream, &self.caller, sent, &rejection)
                .await
                .map_err(unauthorized)
        })
    }
}

/// The token source of the shared connection of a per-user upstream without a shared login
/// for its catalog: the token of a caller who connected (the catalog is the same for every
/// caller; calls never go on this connection).
struct AnyConnectedCaller {
    broker: Arc<Broker>,
    upstream: String,
}

impl AnyConnectedCaller {
    /// The token source of the caller who connected last.
    async fn someone(&self) -> Result<BrokerCredential, Unauthorized> {
        let connections = self.broker.connections(None).await.map_err(unauthorized)?;
        let latest = connections
            .into_iter()
            .filter(|c| c.upstream == self.upstream)
            .max_by_key(|c| c.obtained_at_ms)
            .ok_or_else(|| Unauthorized {
                consent: true,
                reason: "no caller has connected to it yet; its tools are listed once one has"
                    .into(),
            })?;
        let (team, principal) = latest
            .principal
            .split_once('/')
            .unwrap_or(("", &latest.principal));
        Ok(BrokerCredential {
            broker: Arc::clone(&self.broker),
            upstream: self.upstream.clone(),
            caller: manifold_auth::Caller::new(Arc::from(team), Arc::from(principal), None),
        })
    }
}

impl Credential for AnyConnectedCaller {
    fn token(&self) -> BoxFuture<'_, Result<String, Unauthorized>> {
        Box::pin(async move { self.someone().await?.token().await })
    }

    fn rejected<'a>(
        &'a self,
        sent: &'a str,
        status: u16,
        challenge: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, Unauthorized>> {
        Box::pin(async move {
            self.someone()
                .await?
                .rejected(sent, status, challenge)
                .await
        })
    }
}

/// Gives each upstream's shared connection its token source: the shared identity (a shared
/// login, client credentials), the shared login a per-user upstream reads its catalog with,
/// or else a connected caller's token; an upstream whose tokens are exchanged per caller has
/// none to list with but a caller's too.
pub struct SharedCredentials(pub Arc<Broker>);

impl Credentials for SharedCredentials {
    fn shared(&self, upstream: &str) -> Option<Arc<dyn Credential>> {
        let auth = self.0.auth_of(upstream)?;
        let shared = match &auth {
            UpstreamAuth::OAuth(o) => o.identity == Identity::Shared || o.catalog_login,
            UpstreamAuth::ClientCredentials(_) => true,
            UpstreamAuth::TokenExchange(_) | UpstreamAuth::IdentityAssertion(_) => false,
        };
        let broker = Arc::clone(&self.0);
        let upstream = upstream.to_owned();
        if shared {
            return Some(Arc::new(BrokerCredential {
                broker,
                upstream,
                caller: manifold_auth::Caller::shared(),
            }));
        }
        Some(Arc::new(AnyConnectedCaller { broker, upstream }))
    }
}

/// A broker error as a connection reports it.
fn unauthorized(e: CredentialError) -> Unauthorized {
    Unauthorized {
        consent: matches!(e, CredentialError::ConsentNeeded { .. }),
        reason: e.to_string(),
    }
}
