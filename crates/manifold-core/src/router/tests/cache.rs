//! The result cache in front of an upstream: a repeated call answered without asking it.

use serde_json::json;

use super::{calls_received, echo_script, run, Harness};

#[test]
fn a_cached_tool_is_asked_once_for_the_same_call() {
    run(async {
        let rule = r#"tool_cache.echo = { ttl = "1h" }"#;
        let h = Harness::configured(vec![("alpha", echo_script())], &[("alpha", rule)]).await;
        let host = h.initialized(json!({})).await;
        let params = json!({"name": "alpha__echo", "arguments": {"text": "same"}});
        let first = host.request("1", "tools/call", params.clone()).await;
        let second = host.request("2", "tools/call", params).await;
        assert_eq!(first["result"], second["result"], "{first} {second}");
        assert_eq!(second["result"]["content"][0]["text"], "same", "{second}");
        assert_eq!(
            calls_received(&h.ups, 0),
            1,
            "the second was answered from the cache"
        );

        // Other arguments are another entry.
        let other = json!({"name": "alpha__echo", "arguments": {"text": "other"}});
        let third = host.request("3", "tools/call", other).await;
        assert_eq!(third["result"]["content"][0]["text"], "other", "{third}");
        assert_eq!(calls_received(&h.ups, 0), 2);
        h.stop().await;
    });
}
