//! The consent a caller completes in a browser: the link, the authorization request (PKCE,
//! state, resource, scopes), and the callback that redeems the code.

use std::sync::Arc;
use std::time::Duration;

use manifold_config::{Identity, UpstreamAuth};
use serde::{Deserialize, Serialize};

use super::inner::{failed, locked, store_failed, Inner};
use super::{Caller, Completed, ConsentLink, CredentialError, PendingConsent};
use crate::oauth::authorize::{self, AuthorizationRequest};
use crate::oauth::client::ClientIdentity;
use crate::oauth::pkce::{random_token, Pkce};
use crate::oauth::token::{self, Endpoint, Keep};
use crate::oauth::{now_ms, OAuthError};
use crate::store::Owner;

/// A consent asked for, kept (single use) until it completes or expires.
#[derive(Serialize, Deserialize)]
struct ConsentRecord {
    upstream: String,
    owner: String,
    principal: String,
    shared: bool,
    binding: Option<String>,
    /// A step-up's scopes (the union of granted and challenged); `None`: discovered.
    scopes: Option<Vec<String>>,
    expires_at_ms: u64,
}

/// An authorization in progress, under its state: what the callback needs.
#[derive(Serialize, Deserialize)]
struct StateRecord {
    consent_id: String,
    upstream: String,
    owner: String,
    principal: String,
    binding: Option<String>,
    verifier: String,
    issuer: String,
    iss_advertised: bool,
    token_endpoint: String,
    client: ClientIdentity,
    redirect_uri: String,
    resource: String,
    scopes: Vec<String>,
    expires_at_ms: u64,
}

fn refused(reason: impl Into<String>) -> CredentialError {
    CredentialError::Refused {
        reason: reason.into(),
    }
}

fn consent_key(id: &str) -> String {
    format!("consent:{id}")
}

fn state_key(state: &str) -> String {
    format!("state:{state}")
}

/// Where a step-up's scopes wait for the consent that asks for them.
pub(super) fn step_up_key(upstream: &str, owner: &Owner) -> String {
    format!("step-up:{upstream}:{}", owner.hex())
}

impl Inner {
    pub async fn consent(
        self: &Arc<Self>,
        key: &str,
        caller: &Caller,
        binding: Option<String>,
    ) -> Result<ConsentLink, CredentialError> {
        let upstream = self.upstream(key)?;
        let UpstreamAuth::OAuth(settings) = &upstream.auth else {
            return Err(refused(format!("{key:?} is not authorized in a browser")));
        };
        let owner = Self::owner_for(&upstream.auth, caller);
        let scopes = match self.store.peek_once(&step_up_key(key, &owner)).await {
            Ok(Some(bytes)) => serde_json::from_slice(&bytes).ok(),
            _ => None,
        };
        let id = random_token().map_err(|e| failed(key, e))?;
        let expires_at_ms = now_ms().saturating_add(self.consent_ms());
        let record = ConsentRecord {
            upstream: key.to_owned(),
            owner: owner.hex(),
            principal: Self::principal_of(&upstream.auth, caller),
            shared: settings.identity == Identity::Shared,
            binding,
            scopes,
            expires_at_ms,
        };
        let url = format!("{}/oauth/connect/{id}", self.base()?);
        self.put_record(&consent_key(&id), &record, self.settings.consent_timeout)
            .await?;
        self.observe.consent_asked(key);
        Ok(ConsentLink {
            id,
            url,
            expires_at_ms,
        })
    }

    fn consent_ms(&self) -> u64 {
        u64::try_from(self.settings.consent_timeout.as_millis()).unwrap_or(u64::MAX)
    }

    async fn put_record<T: Serialize>(
        &self,
        key: &str,
        record: &T,
        ttl: Duration,
    ) -> Result<(), CredentialError> {
        let bytes = serde_json::to_vec(record)
            .map_err(|e| refused(format!("a record could not be written: {e}")))?;
        self.store
            .put_once(key, &bytes, ttl)
            .await
            .map_err(store_failed)
    }

    async fn consent_record(&self, id: &str) -> Result<ConsentRecord, CredentialError> {
        let unknown = || refused("this consent link is unknown or has expired");
        let bytes = self
            .store
            .peek_once(&consent_key(id))
            .await
            .map_err(store_failed)?
            .ok_or_else(unknown)?;
        let record: ConsentRecord = serde_json::from_slice(&bytes).map_err(|_| unknown())?;
        if record.expires_at_ms <= now_ms() {
            self.observe.consent_expired(&record.upstream);
            return Err(unknown());
        }
        Ok(record)
    }

    pub async fn pending(&self, id: &str) -> Result<PendingConsent, CredentialError> {
        let record = self.consent_record(id).await?;
        let owner =
            Owner::from_hex(&record.owner).ok_or_else(|| refused("a consent record is damaged"))?;
        Ok(PendingConsent {
            upstream: record.upstream,
            owner,
            principal: record.principal,
            shared: record.shared,
        })
    }

