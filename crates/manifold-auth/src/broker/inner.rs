//! The broker's state: the upstreams' auth, what discovery found, the clients registered,
//! the refreshes in flight; and what every step shares (the owner of a grant, the base URL).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError, RwLock};

use futures::future::{BoxFuture, Shared};
use manifold_config::{
    ClientSettings, CredentialsSettings, Identity, Transport, UpstreamAuth, UpstreamConfig,
};

use super::{Caller, ConnectionInfo, CredentialError, Observe};
use crate::oauth::client::{self, ClientIdentity};
use crate::oauth::discovery::{self, Discovered};
use crate::oauth::{http_client, Challenge, OAuthError};
use crate::store::{Grant, Owner, StoreError, TokenStore};

/// One upstream with an `auth` table.
#[derive(Clone)]
pub(super) struct Upstream {
    pub url: String,
    pub auth: UpstreamAuth,
}

/// A refresh (or a token obtained without a browser) in flight, shared by its waiters.
pub(super) type Flight = Shared<BoxFuture<'static, Result<Grant, CredentialError>>>;

/// What was tried lately for (upstream, owner): the token handed out after a 401 (its hash),
/// and the step-ups asked since `since_ms`.
#[derive(Default)]
pub(super) struct Attempts {
    pub retried: Option<[u8; 32]>,
    pub step_ups: u32,
    pub since_ms: u64,
}

pub(super) struct Inner {
    pub settings: CredentialsSettings,
    pub store: Arc<dyn TokenStore>,
    pub observe: Arc<dyn Observe>,
    pub http: reqwest::Client,
    upstreams: RwLock<HashMap<String, Upstream>>,
    base_url: RwLock<Option<String>>,
    discovered: Mutex<HashMap<String, Arc<Discovered>>>,
    challenges: Mutex<HashMap<String, Challenge>>,
    /// Clients by (upstream, issuer): a client is never used at another server.
    clients: Mutex<HashMap<(String, String), ClientIdentity>>,
    pub flights: Mutex<HashMap<(String, Owner), Flight>>,
    pub attempts: Mutex<HashMap<(String, Owner), Attempts>>,
}

/// Locks a std mutex, carrying on past a panic elsewhere (the maps stay consistent: every
/// update is one insert or remove).
pub(super) fn locked<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}

fn auth_upstreams(upstreams: &[UpstreamConfig]) -> HashMap<String, Upstream> {
    upstreams
        .iter()
        .filter_map(|u| match &u.transport {
            Transport::Http(http) => http.auth.clone().map(|auth| {
                (
                    u.key.clone(),
                    Upstream {
                        url: http.url.clone(),
                        auth,
                    },
                )
            }),
            // The service's base URL is the resource its tokens are for; without one, the
            // description's location stands for the service.
            Transport::OpenApi(openapi) => openapi.auth.clone().map(|auth| {
                let url = match (&openapi.base_url, &openapi.source) {
                    (Some(url), _) | (None, manifold_config::OpenApiSource::Url(url)) => {
                        url.clone()
                    }
                    (None, manifold_config::OpenApiSource::File(path)) => {
                        path.display().to_string()
                    }
                };
                (u.key.clone(), Upstream { url, auth })
            }),
            Transport::Stdio(_) => None,
        })
        .collect()
}

/// How long a dynamic registration is kept in the store.
const REGISTRATION_KEPT: std::time::Duration = std::time::Duration::from_secs(30 * 24 * 3600);

/// Where a dynamic registration is kept: per upstream and authorization server.
fn client_key(upstream: &str, issuer: &str) -> String {
    format!("client:{upstream}:{issuer}")
}

fn client_id_key(upstream: &str, issuer: &str, client_id: &str) -> String {
    format!("client-id:{upstream}:{issuer}:{client_id}")
}

pub(super) fn store_failed(error: StoreError) -> CredentialError {
    CredentialError::Failed {
        upstream: "the token store".to_owned(),
        reason: error.0,
    }
}

pub(super) fn failed(upstream: &str, error: OAuthError) -> CredentialError {
    CredentialError::Failed {
        upstream: upstream.to_owned(),
        reason: error.to_string(),
    }
}

