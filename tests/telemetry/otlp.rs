//! Integration tests: the real `manifold` binary exporting traces over OTLP to a receiver
//! built here from the OTLP protobuf definitions (gRPC and HTTP/protobuf), with the trace
//! context it passes on checked where the upstream fixture receives it. Also: with every log
//! level on and an exporter that cannot reach anything, stdout carries only JSON-RPC.
//! Everything listens on 127.0.0.1 only, and every wait is bounded.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::trace_service_server::{
    TraceService, TraceServiceServer,
};
use opentelemetry_proto::tonic::collector::trace::v1::{
    ExportTraceServiceRequest, ExportTraceServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::any_value;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::status::StatusCode as SpanStatus;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message as _;
use serde_json::{json, Value};

use manifold_testkit::http::{messages_of, FixtureHttp, Server};
use manifold_testkit::process::*;

#[path = "otlp/openapi.rs"]
mod openapi;

// ---------------------------------------------------------------------------------------
// The OTLP receiver.

/// A span as received, with the `service.name` of the resource it came with and how it came.
#[derive(Clone, Debug)]
struct Got {
    service: String,
    via: &'static str,
    span: Span,
}

/// What the receiver has been sent, over either protocol.
#[derive(Clone, Default)]
struct Collected {
    spans: Arc<Mutex<Vec<Got>>>,
    /// The paths of the HTTP requests.
    paths: Arc<Mutex<Vec<String>>>,
}

impl Collected {
    fn keep(&self, request: ExportTraceServiceRequest, via: &'static str) {
        let mut spans = self.spans.lock().unwrap();
        for rs in request.resource_spans {
            let service = rs
                .resource
                .iter()
                .flat_map(|r| &r.attributes)
                .find(|kv| kv.key == "service.name")
                .and_then(|kv| value_text(kv.value.as_ref()?.value.as_ref()?))
                .unwrap_or_default();
            for ss in rs.scope_spans {
                for span in ss.spans {
                    spans.push(Got {
                        service: service.clone(),
                        via,
                        span,
                    });
                }
            }
        }
    }
}

#[tonic::async_trait]
impl TraceService for Collected {
    async fn export(
        &self,
        request: tonic::Request<ExportTraceServiceRequest>,
    ) -> Result<tonic::Response<ExportTraceServiceResponse>, tonic::Status> {
        self.keep(request.into_inner(), "grpc");
        Ok(tonic::Response::new(ExportTraceServiceResponse::default()))
    }
}

/// An OTLP receiver on two loopback ports: OTLP/gRPC and OTLP/HTTP (protobuf bodies).
struct Otlp {
    collected: Collected,
    grpc_port: u16,
    http_port: u16,
    stop: Arc<AtomicBool>,
    /// Serves gRPC; dropping it stops that server.
    _runtime: tokio::runtime::Runtime,
}

impl Otlp {
    fn start() -> Otlp {
        let collected = Collected::default();
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        let listener = runtime
            .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
            .unwrap();
        let grpc_port = listener.local_addr().unwrap().port();
        let service = TraceServiceServer::new(collected.clone());
        runtime.spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let _ = tonic::transport::Server::builder()
                .serve_with_incoming(service, incoming)
                .await;
        });
        let http = TcpListener::bind("127.0.0.1:0").unwrap();
        let http_port = http.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (keep, stopped) = (collected.clone(), Arc::clone(&stop));
        std::thread::spawn(move || {
            for conn in http.incoming() {
                if stopped.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(conn) = conn else { continue };
                let keep = keep.clone();
                std::thread::spawn(move || serve_http(conn, &keep));
            }
        });
        Otlp {
            collected,
            grpc_port,
            http_port,
            stop,
            _runtime: runtime,
        }
    }

    fn grpc_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.grpc_port)
    }

    fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.http_port)
    }

    fn spans(&self) -> Vec<Got> {
        self.collected.spans.lock().unwrap().clone()
    }

    fn paths(&self) -> Vec<String> {
        self.collected.paths.lock().unwrap().clone()
    }

    /// The spans of trace `trace` once `done` holds for them (bounded).
    fn trace(&self, trace: &str, done: impl Fn(&[Got]) -> bool) -> Vec<Got> {
        let until = Instant::now() + WAIT;
        loop {
            let spans: Vec<Got> = self
                .spans()
                .into_iter()
                .filter(|g| hex(&g.span.trace_id) == trace)
                .collect();
            if done(&spans) {
                return spans;
            }
            assert!(
                Instant::now() < until,
                "trace {trace} incomplete within {WAIT:?}: {:#?}",
                spans.iter().map(|g| &g.span.name).collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Otlp {
    fn drop(&mut self) {
        // Wakes the HTTP accept loop so that its thread ends.
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.http_port));
    }
}

/// Serves one HTTP/1.1 connection: `POST /v1/traces` with a protobuf body, until the client
/// closes it (keep-alive) or goes quiet.
fn serve_http(conn: TcpStream, collected: &Collected) {
    let _ = conn.set_read_timeout(Some(WAIT));
    let Ok(mut out) = conn.try_clone() else {
        return;
    };
    let mut reader = BufReader::new(conn);
    loop {
        let mut request_line = String::new();
        match reader.read_line(&mut request_line) {
            Ok(0) | Err(_) => return,
            Ok(_) => {}
        }
        let mut length = 0usize;
        let mut close = false;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap_or((line, ""));
            let (name, value) = (name.trim().to_ascii_lowercase(), value.trim());
            match name.as_str() {
                "content-length" => length = value.parse().unwrap_or(0),
                "connection" => close = value.eq_ignore_ascii_case("close"),
                // Not what an OTLP exporter sends for a body it has whole.
                "transfer-encoding" | "content-encoding" => {
                    let _ = out.write_all(b"HTTP/1.1 415 Unsupported\r\ncontent-length: 0\r\nconnection: close\r\n\r\n");
                    return;
                }
                _ => {}
            }
        }
        let mut body = vec![0; length];
        if reader.read_exact(&mut body).is_err() {
            return;
        }
        let path = request_line
            .split_whitespace()
            .nth(1)
            .unwrap_or_default()
            .to_owned();
        collected.paths.lock().unwrap().push(path.clone());
        let decoded = ExportTraceServiceRequest::decode(body.as_slice());
        let (status, answer) = match decoded {
            Ok(request) if path == "/v1/traces" => {
                collected.keep(request, "http");
                (
                    "200 OK",
                    ExportTraceServiceResponse::default().encode_to_vec(),
                )
            }
            _ => ("400 Bad Request", Vec::new()),
        };
        let head = format!(
            "HTTP/1.1 {status}\r\ncontent-type: application/x-protobuf\r\ncontent-length: {}\r\n\r\n",
            answer.len()
        );
        if out.write_all(head.as_bytes()).is_err() || out.write_all(&answer).is_err() {
            return;
        }
        if close {
            return;
        }
    }
}

