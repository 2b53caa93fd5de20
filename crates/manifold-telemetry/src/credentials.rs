//! The counters of upstream credentials: consents asked of callers and how they ended, and
//! refreshes (or new exchanges) of tokens, by upstream. Never by caller: a principal or an
//! owner is not a label.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::exposition::Exposition;
use crate::metrics::{Metrics, UpstreamCounters};
use crate::names::{self, label};

/// What became of a consent (`manifold_credential_consents_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConsentOutcome {
    /// A caller was given a consent link.
    Asked,
    /// Its callback came back with a token.
    Completed,
    /// It ran out (`consent_timeout`) before it was completed.
    Expired,
}

impl ConsentOutcome {
    pub const ALL: [Self; 3] = [Self::Asked, Self::Completed, Self::Expired];

    pub fn label(self) -> &'static str {
        match self {
            Self::Asked => "asked",
            Self::Completed => "completed",
            Self::Expired => "expired",
        }
    }
}

/// How a refresh of a token (or a new exchange) ended
/// (`manifold_credential_refreshes_total{outcome}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefreshOutcome {
    Ok,
    Failed,
}

impl RefreshOutcome {
    pub const ALL: [Self; 2] = [Self::Ok, Self::Failed];

    pub fn label(self) -> &'static str {
        match self {
            Self::Ok => "ok",
            Self::Failed => "failed",
        }
    }
}

/// One upstream's credential counters, part of its [`UpstreamCounters`].
#[derive(Debug, Default)]
pub struct CredentialCounters {
    /// By [`ConsentOutcome`].
    pub consents: [AtomicU64; 3],
    /// By [`RefreshOutcome`].
    pub refreshes: [AtomicU64; 2],
}

impl Metrics {
    /// A consent for `upstream` was asked, completed or expired.
    pub fn credential_consent(&self, upstream: &str, outcome: ConsentOutcome) {
        if self.enabled() {
            let counters = self.upstream(upstream);
            counters.credentials.consents[outcome as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A token of `upstream` was refreshed (or exchanged again), or that failed.
    pub fn credential_refresh(&self, upstream: &str, outcome: RefreshOutcome) {
        if self.enabled() {
            let counters = self.upstream(upstream);
            counters.credentials.refreshes[outcome as usize].fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// Writes both families, a series per upstream and outcome (zero until counted, so that a
/// rate has a start).
pub(crate) fn render(
    e: &mut Exposition,
    upstreams: &[(std::sync::Arc<str>, std::sync::Arc<UpstreamCounters>)],
) {
    e.metric(&names::CREDENTIAL_CONSENTS);
    for (key, c) in upstreams {
        for outcome in ConsentOutcome::ALL {
            let n = c.credentials.consents[outcome as usize].load(Ordering::Relaxed);
            let labels = [(label::UPSTREAM, &**key), (label::OUTCOME, outcome.label())];
            e.sample(&names::CREDENTIAL_CONSENTS, &labels, n);
        }
    }
    e.metric(&names::CREDENTIAL_REFRESHES);
    for (key, c) in upstreams {
        for outcome in RefreshOutcome::ALL {
            let n = c.credentials.refreshes[outcome as usize].load(Ordering::Relaxed);
            let labels = [(label::UPSTREAM, &**key), (label::OUTCOME, outcome.label())];
            e.sample(&names::CREDENTIAL_REFRESHES, &labels, n);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_families_are_exposed_by_upstream_and_outcome() {
        let m = crate::metrics::metrics();
        m.credential_consent("cred_forge", ConsentOutcome::Asked);
        m.credential_consent("cred_forge", ConsentOutcome::Asked);
        m.credential_consent("cred_forge", ConsentOutcome::Completed);
        m.credential_refresh("cred_forge", RefreshOutcome::Failed);
        let mut e = Exposition::new();
        m.render(&mut e);
        let text = e.finish();
        for line in [
            "# TYPE manifold_credential_consents_total counter",
            "manifold_credential_consents_total{upstream=\"cred_forge\",outcome=\"asked\"} 2",
            "manifold_credential_consents_total{upstream=\"cred_forge\",outcome=\"completed\"} 1",
            "manifold_credential_consents_total{upstream=\"cred_forge\",outcome=\"expired\"} 0",
            "# TYPE manifold_credential_refreshes_total counter",
            "manifold_credential_refreshes_total{upstream=\"cred_forge\",outcome=\"ok\"} 0",
            "manifold_credential_refreshes_total{upstream=\"cred_forge\",outcome=\"failed\"} 1",
        ] {
            assert!(text.lines().any(|l| l == line), "no {line:?} in\n{text}");
        }
    }
}
