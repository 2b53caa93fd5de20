//! Configuration reload: `SIGHUP`, a watched file (`server.watch_config`) or `POST /reload`
//! on the admin address load the configuration again. The new file goes through every check
//! `manifold check --no-start` makes (and reads the TLS files and the pinning lock file);
//! refused, it changes nothing and the running configuration stays. Accepted, only what
//! changed takes effect (see `manifold_config::reload` for what is compared, and
//! `manifold_core::router::Reload` for how it is applied): sessions are never dropped.
//!
//! Reloads run one at a time, on the task that serves them ([`Reloader::run`]), which is on
//! the actix system that runs the upstream actors: upstreams added are started there.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use manifold_catalog::UpstreamDef;
use manifold_config::reload::{changes, needs_restart, rereads, Changes};
use manifold_config::{Config, UpstreamConfig};
use manifold_core::cache::{Cache, HintRule};
use manifold_core::layer::Layer;
use manifold_core::policy::LimitLayer;
use manifold_core::router::Reload;
use manifold_core::Router;
use manifold_http::tls::Certificate;
use manifold_http::{AuthSlot, HttpAuth};
use manifold_policy::Authenticator;
use manifold_upstream::{Hub, Timing, UpstreamHandle};
use tokio::sync::{mpsc, oneshot};

use crate::operations::Operated;
use crate::run::{self, Overrides};

/// A request for a reload, and where its outcome goes.
pub type Ask = (
    &'static str,
    Option<oneshot::Sender<Result<String, String>>>,
);

/// What the running configuration is made of, and what a reload replaces.
pub struct Reloader {
    path: PathBuf,
    overrides: Overrides,
    router: Arc<Router>,
    hub: Arc<Hub>,
    /// How HTTP hosts authenticate (none over stdio).
    auth: Option<AuthSlot>,
    /// The listener's certificate, when it serves TLS.
    certificate: Option<Certificate>,
    state: State,
    /// Where each outcome is recorded for the console.
    operated: Arc<Operated>,
}

/// The configuration in force and what was built from it.
pub struct State {
    pub config: Config,
    /// Every upstream's definition by index (removed ones retired: indexes never move).
    pub defs: Arc<[UpstreamDef]>,
    /// Every upstream's configuration by index (a removed one's last, without caches).
    pub configs: Vec<UpstreamConfig>,
    pub limits: Option<Arc<LimitLayer>>,
    pub cache: Option<Arc<Cache>>,
}

impl Reloader {
    pub fn new(
        path: &Path,
        overrides: Overrides,
        router: &Arc<Router>,
        auth: Option<AuthSlot>,
        certificate: Option<Certificate>,
        state: State,
        operated: Arc<Operated>,
    ) -> Self {
        Self {
            operated,
            path: path.to_path_buf(),
            overrides,
            hub: Arc::clone(router.hub()),
            router: Arc::clone(router),
            auth,
            certificate,
            state,
        }
    }

    /// Serves reloads as they are asked for, one at a time, until every sender is gone; each
    /// outcome is recorded for the console.
    pub async fn run(mut self, mut asked: mpsc::UnboundedReceiver<Ask>) {
        while let Some((trigger, reply)) = asked.recv().await {
            let outcome = self.reload(trigger);
            self.operated
                .reloaded(trigger, &outcome, &self.state.config);
            match &outcome {
                Ok(report) => tracing::info!("configuration reloaded ({trigger}): {report}"),
                Err(e) => tracing::error!(
                    "configuration reload refused ({trigger}): {e}; the running configuration stays"
                ),
            }
            if let Some(reply) = reply {
                let _ = reply.send(outcome);
            }
        }
    }

    /// Loads the file again and applies what changed; a report of it as JSON text.
    fn reload(&mut self, trigger: &str) -> Result<String, String> {
        let staged = self.stage().map_err(|e| format!("{e:#}"))?;
        let changes = changes(&self.state.config, &staged.config);
        self.apply(staged, &changes);
        Ok(report(trigger, &changes, self.certificate.is_some()))
    }

    /// The new configuration and everything built from it that can fail: nothing running
    /// is touched yet.
    fn stage(&self) -> anyhow::Result<Staged> {
        let (mut config, defs) = run::load(&self.path)?;
        run::apply_overrides(&mut config, &self.overrides, &self.path)?;
        manifold_telemetry::logs::check_level(&config.telemetry).map_err(anyhow::Error::msg)?;
        let limits = LimitLayer::reloaded(
            self.state.limits.as_deref(),
            &config.limits,
            &config.teams,
            run::stores(),
        )
        .map_err(anyhow::Error::msg)?;
        let certificate = match (&self.certificate, &config.server.http.tls) {
            (Some(_), Some(tls)) => Some(Certificate::load(&config.source, tls)?),
            _ => None,
        };
        Ok(Staged {
            config,
            defs,
            limits,
            certificate,
        })
    }

