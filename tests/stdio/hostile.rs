//! A hostile or buggy host: every class of bad input gets the exact error code and id it
//! should, the session goes on serving (a ping and a real call afterwards), no upstream is
//! restarted that should not be, and no process is left behind.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use manifold_testkit::process::*;

/// `calc` exposes only `add`, as `calc__sum` (the demo's filter); `alpha` is a plain fixture.
/// Both record their pids, so restarts and leftovers can be counted.
fn config(dir: &TempDir, server: &str) -> String {
    let pids = dir.path().join("pids");
    let pids = pids.to_str().unwrap();
    format!(
        "[server]\n{server}\n\n{}\n[upstreams.calc.tools]\ninclude = [\"add\"]\nrename = {{ add = \"calc__sum\" }}\n\n{}",
        fixture_upstream("calc", &["--name", "calc", "--pid-file", pids]),
        fixture_upstream("alpha", &["--name", "alpha", "--pid-file", pids]),
    )
}

fn start(server: &str) -> (Manifold, std::path::PathBuf) {
    let dir = TempDir::new("hostile");
    let text = config(&dir, server);
    let path = dir.write("manifold.toml", &text);
    let pids = dir.path().join("pids");
    let mut m = Manifold::start_with(&["serve", "--config", path.to_str().unwrap()], dir);
    let init = m.initialize();
    assert!(init.get("result").is_some(), "initialize failed: {init}");
    (m, pids)
}

/// The line's answer: the next message, which must carry `id`.
fn answer(m: &mut Manifold, line: &str, id: Value) -> Value {
    m.send_raw(line);
    let r = m.recv();
    assert_eq!(r["id"], id, "answer to {line}: {r}");
    r
}

fn expect_error(m: &mut Manifold, line: &str, id: Value, code: i64, says: &str) {
    let r = answer(m, line, id);
    assert_eq!(error_code(&r), code, "{line}: {r}");
    let message = r["error"]["message"].as_str().unwrap_or_default();
    assert!(
        message.contains(says),
        "{line}: {message:?} should say {says:?}"
    );
}

/// The session still answers a ping and forwards a real call.
fn still_serving(m: &mut Manifold) {
    assert!(m.request("ping", json!({})).get("result").is_some());
    let r = m.call("calc__sum", json!({"a": 2, "b": 3}));
    assert_eq!(text_of(&r), "5", "{r}");
}

/// Every upstream was started once (none restarted); after Manifold exits, none is left.
fn ends_cleanly(mut m: Manifold, pids: &Path) {
    let launched = read_pids(pids);
    assert_eq!(
        launched.len(),
        2,
        "upstreams were restarted: {launched:?}\n{}",
        m.stderr()
    );
    assert_eq!(m.close(), Some(0), "{}", m.stderr());
    wait_gone(&launched);
}

