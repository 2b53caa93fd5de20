//! A tool call forwarded: the upstream's own name and id on the way in, the host's id on the
//! way out, and the params otherwise as the host sent them.

use serde_json::json;

use super::{calls_received, echo_script, run, Harness};

#[test]
fn a_call_reaches_its_upstream_under_its_own_name_and_id_and_returns_under_the_hosts() {
    run(async {
        let h = Harness::start(vec![("alpha", echo_script()), ("beta", echo_script())]).await;
        let host = h.initialized(json!({})).await;
        let params = json!({
            "name": "alpha__echo",
            "arguments": {"text": "hi", "deep": {"list": [1, 2.5, null, true], "é": "\u{1}"}},
            "_meta": {"example.com/note": "kept"},
        });
        let answer = host.request("host-1", "tools/call", params.clone()).await;
        assert_eq!(
            answer,
            json!({"jsonrpc": "2.0", "id": "host-1",
                   "result": {"content": [{"type": "text", "text": "hi"}]}})
        );

        let sent = h.ups.wait_for(0, "tools/call", |_| true).await.unwrap();
        assert_ne!(sent.id(), Some("\"host-1\""), "the upstream's own id");
        let mut expected = params;
        expected["name"] = json!("echo");
        assert_eq!(
            sent.params(),
            expected,
            "as the host sent it, but for the name"
        );
        assert_eq!(calls_received(&h.ups, 1), 0, "beta was not asked");
        h.stop().await;
    });
}