    fn apply(&mut self, staged: Staged, changes: &Changes) {
        let Staged {
            config,
            defs: new_defs,
            limits,
            certificate,
        } = staged;
        let mut slots = Slots::of(&self.state);
        let timing = Timing {
            request: self.state.config.server.request_timeout,
            max: self.state.config.server.max_request_timeout,
        };
        let grace = self.state.config.server.shutdown_grace;
        let added = slots.update(&config.upstreams, &new_defs, |i, cfg| {
            UpstreamHandle::start(i, cfg, timing, grace, Arc::clone(&self.hub))
        });
        let cache = if changes.cache || slots.caches_changed(&self.state.configs) {
            Cache::reloaded(
                self.state.cache.as_deref(),
                &config.cache,
                &slots.configs,
                self.router.releases(),
                run::stores(),
            )
        } else {
            self.state.cache.clone()
        };
        let layers: Vec<Arc<dyn Layer>> = limits
            .iter()
            .map(|l| Arc::clone(l) as Arc<dyn Layer>)
            .collect();
        let defs: Arc<[UpstreamDef]> = slots.defs.into();
        self.router.reload(Reload {
            defs: Arc::clone(&defs),
            configs: slots.configs.clone(),
            added,
            restarted: slots.restarted,
            removed: slots.removed,
            reread: slots.reread,
            teams: config.teams.clone(),
            discovery: config.discovery.clone(),
            layers,
            cache: cache.clone(),
            timing,
            drain: self.state.config.server.http.drain_timeout,
        });
        // The broker follows the upstreams: the tokens of one removed (or no longer with
        // `auth`) are dropped. A broker is made at start only, when some upstream had `auth`.
        if let Some(broker) = self.router.broker().cloned() {
            let configs = slots.configs.clone();
            actix::spawn(async move {
                let dropped = broker.set_upstreams(&configs).await;
                if !dropped.is_empty() {
                    tracing::info!(upstreams = ?dropped, "dropped the tokens of upstreams the reload removed");
                }
            });
        }
        if let Some(auth) = &self.auth {
            auth.set(HttpAuth {
                authenticator: Arc::new(Authenticator::new(&config.auth, &config.teams)),
                resource: config.auth.resource.clone(),
            });
        }
        if let (Some(serving), Some(new)) = (&self.certificate, &certificate) {
            serving.replace_with(new);
        }
        if changes.telemetry {
            if let Err(e) = manifold_telemetry::logs::set_level(&config.telemetry) {
                tracing::warn!("the log level was not changed: {e}");
            }
            manifold_telemetry::metrics().set_enabled(config.telemetry.metrics);
        }
        self.state = State {
            config,
            defs,
            configs: slots.configs,
            limits,
            cache,
        };
    }
}

/// What [`Reloader::stage`] built.
struct Staged {
    config: Config,
    defs: Arc<[UpstreamDef]>,
    limits: Option<Arc<LimitLayer>>,
    certificate: Option<Certificate>,
}

/// The upstreams' places, worked out for a new configuration.
struct Slots {
    defs: Vec<UpstreamDef>,
    configs: Vec<UpstreamConfig>,
    restarted: Vec<usize>,
    removed: Vec<usize>,
    /// OpenAPI upstreams kept as they were: their descriptions are read again.
    reread: Vec<usize>,
}

impl Slots {
    fn of(state: &State) -> Self {
        Self {
            defs: state.defs.to_vec(),
            configs: state.configs.clone(),
            restarted: Vec::new(),
            removed: Vec::new(),
            reread: Vec::new(),
        }
    }

    /// Gives each running upstream its new definition and configuration (or retires it),
    /// and each new one a place at the end, started with `start`; returns the new ones'
    /// connections.
    fn update(
        &mut self,
        upstreams: &[UpstreamConfig],
        new_defs: &[UpstreamDef],
        start: impl Fn(usize, UpstreamConfig) -> UpstreamHandle,
    ) -> Vec<UpstreamHandle> {
        let running = self.defs.len();
        for i in 0..running {
            if self.defs[i].retired {
                continue;
            }
            match upstreams.iter().position(|u| u.key == self.defs[i].key) {
                Some(j) => {
                    if needs_restart(&self.configs[i], &upstreams[j]) {
                        self.restarted.push(i);
                    } else if rereads(&upstreams[j]) {
                        self.reread.push(i);
                    }
                    self.defs[i] = new_defs[j].clone();
                    self.configs[i] = upstreams[j].clone();
                }
                None => {
                    self.defs[i] = self.defs[i].retire();
                    self.configs[i].caches = Default::default();
                    self.removed.push(i);
                }
            }
        }
        let mut added = Vec::new();
        for (j, u) in upstreams.iter().enumerate() {
            let known = self.defs[..running]
                .iter()
                .any(|d| !d.retired && d.key == u.key);
            if !known {
                added.push(start(self.defs.len(), u.clone()));
                self.defs.push(new_defs[j].clone());
                self.configs.push(u.clone());
            }
        }
        added
    }

