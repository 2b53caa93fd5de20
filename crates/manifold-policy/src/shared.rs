//! Limits counted in a store shared by replicas: what the limit layer asks of it. The Redis
//! implementation lives in the `manifold-redis` crate.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use crate::{LimitDef, Refusal, WindowUse};

/// A check under way.
pub type Checking<'a> =
    Pin<Box<dyn Future<Output = Result<Option<Refusal>, StoreError>> + Send + 'a>>;

/// A read of quotas' use under way.
pub type Reading<'a> =
    Pin<Box<dyn Future<Output = Result<Vec<WindowUse>, StoreError>> + Send + 'a>>;

/// Counts shared by every replica using the same store.
pub trait SharedCounts: Send + Sync {
    /// Checks one call against every limit in `limits`, all or nothing: if every rate and
    /// quota admits the call, all are consumed and the result is `Ok(None)`; if any refuses,
    /// nothing is consumed and the result names the refusing limit, its kind and when to
    /// retry (if several refuse, the longest wait). Bounded by the store's timeout.
    fn check<'a>(&'a self, limits: &'a [Arc<LimitDef>]) -> Checking<'a>;

    /// How much of each quota's current window of `limits` is used, counted by every replica
    /// together, read without counting anything. Bounded by the store's timeout.
    fn usage<'a>(&'a self, limits: &'a [Arc<LimitDef>]) -> Reading<'a>;
}

/// Why the store could not answer a check.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// No connection, no answer within the timeout, or the store cannot serve right now.
    #[error("the store is unreachable: {0}")]
    Unreachable(String),
    /// The store answered, but not as expected.
    #[error("unexpected answer from the store: {0}")]
    Protocol(String),
}
