//! `manifold serve`: load the config, start every upstream actor, serve hosts (one over stdio,
//! or any number over HTTP), and stop every child process when the stdio host leaves or a
//! signal arrives. Over HTTP a signal first drains the listener (see `drain_listener`).
//!
//! One file: the order of start-up and shutdown (actors, router, transports, drain, stopping
//! every child) reads top to bottom here, and splitting it would scatter that order.

use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use manifold_catalog::{Catalog, UpstreamDef};
use manifold_config::{Config, HttpSettings};
use manifold_core::cache::Cache;
use manifold_core::layer::Layer;
use manifold_core::policy::{LimitLayer, Teams};
use manifold_core::replicas::Stores as _;
use manifold_core::router::Parts;
use manifold_http::drain::Drain;
use manifold_http::{AuthSlot, HttpAuth};
use manifold_policy::Authenticator;

use crate::reload;
use manifold_core::{stdio, Router, Sessions};
use manifold_http as http;
use manifold_upstream::{Hub, Isolation, Timing, UpstreamHandle};
use tokio::signal::unix::{signal, Signal, SignalKind};

/// Loads and validates a config, including the name rules that span upstreams, with the pins
/// of its `[pinning]` lock file (which must exist and parse when the section is there).
pub fn load(path: &Path) -> anyhow::Result<(Config, Arc<[UpstreamDef]>)> {
    let (config, defs) = load_unpinned(path)?;
    let defs = match &config.pinning {
        Some(pinning) => crate::pin::with_pins(&defs, pinning)?,
        None => defs,
    };
    Ok((config, defs))
}

/// [`load`] without reading the lock file: what `manifold pin` needs to write it.
pub fn load_unpinned(path: &Path) -> anyhow::Result<(Config, Arc<[UpstreamDef]>)> {
    let config = manifold_config::load(path)?;
    let defs: Arc<[UpstreamDef]> = config
        .upstreams
        .iter()
        .map(UpstreamDef::from_config)
        .collect();
    if let Err(problems) = UpstreamDef::validate_all(&defs) {
        anyhow::bail!("{}: upstreams: {}", path.display(), problems.join("; "));
    }
    Ok((config, defs))
}

/// The listener's TLS configuration, read from the files `[server.tls]` names; none when TLS
/// is not configured.
pub fn tls(config: &Config) -> anyhow::Result<Option<http::tls::ServerConfig>> {
    match &config.server.http.tls {
        Some(settings) => Ok(Some(http::tls::server_config(&config.source, settings)?)),
        None => Ok(None),
    }
}

/// Logs a warning when hosts send credentials in clear text to a listener other machines
/// can reach.
fn warn_of_cleartext(config: &Config, tls: bool) {
    let Some(addr) = config.server.http.listen else {
        return;
    };
    let authenticated = manifold_config::auth_required(&config.auth, &config.teams);
    if let Some(warning) = manifold_config::cleartext_warning(addr, authenticated, tls) {
        tracing::warn!("{warning}");
    }
}

/// Starts the hub and one actor per upstream. Must run inside the actix system. With a
/// credential broker, the shared connections of upstreams with `auth` get their tokens from it.
pub fn start_upstreams(
    config: &Config,
    defs: &Arc<[UpstreamDef]>,
    broker: Option<&Arc<manifold_auth::Broker>>,
) -> (Arc<Hub>, Vec<UpstreamHandle>) {
    let hub = Hub::new(
        Arc::clone(defs),
        config.names.clone(),
        config.server.page_size,
    );
    if let Some(broker) = broker {
        hub.set_credentials(Arc::new(manifold_core::credentials::SharedCredentials(
            Arc::clone(broker),
        )));
    }
    let handles = config
        .upstreams
        .iter()
        .enumerate()
        .map(|(i, cfg)| {
            UpstreamHandle::start(
                i,
                cfg.clone(),
                Timing {
                    request: config.server.request_timeout,
                    max: config.server.max_request_timeout,
                },
                config.server.shutdown_grace,
                Arc::clone(&hub),
            )
        })
        .collect();
    (hub, handles)
}

