//! Errors at the upstream boundary, tagged with whether retrying can help, so that the server
//! maps them to JSON-RPC errors in one place.

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
    #[error(
        "upstream {upstream:?} answered with a {len}-byte message, over its limit of {max} bytes \
         (max_message_bytes); the answer was dropped"
    )]
    AnswerTooLarge {
        upstream: String,
        len: usize,
        max: usize,
    },
    /// No token could be sent (or every token sent was refused): `consent` when the caller
    /// must authorize in a browser.
    #[error("upstream {upstream:?} needs authorization: {reason}")]
    Unauthorized {
        upstream: String,
        reason: String,
        consent: bool,
    },
    #[error("the request to upstream {upstream:?} was cancelled: {reason}")]
    Cancelled { upstream: String, reason: String },
    /// Refused without being sent: the upstream's circuit breaker is open.
    #[error(
        "upstream {upstream:?} is not answering ({reason}); calls to it are refused {}",
        match .retry_in {
            Some(d) => format!("until it is tried again in {}", humanize(*d)),
            None => "while a probe now under way finds out whether it answers again".to_owned(),
        }
    )]
    CircuitOpen {
        upstream: String,
        reason: String,
        /// When it will be tried again; `None`: a probe is under way.
        retry_in: Option<Duration>,
    },
}

impl UpstreamError {
    /// Whether the same request may succeed later (after a restart or when load drops).
    pub fn retryable(&self) -> bool {
        matches!(
            self,
            Self::Unavailable { .. }
                | Self::Closed { .. }
                | Self::Overloaded { .. }
                | Self::CircuitOpen { .. }
        )
    }

    /// The upstream this error concerns.
    pub fn upstream(&self) -> &str {
        match self {
            Self::Unavailable { upstream, .. }
            | Self::Closed { upstream, .. }
            | Self::Timeout { upstream, .. }
            | Self::Overloaded { upstream, .. }
            | Self::AnswerTooLarge { upstream, .. }
            | Self::Cancelled { upstream, .. }
            | Self::Unauthorized { upstream, .. }
            | Self::CircuitOpen { upstream, .. } => upstream,
        }
    }
}

fn humanize(d: Duration) -> String {
    if d.as_millis() % 1000 == 0 {
        format!("{}s", d.as_secs())
    } else {
        format!("{}ms", d.as_millis())
    }
}
