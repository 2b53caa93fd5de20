//! Where an upstream actor is in its lifecycle, and the one place that moves it: [`Phase::next`].
//!
//! A connection is started (the era probe and handshake run), serves, ends and is started
//! again after a backoff; a reload starts a new configuration's connection beside the one
//! that serves; a shutdown stops it for good. The actor does the work each step needs (spawning,
//! publishing, signalling); this module only decides which step is legal, so the rules can be
//! tested without a process or a server. `Old` is the connection a reload replaces (generic so
//! that the tests need no real one).

/// The lifecycle of one upstream actor.
#[derive(Debug, PartialEq)]
pub(crate) enum Phase<Old> {
    /// No connection serves: the current one shakes hands, or the next start is due.
    Connecting(Attempt),
    /// The current connection finished its handshake and serves.
    Serving,
    /// A new configuration's connection is on its way (`new`) while `old`, the one it
    /// replaces, goes on serving.
    Replacing { old: Old, new: Attempt },
    /// A shutdown was asked for: the connection is closing, and the shutdown resolves once it
    /// has ended.
    Stopping,
    /// Nothing runs, and nothing starts again.
    Stopped,
}

/// How far a connection that does not serve yet has come.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Attempt {
    /// It has no connection; the next start is due (at once or after the backoff). `probe`:
    /// whether that start may probe the era with `server/discover`; false once after a child
    /// exited on its probe (it is of the session era).
    Down { probe: bool },
    /// Its connection is started and shakes hands.
    Handshaking,
}

/// What happens to an upstream actor.
#[derive(Debug)]
pub(crate) enum Event<Old> {
    /// A connection was started (a process spawned, an HTTP client set up).
    Spawned,
    /// The current connection finished its handshake.
    Ready,
    /// The current connection ended, or could not be started. `died_probing`: a child exited
    /// before answering its `server/discover` probe.
    Ended { died_probing: bool },
    /// A reload changed the configuration. `current`: the connection there is now, if any.
    Reconfigured { current: Option<Old> },
    /// A shutdown was asked for. `connected`: something is still running that must end first.
    Shutdown { connected: bool },
}

/// A transition that does not exist: the phase stays as it was.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Illegal {
    pub phase: &'static str,
    pub event: &'static str,
}

impl std::fmt::Display for Illegal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} while {}", self.event, self.phase)
    }
}

/// Where a transition leaves the actor, and the connection it hands back: on `Ready`, the
/// replaced one, to retire; on `Reconfigured`, the current one when it is not kept, to stop
/// now; on `Shutdown`, the replaced one, to stop.
pub(crate) type Step<Old> = (Phase<Old>, Option<Old>);

impl<Old> Phase<Old> {
    /// The first phase: the first start is due, and may probe.
    pub(crate) fn new() -> Self {
        Phase::Connecting(Attempt::Down { probe: true })
    }

    /// Every transition of the lifecycle. An illegal one gives the phase back unchanged,
    /// with the event (and what it carried) in the error.
    pub(crate) fn next(self, event: Event<Old>) -> Result<Step<Old>, (Self, Event<Old>)> {
        use Attempt::{Down, Handshaking};
        use Phase::{Connecting, Replacing, Serving, Stopped, Stopping};
        Ok(match (self, event) {
            (Connecting(Down { .. }), Event::Spawned) => (Connecting(Handshaking), None),
            (
                Replacing {
                    old,
                    new: Down { .. },
                },
                Event::Spawned,
            ) => (
                Replacing {
                    old,
                    new: Handshaking,
                },
                None,
            ),
            (Connecting(Handshaking), Event::Ready) => (Serving, None),
            (
                Replacing {
                    old,
                    new: Handshaking,
                },
                Event::Ready,
            ) => (Serving, Some(old)),
            // A handshake that ends as the shutdown closes the connection changes nothing.
            (Stopping, Event::Ready) => (Stopping, None),
            (Connecting(attempt), Event::Ended { died_probing }) => {
                (Connecting(attempt.ended(died_probing)), None)
            }
            (Serving, Event::Ended { died_probing }) => {
                (Connecting(Handshaking.ended(died_probing)), None)
            }
            (Replacing { old, new }, Event::Ended { died_probing }) => {
                let new = new.ended(died_probing);
                (Replacing { old, new }, None)
            }
            (Stopping, Event::Ended { .. }) => (Stopped, None),
            // A connection that serves goes on until its replacement is ready; one that does
            // not serve yet is given back to be stopped.
            (Serving, Event::Reconfigured { current: Some(old) }) => {
                let new = Down { probe: true };
                (Replacing { old, new }, None)
            }
            (Serving | Connecting(_), Event::Reconfigured { current }) => {
                (Connecting(Down { probe: true }), current)
            }
            // The new connection not ready yet is dropped: the one before still serves.
            (Replacing { old, .. }, Event::Reconfigured { current }) => {
                let new = Down { probe: true };
                (Replacing { old, new }, current)
            }
            (Connecting(_) | Serving | Stopping, Event::Shutdown { connected }) => {
                (stopping(connected), None)
            }
            (Replacing { old, .. }, Event::Shutdown { connected }) => {
                (stopping(connected), Some(old))
            }
            (Stopped, Event::Shutdown { .. }) => (Stopped, None),
            (phase, event) => return Err((phase, event)),
        })
    }