/// Restricts this process (and so its threads and the upstreams it starts) to `cpus`, from
/// `server.cpus`; nothing when the list is empty. A chain of hand-offs between threads and
/// processes on the same CPU avoids cross-CPU wake-ups, which cost several microseconds each
/// on small virtual machines (BENCHMARKS.md).
fn pin_to(cpus: &[usize]) -> anyhow::Result<()> {
    if cpus.is_empty() {
        return Ok(());
    }
    let mut set = rustix::thread::CpuSet::new();
    for &cpu in cpus {
        set.set(cpu);
    }
    rustix::thread::sched_setaffinity(None, &set)
        .with_context(|| format!("cannot run on CPUs {cpus:?} (server.cpus)"))?;
    tracing::info!(?cpus, "pinned to CPUs");
    Ok(())
}

/// Starts every upstream, waits for their first start attempts (at most
/// `server.startup_timeout`), gives the catalog to `f`, and stops them again: what `check` and
/// `pin` do.
pub fn with_started<T>(
    config: &Config,
    defs: &Arc<[UpstreamDef]>,
    f: impl FnOnce(&Catalog, &[UpstreamHandle]) -> T,
) -> T {
    // Upstreams with `auth` are read with what the token store keeps (an operator's shared
    // login, client credentials); without it they are reported as needing authorization.
    let broker = crate::credentials::broker(config).unwrap_or_else(|e| {
        tracing::warn!("upstream credentials unavailable: {e:#}");
        None
    });
    let system = actix::System::new();
    system.block_on(async move {
        let (hub, handles) = start_upstreams(config, defs, broker.as_ref());
        hub.wait_settled(config.server.startup_timeout).await;
        let out = f(&hub.catalog(), &handles);
        stop_upstreams(&handles).await;
        out
    })
}

/// Stops every upstream and waits until their processes are gone.
pub async fn stop_upstreams(handles: &[UpstreamHandle]) {
    futures::future::join_all(handles.iter().map(UpstreamHandle::shutdown)).await;
}

/// What the command line sets over the file (`--listen`, `--admin`, `--team`), applied to
/// the file at start and at every reload.
#[derive(Clone, Default)]
pub struct Overrides {
    pub listen: Option<std::net::SocketAddr>,
    pub admin: Option<std::net::SocketAddr>,
    pub team: Option<String>,
}

/// Applies `overrides` to `config` (read from `path`), with the checks they need: the team
/// must exist, and a listener other machines can reach needs authentication or
/// `server.allow_remote`.
pub fn apply_overrides(
    config: &mut Config,
    overrides: &Overrides,
    path: &Path,
) -> anyhow::Result<()> {
    if let Some(team) = &overrides.team {
        if !config.teams.iter().any(|t| t.name == *team) {
            anyhow::bail!(
                "--team: {team:?} names no team under [teams] in {}",
                path.display()
            );
        }
        config.server.team = Some(team.clone());
    }
    if let Some(addr) = overrides.listen {
        config.server.http.listen = Some(addr);
    }
    if let Some(addr) = overrides.admin {
        config.server.admin = Some(addr);
    }
    // The file's own addresses were checked when it was read.
    let authenticated = manifold_config::auth_required(&config.auth, &config.teams);
    let allow = config.server.http.allow_remote;
    let flags = [
        ("--listen", overrides.listen, authenticated),
        ("--admin", overrides.admin, false),
    ];
    for (flag, addr, authenticated) in flags {
        if let Some(problem) =
            addr.and_then(|a| manifold_config::remote_refusal(a, allow, authenticated))
        {
            anyhow::bail!("{flag}: {problem}");
        }
    }
    Ok(())
}

