//! A minimal HTTP/1.1 client for Manifold's own admin address (`manifold reload`,
//! `manifold login`, `manifold connections`, `manifold revoke`): one
//! request, `Connection: close`, the status and body read back. The admin address is plain
//! HTTP on a trusted network (usually loopback), so nothing more is needed.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use anyhow::Context as _;

/// How long the whole exchange may take: a reload that starts upstreams answers at once
/// (they start in the background), so this is generous.
const TIMEOUT: Duration = Duration::from_secs(30);

/// POSTs an empty body to `path` at `addr`; returns the status code and the body.
pub fn post(addr: SocketAddr, path: &str, token: Option<&str>) -> anyhow::Result<(u16, String)> {
    request(addr, "POST", path, token, None)
}

/// Sends one request (`body`: JSON text) to `path` at `addr`; returns the status code and the
/// body.
pub fn request(
    addr: SocketAddr,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&str>,
) -> anyhow::Result<(u16, String)> {
    let mut stream = TcpStream::connect_timeout(&addr, TIMEOUT)
        .with_context(|| format!("cannot reach the admin address {addr}"))?;
    stream.set_read_timeout(Some(TIMEOUT))?;
    stream.set_write_timeout(Some(TIMEOUT))?;
    let auth = token.map_or_else(String::new, |t| format!("Authorization: Bearer {t}\r\n"));
    let (kind, body) = match body {
        Some(body) => ("Content-Type: application/json\r\n", body),
        None => ("", ""),
    };
    let request = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}{kind}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(request.as_bytes())?;
    let mut response = Vec::new();
    stream
        .read_to_end(&mut response)
        .with_context(|| format!("no answer from {addr}"))?;
    parse(&response).with_context(|| format!("{addr} did not answer as HTTP/1.1"))
}

/// The status and body of a response with a `Content-Length` (or read to its end).
fn parse(response: &[u8]) -> anyhow::Result<(u16, String)> {
    let text = String::from_utf8_lossy(response);
    let (head, body) = text
        .split_once("\r\n\r\n")
        .context("the response has no end of headers")?;
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .context("the response has no status")?;
    Ok((status, body.to_owned()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn status_and_body_are_read() {
        let r = b"HTTP/1.1 422 Unprocessable Entity\r\ncontent-length: 5\r\n\r\nnope!";
        assert_eq!(super::parse(r).unwrap(), (422, "nope!".to_owned()));
        assert!(super::parse(b"garbage").is_err());
    }
}
