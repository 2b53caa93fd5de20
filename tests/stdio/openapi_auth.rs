//! OpenAPI upstreams with security schemes: each scheme's configured value goes where the
//! description says (header, query, cookie, `Authorization`), and an operation whose scheme
//! has no value is a tool error naming it, the service never asked.

use std::net::TcpStream;

use manifold_testkit::http::{Host, Server};
use manifold_testkit::process::*;
use manifold_testkit::rest::{read_request, reply, serve};
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
            "partner": {"type": "apiKey", "in": "header", "name": "X-Partner"},
            "machine": {"type": "oauth2", "flows": {"clientCredentials": {
                "tokenUrl": "/token", "scopes": {"vault:read": "read"}}}}
        }},
        "paths": {
            "/header": operation("byHeader", "headerKey"),
            "/query": operation("byQuery", "queryKey"),
            "/cookie": operation("byCookie", "cookieKey"),
            "/bearer": operation("byBearer", "token"),
            "/basic": operation("byBasic", "login"),
            "/partner": operation("byPartner", "partner"),
            "/machine": operation("byMachine", "machine")
        }
    })
}

/// The access token the test's token endpoint issues for a client credentials grant.
const ISSUED: &str = "cc-token-7";

/// Serves the description, a token endpoint at `/token` (client credentials only), and echoes,
/// for every request under `/api`, its path, query and the credential headers it came with.
fn service() -> String {
    serve(answer)
}

fn answer(mut stream: TcpStream) {
    let Some(request) = read_request(&mut stream) else {
        return;
    };
    let (path, query, body) = (request.path(), request.query(), &request.body);
    let header = |name: &str| request.header(name).unwrap_or_default();
    let text = if path == "/openapi.json" {
        description().to_string()
    } else if path == "/token" {
        if !body.contains("grant_type=client_credentials") {
            return respond(
                &mut stream,
                "400 Bad Request",
                r#"{"error":"unsupported_grant_type"}"#,
            );
        }
        json!({"access_token": ISSUED, "token_type": "Bearer", "expires_in": 3600}).to_string()
    } else {
        json!({"path": path, "query": query, "x-api-key": header("x-api-key"),
               "cookie": header("cookie"), "authorization": header("authorization")})
        .to_string()
    };
    respond(&mut stream, "200 OK", &text);
}

fn respond(stream: &mut TcpStream, status: &str, text: &str) {
    reply(stream, status, "application/json", text);
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

#[test]
fn openapi_oauth2_scheme_gets_the_token_of_the_upstreams_client_credentials() {
    let base = service();
    let config = format!(
        "{}[upstreams.vault.auth]\nmode = \"client_credentials\"\nclient_id = \"manifold\"\n\
         client_secret = \"cc-secret\"\ntoken_endpoint = \"{base}/token\"\n",
        config(&base)
    );
    let mut m = Manifold::ready(&config);
    let seen = echo(&mut m, "vault__byMachine");
    assert_eq!(seen["authorization"], format!("Bearer {ISSUED}"), "{seen}");
    // The other schemes keep their own values beside it.
    assert_eq!(
        echo(&mut m, "vault__byBearer")["authorization"],
        "Bearer tok-4"
    );
}

#[test]
fn a_teams_security_header_replaces_that_schemes_value_for_its_callers_only() {
    let base = service();
    let config = format!(
        "[teams.red]\napi_keys = [\"red-key-0123456789abcdef\"]\n\
         headers.vault = {{ \"security.token\" = \"red-tok\" }}\n\n\
         [teams.blue]\napi_keys = [\"blue-key-0123456789abcdef\"]\n\n{}",
        config(&base)
    );
    let server = Server::start(&config);
    let mut red = server.ready_host_with_key("red-key-0123456789abcdef");
    let mut blue = server.ready_host_with_key("blue-key-0123456789abcdef");
    let call = |host: &mut Host| {
        let r = host.request(
            "tools/call",
            json!({"name": "vault__byBearer", "arguments": {}}),
        );
        assert_ne!(r["result"]["isError"], true, "{r}");
        r["result"]["structuredContent"].clone()
    };
    // Interleaved: neither team's call goes out with the other's value.
    for round in 0..2 {
        assert_eq!(
            call(&mut red)["authorization"],
            "Bearer red-tok",
            "round {round}"
        );
        assert_eq!(
            call(&mut blue)["authorization"],
            "Bearer tok-4",
            "round {round}"
        );
    }
    // Only the overridden scheme changes: red's other schemes keep the upstream's values.
    let r = red.request(
        "tools/call",
        json!({"name": "vault__byHeader", "arguments": {}}),
    );
    assert_eq!(r["result"]["structuredContent"]["x-api-key"], "hk-1", "{r}");
    assert!(
        !server.stderr().contains("red-tok"),
        "a scheme value in the log"
    );
}
