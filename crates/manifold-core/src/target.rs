//! Where a forwarded request goes: made by the router's resolution, read by the layers, the
//! cache and the forwarding step. A leaf: it names nothing else of this crate.

use std::sync::Arc;

/// Where a request goes, and what it says there.
#[derive(Debug, Clone)]
pub struct Target {
    pub upstream: usize,
    pub method: &'static str,
    /// The params (JSON text), as the host sent them but for the name [`Target::names`] says
    /// goes upstream as `original`: the request's line is written once, with every edit, when
    /// it is sent.
    pub params: String,
    /// A timeout of its own (a tool with one configured).
    pub timeout: Option<std::time::Duration>,
    /// Whether the answer may carry a task (a task-augmented call, or a `tasks/*` request).
    pub task: bool,
    /// The tool or prompt name, or the URI, as the host named it (metric labels and spans).
    pub exposed: Option<Arc<str>>,
    /// The same as the upstream knows it (the message to the upstream names it, and the
    /// upstream hop's span).
    pub original: Option<Arc<str>>,
    /// How many rounds of questions a stateless upstream asked a session-era host for this
    /// request so far (0: none; see the router's `input/gather.rs`).
    pub round: u32,
    /// For a request of a method Manifold does not know (its `method` is then
    /// [`EXTENSION_METHOD`]): the method as the host named it, and the other upstreams to ask
    /// if this one does not know it either (see the router's `extension.rs`).
    pub extension: Option<Box<Extension>>,
}

/// The `method` of a [`Target`] for a method Manifold does not know, in metrics and spans.
pub const EXTENSION_METHOD: &str = manifold_catalog::rewrite::EXTENSION_METHOD;

/// A request of a method of an extension that passes through (see [`Target::extension`]).
#[derive(Debug, Clone)]
pub struct Extension {
    /// The method, as the host named it and the upstream gets it.
    pub method: Arc<str>,
    /// The upstreams (by index) to ask next, in order, while each answers -32601.
    pub then: Vec<usize>,
}

impl Target {
    /// The member of `params` that names what the request is for (`name` or `uri`), sent
    /// upstream as `original`; `None`: `params` go as they are.
    pub fn names(&self) -> Option<&'static str> {
        self.original.as_ref()?;
        match self.method {
            "tools/call" | "prompts/get" => Some("name"),
            "resources/read" | "skills/get" | "resources/directory/read" | EXTENSION_METHOD => {
                Some("uri")
            }
            _ => None,
        }
    }

    /// The method the request has on the wire.
    pub fn wire_method(&self) -> &str {
        self.extension.as_ref().map_or(self.method, |e| &e.method)
    }
}
