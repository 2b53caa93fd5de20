//! Interop: the `rmcp` client (the official Rust SDK, 3.x) drives the real `manifold` binary
//! over stdio, with Manifold fronting two instances of the in-repo fixture server (`alpha` and
//! `beta`). Proves that a third-party client library accepts Manifold's handshake, merged lists,
//! routed calls, rewritten resource URIs and errors.

// A test reports failure by panicking.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::fs::File;
use std::future::Future;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, CallToolResult, ClientConfig, ErrorCode, GetPromptRequestParams,
    ProtocolVersion, ReadResourceRequestParams, ResourceContents,
};
use rmcp::service::{RoleClient, RunningService, ServiceError};
use rmcp::transport::TokioChildProcess;
use rmcp::ServiceExt;
use serde_json::{json, Map, Value};

use manifold_testkit::process::{two_fixtures, TempDir};

/// The whole of one test, processes included, must finish within this.
const TEST_TIMEOUT: Duration = Duration::from_secs(60);

/// A fresh directory with the config and Manifold's stderr; removed on drop, after printing
/// that stderr if the test is failing.
struct Scratch(TempDir);

impl Scratch {
    fn new(tag: &str) -> Self {
        Scratch(TempDir::new(&format!("interop-rmcp-{tag}")))
    }

    fn stderr_path(&self) -> PathBuf {
        self.0.path().join("manifold.stderr")
    }

    /// The config: `[upstreams.alpha]` and `[upstreams.beta]`, each the fixture under its
    /// key's name.
    fn write_config(&self) -> PathBuf {
        self.0.write("manifold.toml", &two_fixtures())
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            let log = std::fs::read_to_string(self.stderr_path()).unwrap_or_default();
            let tail = &log[log.len().saturating_sub(8000)..];
            eprintln!("--- manifold stderr ---\n{tail}");
        }
    }
}

/// Starts `manifold serve --config <tmp>` under the rmcp client with the given handshake.
async fn connect<S>(scratch: &Scratch, client: S) -> RunningService<RoleClient, S>
where
    S: rmcp::ClientHandler,
{
    let config = scratch.write_config();
    let mut cmd = tokio::process::Command::new(manifold_testkit::process::manifold_bin());
    cmd.arg("serve").arg("--config").arg(&config);
    let stderr = File::create(scratch.stderr_path()).expect("create stderr file");
    let (transport, _) = TokioChildProcess::builder(cmd)
        .stderr(Stdio::from(stderr))
        .spawn()
        .expect("spawn manifold");
    client
        .serve(transport)
        .await
        .unwrap_or_else(|e| panic!("rmcp client could not initialize with Manifold: {e}"))
}

/// The `initialize` the rmcp client sends for the session-based era (2025-11-25).
fn handshake_client() -> ClientConfig {
    let mut info = ClientConfig::default();
    info.protocol_version = ProtocolVersion::V_2025_11_25;
    info
}

async fn within<F: Future>(what: &str, f: F) -> F::Output {
    tokio::time::timeout(TEST_TIMEOUT, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out after {TEST_TIMEOUT:?}"))
}

fn args(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        other => panic!("arguments must be an object, got {other}"),
    }
}

fn text_of(result: &CallToolResult) -> String {
    let texts: Vec<&str> = result
        .content
        .iter()
        .filter_map(|c| c.as_text().map(|t| t.text.as_str()))
        .collect();
    assert!(!texts.is_empty(), "no text content in {result:?}");
    texts.concat()
}

fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

