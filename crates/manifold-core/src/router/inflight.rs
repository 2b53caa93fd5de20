//! A request forwarded to an upstream, from the host's side: how its progress and its answer
//! reach the host, with what the upstream named mapped back to what the host knows.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use manifold_catalog::{rewrite, Kind};
use manifold_protocol::envelope::canonical_id;
use manifold_protocol::{write, RawObject};
use manifold_telemetry::spans::{self, ClientDone, Subject};
use manifold_telemetry::{metrics, OpLabels, Outcome as Ended};
use manifold_upstream::{CountedGuard, Exchange, Finish, Hub, RequestKey, ServerRequest};
use tokio::sync::oneshot;

use super::ask::{ask_host, over, refuse};
use super::input::gather;
use super::input::park::{Park, Parked, Settled};
use crate::context::Context;
use crate::error::RouteError;
use crate::outlet::Outlet;
use crate::stateless;
use crate::tasks::{self, Tasks};

/// The host side of one forwarded request.
pub(super) struct Inflight {
    /// The host request it answers. Locked to take it or to read it, never while the host is
    /// written to.
    pub host: Mutex<HostSide>,
    /// For a stateless host's request: where it parks if a session-era upstream asks its
    /// client something (see `input/park.rs`).
    pub parking: Option<Arc<Parked>>,
    /// For a stateless request that asked for log messages: it hears them while in flight.
    #[allow(
        dead_code,
        reason = "held for its drop: the request stops hearing log messages with it"
    )]
    pub logging: Option<crate::fanout::Logging>,
    /// For a session-era host's request to a stateless upstream: how to send it again if the
    /// upstream answers `input_required` (see `input/gather.rs`).
    pub retry: Option<gather::Retry>,
    pub hub: Arc<Hub>,
    pub upstream: usize,
    pub method: &'static str,
    /// The task table, when the answer may carry a task.
    pub tasks: Option<Arc<Tasks>>,
    pub hop: Hop,
    /// The cache's copy of the answer, when it may keep it.
    pub fill: Option<Fill>,
    /// For a method of an extension that passes through: who serves it, or who is asked next
    /// (see `extension.rs`).
    pub extension: Option<super::extension::Fallback>,
}

/// Where the host side of a forwarded request is.
#[allow(
    clippy::large_enum_variant,
    reason = "lives inside the boxed exchange, never moved on its own; boxing the context would cost an allocation per request"
)]
pub(super) enum HostSide {
    /// Waiting for the upstream's answer.
    Waiting(Context),
    /// A stateless host was asked for input (see `input/park.rs`): the park holds the host request
    /// that stands for this one now (the original, or the retry that took its place).
    Parked(Arc<Park>),
    /// Answered, or given up.
    Done,
}

impl HostSide {
    /// The host request, if it is still this one's to answer, and the park it was in.
    fn take(&mut self) -> (Option<Context>, Option<Arc<Park>>) {
        match std::mem::replace(self, HostSide::Done) {
            HostSide::Waiting(ctx) => (Some(ctx), None),
            HostSide::Parked(park) => (None, Some(park)),
            HostSide::Done => (None, None),
        }
    }
}

/// Where a cache fill gets the answer the host got: `Some(result)` when it may be kept,
/// `None` when not (a tool error, or the upstream sent anything else for the request: progress,
/// a request of its own, a related message); an error or a failure drops the sender.
pub(super) struct Fill {
    sender: oneshot::Sender<Option<Box<str>>>,
    tainted: AtomicBool,
}

impl Fill {
    pub(super) fn new(sender: oneshot::Sender<Option<Box<str>>>) -> Self {
        Self {
            sender,
            tainted: AtomicBool::new(false),
        }
    }

    fn taint(&self) {
        self.tainted.store(true, Ordering::Relaxed);
    }

    fn result(self, result: &str, tool_error: bool) {
        let keep = !tool_error && !self.tainted.load(Ordering::Relaxed);
        let _ = self.sender.send(keep.then(|| result.into()));
    }
}

/// The upstream hop, for its span and its duration.
pub(super) struct Hop {
    /// Ends when the request does.
    pub span: tracing::Span,
    pub started: Instant,
    pub upstream: Arc<str>,
    /// The tool's name as hosts see it, for a tool call.
    pub tool: Option<Arc<str>>,
    /// The tool or prompt name, or the URI, as the upstream knows it.
    pub original: Option<Arc<str>>,
    /// The upstream request's id.
    pub id: u64,
    /// The upstream's transport: `stdio`, `http` or `sse`.
    pub transport: &'static str,
}

