//! Methods Manifold does not know, which belong to extensions that pass through (see
//! [`crate::extensions`]): a request goes to the upstream of the caller's view that declares
//! such an extension. When several do (each its own), they are asked one after the other in
//! configuration order, the method's last known owner first, until one answers anything but
//! -32601: an upstream that does not know a method did not run it, so asking the next one
//! never runs a request twice, and the host gets the answer of the one upstream that serves it
//! (or -32601 when none does). The owner is remembered until the catalog changes. A
//! notification of a method Manifold does not know goes to the method's owner, or to every such
//! upstream of the view. A top-level `uri` in the params that is one of the upstream's, as
//! hosts see it, reaches it as the upstream's own; the result's URIs are exposed.
//!
//! Only this branch costs anything: the methods Manifold knows never come here.

use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, Weak};

use manifold_catalog::Catalog;
use manifold_protocol::{Envelope, RawObject};
use manifold_telemetry::Outcome;
use manifold_upstream::Finish;

use super::inflight::Hop;
use super::methods::for_caller;
use super::Router;
use crate::context::{Context, Origin};
use crate::error::{is_method_not_found, upstream_refusal, RouteError};
use crate::extensions;
use crate::policy::Caller;
use crate::target::{Extension, Target, EXTENSION_METHOD};

/// How many methods' owners are remembered at most (a host chooses the method names).
const REMEMBERED: usize = 1024;

/// Which upstream answered each method of an extension, for one catalog generation.
#[derive(Debug, Default)]
pub(super) struct Owners {
    known: Mutex<(u64, HashMap<Arc<str>, usize>)>,
}

impl Owners {
    /// `candidates` in the order to ask them for `method`: its owner first, if it is one.
    fn order(&self, catalog: &Catalog, method: &str, mut candidates: Vec<usize>) -> Vec<usize> {
        let owner = {
            let known = self.known.lock().unwrap_or_else(|e| e.into_inner());
            (known.0 == catalog.generation())
                .then(|| known.1.get(method).copied())
                .flatten()
        };
        if let Some(at) = owner.and_then(|o| candidates.iter().position(|c| *c == o)) {
            let owner = candidates.remove(at);
            candidates.insert(0, owner);
        }
        candidates
    }

    /// Remembers that `upstream` serves `method` in the catalog of `generation`.
    fn remember(&self, generation: u64, method: &Arc<str>, upstream: usize) {
        let mut known = self.known.lock().unwrap_or_else(|e| e.into_inner());
        if known.0 != generation {
            *known = (generation, HashMap::new());
        }
        if known.1.len() < REMEMBERED || known.1.contains_key(method) {
            known.1.insert(Arc::clone(method), upstream);
        }
    }
}

impl Router {
    /// A request of a method Manifold does not know: to the upstreams of the caller's view
    /// whose extensions pass through, else -32601.
    pub(super) fn extension_request(
        self: &Arc<Self>,
        ctx: Context,
        method: &str,
        env: &Envelope<'_>,
    ) {
        let catalog = self.hub.catalog();
        self.conflicts.note(&catalog);
        let order = self.extension_owners(&catalog, &ctx.caller, method);
        let Some((first, then)) = order.split_first() else {
            return ctx.fail(&RouteError::UnknownMethod(method.to_owned()));
        };
        let extension = Extension {
            method: Arc::from(method),
            then: then.to_vec(),
        };
        let target = extension_target(&catalog, env.params.unwrap_or("{}"), *first, extension);
        self.admit(ctx, target)
    }

    /// A notification of a method Manifold does not know: to the method's owner, or to every
    /// upstream of the sender's view whose extension passes through.
    pub(super) fn extension_notification(&self, origin: &Origin, env: &Envelope<'_>) {
        let method = env.method.as_deref().unwrap_or_default();
        let catalog = self.hub.catalog();
        let mut order = self.extension_owners(&catalog, &origin.caller(), method);
        let owned = {
            let known = self.owners.known.lock().unwrap_or_else(|e| e.into_inner());
            known.0 == catalog.generation() && known.1.contains_key(method)
        };
        if owned {
            order.truncate(1);
        }
        let session = origin.session.as_ref().map_or(0, |s| s.id());
        let connections = self.pool.connections_of(session);
        let upstreams = self.pool.upstreams();
        for upstream in order {
            let Some(handle) = upstreams.get(upstream) else {
                continue;
            };
            // The session's own connection to the upstream, if it has one, else the shared.
            let Some(conn) = connections.iter().rev().find(|c| c.name() == handle.key()) else {
                continue;
            };
            let params = env.params.map(|p| host_params(&catalog, p, upstream));
            let sent = conn.notify(method, params.as_deref());
            tracing::debug!(
                method,
                upstream = handle.key(),
                ok = sent.is_ok(),
                "host notification of an extension forwarded"
            );
        }
    }

