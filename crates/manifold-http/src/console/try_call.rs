//! A tool call made from the console: sent through the router exactly as a host's
//! `tools/call` is (the team's view, limits, cache, credentials, tracing), from an in-process
//! outlet that hands the answer back, never straight to an upstream.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use manifold_core::context::Origin;
use manifold_core::outlet::Outlet;
use manifold_core::policy::Caller;
use manifold_core::router::Router;
use manifold_core::session::Session;
use manifold_telemetry::recent::TraceId;
use manifold_telemetry::trace::Carrier;
use serde_json::{json, Value};
use tokio::sync::oneshot;

/// How long past the router's own request timeout the console waits for an answer (the
/// router answers a timeout itself; this only bounds a wait that went wrong).
const GRACE: Duration = Duration::from_secs(5);

/// How the call ended, as the page shows it.
pub(super) enum Answer {
    /// The JSON-RPC response (a result or an error), as sent to a host.
    Response(Value),
    /// No answer: why.
    None(String),
}

/// Calls `tool` with `arguments` as `caller`, under the trace `trace`.
pub(super) async fn call(
    router: &Arc<Router>,
    caller: Arc<Caller>,
    tool: &str,
    arguments: Value,
    trace: TraceId,
) -> Answer {
    let request = json!({
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    });
    let line = match serde_json::to_vec(&request) {
        Ok(line) => line,
        Err(e) => return Answer::None(format!("the request could not be written: {e}")),
    };
    let (tx, rx) = oneshot::channel();
    let owner = Session::next_id();
    let origin = Origin {
        session: None,
        outlet: Arc::new(ConsoleOutlet(Mutex::new(Some(tx)))),
        trace: Some(Arc::new(carrier(trace))),
        caller: Some(caller),
        owner,
        asked: None,
    };
    let _ = router.handle_line(&origin, &line);
    drop(origin);
    let wait = router.settings().request_timeout + GRACE;
    match tokio::time::timeout(wait, rx).await {
        Ok(Ok(answer)) => match serde_json::from_slice(&answer) {
            Ok(value) => Answer::Response(value),
            Err(e) => Answer::None(format!("the answer is not JSON: {e}")),
        },
        Ok(Err(_)) => Answer::None("the call ended without an answer".to_owned()),
        Err(_) => {
            router.cancel_in_flight(owner, "the console stopped waiting");
            Answer::None(format!("no answer within {} s", wait.as_secs()))
        }
    }
}

/// A trace context under which the call's span is made: its trace id is the one the page
/// shows (and the one the recent calls keep, exported or not), under a random parent span.
fn carrier(trace: TraceId) -> Carrier {
    let mut carrier = Carrier::default();
    let span = crate::random_bytes::<8>().unwrap_or([1; 8]);
    let span: String = span.iter().map(|b| format!("{b:02x}")).collect();
    carrier.set("traceparent", format!("00-{trace}-{span}-01"));
    carrier
}

/// A new random trace id; `None` when the system's random source failed.
pub(super) fn new_trace_id() -> Option<TraceId> {
    crate::random_bytes::<16>().map(TraceId)
}

/// Where the console's call is answered: the first answer is handed over, anything else
/// (progress: the console asks for none) is dropped.
struct ConsoleOutlet(Mutex<Option<oneshot::Sender<Bytes>>>);

impl Outlet for ConsoleOutlet {
    fn answer(&self, parts: &[&[u8]]) {
        let sender = self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
        if let Some(sender) = sender {
            let _ = sender.send(Bytes::from(parts.concat()));
        }
    }

    fn notify(&self, _parts: &[&[u8]]) {}

    fn unanswered(&self) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take();
    }
}
