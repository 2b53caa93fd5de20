//! A stateless-era host (2026-07-28): no handshake, each request declares itself in `_meta`;
//! a session-era upstream serves it without seeing those declarations.

use serde_json::json;

use super::{echo_script, run, Harness};

#[test]
fn a_stateless_call_is_served_by_a_session_era_upstream_without_the_hosts_meta() {
    run(async {
        let h = Harness::start(vec![("alpha", echo_script())]).await;
        let host = h.connect();
        let params = json!({
            "name": "alpha__echo",
            "arguments": {"text": "modern"},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        });
        let answer = host.request("m1", "tools/call", params).await;
        let result = &answer["result"];
        assert_eq!(result["content"][0]["text"], "modern", "{answer}");
        assert_eq!(result["resultType"], "complete", "{answer}");
        assert_eq!(
            result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"], "manifold",
            "{answer}"
        );

        let sent = h.ups.wait_for(0, "tools/call", |_| true).await.unwrap();
        assert_eq!(
            sent.params(),
            json!({"name": "echo", "arguments": {"text": "modern"}}),
            "{}",
            sent.line()
        );
        h.stop().await;
    });
}
