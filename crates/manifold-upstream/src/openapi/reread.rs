//! Reading an OpenAPI upstream's description again, as a configuration reload asks: the
//! in-process server swaps in what it read and, when its tools differ, says so on its
//! connection with `notifications/tools/list_changed`, as any MCP server whose tools changed
//! would. The usual refetch then brings the new tools into the catalog, where pins are checked
//! and hosts told. A description that can no longer be read changes nothing: the tools it had
//! are served on, and the failure is logged.

use std::sync::Arc;

use manifold_config::OpenApiConfig;
use tokio::sync::mpsc;

use super::load::{self, Service};
use super::Back;
use crate::handle::Published;

/// The notification Manifold sends its in-process server to have the description read again.
/// It never leaves the process: only this server's wire carries it.
pub(crate) const REREAD: &str = "notifications/manifold/openapi/reread";

const LIST_CHANGED: &str = r#"{"jsonrpc":"2.0","method":"notifications/tools/list_changed"}"#;

/// A reading's outcome, numbered in the order the readings were asked for.
pub(crate) type Read = (u64, Result<Service, String>);

/// Where the description comes from, where what a reading finds beyond the tools is published
/// (for `check`), and the readings asked for and applied so far.
pub(crate) struct Source {
    cfg: OpenApiConfig,
    key: String,
    published: Arc<Published>,
    asked: u64,
    applied: u64,
}

impl Source {
    pub(crate) fn new(cfg: OpenApiConfig, key: String, published: Arc<Published>) -> Self {
        Self {
            cfg,
            key,
            published,
            asked: 0,
            applied: 0,
        }
    }

    /// Reads the description again on a thread of its own (loading blocks while documents
    /// are fetched, and the server's runtime must go on answering); the outcome comes back
    /// on `done`.
    pub(crate) fn reread(&mut self, current: &Service, done: mpsc::UnboundedSender<Read>) {
        self.asked += 1;
        let number = self.asked;
        let cfg = self.cfg.clone();
        let credential = current.keys.credential.clone();
        // Calls go on through the serving client: its pooled connections belong to the
        // server's runtime, whereas the reading's own client dies with its thread's runtime.
        let client = current.client.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("openapi-reread-{}", self.key))
            .spawn(move || {
                let outcome = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| format!("could not start a runtime: {e}"))
                    .and_then(|runtime| load::service(&runtime, &cfg, credential))
                    .map(|service| Service { client, ..service });
                let _ = done.send((number, outcome));
            });
        if let Err(e) = spawned {
            tracing::warn!(upstream = %self.key, "the OpenAPI description was not read again: {e}");
        }
    }

    /// Takes a reading's outcome: what was read replaces `current` (the connection hears
    /// `tools/list_changed` when the tools differ); a failure keeps `current`. An outcome
    /// older than one already applied is dropped, so the latest reading wins.
    pub(crate) fn settle(
        &mut self,
        current: Arc<Service>,
        read: Read,
        back: &Back,
    ) -> Arc<Service> {
        let (number, outcome) = read;
        if number <= self.applied {
            return current;
        }
        self.applied = number;
        match outcome {
            Ok(service) => {
                let changed = service.list != current.list;
                tracing::info!(upstream = %self.key, tools = service.tools.len(),
                    skipped = service.skipped.len(), changed,
                    "OpenAPI description read again");
                self.published
                    .set_openapi(service.report(self.cfg.auth.is_some()));
                let service = Arc::new(service);
                if changed {
                    back.push(LIST_CHANGED);
                }
                service
            }
            Err(problem) => {
                tracing::warn!(upstream = %self.key,
                    "the OpenAPI description could not be read again: {problem}; its {} tools are served as before",
                    current.tools.len());
                current
            }
        }
    }
}
