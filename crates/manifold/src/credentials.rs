//! The credential broker behind the consent pages and the admin routes of connections
//! ([`manifold_http::credentials::Consents`]), and the token store the configuration names.

use std::sync::Arc;

use futures::future::BoxFuture;
use manifold_auth::{
    Broker, Caller, Completed, ConnectionInfo, ConsentLink, CredentialError, Observe, Owner,
    PendingConsent, TokenStore,
};
use manifold_config::{Config, CredentialsSettings, Identity, TokenStoreSettings, UpstreamAuth};
use manifold_http::credentials::Consents;
use manifold_telemetry::{metrics, ConsentOutcome, RefreshOutcome};

/// What the core does when a consent completes: tell the host that asked for it
/// (`notifications/elicitation/complete`) and start the upstream's connection that waited for
/// a token.
pub type CompletionHook = Arc<dyn Fn(Completed) + Send + Sync>;

/// What the core does when connections are revoked (an upstream, or all of an owner's):
/// stop the callers' own connections that carried them.
pub type RevocationHook = Arc<dyn Fn(Option<&str>, &Owner) + Send + Sync>;

/// The broker, as the pages and the admin routes see it.
pub struct BrokerConsents {
    broker: Arc<Broker>,
    /// Called once per completed consent, after the broker kept its grant.
    on_completed: CompletionHook,
    /// Called after a revocation removed grants.
    on_revoked: Option<RevocationHook>,
}

impl BrokerConsents {
    pub fn new(broker: Arc<Broker>, on_completed: CompletionHook) -> Arc<Self> {
        Arc::new(Self {
            broker,
            on_completed,
            on_revoked: None,
        })
    }

    /// The consents of a serving Manifold, whose router hears of completions and
    /// revocations.
    pub fn of_router(broker: Arc<Broker>, router: &Arc<manifold_core::Router>) -> Arc<Self> {
        let (done, gone) = (Arc::downgrade(router), Arc::downgrade(router));
        Arc::new(Self {
            broker,
            on_completed: Arc::new(move |completed| {
                if let Some(router) = done.upgrade() {
                    router.consent_completed(&completed);
                }
            }),
            on_revoked: Some(Arc::new(move |upstream, owner| {
                if let Some(router) = gone.upgrade() {
                    router.credentials_revoked(upstream, owner);
                }
            })),
        })
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
        Box::pin(async move {
            let revoked = self.broker.revoke(upstream, owner).await?;
            if let Some(hook) = &self.on_revoked {
                hook(upstream, owner);
            }
            Ok(revoked)
        })
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
            self.broker.consent(upstream, &Caller::shared(), None).await
        })
    }

    fn per_user_upstreams(&self) -> Vec<String> {
        self.broker.per_user_upstreams()
    }

    fn connect<'a>(
        &'a self,
        upstream: &'a str,
        team: &'a str,
        principal: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
        Box::pin(async move {
            if !self
                .broker
                .per_user_upstreams()
                .iter()
                .any(|u| u == upstream)
            {
                return Err(CredentialError::Refused {
                    reason: format!("upstream {upstream:?} has no per-user connections"),
                });
            }
            let caller = Caller::new(team.into(), principal.into(), None);
            self.broker.consent(upstream, &caller, None).await
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
    if settings.store == TokenStoreSettings::Memory {
        anyhow::bail!(
            "[credentials] store = \"memory\" keeps nothing once this command ends: log in \
             through a running Manifold's admin address (server.admin), or configure \
             store = \"file\" or \"redis\""
        );
    }
    store(settings)
}

/// The token store `[credentials] store` names: in memory, a sealed file, or Redis (behind
/// a fallback to this process's memory while Redis cannot be reached).
pub fn store(settings: &CredentialsSettings) -> anyhow::Result<Arc<dyn TokenStore>> {
    use manifold_core::replicas::Stores as _;
    Ok(match &settings.store {
        TokenStoreSettings::Memory => Arc::new(manifold_auth::store::MemoryStore::new()),
        TokenStoreSettings::File(path) => Arc::new(
            manifold_auth::store::FileStore::open(path, &settings.keys)
                .map_err(|e| anyhow::anyhow!("credentials.file: {e}"))?,
        ),
        TokenStoreSettings::Redis(redis) => crate::run::stores()
            .tokens(redis, &settings.keys)
            .map_err(anyhow::Error::msg)?,
    })
}

/// Whether some upstream has `[upstreams.NAME.auth]`: only then is there a broker.
pub fn wanted(config: &Config) -> bool {
    config.upstreams.iter().any(|u| match &u.transport {
        manifold_config::Transport::Http(h) => h.auth.is_some(),
        manifold_config::Transport::OpenApi(o) => o.auth.is_some(),
        manifold_config::Transport::Stdio(_) => false,
    })
}

/// The credential broker of a configuration with upstream `auth`; `None` without.
pub fn broker(config: &Config) -> anyhow::Result<Option<Arc<Broker>>> {
    if !wanted(config) {
        return Ok(None);
    }
    let store = store(&config.credentials)?;
    Ok(Some(Broker::new(
        config.credentials.clone(),
        &config.upstreams,
        store,
        Arc::new(Metrics),
    )))
}

/// The broker's reports, as metrics.
struct Metrics;

impl Observe for Metrics {
    fn consent_asked(&self, upstream: &str) {
        metrics().credential_consent(upstream, ConsentOutcome::Asked);
    }
    fn consent_completed(&self, upstream: &str) {
        metrics().credential_consent(upstream, ConsentOutcome::Completed);
    }
    fn consent_expired(&self, upstream: &str) {
        metrics().credential_consent(upstream, ConsentOutcome::Expired);
    }
    fn refreshed(&self, upstream: &str, ok: bool) {
        let outcome = match ok {
            true => RefreshOutcome::Ok,
            false => RefreshOutcome::Failed,
        };
        metrics().credential_refresh(upstream, outcome);
    }
}
