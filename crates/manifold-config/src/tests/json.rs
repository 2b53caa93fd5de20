//! Claude Desktop style JSON configurations.

use std::path::PathBuf;
use std::time::Duration;

use super::{http, json, json_err, map, stdio};
use crate::HttpKind;

/// The shape such files have in the wild: other top-level settings, and entries carrying keys
/// for other clients.
const WILD: &str = r#"{
  "globalShortcut": "Ctrl+Space",
  "preferences": {"menuBarEnabled": true},
  "mcpServers": {
    "time": {
      "type": "stdio",
      "command": "uvx",
      "args": ["mcp-server-time", "--local-timezone=${HOME}"],
      "env": {"TOKEN": "${MY_TOKEN}"},
      "cwd": "srv",
      "alwaysAllow": ["get_current_time"],
      "autoApprove": [],
      "timeout": 60
    },
    "github": {
      "command": "docker",
      "args": ["run", "-i", "ghcr.io/github/github-mcp-server"],
      "disabled": true
    },
    "remote": {"url": "https://example.com/mcp", "headers": {"Authorization": "Bearer x"}},
    "sse": {"type": "sse", "url": "https://example.com/sse"},
    "http": {"type": "streamable-http", "command": "ignored", "url": "https://x"},
    "enabled-explicitly": {"command": "e", "disabled": false, "url": null}
  }
}"#;

#[test]
fn wild_files_work_as_is() {
    let config = json(WILD).unwrap();
    let keys: Vec<_> = config.upstreams.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(
        keys,
        ["enabled-explicitly", "http", "remote", "sse", "time"]
    );
    let s = stdio(&config, 4);
    assert_eq!(s.command, "uvx");
    assert_eq!(s.args, vec!["mcp-server-time", "--local-timezone=/home/me"]);
    assert_eq!(s.env, map(&[("TOKEN", "tok-123")]));
    assert_eq!(s.cwd, Some(PathBuf::from("/etc/claude/srv")));
    // "type" says which transport; without one, a `url` alone means HTTP, tried both ways.
    let h = http(&config, 1);
    assert_eq!(
        (h.url.as_str(), h.kind),
        ("https://x", HttpKind::StreamableHttp)
    );
    let h = http(&config, 2);
    assert_eq!(
        (h.url.as_str(), h.kind),
        ("https://example.com/mcp", HttpKind::Auto)
    );
    assert_eq!(h.headers, map(&[("Authorization", "Bearer x")]));
    assert_eq!(http(&config, 3).kind, HttpKind::Sse);
    assert_eq!(
        config.skipped,
        vec![("github".to_owned(), "disabled".to_owned())]
    );
}

