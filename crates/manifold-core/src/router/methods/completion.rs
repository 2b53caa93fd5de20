//! `completion/complete`: forwarded to the upstream of the prompt or resource template its
//! `ref` names (one the caller may see).

use std::sync::Arc;

use manifold_protocol::{Envelope, Params};

use crate::context::Context;
use crate::router::{resolve, Router};

impl Router {
    pub(in crate::router) fn complete(
        self: &Arc<Self>,
        ctx: Context,
        env: &Envelope<'_>,
        params: &Params<'_>,
    ) {
        let sight = ctx.caller.restricted().map(|t| &**t);
        match resolve::complete(&self.hub.catalog(), env, params, sight) {
            Ok(target) => self.admit(ctx, target),
            Err(e) => ctx.fail(&e),
        }
    }
}