    /// Whether any upstream's caches differ from `before` (more upstreams count as a change),
    /// or which of its tools `cache` covers (an upstream that became an OpenAPI one, or
    /// stopped being one).
    fn caches_changed(&self, before: &[UpstreamConfig]) -> bool {
        self.configs.len() != before.len()
            || self
                .configs
                .iter()
                .zip(before)
                .any(|(a, b)| a.caches != b.caches || HintRule::of(a) != HintRule::of(b))
    }
}

/// What a reload did, as JSON text (the admin endpoint's answer and the log line).
fn report(trigger: &str, changes: &Changes, tls: bool) -> String {
    serde_json::json!({
        "reloaded": true,
        "trigger": trigger,
        "upstreams": {
            "added": changes.added,
            "removed": changes.removed,
            "restarted": changes.restarted,
            "updated": changes.updated,
        },
        "teams": changes.teams,
        "discovery": changes.discovery,
        "auth": changes.auth,
        "limits": changes.limits,
        "cache": changes.cache,
        "pinning": changes.pinning,
        "telemetry": changes.telemetry,
        "tls_reread": tls,
        "at_restart": changes.at_restart,
    })
    .to_string()
}

/// Asks for a reload on every `SIGHUP`, until `asks` closes.
pub fn on_sighup(asks: mpsc::UnboundedSender<Ask>) -> anyhow::Result<()> {
    use tokio::signal::unix::{signal, SignalKind};
    let mut hup =
        signal(SignalKind::hangup()).map_err(|e| anyhow::anyhow!("cannot watch SIGHUP: {e}"))?;
    actix::spawn(async move {
        while hup.recv().await.is_some() {
            if asks.send(("SIGHUP", None)).is_err() {
                return;
            }
        }
    });
    Ok(())
}

/// How often watched files are looked at.
const WATCH_EVERY: Duration = Duration::from_secs(1);

/// Watches the config file and the files it names (`server.watch_config`): a change asks for
/// a reload once the files have stayed the same for one more look (an editor's several
/// writes, or a volume's swap of a whole folder, make one reload).
pub fn watch(asks: mpsc::UnboundedSender<Ask>, files: Vec<PathBuf>) {
    actix::spawn(async move {
        let mut loaded = fingerprint(&files);
        let mut seen = loaded;
        let mut every = tokio::time::interval(WATCH_EVERY);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let now = fingerprint(&files);
            if now != loaded && now == seen {
                loaded = now;
                if asks.send(("file change", None)).is_err() {
                    return;
                }
            }
            seen = now;
        }
    });
}

/// A hash of the files' contents (a missing file counts as empty).
fn fingerprint(files: &[PathBuf]) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    for f in files {
        std::fs::read(f).unwrap_or_default().hash(&mut h);
    }
    h.finish()
}

/// The files a configuration is read from: the file itself, the pinning lock file, the TLS
/// certificate and key, and OpenAPI descriptions read from files.
pub fn watched_files(config: &Config) -> Vec<PathBuf> {
    let mut files = vec![config.source.clone()];
    for u in &config.upstreams {
        if let manifold_config::Transport::OpenApi(o) = &u.transport {
            if let manifold_config::OpenApiSource::File(path) = &o.source {
                files.push(path.clone());
            }
        }
    }
    if config.pinning.is_some() {
        files.push(manifold_config::lock_path(
            &config.source,
            config.pinning.as_ref(),
        ));
    }
    if let Some(tls) = &config.server.http.tls {
        files.push(tls.cert.clone());
        files.push(tls.key.clone());
    }
    files
}

/// Where `POST /reload` sends its asks, and how the answer comes back.
pub fn admin_hook(asks: mpsc::UnboundedSender<Ask>) -> manifold_http::ReloadHook {
    Arc::new(move || {
        let asks = asks.clone();
        Box::pin(async move {
            let (tx, rx) = oneshot::channel();
            asks.send(("admin", Some(tx)))
                .map_err(|_| "Manifold is shutting down".to_owned())?;
            rx.await
                .map_err(|_| "Manifold is shutting down".to_owned())?
        })
    })
}

/// `manifold reload --admin ADDR`: asks a running Manifold to reload and prints its answer.
pub fn ask(admin: SocketAddr, token: Option<&str>) -> anyhow::Result<std::process::ExitCode> {
    let (status, body) = crate::admin_client::post(admin, "/reload", token)?;
    println!("{}", body.trim_end());
    Ok(if status == 200 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    })
}
