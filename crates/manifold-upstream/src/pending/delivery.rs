//! The host side of one forwarded request, as the pending table and the threads that deliver
//! to it share it. Messages for the host are delivered outside the table's lock (see
//! [`super::guard`]); the table keeps them in order all the same: an answer that comes while
//! another thread is still delivering progress (or a request of the upstream's) is handed to
//! the host by whichever of them lets go of the request last, so the host never hears of the
//! request after its answer.

use std::sync::{Arc, OnceLock};

use super::guard::guards_held;
use super::{Exchange, Finish, ServerRequest};
use crate::error::UpstreamError;

/// One forwarded request's exchange, shared while something is delivered to its host.
pub(crate) struct Delivery {
    /// Taken when the request is finished (or dropped unfinished, when a host cancelled it).
    exchange: Option<Box<dyn Exchange>>,
    /// How the request ended, when that came while another thread still delivered to the
    /// host: the last holder finishes it.
    ended: OnceLock<Ended>,
}

/// An [`Finish`] kept until it can be delivered.
enum Ended {
    Result(Box<str>),
    Error(Box<str>),
    Failed(UpstreamError),
}

impl Ended {
    fn of(outcome: Finish<'_>) -> Self {
        match outcome {
            Finish::Result(r) => Ended::Result(r.into()),
            Finish::Error(e) => Ended::Error(e.into()),
            Finish::Failed(err) => Ended::Failed(err),
        }
    }

    fn finish(self, exchange: Box<dyn Exchange>) {
        match self {
            Ended::Result(r) => exchange.finish(Finish::Result(&r)),
            Ended::Error(e) => exchange.finish(Finish::Error(&e)),
            Ended::Failed(err) => exchange.finish(Finish::Failed(err)),
        }
    }
}

/// Checks the table's invariant where a host is written to.
fn unlocked(call: &str) {
    debug_assert_eq!(
        guards_held(),
        0,
        "{call}: a pending table's lock is held while a host is written to"
    );
}

impl Delivery {
    pub(crate) fn new(exchange: Box<dyn Exchange>) -> Arc<Self> {
        Arc::new(Self {
            exchange: Some(exchange),
            ended: OnceLock::new(),
        })
    }

    /// Ends a request that never reached the table (refused up front).
    pub(crate) fn finish_now(exchange: Box<dyn Exchange>, outcome: Finish<'_>) {
        unlocked("finish");
        exchange.finish(outcome);
    }

    /// Ends the request, once it is out of the table: at once, or, if another thread is
    /// delivering to its host, as soon as that is done.
    pub(crate) fn finish(this: Arc<Self>, outcome: Finish<'_>) {
        unlocked("finish");
        match Arc::try_unwrap(this) {
            Ok(mut delivery) => {
                if let Some(exchange) = delivery.exchange.take() {
                    exchange.finish(outcome);
                }
            }
            // Dropping the last holder finishes it (see `Drop`), maybe this one.
            Err(shared) => {
                let _ = shared.ended.set(Ended::of(outcome));
            }
        }
    }

    pub(crate) fn progress(&self, params: &str) {
        unlocked("progress");
        if let Some(exchange) = &self.exchange {
            exchange.progress(params);
        }
    }

    pub(crate) fn server_request(&self, request: ServerRequest) {
        unlocked("server_request");
        if let Some(exchange) = &self.exchange {
            exchange.server_request(request);
        }
    }

    pub(crate) fn related(&self, line: &[u8]) {
        unlocked("related");
        if let Some(exchange) = &self.exchange {
            exchange.related(line);
        }
    }

    pub(crate) fn session(&self) -> u64 {
        self.exchange.as_ref().map_or(0, |e| e.session())
    }

    pub(crate) fn is(&self, session: u64, host_id: &str) -> bool {
        self.exchange
            .as_ref()
            .is_some_and(|e| e.is(session, host_id))
    }
}

impl Drop for Delivery {
    fn drop(&mut self) {
        if let (Some(ended), Some(exchange)) = (self.ended.take(), self.exchange.take()) {
            unlocked("finish");
            ended.finish(exchange);
        }
    }
}
