//! The reader thread of a connection: reads the upstream's stdout with blocking reads (no
//! async runtime on this path), answers pending requests, routes notifications, and reports
//! why the stream ended.

use std::io::Read;
use std::process::ChildStdout;
use std::sync::Arc;

use manifold_protocol::{codes, write, Envelope, ErrorObject, Frame, Kind, LineBuffer};

use crate::connection::Connection;
use crate::pipe::PipeSize;

/// What the reader tells its owner about messages that are not answers.
pub(crate) trait Events: Send + Sync {
    /// A notification from the upstream (other than progress, handled by the connection).
    fn notification(&self, conn: &Connection, method: &str, params: Option<&str>);
}

/// Reads until end of input or a protocol violation; returns the reason it stopped.
pub(crate) fn run(
    conn: &Arc<Connection>,
    mut stdout: ChildStdout,
    max: usize,
    events: &dyn Events,
) -> String {
    let mut buf = LineBuffer::new(max);
    let mut size = PipeSize::of(&stdout);
    loop {
        let n = match buf.read_with(|spare| stdout.read(spare)) {
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return format!("reading its output failed: {e}"),
        };
        while let Some(frame) = buf.next_frame() {
            if let Frame::Line(line) = &frame {
                // Large answers come in fewer pipe-fulls from now on.
                size.fit(&stdout, line.len());
            }
            if let Err(problem) = handle_frame(conn, frame, max, events) {
                return problem;
            }
        }
        if n == 0 {
            if let Some(frame) = buf.take_rest() {
                if let Err(problem) = handle_frame(conn, frame, max, events) {
                    return problem;
                }
            }
            return "it closed its output (exited)".to_owned();
        }
    }
}

fn handle_frame(
    conn: &Connection,
    frame: Frame<'_>,
    max: usize,
    events: &dyn Events,
) -> Result<(), String> {
    let line = match frame {
        Frame::Line(line) => line,
        Frame::Oversize { len } => {
            return Err(format!(
                "it sent a {len}-byte message, over its limit of {max} bytes"
            ));
        }
    };
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(());
    }
    let env = Envelope::decode(line).map_err(|e| garbage(line, &e.to_string()))?;
    let kind = env.kind().map_err(|e| garbage(line, &e.to_string()))?;
    match kind {
        Kind::Response => {
            let id = env
                .id
                .filter(|id| *id != "null")
                .and_then(|id| id.parse::<u64>().ok());
            match id {
                Some(id) => {
                    if !conn.answer(id, env.result, env.error) {
                        tracing::debug!(
                            upstream = conn.name(),
                            id,
                            "answer to an unknown or finished request dropped"
                        );
                    }
                }
                None => tracing::warn!(
                    upstream = conn.name(),
                    "answer without a usable id dropped: {}",
                    preview(line)
                ),
            }
        }
        Kind::Request => answer_server_request(conn, &env),
        Kind::Notification => {
            let method = env.method.as_deref().unwrap_or_default();
            if method == "notifications/progress" {
                if let Some(params) = env.params {
                    conn.progress(params);
                }
            } else {
                events.notification(conn, method, env.params);
            }
        }
    }
    Ok(())
}

/// Requests from a shared upstream to its client. Only `ping` is answered: with one process
/// shared by every session there is no single host to forward sampling, roots or elicitation
/// to, and Manifold did not declare those capabilities.
fn answer_server_request(conn: &Connection, env: &Envelope<'_>) {
    let Some(id) = env.id else { return };
    let method = env.method.as_deref().unwrap_or_default();
    let mut out = Vec::new();
    if method == "ping" {
        write::response(&mut out, id, "{}");
    } else {
        let err = ErrorObject::new(
            codes::METHOD_NOT_FOUND,
            format!("Manifold does not forward {method} from a shared upstream"),
        );
        write::error_response(&mut out, Some(id), &err);
    }
    conn.write_raw(&out);
}

fn garbage(line: &[u8], problem: &str) -> String {
    format!(
        "it sent something that is not JSON-RPC ({problem}): {}",
        preview(line)
    )
}

fn preview(line: &[u8]) -> String {
    let text = String::from_utf8_lossy(&line[..line.len().min(120)]);
    if line.len() > 120 {
        format!("{text}...")
    } else {
        text.into_owned()
    }
}
