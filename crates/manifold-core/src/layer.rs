//! Layers: steps every forwarded request passes through between routing and the upstream
//! (policy, caching). A layer answers at once when it can, or hands back a future when it
//! needs I/O first (a shared quota store, a cache fill); only then does the request continue
//! on the async runtime, so the synchronous stdio path stays as it is and no thread is held
//! per request.

use std::future::Future;
use std::pin::Pin;

use crate::context::Context;
use crate::error::RouteError;
use crate::policy::LimitLayer;
use crate::target::Target;

/// A step between routing and the upstream.
pub trait Layer: Send + Sync {
    /// Decides on a request that is about to be forwarded to `target`.
    fn check(&self, ctx: &Context, target: &Target) -> Check;

    /// The layer as the limit layer, when it is that one: what its limits counted is read
    /// through it (the console's teams page).
    fn limit_layer(self: std::sync::Arc<Self>) -> Option<std::sync::Arc<LimitLayer>> {
        None
    }
}

/// A layer's decision.
pub enum Check {
    /// Go on to the next layer, then the upstream.
    Pass,
    /// Answer the host with this error; the upstream never sees the request.
    Refuse(RouteError),
    /// Decide once the future resolves.
    Wait(Pin<Box<dyn Future<Output = Result<(), RouteError>> + Send>>),
}
