//! An upstream that fails under a call: the host is told, and told whether to retry.

use manifold_upstream::scripted::Script;
use serde_json::json;

use super::{run, tool, Harness};

/// An upstream whose process exits as soon as it is called.
fn dies_when_called() -> Script {
    Script::new()
        .tool(tool("work"))
        .on("tools/call", |_, up| up.exit("it crashed"))
}

#[test]
fn an_upstream_that_dies_mid_call_fails_the_call_as_retryable() {
    run(async {
        let h = Harness::start(vec![("alpha", dies_when_called())]).await;
        let host = h.initialized(json!({})).await;
        let params = json!({"name": "alpha__work", "arguments": {}});
        let answer = host.request("d1", "tools/call", params).await;
        let error = &answer["error"];
        assert!(error["code"].is_i64(), "an error: {answer}");
        assert_eq!(error["data"]["retryable"], true, "{answer}");
        assert_eq!(error["data"]["upstream"], "alpha", "{answer}");
        h.stop().await;
    });
}
