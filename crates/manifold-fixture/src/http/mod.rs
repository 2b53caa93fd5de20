//! `--http ADDR`: the fixture over HTTP, with actix-web. Streamable HTTP at `/mcp` (POST,
//! GET, DELETE) and the 2024-11-05 HTTP+SSE transport at `/sse` and `/messages`. With
//! `--era stateless` or `dual`, POSTs of the stateless era (2026-07-28) are served by
//! `stateless.rs`, and a GET or DELETE without a session is 405 (with `stateless`, every
//! GET and DELETE is, and the HTTP+SSE transport is gone: 404).
//!
//! Requests are handled by the same code as over stdio; only the way back differs (see
//! `sink.rs`): a reply goes to the POST that carried the request. Fast requests are
//! answered inline in the handler, slow tool calls on their own thread, as over stdio.
//! Only loopback `Host` and `Origin` values are accepted, against DNS rebinding.

// Checks return the refusal as the response itself: it is built once per refused request,
// so its size does not matter.
#![allow(clippy::result_large_err)]

pub mod fault;
mod legacy;
mod mocks;
mod session;
mod sink;
mod stateless;
mod streamable;

use std::convert::Infallible;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use actix_web::http::header::{self, HeaderMap};
use actix_web::http::StatusCode;
use actix_web::{web, App, HttpRequest, HttpResponse, HttpServer};
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::mpsc::UnboundedReceiver;

use crate::era::EraFlag;
use crate::exchange::Transport;
use crate::methods::SUPPORTED_VERSIONS;
use crate::rpc::{self, RpcError};
use crate::state::State;
use crate::Args;
use session::Sessions;

/// Largest request body; larger ones get 413.
const MAX_BODY: usize = 64 * 1024 * 1024;
/// Two workers: an inline call that takes a while (`big`) never stalls every request.
const WORKERS: usize = 2;

/// What every handler shares.
struct Shared {
    state: Arc<State>,
    sessions: Arc<Sessions>,
    /// Numbers the stateless-era requests (each is a client of its own).
    stateless_requests: AtomicU64,
}

/// Serves until the process is killed (signals keep their default effect: a test's kill
/// ends the fixture at once) or a tool exits it.
pub fn serve(args: Args, pid: u32, addr: SocketAddr) -> io::Result<()> {
    let name = args.name.clone();
    let sessions = Arc::new(Sessions::new(args.garbage_on_start));
    let transport = Arc::clone(&sessions) as Arc<dyn Transport>;
    // In the stateless era a client cancels a request by closing its connection: the server
    // must notice at once, not only when it next writes.
    let half_closed = args.era == EraFlag::Session;
    let state = Arc::new(State::new(args, pid, transport));
    let shared = web::Data::new(Shared {
        state,
        sessions,
        stateless_requests: AtomicU64::new(0),
    });
    actix_web::rt::System::new().block_on(async move {
        let server = HttpServer::new(move || app(shared.clone()))
            .workers(WORKERS)
            .disable_signals()
            .shutdown_timeout(0)
            .h1_allow_half_closed(half_closed)
            .bind(addr)?;
        let bound = server.addrs().first().copied().unwrap_or(addr);
        eprintln!("manifold-fixture {name} listening on {bound}");
        server.run().await
    })
}

fn app(
    shared: web::Data<Shared>,
) -> App<
    impl actix_web::dev::ServiceFactory<
        actix_web::dev::ServiceRequest,
        Config = (),
        Response = actix_web::dev::ServiceResponse,
        Error = actix_web::Error,
        InitError = (),
    >,
> {
    App::new()
        .app_data(shared)
        .app_data(web::PayloadConfig::new(MAX_BODY))
        .service(
            web::resource("/mcp")
                .route(web::post().to(streamable::post))
                .route(web::get().to(streamable::get))
                .route(web::delete().to(streamable::delete)),
        )
        .service(web::resource("/sse").route(web::get().to(legacy::open)))
        .service(web::resource("/fault").route(web::post().to(fault::switch)))
        .service(web::resource("/messages").route(web::post().to(legacy::post)))
}

/// Checks every request passes: loopback `Host` and `Origin` (a web page the user visits
/// must not reach a local server through DNS rebinding), and a protocol version the
/// fixture speaks in `MCP-Protocol-Version`.
fn check(req: &HttpRequest) -> Result<(), HttpResponse> {
    check_origin(req)?;
    check_version(req.headers())
}

