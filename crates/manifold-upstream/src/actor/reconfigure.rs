//! A reloaded configuration for a running upstream: the connection is replaced without a gap.
//! The new connection is started beside the old one, which callers keep using until the new
//! one has finished its handshake; then the new one is published and the old one retires: it
//! finishes its calls in flight (up to the drain deadline), then is closed and its process
//! stopped. A new configuration that does not start leaves the old connection serving, and
//! is tried again with the usual backoff.

use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_config::UpstreamConfig;
use rustix::process::Signal;

use super::lifecycle::Event;
use super::{Link, UpstreamActor};
use crate::connection::{Connection, Timing};
use crate::process;

/// How long a replaced connection may take to finish its calls, unless the reload says.
pub(crate) const DEFAULT_DRAIN: Duration = Duration::from_secs(30);

/// Replace the upstream's connection with one started from `cfg`.
#[derive(Message)]
#[rtype(result = "()")]
pub(crate) struct Reconfigure {
    pub(crate) cfg: UpstreamConfig,
    pub(crate) timing: Timing,
    /// How long the replaced connection may take to finish its calls in flight.
    pub(crate) drain: Duration,
}

/// The connection that serves while its replacement starts.
pub(crate) struct Serving {
    conn: Arc<Connection>,
    link: Option<Link>,
}

/// A replaced connection finishing its calls in flight.
pub(crate) struct Retiring {
    conn: Arc<Connection>,
    link: Option<Link>,
    until: Instant,
}

impl Handler<Reconfigure> for UpstreamActor {
    type Result = ();

    fn handle(&mut self, msg: Reconfigure, ctx: &mut Context<Self>) {
        if self.life.phase().is_stopping() {
            return;
        }
        tracing::info!(upstream = %self.key, "configuration changed: starting a new connection");
        self.published.breaker.configure(&msg.cfg.health);
        self.published.set_transport(&msg.cfg);
        self.backoff = msg.cfg.restart.initial_backoff;
        self.cfg = msg.cfg;
        self.timing = msg.timing;
        self.drain = msg.drain;
        // A connection that serves goes on until its replacement is ready (the lifecycle
        // keeps it); any other is handed back, to be stopped now.
        let why = "its configuration changed";
        let current = match self.current.take() {
            Some(conn) => Some(Serving {
                conn,
                link: self.link.take(),
            }),
            None => {
                stop_now(None, self.link.take(), why);
                None
            }
        };
        if let Some(stop) = self.life.on(&self.key, Event::Reconfigured { current }) {
            stop_now(Some(&stop.conn), stop.link, why);
        }
        self.start(ctx);
    }
}

impl UpstreamActor {
    /// The connection meant to replace the serving one ended before it was ready: the old one
    /// goes on serving, and the new configuration is tried again after the backoff.
    pub(super) fn replacement_failed(
        &mut self,
        ctx: &mut Context<Self>,
        reason: String,
        died_probing: bool,
    ) {
        // The lifecycle knows whether the next start may probe.
        if died_probing {
            return self.start(ctx);
        }
        let delay = self.next_backoff();
        tracing::warn!(
            upstream = %self.key,
            "its new configuration did not start: {reason}; the old connection goes on serving; trying again in {}ms",
            delay.as_millis()
        );
        self.start_later(ctx, delay);
    }

    /// Publishes nothing: the caller has published the new connection already.
    pub(super) fn retire(&mut self, old: Serving) {
        self.retiring.push(Retiring {
            conn: old.conn,
            link: old.link,
            until: Instant::now() + self.drain,
        });
        self.sweep_retiring(Instant::now());
    }

    /// With the sweep of deadlines: a retired connection whose calls are all answered, or
    /// whose drain deadline passed, is closed (what is left fails with an error).
    pub(super) fn sweep_retiring(&mut self, now: Instant) {
        if self.retiring.is_empty() {
            return;
        }
        let grace = self.grace;
        self.retiring.retain_mut(|r| {
            r.conn.expire(now);
            let done = r.conn.in_flight() == 0 || now >= r.until;
            if done {
                let why = "its configuration changed and the new connection serves";
                stop_later(&r.conn, r.link.take(), why, grace);
            }
            !done
        });
    }

    /// Closes the connection that was being replaced, if any, and those retiring (the
    /// upstream stops).
    pub(super) fn stop_replaced(&mut self, replaced: Option<Serving>, why: &str) {
        if let Some(old) = replaced {
            stop_later(&old.conn, old.link, why, self.grace);
        }
        for r in std::mem::take(&mut self.retiring) {
            stop_later(&r.conn, r.link, why, self.grace);
        }
    }
}

/// Closes a connection that never served (its process is signalled at once).
fn stop_now(conn: Option<&Connection>, link: Option<Link>, why: &str) {
    if let Some(conn) = conn {
        conn.close(why);
    }
    if let Some(Link::Process(pid)) = link {
        process::signal_group(pid, Signal::TERM);
    }
}

/// Closes a connection politely (a child's input closes); its process gets SIGTERM after
/// `grace` and SIGKILL after twice that, as at shutdown.
fn stop_later(conn: &Connection, link: Option<Link>, why: &str, grace: Duration) {
    conn.close(why);
    if let Some(Link::Process(pid)) = link {
        actix::spawn(async move {
            tokio::time::sleep(grace).await;
            process::signal_group(pid, Signal::TERM);
            tokio::time::sleep(grace).await;
            process::signal_group(pid, Signal::KILL);
        });
    }
}
