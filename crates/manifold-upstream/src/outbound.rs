//! One message to an upstream, built once by whoever writes it: the complete JSON-RPC line
//! and, beside it, what a wire needs to know about it (its id, method, the name it targets,
//! the trace context and the stateless-era revision it carries). The writer already knows
//! all of that, so no wire reads the line again: stdio writes it as it is, and HTTP takes its
//! headers and its request bookkeeping from these fields.

use std::borrow::Cow;
use std::sync::Arc;

use bytes::Bytes;
use manifold_protocol::RawObject;
use manifold_telemetry::trace::Carrier;

/// A message on its way to an upstream.
#[derive(Debug, Clone)]
pub struct Outbound {
    /// The id Manifold chose for a request; `None` for a notification or an answer.
    pub id: Option<u64>,
    /// The method of a request or notification; `None` for an answer.
    pub method: Option<Cow<'static, str>>,
    /// What the message targets, where its method names something: the tool or prompt name,
    /// or the resource URI, as the upstream knows it.
    pub name: Option<Arc<str>>,
    /// The W3C trace context Manifold wrote into the message's `params._meta`, which HTTP
    /// also sends as headers; `None` when Manifold wrote none.
    pub trace: Option<Carrier>,
    /// The stateless-era revision the message names in `params._meta` (what
    /// `MCP-Protocol-Version` carries in that era); `None` for a session-era message.
    pub version: Option<&'static str>,
    /// The complete JSON-RPC text, ending in `\n`.
    pub line: Bytes,
}

impl Outbound {
    /// Request `id` of `method`, written out in `line`.
    pub fn request(id: u64, method: impl Into<Cow<'static, str>>, line: impl Into<Bytes>) -> Self {
        Self {
            id: Some(id),
            ..Self::notification(method, line)
        }
    }

    /// A notification of `method`, written out in `line`.
    pub fn notification(method: impl Into<Cow<'static, str>>, line: impl Into<Bytes>) -> Self {
        Self {
            method: Some(method.into()),
            ..Self::answer(line)
        }
    }

    /// An answer to one of the upstream's own requests, written out in `line`.
    pub fn answer(line: impl Into<Bytes>) -> Self {
        Self {
            id: None,
            method: None,
            name: None,
            trace: None,
            version: None,
            line: line.into(),
        }
    }

    /// The same message, targeting `name` (see [`Outbound::name`]).
    pub fn named(mut self, name: Option<Arc<str>>) -> Self {
        self.name = name;
        self
    }

    /// The same message, carrying `trace` in its `_meta` (see [`Outbound::trace`]).
    pub fn traced(mut self, trace: Option<Carrier>) -> Self {
        self.trace = trace;
        self
    }

    /// The same message, of stateless-era revision `version` (see [`Outbound::version`]).
    pub fn in_revision(mut self, version: Option<&'static str>) -> Self {
        self.version = version;
        self
    }

    /// The message without its line's final `\n`, for transports that frame messages
    /// themselves; the same buffer, not a copy.
    pub fn body(&self) -> Bytes {
        match self.line.strip_suffix(b"\n") {
            Some(body) => self.line.slice(..body.len()),
            None => self.line.clone(),
        }
    }

    /// Whether this is the request of `method`.
    pub(crate) fn is(&self, method: &str) -> bool {
        self.method.as_deref() == Some(method)
    }
}

/// The member of a request's params that names its target, for the methods that name one.
pub(crate) fn target_member(method: &str) -> Option<&'static str> {
    match method {
        "tools/call" | "prompts/get" => Some("name"),
        "resources/read" => Some("uri"),
        _ => None,
    }
}

/// The target a request of `method` names in `params` (JSON text), read from the params only
/// when the method names one. For Manifold's own requests, whose params come as text; the
/// forwarding path knows the name already.
pub(crate) fn target_in(method: &str, params: Option<&str>) -> Option<Arc<str>> {
    let member = target_member(method)?;
    let params = RawObject::parse(params?).ok()?;
    params.get_str(member).map(|name| Arc::from(&*name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_is_the_line_without_its_newline_and_shares_its_buffer() {
        let msg = Outbound::request(3, "ping", b"{\"id\":3}\n".to_vec());
        let body = msg.body();
        assert_eq!(&body[..], b"{\"id\":3}");
        assert_eq!(body.as_ptr(), msg.line.as_ptr());
        let bare = Outbound::answer(Bytes::from_static(b"{}"));
        assert_eq!(&bare.body()[..], b"{}");
    }

    #[test]
    fn constructors_fill_what_the_kind_of_message_has() {
        let request = Outbound::request(9, "tools/call", Vec::new())
            .named(Some("echo".into()))
            .in_revision(Some("2026-07-28"));
        assert_eq!(request.id, Some(9));
        assert!(request.is("tools/call"));
        assert_eq!(request.name.as_deref(), Some("echo"));
        assert_eq!(request.version, Some("2026-07-28"));
        let note = Outbound::notification("notifications/cancelled", Vec::new());
        assert_eq!((note.id, note.is("notifications/cancelled")), (None, true));
        let answer = Outbound::answer(Vec::new());
        assert_eq!((answer.id, answer.method), (None, None));
    }

    #[test]
    fn the_target_is_read_only_for_methods_that_name_one() {
        let call = Some(r#"{"name":"echo","arguments":{}}"#);
        assert_eq!(target_in("tools/call", call).as_deref(), Some("echo"));
        assert_eq!(target_in("prompts/get", call).as_deref(), Some("echo"));
        let read = Some(r#"{"uri":"file:///a"}"#);
        assert_eq!(
            target_in("resources/read", read).as_deref(),
            Some("file:///a")
        );
        assert_eq!(target_in("tools/list", call), None);
        assert_eq!(target_in("tools/call", Some("not json")), None);
        assert_eq!(target_in("tools/call", None), None);
    }
}