// ---------------------------------------------------------------------------------------
// Reading spans.

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value_text(v: &any_value::Value) -> Option<String> {
    Some(match v {
        any_value::Value::StringValue(s) => s.clone(),
        any_value::Value::IntValue(i) => i.to_string(),
        any_value::Value::BoolValue(b) => b.to_string(),
        any_value::Value::DoubleValue(d) => d.to_string(),
        _ => return None,
    })
}

/// An attribute of the span, as text.
fn attr(span: &Span, key: &str) -> Option<String> {
    span.attributes
        .iter()
        .find(|kv| kv.key == key)
        .and_then(|kv| value_text(kv.value.as_ref()?.value.as_ref()?))
}

fn assert_attrs(span: &Span, expected: &[(&str, &str)]) {
    for (key, value) in expected {
        assert_eq!(
            attr(span, key).as_deref(),
            Some(*value),
            "attribute {key} of span {:?}: {:#?}",
            span.name,
            span.attributes
        );
    }
}

fn kind(span: &Span) -> SpanKind {
    SpanKind::try_from(span.kind).unwrap_or(SpanKind::Unspecified)
}

fn status(span: &Span) -> SpanStatus {
    let code = span.status.as_ref().map_or(0, |s| s.code);
    SpanStatus::try_from(code).unwrap_or(SpanStatus::Unset)
}

fn one_of_kind(spans: &[Got], k: SpanKind) -> &Got {
    let mut of_kind = spans.iter().filter(|g| kind(&g.span) == k);
    let first = of_kind
        .next()
        .unwrap_or_else(|| panic!("no {k:?} span in {spans:#?}"));
    assert!(of_kind.next().is_none(), "more than one {k:?} span");
    first
}

fn has_kinds(spans: &[Got], kinds: &[SpanKind]) -> bool {
    kinds
        .iter()
        .all(|k| spans.iter().any(|g| kind(&g.span) == *k))
}

