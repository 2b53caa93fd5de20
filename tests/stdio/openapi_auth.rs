//! OpenAPI upstreams with security schemes: each scheme's configured value goes where the
//! description says (header, query, cookie, `Authorization`), and an operation whose scheme
//! has no value is a tool error naming it, the service never asked.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

use manifold_testkit::process::*;
use manifold_testkit::stdio::Manifold;
use serde_json::{json, Value};

fn operation(id: &str, scheme: &str) -> Value {
    json!({"get": {"operationId": id, "security": [{scheme: []}],
        "responses": {"200": {"description": "ok",
            "content": {"application/json": {"schema": {"type": "object"}}}}}}})
}

fn description() -> Value {
    json!({
        "openapi": "3.0.3",
        "info": {"title": "vault", "version": "1"},
        "servers": [{"url": "/api"}],
        "components": {"securitySchemes": {
            "headerKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
            "queryKey": {"type": "apiKey", "in": "query", "name": "api_key"},
            "cookieKey": {"type": "apiKey", "in": "cookie", "name": "session"},
            "token": {"type": "http", "scheme": "bearer"},
            "login": {"type": "http", "scheme": "basic"},
            "partner": {"type": "apiKey", "in": "header", "name": "X-Partner"}
        }},
        "paths": {
            "/header": operation("byHeader", "headerKey"),
            "/query": operation("byQuery", "queryKey"),
            "/cookie": operation("byCookie", "cookieKey"),
            "/bearer": operation("byBearer", "token"),
            "/basic": operation("byBasic", "login"),
            "/partner": operation("byPartner", "partner")
        }
    })
}

/// Serves the description and echoes, for every request under `/api`, its path, query and the
/// credential headers it came with.
fn service() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            answer(stream);
        }
    });
    format!("http://{addr}")
}

fn answer(mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 4096];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let head = String::from_utf8_lossy(&request).into_owned();
    let target = head.split(' ').nth(1).unwrap_or("").to_owned();
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let header = |name: &str| {
        head.lines()
            .find_map(|l| {
                let (n, v) = l.split_once(':')?;
                n.eq_ignore_ascii_case(name).then(|| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let text = if path == "/openapi.json" {
        description().to_string()
    } else {
        json!({"path": path, "query": query, "x-api-key": header("x-api-key"),
               "cookie": header("cookie"), "authorization": header("authorization")})
        .to_string()
    };
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{text}",
        text.len()
    );
    let _ = stream.write_all(response.as_bytes());
}

fn config(base: &str) -> String {
    format!(
        "[upstreams.vault]\nopenapi = \"{base}/openapi.json\"\n\
         [upstreams.vault.security]\nheaderKey = \"hk-1\"\nqueryKey = \"qk 2\"\n\
         cookieKey = \"ck-3\"\ntoken = \"tok-4\"\nlogin = \"ann:pw5\"\n"
    )
}

fn echo(m: &mut Manifold, tool: &str) -> Value {
    let r = m.request("tools/call", json!({"name": tool, "arguments": {}}));
    assert_ne!(r["result"]["isError"], true, "{r}");
    r["result"]["structuredContent"].clone()
}

#[test]
fn openapi_scheme_values_go_in_the_header_query_cookie_or_authorization_the_scheme_names() {
    let base = service();
    let mut m = Manifold::ready(&config(&base));
    assert_eq!(echo(&mut m, "vault__byHeader")["x-api-key"], "hk-1");
    assert_eq!(echo(&mut m, "vault__byQuery")["query"], "api_key=qk%202");
    assert_eq!(echo(&mut m, "vault__byCookie")["cookie"], "session=ck-3");
    assert_eq!(
        echo(&mut m, "vault__byBearer")["authorization"],
        "Bearer tok-4"
    );
    // ann:pw5 in base64.
    assert_eq!(
        echo(&mut m, "vault__byBasic")["authorization"],
        "Basic YW5uOnB3NQ=="
    );
}

#[test]
fn openapi_operation_whose_scheme_has_no_value_is_a_tool_error_naming_it() {
    let base = service();
    let mut m = Manifold::ready(&config(&base));
    let r = m.request(
        "tools/call",
        json!({"name": "vault__byPartner", "arguments": {}}),
    );
    assert_eq!(r["result"]["isError"], true, "{r}");
    let text = text_of(&r);
    assert!(text.contains("security scheme partner"), "{r}");
}

#[test]
fn check_says_which_openapi_schemes_have_no_value() {
    let base = service();
    let dir = TempDir::new("openapi-auth-check");
    let config = dir.write("c.toml", &config(&base));
    let (code, out, err) = run_manifold(&["check", "--config", config.to_str().unwrap()], &[]);
    assert_eq!(code, 0, "{out}{err}");
    assert!(
        out.contains("security scheme partner: not configured"),
        "{out}"
    );
    assert!(!out.contains("headerKey: not configured"), "{out}");
}
