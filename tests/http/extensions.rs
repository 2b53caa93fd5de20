//! Extensions Manifold does not know, over HTTP: offered to a session-era host and to a
//! stateless one from the one upstream that declares each, their methods forwarded to it
//! (a stateless-era upstream over Streamable HTTP and a session-era one over stdio), URIs
//! mapped both ways.

use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const WIDGETS: &str = "com.example/widgets";
const GADGETS: &str = "com.example/gadgets";

/// A stateless-era upstream over HTTP declaring widgets, a session-era one over stdio
/// declaring gadgets, and Manifold serving both over HTTP.
fn serve() -> (FixtureHttp, Server) {
    let remote = FixtureHttp::start(
        0,
        &[
            "--name",
            "remote",
            "--era",
            "stateless",
            "--extension",
            &format!("{WIDGETS}={{\"color\":\"red\"}}"),
            "--extension-method",
            "widgets/echo",
        ],
    );
    let config = format!(
        "[upstreams.remote]\nurl = {:?}\n\n{}",
        remote.url("/mcp"),
        fixture_upstream(
            "local",
            &[
                "--name",
                "local",
                "--extension",
                GADGETS,
                "--extension-method",
                "gadgets/echo"
            ]
        ),
    );
    (remote, Server::start(&config))
}

#[test]
fn a_session_host_is_offered_each_extension_and_its_methods_reach_their_upstream() {
    let (_remote, server) = serve();
    let mut host = server.host();
    let init: Value = host.initialize("2025-11-25").json().unwrap();
    let extensions = &init["result"]["capabilities"]["extensions"];
    assert_eq!(extensions[WIDGETS], json!({"color": "red"}), "{init}");
    assert_eq!(extensions[GADGETS], json!({}), "{init}");

    let r = host.request("widgets/echo", json!({"uri": "remote+widget://w/1"}));
    assert_eq!(r["result"]["server"], "remote", "{r}");
    assert_eq!(r["result"]["params"]["uri"], "widget://w/1", "{r}");
    assert_eq!(r["result"]["uri"], "remote+widget://w/1", "{r}");
    let r = host.request("gadgets/echo", json!({"uri": "local+gadget://g"}));
    assert_eq!(r["result"]["server"], "local", "{r}");
    assert_eq!(r["result"]["params"]["uri"], "gadget://g", "{r}");
    let none = host.request("nobody/serves", json!({}));
    assert_eq!(code(&none), -32601, "{none}");
}

#[test]
fn a_stateless_host_discovers_the_extensions_and_calls_them() {
    let (_remote, server) = serve();
    let post = |id: u64, method: &str, params: Value| -> Value {
        let mut params = params;
        params["_meta"] = json!({
            "io.modelcontextprotocol/protocolVersion": "2026-07-28",
            "io.modelcontextprotocol/clientCapabilities": {},
        });
        let body = json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params});
        let r = client()
            .post(server.url("/mcp"))
            .header("content-type", "application/json")
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2026-07-28")
            .header("mcp-method", method)
            .body(body.to_string())
            .send()
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{method}");
        messages_of(r)
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .expect("an answer")
    };
    let d = post(1, "server/discover", json!({}));
    let extensions = &d["result"]["capabilities"]["extensions"];
    assert_eq!(extensions[WIDGETS], json!({"color": "red"}), "{d}");
    assert_eq!(extensions[GADGETS], json!({}), "{d}");
    let r = post(2, "widgets/echo", json!({"uri": "remote+widget://w/2"}));
    assert_eq!(r["result"]["server"], "remote", "{r}");
    assert_eq!(r["result"]["params"]["uri"], "widget://w/2", "{r}");
    assert_eq!(r["result"]["uri"], "remote+widget://w/2", "{r}");
    assert_eq!(r["result"]["resultType"], "complete", "{r}");
    let r = post(3, "gadgets/echo", json!({}));
    assert_eq!(r["result"]["server"], "local", "{r}");
}
