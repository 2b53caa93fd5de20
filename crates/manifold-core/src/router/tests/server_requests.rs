//! An upstream's request to its client during a call (the session era's multi round-trip):
//! passed to a host that declared the capability, with the host's answer passed back; refused
//! on the host's behalf when it did not declare it.

use std::sync::{Arc, Mutex};

use manifold_upstream::scripted::{Script, Upstream};
use serde_json::{json, Value};

use super::{run, tool, upstream_got, Harness};

/// The call an upstream is working on: where to answer it, and its id.
type Working = Arc<Mutex<Option<(Upstream, String)>>>;

/// An upstream whose `ask` tool asks its client for a sampling (request id `"s1"`) and keeps
/// the call unanswered in `working`.
fn asks(working: &Working) -> Script {
    let working = Arc::clone(working);
    Script::new()
        .tool(tool("ask"))
        .on("tools/call", move |msg, up| {
            let params = json!({"messages": [], "maxTokens": 5});
            up.request("\"s1\"", "sampling/createMessage", params);
            *working.lock().unwrap() = Some((up.clone(), msg.id().unwrap().to_owned()));
        })
}

fn call_ask() -> Value {
    json!({"jsonrpc": "2.0", "id": "a1", "method": "tools/call",
           "params": {"name": "alpha__ask", "arguments": {}}})
}

#[test]
fn a_sampling_request_reaches_a_host_that_declared_it_and_its_answer_goes_back() {
    run(async {
        let working: Working = Arc::default();
        let h = Harness::start(vec![("alpha", asks(&working))]).await;
        let host = h.initialized(json!({"sampling": {}})).await;
        host.send(call_ask());
        let asked = host
            .wait_for(|m| m["method"] == "sampling/createMessage")
            .await;
        assert_eq!(
            asked["params"],
            json!({"messages": [], "maxTokens": 5}),
            "{asked}"
        );

        let sampled = json!({"role": "assistant", "model": "m",
                             "content": {"type": "text", "text": "sampled"}});
        host.send(json!({"jsonrpc": "2.0", "id": asked["id"], "result": sampled}));
        let back = upstream_got(&h.ups, 0, |m| m.id() == Some("\"s1\"")).await;
        let back: Value = serde_json::from_str(back.line()).unwrap();
        assert_eq!(
            back["result"], sampled,
            "under the upstream's own id: {back}"
        );

        let (up, id) = working.lock().unwrap().take().unwrap();
        up.result(&id, json!({"content": [{"type": "text", "text": "done"}]}));
        let answer = host.answer("a1").await;
        assert_eq!(answer["result"]["content"][0]["text"], "done", "{answer}");
        h.stop().await;
    });
}

#[test]
fn a_sampling_request_for_a_host_that_did_not_declare_it_is_refused_upstream() {
    run(async {
        let working: Working = Arc::default();
        let h = Harness::start(vec![("alpha", asks(&working))]).await;
        let host = h.initialized(json!({})).await;
        host.send(call_ask());
        let refused = upstream_got(&h.ups, 0, |m| m.id() == Some("\"s1\"")).await;
        let refused: Value = serde_json::from_str(refused.line()).unwrap();
        assert_eq!(refused["error"]["code"], -32601, "{refused}");

        let asked: Vec<Value> = host
            .seen()
            .into_iter()
            .filter(|m| m["method"] == "sampling/createMessage")
            .collect();
        assert!(asked.is_empty(), "the host was asked: {asked:?}");
        let (up, id) = working.lock().unwrap().take().unwrap();
        up.result(&id, json!({"content": []}));
        let answer = host.answer("a1").await;
        assert_eq!(answer["result"], json!({"content": []}), "{answer}");
        h.stop().await;
    });
}
