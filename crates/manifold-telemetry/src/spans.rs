//! The two spans of a request, with the attributes of the OpenTelemetry semantic conventions
//! for MCP: a server span for the host's request and a client span for each upstream hop.
//! They are `debug` spans of the target [`SPAN_TARGET`]: free when neither logs at debug level
//! nor trace export wants them, and the only spans exported when it does.

use opentelemetry::trace::{Status, TraceContextExt as _};
use opentelemetry::KeyValue;
use tracing::field::Empty;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt as _;

use crate::metrics::{HostTransport, Outcome};
use crate::names::SPAN_TARGET;
use crate::trace::{self, Carrier};

/// `network.transport`: a pipe for stdio, TCP for both HTTP transports, in-process for an
/// OpenAPI upstream (its own HTTP requests are client spans of their own).
fn network_transport(transport: &str) -> &'static str {
    match transport {
        "stdio" => "pipe",
        "openapi" => "inproc",
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
        manifold.cache = Empty,
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
    /// One of the protocol's version constants.
    pub version: &'static str,
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
    let mut a = Attrs::new(done.method, done.subject);
    a.push(
        "mcp.session.id",
        Val::Int(i64::try_from(done.session).unwrap_or(i64::MAX)),
    );
    a.push("mcp.protocol.version", Val::Static(done.version));
    a.push("jsonrpc.request.id", Val::Str(done.id.to_owned()));
    a.push(
        "network.transport",
        Val::Static(network_transport(done.transport.label())),
    );
    a.push("manifold.team", Val::Str(done.team.to_owned()));
    if let Some(upstream) = done.upstream {
        a.push("manifold.upstream", Val::Str(upstream.to_owned()));
    }
    a.status(done.outcome, done.code);
    a.apply(span);
}

/// A span attribute's value.
enum Val {
    Str(String),
    Static(&'static str),
    Int(i64),
}

/// What a span gets when its request ends: its name, attributes and status.
struct Attrs {
    name: String,
    list: Vec<(&'static str, Val)>,
    /// `error.type`, when the request failed.
    error: Option<String>,
}

impl Attrs {
    fn new(method: &str, subject: Subject<'_>) -> Self {
        let mut a = Self {
            name: method.to_owned(),
            list: Vec::with_capacity(12),
            error: None,
        };
        a.push("mcp.method.name", Val::Str(method.to_owned()));
        match subject {
            Subject::Tool(name) => {
                a.name = format!("{method} {name}");
                a.push("gen_ai.tool.name", Val::Str(name.to_owned()));
                a.push("gen_ai.operation.name", Val::Static("execute_tool"));
            }
            Subject::Prompt(name) => {
                a.name = format!("{method} {name}");
                a.push("gen_ai.prompt.name", Val::Str(name.to_owned()));
            }
            Subject::Resource(uri) => a.push("mcp.resource.uri", Val::Str(uri.to_owned())),
            Subject::None => {}
        }
        a
    }

    fn push(&mut self, key: &'static str, value: Val) {
        self.list.push((key, value));
    }

    /// An error status with `error.type`: the JSON-RPC code when there is one, as the
    /// conventions ask, else the outcome.
    fn status(&mut self, outcome: Outcome, code: Option<i64>) {
        if !outcome.is_error() {
            return;
        }
        let error = match code {
            Some(code) => {
                self.push("rpc.response.status_code", Val::Str(code.to_string()));
                code.to_string()
            }
            None => outcome.label().to_owned(),
        };
        self.push("error.type", Val::Str(error.clone()));
        self.error = Some(error);
    }

