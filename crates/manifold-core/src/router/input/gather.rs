//! Multi round-trip requests between a session-era host and a stateless upstream: the
//! upstream answers `input_required`, which a session-era host does not know. So Manifold asks
//! the host each of the upstream's `inputRequests` as the session era does (a request to the
//! host, on the way its request's answer takes), gathers the answers, and sends the original
//! request again with them as `inputResponses` and the upstream's `requestState`; the upstream's
//! next answer (the result, or another round) goes on the same way. The host sees one request
//! and the questions it is asked meanwhile, as with a session-era upstream.

use std::sync::{Arc, Mutex, MutexGuard, Weak};

use manifold_protocol::object::json_string;
use manifold_protocol::{scan, write, RawObject};

use crate::context::Context;
use crate::error::RouteError;
use crate::router::Router;
use crate::session::{Awaited, Session};
use crate::stateless;
use crate::target::Target;

/// The most rounds of questions one request may take before Manifold gives up on it.
pub(in crate::router) const MAX_ROUNDS: u32 = 16;

/// What an input-required answer needs to go on: where to send the request again.
pub(in crate::router) struct Retry {
    pub router: Weak<Router>,
    /// The request as it was sent (before its progress token, trace and `_meta` edits);
    /// its `round` counts the rounds asked so far.
    pub target: Target,
}

/// The answers of one round, as they come.
struct Round {
    ctx: Option<Context>,
    retry: Option<Retry>,
    state: Option<String>,
    waiting: usize,
    answers: Vec<(String, String)>,
    refused: Option<String>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Asks the session-era host behind `ctx` the questions of the upstream's `input_required`
/// `result`, then sends the request again with the answers.
pub(in crate::router) fn ask(ctx: Context, retry: Retry, result: &str) {
    let Some(session) = ctx.session.clone() else {
        return ctx.fail(&RouteError::Internal(
            "the upstream asked for input and the request has no session to ask".into(),
        ));
    };
    if retry.target.round >= MAX_ROUNDS {
        return ctx.fail(&RouteError::Internal(format!(
            "the upstream asked for input {MAX_ROUNDS} times for one request; Manifold gave up"
        )));
    }
    let obj = RawObject::parse(result).ok();
    let state = obj
        .as_ref()
        .and_then(|o| o.get_str("requestState").map(|s| s.into_owned()));
    let mut requests: Vec<(String, String)> = Vec::new();
    if let Some(asked) = obj.as_ref().and_then(|o| o.get("inputRequests")) {
        let _ = scan::for_each_member(asked, |m| {
            if let Some(key) = m.key_text() {
                requests.push((key.into_owned(), m.value.to_owned()));
            }
        });
    }
    let outlet = Arc::clone(&ctx.outlet);
    let round = Arc::new(Mutex::new(Round {
        ctx: Some(ctx),
        retry: Some(retry),
        state,
        waiting: requests.len(),
        answers: Vec::new(),
        refused: None,
    }));
    if requests.is_empty() {
        // Nothing to ask (a state alone, the upstream shedding load): send it again now.
        return finish(&round);
    }
    for (key, request) in requests {
        let round = Arc::clone(&round);
        let hear = move |answer: Result<&str, &str>| {
            {
                let mut r = lock(&round);
                match answer {
                    Ok(value) => r.answers.push((key, value.to_owned())),
                    Err(error) => r.refused = Some(error.to_owned()),
                }
                r.waiting -= 1;
                if r.waiting > 0 {
                    return;
                }
            }
            finish(&round);
        };
        ask_one(&session, &*outlet, &request, Box::new(hear));
    }
}

/// Sends one of the upstream's input requests to the host; its answer (or why it could not be
/// asked) goes to `hear`.
fn ask_one(
    session: &Session,
    outlet: &dyn crate::outlet::Outlet,
    request: &str,
    hear: crate::session::Collect,
) {
    let obj = RawObject::parse(request).ok();
    let method = obj
        .as_ref()
        .and_then(|o| o.get_str("method").map(|m| m.into_owned()));
    let params = obj
        .as_ref()
        .and_then(|o| o.get("params").map(str::to_owned));
    let Some(method) = method else {
        let missing = RouteError::InvalidParams("an input request has no method".into());
        return Awaited::Local(hear).refuse(&missing);
    };
    let capabilities = session.client().map_or("{}", |c| &*c.capabilities);
    if let Err(needs) = stateless::may_ask(capabilities, &method, params.as_deref()) {
        let refusal = match needs {
            "unknown" => RouteError::NotForwarded(method),
            capability => RouteError::Undeclared { method, capability },
        };
        return Awaited::Local(hear).refuse(&refusal);
    }
    let id = session.expect_answer(Awaited::Local(hear));
    let mut line = Vec::with_capacity(params.as_ref().map_or(0, String::len) + 64);
    write::request_with_id(&mut line, &id, &method, params.as_deref());
    outlet.notify(&[&line]);
}

/// Every answer of the round is in: the request goes again, with them.
fn finish(round: &Mutex<Round>) {
    let (ctx, retry, state, answers, refused) = {
        let mut r = lock(round);
        (
            r.ctx.take(),
            r.retry.take(),
            r.state.take(),
            std::mem::take(&mut r.answers),
            r.refused.take(),
        )
    };
    let (Some(ctx), Some(retry)) = (ctx, retry) else {
        return;
    };
    if let Some(error) = refused {
        ctx.fail_upstream(&error);
        return;
    }
    let Some(router) = retry.router.upgrade() else {
        return;
    };
    let mut target = retry.target;
    let Ok(mut params) = RawObject::parse(&target.params) else {
        return ctx.fail(&RouteError::Internal(
            "the request's params were lost".into(),
        ));
    };
    let mut responses = String::from("{");
    for (i, (key, value)) in answers.iter().enumerate() {
        if i > 0 {
            responses.push(',');
        }
        responses.push_str(&json_string(key));
        responses.push(':');
        responses.push_str(value);
    }
    responses.push('}');
    params.set_raw("inputResponses", responses);
    match &state {
        Some(state) => params.set_raw("requestState", json_string(state)),
        None => {
            params.remove("requestState");
        }
    }
    target.params = params.to_text();
    target.task = false;
    target.round += 1;
    router.send(ctx, target, None);
}