/// Loopback `Host` and `Origin` only (every era).
fn check_origin(req: &HttpRequest) -> Result<(), HttpResponse> {
    let headers = req.headers();
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !is_loopback_host(host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                &format!("Host {host:?} is not a loopback address"),
            ));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = origin
            .strip_prefix("http://")
            .or_else(|| origin.strip_prefix("https://"));
        if !host.is_some_and(is_loopback_host) {
            return Err(refuse(
                StatusCode::FORBIDDEN,
                &format!("Origin {origin:?} is not a loopback origin"),
            ));
        }
    }
    Ok(())
}

/// A session-era protocol version in `MCP-Protocol-Version`, if there is the header.
fn check_version(headers: &HeaderMap) -> Result<(), HttpResponse> {
    let Some(version) = headers.get("mcp-protocol-version") else {
        return Ok(());
    };
    let version = version.to_str().unwrap_or_default();
    if SUPPORTED_VERSIONS.contains(&version) {
        Ok(())
    } else {
        Err(refuse(
            StatusCode::BAD_REQUEST,
            &format!("unsupported MCP-Protocol-Version {version:?}"),
        ))
    }
}

/// `localhost`, `127.0.0.1` or `[::1]` (any loopback address), with or without a port.
fn is_loopback_host(host: &str) -> bool {
    let (name, port) = match host.strip_prefix('[') {
        Some(v6) => match v6.split_once(']') {
            Some((addr, "")) => (addr, None),
            Some((addr, rest)) => (addr, Some(rest.strip_prefix(':').unwrap_or(rest))),
            None => return false,
        },
        None => match host.split_once(':') {
            Some((name, port)) => (name, Some(port)),
            None => (host, None),
        },
    };
    let port_ok =
        port.is_none_or(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()));
    port_ok
        && (name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok_and(|ip| ip.is_loopback()))
}

/// The request's `traceparent` header (the `trace_context` tool reports it).
fn traceparent(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
}

/// The request's `Authorization` header (the `trace_context` tool reports it).
fn authorization(req: &HttpRequest) -> Option<&str> {
    req.headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
}

/// 405 for a GET or DELETE the stateless era has no use for: with `--era stateless` every
/// one, with `dual` one without `Mcp-Session-Id`.
fn without_session(req: &HttpRequest, era: EraFlag) -> Option<HttpResponse> {
    let refused = match era {
        EraFlag::Session => false,
        EraFlag::Stateless => true,
        EraFlag::Dual => !req.headers().contains_key("mcp-session-id"),
    };
    refused.then(|| {
        let mut response = refuse(
            StatusCode::METHOD_NOT_ALLOWED,
            "2026-07-28 has no session: only POST is served here",
        );
        response
            .headers_mut()
            .insert(header::ALLOW, header::HeaderValue::from_static("POST"));
        response
    })
}

/// An HTTP error whose body is a JSON-RPC error without id.
fn refuse(status: StatusCode, message: &str) -> HttpResponse {
    rpc_error(status, RpcError::new(-32600, message))
}

fn rpc_error(status: StatusCode, error: RpcError) -> HttpResponse {
    HttpResponse::build(status)
        .content_type("application/json")
        .body(rpc::response(&Value::Null, &Err(error)))
}

/// An SSE response carrying what arrives on `events` until its sender is dropped. `guard`
/// lives as long as the response (the HTTP+SSE session ends with its stream).
fn sse(events: UnboundedReceiver<Bytes>, guard: Option<legacy::EndOnDrop>) -> HttpResponse {
    let body = futures::stream::unfold((events, guard), |(mut events, guard)| async move {
        let event = events.recv().await?;
        Some((Ok::<_, Infallible>(event), (events, guard)))
    });
    HttpResponse::Ok()
        .content_type("text/event-stream")
        .insert_header((header::CACHE_CONTROL, "no-cache"))
        .streaming(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_hosts() {
        for ok in [
            "localhost",
            "LOCALHOST:80",
            "127.0.0.1:8080",
            "127.0.0.1",
            "[::1]:3000",
            "[::1]",
        ] {
            assert!(is_loopback_host(ok), "{ok}");
        }
        for bad in [
            "evil.example.com",
            "evil.example.com:80",
            "localhost.evil.example",
            "10.0.0.1:80",
            "127.0.0.1:x",
            "127.0.0.1:",
            "[::1]x",
            "[::2]:1",
            "",
        ] {
            assert!(!is_loopback_host(bad), "{bad}");
        }
    }
}