    /// Sets it all on the span: straight on the OpenTelemetry span when traces are exported
    /// (it has started by now, its context having gone upstream; one call instead of a
    /// `record` per attribute through the subscriber), else as the `tracing` fields that
    /// debug logs show.
    fn apply(self, span: &Span) {
        if trace::active() {
            let cx = span.context();
            let otel = cx.span();
            otel.update_name(self.name);
            otel.set_attributes(self.list.into_iter().map(|(k, v)| match v {
                Val::Str(s) => KeyValue::new(k, s),
                Val::Static(s) => KeyValue::new(k, s),
                Val::Int(n) => KeyValue::new(k, n),
            }));
            if let Some(error) = self.error {
                otel.set_status(Status::error(error));
            }
            return;
        }
        span.record("otel.name", self.name);
        for (k, v) in &self.list {
            match v {
                Val::Str(s) => span.record(*k, s.as_str()),
                Val::Static(s) => span.record(*k, *s),
                Val::Int(n) => span.record(*k, *n),
            };
        }
        if self.error.is_some() {
            span.record("otel.status_code", "error");
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
    let mut a = Attrs::new(done.method, done.subject);
    a.push(
        "jsonrpc.request.id",
        Val::Int(i64::try_from(done.id).unwrap_or(i64::MAX)),
    );
    a.push(
        "network.transport",
        Val::Static(network_transport(done.transport)),
    );
    a.push("manifold.upstream", Val::Str(done.upstream.to_owned()));
    a.status(done.outcome, done.code);
    a.apply(span);
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

/// The trace id of a request's span, when traces are exported (`None` otherwise).
pub fn trace_id(span: &Span) -> Option<crate::recent::TraceId> {
    if !trace::active() || span.is_disabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid()
        .then(|| crate::recent::TraceId(sc.trace_id().to_bytes()))
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

/// The span of one HTTP request an OpenAPI upstream makes for a tool call: a client span whose
/// parent is the trace context Manifold sent with the call (the upstream hop's span), if any.
/// Its name and attributes are set when the request ends ([`http_done`]).
pub fn http_client(parent: Option<&Carrier>) -> Span {
    let span = tracing::debug_span!(
        target: SPAN_TARGET,
        parent: None,
        "http.client",
        otel.name = Empty,
        otel.kind = "client",
        otel.status_code = Empty,
        http.request.method = Empty,
        url.template = Empty,
        server.address = Empty,
        server.port = Empty,
        http.response.status_code = Empty,
        error.type = Empty,
    );
    if let Some(parent) = parent.filter(|_| trace::active()) {
        let _ = span.set_parent(parent.extract());
    }
    span
}

/// How an HTTP request of an OpenAPI upstream went, for its span. Only the route template is
/// named: the filled path, the query and header values may hold identifiers or secrets of the
/// caller, so none of them is ever an attribute.
pub struct HttpDone<'a> {
    /// Upper case, as sent.
    pub method: &'a str,
    /// The path template of the operation (`/pets/{petId}`).
    pub template: &'a str,
    pub address: &'a str,
    pub port: Option<u16>,
    /// The answer's status; `None` when there was no answer.
    pub status: Option<u16>,
    /// Why the request failed: the status code for 4xx and 5xx answers, else what went
    /// wrong (`timeout`, `connect`, ...).
    pub error: Option<&'a str>,
}

/// Records an HTTP request's name, attributes and status on its span.
pub fn http_done(span: &Span, done: &HttpDone<'_>) {
    if span.is_disabled() {
        return;
    }
    let mut a = Attrs {
        name: format!("{} {}", done.method, done.template),
        list: Vec::with_capacity(6),
        error: None,
    };
    a.push("http.request.method", Val::Str(done.method.to_owned()));
    a.push("url.template", Val::Str(done.template.to_owned()));
    a.push("server.address", Val::Str(done.address.to_owned()));
    if let Some(port) = done.port {
        a.push("server.port", Val::Int(i64::from(port)));
    }
    if let Some(status) = done.status {
        a.push("http.response.status_code", Val::Int(i64::from(status)));
    }
    if let Some(error) = done.error {
        a.push("error.type", Val::Str(error.to_owned()));
        a.error = Some(error.to_owned());
    }
    a.apply(span);
}