/// A host's own span: the parent it gives Manifold's server span.
struct HostSpan {
    trace: String,
    span: String,
}

impl HostSpan {
    fn new(n: u64) -> HostSpan {
        HostSpan {
            trace: format!("4bf92f3577b34da6{:016x}", 0xa3ce_0000_0000_0000 | n),
            span: format!("{:016x}", 0x00f0_67aa_0000_0000 | n),
        }
    }

    fn traceparent(&self) -> String {
        format!("00-{}-{}-01", self.trace, self.span)
    }
}

/// The trace id and parent span id of a `traceparent` value.
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "not a traceparent: {value}");
    assert_eq!(parts[0], "00", "{value}");
    assert_eq!(parts[1].len(), 32, "{value}");
    assert_eq!(parts[2].len(), 16, "{value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

// ---------------------------------------------------------------------------------------
// Manifold over stdio, with an environment of the test's choosing.

/// `manifold serve` on a config, over pipes, with every stdout line kept as it came.
struct Piped {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<String>,
    /// Every stdout line read so far.
    stdout: Vec<String>,
    /// Answers read while waiting for others, by id.
    answers: HashMap<u64, Value>,
    stderr: Arc<Mutex<String>>,
    stderr_done: Receiver<()>,
    next_id: u64,
    _dir: TempDir,
}

impl Piped {
    fn start(config: &str, env: &[(&str, &str)]) -> Piped {
        let dir = TempDir::new("otlp");
        let path = dir.write("manifold.toml", config);
        let mut cmd = Command::new(manifold_bin());
        cmd.args(["serve", "--config", path.to_str().unwrap()]);
        // Only what the test sets: nothing inherited says where spans go.
        for (key, _) in std::env::vars() {
            if key.starts_with("OTEL_") || key == "RUST_LOG" || key == "MANIFOLD_LOG" {
                cmd.env_remove(key);
            }
        }
        cmd.env("MANIFOLD_LOG", "info").envs(env.iter().copied());
        let mut child = cmd
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("manifold starts");
        let (tx, lines) = mpsc::channel();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr = Arc::new(Mutex::new(String::new()));
        let (sink, pipe) = (Arc::clone(&stderr), child.stderr.take().unwrap());
        let (done, stderr_done) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
            let _ = done.send(());
        });
        let stdin = child.stdin.take();
        Piped {
            child,
            stdin,
            lines,
            stdout: Vec::new(),
            answers: HashMap::new(),
            stderr,
            stderr_done,
            next_id: 1,
            _dir: dir,
        }
    }

    fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    fn send(&mut self, msg: &Value) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        writeln!(stdin, "{msg}").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends a request without waiting; returns its id.
    fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.answer(id)
    }

    fn initialize(&mut self) {
        let init = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {},
                "clientInfo": {"name": "otlp-test", "version": "1"}}),
        );
        assert!(init.get("result").is_some(), "initialize failed: {init}");
        self.send(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}));
    }

    /// Reads one stdout line (kept), bounded; `None` at the end of stdout.
    fn read(&mut self, until: Instant) -> Option<()> {
        let left = until.saturating_duration_since(Instant::now());
        match self.lines.recv_timeout(left) {
            Ok(line) => {
                if let Ok(msg) = serde_json::from_str::<Value>(&line) {
                    if let (Some(id), None) =
                        (msg.get("id").and_then(Value::as_u64), msg.get("method"))
                    {
                        self.answers.insert(id, msg);
                    }
                }
                self.stdout.push(line);
                Some(())
            }
            Err(RecvTimeoutError::Timeout) => {
                panic!(
                    "nothing on stdout within {WAIT:?}; stderr:\n{}",
                    self.stderr()
                )
            }
            Err(RecvTimeoutError::Disconnected) => None,
        }
    }

    /// Waits (bounded) for the answer to request `id`.
    fn answer(&mut self, id: u64) -> Value {
        let until = Instant::now() + WAIT;
        loop {
            if let Some(answer) = self.answers.remove(&id) {
                return answer;
            }
            if self.read(until).is_none() {
                panic!(
                    "stdout ended before answer {id}; stderr:\n{}",
                    self.stderr()
                );
            }
        }
    }

    /// Closes stdin; waits (bounded) for the exit, the rest of stdout and all of stderr.
    fn close(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        let until = Instant::now() + WAIT;
        while self.read(until).is_some() {}
        let status = loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                break status;
            }
            assert!(
                Instant::now() < until,
                "manifold did not exit; stderr:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let _ = self.stderr_done.recv_timeout(Duration::from_secs(5));
        status.code()
    }
}