fn expect_mcp_error<T: std::fmt::Debug>(what: &str, r: Result<T, ServiceError>) -> rmcp::ErrorData {
    match r {
        Err(ServiceError::McpError(e)) => e,
        Err(other) => panic!("{what}: expected a JSON-RPC error response, got {other:?}"),
        Ok(v) => panic!("{what}: expected a JSON-RPC error response, got a result: {v:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_client_through_manifold_to_two_fixtures() {
    let scratch = Scratch::new("main");
    within("rmcp interop", async {
        let client = connect(&scratch, handshake_client()).await;

        // Handshake: Manifold identifies itself and accepts the offered session-era version.
        let info = client.peer_info().expect("peer info after initialize");
        let server_info = info
            .server_info
            .as_ref()
            .expect("serverInfo in initialize result");
        assert_eq!(server_info.name, "manifold", "serverInfo: {server_info:?}");
        assert_eq!(info.protocol_version, ProtocolVersion::V_2025_11_25);
        assert!(
            info.capabilities.tools.is_some(),
            "tools capability: {:?}",
            info.capabilities
        );
        assert!(
            info.capabilities.prompts.is_some(),
            "prompts capability: {:?}",
            info.capabilities
        );
        assert!(
            info.capabilities.resources.is_some(),
            "resources capability: {:?}",
            info.capabilities
        );

        // Tools of both upstreams, namespaced (list_all_tools follows nextCursor).
        let tools = client.list_all_tools().await.expect("tools/list");
        let names: Vec<&str> = tools.iter().map(|t| t.name.as_ref()).collect();
        for want in ["alpha__echo", "alpha__add", "beta__echo", "beta__add"] {
            assert!(
                names.contains(&want),
                "{want} missing from tools/list: {names:?}"
            );
        }
        let mut unique = names.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "duplicate tool names: {names:?}");
        for name in &names {
            assert!(
                valid_name(name),
                "tool name {name:?} is not ^[A-Za-z0-9_-]{{1,64}}$"
            );
            assert!(
                name.starts_with("alpha__") || name.starts_with("beta__"),
                "tool {name:?} carries no upstream prefix"
            );
        }
        let echo = tools
            .iter()
            .find(|t| t.name == "alpha__echo")
            .expect("alpha__echo");
        assert!(
            echo.input_schema
                .get("properties")
                .and_then(|p| p.get("text"))
                .is_some(),
            "alpha__echo's input schema lost its `text` property: {:?}",
            echo.input_schema
        );

        // Calls routed to each upstream.
        let result = client
            .call_tool(
                CallToolRequestParams::new("alpha__echo")
                    .with_arguments(args(json!({ "text": "hello via rmcp ✓" }))),
            )
            .await
            .expect("call alpha__echo");
        assert_ne!(
            result.is_error,
            Some(true),
            "alpha__echo failed: {result:?}"
        );
        assert_eq!(text_of(&result), "hello via rmcp ✓");

        let result = client
            .call_tool(
                CallToolRequestParams::new("beta__add")
                    .with_arguments(args(json!({ "a": 19, "b": 23 }))),
            )
            .await
            .expect("call beta__add");
        assert_ne!(result.is_error, Some(true), "beta__add failed: {result:?}");
        assert!(
            text_of(&result).contains("42"),
            "beta__add(19, 23): {result:?}"
        );

        // Prompts.
        let prompts = client.list_all_prompts().await.expect("prompts/list");
        let prompt_names: Vec<&str> = prompts.iter().map(|p| p.name.as_str()).collect();
        for want in ["alpha__greet", "beta__greet"] {
            assert!(
                prompt_names.contains(&want),
                "{want} missing from prompts/list: {prompt_names:?}"
            );
        }
        let greet = prompts
            .iter()
            .find(|p| p.name == "beta__greet")
            .expect("beta__greet");
        assert!(
            greet.arguments.iter().flatten().any(|a| a.name == "name"),
            "beta__greet lost its `name` argument: {greet:?}"
        );
        let prompt = client
            .get_prompt(
                GetPromptRequestParams::new("beta__greet")
                    .with_arguments(args(json!({ "name": "Ferris" }))),
            )
            .await
            .expect("get beta__greet");
        let prompt_text: String = prompt
            .messages
            .iter()
            .filter_map(|m| m.content.as_text().map(|t| t.text.clone()))
            .collect();
        assert!(
            prompt_text.contains("Ferris"),
            "beta__greet ignored its argument: {prompt:?}"
        );
        assert!(
            prompt_text.contains("beta"),
            "beta__greet was not answered by the beta fixture: {prompt:?}"
        );

        // Resources, with URIs rewritten as `{key}+{uri}` both ways.
        let resources = client.list_all_resources().await.expect("resources/list");
        let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).collect();
        for want in ["alpha+fixture://alpha/readme", "beta+fixture://beta/readme"] {
            assert!(
                uris.contains(&want),
                "{want} missing from resources/list: {uris:?}"
            );
        }
        let exposed = "alpha+fixture://alpha/readme";
        let read = client
            .read_resource(ReadResourceRequestParams::new(exposed))
            .await
            .expect("read alpha+fixture://alpha/readme");
        assert!(!read.contents.is_empty(), "no contents: {read:?}");
        for content in &read.contents {
            match content {
                ResourceContents::TextResourceContents { uri, text, .. } => {
                    assert_eq!(uri, exposed, "contents[].uri must be the exposed URI");
                    assert!(text.contains("alpha"), "readme of alpha: {text:?}");
                }
                other => panic!("expected text contents, got {other:?}"),
            }
        }

        // Unknown tools are a JSON-RPC -32602, and the session survives them.
        for name in ["alpha__no_such_tool", "gamma__echo", "echo"] {
            let e = expect_mcp_error(
                &format!("call {name}"),
                client
                    .call_tool(
                        CallToolRequestParams::new(name)
                            .with_arguments(args(json!({ "text": "x" }))),
                    )
                    .await,
            );
            assert_eq!(e.code, ErrorCode::INVALID_PARAMS, "call {name}: {e:?}");
        }
        // Unknown resources are an error too.
        for uri in [
            "alpha+fixture://alpha/no-such-thing",
            "gamma+fixture://alpha/readme",
            "fixture://alpha/readme",
        ] {
            let e = expect_mcp_error(
                &format!("read {uri}"),
                client
                    .read_resource(ReadResourceRequestParams::new(uri))
                    .await,
            );
            assert!(e.code.0 < 0, "read {uri}: {e:?}");
        }
        let result = client
            .call_tool(
                CallToolRequestParams::new("beta__echo")
                    .with_arguments(args(json!({ "text": "still here" }))),
            )
            .await
            .expect("call beta__echo after errors");
        assert_eq!(text_of(&result), "still here");

        client.cancel().await.expect("shut down the rmcp client");
    })
    .await;
}

