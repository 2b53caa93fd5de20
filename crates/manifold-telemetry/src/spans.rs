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

/// The span of one host request. `parent`: the trace context the host sent, if any.
pub fn server(
    method: &str,
    session: u64,
    id: &str,
    version: &str,
    transport: HostTransport,
    team: &str,
    parent: Option<&Carrier>,
) -> Span {
    let span = tracing::debug_span!(
        target: SPAN_TARGET,
        "mcp.server",
        otel.name = method,
        otel.kind = "server",
        otel.status_code = Empty,
        otel.status_description = Empty,
        mcp.method.name = method,
        mcp.session.id = session,
        mcp.protocol.version = version,
        jsonrpc.request.id = id,
        network.transport = network_transport(transport.label()),
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        manifold.upstream = Empty,
        manifold.team = team,
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if let Some(parent) = parent.filter(|_| trace::active()) {
        let _ = span.set_parent(parent.extract());
    }
    span
}

/// What a forwarded request names, for span names and attributes.
#[derive(Debug, Clone, Copy)]
pub enum Subject<'a> {
    Tool(&'a str),
    Prompt(&'a str),
    Resource(&'a str),
    None,
}

/// Records on a server span where its request was routed.
pub fn routed(span: &Span, method: &str, subject: Subject<'_>, upstream: &str) {
    if span.is_disabled() {
        return;
    }
    describe(span, method, subject);
    span.record("manifold.upstream", upstream);
}

fn describe(span: &Span, method: &str, subject: Subject<'_>) {
    match subject {
        Subject::Tool(name) => {
            span.record("otel.name", format!("{method} {name}"));
            span.record("gen_ai.tool.name", name);
            span.record("gen_ai.operation.name", "execute_tool");
        }
        Subject::Prompt(name) => {
            span.record("otel.name", format!("{method} {name}"));
            span.record("gen_ai.prompt.name", name);
        }
        Subject::Resource(uri) => {
            span.record("mcp.resource.uri", uri);
        }
        Subject::None => {}
    }
}

/// The span of one upstream hop, a child of the host request's span.
pub fn client(
    parent: &Span,
    method: &str,
    subject: Subject<'_>,
    upstream: &str,
    id: u64,
    transport: &str,
) -> Span {
    let span = tracing::debug_span!(
        target: SPAN_TARGET,
        parent: parent,
        "mcp.client",
        otel.name = method,
        otel.kind = "client",
        otel.status_code = Empty,
        otel.status_description = Empty,
        mcp.method.name = method,
        jsonrpc.request.id = id,
        network.transport = network_transport(transport),
        gen_ai.operation.name = Empty,
        gen_ai.tool.name = Empty,
        gen_ai.prompt.name = Empty,
        mcp.resource.uri = Empty,
        manifold.upstream = upstream,
        error.type = Empty,
        rpc.response.status_code = Empty,
    );
    if !span.is_disabled() {
        describe(&span, method, subject);
    }
    span
}

/// Records how the request ended: an error status with `error.type` (the JSON-RPC code when
/// there is one, as the conventions ask, else the outcome) and the code.
pub fn ended(span: &Span, outcome: Outcome, code: Option<i64>, message: Option<&str>) {
    if span.is_disabled() || !outcome.is_error() {
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
    if let Some(message) = message {
        span.record("otel.status_description", message);
    }
}

/// The trace context to send with a request made under `span`, when traces are exported and
/// the span is sampled.
pub fn context_of(span: &Span) -> Option<Carrier> {
    if !trace::active() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    if !cx.span().span_context().is_valid() {
        return None;
    }
    Some(Carrier::inject(&cx)).filter(|c| !c.is_empty())
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