pub(super) fn consent_needed(upstream: &str, reason: &str) -> CredentialError {
    CredentialError::ConsentNeeded {
        upstream: upstream.to_owned(),
        reason: reason.to_owned(),
        scopes: None,
    }
}

impl Inner {
    pub fn new(
        settings: CredentialsSettings,
        upstreams: &[UpstreamConfig],
        store: Arc<dyn TokenStore>,
        observe: Arc<dyn Observe>,
    ) -> Self {
        // Building a client only fails without a TLS backend; the default client then
        // carries on without the timeout, and every request still fails clearly.
        let http = http_client(settings.timeout).unwrap_or_default();
        Self {
            settings,
            store,
            observe,
            http,
            upstreams: RwLock::new(auth_upstreams(upstreams)),
            base_url: RwLock::new(None),
            discovered: Mutex::default(),
            challenges: Mutex::default(),
            clients: Mutex::default(),
            flights: Mutex::default(),
            attempts: Mutex::default(),
        }
    }

    /// The upstreams whose callers each connect an account of their own, by key.
    pub fn per_user(&self) -> Vec<String> {
        let upstreams = self
            .upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        let mut keys: Vec<String> = upstreams
            .iter()
            .filter(|(_, u)| {
                matches!(&u.auth, UpstreamAuth::OAuth(o) if o.identity == Identity::PerUser)
            })
            .map(|(key, _)| key.clone())
            .collect();
        keys.sort();
        keys
    }

    pub fn upstream(&self, key: &str) -> Result<Upstream, CredentialError> {
        let upstreams = self
            .upstreams
            .read()
            .unwrap_or_else(PoisonError::into_inner);
        upstreams
            .get(key)
            .cloned()
            .ok_or_else(|| CredentialError::Refused {
                reason: format!("{key:?} is not an upstream with credentials"),
            })
    }

    /// Whose grant a request for `caller` uses: the shared owner for a shared login and for
    /// client credentials, the caller otherwise.
    pub fn owner_for(auth: &UpstreamAuth, caller: &Caller) -> Owner {
        match auth {
            UpstreamAuth::OAuth(o) if o.identity == Identity::Shared => Owner::shared(),
            UpstreamAuth::ClientCredentials(_) => Owner::shared(),
            _ => caller.owner,
        }
    }

    pub async fn set_upstreams(&self, upstreams: &[UpstreamConfig]) -> Vec<String> {
        let next = auth_upstreams(upstreams);
        let (gone, changed): (Vec<String>, Vec<String>) = {
            let mut current = self
                .upstreams
                .write()
                .unwrap_or_else(PoisonError::into_inner);
            let gone = current
                .keys()
                .filter(|k| !next.contains_key(*k))
                .cloned()
                .collect();
            let changed = next
                .iter()
                .filter(|(k, u)| {
                    current
                        .get(*k)
                        .is_some_and(|c| c.url != u.url || c.auth != u.auth)
                })
                .map(|(k, _)| k.clone())
                .collect();
            *current = next;
            (gone, changed)
        };
        for key in gone.iter().chain(&changed) {
            self.forget(key);
        }
        for key in &gone {
            if let Err(e) = self.store.remove_upstream(key).await {
                tracing::warn!(upstream = %key, error = %e, "the tokens of a removed upstream could not be dropped");
            }
        }
        gone
    }

    pub fn set_base_url(&self, url: &str) {
        *self
            .base_url
            .write()
            .unwrap_or_else(PoisonError::into_inner) = Some(url.trim_end_matches('/').to_owned());
    }

    /// Where browsers reach Manifold: `public_url`, else the listener's address.
    pub fn base(&self) -> Result<String, CredentialError> {
        if let Some(url) = &self.settings.public_url {
            return Ok(url.trim_end_matches('/').to_owned());
        }
        let base = self.base_url.read().unwrap_or_else(PoisonError::into_inner);
        base.clone().ok_or_else(|| CredentialError::Refused {
            reason: "Manifold's address for browsers is not known yet".to_owned(),
        })
    }

