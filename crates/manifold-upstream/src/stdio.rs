//! The stdio transport: a child process, its stdin as the connection's wire (non-blocking
//! writes, see [`crate::pipe`]), and a reader thread on its stdout with blocking reads (no
//! async runtime on this path: on two cores it is the lowest-latency relay, BENCHMARKS.md).

use std::io::Read;
use std::os::fd::OwnedFd;
use std::process::ChildStdout;
use std::sync::Arc;
use std::time::Duration;

use manifold_config::StdioConfig;
use manifold_protocol::{Frame, LineBuffer};

use crate::connection::{Connection, Events, Timing, Wire};
use crate::outbound::Outbound;
use crate::pipe::{PipeSize, PipeWriter, WhenFull, WriteError};
use crate::process;

/// Requests queued to a child that does not read its input, before new ones are refused.
const WRITE_QUEUE_LIMIT: usize = 64 << 20;

/// A child's stdin.
struct PipeWire(Arc<PipeWriter>);

impl Wire for PipeWire {
    fn send(&self, msg: Outbound) -> Result<(), WriteError> {
        self.0.write_line(&msg.line)
    }

    fn close(&self, _reason: &str) {
        self.0.close();
    }
}

/// A started child process.
pub(crate) struct Started {
    pub conn: Arc<Connection>,
    pub pid: u32,
}

/// What the reader thread needs besides the connection.
pub(crate) struct Settings {
    pub key: Arc<str>,
    pub timing: Timing,
    pub max_message_bytes: usize,
    pub grace: Duration,
}

/// Starts the child and its reader thread. `exited` is called once, from the reader thread,
/// with why the process ended, after it was reaped.
pub(crate) fn start(
    cfg: &StdioConfig,
    settings: Settings,
    events: Box<dyn Events>,
    exited: impl FnOnce(String) + Send + 'static,
) -> Result<Started, String> {
    let mut child =
        process::spawn(cfg).map_err(|e| format!("could not start {:?}: {e}", cfg.command))?;
    let (Some(stdin), Some(stdout), Some(stderr)) =
        (child.stdin.take(), child.stdout.take(), child.stderr.take())
    else {
        return Err("its pipes could not be opened".into());
    };
    let writer = PipeWriter::new(OwnedFd::from(stdin), WRITE_QUEUE_LIMIT, WhenFull::Fail)
        .map_err(|e| format!("its input pipe is unusable: {e}"))?;
    let pid = child.id();
    let conn = Arc::new(Connection::new(
        &settings.key,
        Box::new(PipeWire(writer)),
        events,
        settings.timing,
    ));
    process::relay_stderr(Arc::clone(&settings.key), stderr);
    let reader_conn = Arc::clone(&conn);
    let spawned = std::thread::Builder::new()
        .name(format!("upstream-{}", settings.key))
        .spawn(move || {
            // A bug on this thread must not leave the upstream half-alive: the connection
            // closes and the actor restarts it, as after a crash.
            let reason = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                read_loop(&reader_conn, stdout, settings.max_message_bytes)
            }))
            .unwrap_or_else(|_| "Manifold's reader of its output failed (a bug)".to_owned());
            reader_conn.close(&reason);
            let status = process::reap(&mut child, settings.grace);
            exited(format!("{reason}; exit: {status}"));
        });
    if let Err(e) = spawned {
        conn.close("no reader thread");
        process::signal_group(pid, rustix::process::Signal::KILL);
        return Err(format!("could not start its reader thread: {e}"));
    }
    Ok(Started { conn, pid })
}

/// Reads until end of input or a protocol violation; returns the reason it stopped. A
/// message over the size limit is skipped (newline framing allows it): only the request it
/// answered fails.
fn read_loop(conn: &Arc<Connection>, mut stdout: ChildStdout, max: usize) -> String {
    let mut buf = LineBuffer::new(max);
    let mut size = PipeSize::of(&stdout);
    loop {
        let n = match buf.read_with(|spare| stdout.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("reading its output failed: {e}"),
        };
        while let Some(frame) = buf.next_frame() {
            if let Err(problem) = handle(conn, frame, max, &mut size, &stdout) {
                return problem;
            }
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                if let Err(problem) = handle(conn, frame, max, &mut size, &stdout) {
                    return problem;
                }
            }
            return "it closed its output (exited)".to_owned();
        }
    }
}

fn handle(
    conn: &Arc<Connection>,
    frame: Frame<'_>,
    max: usize,
    size: &mut PipeSize,
    stdout: &ChildStdout,
) -> Result<(), String> {
    match frame {
        Frame::Line(line) => {
            // Large answers come in fewer pipe-fulls from now on.
            size.fit(stdout, line.len());
            conn.receive(line, None)
        }
        Frame::Oversize { len, head, tail } => {
            conn.oversize(len, max, head, tail);
            Ok(())
        }
    }
}