impl Drop for Piped {
    fn drop(&mut self) {
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The environment that sends spans to `endpoint` over OTLP/gRPC at once (100 ms batches).
fn grpc_env<'a>(endpoint: &'a str, service: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        ("OTEL_EXPORTER_OTLP_ENDPOINT", endpoint),
        ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ("OTEL_TRACES_SAMPLER", "always_on"),
        ("OTEL_BSP_SCHEDULE_DELAY", "100"),
        ("OTEL_SERVICE_NAME", service),
    ]
}

// ---------------------------------------------------------------------------------------
// The tests.

#[test]
fn stdio_spans_go_over_grpc_with_the_hosts_trace_carried_upstream() {
    let otlp = Otlp::start();
    let endpoint = otlp.grpc_url();
    let service = "manifold-otlp-grpc";
    let config = format!(
        "{}tool_cache.echo = {{ ttl = \"1h\" }}\n",
        named_fixture("alpha")
    );
    let mut m = Piped::start(&config, &grpc_env(&endpoint, service));
    m.initialize();

    // A call with the host's trace context (and a progress token: both are rewritten).
    let host = HostSpan::new(1);
    let id = m.send_request(
        "tools/call",
        json!({"name": "alpha__trace_context", "arguments": {},
            "_meta": {"traceparent": host.traceparent(), "progressToken": "p1"}}),
    );
    let answer = m.answer(id);
    let seen = text_json(&answer);
    assert_eq!(seen["header"], Value::Null, "no HTTP over stdio: {seen}");
    assert!(seen["meta"]["progressToken"].is_number(), "{seen}");
    let sent = seen["meta"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("no traceparent upstream: {seen}"));
    let (trace, parent) = parse_traceparent(sent);
    assert_eq!(trace, host.trace, "the upstream is in the host's trace");
    assert!(sent.ends_with("-01"), "sampled: {sent}");

    let spans = otlp.trace(&host.trace, |s| {
        has_kinds(s, &[SpanKind::Server, SpanKind::Client])
    });
    let server = one_of_kind(&spans, SpanKind::Server);
    let client = one_of_kind(&spans, SpanKind::Client);
    assert_eq!(server.via, "grpc");
    assert_eq!(
        server.service, service,
        "service.name from OTEL_SERVICE_NAME"
    );
    let (server, client) = (&server.span, &client.span);
    assert_eq!(
        hex(&server.parent_span_id),
        host.span,
        "the host's span is the parent"
    );
    assert_eq!(hex(&client.parent_span_id), hex(&server.span_id));
    assert_eq!(
        hex(&client.span_id),
        parent,
        "the upstream's parent is the client span"
    );
    assert_eq!(server.name, "tools/call alpha__trace_context");
    assert_eq!(client.name, "tools/call trace_context");
    assert_attrs(
        server,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "alpha__trace_context"),
            ("gen_ai.operation.name", "execute_tool"),
            ("jsonrpc.request.id", &id.to_string()),
            ("network.transport", "pipe"),
            ("mcp.protocol.version", "2025-06-18"),
            ("manifold.upstream", "alpha"),
            ("manifold.team", "anonymous"),
        ],
    );
    assert!(attr(server, "mcp.session.id").is_some(), "{server:#?}");
    assert_attrs(
        client,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "trace_context"),
            ("gen_ai.operation.name", "execute_tool"),
            ("network.transport", "pipe"),
            ("manifold.upstream", "alpha"),
        ],
    );
    assert!(attr(client, "jsonrpc.request.id").is_some());
    assert_eq!(status(server), SpanStatus::Unset);
    assert_eq!(attr(server, "error.type"), None);

    // A tool error: both spans fail, with the outcome as error.type.
    let failing = HostSpan::new(2);
    let r = m.request(
        "tools/call",
        json!({"name": "alpha__fail", "arguments": {}, "_meta": {"traceparent": failing.traceparent()}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    let spans = otlp.trace(&failing.trace, |s| {
        has_kinds(s, &[SpanKind::Server, SpanKind::Client])
    });
    for k in [SpanKind::Server, SpanKind::Client] {
        let span = &one_of_kind(&spans, k).span;
        assert_eq!(status(span), SpanStatus::Error, "{k:?}: {span:#?}");
        assert_attrs(span, &[("error.type", "tool_error")]);
    }

    // A protocol error of Manifold's own: a server span only, with the code.
    let unknown = HostSpan::new(3);
    let r = m.request(
        "tools/call",
        json!({"name": "nope__missing", "arguments": {}, "_meta": {"traceparent": unknown.traceparent()}}),
    );
    assert_eq!(error_code(&r), -32602, "{r}");
    let spans = otlp.trace(&unknown.trace, |s| has_kinds(s, &[SpanKind::Server]));
    let server = &one_of_kind(&spans, SpanKind::Server).span;
    assert_eq!(hex(&server.parent_span_id), unknown.span);
    assert_eq!(status(server), SpanStatus::Error, "{server:#?}");
    assert_attrs(
        server,
        &[
            ("error.type", "-32602"),
            ("rpc.response.status_code", "-32602"),
            ("mcp.method.name", "tools/call"),
        ],
    );
    assert!(
        !spans.iter().any(|g| kind(&g.span) == SpanKind::Client),
        "nothing went upstream"
    );

    // A cached tool: the first call is a miss with its upstream hop, the second a hit without.
    for (n, how) in [(4, "miss"), (5, "hit")] {
        let host = HostSpan::new(n);
        let r = m.request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"text": "t"},
                "_meta": {"traceparent": host.traceparent()}}),
        );
        assert_eq!(r["result"]["content"][0]["text"], "t", "{r}");
        let spans = otlp.trace(&host.trace, |s| has_kinds(s, &[SpanKind::Server]));
        let server = &one_of_kind(&spans, SpanKind::Server).span;
        assert_attrs(server, &[("manifold.cache", how)]);
        if how == "miss" {
            otlp.trace(&host.trace, |s| has_kinds(s, &[SpanKind::Client]));
        } else {
            assert!(
                !spans.iter().any(|g| kind(&g.span) == SpanKind::Client),
                "a hit went upstream: {spans:#?}"
            );
        }
    }

    // Without a parent from the host, a request starts a trace of its own.
    let r = m.request(
        "tools/call",
        json!({"name": "alpha__trace_context", "arguments": {}}),
    );
    let sent = text_json(&r)["meta"]["traceparent"]
        .as_str()
        .map(str::to_owned)
        .expect("a traceparent for the upstream");
    let (trace, parent) = parse_traceparent(&sent);
    let spans = otlp.trace(&trace, |s| {
        has_kinds(s, &[SpanKind::Server, SpanKind::Client])
    });
    let server = &one_of_kind(&spans, SpanKind::Server).span;
    assert!(server.parent_span_id.is_empty(), "a root span: {server:#?}");
    assert_eq!(
        hex(&one_of_kind(&spans, SpanKind::Client).span.span_id),
        parent
    );

    assert_eq!(m.close(), Some(0), "stderr:\n{}", m.stderr());
}

