//! The stdio transport: the host writes newline-delimited messages to our stdin and reads
//! our stdout. One session. Input is read by a dedicated thread with blocking reads (no async
//! stdin, which goes through the blocking pool: BENCHMARKS.md); output is written without
//! ever blocking a thread (see [`crate::outlet::PipeOutlet`]).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use manifold_protocol::{Frame, LineBuffer};
use manifold_telemetry::{metrics, Direction, HostTransport};
use manifold_upstream::pipe::{PipeWriter, WhenFull};

use crate::context::Origin;
use crate::outlet::{BlockingOutlet, Outlet, PipeOutlet};
use crate::router::Router;
use crate::session::{Session, Transport};
use crate::sessions::Ending;

/// Serves the process's own stdin/stdout as one session, returned once registered. The
/// session ends when the host closes stdin, or when its output overflows.
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
    let outlet = outlet_for(output, id, limit, router.sessions().ending())?;
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
            let why = read_loop(&router, &origin, input);
            router.end_session(id, &why);
        })?;
    Ok(session)
}

/// Pipes and sockets get the non-blocking writer; terminals and files plain writes, so that
/// interactive use does not switch a shared terminal to non-blocking mode.
fn outlet_for(
    fd: OwnedFd,
    session: u64,
    limit: usize,
    ending: Ending,
) -> io::Result<Arc<dyn Outlet>> {
    let ft = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if matches!(
        ft,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
    ) {
        let writer = PipeWriter::new(fd, limit, WhenFull::Fail)?;
        Ok(Arc::new(PipeOutlet::new(writer, session, ending)))
    } else {
        Ok(Arc::new(BlockingOutlet::new(File::from(fd))))
    }
}

/// Reads until end of input; returns why it stopped.
fn read_loop(router: &Arc<Router>, origin: &Origin, mut input: impl Read) -> String {
    let mut buf = LineBuffer::new(router.settings().max_message_bytes);
    let session = origin.session.as_ref();
    loop {
        let n = match buf.read_with(|spare| input.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("reading from the host failed: {e}"),
        };
        metrics().host_bytes(HostTransport::Stdio, Direction::In, n);
        if session.is_some_and(|s| s.end_reason().is_some()) {
            return "the session ended".into();
        }
        while let Some(frame) = buf.next_frame() {
            dispatch(router, origin, frame);
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                dispatch(router, origin, frame);
            }
            return "the host closed its input".into();
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
