//! A small REST service on loopback, the upstream of the `openapi` scenario:
//! `manifold-load --serve-rest` answers `GET /items/{id}?verbose=BOOL` with a JSON item, as a
//! service a converted tool calls. Its description is `DESCRIPTION`; `RestClient` calls it
//! directly over one keep-alive connection, the baseline Manifold is measured against.
//!
//! It listens on 127.0.0.1 with a port of the OS's choosing (found in /proc like any server's),
//! a thread per connection, and is ended by SIGTERM like the others.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::target::HttpReader;
use crate::{floor, mcp};

/// The service's OpenAPI description: one operation, `getItem`.
pub const DESCRIPTION: &str = r##"{
  "openapi": "3.0.3",
  "info": {"title": "items", "version": "1"},
  "paths": {
    "/items/{id}": {
      "get": {
        "operationId": "getItem",
        "summary": "One item by id",
        "parameters": [
          {"name": "id", "in": "path", "required": true, "schema": {"type": "integer"}},
          {"name": "verbose", "in": "query", "schema": {"type": "boolean"}}
        ],
        "responses": {"200": {"description": "the item", "content": {"application/json": {
          "schema": {"$ref": "#/components/schemas/Item"}}}}}
      }
    }
  },
  "components": {"schemas": {"Item": {"type": "object", "properties": {
    "id": {"type": "integer"}, "name": {"type": "string"}, "price": {"type": "number"},
    "tags": {"type": "array", "items": {"type": "string"}}}}}}
}"##;

/// The tool's arguments and the request they make.
pub const ARGUMENTS: &str = r#"{"id":7,"verbose":true}"#;
pub const PATH: &str = "/items/7?verbose=true";
/// The JSON body of every answer (the id is always 7 in the scenario).
pub const ITEM: &str = r#"{"id":7,"name":"hammer","price":12.5,"tags":["tools","hand"]}"#;

/// Serves until killed (see [`floor::serve_each`]).
pub fn serve() -> Result<()> {
    floor::serve_each("rest", |line, _, out| respond(line, out))
}

/// The item for `GET /items/7...`; 404 for anything else.
fn respond(request_line: &str, out: &mut Vec<u8>) {
    let target = request_line.split(' ').nth(1).unwrap_or("");
    let found = request_line.starts_with("GET ") && target.starts_with("/items/7");
    let (status, body) = if found {
        ("200 OK", ITEM)
    } else {
        ("404 Not Found", r#"{"message":"no such item"}"#)
    };
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_bytes());
    out.extend_from_slice(b"\r\ncontent-type: application/json\r\ncontent-length: ");
    mcp::write_u64(out, body.len() as u64);
    out.extend_from_slice(b"\r\n\r\n");
    out.extend_from_slice(body.as_bytes());
}

/// A direct HTTP client of the service on one keep-alive connection.
pub struct RestClient {
    writer: TcpStream,
    reader: HttpReader<TcpStream>,
    request: Vec<u8>,
    body: Vec<u8>,
}

impl RestClient {
    pub fn connect(addr: SocketAddr, timeout: Duration) -> Result<Self> {
        let stream =
            TcpStream::connect(addr).with_context(|| format!("cannot connect to {addr}"))?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let request =
            format!("GET {PATH} HTTP/1.1\r\nhost: {addr}\r\naccept: application/json\r\n\r\n")
                .into_bytes();
        Ok(Self {
            writer: stream.try_clone()?,
            reader: HttpReader::new(stream),
            request,
            body: Vec::new(),
        })
    }

    /// One request, its answer read whole and checked.
    pub fn call(&mut self) -> Result<()> {
        self.writer.write_all(&self.request)?;
        self.body.clear();
        let head = self.reader.read(&mut self.body)?;
        if head.status != 200 || self.body != ITEM.as_bytes() {
            bail!(
                "the service answered {}: {}",
                head.status,
                mcp::excerpt(&self.body)
            );
        }
        Ok(())
    }

    /// Up to `count` calls one at a time, stopping early at `limit`; nanoseconds each.
    pub fn timed_calls(&mut self, count: usize, limit: Duration) -> Result<Vec<u64>> {
        let mut samples = Vec::with_capacity(count);
        let deadline = Instant::now() + limit;
        for _ in 0..count {
            let sent = Instant::now();
            self.call()?;
            let done = Instant::now();
            samples.push(u64::try_from((done - sent).as_nanos()).unwrap_or(u64::MAX));
            if done >= deadline {
                break;
            }
        }
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_the_item_and_404_otherwise() {
        let mut out = Vec::new();
        respond("GET /items/7?verbose=true HTTP/1.1", &mut out);
        let text = String::from_utf8(out.clone()).unwrap();
        assert!(
            text.starts_with("HTTP/1.1 200 OK\r\n") && text.ends_with(ITEM),
            "{text}"
        );
        assert!(text.contains(&format!("content-length: {}\r\n", ITEM.len())));
        out.clear();
        respond("GET /other HTTP/1.1", &mut out);
        assert!(out.starts_with(b"HTTP/1.1 404"));
        let doc: serde_json::Value = serde_json::from_str(DESCRIPTION).unwrap();
        assert_eq!(doc["paths"]["/items/{id}"]["get"]["operationId"], "getItem");
    }
}
