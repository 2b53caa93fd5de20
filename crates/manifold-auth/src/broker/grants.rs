//! Tokens handed out: a kept grant, refreshed ahead of expiry once across callers and
//! replicas; and tokens obtained without a browser (client credentials, token exchange,
//! identity assertion), cached per owner until shortly before they expire.

use std::sync::Arc;
use std::time::Duration;

use futures::FutureExt;
use manifold_config::UpstreamAuth;

use super::inner::{consent_needed, failed, locked, store_failed, Inner, Upstream};
use super::{Caller, CredentialError};
use crate::oauth::now_ms;
use crate::oauth::token::{self, Endpoint, Keep};
use crate::store::{Grant, Owner};

/// What a flight does for (upstream, owner).
#[derive(Clone)]
pub(super) enum Job {
    /// Spend the kept refresh token. `rejected`: the access token the upstream refused, which
    /// does not count as fresh even if unexpired.
    Refresh { rejected: Option<String> },
    /// Obtain a token without a browser, for `subject` (the caller's own token), with `scopes`
    /// (a step-up) instead of the configured ones.
    Obtain {
        subject: Option<Arc<str>>,
        scopes: Option<Vec<String>>,
        rejected: Option<String>,
        principal: String,
    },
}

impl Job {
    fn rejected(&self) -> Option<&str> {
        match self {
            Job::Refresh { rejected } | Job::Obtain { rejected, .. } => rejected.as_deref(),
        }
    }
}

/// How often a replica that lost the refresh lock looks for the winner's grant.
const WAIT_STEP: Duration = Duration::from_millis(50);

impl Inner {
    /// Whether a grant is good for longer than `refresh_before`.
    pub fn fresh(&self, grant: &Grant) -> bool {
        let margin = u64::try_from(self.settings.refresh_before.as_millis()).unwrap_or(u64::MAX);
        grant
            .expires_at_ms
            .is_none_or(|at| at > now_ms().saturating_add(margin))
    }

    pub async fn token(
        self: &Arc<Self>,
        key: &str,
        caller: &Caller,
    ) -> Result<String, CredentialError> {
        let upstream = self.upstream(key)?;
        let owner = Self::owner_for(&upstream.auth, caller);
        let kept = self.store.get(key, &owner).await.map_err(store_failed)?;
        if let Some(grant) = kept.as_ref().filter(|g| self.fresh(g)) {
            return Ok(grant.access_token.clone());
        }
        let job = match &upstream.auth {
            UpstreamAuth::OAuth(_) => {
                let Some(grant) = kept else {
                    return Err(consent_needed(key, "nothing is kept for this caller yet"));
                };
                if grant.refresh_token.is_none() {
                    if grant.expires_at_ms.is_some_and(|at| at > now_ms()) {
                        return Ok(grant.access_token);
                    }
                    self.store
                        .remove(Some(key), &owner)
                        .await
                        .map_err(store_failed)?;
                    return Err(consent_needed(
                        key,
                        "the token expired and cannot be refreshed",
                    ));
                }
                Job::Refresh { rejected: None }
            }
            _ => Job::Obtain {
                subject: self.subject_of(key, &upstream.auth, caller)?,
                scopes: None,
                rejected: None,
                principal: Self::principal_of(&upstream.auth, caller),
            },
        };
        Ok(self.fly(key, owner, job).await?.access_token)
    }

    /// Who a grant is for, as listed: `shared` for the shared owner, else `team/principal`.
    pub fn principal_of(auth: &UpstreamAuth, caller: &Caller) -> String {
        if Self::owner_for(auth, caller) == Owner::shared() {
            "shared".to_owned()
        } else {
            caller.display()
        }
    }

    /// The caller's own token, for the modes that exchange it.
    pub fn subject_of(
        &self,
        key: &str,
        auth: &UpstreamAuth,
        caller: &Caller,
    ) -> Result<Option<Arc<str>>, CredentialError> {
        match auth {
            UpstreamAuth::TokenExchange(_) | UpstreamAuth::IdentityAssertion(_) => {
                match &caller.subject_token {
                    Some(token) => Ok(Some(Arc::clone(token))),
                    None => Err(CredentialError::Refused {
                        reason: format!(
                            "{key:?} exchanges the caller's own token, and this caller \
                             authenticated without one"
                        ),
                    }),
                }
            }
            _ => Ok(None),
        }
    }

    pub async fn ready(self: &Arc<Self>, key: &str, caller: &Caller) -> bool {
        let Ok(upstream) = self.upstream(key) else {
            return false;
        };
        match &upstream.auth {
            UpstreamAuth::OAuth(_) => {
                let owner = Self::owner_for(&upstream.auth, caller);
                match self.store.get(key, &owner).await {
                    Ok(Some(grant)) => {
                        grant.refresh_token.is_some()
                            || grant.expires_at_ms.is_none_or(|at| at > now_ms())
                    }
                    _ => false,
                }
            }
            UpstreamAuth::ClientCredentials(_) => true,
            _ => caller.subject_token.is_some(),
        }
    }

    /// Runs `job` once for (upstream, owner) in this process: concurrent callers share it.
    pub async fn fly(
        self: &Arc<Self>,
        key: &str,
        owner: Owner,
        job: Job,
    ) -> Result<Grant, CredentialError> {
        let slot = (key.to_owned(), owner);
        let flight = {
            let mut flights = locked(&self.flights);
            flights
                .entry(slot.clone())
                .or_insert_with(|| {
                    let inner = Arc::clone(self);
                    async move {
                        let result = inner.across_replicas(&slot.0, slot.1, job).await;
                        locked(&inner.flights).remove(&slot);
                        result
                    }
                    .boxed()
                    .shared()
                })
                .clone()
        };
        flight.await
    }

