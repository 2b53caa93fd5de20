//! The scripted wire through a real actor: a call answered, progress relayed, a
//! cancellation recorded, a list change refreshed, an exit restarted.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use serde_json::json;

use super::{start, Message, Script, Upstream, Upstreams};
use crate::pending::{Exchange, Finish, Forward, ServerRequest};

/// A host request of session 7 with id `"h1"`: what it hears goes to a channel.
struct Host(Mutex<mpsc::Sender<String>>);

impl Exchange for Host {
    fn progress(&self, params: &str) {
        let _ = self.0.lock().unwrap().send(format!("progress {params}"));
    }

    fn finish(self: Box<Self>, outcome: Finish<'_>) {
        let text = match outcome {
            Finish::Result(r) => r.to_owned(),
            Finish::Error(e) => format!("error {e}"),
            Finish::Failed(e) => format!("failed {e}"),
        };
        let _ = self.0.lock().unwrap().send(text);
    }

    fn session(&self) -> u64 {
        7
    }

    fn is(&self, session: u64, host_id: &str) -> bool {
        session == 7 && host_id == "\"h1\""
    }

    fn server_request(&self, _request: ServerRequest) {}

    fn related(&self, _line: &[u8]) {}
}

fn echo() -> Script {
    Script::new()
        .tool(json!({"name": "echo", "inputSchema": {"type": "object"}}))
        .tool(json!({"name": "slow", "inputSchema": {"type": "object"}}))
        .on("tools/call", |msg: &Message, up: &Upstream| {
            let params = msg.params();
            // `slow` is never answered.
            if params["name"] == "echo" {
                let token = params["_meta"]["progressToken"].to_string();
                up.progress(&token, 0.5);
                let text = params["arguments"]["text"].clone();
                let content = json!({"content": [{"type": "text", "text": text}]});
                up.result(msg.id().unwrap(), content);
            }
        })
}

async fn started(script: Script) -> Upstreams {
    let ups = start(vec![("up", script)]).await.unwrap();
    let conn = ups.handles[0].connected(Duration::from_secs(10)).await;
    assert!(conn.is_some(), "it started");
    ups
}

/// Forwards a `tools/call` of `name` as the host request `"h1"` of session 7.
fn call(ups: &Upstreams, name: &str) -> mpsc::Receiver<String> {
    let conn = ups.handles[0].connection().unwrap();
    let (tx, rx) = mpsc::channel();
    let id = conn.next_id();
    let line = format!(
        "{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{\"name\":\"{name}\",\"arguments\":{{\"text\":\"hi\"}},\"_meta\":{{\"progressToken\":{id}}}}}}}\n"
    );
    let fwd = Forward {
        exchange: Box::new(Host(Mutex::new(tx))),
        progress_token: Some("\"host-token\"".into()),
        timeout: None,
    };
    conn.forward(
        crate::outbound::Outbound::request(id, "tools/call", line),
        fwd,
    );
    rx
}

async fn next(rx: &Arc<Mutex<mpsc::Receiver<String>>>) -> String {
    let rx = Arc::clone(rx);
    tokio::task::spawn_blocking(move || rx.lock().unwrap().recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .unwrap()
}

#[test]
fn a_call_is_answered_with_its_progress_first() {
    actix::System::new().block_on(async {
        let ups = started(echo()).await;
        let catalog = ups.hub.catalog();
        assert_eq!(catalog.slice(0).unwrap().tools.len(), 2);
        let handshake: Vec<String> = ups
            .received(0)
            .iter()
            .filter_map(|m| m.method().map(str::to_owned))
            .collect();
        assert_eq!(handshake[..2], ["initialize", "notifications/initialized"]);

        let rx = Arc::new(Mutex::new(call(&ups, "echo")));
        assert_eq!(
            next(&rx).await,
            r#"progress {"progress":0.5,"progressToken":"host-token"}"#
        );
        assert_eq!(
            next(&rx).await,
            r#"{"content":[{"text":"hi","type":"text"}]}"#
        );
        ups.shutdown().await;
    });
}

#[test]
fn a_cancelled_call_is_told_to_the_upstream() {
    actix::System::new().block_on(async {
        let ups = started(echo()).await;
        let rx = call(&ups, "slow");
        let sent = ups.wait_for(0, "tools/call", |_| true).await.unwrap();
        let conn = ups.handles[0].connection().unwrap();
        assert!(conn.cancel_for(7, "\"h1\"", Some("the host gave up")));
        let cancelled = ups.wait_for(0, "notifications/cancelled", |_| true).await.unwrap();
        assert_eq!(
            cancelled.params(),
            json!({"requestId": sent.params()["_meta"]["progressToken"], "reason": "the host gave up"})
        );
        assert_eq!(cancelled.params()["requestId"].to_string(), sent.id().unwrap());
        // The host hears nothing more: it asked for this.
        assert!(rx.try_recv().is_err());
        assert_eq!(conn.in_flight(), 0);
        ups.shutdown().await;
    });
}