pub fn serve(path: &Path, overrides: Overrides) -> anyhow::Result<ExitCode> {
    let (mut config, defs) = load(path)?;
    apply_overrides(&mut config, &overrides, path)?;
    // Read before anything starts, so that a bad certificate or key stops Manifold at once.
    // Over stdio the files are not needed.
    let certificate = match (config.server.http.listen, &config.server.http.tls) {
        (Some(_), Some(tls)) => Some(http::tls::Certificate::load(&config.source, tls)?),
        _ => None,
    };
    // Logging (and trace export) before any thread or child exists; kept to the end, when
    // dropping it exports the last spans.
    let _tracing = manifold_telemetry::logs::init(&config.telemetry);
    manifold_telemetry::metrics().set_enabled(config.telemetry.metrics);
    for (key, why) in &config.skipped {
        tracing::warn!(upstream = %key, "skipped: {why}");
    }
    warn_of_cleartext(&config, certificate.is_some());
    // Before any thread or child exists, so that all of them inherit it.
    pin_to(&config.server.cpus)?;
    let limits =
        LimitLayer::new(&config.limits, &config.teams, stores()).map_err(anyhow::Error::msg)?;
    let layers: Vec<Arc<dyn Layer>> = limits
        .iter()
        .map(|l| Arc::clone(l) as Arc<dyn Layer>)
        .collect();
    let system = actix::System::new();
    system.block_on(async move {
        let http = config.server.http.listen;
        let limit = if http.is_some() {
            config.server.http.max_sessions
        } else {
            1
        };
        let (sessions, ending) = Sessions::new(limit);
        let broker = crate::credentials::broker(&config)?;
        let (hub, handles) = start_upstreams(&config, &defs, broker.as_ref());
        let released = manifold_core::router::releases();
        let cache = Cache::new(&config.cache, &config.upstreams, &released.0, stores());
        let timing = Timing {
            request: config.server.request_timeout,
            max: config.server.max_request_timeout,
        };
        let isolation = Isolation::new(
            Arc::clone(&hub),
            config.upstreams.clone(),
            timing,
            config.server.shutdown_grace,
        );
        let router = Router::new(Parts {
            hub,
            upstreams: handles,
            isolation: Some(isolation),
            sessions,
            ending,
            settings: config.server.clone(),
            runtime: tokio::runtime::Handle::current(),
            layers,
            teams: Arc::new(Teams::new(&config.teams)),
            stdio_team: config.server.team.clone(),
            cache: cache.clone(),
            released,
            discovery: config.discovery.clone(),
        });
        let consents = broker.map(|broker| {
            router.set_broker(Arc::clone(&broker));
            router.reap_caller_connections();
            crate::credentials::BrokerConsents::of_router(broker, &router)
        });
        let auth = http.map(|_| {
            AuthSlot::new(HttpAuth {
                authenticator: Arc::new(Authenticator::new(&config.auth, &config.teams)),
                resource: config.auth.resource.clone(),
            })
        });
        let tls = certificate
            .as_ref()
            .map(http::tls::Certificate::server_config)
            .transpose()?;
        let operated = crate::operations::Operated::new(path.to_path_buf(), &config);
        let asks = start_reloader(
            &operated,
            path,
            overrides,
            &router,
            &auth,
            certificate,
            &config,
            defs,
            limits,
            cache,
        )?;
        // Begun only by a signal while serving HTTP; the admin address's /readyz reads it too.
        let drain = Drain::new();
        let admin = match config.server.admin {
            Some(addr) => Some(serve_admin(
                &router,
                addr,
                &drain,
                &asks,
                consents.clone(),
                config.auth.jwt.clone(),
                operated,
            )?),
            None => None,
        };
        announce(&router, &config, admin.as_ref().map(|(_, bound)| *bound));
        let admin = admin.map(|(handle, _)| handle);
        let served = match (http, auth) {
            (Some(addr), Some(auth)) => {
                let pages = consents.map(|c| pages_of(c, &config));
                serve_http(&router, &config, addr, auth, tls, &drain, pages).await
            }
            _ => {
                let _callbacks = match consents {
                    Some(consents) => Some(serve_callbacks(consents, &config, &router)?),
                    None => None,
                };
                serve_stdio(&router).await
            }
        };
        drop(asks);
        if let Some(admin) = admin {
            admin.stop(false).await;
        }
        // Whatever hosts have not read is dropped: shutdown never waits on a host.
        router.close_listens();
        for session in router.sessions().all() {
            router.end_session(session.id(), "Manifold is shutting down");
        }
        // Every upstream, those a reload added included.
        stop_upstreams(&router.upstreams()).await;
        served
    })?;
    Ok(ExitCode::SUCCESS)
}