impl Hop {
    /// Records the hop's duration and, on its span and on the host request, how it ended.
    /// Called once the answer has gone to the host.
    pub(super) fn ended(
        &self,
        ctx: &Context,
        method: &'static str,
        outcome: Ended,
        code: Option<i64>,
    ) {
        ctx.ended(outcome, code);
        spans::client_done(
            &self.span,
            &ClientDone {
                method,
                subject: Subject::of(method, self.original.as_deref()),
                upstream: &self.upstream,
                id: self.id,
                transport: self.transport,
                outcome,
                code,
            },
        );
        let labels = OpLabels {
            method,
            tool: self.tool.clone(),
            upstream: Some(Arc::clone(&self.upstream)),
            team: Arc::clone(ctx.principal()),
            transport: self.transport,
            outcome,
        };
        metrics().client_op(labels, self.started.elapsed());
    }
}

impl Exchange for Inflight {
    fn progress(&self, params: &str) {
        if let Some(fill) = &self.fill {
            fill.taint();
        }
        let mut line = Vec::with_capacity(params.len() + 64);
        write::notification(&mut line, "notifications/progress", Some(params));
        if let Some(outlet) = self.outlet() {
            crate::outlet::check_no_guard("progress");
            outlet.notify(&[&line]);
        }
    }

    fn finish(mut self: Box<Self>, outcome: Finish<'_>) {
        let (taken, parked) = self.host.get_mut().map_or((None, None), HostSide::take);
        let ctx = match (taken, &parked) {
            (Some(ctx), _) => ctx,
            (None, Some(park)) => match park.claim(|| self.settled(&outcome)) {
                Some(ctx) => ctx,
                // Kept for the host's retry.
                None => return,
            },
            (None, None) => return,
        };
        if let (Some(park), Some(parking)) = (&parked, &self.parking) {
            parking.close(park);
        }
        let _entered = self.hop.span.enter();
        // An extension's method another upstream may serve goes there instead.
        let fallback = self.extension.take();
        let Some(ctx) = super::extension::settle(fallback, &self.hop, self.method, ctx, &outcome)
        else {
            return;
        };
        if let (Finish::Result(result), Some(_)) = (&outcome, &self.retry) {
            if stateless::is_input_required(result) {
                // A session-era host is asked the questions, then the request goes again.
                self.hop.ended(&ctx, self.method, Ended::Ok, None);
                if let Some(retry) = self.retry.take() {
                    gather::ask(ctx, retry, result);
                }
                return;
            }
        }
        if let Finish::Result(result) = &outcome {
            if let Err(e) = self.verify(result) {
                // Withheld, and never kept: the fill's sender goes with it.
                self.fill.take();
                let classified = e.classify(ctx.era());
                ctx.fail(&e);
                return self.hop.ended(
                    &ctx,
                    self.method,
                    classified.outcome,
                    Some(classified.code),
                );
            }
        }
        let (ended, code) = match outcome {
            Finish::Result(result) => {
                let tasked = self
                    .tasks
                    .as_ref()
                    .and_then(|t| self.task_result(t, &ctx, result));
                let result = tasked.as_deref().unwrap_or(result);
                // Most results name no URI: only those are looked at closely.
                let method = match self.method {
                    "tasks/result" => "tools/call",
                    m => m,
                };
                let mapped = rewrite::may_name_uris(result)
                    .then(|| self.map(|p| rewrite::result_uris(method, result, p)))
                    .flatten();
                let result = mapped.as_deref().unwrap_or(result);
                // A stateless upstream's own requestState goes to a stateless host sealed,
                // bound to the caller and the request like Manifold's own.
                let sealed = match &self.parking {
                    Some(parking) if stateless::is_input_required(result) => {
                        parking.seal_upstream_state(&ctx, result)
                    }
                    _ => None,
                };
                let result = sealed.as_deref().unwrap_or(result);
                let stateless = ctx
                    .is_stateless()
                    .then(|| stateless::complete(result, read_hints(self.method, &ctx)));
                let answer = stateless.as_deref().unwrap_or(result);
                crate::outlet::check_no_guard("an answer");
                ctx.outlet.answer(&write::response_parts(&ctx.id, answer));
                let tool_error = self.method == "tools/call" && is_tool_error(result);
                if let Some(fill) = self.fill.take() {
                    fill.result(result, tool_error);
                }
                if tool_error {
                    (Ended::ToolError, None)
                } else {
                    (Ended::Ok, None)
                }
            }
            Finish::Error(error) => {
                let mapped = self.map(|prefix| {
                    rewrite::error_data(error, prefix, |original| self.exposed_name(original))
                });
                let code = ctx.fail_upstream(mapped.as_deref().unwrap_or(error));
                (Ended::ProtocolError, code)
            }
            Finish::Failed(err) => {
                let err = RouteError::Upstream(err);
                let classified = err.classify(ctx.era());
                ctx.fail(&err);
                (classified.outcome, Some(classified.code))
            }
        };
        self.hop.ended(&ctx, self.method, ended, code);
    }

