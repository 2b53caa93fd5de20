//! Errors at the upstream boundary (all of them the upstream's fault), tagged with whether
//! retrying can help, so that the server maps them to JSON-RPC errors in one place.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {upstream:?} is unavailable: {reason}")]
    Unavailable { upstream: String, reason: String },
    #[error("upstream {upstream:?} stopped before answering: {reason}")]
    Closed { upstream: String, reason: String },
    #[error("upstream {upstream:?} did not answer within {}", humanize(*.after))]
    Timeout { upstream: String, after: Duration },
    #[error("upstream {upstream:?} is not reading its input ({queued} bytes waiting)")]
    Overloaded { upstream: String, queued: usize },
}

impl UpstreamError {
    /// Whether the same request may succeed later (after a restart or when load drops).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. } | Self::Closed { .. } | Self::Overloaded { .. }
        )
    }
}

fn humanize(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