#[test]
fn json_entries_get_all_defaults() {
    let config = json(r#"{"mcpServers": {"My Server": {"command": "x"}}}"#).unwrap();
    assert_eq!(config.server.page_size, 1000);
    assert_eq!(config.server.max_message_bytes, 4 * 1024 * 1024);
    assert_eq!(config.server.request_timeout, Duration::from_secs(60));
    assert_eq!(config.names.separator, "__");
    assert_eq!(config.names.max_length, 64);
    let up = &config.upstreams[0];
    assert_eq!(
        (up.key.as_str(), up.prefix.as_str()),
        ("My Server", "My Server")
    );
    assert_eq!(up.max_message_bytes, 64 * 1024 * 1024);
    assert_eq!(up.restart.initial_backoff, Duration::from_millis(250));
    assert_eq!(up.restart.max_backoff, Duration::from_millis(30_000));
    assert_eq!(up.request_timeout, None);
    assert!(up.tools.include.is_empty() && up.prompts.rename.is_empty());
    assert_eq!(up.era, crate::EraChoice::Auto);
    let s = stdio(&config, 0);
    assert!(s.args.is_empty() && s.env.is_empty() && s.cwd.is_none());
}

#[test]
fn empty_server_list_is_valid() {
    let config = json(r#"{"mcpServers": {}, "other": 1}"#).unwrap();
    assert!(config.upstreams.is_empty() && config.skipped.is_empty());
}

#[test]
fn missing_or_malformed_server_list_is_an_error() {
    let (key, problem) = json_err(r#"{"globalShortcut": "x"}"#);
    assert_eq!(key, "mcpServers");
    assert!(problem.starts_with("required key is missing"), "{problem}");
    let (key, _) = json_err(r#"{"mcpServers": []}"#);
    assert_eq!(key, "mcpServers");
    let (key, _) = json_err("[]");
    assert_eq!(key, "(file)");
    let (key, problem) = json_err(r#"{"mcpServers": {"a": "npx"}}"#);
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("mcpServers.a", "expected an object with a \"command\" key")
    );
}

#[test]
fn entry_errors_name_the_key() {
    let (key, problem) = json_err(r#"{"mcpServers": {"a": {"args": []}}}"#);
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("mcpServers.a.command", "required key is missing")
    );
    let (key, problem) = json_err(r#"{"mcpServers": {"a": {"command": ""}}}"#);
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("mcpServers.a.command", "must not be empty")
    );
    let cases = [
        (r#"{"command": 1}"#, "mcpServers.a.command"),
        (r#"{"command": "x", "args": "a b"}"#, "mcpServers.a.args"),
        (r#"{"command": "x", "env": {"A": 1}}"#, "mcpServers.a.env"),
        (r#"{"command": "x", "cwd": 3}"#, "mcpServers.a.cwd"),
        (
            r#"{"command": "x", "disabled": "yes"}"#,
            "mcpServers.a.disabled",
        ),
        (r#"{"command": "x", "type": 1}"#, "mcpServers.a.type"),
        (
            r#"{"url": "http://x", "headers": ["a"]}"#,
            "mcpServers.a.headers",
        ),
    ];
    for (entry, want) in cases {
        let (key, problem) = json_err(&format!(r#"{{"mcpServers": {{"a": {entry}}}}}"#));
        assert_eq!(key, want, "{entry}");
        assert!(problem.contains("invalid type"), "{problem}");
    }
    let (key, problem) =
        json_err(r#"{"mcpServers": {"gh": {"command": "x", "env": {"T": "${GH}"}}}}"#);
    assert_eq!(key, "mcpServers.gh.env.T");
    assert_eq!(problem, "environment variable GH is not set");
    let (key, _) = json_err(r#"{"mcpServers": {"a b": {"command": "${X"}}}"#);
    assert_eq!(key, "mcpServers.\"a b\".command");
}

#[test]
fn remote_entries_are_checked() {
    let (key, problem) = json_err(r#"{"mcpServers": {"a": {"type": "http"}}}"#);
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("mcpServers.a.url", "required key is missing")
    );
    let (key, problem) =
        json_err(r#"{"mcpServers": {"a": {"type": "websocket", "url": "ws://x"}}}"#);
    assert_eq!(key, "mcpServers.a.type");
    assert!(problem.contains("\"sse\""), "{problem}");
    let (key, problem) = json_err(r#"{"mcpServers": {"a": {"url": "ftp://x"}}}"#);
    assert_eq!(key, "mcpServers.a.url");
    assert!(
        problem.contains("not an http:// or https:// URL"),
        "{problem}"
    );
    let (key, problem) =
        json_err(r#"{"mcpServers": {"a": {"url": "http://x", "headers": {"A": "${NOPE}"}}}}"#);
    assert_eq!(key, "mcpServers.a.headers.A");
    assert_eq!(problem, "environment variable NOPE is not set");
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let (key, problem) = json_err("{\n  \"mcpServers\": {,}\n}");
    assert_eq!(key, "(file)");
    assert!(
        problem.starts_with("JSON syntax error at line 2, column 18: "),
        "{problem}"
    );
    assert!(
        !problem.ends_with("column 18"),
        "position is not repeated: {problem}"
    );
    let (_, problem) = json_err("");
    assert!(
        problem.starts_with("JSON syntax error at line 1, column 0: "),
        "{problem}"
    );
}

#[test]
fn entries_may_name_the_protocol_era() {
    let config = json(
        r#"{"mcpServers": {"a": {"command": "x", "era": "session"}, "b": {"url": "http://x/mcp", "era": "stateless"}, "c": {"command": "x", "era": null}}}"#,
    )
    .unwrap();
    let eras: Vec<_> = config.upstreams.iter().map(|u| u.era.name()).collect();
    assert_eq!(eras, ["session", "stateless", "auto"]);
    let (key, problem) = json_err(r#"{"mcpServers": {"a": {"command": "x", "era": "2026"}}}"#);
    assert_eq!(key, "mcpServers.a.era");
    assert!(problem.contains("not a protocol era"), "{problem}");
    let (key, _) = json_err(r#"{"mcpServers": {"a": {"command": "x", "era": 1}}}"#);
    assert_eq!(key, "mcpServers.a.era");
}
