//! The MCP server an OpenAPI upstream plays: the session era's handshake with tools only,
//! `tools/list` from the converted operations, and `tools/call` as the operation's HTTP request.

use std::sync::Arc;

use manifold_openapi::{ArgError, HttpRequest, Operation};
use manifold_protocol::Envelope;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::load::Service;
use super::reread::{Read, Source, REREAD};
use super::Back;

/// The revision answered to `initialize`: the session era's.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// Answers what Manifold sends until the connection closes; each call runs as a task of its
/// own, so a slow service does not hold the others back. Between messages, a reading of the
/// description asked for earlier may replace what is served (see `reread`).
pub(crate) async fn serve(
    mut service: Arc<Service>,
    mut source: Source,
    mut rx: mpsc::UnboundedReceiver<Vec<u8>>,
    back: Back,
) {
    let mut calls = tokio::task::JoinSet::new();
    let (read_tx, mut read_rx) = mpsc::unbounded_channel::<Read>();
    loop {
        let line = tokio::select! {
            line = rx.recv() => match line {
                Some(line) => line,
                None => break,
            },
            Some(read) = read_rx.recv() => {
                service = source.settle(service, read, &back);
                continue;
            }
        };
        let Ok(env) = Envelope::decode(trim(&line)) else {
            continue;
        };
        let Some(method) = env.method.as_deref() else {
            continue;
        };
        match env.id {
            Some(id) => answer(&service, &back, &mut calls, (method, id, env.params)),
            // Notifications need nothing (`initialized`, cancellations), but Manifold's own
            // asking for the description to be read again.
            None if method == REREAD => source.reread(&service, read_tx.clone()),
            None => {}
        }
        // Finished calls are reaped as the loop goes, so the set does not grow.
        while calls.try_join_next().is_some() {}
    }
}

/// Answers one request: (method, id, params).
fn answer(
    service: &Arc<Service>,
    back: &Back,
    calls: &mut tokio::task::JoinSet<()>,
    (method, id, params): (&str, &str, Option<&str>),
) {
    let id = id.to_owned();
    match method {
        "initialize" => back.push(&result(&id, &initialize())),
        "ping" => back.push(&result(&id, "{}")),
        "tools/list" => back.push(&result(&id, &service.list)),
        "tools/call" => {
            let params = params.map(str::to_owned);
            let (service, back) = (Arc::clone(service), back.clone());
            calls.spawn(async move {
                let line = call(&service, &id, params.as_deref()).await;
                back.push(&line);
            });
        }
        _ => back.push(&error(&id, -32601, &format!("method not found: {method}"))),
    }
}

fn trim(line: &[u8]) -> &[u8] {
    line.strip_suffix(b"\n").unwrap_or(line)
}

fn initialize() -> String {
    json!({
        "protocolVersion": PROTOCOL_VERSION,
        // Its tools change when a reload reads a changed description.
        "capabilities": {"tools": {"listChanged": true}},
        "serverInfo": {"name": "openapi", "version": env!("CARGO_PKG_VERSION")},
    })
    .to_string()
}

fn result(id: &str, result: &str) -> String {
    format!(r#"{{"jsonrpc":"2.0","id":{id},"result":{result}}}"#)
}

fn error(id: &str, code: i64, message: &str) -> String {
    let error = json!({"code": code, "message": message});
    format!(r#"{{"jsonrpc":"2.0","id":{id},"error":{error}}}"#)
}

/// One call: the arguments checked and the request built (a wrong argument is -32602 naming
/// it, and the service never sees it), then sent, and the answer mapped.
async fn call(service: &Service, id: &str, params: Option<&str>) -> String {
    let params: Value = params
        .and_then(|p| serde_json::from_str(p).ok())
        .unwrap_or(Value::Null);
    let Some(name) = params.get("name").and_then(Value::as_str) else {
        return error(id, -32602, "tools/call needs the tool's `name`");
    };
    let Some(op) = service.by_name.get(name).map(|&i| &service.tools[i]) else {
        return error(id, -32602, &format!("unknown tool: {name}"));
    };
    let arguments = params.get("arguments").unwrap_or(&Value::Null);
    let request = match op.request(arguments) {
        Ok(request) => request,
        Err(problem) => return error(id, -32602, &invalid(&problem)),
    };
    let mapped = match secured(service, op, request).await {
        Ok(answer) => op.map_response(
            answer.status,
            answer.content_type.as_deref(),
            &answer.body,
            service.max_response_bytes,
        ),
        Err(problem) => failed(op, &problem),
    };
    result(id, &mapped.to_string())
}

/// Sends `request` with what its operation's security asks for; an operation whose schemes
/// have no value is refused before any request. A token of the upstream's credential that the
/// service refuses (401, or 403 asking for more scope) is told to it once, and the request
/// sent again with the fresh one.
async fn secured(
    service: &Service,
    op: &Operation,
    request: HttpRequest,
) -> Result<Answer, String> {
    let keys = &service.keys;
    let needs = keys.choose(op)?;
    let credential = match &keys.credential {
        Some(credential) if keys.uses_credential(needs) => credential,
        _ => {
            let mut request = request;
            keys.apply(needs, None, &mut request);
            return send(service, request).await;
        }
    };
    let token = credential.token().await.map_err(|why| why.reason)?;
    let mut first = request.clone();
    keys.apply(needs, Some(&token), &mut first);
    let answer = send(service, first).await?;
    let refused = answer.status == 401
        || (answer.status == 403
            && answer
                .challenge
                .as_deref()
                .is_some_and(|c| c.contains("insufficient_scope")));
    if !refused {
        return Ok(answer);
    }
    let fresh = credential
        .rejected(&token, answer.status, answer.challenge.as_deref())
        .await
        .map_err(|why| why.reason)?;
    let mut again = request;
    keys.apply(needs, Some(&fresh), &mut again);
    send(service, again).await
}

fn invalid(problem: &ArgError) -> String {
    match problem.parameter() {
        Some(name) => format!("invalid argument `{name}`: {problem}"),
        None => format!("invalid arguments: {problem}"),
    }
}

/// A request that got no answer (refused, timed out, cut off) is a tool error, as a 5xx is.
fn failed(op: &Operation, problem: &str) -> Value {
    let text = format!("{} {} failed: {problem}", op.method, op.path);
    json!({"content": [{"type": "text", "text": text}], "isError": true})
}

/// What the service answered, its body read at most one byte over the cap.
struct Answer {
    status: u16,
    content_type: Option<String>,
    /// `WWW-Authenticate`, for a refused token.
    challenge: Option<String>,
    body: Vec<u8>,
}

/// Sends the request and reads its answer, at most one byte over the cap (so that the
/// mapping sees the answer was longer and says so).
async fn send(service: &Service, request: HttpRequest) -> Result<Answer, String> {
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
    if let Some(content_type) = &request.content_type {
        builder = builder.header(reqwest::header::CONTENT_TYPE, content_type.as_str());
    }
    if let Some(body) = request.body {
        builder = builder.body(body);
    }
    let mut response = builder.send().await.map_err(describe)?;
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
    while let Some(chunk) = response.chunk().await.map_err(describe)? {
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
fn refuse_redirect(response: &reqwest::Response) -> Result<(), String> {
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
    Err(format!(
        "HTTP {}: redirected to {target}, another origin, which is not followed",
        response.status()
    ))
}

fn describe(e: reqwest::Error) -> String {
    if e.is_timeout() {
        "the service did not answer in time".to_owned()
    } else if e.is_redirect() {
        format!("redirected too often or elsewhere: {e}")
    } else {
        e.to_string()
    }
}
