//! An OpenAPI upstream's HTTP request is a client span of its own under the upstream hop's
//! span, named and attributed by the operation's route template, never by the values that
//! filled it; the service receives that span's trace context.

use super::*;
use manifold_testkit::rest::{read_request, reply, serve};

/// Each request's target and the `traceparent` it came with.
type Seen = Arc<Mutex<Vec<(String, Option<String>)>>>;

/// A service in the test: the description at `/openapi.json`; `GET /api/pets/{id}` answers
/// the pet, or 404 for pet 404. Every request's target and `traceparent` are kept.
struct Pets {
    base: String,
    port: u16,
    seen: Seen,
}

fn description() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "pets", "version": "1"},
        "servers": [{"url": "/api"}],
        "paths": {"/pets/{petId}": {"get": {
            "operationId": "getPet",
            "parameters": [
                {"name": "petId", "in": "path", "required": true, "schema": {"type": "integer"}},
                {"name": "owner", "in": "query", "schema": {"type": "string"}}
            ],
            "responses": {"200": {"description": "ok",
                "content": {"application/json": {"schema": {"type": "object"}}}}}
        }}}
    })
}

impl Pets {
    fn start() -> Pets {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let keep = Arc::clone(&seen);
        let base = serve(move |stream| Pets::answer(stream, &keep));
        let port = base
            .rsplit(':')
            .next()
            .and_then(|p| p.parse().ok())
            .unwrap();
        Pets { base, port, seen }
    }

    fn answer(mut stream: TcpStream, seen: &Mutex<Vec<(String, Option<String>)>>) {
        let Some(request) = read_request(&mut stream) else {
            return;
        };
        let target = request.target.clone();
        let traceparent = request.header("traceparent");
        let (status, text) = if target == "/openapi.json" {
            ("200 OK", description().to_string())
        } else if target.starts_with("/api/pets/404") {
            ("404 Not Found", r#"{"message":"no such pet"}"#.to_owned())
        } else {
            ("200 OK", r#"{"name":"rex"}"#.to_owned())
        };
        seen.lock().unwrap().push((target, traceparent));
        reply(&mut stream, status, "application/json", &text);
    }

    /// The `traceparent` the request for `target` came with.
    fn traceparent_of(&self, target: &str) -> Option<String> {
        let seen = self.seen.lock().unwrap();
        let found = seen.iter().find(|(t, _)| t == target);
        assert!(found.is_some(), "no request for {target}: {seen:?}");
        found.and_then(|(_, tp)| tp.clone())
    }
}

/// Every text of the span a reader of traces sees: its name, attribute keys and values,
/// events and status message.
fn texts_of(span: &Span) -> Vec<String> {
    let mut texts = vec![span.name.clone()];
    for kv in &span.attributes {
        texts.push(kv.key.clone());
        if let Some(v) = kv.value.as_ref().and_then(|v| v.value.as_ref()) {
            texts.push(value_text(v).unwrap_or_else(|| format!("{v:?}")));
        }
    }
    texts.extend(span.events.iter().map(|e| format!("{e:?}")));
    texts.extend(span.status.iter().map(|s| s.message.clone()));
    texts
}

/// The span of the REST request for the host's trace `host`.
fn rest_span(otlp: &Otlp, host: &HostSpan) -> (Span, Span) {
    let spans = otlp.trace(&host.trace, |s| {
        s.iter().any(|g| g.span.name == "GET /pets/{petId}")
            && s.iter().any(|g| g.span.name == "tools/call getPet")
    });
    let find = |name: &str| {
        spans
            .iter()
            .find(|g| g.span.name == name)
            .map(|g| g.span.clone())
            .unwrap_or_else(|| panic!("no span {name} in {spans:#?}"))
    };
    (find("GET /pets/{petId}"), find("tools/call getPet"))
}

#[test]
fn openapi_requests_are_client_spans_named_by_the_route_template_without_its_values() {
    let otlp = Otlp::start();
    let pets = Pets::start();
    let config = format!(
        "[upstreams.pets]\nopenapi = \"{}/openapi.json\"\n",
        pets.base
    );
    let mut m = Piped::start(&config, &grpc_env(&otlp.grpc_url(), "manifold-openapi"));
    m.initialize();

    let host = HostSpan::new(21);
    let answer = m.request(
        "tools/call",
        json!({"name": "pets__getPet", "arguments": {"petId": 4242, "owner": "zelda-secret"},
            "_meta": {"traceparent": host.traceparent()}}),
    );
    assert_ne!(answer["result"]["isError"], true, "{answer}");
    let sent = pets
        .traceparent_of("/api/pets/4242?owner=zelda-secret")
        .expect("the service gets a traceparent");
    let (trace, parent) = parse_traceparent(&sent);
    assert_eq!(trace, host.trace, "the service is in the host's trace");

    let (rest, hop) = rest_span(&otlp, &host);
    assert_eq!(kind(&rest), SpanKind::Client);
    assert_eq!(
        hex(&rest.span_id),
        parent,
        "the service's parent is this span"
    );
    assert_eq!(
        hex(&rest.parent_span_id),
        hex(&hop.span_id),
        "a child of the upstream hop's span"
    );
    // The hop to the in-process OpenAPI upstream crosses no network of its own.
    assert_eq!(attr(&hop, "network.transport").as_deref(), Some("inproc"));
    let port = pets.port.to_string();
    assert_attrs(
        &rest,
        &[
            ("http.request.method", "GET"),
            ("url.template", "/pets/{petId}"),
            ("server.address", "127.0.0.1"),
            ("server.port", &port),
            ("http.response.status_code", "200"),
        ],
    );
    assert_eq!(status(&rest), SpanStatus::Unset);
    assert_eq!(attr(&rest, "error.type"), None);
    assert_eq!(attr(&rest, "url.full"), None);
    for text in texts_of(&rest) {
        assert!(
            !text.contains("4242") && !text.contains("zelda"),
            "a filled value in the span: {text:?} of {rest:#?}"
        );
    }

    // A 404 answer: the span says so with the status as its error type.
    let missing = HostSpan::new(22);
    let answer = m.request(
        "tools/call",
        json!({"name": "pets__getPet", "arguments": {"petId": 404},
            "_meta": {"traceparent": missing.traceparent()}}),
    );
    assert_eq!(answer["result"]["isError"], true, "{answer}");
    let (rest, _) = rest_span(&otlp, &missing);
    assert_attrs(
        &rest,
        &[("http.response.status_code", "404"), ("error.type", "404")],
    );
    assert_eq!(status(&rest), SpanStatus::Error);

    assert_eq!(m.close(), Some(0), "stderr:\n{}", m.stderr());
}