#[test]
fn http_spans_go_over_http_protobuf_from_the_config_with_the_trace_in_headers() {
    let otlp = Otlp::start();
    let up = FixtureHttp::start(0, &["--name", "web"]);
    let service = "manifold-otlp-http";
    let config = format!(
        "[telemetry]\notlp_endpoint = {:?}\notlp_protocol = \"http/protobuf\"\n\
         sampler = \"always_on\"\nservice_name = {service:?}\n\n\
         [upstreams.web]\nurl = {:?}\n\n\
         [upstreams.old]\nurl = {:?}\ntransport = \"sse\"\n",
        otlp.http_url(),
        up.url("/mcp"),
        up.url("/sse"),
    );
    let server = Server::start(&config);
    let mut host = server.ready_host();

    // The host's trace context in the POST's headers, not in _meta.
    let parent = HostSpan::new(11);
    let id = host.next_id;
    host.next_id += 1;
    let body = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
        "params": {"name": "web__trace_context", "arguments": {}}});
    let r = host
        .post_raw(body.to_string())
        .header("traceparent", parent.traceparent())
        .header("tracestate", "vendor=opaque")
        .send()
        .unwrap();
    assert_eq!(r.status(), reqwest::StatusCode::OK, "{}", server.stderr());
    let answer = messages_of(r)
        .into_iter()
        .find(|m| m["id"] == json!(id))
        .expect("an answer");
    let seen = text_json(&answer);
    let in_meta = seen["meta"]["traceparent"]
        .as_str()
        .unwrap_or_else(|| panic!("{seen}"));
    let in_header = seen["header"].as_str().unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(
        in_meta, in_header,
        "the same trace context in _meta and in the header"
    );
    assert_eq!(seen["meta"]["tracestate"], "vendor=opaque", "{seen}");
    let (trace, hop) = parse_traceparent(in_header);
    assert_eq!(trace, parent.trace);

    // The same over the 2024-11-05 transport, whose POSTs carry the headers too.
    let legacy = HostSpan::new(12);
    let r = host
        .post_raw(
            json!({"jsonrpc": "2.0", "id": 900, "method": "tools/call",
                "params": {"name": "old__trace_context", "arguments": {}}})
            .to_string(),
        )
        .header("traceparent", legacy.traceparent())
        .send()
        .unwrap();
    let answer = messages_of(r)
        .into_iter()
        .find(|m| m["id"] == json!(900))
        .expect("an answer");
    let seen = text_json(&answer);
    assert_eq!(seen["header"], seen["meta"]["traceparent"], "{seen}");
    let header = seen["header"].as_str().unwrap_or_else(|| panic!("{seen}"));
    assert_eq!(parse_traceparent(header).0, legacy.trace);

    // A failing call too, and then the spans still queued are exported at shutdown.
    let r = host.call("web__fail", json!({}));
    assert_eq!(r["result"]["isError"], true, "{r}");
    drop(server);

    let spans = otlp.trace(&parent.trace, |s| {
        has_kinds(s, &[SpanKind::Server, SpanKind::Client])
    });
    let server_span = one_of_kind(&spans, SpanKind::Server);
    assert_eq!(server_span.via, "http");
    assert_eq!(server_span.service, service, "service.name from the config");
    let client_span = &one_of_kind(&spans, SpanKind::Client).span;
    let server_span = &server_span.span;
    assert_eq!(hex(&server_span.parent_span_id), parent.span);
    assert_eq!(hex(&client_span.parent_span_id), hex(&server_span.span_id));
    assert_eq!(hex(&client_span.span_id), hop);
    assert_eq!(server_span.name, "tools/call web__trace_context");
    assert_eq!(client_span.name, "tools/call trace_context");
    assert_attrs(
        server_span,
        &[
            ("mcp.method.name", "tools/call"),
            ("gen_ai.tool.name", "web__trace_context"),
            ("jsonrpc.request.id", &id.to_string()),
            ("network.transport", "tcp"),
            ("manifold.upstream", "web"),
        ],
    );
    assert!(attr(server_span, "mcp.session.id").is_some());
    assert_attrs(
        client_span,
        &[
            ("gen_ai.tool.name", "trace_context"),
            ("network.transport", "tcp"),
            ("manifold.upstream", "web"),
        ],
    );
    // The failed call's server span (a trace of its own: no parent was sent).
    let failed = otlp
        .spans()
        .into_iter()
        .find(|g| {
            kind(&g.span) == SpanKind::Server
                && attr(&g.span, "gen_ai.tool.name").as_deref() == Some("web__fail")
        })
        .expect("the failed call's server span");
    assert_eq!(status(&failed.span), SpanStatus::Error);
    assert_attrs(
        &failed.span,
        &[("error.type", "tool_error"), ("network.transport", "tcp")],
    );
    let paths = otlp.paths();
    assert!(
        !paths.is_empty() && paths.iter().all(|p| p == "/v1/traces"),
        "{paths:?}"
    );
}