    fn session(&self) -> u64 {
        self.with_ctx(Context::session_id).unwrap_or(0)
    }

    fn is(&self, session: u64, host_id: &str) -> bool {
        self.with_ctx(|c| c.session_id() == session && canonical_id(&c.id) == host_id)
            .unwrap_or(false)
    }

    /// A stateless host's request may park and be taken up by the host's retry, a request
    /// of another id: it names no key. Any other stands for one host request throughout.
    fn key(&self) -> Option<RequestKey> {
        if self.parking.is_some() {
            return None;
        }
        self.with_ctx(|c| RequestKey::new(c.session_id(), &canonical_id(&c.id)))
    }

    /// Sends the upstream's request to this request's host, on the same way back (over
    /// Streamable HTTP, the POST's event stream), under an id of Manifold's; the host's
    /// answer goes back to the upstream (see `Router::host_answer`).
    fn server_request(&self, request: ServerRequest) {
        if let Some(parking) = &self.parking {
            // A stateless host: asked through input_required (see input/park.rs).
            if let Some(fill) = &self.fill {
                fill.taint();
            }
            let (park, first) = {
                let mut host = lock(&self.host);
                let (park, first) = match host.take() {
                    (_, Some(park)) => (park, None),
                    (Some(ctx), None) => (parking.open(&ctx), Some(ctx)),
                    (None, None) => return refuse(request, over()),
                };
                *host = HostSide::Parked(Arc::clone(&park));
                (park, first)
            };
            return parking.ask(&park, first, request);
        }
        let asked = match &*lock(&self.host) {
            HostSide::Waiting(ctx) => Some((ctx.session.clone(), Arc::clone(&ctx.outlet))),
            _ => None,
        };
        let Some((session, outlet)) = asked else {
            return refuse(request, over());
        };
        let Some(session) = session else {
            let method = request.method.clone();
            return refuse(request, RouteError::NoSessionToAsk(method));
        };
        let _entered = self.hop.span.enter();
        if let Some(fill) = &self.fill {
            fill.taint();
        }
        ask_host(&session, &*outlet, request);
    }

    fn related(&self, line: &[u8]) {
        if let Some(fill) = &self.fill {
            fill.taint();
        }
        if self.parking.is_some() {
            // notifications/elicitation/complete: the stateless era has none (the host learns
            // the outcome by retrying).
            return;
        }
        if let Some(outlet) = self.outlet() {
            crate::outlet::check_no_guard("a related message");
            outlet.notify(&[line]);
        }
    }
}

/// Locks a request's host side with a counted guard: writing to the host while it is alive
/// fails the debug builds' check (see `manifold_upstream::guards_held`).
fn lock<T>(m: &Mutex<T>) -> CountedGuard<'_, T> {
    CountedGuard::new(m.lock().unwrap_or_else(std::sync::PoisonError::into_inner))
}

impl Inflight {
    /// Runs `f` with the host request this stands for: the original, or for a parked one the
    /// retry that took its place. `f` runs under a lock: it must not write to the host.
    fn with_ctx<R>(&self, f: impl FnOnce(&Context) -> R) -> Option<R> {
        let parked = match &*lock(&self.host) {
            HostSide::Waiting(ctx) => return Some(f(ctx)),
            HostSide::Parked(park) => Arc::clone(park),
            HostSide::Done => return None,
        };
        parked.with_ctx(f)
    }

    /// Where what belongs with the request goes, taken out so that nothing is locked while
    /// the host is written to.
    fn outlet(&self) -> Option<Arc<dyn Outlet>> {
        self.with_ctx(|ctx| Arc::clone(&ctx.outlet))
    }

    /// How the request ended, kept for the retry of a parked request (names and URIs mapped
    /// as the host knows them).
    fn settled(&self, outcome: &Finish<'_>) -> Settled {
        match outcome {
            Finish::Result(result) => {
                let method = self.method;
                let mapped = self.map(|p| rewrite::result_uris(method, result, p));
                Settled::Result(mapped.unwrap_or_else(|| (*result).to_owned()))
            }
            Finish::Error(error) => {
                let mapped = self.map(|prefix| {
                    rewrite::error_data(error, prefix, |original| self.exposed_name(original))
                });
                Settled::Error(mapped.unwrap_or_else(|| (*error).to_owned()))
            }
            Finish::Failed(err) => Settled::Failed(RouteError::Upstream(err.clone())),
        }
    }

