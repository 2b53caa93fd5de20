//! A host that writes its whole first exchange at once, as a shell pipe does: requests that
//! come after `initialize` wait for its answer and are then served in order.

use serde_json::{json, Value};

use manifold_testkit::process::*;

#[test]
fn requests_pipelined_behind_initialize_are_served_after_it_in_order() {
    let mut m = Manifold::start(&two_fixtures());
    let lines = [
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"sh","version":"1"}}}"#,
        r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#,
        r#"{"jsonrpc":"2.0","id":2,"method":"tools/list"}"#,
        r#"{"jsonrpc":"2.0","id":3,"method":"tools/call","params":{"name":"alpha__echo","arguments":{"text":"hi"}}}"#,
        r#"{"jsonrpc":"2.0","id":4,"method":"ping"}"#,
    ];
    // One write, as `printf ... | manifold serve` makes it.
    m.send_raw(&lines.join("\n"));
    // `initialize` is answered first; what followed it is served after it (a forwarded call
    // is answered when its upstream answers, so a ping may overtake it).
    let init = m.recv();
    assert_eq!(init["id"], json!(1), "{init}");
    assert!(init.get("result").is_some(), "{init}");
    let mut answers: Vec<Value> = (0..3).map(|_| m.recv()).collect();
    answers.sort_by_key(|a| a["id"].as_u64());
    let ids: Vec<&Value> = answers.iter().map(|a| &a["id"]).collect();
    assert_eq!(ids, [&json!(2), &json!(3), &json!(4)], "{answers:?}");
    for answer in &answers {
        assert!(answer.get("result").is_some(), "{answer}");
    }
    let tools = answers[0]["result"]["tools"].as_array().unwrap();
    assert!(
        tools.iter().any(|t| t["name"] == "alpha__echo"),
        "{tools:?}"
    );
    assert_eq!(text_of(&answers[1]), "hi");
    assert_eq!(m.close(), Some(0), "{}", m.stderr());
}
