//! The MCP server an OpenAPI upstream plays: the session era's handshake with tools only,
//! `tools/list` from the converted operations, and `tools/call` as the operation's HTTP request.

use std::sync::Arc;

use manifold_openapi::{ArgError, HttpRequest, Operation};
use manifold_protocol::Envelope;
use manifold_telemetry::trace::Carrier;
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::load::Service;
use super::reread::{Read, Source, REREAD};
use super::send::{send, Answer};
use super::{Back, Inbound};

/// The revision answered to `initialize`: the session era's.
const PROTOCOL_VERSION: &str = "2025-11-25";

/// Answers what Manifold sends until the connection closes; each call runs as a task of its
/// own, so a slow service does not hold the others back. Between messages, a reading of the
/// description asked for earlier may replace what is served (see `reread`).
pub(crate) async fn serve(
    mut service: Arc<Service>,
    mut source: Source,
    mut rx: mpsc::UnboundedReceiver<Inbound>,
    back: Back,
) {
    let mut calls = tokio::task::JoinSet::new();
    let (read_tx, mut read_rx) = mpsc::unbounded_channel::<Read>();
    loop {
        let Inbound { line, trace } = tokio::select! {
            inbound = rx.recv() => match inbound {
                Some(inbound) => inbound,
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
            Some(id) => {
                let request = Request {
                    method,
                    id,
                    params: env.params,
                    trace,
                };
                answer(&service, &back, &mut calls, request);
            }
            // Notifications need nothing (`initialized`, cancellations), but Manifold's own
            // asking for the description to be read again.
            None if method == REREAD => source.reread(&service, read_tx.clone()),
            None => {}
        }
        // Finished calls are reaped as the loop goes, so the set does not grow.
        while calls.try_join_next().is_some() {}
    }
}

/// One request from Manifold, with the trace context its line carried.
struct Request<'a> {
    method: &'a str,
    id: &'a str,
    params: Option<&'a str>,
    trace: Option<Carrier>,
}

/// Answers one request.
fn answer(
    service: &Arc<Service>,
    back: &Back,
    calls: &mut tokio::task::JoinSet<()>,
    request: Request<'_>,
) {
    let id = request.id.to_owned();
    match request.method {
        "initialize" => back.push(&result(&id, &initialize())),
        "ping" => back.push(&result(&id, "{}")),
        "tools/list" => back.push(&result(&id, &service.list)),
        "tools/call" => {
            let params = request.params.map(str::to_owned);
            let trace = request.trace;
            let (service, back) = (Arc::clone(service), back.clone());
            calls.spawn(async move {
                let line = call(&service, &id, params.as_deref(), trace.as_ref()).await;
                back.push(&line);
            });
        }
        method => back.push(&error(&id, -32601, &format!("method not found: {method}"))),
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
async fn call(
    service: &Service,
    id: &str,
    params: Option<&str>,
    trace: Option<&Carrier>,
) -> String {
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
    let mapped = match secured(service, op, request, trace).await {
        Ok(answer) => op.map_response(
            answer.status,
            answer.content_type.as_deref(),
            &answer.body,
            service.max_response_bytes,
        ),
        Err(problem) => failed(op, &problem),
    };
    result(id, &mapped)
}

/// Sends `request` with what its operation's security asks for; an operation whose schemes
/// have no value is refused before any request. A token of the upstream's credential that the
/// service refuses (401, or 403 asking for more scope) is told to it once, and the request
/// sent again with the fresh one.
async fn secured(
    service: &Service,
    op: &Operation,
    request: HttpRequest,
    trace: Option<&Carrier>,
) -> Result<Answer, String> {
    let keys = &service.keys;
    let needs = keys.choose(op)?;
    let credential = match &keys.credential {
        Some(credential) if keys.uses_credential(needs) => credential,
        _ => {
            let mut request = request;
            keys.apply(needs, None, &mut request);
            return send(service, op, request, trace).await;
        }
    };
    let token = credential.token().await.map_err(|why| why.reason)?;
    let mut first = request.clone();
    keys.apply(needs, Some(&token), &mut first);
    let answer = send(service, op, first, trace).await?;
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
    send(service, op, again, trace).await
}

fn invalid(problem: &ArgError) -> String {
    match problem.parameter() {
        Some(name) => format!("invalid argument `{name}`: {problem}"),
        None => format!("invalid arguments: {problem}"),
    }
}

/// A request that got no answer (refused, timed out, cut off) is a tool error, as a 5xx is.
fn failed(op: &Operation, problem: &str) -> String {
    let text = format!("{} {} failed: {problem}", op.method, op.path);
    json!({"content": [{"type": "text", "text": text}], "isError": true}).to_string()
}