/// About twenty requests of every kind, some failing, sent at once; returns their ids and
/// the host trace of the unknown tool's call.
fn many_requests(m: &mut Piped) -> (Vec<u64>, HostSpan) {
    let refused = HostSpan::new(21);
    let mut ids = Vec::new();
    for i in 0..5 {
        let traced = HostSpan::new(30 + i);
        ids.push(m.send_request(
            "tools/call",
            json!({"name": "alpha__echo", "arguments": {"text": format!("hi {i}")},
                "_meta": {"traceparent": traced.traceparent()}}),
        ));
    }
    for i in 0..3 {
        ids.push(m.send_request(
            "tools/call",
            json!({"name": "beta__echo", "arguments": {"text": i.to_string()}}),
        ));
    }
    for _ in 0..3 {
        ids.push(m.send_request(
            "tools/call",
            json!({"name": "alpha__fail", "arguments": {}}),
        ));
    }
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "nobody__nothing", "arguments": {}, "_meta": {"traceparent": refused.traceparent()}}),
    ));
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "alpha__nothing", "arguments": {}}),
    ));
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "alpha__trace_context", "arguments": {}}),
    ));
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "alpha__progress", "arguments": {"steps": 3}, "_meta": {"progressToken": 7}}),
    ));
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "beta__log", "arguments": {"message": "from beta"}}),
    ));
    ids.push(m.send_request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 20}}),
    ));
    ids.push(m.send_request("tools/list", json!({})));
    ids.push(m.send_request("ping", json!({})));
    ids.push(m.send_request("no/such/method", json!({})));
    ids.push(m.send_request("tools/call", json!([1, 2])));
    (ids, refused)
}

