//! The floor of a Streamable HTTP call on this machine: `manifold-load --serve-floor` is a
//! minimal server that answers the echo call with a canned answer of the same shape from the
//! thread that read the request, with no upstream behind it. Driven by the same client as
//! Manifold and the peer, its latency is what this client, loopback TCP and one thread
//! wake-up cost, the part of every HTTP figure that no server can remove.
//!
//! It listens on 127.0.0.1 with a port of the OS's choosing (the load generator finds it in
//! /proc like any server's), and is ended by SIGTERM like the others.

use std::io::Write;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use anyhow::{Context, Result};

use crate::mcp::{self, ECHO_TEXT};
use crate::target::HttpReader;

/// Connections accepted at most, and requests per connection: every loop is bounded.
const MAX_CONNECTIONS: usize = 100_000;
const MAX_REQUESTS: usize = 100_000_000;
/// A connection with no request for this long is closed.
const IDLE: Duration = Duration::from_secs(120);

/// Serves until killed (or `MAX_CONNECTIONS` connections).
pub fn serve() -> Result<()> {
    serve_each("floor", |_, body, out| respond(body, out))
}

/// What a server writes into `out` for one request: its request line and its body.
pub type Respond = fn(&str, &[u8], &mut Vec<u8>);

/// Listens on 127.0.0.1 (a port of the OS's choosing, found in /proc like any server's) and
/// answers each request of each connection with `respond`, a thread per connection, until
/// killed or `MAX_CONNECTIONS` connections: the host reconnects after idling, and the old
/// connection may not be closed yet. `name` labels the threads and the errors.
pub fn serve_each(name: &'static str, respond: Respond) -> Result<()> {
    let listener = TcpListener::bind("127.0.0.1:0").context("cannot listen")?;
    for stream in listener.incoming().take(MAX_CONNECTIONS) {
        let stream = stream.context("accept failed")?;
        std::thread::Builder::new()
            .name(format!("{name}-conn"))
            .spawn(move || {
                if let Err(e) = connection(stream, respond) {
                    eprintln!("{name}: {e:#}");
                }
            })
            .context("cannot start a connection thread")?;
    }
    Ok(())
}

fn connection(stream: TcpStream, respond: Respond) -> Result<()> {
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(IDLE))?;
    let mut writer = stream.try_clone()?;
    let mut reader = HttpReader::new(stream);
    let (mut body, mut out) = (Vec::new(), Vec::new());
    for _ in 0..MAX_REQUESTS {
        body.clear();
        let Some(line) = reader.read_request(&mut body)? else {
            return Ok(());
        };
        out.clear();
        respond(&line, &body, &mut out);
        writer.write_all(&out)?;
    }
    Ok(())
}

/// The response to one POSTed message: 202 for a notification (no id), the initialize answer
/// with a session id, or the echo answer with the request's id.
fn respond(body: &[u8], out: &mut Vec<u8>) {
    let Some(id) = id_of(body) else {
        out.extend_from_slice(b"HTTP/1.1 202 Accepted\r\ncontent-length: 0\r\n\r\n");
        return;
    };
    let initialize = memchr::memmem::find(body, br#""method":"initialize""#).is_some();
    let mut json = Vec::with_capacity(256);
    json.extend_from_slice(br#"{"jsonrpc":"2.0","id":"#);
    mcp::write_u64(&mut json, id);
    if initialize {
        json.extend_from_slice(br#","result":{"protocolVersion":""#);
        json.extend_from_slice(mcp::PROTOCOL_VERSION.as_bytes());
        json.extend_from_slice(
            br#"","capabilities":{"tools":{}},"serverInfo":{"name":"floor","version":"0"}}}"#,
        );
    } else {
        json.extend_from_slice(br#","result":{"content":[{"type":"text","text":""#);
        json.extend_from_slice(ECHO_TEXT.as_bytes());
        json.extend_from_slice(br#""}],"isError":false}}"#);
    }
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
    if initialize {
        out.extend_from_slice(b"mcp-session-id: floor\r\n");
    }
    out.extend_from_slice(b"content-length: ");
    mcp::write_u64(out, json.len() as u64);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(&json);
}

/// The numeric id of a request written by `RequestLine` (`{"jsonrpc":"2.0","id":N,...`).
fn id_of(body: &[u8]) -> Option<u64> {
    let rest = body.strip_prefix(br#"{"jsonrpc":"2.0","id":"#)?;
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&rest[..digits]).ok()?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mcp::RequestLine;

    #[test]
    fn answers_like_a_server() {
        let mut out = Vec::new();
        respond(mcp::INITIALIZED, &mut out);
        assert!(out.starts_with(b"HTTP/1.1 202"));
        let mut req = Vec::new();
        RequestLine::echo("alpha__echo").write(41, &mut req);
        out.clear();
        respond(&req, &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        let (_, json) = text.split_once("\r\n\r\n").unwrap();
        let v: serde_json::Value = serde_json::from_str(json).unwrap();
        assert_eq!(v["id"], 41);
        assert_eq!(v["result"]["content"][0]["text"], ECHO_TEXT);
        assert!(text.contains(&format!("content-length: {}\r\n", json.len())));
        out.clear();
        respond(&mcp::handshake(), &mut out);
        let text = String::from_utf8(out).unwrap();
        assert!(text.contains("mcp-session-id: floor\r\n"), "{text}");
        assert!(text.contains(mcp::PROTOCOL_VERSION));
    }
}