#[test]
fn duplicate_members_never_get_around_the_tool_filter() {
    let (mut m, pids) = start("");
    for (id, line) in [
        (
            "k11",
            r#"{"jsonrpc":"2.0","id":"k11","method":"tools/call","params":{"name":"calc__sum","name":"whoami","arguments":{}}}"#,
        ),
        (
            "k12",
            r#"{"jsonrpc":"2.0","id":"k12","method":"tools/call","params":{"name":"calc__sum","\u006eame":"whoami","arguments":{}}}"#,
        ),
        (
            "k13",
            r#"{"jsonrpc":"2.0","id":"k13","method":"resources/read","params":{"uri":"alpha+fixture://alpha/readme","uri":"fixture://calc/readme"}}"#,
        ),
        (
            "k14",
            r#"{"jsonrpc":"2.0","id":"k14","method":"completion/complete","params":{"ref":{"type":"ref/prompt","name":"alpha__greet","name":"x"},"argument":{"name":"n","value":"v"}}}"#,
        ),
    ] {
        expect_error(&mut m, line, json!(id), -32602, "appears twice");
    }
    // The tool the filter hides stays hidden under every spelling.
    let r = m.call("calc__whoami", json!({}));
    assert_eq!(error_code(&r), -32602, "{r}");
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn values_an_upstream_cannot_parse_are_refused_at_the_door() {
    // A request that reached an upstream unable to parse it would hang for this long.
    let (mut m, pids) = start("request_timeout_ms = 600000");
    let deep = format!(
        r#"{{"jsonrpc":"2.0","id":"n4","method":"tools/call","params":{{"name":"alpha__echo","arguments":{{"text":"x","deep":{}1{}}}}}}}"#,
        "[".repeat(124),
        "]".repeat(124)
    );
    // Past 128 levels too (the depth a recursive parser stops at): the id is read all the same.
    let deeper = format!(
        r#"{{"jsonrpc":"2.0","id":"n5","method":"tools/call","params":{{"name":"alpha__echo","arguments":{{"text":"hi","deep":{}1{}}}}}}}"#,
        "[".repeat(1000),
        "]".repeat(1000)
    );
    let started = Instant::now();
    for (id, line, says) in [
        ("n1", r#"{"jsonrpc":"2.0","id":"n1","method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"x","x":1e400}}}"#.to_owned(), "range of a double"),
        ("n2", r#"{"jsonrpc":"2.0","id":"n2","method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"\ud800"}}}"#.to_owned(), "lone surrogate"),
        ("n3", r#"{"jsonrpc":"2.0","id":"n3","method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"x","\udfff":1}}}"#.to_owned(), "lone surrogate"),
        ("n4", deep, "nested more than 64 levels"),
        ("n5", deeper, "nested more than 64 levels"),
    ] {
        expect_error(&mut m, &line, json!(id), -32602, says);
    }
    assert!(
        started.elapsed() < WAIT,
        "refusals must not wait for an upstream"
    );
    // A surrogate pair is fine, and a large but finite number too.
    let r = m.call("alpha__echo", json!({"text": "\u{1F600}", "n": 1e300}));
    assert_eq!(text_of(&r), "\u{1F600}");
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn an_upstream_error_without_id_reaches_the_one_request_in_flight() {
    let (mut m, pids) = start("request_timeout_ms = 600000");
    let r = m.call("alpha__null_id_error", json!({}));
    assert_eq!(error_code(&r), -32700, "{r}");
    m.assert_logged("without id");
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn log_levels_are_validated() {
    let (mut m, pids) = start("");
    for level in [json!("loud"), json!(""), json!(3)] {
        let r = m.request("logging/setLevel", json!({ "level": level }));
        assert_eq!(error_code(&r), -32602, "{level}: {r}");
    }
    let r = m.request("logging/setLevel", json!({}));
    assert_eq!(error_code(&r), -32602, "{r}");
    let r = m.request("logging/setLevel", json!({"level": "warning"}));
    assert_eq!(r["result"], json!({}), "{r}");
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn an_oversize_answer_fails_only_its_request() {
    // A tight limit on alpha's answers; a slow call is in flight meanwhile.
    let dir = TempDir::new("oversize");
    let pids = dir.path().join("pids");
    let text = format!(
        "{}max_message_bytes = 100000\n",
        fixture_upstream(
            "alpha",
            &["--name", "alpha", "--pid-file", pids.to_str().unwrap()]
        )
    );
    let path = dir.write("manifold.toml", &text);
    let mut m = Manifold::start_with(&["serve", "--config", path.to_str().unwrap()], dir);
    m.initialize();
    let first = text_of(&m.call("alpha__whoami", json!({})));
    let slow = m.send_request(
        "tools/call",
        json!({"name": "alpha__sleep", "arguments": {"ms": 300}}),
    );
    let r = m.call("alpha__big", json!({"bytes": 200_000}));
    assert_eq!(error_code(&r), -32012, "{r}");
    assert_eq!(r["error"]["data"]["limit"], json!(100_000), "{r}");
    assert!(
        r["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_message_bytes"),
        "{r}"
    );
    let slow = m.response(&json!(slow));
    assert!(slow.get("result").is_some(), "the bystander failed: {slow}");
    assert_eq!(
        text_of(&m.call("alpha__whoami", json!({}))),
        first,
        "alpha was restarted"
    );
    assert_eq!(
        text_of(&m.call("alpha__big", json!({"bytes": 1000}))).len(),
        1000
    );
    assert_eq!(read_pids(&pids).len(), 1, "{}", m.stderr());
    assert_eq!(m.close(), Some(0));
    wait_gone(&read_pids(&pids));
}

#[test]
fn batches_are_accepted_only_under_2025_03_26() {
    let (mut m, pids) = start("");
    // Negotiated 2025-06-18 (the harness's version): batches are refused.
    expect_error(
        &mut m,
        r#"[{"jsonrpc":"2.0","id":"b0","method":"ping"}]"#,
        Value::Null,
        -32600,
        "batch",
    );
    still_serving(&mut m);
    ends_cleanly(m, &pids);

    let dir = TempDir::new("batch");
    let text = config(&dir, "");
    let pids = dir.path().join("pids");
    let path = dir.write("manifold.toml", &text);
    let mut m = Manifold::start_with(&["serve", "--config", path.to_str().unwrap()], dir);
    let init = m.request(
        "initialize",
        json!({"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}),
    );
    assert_eq!(init["result"]["protocolVersion"], "2025-03-26", "{init}");
    m.send_raw(
        r#"[{"jsonrpc":"2.0","method":"notifications/initialized"},{"jsonrpc":"2.0","id":"b1","method":"ping"},{"jsonrpc":"2.0","id":"b2","method":"tools/call","params":{"name":"calc__sum","arguments":{"a":1,"b":1}}},{"jsonrpc":"2.0","id":"b3","method":"nope"},{"x":1}]"#,
    );
    let batch = m.recv();
    let answers = batch
        .as_array()
        .unwrap_or_else(|| panic!("not a batch: {batch}"));
    assert_eq!(answers.len(), 4, "{batch}");
    let by_id = |id: Value| answers.iter().find(|a| a["id"] == id).cloned();
    assert_eq!(by_id(json!("b1")).unwrap()["result"], json!({}));
    assert_eq!(text_of(&by_id(json!("b2")).unwrap()), "2");
    assert_eq!(error_code(&by_id(json!("b3")).unwrap()), -32601);
    assert_eq!(error_code(&by_id(Value::Null).unwrap()), -32600);
    // An empty batch is one error, not an array.
    expect_error(&mut m, "[]", Value::Null, -32600, "empty batch");
    // A batch of notifications gets no answer at all.
    m.send_raw(r#"[{"jsonrpc":"2.0","method":"notifications/initialized"}]"#);
    assert_eq!(m.request("ping", json!({}))["result"], json!({}));
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn wrong_types_and_shapes_get_the_right_code_and_keep_the_id() {
    let (mut m, pids) = start("");
    expect_error(
        &mut m,
        r#"{"jsonrpc":2.0,"id":"w1","method":"ping"}"#,
        json!("w1"),
        -32600,
        "jsonrpc",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w2","method":42}"#,
        json!("w2"),
        -32600,
        "method",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w3","method":"tools/list","params":[]}"#,
        json!("w3"),
        -32602,
        "params must be an object",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w4","method":"tools/call","params":{"name":5}}"#,
        json!("w4"),
        -32602,
        "\"name\" must be a string",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w5","method":"tools/call","params":{"arguments":{}}}"#,
        json!("w5"),
        -32602,
        "missing \"name\"",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w6","method":"resources/read","params":{"uri":["x"]}}"#,
        json!("w6"),
        -32602,
        "\"uri\" must be a string",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"w7","method":"tools/list","params":{"cursor":7}}"#,
        json!("w7"),
        -32602,
        "\"cursor\" must be a string",
    );
    // Not UTF-8, even in a member Manifold ignores: a parse error, whose id cannot be trusted.
    m.send_raw_bytes(b"{\"jsonrpc\":\"2.0\",\"id\":\"u1\",\"method\":\"ping\",\"x\":\"\xff\"}");
    let r = m.recv();
    assert_eq!(
        (error_code(&r), r["id"].clone()),
        (-32700, Value::Null),
        "{r}"
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"\ud800","method":"ping"}"#,
        Value::Null,
        -32600,
        "lone surrogate",
    );
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn initialize_params_are_checked_for_type() {
    let dir = TempDir::new("init-types");
    let text = config(&dir, "");
    let pids = dir.path().join("pids");
    let path = dir.write("manifold.toml", &text);
    let mut m = Manifold::start_with(&["serve", "--config", path.to_str().unwrap()], dir);
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"i1","method":"initialize","params":["2025-06-18"]}"#,
        json!("i1"),
        -32602,
        "params must be an object",
    );
    expect_error(
        &mut m,
        r#"{"jsonrpc":"2.0","id":"i2","method":"initialize","params":{"protocolVersion":20250618,"capabilities":{}}}"#,
        json!("i2"),
        -32602,
        "\"protocolVersion\" must be a string",
    );
    // Refusals do not use up the one initialize.
    assert!(m.initialize().get("result").is_some());
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn a_cancel_matches_the_request_id_by_value() {
    let (mut m, pids) = start("");
    m.send_raw(r#"{"jsonrpc":"2.0","id":"s2","method":"tools/call","params":{"name":"alpha__sleep","arguments":{"ms":20000}}}"#);
    m.send_raw(r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":"\u0073\u0032","reason":"changed my mind"}}"#);
    eventually("the upstream hears the cancel", || {
        text_of(&m.call("alpha__cancelled_count", json!({}))) == "1"
    });
    assert!(
        !m.sees_within(Duration::from_millis(300), |v| v["id"] == json!("s2")),
        "a cancelled request must get no answer"
    );
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn errors_name_what_the_host_used() {
    let (mut m, pids) = start("");
    let r = m.request(
        "resources/read",
        json!({"uri": "alpha+fixture://alpha/nope"}),
    );
    assert_eq!(error_code(&r), -32002, "{r}");
    assert_eq!(
        r["error"]["data"]["uri"], "alpha+fixture://alpha/nope",
        "{r}"
    );
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}

#[test]
fn an_oversize_message_is_answered_with_its_own_id() {
    let (mut m, pids) = start("max_message_bytes = 4096");
    let big = "x".repeat(10_000);
    let line = format!(
        r#"{{"jsonrpc":"2.0","id":"big1","method":"tools/call","params":{{"name":"alpha__echo","arguments":{{"text":"{big}"}}}}}}"#
    );
    expect_error(&mut m, &line, json!("big1"), -32600, "over the limit");
    // The id is found at the end too (some writers put it last).
    let line = format!(
        r#"{{"params":{{"name":"alpha__echo","arguments":{{"text":"{big}"}}}},"method":"tools/call","jsonrpc":"2.0","id":7}}"#
    );
    expect_error(&mut m, &line, json!(7), -32600, "over the limit");
    still_serving(&mut m);
    ends_cleanly(m, &pids);
}
