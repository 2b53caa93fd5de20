//! `subscriptions/listen` (stateless era): a long-lived request whose answer is a stream of
//! the notifications the host opted in to (list changes, updates of named resources), each
//! tagged with the listen request's id. It is acknowledged first, with what Manifold agreed
//! to send; it ends when the host closes its stream or cancels the request, or, with a closing
//! result, when Manifold shuts down.
//!
//! Resource updates are asked of the owning upstreams as `resources/subscribe` would be:
//! counted per upstream resource, so an upstream is asked once however many hosts listen.

use std::sync::Arc;

use manifold_protocol::version::meta;
use manifold_protocol::{object::json_string, write, Envelope, RawObject};

use crate::context::Context;
use crate::error::RouteError;
use crate::fanout::{Listen, Wants};
use crate::router::{resolve, Router};

impl Router {
    pub(in crate::router) fn listen(self: &Arc<Self>, ctx: Context, env: &Envelope<'_>) {
        let wants = match wanted(env.params) {
            Ok(w) => w,
            Err(e) => return ctx.fail(&e),
        };
        // Agreed: list changes of what Manifold offers; updates of resources the caller may
        // read (a URI it may not know of is left out, as one that does not exist is).
        let catalog = self.hub.catalog();
        let sight = ctx.caller.restricted().map(|t| &**t);
        let mut agreed = Wants {
            tools: wants.tools,
            prompts: wants.prompts,
            resources: wants.resources,
            uris: Vec::new(),
        };
        let mut upstream_uris = Vec::new();
        for uri in &wants.uris {
            if let Ok((upstream, original)) = resolve::resolve_uri(&catalog, uri, sight) {
                agreed.uris.push(uri.clone());
                upstream_uris.push((upstream, original.into_owned()));
            }
        }
        drop(catalog);
        let ack = ack(&ctx.id, &agreed);
        let outlet = Arc::clone(&ctx.outlet);
        let listen = Arc::new(Listen::new(ctx, agreed, upstream_uris.clone()));
        // The upstream subscriptions this stream is the first to need are in place before it
        // is acknowledged, so that what the acknowledgement agreed to is what the host gets.
        let asked: Vec<_> = upstream_uris
            .iter()
            .filter(|(upstream, original)| self.interest.subscribe(*upstream, original))
            .map(|(upstream, original)| self.ask_subscription(*upstream, original, true))
            .collect();
        // Registered at once (so that a host gone meanwhile releases what it asked for), heard
        // from once acknowledged; acknowledged before anything else is sent on it.
        self.fanout.listen(Arc::clone(&listen));
        let go = move || {
            outlet.notify(&[&ack]);
            listen.acknowledged();
        };
        if asked.is_empty() {
            return go();
        }
        self.runtime.spawn(async move {
            futures::future::join_all(asked).await;
            go();
        });
    }

    /// Ends every listen stream with its closing result (Manifold is shutting down).
    pub fn close_listens(&self) {
        self.fanout.close_listens();
    }

    /// A listen stream ended (its host went away, or cancelled it): the upstream
    /// subscriptions it held are released.
    pub fn end_listen(&self, owner: u64, id: Option<&str>) {
        for listen in self.fanout.stop_listening(owner, id) {
            for (upstream, original) in listen.upstream_uris() {
                if self.interest.unsubscribe(*upstream, original) {
                    self.tell_subscription(*upstream, original, false);
                }
            }
        }
    }
}

/// What the host opted in to.
fn wanted(params: Option<&str>) -> Result<Wants, RouteError> {
    let bad = |what: &str| RouteError::InvalidParams(format!("subscriptions/listen: {what}"));
    let params = params.ok_or_else(|| bad("missing params"))?;
    let obj = RawObject::parse(params).map_err(|_| bad("params must be an object"))?;
    let filter = obj
        .get("notifications")
        .ok_or_else(|| bad("missing \"notifications\""))?;
    let filter: serde_json::Value =
        serde_json::from_str(filter).map_err(|_| bad("\"notifications\" must be an object"))?;
    let filter = filter
        .as_object()
        .ok_or_else(|| bad("\"notifications\" must be an object"))?;
    let flag = |name: &str| filter.get(name).and_then(serde_json::Value::as_bool) == Some(true);
    let uris = match filter.get("resourceSubscriptions") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(serde_json::Value::Array(items)) => items
            .iter()
            .map(|u| u.as_str().map(str::to_owned))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| bad("\"resourceSubscriptions\" must be a list of URIs"))?,
        Some(_) => return Err(bad("\"resourceSubscriptions\" must be a list of URIs")),
    };
    Ok(Wants {
        tools: flag("toolsListChanged"),
        prompts: flag("promptsListChanged"),
        resources: flag("resourcesListChanged"),
        uris,
    })
}

/// `notifications/subscriptions/acknowledged` for the listen request `id`.
fn ack(id: &str, agreed: &Wants) -> Vec<u8> {
    let mut filter = String::from("{");
    let mut first = true;
    let mut member = |name: &str, value: &str| {
        if !first {
            filter.push(',');
        }
        first = false;
        filter.push_str(&json_string(name));
        filter.push(':');
        filter.push_str(value);
    };
    for (on, name) in [
        (agreed.tools, "toolsListChanged"),
        (agreed.prompts, "promptsListChanged"),
        (agreed.resources, "resourcesListChanged"),
    ] {
        if on {
            member(name, "true");
        }
    }
    if !agreed.uris.is_empty() {
        let uris: Vec<String> = agreed.uris.iter().map(|u| json_string(u)).collect();
        member("resourceSubscriptions", &format!("[{}]", uris.join(",")));
    }
    filter.push('}');
    let params = format!(
        "{{\"notifications\":{filter},\"_meta\":{{{}:{id}}}}}",
        json_string(meta::SUBSCRIPTION_ID)
    );
    let mut line = Vec::new();
    write::notification(
        &mut line,
        "notifications/subscriptions/acknowledged",
        Some(&params),
    );
    line
}
