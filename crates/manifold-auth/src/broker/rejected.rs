//! An upstream refused a token: a 401 is answered with one fresh token, and no more; a 403
//! `insufficient_scope` is a step-up, not repeated for scopes already granted nor more than
//! [`MAX_STEP_UPS`] times in a consent's lifetime; an authorization server that moved is
//! started over with.

use std::sync::Arc;

use manifold_config::UpstreamAuth;
use sha2::{Digest, Sha256};

use super::consent::step_up_key;
use super::grants::Job;
use super::inner::{consent_needed, failed, locked, store_failed, Inner, Upstream};
use super::{Caller, CredentialError, Rejection};
use crate::oauth::authorize::union;
use crate::oauth::discovery::resource_metadata;
use crate::oauth::{now_ms, Challenge};
use crate::store::Owner;

/// Step-ups for one (upstream, owner) before the broker stops asking.
pub const MAX_STEP_UPS: u32 = 3;

fn hash(token: &str) -> [u8; 32] {
    Sha256::digest(token.as_bytes()).into()
}

impl Inner {
    pub async fn rejected(
        self: &Arc<Self>,
        key: &str,
        caller: &Caller,
        sent: &str,
        rejection: &Rejection,
    ) -> Result<String, CredentialError> {
        let upstream = self.upstream(key)?;
        let owner = Self::owner_for(&upstream.auth, caller);
        let challenge = rejection
            .www_authenticate
            .as_deref()
            .and_then(Challenge::parse)
            .unwrap_or_default();
        if self.moved(key, &upstream, &challenge).await {
            self.forget(key);
            self.store
                .remove(Some(key), &owner)
                .await
                .map_err(store_failed)?;
            self.remember_challenge(key, &challenge);
            self.follow(key, &upstream).await;
            if matches!(upstream.auth, UpstreamAuth::OAuth(_)) {
                return Err(consent_needed(
                    key,
                    "the upstream's authorization server changed",
                ));
            }
        }
        self.remember_challenge(key, &challenge);
        match rejection.status {
            403 if challenge.insufficient_scope() => {
                self.step_up(key, &upstream, caller, owner, sent, &challenge)
                    .await
            }
            401 => self.unauthorized(key, &upstream, caller, owner, sent).await,
            // A 403 that asks for no scope forbids what was asked: another token would not
            // change that.
            status => Err(CredentialError::Failed {
                upstream: key.to_owned(),
                reason: format!("the upstream refused the request with status {status}"),
            }),
        }
    }

    /// Whether the resource metadata (where the challenge points, else the well-known
    /// locations) now names another authorization server than the one discovery found.
    async fn moved(&self, key: &str, upstream: &Upstream, challenge: &Challenge) -> bool {
        let configured = match &upstream.auth {
            UpstreamAuth::OAuth(o) => o.authorization_server.is_some(),
            UpstreamAuth::IdentityAssertion(ia) => ia.authorization_server.is_some(),
            _ => false,
        };
        let Some(known) = self.cached_discovery(key).filter(|_| !configured) else {
            return false;
        };
        let Ok(url) = reqwest::Url::parse(&upstream.url) else {
            return false;
        };
        match resource_metadata(&self.http, &url, Some(challenge)).await {
            Ok(Some(metadata)) => metadata
                .authorization_servers
                .first()
                .is_some_and(|named| *named != known.issuer),
            _ => false,
        }
    }

    /// The upstream moved to another authorization server: its metadata is read and, for a
    /// browser authorization, Manifold's client there made (registered when it registers
    /// dynamically) at once, so that the consent asked next goes straight to the new server
    /// and a server that cannot be used is reported now. Nothing of the previous server is
    /// used there: clients are kept per server. A failure here is logged; the consent will
    /// try again.
    async fn follow(&self, key: &str, upstream: &Upstream) {
        let configured = match &upstream.auth {
            UpstreamAuth::OAuth(o) => o.authorization_server.as_deref(),
            UpstreamAuth::IdentityAssertion(ia) => ia.authorization_server.as_deref(),
            _ => None,
        };
        let followed = match self.discovery(key, upstream, configured).await {
            Ok(found) => match (&upstream.auth, self.redirect_uri()) {
                (UpstreamAuth::OAuth(o), Ok(redirect)) => self
                    .client(key, &o.client, &found, &redirect)
                    .await
                    .map(|_| found),
                _ => Ok(found),
            },
            Err(e) => Err(e),
        };
        match followed {
            Ok(found) => tracing::warn!(
                upstream = %key,
                issuer = %found.issuer,
                "the upstream moved to another authorization server: the tokens of the \
                 previous one are dropped, and new ones are obtained at the new one"
            ),
            Err(e) => tracing::warn!(
                upstream = %key,
                error = %e,
                "the upstream moved to another authorization server, which cannot be used yet"
            ),
        }
    }

