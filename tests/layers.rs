//! Layers on the request path: a router built in this process with layers of its own, in
//! front of a real fixture upstream. A layer that must wait (as a shared quota store or a
//! cache fill will) holds only its own request, never the thread that reads the host, and a
//! layer that refuses keeps the request from the upstream.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use manifold_catalog::UpstreamDef;
use manifold_core::layer::{Check, Layer};
use manifold_core::router::{Parts, Target};
use manifold_core::{Context, Origin, Outlet, RouteError, Router, Session, Sessions, Transport};
use manifold_protocol::codes;
use manifold_upstream::{Hub, UpstreamHandle};
use serde_json::{json, Value};
use tokio::sync::{mpsc, oneshot};

/// Collects what the router sends the host.
struct Sink(mpsc::UnboundedSender<Value>);

impl Outlet for Sink {
    fn answer(&self, parts: &[&[u8]]) {
        let line = parts.concat();
        let _ = self.0.send(serde_json::from_slice(&line).unwrap());
    }
}

/// Holds calls of `alpha__sleep` until released; refuses calls of `alpha__crash`.
struct Gate {
    release: Mutex<Option<oneshot::Receiver<()>>>,
}

impl Layer for Gate {
    fn check(&self, ctx: &Context, target: &Target) -> Check {
        assert!(
            ctx.session.is_some(),
            "the layer sees the request's session"
        );
        // The tool as its upstream knows it (`params` are the host's, naming `alpha__*`).
        let tool = target.original.as_deref();
        if tool == Some("crash") {
            return Check::Refuse(RouteError::InvalidParams("refused by a layer".into()));
        }
        if tool != Some("sleep") {
            return Check::Pass;
        }
        let Some(release) = self.release.lock().unwrap().take() else {
            return Check::Pass;
        };
        Check::Wait(Box::pin(async move {
            release
                .await
                .map_err(|_| RouteError::InvalidParams("gate dropped".into()))
        }))
    }
}

fn request(id: u64, method: &str, params: Value) -> Vec<u8> {
    json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params})
        .to_string()
        .into_bytes()
}

async fn next(rx: &mut mpsc::UnboundedReceiver<Value>) -> Value {
    tokio::time::timeout(manifold_testkit::process::WAIT, rx.recv())
        .await
        .expect("an answer in time")
        .expect("the sink is open")
}

#[test]
fn a_waiting_layer_holds_only_its_own_request_and_a_refusal_never_reaches_the_upstream() {
    let toml = manifold_testkit::process::named_fixture("alpha");
    let config = manifold_config::parse_str(Path::new("layers.toml"), &toml, &|_| None).unwrap();
    let system = actix::System::new();
    system.block_on(async move {
        let defs: Arc<[UpstreamDef]> = config
            .upstreams
            .iter()
            .map(UpstreamDef::from_config)
            .collect();
        let (sessions, ending) = Sessions::new(4);
        let hub = Hub::new(defs, config.names.clone(), 1000);
        let handle = UpstreamHandle::start(
            0,
            config.upstreams[0].clone(),
            manifold_upstream::Timing {
                request: Duration::from_secs(30),
                max: Duration::from_secs(60),
            },
            Duration::from_secs(1),
            Arc::clone(&hub),
        );
        let (release_tx, release_rx) = oneshot::channel();
        let gate = Arc::new(Gate {
            release: Mutex::new(Some(release_rx)),
        });
        let router = Router::new(Parts {
            hub,
            upstreams: vec![handle.clone()],
            isolation: None,
            sessions,
            ending,
            settings: config.server.clone(),
            runtime: tokio::runtime::Handle::current(),
            layers: vec![gate],
            teams: Arc::default(),
            stdio_team: None,
            cache: None,
            released: manifold_core::router::releases(),
            discovery: Default::default(),
        });
        let (tx, mut rx) = mpsc::unbounded_channel();
        let outlet: Arc<dyn Outlet> = Arc::new(Sink(tx));
        let session = Session::new(Transport::Stdio, Arc::clone(&outlet));
        router.sessions().add(Arc::clone(&session), None).unwrap();
        let origin = Origin::new(Some(session), outlet);
        let init = json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}});
        router.handle_line(&origin, &request(1, "initialize", init));
        assert!(next(&mut rx).await.get("result").is_some());

        // The gated call waits in its layer; the next one passes it.
        let sleep = json!({"name": "alpha__sleep", "arguments": {"ms": 1}});
        router.handle_line(&origin, &request(2, "tools/call", sleep));
        let echo = json!({"name": "alpha__echo", "arguments": {"text": "not held up"}});
        router.handle_line(&origin, &request(3, "tools/call", echo));
        let answer = next(&mut rx).await;
        assert_eq!(answer["id"], 3, "{answer}");
        assert!(
            tokio::time::timeout(Duration::from_millis(200), rx.recv()).await.is_err(),
            "the gated call must still be waiting"
        );
        release_tx.send(()).unwrap();
        let answer = next(&mut rx).await;
        assert_eq!(answer["id"], 2, "{answer}");
        assert!(answer.get("result").is_some(), "{answer}");

        // A refused call never reaches the upstream (which would exit on `crash`).
        let whoami = |id| request(id, "tools/call", json!({"name": "alpha__whoami", "arguments": {}}));
        router.handle_line(&origin, &whoami(4));
        let before = next(&mut rx).await;
        router.handle_line(
            &origin,
            &request(5, "tools/call", json!({"name": "alpha__crash", "arguments": {}})),
        );
        let refused = next(&mut rx).await;
        assert_eq!(refused["id"], 5);
        assert_eq!(refused["error"]["code"], codes::INVALID_PARAMS, "{refused}");
        router.handle_line(&origin, &whoami(6));
        let after = next(&mut rx).await;
        assert_eq!(
            before["result"], after["result"],
            "the upstream was not restarted"
        );
        handle.shutdown().await;
    });
}