    pub async fn authorize(
        self: &Arc<Self>,
        id: &str,
        owner: &Owner,
    ) -> Result<String, CredentialError> {
        let record = self.consent_record(id).await?;
        if record.owner != owner.hex() {
            return Err(refused("this consent was asked for another user"));
        }
        let key = record.upstream.as_str();
        let upstream = self.upstream(key)?;
        let UpstreamAuth::OAuth(settings) = &upstream.auth else {
            return Err(refused(format!("{key:?} is not authorized in a browser")));
        };
        // Discovered anew for every consent: a browser is about to be sent there, and the
        // server may have moved since this process last looked.
        let found = self
            .rediscover(key, &upstream, settings.authorization_server.as_deref())
            .await?;
        let endpoints = Endpoints::of(&found).map_err(|e| failed(key, e))?;
        let redirect_uri = self.redirect_uri()?;
        let client = self
            .client(key, &settings.client, &found, &redirect_uri)
            .await?;
        let scopes = match &record.scopes {
            Some(step_up) => authorize::choose_scopes(Some(step_up), None, None, &found.metadata),
            None => authorize::choose_scopes(
                settings.scopes.as_deref(),
                self.challenge(key).and_then(|c| c.scopes).as_deref(),
                found.resource_scopes.as_deref(),
                &found.metadata,
            ),
        };
        let pkce = Pkce::new().map_err(|e| failed(key, e))?;
        let state = random_token().map_err(|e| failed(key, e))?;
        let url = authorize::authorization_url(&AuthorizationRequest {
            endpoint: &endpoints.authorization,
            client_id: &client.client_id,
            redirect_uri: &redirect_uri,
            code_challenge: &pkce.challenge,
            state: &state,
            resource: &found.resource,
            scopes: &scopes,
        })
        .map_err(|e| failed(key, e))?;
        let ttl = Duration::from_millis(record.expires_at_ms.saturating_sub(now_ms()));
        let pending = StateRecord {
            consent_id: id.to_owned(),
            upstream: key.to_owned(),
            owner: record.owner,
            principal: record.principal,
            binding: record.binding,
            verifier: pkce.verifier,
            issuer: found.issuer.clone(),
            iss_advertised: found
                .metadata
                .authorization_response_iss_parameter_supported,
            token_endpoint: endpoints.token,
            client,
            redirect_uri,
            resource: found.resource.clone(),
            scopes,
            expires_at_ms: record.expires_at_ms,
        };
        self.put_record(&state_key(&state), &pending, ttl).await?;
        Ok(url)
    }

    pub async fn callback(self: &Arc<Self>, query: &str) -> Result<Completed, CredentialError> {
        let answer = authorize::parse_callback(query);
        let record = self.take_state(answer.state.as_deref()).await?;
        if let Some(error) = answer.error {
            let error: String = error
                .chars()
                .filter(char::is_ascii_graphic)
                .take(64)
                .collect();
            return Err(refused(format!(
                "the authorization server answered {error}"
            )));
        }
        authorize::check_iss(answer.iss.as_deref(), &record.issuer, record.iss_advertised)
            .map_err(|e| refused(e.to_string()))?;
        let code = answer
            .code
            .filter(|c| !c.is_empty())
            .ok_or_else(|| refused("the callback carries no code"))?;
        let owner =
            Owner::from_hex(&record.owner).ok_or_else(|| refused("a state record is damaged"))?;
        let key = record.upstream.as_str();
        // An upstream removed (or changed to another mode) since keeps no new grant.
        if !matches!(self.upstream(key)?.auth, UpstreamAuth::OAuth(_)) {
            return Err(refused(format!("{key:?} is not authorized in a browser")));
        }
        let redeemed = token::request(
            &self.http,
            &Endpoint {
                url: &record.token_endpoint,
                client: Some(&record.client),
                key: None,
                issuer: Some(&record.issuer),
            },
            token::code_form(
                &code,
                &record.verifier,
                &record.redirect_uri,
                &record.resource,
            ),
        )
        .await
        .map_err(|e| failed(key, e))?;
        let grant = token::into_grant(
            redeemed,
            &Keep {
                asked: &record.scopes,
                issuer: Some(&record.issuer),
                client_id: Some(&record.client.client_id),
                principal: &record.principal,
                previous_refresh: None,
            },
        );
        self.store
            .put(key, &owner, &grant)
            .await
            .map_err(store_failed)?;
        self.finish(&record, owner).await;
        Ok(Completed {
            upstream: record.upstream,
            owner,
            principal: record.principal,
            id: record.consent_id,
            binding: record.binding,
        })
    }

    /// Takes the authorization behind `state`: once, and only before it expires.
    async fn take_state(&self, state: Option<&str>) -> Result<StateRecord, CredentialError> {
        let state = state
            .filter(|s| !s.is_empty())
            .ok_or_else(|| refused("the callback carries no state"))?;
        let unknown = || refused("the callback's state is unknown, used already or expired");
        let taken = self
            .store
            .take_once(&state_key(state))
            .await
            .map_err(store_failed)?;
        let record: StateRecord = taken
            .and_then(|bytes| serde_json::from_slice(&bytes).ok())
            .ok_or_else(unknown)?;
        if record.expires_at_ms <= now_ms() {
            self.observe.consent_expired(&record.upstream);
            return Err(unknown());
        }
        Ok(record)
    }

    /// The consent is done: its link, any step-up waiting for it and the step-up count go.
    async fn finish(&self, record: &StateRecord, owner: Owner) {
        let key = record.upstream.as_str();
        let _ = self.store.take_once(&consent_key(&record.consent_id)).await;
        let _ = self.store.take_once(&step_up_key(key, &owner)).await;
        locked(&self.attempts).remove(&(key.to_owned(), owner));
        self.observe.consent_completed(key);
    }
}

/// The endpoints an authorization uses; PKCE with S256 must be advertised where there is
/// metadata to advertise it.
struct Endpoints {
    authorization: String,
    token: String,
}

impl Endpoints {
    fn of(found: &crate::oauth::Discovered) -> Result<Self, OAuthError> {
        if found.from_metadata {
            authorize::require_s256(&found.metadata)?;
        }
        let authorization = found
            .metadata
            .authorization_endpoint
            .clone()
            .ok_or_else(|| {
                OAuthError::Invalid(format!("{} names no authorization endpoint", found.issuer))
            })?;
        Ok(Self {
            authorization,
            token: found.token_endpoint()?.to_owned(),
        })
    }
}
