//! The stdio transport: the host writes newline-delimited messages to our stdin and reads
//! our stdout. One session. Input is read by a dedicated thread with blocking reads (no async
//! stdin, which goes through the blocking pool: BENCHMARKS.md); output is written without
//! ever blocking a thread (see [`crate::outlet::PipeOutlet`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::Instant;

use manifold_protocol::{Frame, LineBuffer};
use manifold_telemetry::{metrics, Direction, HostTransport};
use manifold_upstream::pipe::{PipeWriter, WhenFull};

use crate::context::Origin;
use crate::outlet::Ending;
use crate::outlet::{BlockingOutlet, Outlet, PipeOutlet};
use crate::router::Router;
use crate::session::{Session, Transport};

/// Serves the process's own stdin/stdout as one session, returned once registered. The
/// session ends when the host closes stdin (once every request read has been answered), or
/// when its output overflows.
pub fn serve_stdio(router: Arc<Router>) -> io::Result<Arc<Session>> {
    let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
    let output = io::stdout().as_fd().try_clone_to_owned()?;
    serve(router, input, output)
}

/// Serves one session reading `input` on a new thread and writing `output`.
pub fn serve(
    router: Arc<Router>,
    input: impl Read + Send + 'static,
    output: OwnedFd,
) -> io::Result<Arc<Session>> {
    let id = Session::next_id();
    let limit = router.settings().session_queue_bytes;
    let hard = limit.saturating_mul(2);
    let (outlet, pipe) = outlet_for(output, id, hard, router.sessions().ending())?;
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
            let pace = pipe.as_ref().map(|p| (p, limit));
            let why = read_loop(&router, &origin, input, pace);
            if why == CLOSED_INPUT {
                finish(&router, &origin, pipe.as_deref());
            }
            router.end_session(id, why);
        })?;
    Ok(session)
}

/// The writer under a stdio session's outlet, when it writes to a pipe or socket.
type Pipe = Option<Arc<PipeWriter>>;

/// Why the session ends when the host closes its input.
const CLOSED_INPUT: &str = "the host closed its input";

/// Pipes and sockets get the non-blocking writer (returned too, to pace and flush it);
/// terminals and files plain writes, so that interactive use does not switch a shared
/// terminal to non-blocking mode.
fn outlet_for(
    fd: OwnedFd,
    session: u64,
    limit: usize,
    ending: Ending,
) -> io::Result<(Arc<dyn Outlet>, Pipe)> {
    let ft = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if matches!(
        ft,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
    ) {
        let writer = PipeWriter::new(fd, limit, WhenFull::Fail)?;
        let outlet = PipeOutlet::new(Arc::clone(&writer), session, ending);
        Ok((Arc::new(outlet), Some(writer)))
    } else {
        Ok((Arc::new(BlockingOutlet::new(File::from(fd))), None))
    }
}

/// Reads until end of input; returns why it stopped.
///
/// The one stdio host is paced rather than cut off: its input is not read while more than
/// `pace`'s byte count of output (`session_queue_bytes`) waits for it (until half of that is
/// left), nor while more than `max_requests_per_session` of its requests are unanswered. So a
/// host that reads slowly slows its own requests down, and what Manifold holds for it stays
/// bounded by the limit plus the answers to requests already read; only if those (or
/// notifications) pass twice the limit is the session ended.
fn read_loop(
    router: &Arc<Router>,
    origin: &Origin,
    mut input: impl Read,
    pace: Option<(&Arc<PipeWriter>, usize)>,
) -> &'static str {
    let mut buf = LineBuffer::new(router.settings().max_message_bytes);
    let session = origin.session.as_ref();
    let in_flight = router.settings().http.max_requests_per_session;
    // Until every upstream made its first start attempt: a session-era host's initialize
    // waits for it, but a stateless host may begin with any request, so the first message
    // waits (bounded) for it here.
    let mut settled = router.hub().is_settled();
    loop {
        let n = match buf.read_with(|spare| input.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::info!("reading from the host failed: {e}");
                return "reading from the host failed";
            }
        };
        metrics().host_bytes(HostTransport::Stdio, Direction::In, n);
        if session.is_some_and(|s| s.end_reason().is_some()) {
            return "the session ended";
        }
        while let Some(frame) = buf.next_frame() {
            if let Some((pipe, high)) = pace {
                pipe.wait_below(high, high / 2);
            }
            if let Some(session) = session {
                wait_for_answers(session, in_flight);
            }
            if !settled {
                let (hub, limit) = (router.hub(), router.settings().startup_timeout);
                router.runtime().block_on(hub.wait_settled(limit));
                settled = true;
            }
            dispatch(router, origin, frame);
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                dispatch(router, origin, frame);
            }
            return CLOSED_INPUT;
        }
    }
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