    /// Whether a start is due: `Some(probe)` with whether it may probe the era.
    pub(crate) fn start_due(&self) -> Option<bool> {
        match self {
            Phase::Connecting(Attempt::Down { probe })
            | Phase::Replacing {
                new: Attempt::Down { probe },
                ..
            } => Some(*probe),
            _ => None,
        }
    }

    /// A shutdown was asked for: nothing new is started, opened or probed.
    pub(crate) fn is_stopping(&self) -> bool {
        matches!(self, Phase::Stopping | Phase::Stopped)
    }

    pub(crate) fn is_replacing(&self) -> bool {
        matches!(self, Phase::Replacing { .. })
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            Phase::Connecting(Attempt::Down { .. }) => "down",
            Phase::Connecting(Attempt::Handshaking) => "handshaking",
            Phase::Serving => "serving",
            Phase::Replacing { .. } => "replacing",
            Phase::Stopping => "stopping",
            Phase::Stopped => "stopped",
        }
    }
}

impl<Old> Default for Phase<Old> {
    fn default() -> Self {
        Self::new()
    }
}

impl<Old> Event<Old> {
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Event::Spawned => "spawned",
            Event::Ready => "ready",
            Event::Ended { .. } => "ended",
            Event::Reconfigured { .. } => "reconfigured",
            Event::Shutdown { .. } => "shutdown",
        }
    }
}

impl Attempt {
    /// The attempt's connection ended (or did not start): the next start is due; it probes
    /// unless this one died on its probe, or the start that failed was not to probe either.
    fn ended(self, died_probing: bool) -> Attempt {
        let probe = match self {
            Attempt::Down { probe } => probe,
            Attempt::Handshaking => true,
        };
        Attempt::Down {
            probe: probe && !died_probing,
        }
    }
}

fn stopping<Old>(connected: bool) -> Phase<Old> {
    match connected {
        true => Phase::Stopping,
        false => Phase::Stopped,
    }
}

/// The actor's phase, moved only through [`Lifecycle::on`].
pub(crate) struct Lifecycle<Old> {
    phase: Phase<Old>,
}

impl<Old> Lifecycle<Old> {
    pub(crate) fn new() -> Self {
        Self {
            phase: Phase::new(),
        }
    }

    pub(crate) fn phase(&self) -> &Phase<Old> {
        &self.phase
    }

