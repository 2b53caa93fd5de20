//! `--faults`: faults of an HTTP server that a client must survive, switched at run time by
//! `POST /fault?mode=MODE` (or set at start with `--fault MODE`), applied to every POST to
//! `/mcp` that carries a request (notifications and answers pass):
//!
//! - `none`: served as usual;
//! - `status500`: `500 Internal Server Error` with a plain-text body;
//! - `reset`: the answer's head is sent, then the connection is dropped mid-body;
//! - `stall`: an SSE answer is opened (one comment), then nothing more is sent while the
//!   connection stays open.

use std::sync::atomic::{AtomicU8, Ordering};

use actix_web::http::StatusCode;
use actix_web::{web, HttpRequest, HttpResponse};
use bytes::Bytes;
use futures::StreamExt;

use super::Shared;

/// Which fault is on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Fault {
    None,
    Status500,
    Reset,
    Stall,
}

impl Fault {
    const ALL: [Fault; 4] = [Fault::None, Fault::Status500, Fault::Reset, Fault::Stall];

    fn name(self) -> &'static str {
        match self {
            Fault::None => "none",
            Fault::Status500 => "status500",
            Fault::Reset => "reset",
            Fault::Stall => "stall",
        }
    }
}

/// The fault on now (an index into [`Fault::ALL`]).
static MODE: AtomicU8 = AtomicU8::new(0);

pub fn set(fault: Fault) {
    let i = Fault::ALL.iter().position(|f| *f == fault).unwrap_or(0);
    MODE.store(u8::try_from(i).unwrap_or(0), Ordering::Relaxed);
}

fn current() -> Fault {
    Fault::ALL[usize::from(MODE.load(Ordering::Relaxed)) % Fault::ALL.len()]
}

/// `POST /fault?mode=MODE`: switches the fault (only with `--faults`).
pub(super) async fn switch(req: HttpRequest, shared: web::Data<Shared>) -> HttpResponse {
    if !shared.state.args.faults {
        return HttpResponse::NotFound().finish();
    }
    let mode = req
        .query_string()
        .split('&')
        .find_map(|kv| kv.strip_prefix("mode="))
        .unwrap_or_default();
    match Fault::ALL.iter().find(|f| f.name() == mode) {
        Some(fault) => {
            set(*fault);
            eprintln!("manifold-fixture: fault {mode}");
            HttpResponse::Ok().body(format!("{mode}\n"))
        }
        None => HttpResponse::BadRequest().body("mode: none, status500, reset or stall\n"),
    }
}

/// The faulty answer to a POST of `body`, if a fault is on and the body is a request.
pub(super) fn answer(shared: &Shared, body: &[u8]) -> Option<HttpResponse> {
    if !shared.state.args.faults {
        return None;
    }
    let fault = current();
    if fault == Fault::None || !is_request(body) {
        return None;
    }
    Some(match fault {
        Fault::None | Fault::Status500 => HttpResponse::build(StatusCode::INTERNAL_SERVER_ERROR)
            .content_type("text/plain")
            .body("the fixture is failing on purpose (fault status500)\n"),
        Fault::Reset => {
            // A body that fails at once: the head has gone, the connection is dropped.
            let broken = futures::stream::once(async {
                Err::<Bytes, _>(std::io::Error::other("fault reset"))
            });
            HttpResponse::Ok()
                .content_type("application/json")
                .streaming(broken)
        }
        Fault::Stall => {
            let opened = futures::stream::once(async {
                Ok::<_, std::io::Error>(Bytes::from_static(b": stalled\n\n"))
            });
            let stalled = futures::stream::pending::<Result<Bytes, std::io::Error>>();
            HttpResponse::Ok()
                .content_type("text/event-stream")
                .streaming(opened.chain(stalled))
        }
    })
}

/// Whether a message has both an id and a method.
fn is_request(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("id").is_some() && v.get("method").is_some())
}
