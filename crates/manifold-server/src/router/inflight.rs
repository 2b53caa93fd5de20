//! A request forwarded to an upstream, from the host's side: how its progress and its answer
//! reach the host, with what the upstream named mapped back to what the host knows.

use std::sync::Arc;

use manifold_catalog::{rewrite, Kind};
use manifold_protocol::envelope::canonical_id;
use manifold_protocol::write;
use manifold_upstream::{error_object, Exchange, Hub, Outcome};

use crate::context::Context;

/// The host side of one forwarded request.
pub(super) struct Inflight {
    /// `None` once finished.
    pub ctx: Option<Context>,
    pub hub: Arc<Hub>,
    pub upstream: usize,
    pub method: &'static str,
    /// The span of this upstream hop; it ends when the request does.
    pub hop: tracing::Span,
}

impl Exchange for Inflight {
    fn progress(&self, params: &str) {
        let Some(ctx) = &self.ctx else { return };
        let mut line = Vec::with_capacity(params.len() + 64);
        write::notification(&mut line, "notifications/progress", Some(params));
        ctx.outlet.notify(&[&line]);
    }

    fn finish(mut self: Box<Self>, outcome: Outcome<'_>) {
        let Some(ctx) = self.ctx.take() else { return };
        let _entered = self.hop.enter();
        match outcome {
            Outcome::Result(result) => {
                // Most results name no URI: only those are looked at closely.
                let mapped = manifold_protocol::needle::URI_MEMBER
                    .find(result.as_bytes())
                    .and_then(|_| self.map(|p| rewrite::result_uris(self.method, result, p)));
                let result = mapped.as_deref().unwrap_or(result);
                ctx.outlet.answer(&write::response_parts(&ctx.id, result));
            }
            Outcome::Error(error) => {
                let mapped = self.map(|prefix| {
                    rewrite::error_data(error, prefix, |original| self.exposed_name(original))
                });
                let error = mapped.as_deref().unwrap_or(error);
                tracing::debug!(error, "upstream refused the request");
                let mut out = Vec::with_capacity(64 + error.len());
                write::raw_error_response(&mut out, &ctx.id, error);
                ctx.outlet.answer(&[&out]);
            }
            Outcome::Failed(err) => {
                tracing::debug!(error = %err, "request failed");
                let mut out = Vec::new();
                write::error_response(&mut out, Some(&ctx.id), &error_object(&err));
                ctx.outlet.answer(&[&out]);
            }
        }
    }

    fn session(&self) -> u64 {
        self.ctx.as_ref().map_or(0, Context::session_id)
    }

    fn is(&self, session: u64, host_id: &str) -> bool {
        self.ctx
            .as_ref()
            .is_some_and(|c| c.session_id() == session && canonical_id(&c.id) == host_id)
    }
}

impl Inflight {
    /// Runs `f` with the upstream's URI prefix.
    fn map(&self, f: impl FnOnce(&str) -> Option<String>) -> Option<String> {
        let catalog = self.hub.catalog();
        f(&catalog.defs()[self.upstream].uri_prefix)
    }

    /// The name the host knows for the upstream's `original` tool or prompt.
    fn exposed_name(&self, original: &str) -> Option<String> {
        let kind = match self.method {
            "tools/call" => Kind::Tools,
            "prompts/get" => Kind::Prompts,
            _ => return None,
        };
        let catalog = self.hub.catalog();
        catalog
            .exposed_name(kind, self.upstream, original)
            .map(str::to_owned)
    }
}

impl Drop for Inflight {
    fn drop(&mut self) {
        // Dropped unfinished: the host cancelled it, and expects no answer.
        if let Some(ctx) = self.ctx.take() {
            ctx.outlet.unanswered();
        }
    }
}
