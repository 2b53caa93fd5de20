//! One HTTP request of a tool call: sent with the upstream's headers and the call's own, under
//! a client span named by the operation's route template, and its answer read to at most the
//! cap plus one byte.

use manifold_openapi::{HttpRequest, Operation};
use manifold_telemetry::spans::{self, HttpDone};
use manifold_telemetry::trace::Carrier;
use reqwest::header::{HeaderName, HeaderValue};

use super::load::Service;

/// What the service answered, its body read at most one byte over the cap.
pub(crate) struct Answer {
    pub(crate) status: u16,
    pub(crate) content_type: Option<String>,
    /// `WWW-Authenticate`, for a refused token.
    pub(crate) challenge: Option<String>,
    pub(crate) body: Vec<u8>,
}

/// Why a request got no usable answer: the span's `error.type`, the status when there was
/// one, and what the tool error says.
struct Failed {
    kind: &'static str,
    status: Option<u16>,
    why: String,
}

/// Sends `request` of `op` under a client span whose parent is `trace`, the context the call
/// came with; the service receives that span's own `traceparent`.
pub(crate) async fn send(
    service: &Service,
    op: &Operation,
    request: HttpRequest,
    trace: Option<&Carrier>,
) -> Result<Answer, String> {
    let span = spans::http_client(trace);
    let request = build(service, request, trace, &span)?;
    let url = request.url();
    let address = url.host_str().unwrap_or_default().to_owned();
    let port = url.port_or_known_default();
    let outcome = exchange(service, request).await;
    let status = match &outcome {
        Ok(answer) => Some(answer.status),
        Err(failed) => failed.status,
    };
    let error_status = status.filter(|s| *s >= 400).map(|s| s.to_string());
    let error = match &outcome {
        Ok(_) => error_status.as_deref(),
        Err(failed) => Some(failed.kind),
    };
    let done = HttpDone {
        method: &op.method,
        template: &op.path,
        address: &address,
        port,
        status,
        error,
    };
    spans::http_done(&span, &done);
    outcome.map_err(|failed| failed.why)
}

/// The request as reqwest sends it: JSON asked for first, the upstream's headers, the call's
/// own (parameters and security), and the span's trace context.
fn build(
    service: &Service,
    request: HttpRequest,
    trace: Option<&Carrier>,
    span: &tracing::Span,
) -> Result<reqwest::Request, String> {
    let method = reqwest::Method::from_bytes(request.method.as_bytes())
        .map_err(|e| format!("method {}: {e}", request.method))?;
    // JSON first: it is what the answer's mapping and the output schema are made for, and a
    // service offering XML too (the Petstore does) would otherwise pick for itself.
    let mut builder = service
        .client
        .request(method, &request.url)
        .header(reqwest::header::ACCEPT, "application/json, */*;q=0.8");
    for (name, value) in service.headers.iter().chain(&request.headers) {
        builder = builder.header(name.as_str(), value.as_str());
    }
    // The span's own context, and the baggage the call came with, as an HTTP server's
    // instrumentation looks for them.
    let context = spans::context_of(span).unwrap_or_default();
    let baggage = trace
        .into_iter()
        .flat_map(Carrier::iter)
        .filter(|(key, _)| *key == "baggage");
    for (key, value) in context.iter().chain(baggage) {
        if let Ok(value) = HeaderValue::from_str(value) {
            builder = builder.header(HeaderName::from_static(key), value);
        }
    }
    if let Some(content_type) = &request.content_type {
        builder = builder.header(reqwest::header::CONTENT_TYPE, content_type.as_str());
    }
    if let Some(body) = request.body {
        builder = builder.body(body);
    }
    builder
        .build()
        .map_err(|e| format!("the request could not be made: {e}"))
}

/// Sends the request and reads its answer, at most one byte over the cap (so that the
/// mapping sees the answer was longer and says so).
async fn exchange(service: &Service, request: reqwest::Request) -> Result<Answer, Failed> {
    let mut response = service.client.execute(request).await.map_err(describe)?;
    refuse_redirect(&response)?;
    let status = response.status().as_u16();
    let header = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = header(reqwest::header::CONTENT_TYPE);
    let challenge = header(reqwest::header::WWW_AUTHENTICATE);
    let limit = service.max_response_bytes.saturating_add(1);
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| Failed {
        status: Some(status),
        ..describe(e)
    })? {
        let room = limit - body.len();
        body.extend_from_slice(&chunk[..chunk.len().min(room)]);
        if body.len() >= limit {
            break;
        }
    }
    Ok(Answer {
        status,
        content_type,
        challenge,
        body,
    })
}

/// A redirect still in hand was not followed: the client follows only those within the
/// origin, so it points elsewhere. Its answer is not the operation's, so the call fails with
/// where it pointed, rather than passing the redirect off as a result.
fn refuse_redirect(response: &reqwest::Response) -> Result<(), Failed> {
    if !response.status().is_redirection() {
        return Ok(());
    }
    let Some(location) = response.headers().get(reqwest::header::LOCATION) else {
        return Ok(());
    };
    let location = location.to_str().unwrap_or("an unreadable location");
    let target = response
        .url()
        .join(location)
        .map_or_else(|_| location.to_owned(), |url| url.to_string());
    Err(Failed {
        kind: "redirect",
        status: Some(response.status().as_u16()),
        why: format!(
            "HTTP {}: redirected to {target}, another origin, which is not followed",
            response.status()
        ),
    })
}

fn describe(e: reqwest::Error) -> Failed {
    let (kind, why) = if e.is_timeout() {
        ("timeout", "the service did not answer in time".to_owned())
    } else if e.is_redirect() {
        (
            "redirect",
            format!("redirected too often or elsewhere: {e}"),
        )
    } else if e.is_connect() {
        ("connect", e.to_string())
    } else {
        ("_OTHER", e.to_string())
    };
    Failed {
        kind,
        status: None,
        why,
    }
}