    /// The upstreams to ask for `method`, in order, as `caller` sees the catalog.
    fn extension_owners(&self, catalog: &Catalog, caller: &Caller, method: &str) -> Vec<usize> {
        let candidates = for_caller(catalog, caller, |known| extensions::owners(catalog, known));
        self.owners.order(catalog, method, candidates)
    }

    /// The next upstream to ask for an extension's request the last one did not know.
    fn ask_next(self: &Arc<Self>, ctx: Context, target: Target) {
        let Some(mut extension) = target.extension else {
            return ctx.fail(&RouteError::UnknownMethod(target.method.to_owned()));
        };
        if extension.then.is_empty() {
            return ctx.fail(&RouteError::UnknownMethod(extension.method.to_string()));
        }
        let next = extension.then.remove(0);
        let catalog = self.hub.catalog();
        let target = extension_target(&catalog, &target.params, next, *extension);
        self.admit(ctx, target)
    }
}

/// The request of `extension` to `upstream`, its top-level `uri` made the upstream's own when
/// it is one of the upstream's URIs as hosts see them.
fn extension_target(
    catalog: &Catalog,
    params: &str,
    upstream: usize,
    extension: Extension,
) -> Target {
    let uri = RawObject::parse(params)
        .ok()
        .and_then(|p| p.get_str("uri").map(|u| u.into_owned()));
    let original = uri
        .as_deref()
        .and_then(|uri| match catalog.resolve_uri(uri) {
            Some((owner, original)) if owner == upstream && original != uri => {
                Some(Arc::from(&*original))
            }
            _ => None,
        });
    Target {
        upstream,
        method: EXTENSION_METHOD,
        params: params.to_owned(),
        timeout: None,
        task: false,
        exposed: uri.map(Arc::from),
        original,
        round: 0,
        extension: Some(Box::new(extension)),
    }
}

/// A host notification's params as `upstream` must see them (its top-level `uri` its own).
fn host_params(catalog: &Catalog, params: &str, upstream: usize) -> String {
    let mapped = RawObject::parse(params).ok().and_then(|mut p| {
        let uri = p.get_str("uri")?.into_owned();
        let (owner, original) = catalog.resolve_uri(&uri)?;
        (owner == upstream && original != uri).then(|| {
            let original = original.into_owned();
            p.set_str("uri", &original);
            p.to_text()
        })
    });
    mapped.unwrap_or_else(|| params.to_owned())
}

impl Router {
    /// The method a request has on the wire, and for an extension's method, what settles its
    /// answer (see [`Fallback`]).
    pub(super) fn extension_parts(&self, target: &Target) -> (Cow<'static, str>, Option<Fallback>) {
        let Some(extension) = &target.extension else {
            return (Cow::Borrowed(target.method), None);
        };
        let fallback = Fallback {
            router: self.this.clone(),
            target: target.clone(),
            generation: self.hub.catalog().generation(),
        };
        (Cow::Owned(extension.method.to_string()), Some(fallback))
    }
}

/// For an extension's method (`fallback`): the host request, if the answer `outcome` goes to
/// its host; `None` when the next upstream was asked instead (the `hop` recorded as ended with
/// the upstream's refusal). Any other request is its host's at once.
pub(super) fn settle(
    fallback: Option<Fallback>,
    hop: &Hop,
    method: &'static str,
    ctx: Context,
    outcome: &Finish<'_>,
) -> Option<Context> {
    let Some(fallback) = fallback else {
        return Some(ctx);
    };
    let code = match outcome {
        Finish::Error(error) => upstream_refusal(ctx.era(), error).0,
        _ => None,
    };
    fallback.settle(ctx, outcome, |ctx| {
        hop.ended(ctx, method, Outcome::ProtocolError, code)
    })
}

/// What becomes of an extension's request when its upstream answers: kept with the router,
/// to remember the owner or to ask the next upstream.
pub(super) struct Fallback {
    pub router: Weak<Router>,
    pub target: Target,
    pub generation: u64,
}

impl Fallback {
    /// Settles the answer `outcome` of the request of `ctx`: `Some(ctx)` when it goes to the
    /// host, `None` when the next upstream was asked instead (the upstream did not know the
    /// method and another may).
    /// `probed` records the hop that ends so.
    pub(super) fn settle(
        self,
        ctx: Context,
        outcome: &Finish<'_>,
        probed: impl FnOnce(&Context),
    ) -> Option<Context> {
        let Some(router) = self.router.upgrade() else {
            return Some(ctx);
        };
        let Some(extension) = &self.target.extension else {
            return Some(ctx);
        };
        match outcome {
            Finish::Error(error) if is_method_not_found(error) => {
                if extension.then.is_empty() {
                    return Some(ctx);
                }
                probed(&ctx);
                router.ask_next(ctx, self.target);
                None
            }
            Finish::Result(_) | Finish::Error(_) => {
                router
                    .owners
                    .remember(self.generation, &extension.method, self.target.upstream);
                Some(ctx)
            }
            Finish::Failed(_) => Some(ctx),
        }
    }
}