/// Starts the task that reloads the configuration, asked by `SIGHUP`, by a change of the
/// watched files (`server.watch_config`) and by `POST /reload` on the admin address; returns
/// where to ask.
#[allow(clippy::too_many_arguments)]
fn start_reloader(
    operated: &Arc<crate::operations::Operated>,
    path: &Path,
    overrides: Overrides,
    router: &Arc<Router>,
    auth: &Option<AuthSlot>,
    certificate: Option<http::tls::Certificate>,
    config: &Config,
    defs: Arc<[UpstreamDef]>,
    limits: Option<Arc<LimitLayer>>,
    cache: Option<Arc<Cache>>,
) -> anyhow::Result<tokio::sync::mpsc::UnboundedSender<reload::Ask>> {
    let state = reload::State {
        config: config.clone(),
        defs,
        configs: config.upstreams.clone(),
        limits,
        cache,
    };
    let reloader = reload::Reloader::new(
        path,
        overrides,
        router,
        auth.clone(),
        certificate,
        state,
        Arc::clone(operated),
    );
    let (asks, asked) = tokio::sync::mpsc::unbounded_channel();
    actix::spawn(reloader.run(asked));
    reload::on_sighup(asks.clone())?;
    if config.server.watch_config {
        let files = reload::watched_files(config);
        tracing::info!(?files, "watching the configuration for changes");
        reload::watch(asks.clone(), files);
    }
    Ok(asks)
}

/// SIGTERM and SIGINT, watched from before serving starts.
struct Signals {
    term: Signal,
    int: Signal,
}

impl Signals {
    fn watch() -> anyhow::Result<Self> {
        Ok(Self {
            term: signal(SignalKind::terminate()).context("cannot watch SIGTERM")?,
            int: signal(SignalKind::interrupt()).context("cannot watch SIGINT")?,
        })
    }

    /// The next signal's name.
    async fn next(&mut self) -> &'static str {
        tokio::select! {
            _ = self.term.recv() => "SIGTERM",
            _ = self.int.recv() => "SIGINT",
        }
    }
}

/// Serves the one stdio host until it leaves or a signal arrives.
async fn serve_stdio(router: &Arc<Router>) -> anyhow::Result<()> {
    let session = stdio::serve_stdio(Arc::clone(router)).context("cannot serve stdio")?;
    let mut signals = Signals::watch()?;
    tokio::select! {
        why = session.ended() => tracing::info!("host session ended ({why}); shutting down"),
        which = signals.next() => tracing::info!("{which}; shutting down"),
    }
    Ok(())
}

/// Serves `/metrics`, `/healthz`, `/readyz` and `POST /reload` on the admin address, in the
/// background.
fn serve_admin(
    router: &Arc<Router>,
    addr: std::net::SocketAddr,
    drain: &Arc<Drain>,
    asks: &tokio::sync::mpsc::UnboundedSender<reload::Ask>,
    consents: Option<Arc<crate::credentials::BrokerConsents>>,
    jwt: Option<manifold_config::JwtConfig>,
    operated: Arc<crate::operations::Operated>,
) -> anyhow::Result<(actix_web::dev::ServerHandle, std::net::SocketAddr)> {
    let hook = reload::admin_hook(asks.clone());
    let consents = consents.map(|c| c as Arc<dyn http::credentials::Consents>);
    let operations = Some(operated as Arc<dyn http::Operations>);
    let (server, bound) = http::serve_admin(
        Arc::clone(router),
        addr,
        drain,
        Some(hook),
        consents,
        jwt,
        operations,
    )
    .with_context(|| format!("cannot listen on {addr} (admin)"))?;
    tracing::info!(
        "admin listening on {bound}: http://{bound}/metrics, /healthz, /readyz, POST /reload"
    );
    let handle = server.handle();
    tokio::spawn(server);
    Ok((handle, bound))
}

