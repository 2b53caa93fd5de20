//! The stdio transport: the host writes newline-delimited messages to our stdin and reads
//! our stdout. Input is read by a dedicated thread with blocking reads (no async stdin, which
//! goes through the blocking pool: PERF.md); output is written without blocking any thread.

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

use manifold_protocol::{Frame, LineBuffer};
use manifold_upstream::pipe::{PipeWriter, WhenFull};
use manifold_upstream::Downstream;
use tokio::sync::oneshot;

use crate::router::Router;
use crate::session::{Output, Session};

/// Output queued for a host that reads slowly, before writers wait for it.
const HOST_QUEUE_LIMIT: usize = 256 << 20;

/// Serves the process's own stdin/stdout. The receiver fires when the host closes stdin.
pub fn serve_stdio(router: Arc<Router>) -> io::Result<(Arc<Session>, oneshot::Receiver<()>)> {
    let input = File::from(io::stdin().as_fd().try_clone_to_owned()?);
    let output = output_for(io::stdout().as_fd().try_clone_to_owned()?)?;
    serve(router, input, output)
}

/// Pipes and sockets get the non-blocking writer; terminals and files plain writes, so that
/// interactive use does not switch a shared terminal to non-blocking mode.
pub fn output_for(fd: OwnedFd) -> io::Result<Output> {
    let ft = rustix::fs::FileType::from_raw_mode(rustix::fs::fstat(&fd)?.st_mode);
    if matches!(
        ft,
        rustix::fs::FileType::Fifo | rustix::fs::FileType::Socket
    ) {
        Ok(Output::Pipe(PipeWriter::new(
            fd,
            HOST_QUEUE_LIMIT,
            WhenFull::Wait,
        )?))
    } else {
        Ok(Output::Blocking(std::sync::Mutex::new(File::from(fd))))
    }
}

/// Serves one session reading `input` on a new thread.
pub fn serve(
    router: Arc<Router>,
    input: impl Read + Send + 'static,
    output: Output,
) -> io::Result<(Arc<Session>, oneshot::Receiver<()>)> {
    let session = Session::new(output);
    router
        .hub()
        .add_session(Arc::clone(&session) as Arc<dyn Downstream>);
    let (done_tx, done_rx) = oneshot::channel();
    let reader_session = Arc::clone(&session);
    std::thread::Builder::new()
        .name("host-input".into())
        .spawn(move || {
            read_loop(&router, &reader_session, input);
            router.hub().remove_session(reader_session.session_id());
            let _ = done_tx.send(());
        })?;
    Ok((session, done_rx))
}

fn read_loop(router: &Arc<Router>, session: &Arc<Session>, mut input: impl Read) {
    let mut buf = LineBuffer::new(router.settings().max_message_bytes);
    loop {
        let n = match buf.read_with(|spare| input.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                tracing::warn!("reading from the host failed: {e}");
                return;
            }
        };
        while let Some(frame) = buf.next_frame() {
            dispatch(router, session, frame);
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                dispatch(router, session, frame);
            }
            tracing::info!("the host closed its input");
            return;
        }
    }
}

fn dispatch(router: &Arc<Router>, session: &Arc<Session>, frame: Frame<'_>) {
    match frame {
        Frame::Line(line) => router.handle_line(session, line),
        Frame::Oversize { len } => router.oversize(session, len),
    }
}
