//! The credential broker behind the consent pages and the admin routes of connections
//! ([`manifold_http::credentials::Consents`]), and the token store the configuration names.

use std::sync::Arc;

use futures::future::BoxFuture;
use manifold_auth::{
    Broker, Caller, Completed, ConnectionInfo, ConsentLink, CredentialError, Observe, Owner,
    PendingConsent, TokenStore,
};
use manifold_config::{CredentialsSettings, Identity, TokenStoreSettings, UpstreamAuth};
use manifold_http::credentials::Consents;

/// What the core does when a consent completes: tell the host that asked for it
/// (`notifications/elicitation/complete`) and send `list_changed` to the caller's sessions.
pub type CompletionHook = Arc<dyn Fn(Completed) + Send + Sync>;

/// The broker, as the pages and the admin routes see it.
pub struct BrokerConsents {
    broker: Arc<Broker>,
    /// Called once per completed consent, after the broker kept its grant.
    on_completed: CompletionHook,
}

impl BrokerConsents {
    pub fn new(broker: Arc<Broker>, on_completed: CompletionHook) -> Arc<Self> {
        Arc::new(Self {
            broker,
            on_completed,
        })
    }
}

/// Who starts the login of a shared identity: the operator, as the shared owner.
fn operator() -> Caller {
    Caller {
        team: Arc::from(""),
        principal: Arc::from("shared"),
        owner: Owner::shared(),
        subject_token: None,
    }
}

/// Whether `upstream` has a login an operator makes: `identity = "shared"`, or a per-user
/// upstream whose catalog is read with a shared login.
fn has_shared_login(auth: Option<&UpstreamAuth>) -> bool {
    matches!(auth, Some(UpstreamAuth::OAuth(o)) if o.identity == Identity::Shared || o.catalog_login)
}

impl Consents for BrokerConsents {
    fn pending<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<PendingConsent, CredentialError>> {
        Box::pin(self.broker.pending(id))
    }

    fn authorize<'a>(
        &'a self,
        id: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<String, CredentialError>> {
        Box::pin(self.broker.authorize(id, owner))
    }

    fn callback<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Completed, CredentialError>> {
        Box::pin(self.broker.callback(query))
    }

    fn client_metadata(&self) -> Option<String> {
        self.broker.client_metadata()
    }

    fn connections<'a>(
        &'a self,
        owner: Option<&'a Owner>,
    ) -> BoxFuture<'a, Result<Vec<ConnectionInfo>, CredentialError>> {
        Box::pin(self.broker.connections(owner))
    }

    fn revoke<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, CredentialError>> {
        Box::pin(self.broker.revoke(upstream, owner))
    }

    fn consent<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
        Box::pin(async move {
            if !has_shared_login(self.broker.auth_of(upstream).as_ref()) {
                return Err(CredentialError::Refused {
                    reason: format!(
                        "upstream {upstream:?} has no shared login (an oauth auth with \
                         identity = \"shared\" or catalog = \"shared_login\")"
                    ),
                });
            }
            self.broker.consent(upstream, &operator(), None).await
        })
    }

    fn completed(&self, done: Completed) {
        (self.on_completed)(done);
    }
}

/// The metrics of a command that serves none (`manifold login` in its own process).
pub struct Unobserved;

impl Observe for Unobserved {
    fn consent_asked(&self, _upstream: &str) {}
    fn consent_completed(&self, _upstream: &str) {}
    fn consent_expired(&self, _upstream: &str) {}
    fn refreshed(&self, _upstream: &str, _ok: bool) {}
}

/// The token store `[credentials] store` names, for a command that keeps what it obtains
/// (`manifold login`): the in-memory store is refused there, since nothing it holds would
/// outlive the command.
pub fn lasting_store(settings: &CredentialsSettings) -> anyhow::Result<Arc<dyn TokenStore>> {
    match &settings.store {
        TokenStoreSettings::Memory => anyhow::bail!(
            "[credentials] store = \"memory\" keeps nothing once this command ends: log in \
             through a running Manifold's admin address (server.admin), or configure \
             store = \"file\" or \"redis\""
        ),
        TokenStoreSettings::File(path) => anyhow::bail!(
            "the file token store ({}) cannot be opened by this build",
            path.display()
        ),
        TokenStoreSettings::Redis(_) => {
            anyhow::bail!("the Redis token store cannot be opened by this build")
        }
    }
}
