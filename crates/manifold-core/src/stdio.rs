//! The stdio transport: the host writes newline-delimited messages to our stdin and reads
//! our stdout. One session. Input is read by a dedicated thread with blocking reads (no async
//! stdin, which goes through the blocking pool: BENCHMARKS.md); output is written without
//! ever blocking a thread (see [`crate::outlet::PipeOutlet`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_protocol::{Frame, LineBuffer};
use manifold_telemetry::{metrics, Direction, HostTransport};
use manifold_upstream::pipe::{PipeWriter, Stall, WhenFull};

use crate::context::Origin;
use crate::outlet::Ending;
use crate::outlet::{BlockingOutlet, Outlet, PipeOutlet};
use crate::router::Router;
use crate::session::{Session, Transport};

/// Serves the process's own stdin/stdout as one session, returned once registered. The
/// session ends when the host closes stdin (once every request read has been answered), or
/// when it takes none of its output for `server.stall_timeout_ms`.
pub fn serve_stdio(router: Arc<Router>) -> io::Result<Arc<Session>> {
    let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
    let output = io::stdout().as_fd().try_clone_to_owned()?;
    serve(router, input, output)
}

/// Serves one session reading `input` on a new thread and writing `output`.
pub fn serve(router: Arc<Router>, input: File, output: OwnedFd) -> io::Result<Arc<Session>> {
    let id = Session::next_id();
    let limit = router.settings().session_queue_bytes;
    let stall = router.settings().stall_timeout;
    let ending = router.sessions().ending();
    let (outlet, pipe) = outlet_for(output, id, limit.saturating_mul(2), stall, ending)?;
    let session = Session::with_id(id, Transport::Stdio, outlet);
    session.set_caller(router.stdio_caller());
    router
        .sessions()
        .add(Arc::clone(&session), None)
        .map_err(io::Error::other)?;
    let origin = Origin::new(Some(Arc::clone(&session)), Arc::clone(session.stream()));
    std::thread::Builder::new()
        .name("host-input".into())
        .spawn(move || {
            let pace = pipe.as_deref().map(|pipe| Pace {
                pipe,
                high: limit,
                grace: router.settings().shutdown_grace,
            });
            let why = read_loop(&router, &origin, input, pace);
            match why {
                Ended::ClosedInput => finish(&router, &origin, pipe.as_deref()),
                Ended::ClosedUnread => tracing::warn!(
                    "the host closed its input and took none of its output for \
                     server.shutdown_grace_ms; what it has not read is dropped"
                ),
                Ended::Other(_) => {}
            }
            router.end_session(id, &why.reason(router.settings().shutdown_grace));
        })?;
    Ok(session)
}

/// The writer under a stdio session's outlet, when it writes to a pipe or socket.
type Pipe = Option<Arc<PipeWriter>>;

/// Why the read loop stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ended {
    /// The host closed its input: what it sent is answered before the session ends.
    ClosedInput,
    /// The host closed its input while paced, and reads none of its output: nothing it
    /// has not read will reach it.
    ClosedUnread,
    Other(&'static str),
}

impl Ended {
    fn reason(self, grace: Duration) -> String {
        match self {
            Self::ClosedInput => "the host closed its input".into(),
            Self::ClosedUnread => format!(
                "the host closed its input and took none of its output for \
                 server.shutdown_grace_ms ({} ms)",
                grace.as_millis()
            ),
            Self::Other(why) => why.into(),
        }
    }
}

/// How the reader paces a host that reads its output slowly (see [`read_loop`]).
struct Pace<'a> {
    pipe: &'a PipeWriter,
    /// No input is read while more output than this waits (until half of it is left).
    high: usize,
    /// How long a host that closed its input may take nothing before it is let go.
    grace: Duration,
}

/// How often a paced reader looks whether the host closed its input.
const PACE_CHECK: Duration = Duration::from_millis(100);

impl Pace<'_> {
    /// Waits while the host's output is over the limit. Stops reading if the output closed
    /// meanwhile (the host stalled, or closed it), or if the host closed its input and has
    /// taken none of its output for the grace time: it is not coming back for it, and waiting
    /// for it would hold Manifold's exit.
    fn wait(&self, input: &File) -> Result<(), Ended> {
        if self.pipe.queued() <= self.high {
            return Ok(());
        }
        while !self.pipe.wait_below(self.high, self.high / 2, PACE_CHECK) {
            if self.pipe.unread_for() >= self.grace && hung_up(input) {
                return Err(Ended::ClosedUnread);
            }
        }
        if self.pipe.is_closed() {
            return Err(Ended::Other("the host's output closed"));
        }
        Ok(())
    }
}

/// Whether the writing end of `input` was closed (a pipe or socket whose host hung up).
fn hung_up(input: &File) -> bool {
    use rustix::event::{PollFd, PollFlags, Timespec};
    // A socket half-closed by the host reports RDHUP; a pipe whose writer closed, HUP.
    let mut fds = [PollFd::new(input, PollFlags::IN | PollFlags::RDHUP)];
    let now = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    match rustix::event::poll(&mut fds, Some(&now)) {
        Ok(_) => fds[0]
            .revents()
            .intersects(PollFlags::HUP | PollFlags::RDHUP | PollFlags::ERR),
        Err(_) => false,
    }
}

/// Pipes and sockets get the non-blocking writer (returned too, to pace and flush it);
/// terminals and files plain writes, so that interactive use does not switch a shared
/// terminal to non-blocking mode.
fn outlet_for(
    fd: OwnedFd,
    session: u64,
    limit: usize,
    stall: Duration,
    ending: Ending,
) -> io::Result<(Arc<dyn Outlet>, Pipe)> {
    let ft = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if matches!(
        ft,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
    ) {
        let writer =
            PipeWriter::with_stall(fd, limit, WhenFull::Fail, stalled(stall, &ending, session))?;
        let outlet = PipeOutlet::new(Arc::clone(&writer), session, ending);
        Ok((Arc::new(outlet), Some(writer)))
    } else {
        Ok((Arc::new(BlockingOutlet::new(File::from(fd))), None))
    }
}

