//! What the limit backends count: each configured limit under a stable id, and why a call
//! was refused.

use std::sync::Arc;
use std::time::Duration;

use manifold_config::{LimitConfig, QuotaConfig, RateConfig};

/// One configured limit, as the backends count it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitDef {
    /// Stable across restarts and replicas, e.g. `team:alpha:tool:fs__read`; part of the keys
    /// the Redis backend writes.
    pub id: Arc<str>,
    pub rate: Option<RateConfig>,
    pub quotas: Vec<QuotaConfig>,
}

impl LimitDef {
    pub fn new(id: impl Into<Arc<str>>, config: &LimitConfig) -> Self {
        Self {
            id: id.into(),
            rate: config.rate,
            quotas: config.quotas.clone(),
        }
    }
}

/// Which kind of limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A rate (GCRA): capacity comes back continuously.
    RateLimited,
    /// A quota over a fixed window: capacity comes back when the window ends.
    QuotaExceeded,
}

/// Why a call was refused, and when it may succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// The id of the limit that refused it.
    pub limit: Arc<str>,
    pub retry_after: Duration,
}
