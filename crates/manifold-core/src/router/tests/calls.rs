//! A forwarded call's life: progress relayed under the host's token before the answer, and a
//! cancellation (by the host, or by the end of its session) told to the upstream.

use std::sync::{Arc, Mutex};

use manifold_upstream::scripted::{Message, Script, Upstream};
use serde_json::{json, Value};

use super::{echo_script, run, tool, Harness};

/// An upstream whose `report` tool sends two progress notifications, under the progress token
/// it was given, before its answer.
fn reporter() -> Script {
    Script::new()
        .tool(tool("report"))
        .on("tools/call", |msg: &Message, up: &Upstream| {
            let token = msg.params()["_meta"]["progressToken"].to_string();
            up.progress(&token, 1.0);
            up.progress(&token, 2.0);
            up.result(msg.id().unwrap(), json!({"content": []}));
        })
}

#[test]
fn progress_comes_back_under_the_hosts_token_before_the_answer() {
    run(async {
        let h = Harness::start(vec![("alpha", reporter())]).await;
        let host = h.initialized(json!({})).await;
        let params = json!({"name": "alpha__report", "arguments": {},
                            "_meta": {"progressToken": "host-token"}});
        let answer = host.request("p1", "tools/call", params).await;
        assert_eq!(answer["result"], json!({"content": []}), "{answer}");

        let sent = h.ups.wait_for(0, "tools/call", |_| true).await.unwrap();
        let upstream_token = sent.params()["_meta"]["progressToken"].to_string();
        assert_eq!(
            Some(upstream_token.as_str()),
            sent.id(),
            "the upstream's id as its token"
        );

        let seen = host.seen();
        let progress: Vec<&Value> = seen
            .iter()
            .filter(|m| m["method"] == "notifications/progress")
            .collect();
        assert_eq!(
            progress,
            [
                &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "host-token", "progress": 1.0}}),
                &json!({"jsonrpc": "2.0", "method": "notifications/progress",
                        "params": {"progressToken": "host-token", "progress": 2.0}}),
            ]
        );
        let at = |pick: &dyn Fn(&Value) -> bool| seen.iter().position(pick).unwrap();
        assert!(
            at(&|m| m["method"] == "notifications/progress") < at(&|m| m["id"] == "p1"),
            "progress first: {seen:?}"
        );
        h.stop().await;
    });
}

/// [`echo_script`] whose upstream answers a call it was told was cancelled anyway, as a
/// real one may when the cancellation crosses its answer.
fn answers_late() -> Script {
    echo_script().on("notifications/cancelled", |msg, up| {
        let id = msg.params()["requestId"].to_string();
        up.result(
            &id,
            json!({"content": [{"type": "text", "text": "too late"}]}),
        );
    })
}

#[test]
fn a_cancelled_call_is_cancelled_upstream_and_never_answered() {
    run(async {
        let h = Harness::start(vec![("alpha", answers_late())]).await;
        let host = h.initialized(json!({})).await;
        let params = json!({"name": "alpha__slow", "arguments": {}});
        host.send(json!({"jsonrpc": "2.0", "id": "c1", "method": "tools/call", "params": params}));
        let sent = h.ups.wait_for(0, "tools/call", |_| true).await.unwrap();

        host.send(
            json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": "c1", "reason": "changed my mind"}}),
        );
        let cancelled = h
            .ups
            .wait_for(0, "notifications/cancelled", |_| true)
            .await
            .unwrap();
        assert_eq!(
            Some(cancelled.params()["requestId"].to_string().as_str()),
            sent.id(),
            "the upstream's id: {}",
            cancelled.line()
        );
        assert_eq!(cancelled.params()["reason"], "changed my mind");

        // The late answer was read before this call was sent: had it reached the host, it
        // would be there before this answer.
        let params = json!({"name": "alpha__echo", "arguments": {"text": "after"}});
        let after = host.request("c2", "tools/call", params).await;
        assert_eq!(after["result"]["content"][0]["text"], "after");
        let answered: Vec<Value> = host
            .seen()
            .into_iter()
            .filter(|m| m["id"] == "c1")
            .collect();
        assert!(answered.is_empty(), "the host was answered: {answered:?}");
        h.stop().await;
    });
}

#[test]
fn a_session_that_ends_cancels_its_calls_upstream() {
    run(async {
        let h = Harness::start(vec![("alpha", echo_script())]).await;
        let staying = h.initialized(json!({})).await;
        let leaving = h.initialized(json!({})).await;
        let slow = json!({"name": "alpha__slow", "arguments": {}});
        let ids: Arc<Mutex<Vec<String>>> = Arc::default();
        for (host, id) in [(&staying, "kept"), (&leaving, "gone")] {
            let request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
                                 "params": slow.clone()});
            host.send(request);
            let known = ids.lock().unwrap().clone();
            let sent = h
                .ups
                .wait_for(0, "tools/call", |m| {
                    !known.iter().any(|k| Some(k.as_str()) == m.id())
                })
                .await
                .unwrap();
            ids.lock().unwrap().push(sent.id().unwrap().to_owned());
        }
        let gone = ids.lock().unwrap()[1].clone();

        h.router.end_session(leaving.session.id(), "the host left");
        let cancelled = h
            .ups
            .wait_for(0, "notifications/cancelled", |_| true)
            .await
            .expect("the upstream was told");
        assert_eq!(cancelled.params()["requestId"].to_string(), gone);
        assert_eq!(cancelled.params()["reason"], "the host left");
        // Only the session that ended lost its call.
        let cancellations = h.ups.received(0).into_iter();
        let told = cancellations.filter(|m| m.method() == Some("notifications/cancelled"));
        assert_eq!(told.count(), 1);
        assert_eq!(h.router.in_flight(0), 1);
        h.stop().await;
    });
}