/// What the writer does when the host takes none of its output for `after`: the session is
/// ended, saying why.
fn stalled(after: Duration, ending: &Ending, session: u64) -> Stall {
    let ending = ending.clone();
    Stall {
        after,
        then: Box::new(move |waiting| {
            let why = format!(
                "the host read none of its output for server.stall_timeout_ms ({} ms; {waiting} \
                 bytes waiting)",
                after.as_millis()
            );
            tracing::warn!("{why}; ending its session");
            ending.end(session, why);
        }),
    }
}

/// Reads until end of input; returns why it stopped.
///
/// The one stdio host is paced rather than cut off: its input is not read while more than
/// `pace.high` bytes of output (`session_queue_bytes`) wait for it (until half of that is
/// left), nor while more than `max_requests_per_session` of its requests are unanswered. So a
/// host that reads slowly slows its own requests down, and what Manifold holds for it stays
/// bounded by the limit plus the answers to the requests it was let send, which are never
/// dropped. A host that takes nothing for `stall_timeout_ms` is let go by the writer.
///
/// Requests that follow `initialize` wait for its answer (produced asynchronously, once the
/// upstreams started): over stdio the host's order is known, so a host that pipelines its
/// first exchange is served in that order rather than told it has not initialized.
fn read_loop(
    router: &Arc<Router>,
    origin: &Origin,
    mut input: File,
    pace: Option<Pace<'_>>,
) -> Ended {
    let mut buf = LineBuffer::new(router.settings().max_message_bytes);
    let session = origin.session.as_ref();
    let in_flight = router.settings().http.max_requests_per_session;
    // Until every upstream made its first start attempt: a session-era host's initialize
    // waits for it, but a stateless host may begin with any request, so the first message
    // waits (bounded) for it here.
    let mut settled = router.hub().is_settled();
    // Until the session's era is settled (see `open`); then no message pays for it.
    let mut opening = session.is_some();
    loop {
        let n = match buf.read_with(|spare| input.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::info!("reading from the host failed: {e}");
                return Ended::Other("reading from the host failed");
            }
        };
        metrics().host_bytes(HostTransport::Stdio, Direction::In, n);
        if session.is_some_and(|s| s.end_reason().is_some()) {
            return Ended::Other("the session ended");
        }
        while let Some(frame) = buf.next_frame() {
            if let Some(Err(ended)) = pace.as_ref().map(|p| p.wait(&input)) {
                return ended;
            }
            if let Some(session) = session {
                wait_for_answers(session, in_flight);
            }
            if !settled {
                let (hub, limit) = (router.hub(), router.settings().startup_timeout);
                router.runtime().block_on(hub.wait_settled(limit));
                settled = true;
            }
            match session {
                Some(session) if opening => opening = open(router, origin, session, frame),
                _ => dispatch(router, origin, frame),
            }
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                dispatch(router, origin, frame);
            }
            return Ended::ClosedInput;
        }
    }
}

/// Dispatches a message of a session whose era nothing settled yet; returns whether that is
/// still so. A message that began the handshake (`initialize`) is waited for: whatever the
/// host wrote after it is read once it has been answered.
fn open(router: &Arc<Router>, origin: &Origin, session: &Session, frame: Frame<'_>) -> bool {
    let before = session.unanswered();
    dispatch(router, origin, frame);
    if session.is_new() {
        return true;
    }
    if !session.is_stateless() {
        // The initialize's context lives until its answer is written.
        wait_for_answers(session, before);
    }
    false
}

/// Waits while the host has more than `limit` requests unanswered. Rare (a host pipelining
/// past the limit), so a short sleep is simpler than a wake-up on every answer.
fn wait_for_answers(session: &Session, limit: usize) {
    while session.unanswered() > limit && session.end_reason().is_none() {
        std::thread::sleep(std::time::Duration::from_micros(200));
    }
}

/// The host closed its input: every request it sent is still owed exactly one answer. Waits
/// up to `shutdown_grace_ms` for the upstreams to answer, cancels what is left (each gets an
/// error saying why), and waits the same time again for the output to reach the host.
fn finish(router: &Router, origin: &Origin, pipe: Option<&PipeWriter>) {
    let Some(session) = &origin.session else {
        return;
    };
    let grace = router.settings().shutdown_grace;
    let left = session.wait_answered(Instant::now() + grace);
    if left > 0 {
        let reason = format!(
            "the host closed its input and Manifold is shutting down; no answer came within \
             server.shutdown_grace_ms ({} ms)",
            grace.as_millis()
        );
        let cancelled = router.cancel_in_flight(session.id(), &reason);
        // Requests not yet sent upstream (waiting for a start or a limit) end on their own.
        let still = session.wait_answered(Instant::now() + grace);
        tracing::warn!(
            unanswered = left,
            cancelled,
            never_answered = still,
            "the host closed its input with requests in flight"
        );
    }
    if let Some(pipe) = pipe {
        if !pipe.flush(Instant::now() + grace) {
            tracing::warn!("the host did not read all of its output before Manifold stopped");
        }
    }
}

fn dispatch(router: &Arc<Router>, origin: &Origin, frame: Frame<'_>) {
    match frame {
        Frame::Line(line) => {
            router.handle_line(origin, line);
        }
        Frame::Oversize { len, head, tail } => router.oversize(origin, len, head, tail),
    }
}
