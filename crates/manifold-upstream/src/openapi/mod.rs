//! OpenAPI upstreams: an HTTP service described by OpenAPI, served as an MCP server inside
//! Manifold. The connection is the one every upstream has; only its wire differs: what
//! Manifold sends goes to a thread of the upstream's own, which loads the description when the
//! connection starts, answers the handshake (session era, tools only), lists the converted
//! operations and makes a call's HTTP request, and what it answers is read as if an upstream
//! wrote it. So naming, teams, cache, limits, pins, search and traces apply unchanged.
//!
//! A description that cannot be loaded ends the connection with the reason, as a process that
//! exits would: the upstream is down (the reason in the log and in `check`), is retried with
//! backoff, and the other upstreams are not affected. A reload has the description read
//! again by the running server (`reread`), which tells of changed tools as MCP servers do.

use std::sync::{Arc, Mutex, PoisonError, Weak};

use bytes::Bytes;
use manifold_config::OpenApiConfig;
use manifold_telemetry::trace::Carrier;
use tokio::sync::mpsc;

use crate::connection::{Connection, Events, Timing, Wire};
use crate::handle::Published;
use crate::outbound::Outbound;
use crate::pipe::WriteError;

mod load;
mod reread;
mod security;
mod send;
mod serve;

pub use load::OpenApiReport;
pub(crate) use reread::REREAD;
pub(crate) use security::team_security;

/// What reaches the upstream's thread: a line, with the trace context Manifold wrote into it
/// (the parent of the call's HTTP request span), so that the line is not read for it again.
pub(crate) struct Inbound {
    /// The line as the connection wrote it (shared, not copied).
    line: Bytes,
    trace: Option<Carrier>,
}

/// The wire to the upstream's thread: lines go to it over a channel.
struct OpenApiWire {
    tx: Mutex<Option<mpsc::UnboundedSender<Inbound>>>,
}

impl Wire for OpenApiWire {
    fn send(&self, msg: Outbound) -> Result<(), WriteError> {
        let tx = self.tx.lock().unwrap_or_else(PoisonError::into_inner);
        let inbound = Inbound {
            line: msg.line,
            trace: msg.trace,
        };
        match tx.as_ref().map(|tx| tx.send(inbound)) {
            Some(Ok(())) => Ok(()),
            _ => Err(WriteError::Closed),
        }
    }

    fn close(&self, _reason: &str) {
        // The thread ends once its channel is closed and its calls in flight are dropped.
        self.tx
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
    }
}

/// The way back to the connection: every line is read as if the upstream wrote it.
#[derive(Clone)]
pub(crate) struct Back {
    conn: Weak<Connection>,
}

impl Back {
    pub(crate) fn push(&self, line: &str) {
        let Some(conn) = self.conn.upgrade() else {
            return;
        };
        if let Err(problem) = conn.receive(line.as_bytes(), None) {
            conn.close(&problem);
        }
    }

    fn close(&self, reason: &str) {
        if let Some(conn) = self.conn.upgrade() {
            conn.close(reason);
        }
    }
}

/// Starts a connection to the service `cfg` describes. `exited` is called once, from the
/// upstream's thread, when the connection has ended, with why. `credential` gives the bearer
/// token of the description's OAuth 2 schemes (`[upstreams.NAME.auth]`). What the load finds
/// beyond the tools is published in `published`, for `check`.
pub(crate) fn connect(
    cfg: &OpenApiConfig,
    key: &str,
    timing: Timing,
    events: Box<dyn Events>,
    exited: Box<dyn FnOnce(String) + Send>,
    credential: Option<Arc<dyn crate::Credential>>,
    published: Arc<Published>,
) -> Result<Arc<Connection>, String> {
    let (tx, rx) = mpsc::unbounded_channel::<Inbound>();
    let wire = OpenApiWire {
        tx: Mutex::new(Some(tx)),
    };
    let conn = Arc::new(Connection::new(key, Box::new(wire), events, timing));
    let back = Back {
        conn: Arc::downgrade(&conn),
    };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("could not start the OpenAPI upstream's runtime: {e}"))?;
    let cfg = cfg.clone();
    let name = key.to_owned();
    std::thread::Builder::new()
        .name(format!("openapi-{key}"))
        .spawn(move || {
            let reason = match load::service(&runtime, &cfg, credential) {
                Ok(service) => {
                    tracing::info!(upstream = %name, tools = service.tools.len(),
                        skipped = service.skipped.len(), "OpenAPI description loaded");
                    published.set_openapi(service.report(cfg.auth.is_some()));
                    let source = reread::Source::new(cfg, name, published);
                    runtime.block_on(serve::serve(Arc::new(service), source, rx, back));
                    "the connection was closed".to_owned()
                }
                Err(problem) => {
                    let reason = format!("the OpenAPI description could not be loaded: {problem}");
                    tracing::warn!(upstream = %name, "{reason}");
                    back.close(&reason);
                    reason
                }
            };
            exited(reason);
        })
        .map_err(|e| format!("could not start the OpenAPI upstream's thread: {e}"))?;
    Ok(conn)
}