    /// A result that carries task ids, with them exposed (and a new task recorded as the
    /// session's). `None` when there is nothing to change.
    fn task_result(&self, tasks: &Tasks, ctx: &Context, result: &str) -> Option<String> {
        manifold_protocol::needle::TASK_ID.find(result.as_bytes())?;
        self.map(|prefix| match self.method {
            "tools/call" => {
                tasks
                    .created(result, prefix, ctx.task_owner())
                    .map(|(created, task)| {
                        // A session shared by replicas: the others learn the task is its.
                        if let Some(session) = &ctx.session {
                            if let Some(relay) = session.relay() {
                                relay.task_created(session, &task);
                            }
                        }
                        created
                    })
                    .map(|created| match ctx.is_stateless() {
                        // The tasks extension's shape, for a stateless host.
                        true => tasks::extension_created(&created).unwrap_or(created),
                        false => created,
                    })
            }
            "tasks/get" | "tasks/cancel" => tasks::expose_id(result, prefix),
            "tasks/result" => tasks::expose_related(result, prefix),
            _ => None,
        })
    }

    /// A read of a skill file checked against its skill entry (see `verify.rs`); any other
    /// answer passes.
    fn verify(&self, result: &str) -> Result<(), RouteError> {
        let (true, Some(original)) = (self.method == "resources/read", &self.hop.original) else {
            return Ok(());
        };
        super::verify::read(&self.hub.catalog(), self.upstream, original, result)
    }

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
        let (taken, parked) = self.host.get_mut().map_or((None, None), HostSide::take);
        let taken = match (taken, &parked) {
            (Some(ctx), _) => Some(ctx),
            (None, Some(park)) => park.claim(|| {
                Settled::Failed(RouteError::Abandoned("the request was cancelled".into()))
            }),
            (None, None) => None,
        };
        if let (Some(park), Some(parking)) = (&parked, &self.parking) {
            parking.close(park);
        }
        if let Some(ctx) = taken {
            self.hop.ended(&ctx, self.method, Ended::Cancelled, None);
            ctx.outlet.unanswered();
        }
    }
}

/// The caching hints Manifold adds to what a stateless host gets back for `method`, where the
/// upstream gave none.
fn read_hints(method: &str, ctx: &Context) -> &'static [(&'static str, &'static str)] {
    match method {
        "resources/read" | "skills/get" | "resources/directory/read" => {
            stateless::read_hints(ctx.caller.team.is_some())
        }
        _ => &[],
    }
}

/// Whether a tool result says the tool failed (`"isError": true` among its members). Results
/// up to 64 KiB are read whole; in a larger one only the first and last 256 bytes are looked
/// at, where every SDK puts the flag, so that a large result costs no full scan.
fn is_tool_error(result: &str) -> bool {
    const WHOLE: usize = 64 * 1024;
    const WINDOW: usize = 256;
    let bytes = result.as_bytes();
    let found = if bytes.len() <= WHOLE {
        manifold_protocol::needle::IS_ERROR.find(bytes).is_some()
    } else {
        let tail = &bytes[bytes.len() - WINDOW..];
        let head = &bytes[..WINDOW];
        let flagged = |w: &[u8]| {
            manifold_protocol::needle::IS_ERROR
                .find(w)
                .is_some_and(|i| flag_is_true(&w[i + 9..]))
        };
        return flagged(tail) || flagged(head);
    };
    found
        && RawObject::parse(result)
            .ok()
            .and_then(|o| o.get("isError").map(|v| v == "true"))
            .unwrap_or(false)
}

/// Whether what follows `"isError"` is `: true`.
fn flag_is_true(rest: &[u8]) -> bool {
    let rest = rest.trim_ascii_start();
    rest.strip_prefix(b":")
        .is_some_and(|r| r.trim_ascii_start().starts_with(b"true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tool_errors_are_told_by_their_flag_at_the_top_level() {
        assert!(is_tool_error(r#"{"content":[],"isError":true}"#));
        assert!(is_tool_error(r#"{"isError" : true,"content":[]}"#));
        assert!(!is_tool_error(r#"{"content":[],"isError":false}"#));
        assert!(!is_tool_error(
            r#"{"content":[{"type":"text","text":"\"isError\":true"}]}"#
        ));
        assert!(!is_tool_error(r#"{"content":[{"isError":true}]}"#));
        let big = "x".repeat(100_000);
        let flagged = format!(r#"{{"content":[{{"type":"text","text":"{big}"}}],"isError":true}}"#);
        assert!(is_tool_error(&flagged));
        let clean = format!(r#"{{"content":[{{"type":"text","text":"{big}"}}]}}"#);
        assert!(!is_tool_error(&clean));
    }
}
