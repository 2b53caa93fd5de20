//! The actor's side of an upstream's health: a periodic ping (`health_interval`, each
//! allowed `health_timeout`) so that an upstream that stops answering is found even with no
//! traffic, the half-open probe of an open circuit breaker once its cooldown is over, and the
//! restart of an upstream whose breaker stayed open for `restart_after` (the child killed, the
//! HTTP connection closed; the usual restart path, with its backoff, does the rest).
//!
//! One ping at a time: after an answered one the next goes `health_interval` later; after a
//! failed one, at the next check, so that an upstream that stopped answering reaches the
//! breaker's threshold in about `breaker_failures` x `health_timeout`.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use actix::prelude::*;
use manifold_telemetry::{BreakerState, HealthCheck};
use rustix::process::Signal;

use super::{Link, UpstreamActor};
use crate::error::UpstreamError;
use crate::process;

/// What the actor keeps about its connection's health.
#[derive(Default)]
pub(super) struct Health {
    /// The generation whose handshake succeeded (0: none yet); pings go only to it.
    ready: u64,
    /// A ping is in flight.
    pinging: bool,
    /// When the next periodic ping is due.
    next_ping: Option<Instant>,
    /// The generation a restart for health was asked for (asked once per connection).
    restarted: u64,
    /// Pings in a row that failed, for the log.
    failed: u32,
}

/// How a ping ended.
enum Pinged {
    Answered(Duration),
    /// Not answered in time ([`HealthCheck::Timeout`]) or failed ([`HealthCheck::Error`]).
    Failed(HealthCheck, String),
    /// The connection ended meanwhile: nothing to learn about its health.
    Closed,
}

impl UpstreamActor {
    /// The connection of `generation` finished its handshake: it answers, so the breaker
    /// closes, and pings start.
    pub(super) fn health_ready(&mut self, generation: u64) {
        self.published.breaker.reset();
        self.health.ready = generation;
        self.health.pinging = false;
        self.health.failed = 0;
        self.health.next_ping = self.cfg.health.interval.map(|i| Instant::now() + i);
    }

    /// Runs with the sweep of deadlines (`SWEEP_EVERY`, 100 ms): a few comparisons.
    pub(super) fn check_health(&mut self, ctx: &mut Context<Self>) {
        if self.life.phase().is_stopping()
            || self.health.ready != self.generation
            || self.current.is_none()
        {
            return;
        }
        let now = Instant::now();
        let breaker = &self.published.breaker;
        if let (Some(after), Some(open)) = (self.cfg.health.restart_after, breaker.open_for(now)) {
            if open >= after && self.health.restarted != self.generation {
                self.health.restarted = self.generation;
                return self.restart_unhealthy(open);
            }
        }
        if self.health.pinging {
            return;
        }
        match breaker.state() {
            BreakerState::Open => {
                if breaker.try_half_open(now) {
                    tracing::info!(upstream = %self.key, "circuit breaker half-open: probing with a ping");
                    self.ping(ctx, true);
                }
            }
            // A probe whose ping was lost (a new connection came meanwhile): probe again.
            BreakerState::HalfOpen => self.ping(ctx, true),
            BreakerState::Closed => {
                if self.health.next_ping.is_some_and(|due| now >= due) {
                    self.ping(ctx, false);
                }
            }
        }
    }

    fn ping(&mut self, ctx: &mut Context<Self>, probe: bool) {
        let Some(conn) = self.current.clone() else {
            return;
        };
        self.health.pinging = true;
        let generation = self.generation;
        let limit = self.cfg.health.timeout;
        let fut = async move {
            let started = Instant::now();
            match conn.ping(limit).await {
                Ok(Some(_)) => Pinged::Answered(started.elapsed()),
                Ok(None) => Pinged::Failed(
                    HealthCheck::Timeout,
                    format!("a ping was not answered within {}ms", limit.as_millis()),
                ),
                Err(_) if conn.is_closed() => Pinged::Closed,
                Err(e) => Pinged::Failed(HealthCheck::Error, ping_error(&e)),
            }
        };
        ctx.spawn(
            actix::fut::wrap_future(fut).map(move |pinged, act: &mut Self, _| {
                if generation == act.generation {
                    act.pinged(probe, pinged);
                }
            }),
        );
    }

    fn pinged(&mut self, probe: bool, pinged: Pinged) {
        self.health.pinging = false;
        let now = Instant::now();
        let breaker = &self.published.breaker;
        let counters = &self.counters;
        let count = |check: HealthCheck| {
            counters.health_checks[check as usize].fetch_add(1, Ordering::Relaxed);
        };
        match pinged {
            Pinged::Answered(took) => {
                count(HealthCheck::Ok);
                counters.ping.observe(took);
                if self.health.failed > 0 {
                    tracing::info!(upstream = %self.key, "it answers pings again (after {} failed)", self.health.failed);
                }
                self.health.failed = 0;
                if probe {
                    breaker.probed(Ok(()));
                    tracing::info!(upstream = %self.key, "circuit breaker closed: the probe was answered in {}ms", took.as_millis());
                } else {
                    breaker.succeeded();
                }
                self.health.next_ping = self.cfg.health.interval.map(|i| now + i);
            }
            Pinged::Failed(check, why) => {
                count(check);
                self.health.failed += 1;
                if probe {
                    breaker.probed(Err(&why));
                    tracing::warn!(upstream = %self.key, "circuit breaker open again: the probe failed ({why})");
                } else {
                    if self.health.failed == 1 {
                        tracing::warn!(upstream = %self.key, "health check failed: {why}");
                    }
                    if breaker.failed(&why) {
                        tracing::warn!(upstream = %self.key, "circuit breaker opened: {why}; calls to it are refused until a probe finds it answering");
                    }
                }
                // The next ping goes at the next check.
                self.health.next_ping = self.cfg.health.interval.map(|_| now);
            }
            Pinged::Closed => {}
        }
    }

    /// The breaker has been open for `open` (past `restart_after`): the upstream is restarted
    /// as after a crash. The child's whole group is killed (a stopped process too); an HTTP
    /// connection is closed and opened anew.
    fn restart_unhealthy(&mut self, open: Duration) {
        let reason = format!(
            "its circuit breaker has been open for {}s (restart_after)",
            open.as_secs()
        );
        tracing::warn!(upstream = %self.key, "restarting it: {reason}");
        if let Some(conn) = &self.current {
            conn.close(&reason);
        }
        if let Some(Link::Process(pid)) = self.link {
            process::signal_group(pid, Signal::KILL);
        }
    }
}

/// Why a ping failed, for the log and the breaker's reason.
fn ping_error(e: &UpstreamError) -> String {
    match e {
        UpstreamError::Overloaded { queued, .. } => {
            format!(
                "a ping could not be sent: it is not reading its input ({queued} bytes waiting)"
            )
        }
        e => format!("a ping failed: {e}"),
    }
}