    pub fn redirect_uri(&self) -> Result<String, CredentialError> {
        Ok(format!("{}/oauth/callback", self.base()?))
    }

    /// Manifold's own Client ID Metadata Document URL: only under an https `public_url`.
    pub fn own_document(&self) -> Option<String> {
        let public = self.settings.public_url.as_deref()?;
        public
            .starts_with("https://")
            .then(|| format!("{}/oauth/client.json", public.trim_end_matches('/')))
    }

    pub fn client_metadata(&self) -> Option<String> {
        let client_id = self.own_document()?;
        let redirect = self.redirect_uri().ok()?;
        let document = serde_json::json!({
            "client_id": client_id,
            "client_name": "Manifold",
            "redirect_uris": [redirect],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
            "application_type": "web",
        });
        Some(document.to_string())
    }

    /// Forgets what was learned about an upstream (its server moved, or a reload changed it).
    pub fn forget(&self, key: &str) {
        locked(&self.discovered).remove(key);
        locked(&self.challenges).remove(key);
        locked(&self.clients).retain(|(k, _), _| k != key);
    }

    pub fn remember_challenge(&self, key: &str, challenge: &Challenge) {
        if challenge.resource_metadata.is_some() || challenge.scopes.is_some() {
            locked(&self.challenges).insert(key.to_owned(), challenge.clone());
        }
    }

    pub fn challenge(&self, key: &str) -> Option<Challenge> {
        locked(&self.challenges).get(key).cloned()
    }

    pub fn cached_discovery(&self, key: &str) -> Option<Arc<Discovered>> {
        locked(&self.discovered).get(key).cloned()
    }

    /// What discovery finds for `key` (cached): the upstream's challenge is asked for first,
    /// when none was seen, since it may name where the resource metadata is.
    pub async fn discovery(
        &self,
        key: &str,
        upstream: &Upstream,
        configured: Option<&str>,
    ) -> Result<Arc<Discovered>, CredentialError> {
        if let Some(found) = self.cached_discovery(key) {
            return Ok(found);
        }
        let challenge = match self.challenge(key) {
            Some(challenge) => Some(challenge),
            None => discovery::probe(&self.http, &upstream.url)
                .await
                .ok()
                .flatten(),
        };
        if let Some(challenge) = &challenge {
            self.remember_challenge(key, challenge);
        }
        let found = discovery::discover(&self.http, &upstream.url, configured, challenge.as_ref())
            .await
            .map_err(|e| failed(key, e))?;
        let found = Arc::new(found);
        locked(&self.discovered).insert(key.to_owned(), Arc::clone(&found));
        Ok(found)
    }

    /// What discovery finds for `key` now, whatever was cached: the authorization server may
    /// have moved since (another replica may have seen it move).
    pub async fn rediscover(
        &self,
        key: &str,
        upstream: &Upstream,
        configured: Option<&str>,
    ) -> Result<Arc<Discovered>, CredentialError> {
        locked(&self.discovered).remove(key);
        self.discovery(key, upstream, configured).await
    }

    /// Manifold's client at the server `found` names: configured, else registered once per
    /// (upstream, server) and kept in the store, where other replicas and a restart find it.
    pub async fn client(
        &self,
        key: &str,
        settings: &ClientSettings,
        found: &Discovered,
        redirect_uri: &str,
    ) -> Result<ClientIdentity, CredentialError> {
        let own = self.own_document();
        if let Some(client) = client::configured(settings, own.as_deref(), &found.metadata) {
            return Ok(client);
        }
        if let Some(client) = self.registered(key, &found.issuer).await {
            return Ok(client);
        }
        let endpoint = match (
            &found.metadata.registration_endpoint,
            settings.dynamic_registration,
        ) {
            (Some(endpoint), true) => endpoint,
            _ => {
                return Err(failed(
                    key,
                    OAuthError::Invalid(format!(
                        "no client for {}: it supports neither a client metadata document \
                         Manifold has nor dynamic registration, and no client_id is configured",
                        found.issuer
                    )),
                ))
            }
        };
        let client = client::register(&self.http, endpoint, &found.metadata, redirect_uri)
            .await
            .map_err(|e| failed(key, e))?;
        self.keep_registration(key, &found.issuer, &client).await;
        Ok(client)
    }