/// rmcp's default client offers its newest version (2026-07-28, which has no `initialize`) in
/// `initialize`; a session-era server must answer with a version it supports, and rmcp then
/// goes on with the session-based lifecycle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_rmcp_client_negotiates_a_session_era_version() {
    let scratch = Scratch::new("default");
    within("rmcp default handshake", async {
        let client = connect(&scratch, ()).await;
        let info = client.peer_info().expect("peer info after initialize");
        assert!(
            info.protocol_version.has_initialize(),
            "Manifold answered initialize with {}, a version without the initialize handshake",
            info.protocol_version
        );
        assert_eq!(
            info.protocol_version,
            ProtocolVersion::LATEST_WITH_INITIALIZE,
            "Manifold should counter-offer its newest supported version"
        );
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().any(|t| t.name == "beta__echo"),
            "tools: {tools:?}"
        );
        client.cancel().await.expect("shut down the rmcp client");
    })
    .await;
}

/// Starts `manifold serve --listen 127.0.0.1:0` on the two-fixture config; returns the process
/// and the URL of its Streamable HTTP endpoint.
async fn serve_http(scratch: &Scratch) -> (tokio::process::Child, String) {
    use tokio::io::AsyncBufReadExt;
    let config = scratch.write_config();
    let mut child = tokio::process::Command::new(manifold_testkit::process::manifold_bin())
        .args(["serve", "--listen", "127.0.0.1:0", "--config"])
        .arg(&config)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn manifold");
    let mut lines = tokio::io::BufReader::new(child.stderr.take().expect("stderr")).lines();
    while let Some(line) = lines.next_line().await.expect("read stderr") {
        if let Some(rest) = line.split("listening on 127.0.0.1:").nth(1) {
            let port: String = rest.chars().take_while(char::is_ascii_digit).collect();
            // Keep draining stderr so Manifold never blocks on it.
            tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
            return (child, format!("http://127.0.0.1:{port}/mcp"));
        }
    }
    panic!("manifold exited before listening");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_streamable_http_client_through_manifold() {
    use rmcp::transport::StreamableHttpClientTransport;
    let scratch = Scratch::new("http");
    within("rmcp over Streamable HTTP", async {
        let (_manifold, url) = serve_http(&scratch).await;
        let transport = StreamableHttpClientTransport::from_uri(url.as_str());
        let client = handshake_client()
            .serve(transport)
            .await
            .unwrap_or_else(|e| panic!("rmcp could not initialize over HTTP: {e}"));
        let info = client.peer_info().expect("peer info");
        assert_eq!(
            info.server_info.as_ref().map(|s| s.name.as_str()),
            Some("manifold")
        );
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(tools.iter().any(|t| t.name == "beta__echo"), "{tools:?}");
        let result = client
            .call_tool(
                CallToolRequestParams::new("beta__echo")
                    .with_arguments(args(json!({"text": "rmcp over http"}))),
            )
            .await
            .expect("tools/call");
        assert_eq!(text_of(&result), "rmcp over http");
        // Several requests at once over the same session.
        let calls = (0..8).map(|i| {
            let client = client.clone();
            async move {
                let r = client
                    .call_tool(
                        CallToolRequestParams::new("alpha__add")
                            .with_arguments(args(json!({"a": i, "b": 1}))),
                    )
                    .await
                    .expect("tools/call");
                text_of(&r)
            }
        });
        let sums = futures::future::join_all(calls).await;
        assert_eq!(sums, (1..=8).map(|n| n.to_string()).collect::<Vec<_>>());
        let err = expect_mcp_error(
            "unknown tool over HTTP",
            client
                .call_tool(CallToolRequestParams::new("alpha__nope"))
                .await,
        );
        assert_eq!(err.code, ErrorCode::INVALID_PARAMS);
        client.cancel().await.expect("close the session");
    })
    .await;
}

/// rmcp's client in the stateless era (2026-07-28: `server/discover`, then self-contained
/// requests), over stdio and over Streamable HTTP: what it discovers, a merged list, a routed
/// call and a resource read, each answered as that revision has it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmcp_stateless_client_through_manifold() {
    use rmcp::service::{ClientLifecycleMode, ClientServiceExt};
    use rmcp::transport::StreamableHttpClientTransport;
    let stateless = || ClientLifecycleMode::Discover {
        preferred_versions: vec![ProtocolVersion::V_2026_07_28],
    };
    async fn exercise<S: rmcp::ClientHandler>(client: &RunningService<RoleClient, S>, how: &str) {
        let info = client.peer_info().expect("what the server said of itself");
        assert_eq!(
            info.protocol_version,
            ProtocolVersion::V_2026_07_28,
            "{how}"
        );
        let tools = client.list_all_tools().await.expect("tools/list");
        assert!(
            tools.iter().any(|t| t.name == "alpha__echo"),
            "{how}: {tools:?}"
        );
        assert!(
            tools.iter().any(|t| t.name == "beta__echo"),
            "{how}: {tools:?}"
        );
        let result = client
            .call_tool(
                CallToolRequestParams::new("beta__echo")
                    .with_arguments(args(json!({"text": "stateless rmcp"}))),
            )
            .await
            .expect("tools/call");
        assert_eq!(text_of(&result), "stateless rmcp", "{how}");
        let read = client
            .read_resource(ReadResourceRequestParams::new(
                "alpha+fixture://alpha/readme",
            ))
            .await
            .expect("resources/read");
        assert!(!read.contents.is_empty(), "{how}: {read:?}");
        let err = expect_mcp_error(
            how,
            client
                .read_resource(ReadResourceRequestParams::new("alpha+fixture://alpha/none"))
                .await,
        );
        assert_eq!(
            err.code,
            ErrorCode::INVALID_PARAMS,
            "{how}: not found is -32602"
        );
    }
    let scratch = Scratch::new("stateless");
    within("rmcp in the stateless era", async {
        // Over stdio.
        let config = scratch.write_config();
        let mut cmd = tokio::process::Command::new(manifold_testkit::process::manifold_bin());
        cmd.arg("serve").arg("--config").arg(&config);
        let stderr = File::create(scratch.stderr_path()).expect("create stderr file");
        let (transport, _) = TokioChildProcess::builder(cmd)
            .stderr(Stdio::from(stderr))
            .spawn()
            .expect("spawn manifold");
        let client = ClientConfig::default()
            .serve_with_lifecycle(transport, stateless())
            .await
            .unwrap_or_else(|e| panic!("rmcp could not discover Manifold over stdio: {e}"));
        exercise(&client, "stdio").await;
        client.cancel().await.expect("close stdio");
        // Over Streamable HTTP.
        let (_manifold, url) = serve_http(&scratch).await;
        let transport = StreamableHttpClientTransport::from_uri(url.as_str());
        let client = ClientConfig::default()
            .serve_with_lifecycle(transport, stateless())
            .await
            .unwrap_or_else(|e| panic!("rmcp could not discover Manifold over HTTP: {e}"));
        exercise(&client, "Streamable HTTP").await;
        client.cancel().await.expect("close HTTP");
    })
    .await;
}
