//! The two spans of a request, with the attributes of the OpenTelemetry semantic conventions
//! for MCP: a server span for the host's request and a client span for each upstream hop.
//! They are `debug` spans of the target [`SPAN_TARGET`]: free when neither logs at debug level
//! nor trace export wants them, and the only spans exported when it does.

use opentelemetry::trace::TraceContextExt as _;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::{HostTransport, Outcome};
use crate::names::SPAN_TARGET;
use crate::trace::{self, Carrier};

/// `network.transport`: a pipe for stdio, TCP for both HTTP transports.
fn network_transport(transport: &str) -> &'static str {
    match transport {
        "stdio" => "pipe",
        _ => "tcp",
    }
}

/// The span of one host request; `parent` is the trace context the host sent, if any. Its
/// attributes are recorded when it ends ([`server_done`]), after the answer has gone out, so
/// that the request waits on as little tracing work as possible.
pub fn server(parent: Option<&Carrier>) -> Span {
    let span = tracing::debug_span!(
        target: SPAN_TARGET,
        "mcp.server",
        otel.name = Empty,
        otel.kind = "server",
        otel.status_code = Empty,
        mcp.method.name = Empty,
        mcp.session.id = Empty,
        mcp.protocol.version = Empty,
        jsonrpc.request.id = Empty,
        network.transport = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        manifold.upstream = Empty,
        manifold.team = Empty,
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if let Some(parent) = parent.filter(|_| trace::active()) {
        let _ = span.set_parent(parent.extract());
    }
    span
}

/// What a request named, for span names and attributes.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
    None,
}

impl<'a> Subject<'a> {
    /// The subject of a `method` request that named `name` (a tool, a prompt or a URI).
    pub fn of(method: &str, name: Option<&'a str>) -> Self {
        match (method, name) {
            ("tools/call", Some(n)) => Self::Tool(n),
            ("prompts/get", Some(n)) => Self::Prompt(n),
            ("resources/read", Some(n)) => Self::Resource(n),
            _ => Self::None,
        }
    }
}

/// How a host request went, for its span.
pub struct ServerDone<'a> {
    pub method: &'a str,
    pub subject: Subject<'a>,
    pub session: u64,
    pub id: &'a str,
    pub version: &'a str,
    pub transport: HostTransport,
    pub team: &'a str,
    pub upstream: Option<&'a str>,
    pub outcome: Outcome,
    pub code: Option<i64>,
}

/// Records a host request's attributes and status on its span, which then ends when dropped.
pub fn server_done(span: &Span, done: &ServerDone<'_>) {
    if span.is_disabled() {
        return;
    }
    describe(span, done.method, done.subject);
    span.record("mcp.session.id", done.session);
    span.record("mcp.protocol.version", done.version);
    span.record("jsonrpc.request.id", done.id);
    span.record(
        "network.transport",
        network_transport(done.transport.label()),
    );
    span.record("manifold.team", done.team);
    if let Some(upstream) = done.upstream {
        span.record("manifold.upstream", upstream);
    }
    status(span, done.outcome, done.code);
}

fn describe(span: &Span, method: &str, subject: Subject<'_>) {
    span.record("mcp.method.name", method);
    let name = match subject {
        Subject::Tool(name) => {
            span.record("gen_ai.tool.name", name);
            span.record("gen_ai.operation.name", "execute_tool");
            format!("{method} {name}")
        }
        Subject::Prompt(name) => {
            span.record("gen_ai.prompt.name", name);
            format!("{method} {name}")
        }
        Subject::Resource(uri) => {
            span.record("mcp.resource.uri", uri);
            method.to_owned()
        }
        Subject::None => method.to_owned(),
    };
    // An exported span has started by now (its context went upstream); a started span is
    // renamed through its context, not by recording `otel.name`.
    if trace::active() {
        span.context().span().update_name(name);
    } else {
        span.record("otel.name", name);
    }
}

/// An error status with `error.type`: the JSON-RPC code when there is one, as the
/// conventions ask, else the outcome.
fn status(span: &Span, outcome: Outcome, code: Option<i64>) {
    if !outcome.is_error() {
        return;
    }
    span.record("otel.status_code", "error");
    match code {
        Some(code) => {
            span.record("error.type", code.to_string());
            span.record("rpc.response.status_code", code.to_string());
        }
        None => {
            span.record("error.type", outcome.label());
        }
    }
}

/// The span of one upstream hop, a child of the host request's span; its attributes are
/// recorded when it ends ([`client_done`]).
pub fn client(parent: &Span) -> Span {
    tracing::debug_span!(
        target: SPAN_TARGET,
        parent: parent,
        "mcp.client",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        mcp.method.name = Empty,
        jsonrpc.request.id = Empty,
        network.transport = Empty,
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        manifold.upstream = Empty,
        error.type = Empty,
        rpc.response.status_code = Empty,
    )
}

/// How an upstream hop went, for its span.
pub struct ClientDone<'a> {
    pub method: &'a str,
    /// As the upstream knows it.
    pub subject: Subject<'a>,
    pub upstream: &'a str,
    /// The upstream request's id.
    pub id: u64,
    /// The upstream's transport: `stdio`, `http` or `sse`.
    pub transport: &'a str,
    pub outcome: Outcome,
    pub code: Option<i64>,
}

/// Records an upstream hop's attributes and status on its span.
pub fn client_done(span: &Span, done: &ClientDone<'_>) {
    if span.is_disabled() {
        return;
    }
    describe(span, done.method, done.subject);
    span.record("jsonrpc.request.id", done.id);
    span.record("network.transport", network_transport(done.transport));
    span.record("manifold.upstream", done.upstream);
    status(span, done.outcome, done.code);
}

/// The trace context to send with a request made under `span` (`traceparent`, and
/// `tracestate` when there is one), when traces are exported. Written directly from the
/// span's context: the same text the W3C propagator writes, without its generic machinery.
pub fn context_of(span: &Span) -> Option<Carrier> {
    if !trace::active() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    if !sc.is_valid() {
        return None;
    }
    let mut carrier = Carrier::default();
    carrier.set(
        "traceparent",
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        ),
    );
    let state = sc.trace_state().header();
    if !state.is_empty() {
        carrier.set("tracestate", state);
    }
    Some(carrier)
}

/// The trace and span ids of the current span, for a log line (`None` outside any exported
/// span).
pub fn current_ids() -> Option<(String, String)> {
    if !trace::active() {
        return None;
    }
    let span = Span::current();
    if span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| (sc.trace_id().to_string(), sc.span_id().to_string()))
}