/// Announces this replica to the others through the first Redis the configuration shares
/// (sessions, limits, then the cache), for the console's overview; nothing without one.
fn announce(router: &Arc<Router>, config: &Config, admin: Option<std::net::SocketAddr>) {
    let shared = match (
        &config.sessions,
        &config.limits.backend,
        &config.cache.backend,
    ) {
        (manifold_config::SessionStore::Redis(redis), _, _)
        | (_, manifold_config::LimitBackend::Redis(redis), _)
        | (_, _, manifold_config::CacheBackend::Redis(redis)) => redis,
        _ => return,
    };
    let started = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let router_of_card = Arc::downgrade(router);
    let card = Arc::new(move || {
        let (up, total) = router_of_card.upgrade().map_or((0, 0), |r| {
            let catalog = r.hub().catalog();
            let live = (0..catalog.defs().len()).filter(|&i| !catalog.defs()[i].retired);
            live.fold((0, 0), |(up, total), i| {
                let is_up = *catalog.state(i) == manifold_catalog::UpstreamState::Up;
                (up + usize::from(is_up), total + 1)
            })
        });
        manifold_core::replicas::ReplicaCard {
            id: manifold_core::replicas::replica_id().to_owned(),
            version: env!("CARGO_PKG_VERSION").to_owned(),
            admin: admin.map(|a| a.to_string()),
            started,
            upstreams_up: up,
            upstreams: total,
        }
    });
    match stores().presence(shared, card) {
        Ok(presence) => router.set_presence(presence),
        Err(why) => tracing::warn!("this replica cannot announce itself to the others: {why}"),
    }
}

/// The stores shared by replicas that the configuration asks for: Redis, one connection and
/// one health state per URL for the whole process (reloads included).
pub fn stores() -> &'static manifold_redis::Redis {
    static REDIS: std::sync::LazyLock<manifold_redis::Redis> =
        std::sync::LazyLock::new(manifold_redis::Redis::default);
    &REDIS
}

/// What the consent pages are served with: the broker, and the OpenID Connect login of
/// browser users when `[credentials] login_client_id` and `[auth.jwt]` are configured.
fn pages_of(
    consents: Arc<crate::credentials::BrokerConsents>,
    config: &Config,
) -> http::Credentials {
    let settings = &config.credentials;
    let login = match (&config.auth.jwt, &settings.login_client_id) {
        (Some(jwt), Some(client_id)) => Some(http::credentials::LoginSettings {
            jwt: jwt.clone(),
            teams: config.teams.clone(),
            client_id: client_id.clone(),
            client_secret: settings.login_client_secret.clone(),
            public_url: settings.public_url.clone(),
            timeout: settings.timeout,
            ttl: settings.consent_timeout,
        }),
        _ => None,
    };
    http::Credentials { consents, login }
}

/// A stdio Manifold's listener for the callbacks of consents (`[credentials]
/// callback_listen`, default a free loopback port): the browser of the one local user comes
/// back here.
fn serve_callbacks(
    consents: Arc<crate::credentials::BrokerConsents>,
    config: &Config,
    router: &Arc<Router>,
) -> anyhow::Result<actix_web::dev::ServerHandle> {
    let addr: std::net::SocketAddr = config
        .credentials
        .callback_listen
        .as_deref()
        .unwrap_or("127.0.0.1:0")
        .parse()
        .context("credentials.callback_listen is not an address (e.g. \"127.0.0.1:8976\")")?;
    let (server, bound) = http::credentials::serve_pages(consents, addr)
        .with_context(|| format!("cannot listen on {addr} (consent callbacks)"))?;
    if config.credentials.public_url.is_none() {
        if let Some(broker) = router.broker() {
            broker.set_base_url(&format!("http://{bound}"));
        }
    }
    tracing::info!("consent callbacks on http://{bound}/oauth/callback");
    let handle = server.handle();
    tokio::spawn(server);
    Ok(handle)
}