    async fn unauthorized(
        self: &Arc<Self>,
        key: &str,
        upstream: &Upstream,
        caller: &Caller,
        owner: Owner,
        sent: &str,
    ) -> Result<String, CredentialError> {
        let slot = (key.to_owned(), owner);
        let kept = self.store.get(key, &owner).await.map_err(store_failed)?;
        if let Some(grant) = kept
            .as_ref()
            .filter(|g| g.access_token != sent && self.fresh(g))
        {
            // Another caller already replaced the refused token.
            return Ok(grant.access_token.clone());
        }
        let retried = locked(&self.attempts).get(&slot).and_then(|a| a.retried);
        if retried == Some(hash(sent)) {
            // The token obtained for the last 401 was refused too: no further retry.
            locked(&self.attempts).remove(&slot);
            self.store
                .remove(Some(key), &owner)
                .await
                .map_err(store_failed)?;
            let reason = "the upstream refused a freshly obtained token too";
            return Err(match upstream.auth {
                UpstreamAuth::OAuth(_) => consent_needed(key, reason),
                _ => CredentialError::Failed {
                    upstream: key.to_owned(),
                    reason: reason.to_owned(),
                },
            });
        }
        let job = match &upstream.auth {
            UpstreamAuth::OAuth(_) => {
                if kept.is_none_or(|g| g.refresh_token.is_none()) {
                    self.store
                        .remove(Some(key), &owner)
                        .await
                        .map_err(store_failed)?;
                    return Err(consent_needed(key, "the upstream refused the kept token"));
                }
                Job::Refresh {
                    rejected: Some(sent.to_owned()),
                }
            }
            auth => Job::Obtain {
                subject: self.subject_of(key, auth, caller)?,
                scopes: None,
                rejected: Some(sent.to_owned()),
                principal: Self::principal_of(auth, caller),
            },
        };
        let fresh = self.fly(key, owner, job).await?.access_token;
        locked(&self.attempts).entry(slot).or_default().retried = Some(hash(&fresh));
        Ok(fresh)
    }

    /// Counts a step-up; `false` once the limit is reached within a consent's lifetime.
    fn count_step_up(&self, key: &str, owner: Owner) -> bool {
        let window = u64::try_from(self.settings.consent_timeout.as_millis()).unwrap_or(u64::MAX);
        let now = now_ms();
        let mut attempts = locked(&self.attempts);
        let entry = attempts.entry((key.to_owned(), owner)).or_default();
        if now.saturating_sub(entry.since_ms) > window {
            entry.step_ups = 0;
            entry.since_ms = now;
        }
        entry.step_ups += 1;
        entry.step_ups <= MAX_STEP_UPS
    }

    async fn step_up(
        self: &Arc<Self>,
        key: &str,
        upstream: &Upstream,
        caller: &Caller,
        owner: Owner,
        sent: &str,
        challenge: &Challenge,
    ) -> Result<String, CredentialError> {
        let kept = self.store.get(key, &owner).await.map_err(store_failed)?;
        let granted = kept.map(|g| g.scopes).unwrap_or_default();
        let challenged = challenge.scopes.clone().unwrap_or_default();
        let limit = |reason: &str| CredentialError::Failed {
            upstream: key.to_owned(),
            reason: format!("the upstream still refuses for insufficient scope: {reason}"),
        };
        if challenged.iter().all(|s| granted.contains(s)) {
            return Err(limit("the scopes it asks for were granted already"));
        }
        if !self.count_step_up(key, owner) {
            return Err(limit("step-ups are not repeated further"));
        }
        let scopes = union(&granted, &challenged);
        match &upstream.auth {
            UpstreamAuth::OAuth(_) => {
                let bytes = serde_json::to_vec(&scopes)
                    .map_err(|e| failed(key, crate::oauth::OAuthError::Invalid(e.to_string())))?;
                self.store
                    .put_once(
                        &step_up_key(key, &owner),
                        &bytes,
                        self.settings.consent_timeout,
                    )
                    .await
                    .map_err(store_failed)?;
                Err(CredentialError::ConsentNeeded {
                    upstream: key.to_owned(),
                    reason: "the upstream needs more scopes".to_owned(),
                    scopes: Some(scopes),
                })
            }
            auth => {
                let job = Job::Obtain {
                    subject: self.subject_of(key, auth, caller)?,
                    scopes: Some(scopes),
                    rejected: Some(sent.to_owned()),
                    principal: Self::principal_of(auth, caller),
                };
                Ok(self.fly(key, owner, job).await?.access_token)
            }
        }
    }
}