    async fn keep_registration(&self, key: &str, issuer: &str, client: &ClientIdentity) {
        let slot = (key.to_owned(), issuer.to_owned());
        locked(&self.clients).insert(slot, client.clone());
        let Ok(bytes) = serde_json::to_vec(client) else {
            return;
        };
        // Under the server (the one new consents use) and under its id (the one a grant
        // names): another replica may register a client of its own meanwhile, and a grant is
        // refreshed by the client it was issued to.
        let by_id = client_id_key(key, issuer, &client.client_id);
        for place in [client_key(key, issuer), by_id] {
            if let Err(e) = self.store.put_once(&place, &bytes, REGISTRATION_KEPT).await {
                tracing::warn!(upstream = %key, error = %e, "a client registration could not be kept");
            }
        }
    }

    /// The registered client whose id is `client_id`: this process's, else the store's.
    async fn registered_as(
        &self,
        key: &str,
        issuer: &str,
        client_id: &str,
    ) -> Option<ClientIdentity> {
        if let Some(client) = self.registered(key, issuer).await {
            if client.client_id == client_id {
                return Some(client);
            }
        }
        let bytes = self
            .store
            .peek_once(&client_id_key(key, issuer, client_id))
            .await
            .ok()??;
        serde_json::from_slice(&bytes).ok()
    }

    /// The client registered for (upstream, issuer): this process's, else the store's.
    async fn registered(&self, key: &str, issuer: &str) -> Option<ClientIdentity> {
        let slot = (key.to_owned(), issuer.to_owned());
        if let Some(client) = locked(&self.clients).get(&slot).cloned() {
            return Some(client);
        }
        let bytes = self
            .store
            .peek_once(&client_key(key, issuer))
            .await
            .ok()??;
        let client: ClientIdentity = serde_json::from_slice(&bytes).ok()?;
        locked(&self.clients).insert(slot, client.clone());
        Some(client)
    }

    /// The client a kept grant was issued to, for its refresh: the configured one, or the one
    /// registered at that server, when it is that client.
    pub async fn client_of(
        &self,
        key: &str,
        settings: &ClientSettings,
        found: &Discovered,
        grant: &Grant,
    ) -> Option<ClientIdentity> {
        let granted_to = grant.client_id.as_deref()?;
        if settings.client_id.as_deref() == Some(granted_to) {
            return Some(client::pre_registered(
                granted_to,
                settings,
                &found.metadata,
            ));
        }
        let document = settings
            .metadata_url
            .clone()
            .or_else(|| self.own_document());
        if document.as_deref() == Some(granted_to) {
            return Some(ClientIdentity {
                client_id: granted_to.to_owned(),
                client_secret: None,
                method: client::AuthMethod::None,
            });
        }
        self.registered_as(key, &found.issuer, granted_to).await
    }

    pub async fn connections(
        &self,
        owner: Option<&Owner>,
    ) -> Result<Vec<ConnectionInfo>, CredentialError> {
        let grants = self.store.list().await.map_err(store_failed)?;
        Ok(grants
            .into_iter()
            .filter(|(_, o, _)| owner.is_none_or(|wanted| wanted == o))
            .map(|(upstream, o, grant)| ConnectionInfo {
                upstream,
                owner: o.label(),
                principal: grant.principal,
                scopes: grant.scopes,
                expires_at_ms: grant.expires_at_ms,
                obtained_at_ms: grant.obtained_at_ms,
                refreshable: grant.refresh_token.is_some(),
            })
            .collect())
    }

    pub async fn revoke(
        &self,
        upstream: Option<&str>,
        owner: &Owner,
    ) -> Result<usize, CredentialError> {
        locked(&self.attempts).retain(|(k, o), _| o != owner || upstream.is_some_and(|u| u != k));
        self.store
            .remove(upstream, owner)
            .await
            .map_err(store_failed)
    }
}