/// Serves hosts over HTTP until a signal arrives, drains, and stops the listener.
async fn serve_http(
    router: &Arc<Router>,
    config: &Config,
    addr: std::net::SocketAddr,
    auth: AuthSlot,
    tls: Option<http::tls::ServerConfig>,
    drain: &Arc<Drain>,
    pages: Option<http::Credentials>,
) -> anyhow::Result<()> {
    let scheme = if tls.is_some() { "https" } else { "http" };
    let (server, bound) = http::serve(
        Arc::clone(router),
        addr,
        auth,
        tls,
        drain,
        &config.sessions,
        stores(),
        pages,
    )
    .with_context(|| format!("cannot listen on {addr}"))?;
    if config.credentials.public_url.is_none() {
        if let Some(broker) = router.broker() {
            broker.set_base_url(&format!("{scheme}://{bound}"));
        }
    }
    tracing::info!(
        "listening on {bound}: Streamable HTTP at {scheme}://{bound}/mcp, HTTP+SSE at {scheme}://{bound}/sse"
    );
    let handle = server.handle();
    let mut signals = Signals::watch()?;
    let server = tokio::spawn(server);
    let which = signals.next().await;
    tracing::info!("{which}; shutting down");
    drain_listener(router, &config.server.http, drain, &mut signals).await;
    // Answers already given are written out; open streams are not waited for (the server's
    // shutdown timeout, a second, cuts them).
    handle.stop(true).await;
    let _ = server.await;
    Ok(())
}

/// How the wait for requests in progress ended.
enum Settled {
    Drained,
    Deadline(usize),
    /// Another signal: stop now.
    Hurried(&'static str),
}

/// The drain a signal starts while serving HTTP, so that a load balancer in front loses no
/// request: `/readyz` fails at once while everything is still served for
/// `server.drain_delay`; then new requests are refused (503, `Retry-After`) while those in
/// progress get up to `server.drain_timeout` to finish; then every session ends, which answers
/// what is still unanswered with an error while the listener can still deliver it. Another
/// signal cuts the waits short.
async fn drain_listener(
    router: &Arc<Router>,
    settings: &HttpSettings,
    drain: &Drain,
    signals: &mut Signals,
) {
    drain.begin();
    let delay = settings.drain_delay;
    tracing::info!(
        "draining: readiness now fails; serving for {}",
        in_text(delay)
    );
    let mut hurried = None;
    if !delay.is_zero() {
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            which = signals.next() => hurried = Some(which),
        }
    }
    drain.refuse_new();
    // A subscriptions/listen stream is a request that never finishes by itself: it gets its
    // closing result now, and its host listens elsewhere.
    router.close_listens();
    let settled = match hurried {
        Some(which) => Settled::Hurried(which),
        None => {
            let timeout = settings.drain_timeout;
            tracing::info!(
                "refusing new requests; waiting for {} in-flight (up to {})",
                drain.pending(),
                in_text(timeout)
            );
            let deadline = tokio::time::Instant::now() + timeout;
            tokio::select! {
                left = drain.settled(deadline) => match left {
                    0 => Settled::Drained,
                    n => Settled::Deadline(n),
                },
                which = signals.next() => Settled::Hurried(which),
            }
        }
    };
    match settled {
        Settled::Drained => tracing::info!("drained"),
        Settled::Deadline(n) => {
            tracing::warn!("drain deadline reached with {n} requests unanswered");
        }
        Settled::Hurried(which) => tracing::warn!(
            "{which} again: stopping now with {} requests unanswered",
            drain.pending()
        ),
    }
    for session in router.sessions().all() {
        router.end_session(session.id(), "Manifold is shutting down");
    }
    // Requests without a session (the stateless era's) are answered by stopping the
    // upstreams: what they still wait for fails at once.
    let soon = tokio::time::Instant::now() + Duration::from_millis(200);
    if drain.settled(soon).await > 0 {
        stop_upstreams(&router.upstreams()).await;
    }
}

/// A setting's duration as it is written in the config (`"30s"`, `"1500ms"`).
fn in_text(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}