    /// Applies `event` and returns the connection it hands back (see [`Step`]). An illegal
    /// one is logged (it is a bug) and changes nothing; a connection it carried is handed
    /// back, to be stopped, so that none is lost.
    pub(crate) fn on(&mut self, upstream: &str, event: Event<Old>) -> Option<Old> {
        let phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        match phase.next(event) {
            Ok((phase, handed)) => {
                self.phase = phase;
                handed
            }
            Err((phase, event)) => {
                let illegal = Illegal {
                    phase: phase.name(),
                    event: event.name(),
                };
                tracing::error!(
                    upstream,
                    "lifecycle: {illegal} is not a transition; ignored"
                );
                self.phase = phase;
                match event {
                    Event::Reconfigured { current } => current,
                    _ => None,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Attempt::{Down, Handshaking};
    use super::Phase::{Connecting, Replacing, Serving, Stopped, Stopping};
    use super::*;

    type P = Phase<&'static str>;
    type E = Event<&'static str>;

    const PROBE: Attempt = Down { probe: true };
    const NO_PROBE: Attempt = Down { probe: false };

    fn ended(died_probing: bool) -> E {
        Event::Ended { died_probing }
    }

    fn replacing(new: Attempt) -> P {
        Replacing { old: "old", new }
    }

    /// Every transition the actor relies on: from, event, to, the connection handed back.
    #[test]
    fn legal_transitions() {
        let reconf = |c: Option<&'static str>| Event::Reconfigured { current: c };
        let shutdown = |connected| Event::Shutdown { connected };
        let table: Vec<(P, E, P, Option<&'static str>)> = vec![
            // A start: spawned, shook hands, serves.
            (
                Connecting(PROBE),
                Event::Spawned,
                Connecting(Handshaking),
                None,
            ),
            (
                Connecting(NO_PROBE),
                Event::Spawned,
                Connecting(Handshaking),
                None,
            ),
            (Connecting(Handshaking), Event::Ready, Serving, None),
            // It ended: the next start probes, unless it died on its probe.
            (Serving, ended(false), Connecting(PROBE), None),
            (Serving, ended(true), Connecting(NO_PROBE), None),
            (
                Connecting(Handshaking),
                ended(false),
                Connecting(PROBE),
                None,
            ),
            (
                Connecting(Handshaking),
                ended(true),
                Connecting(NO_PROBE),
                None,
            ),
            // A start that failed keeps the plan it had.
            (Connecting(PROBE), ended(false), Connecting(PROBE), None),
            (
                Connecting(NO_PROBE),
                ended(false),
                Connecting(NO_PROBE),
                None,
            ),
            // A reload: the serving connection goes on until the new one is ready.
            (Serving, reconf(Some("old")), replacing(PROBE), None),
            (
                replacing(PROBE),
                Event::Spawned,
                replacing(Handshaking),
                None,
            ),
            (replacing(Handshaking), Event::Ready, Serving, Some("old")),
            (replacing(Handshaking), ended(false), replacing(PROBE), None),
            (
                replacing(Handshaking),
                ended(true),
                replacing(NO_PROBE),
                None,
            ),
            (
                replacing(NO_PROBE),
                Event::Spawned,
                replacing(Handshaking),
                None,
            ),
            // A reload of one not serving stops what there is and starts afresh.
            (
                Connecting(Handshaking),
                reconf(Some("new")),
                Connecting(PROBE),
                Some("new"),
            ),
            (Connecting(NO_PROBE), reconf(None), Connecting(PROBE), None),
            (
                replacing(Handshaking),
                reconf(Some("new")),
                replacing(PROBE),
                Some("new"),
            ),
            (replacing(NO_PROBE), reconf(None), replacing(PROBE), None),
            // A shutdown: waits for the connection, or is over at once.
            (Serving, shutdown(true), Stopping, None),
            (Connecting(Handshaking), shutdown(true), Stopping, None),
            (Connecting(PROBE), shutdown(false), Stopped, None),
            (
                replacing(Handshaking),
                shutdown(true),
                Stopping,
                Some("old"),
            ),
            (replacing(PROBE), shutdown(false), Stopped, Some("old")),
            (Stopping, shutdown(true), Stopping, None),
            (Stopped, shutdown(false), Stopped, None),
            (Stopping, Event::Ready, Stopping, None),
            (Stopping, ended(false), Stopped, None),
        ];
        for (from, event, to, handed) in table {
            let what = format!("{from:?} on {event:?}");
            match from.next(event) {
                Ok((phase, back)) => {
                    assert_eq!(phase, to, "{what}");
                    assert_eq!(back, handed, "{what}");
                }
                Err((phase, event)) => panic!("{what}: illegal ({phase:?}, {event:?})"),
            }
        }
    }

    /// What cannot happen is refused, and changes nothing.
    #[test]
    fn illegal_transitions_change_nothing() {
        let table: Vec<(P, E)> = vec![
            (Serving, Event::Spawned),
            (Connecting(Handshaking), Event::Spawned),
            (replacing(Handshaking), Event::Spawned),
            (Stopping, Event::Spawned),
            (Stopped, Event::Spawned),
            (Serving, Event::Ready),
            (Connecting(PROBE), Event::Ready),
            (replacing(PROBE), Event::Ready),
            (Stopped, Event::Ready),
            (Stopped, ended(false)),
            (Stopping, Event::Reconfigured { current: None }),
            (Stopped, Event::Reconfigured { current: Some("c") }),
        ];
        for (from, event) in table {
            let what = format!("{from:?} on {event:?}");
            let before = format!("{from:?}");
            let carried = matches!(event, Event::Reconfigured { current: Some(_) });
            let mut life = Lifecycle { phase: from };
            let back = life.on("up", event);
            assert_eq!(format!("{:?}", life.phase()), before, "{what}");
            assert_eq!(
                back.is_some(),
                carried,
                "{what}: what it carried is handed back"
            );
        }
    }

    #[test]
    fn starts_are_due_only_when_down() {
        assert_eq!(Phase::<()>::new().start_due(), Some(true));
        assert_eq!(replacing(NO_PROBE).start_due(), Some(false));
        for phase in [
            Connecting(Handshaking),
            Serving,
            replacing(Handshaking),
            Stopping,
            Stopped,
        ] {
            assert_eq!(phase.start_due(), None, "{phase:?}");
        }
        assert!(Phase::<()>::Stopping.is_stopping() && Phase::<()>::Stopped.is_stopping());
        assert!(!Phase::<()>::Serving.is_stopping());
    }
}
