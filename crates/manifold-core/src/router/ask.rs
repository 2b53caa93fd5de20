//! An upstream's requests to its client (sampling, elicitation, roots) passed to the host a
//! request belongs to, or refused on its behalf.

use manifold_protocol::write;
use manifold_upstream::{Peer, ServerRequest};

use crate::error::RouteError;
use crate::outlet::Outlet;
use crate::session::Session;
use crate::stateless;

/// Sends an upstream's request to a host, on `outlet`, under an id of Manifold's; the host's
/// answer goes back to the upstream (see `Router::host_answer`). A host that did not declare
/// the capability the request needs gets nothing: the upstream is refused on its behalf.
pub(super) fn ask_host(session: &Session, outlet: &dyn Outlet, request: ServerRequest) {
    let method = request.method.as_str();
    let capabilities = session.client().map_or("{}", |c| &*c.capabilities);
    match stateless::may_ask(capabilities, method, request.params.as_deref()) {
        Ok(()) => {}
        Err("unknown") => {
            let method = method.to_owned();
            return refuse(request, RouteError::NotForwarded(method));
        }
        Err(needs) => {
            let method = method.to_owned();
            return refuse(
                request,
                RouteError::Undeclared {
                    method,
                    capability: needs,
                },
            );
        }
    }
    tracing::debug!(method, "forwarding the upstream's request to the host");
    let params = request.params;
    let id = session.expect_answer(request.reply);
    let mut line = Vec::with_capacity(params.as_ref().map_or(0, String::len) + 64);
    write::request_with_id(&mut line, &id, method, params.as_deref());
    crate::outlet::check_no_guard("an upstream's request");
    outlet.notify(&[&line]);
}

/// The host behind a session's own connection to an upstream (`isolation = "session"`).
pub(super) struct SessionPeer(pub std::sync::Weak<Session>);

impl Peer for SessionPeer {
    fn server_request(&self, request: ServerRequest) {
        match self.0.upgrade() {
            Some(session) => ask_host(&session, &**session.stream(), request),
            None => refuse(
                request,
                RouteError::Abandoned("the host session ended".into()),
            ),
        }
    }

    fn related(&self, line: &[u8]) {
        if let Some(session) = self.0.upgrade() {
            session.stream().notify(&[line]);
        }
    }
}

/// Answers an upstream's request to its client with `err`, on its host's behalf.
pub(super) fn refuse(request: ServerRequest, err: RouteError) {
    request.reply.raw_error(&err.error_text());
}

/// The refusal of an upstream's request that came after the host request it belongs to.
pub(super) fn over() -> RouteError {
    RouteError::Abandoned("the request it belongs to is over".into())
}