/// Every stdout line is a JSON-RPC message, and every request was answered.
fn assert_only_json_rpc(m: &Piped, ids: &[u64]) {
    for line in &m.stdout {
        let msg: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line:?}"));
        assert_eq!(msg["jsonrpc"], "2.0", "not JSON-RPC: {line}");
    }
    for id in ids {
        let answered = m.stdout.iter().any(|l| {
            serde_json::from_str::<Value>(l)
                .is_ok_and(|v| v["id"] == json!(id) && v.get("method").is_none())
        });
        assert!(answered, "request {id} was not answered");
    }
}

#[test]
fn stdout_stays_json_rpc_with_every_log_on_and_a_failing_exporter() {
    // Text logs; the environment sends spans over gRPC to a port where nothing listens.
    let endpoint = format!("http://127.0.0.1:{}", free_port());
    let mut env = grpc_env(&endpoint, "manifold-otlp-nowhere");
    env.extend([("MANIFOLD_LOG", "trace"), ("RUST_LOG", "trace")]);
    let mut m = Piped::start(&two_fixtures(), &env);
    m.initialize();
    let (ids, refused) = many_requests(&mut m);
    assert!(ids.len() >= 20);
    for id in &ids {
        m.answer(*id);
    }
    // Time for a few failed exports while serving.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(m.close(), Some(0), "stderr:\n{}", m.stderr());
    assert_only_json_rpc(&m, &ids);

    let stderr = m.stderr();
    let in_span = format!(" trace_id={} span_id=", refused.trace);
    let line = stderr
        .lines()
        .find(|l| l.contains("request refused") && l.contains(&in_span))
        .unwrap_or_else(|| panic!("no refusal logged in the host's trace:\n{stderr}"));
    let span_id = line.rsplit("span_id=").next().unwrap();
    assert!(
        span_id.len() == 16 && span_id.bytes().all(|b| b.is_ascii_hexdigit()),
        "{line}"
    );
    let outside = stderr
        .lines()
        .find(|l| l.contains("exporting traces over OTLP"))
        .expect("the start of export is logged");
    assert!(
        !outside.contains("trace_id="),
        "outside any request: {outside}"
    );

    // JSON logs, export configured in the file to a port where nothing listens.
    let config = format!(
        "[telemetry]\nlog_format = \"json\"\notlp_endpoint = \"http://127.0.0.1:{}\"\n\
         otlp_protocol = \"http/protobuf\"\nsampler = \"always_on\"\n\n{}",
        free_port(),
        two_fixtures()
    );
    let mut m = Piped::start(&config, &[("MANIFOLD_LOG", "trace"), ("RUST_LOG", "trace")]);
    m.initialize();
    let (ids, refused) = many_requests(&mut m);
    for id in &ids {
        m.answer(*id);
    }
    assert_eq!(m.close(), Some(0), "stderr:\n{}", m.stderr());
    assert_only_json_rpc(&m, &ids);
    let stderr = m.stderr();
    let mut refusal = None;
    let mut json_lines = 0;
    for line in stderr.lines().filter(|l| l.starts_with('{')) {
        let v: Value = serde_json::from_str(line)
            .unwrap_or_else(|e| panic!("stderr line is not JSON ({e}): {line}"));
        json_lines += 1;
        if v["message"] == "request refused" && v["trace_id"] == refused.trace.as_str() {
            refusal = Some(v);
        }
    }
    assert!(json_lines > 20, "{stderr}");
    let refusal = refusal.unwrap_or_else(|| panic!("no refusal in the host's trace:\n{stderr}"));
    assert_eq!(
        refusal["span_id"].as_str().map(str::len),
        Some(16),
        "{refusal}"
    );
}