    /// With a shared store, one replica runs the job; the others wait, bounded, for the grant
    /// it stores.
    async fn across_replicas(
        self: &Arc<Self>,
        key: &str,
        owner: Owner,
        job: Job,
    ) -> Result<Grant, CredentialError> {
        if !self.store.is_shared() {
            return self.run(key, owner, &job).await;
        }
        let ttl = self.settings.timeout.saturating_mul(3);
        let usable = |grant: &Grant| {
            self.fresh(grant) && job.rejected() != Some(grant.access_token.as_str())
        };
        if self
            .store
            .lock(key, &owner, ttl)
            .await
            .map_err(store_failed)?
        {
            let kept = self.store.get(key, &owner).await;
            let result = match kept {
                Ok(Some(grant)) if usable(&grant) => Ok(grant),
                _ => self.run(key, owner, &job).await,
            };
            if let Err(e) = self.store.unlock(key, &owner).await {
                tracing::warn!(upstream = %key, error = %e, "a refresh lock could not be released");
            }
            return result;
        }
        let deadline = tokio::time::Instant::now() + ttl;
        while tokio::time::Instant::now() < deadline {
            tokio::time::sleep(WAIT_STEP).await;
            if let Some(grant) = self.store.get(key, &owner).await.map_err(store_failed)? {
                if usable(&grant) {
                    return Ok(grant);
                }
            }
        }
        Err(CredentialError::Failed {
            upstream: key.to_owned(),
            reason: "another replica's refresh did not finish in time".to_owned(),
        })
    }

    async fn run(
        self: &Arc<Self>,
        key: &str,
        owner: Owner,
        job: &Job,
    ) -> Result<Grant, CredentialError> {
        let upstream = self.upstream(key)?;
        let grant = match job {
            Job::Refresh { .. } => self.refresh(key, &upstream, owner).await?,
            Job::Obtain {
                subject,
                scopes,
                principal,
                ..
            } => {
                // Tokens obtained without a browser are counted as refreshes, renewed or not.
                let obtained = self
                    .obtain(key, &upstream, subject.as_deref(), scopes.as_deref())
                    .await;
                self.observe.refreshed(key, obtained.is_ok());
                let mut grant = obtained?;
                grant.principal.clone_from(principal);
                grant
            }
        };
        self.store
            .put(key, &owner, &grant)
            .await
            .map_err(store_failed)?;
        Ok(grant)
    }

    /// Drops the owner's grant: the caller must authorize anew, for `reason`.
    pub async fn drop_grant(&self, key: &str, owner: Owner, reason: &str) -> CredentialError {
        match self.store.remove(Some(key), &owner).await {
            Ok(_) => consent_needed(key, reason),
            Err(e) => store_failed(e),
        }
    }

    /// Spends the kept refresh token; a refusal (`invalid_grant`), or a grant from another
    /// authorization server than the upstream's now, drops the grant and asks for consent.
    async fn refresh(
        &self,
        key: &str,
        upstream: &Upstream,
        owner: Owner,
    ) -> Result<Grant, CredentialError> {
        let kept = self.store.get(key, &owner).await.map_err(store_failed)?;
        let refreshable = kept.and_then(|g| g.refresh_token.clone().map(|r| (g, r)));
        let (UpstreamAuth::OAuth(settings), Some((grant, refresh))) = (&upstream.auth, refreshable)
        else {
            return Err(consent_needed(
                key,
                "nothing refreshable is kept for this caller",
            ));
        };
        let configured = settings.authorization_server.as_deref();
        let mut found = self.discovery(key, upstream, configured).await?;
        if grant.issuer.as_deref() != Some(found.issuer.as_str()) {
            // The grant may come from the server the upstream moved to, which another replica
            // followed: look again before dropping it.
            found = self.rediscover(key, upstream, configured).await?;
        }
        let client = self.client_of(key, &settings.client, &found, &grant).await;
        let (Some(client), true) = (
            client,
            grant.issuer.as_deref() == Some(found.issuer.as_str()),
        ) else {
            return Err(self
                .drop_grant(
                    key,
                    owner,
                    "the grant's client or authorization server changed",
                )
                .await);
        };
        let endpoint = found.token_endpoint().map_err(|e| failed(key, e))?;
        let answer = token::request(
            &self.http,
            &Endpoint {
                url: endpoint,
                client: Some(&client),
                key: None,
                issuer: Some(&found.issuer),
            },
            token::refresh_form(&refresh, &found.resource),
        )
        .await;
        self.observe.refreshed(key, answer.is_ok());
        match answer {
            Ok(answer) => Ok(token::into_grant(
                answer,
                &Keep {
                    asked: &grant.scopes,
                    issuer: Some(&found.issuer),
                    client_id: Some(&client.client_id),
                    principal: &grant.principal,
                    previous_refresh: Some(&refresh),
                },
            )),
            Err(e) if e.is_invalid_grant() => Err(self
                .drop_grant(
                    key,
                    owner,
                    "the authorization server refused to refresh the grant",
                )
                .await),
            Err(e) => Err(failed(key, e)),
        }
    }
}
