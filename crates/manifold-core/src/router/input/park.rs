//! Multi round-trip requests between a stateless host and a session-era upstream.
//!
//! A session-era upstream asks its client mid-request (`sampling/createMessage`,
//! `elicitation/create`, `roots/list`); a stateless host cannot be asked anything. So the
//! host's request is answered with `input_required`, carrying the upstream's requests as
//! `inputRequests` and a sealed `requestState`; the upstream's request stays in flight,
//! *parked* here. The host's retry (the same request, with `inputResponses` and the state)
//! answers the upstream's requests and takes the original request's place: its progress and
//! its answer, or the next round of questions, go to the retry.
//!
//! A parked request lives on the replica that holds the upstream's connection; the state
//! names that replica, and a retry that reaches another one is told to start over. A state is
//! good for one round: a replayed one finds its round gone.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use manifold_config::StateKey;
use manifold_protocol::object::json_string;
use manifold_protocol::RawObject;
use manifold_upstream::ServerRequest;

use crate::context::Context;
use crate::error::RouteError;
use crate::request_state::{now_ms, Sealer, State};
use crate::stateless;

/// The parked requests of this replica, and the key their states are sealed with.
pub struct Parked {
    sealer: Sealer,
    /// This replica's random number: a state names the replica that holds its request.
    replica: u64,
    next: AtomicU64,
    table: Mutex<HashMap<u64, Arc<Park>>>,
    /// How long a parked request waits for the host's retry.
    ttl: Duration,
    /// Where the wait for the rest of a round runs.
    runtime: tokio::runtime::Handle,
}

/// How long the questions of one round are gathered before the host is asked them: an
/// upstream asks them back to back, all before it waits for any answer.
const ROUND_GATHER: Duration = Duration::from_millis(5);

/// One request of a stateless host parked while a session-era upstream waits for answers.
pub struct Park {
    id: u64,
    /// Who it belongs to, and what it is: a retry must match.
    caller: Arc<str>,
    method: &'static str,
    name: String,
    created: Instant,
    state: Mutex<ParkState>,
}

#[derive(Default)]
struct ParkState {
    /// The round the latest state was sealed for.
    round: u32,
    /// The number of the next input request's key.
    next_key: u32,
    /// The upstream's requests the host was asked and has not answered, by key.
    asked: Vec<Asked>,
    /// Whether the host is about to be asked (the rest of the round is being gathered).
    gathering: bool,
    /// The host request that stands for the original now (the latest retry), while it is
    /// waiting for the upstream.
    ctx: Option<Context>,
    /// The upstream's answer, when it came while no host request was there to take it.
    settled: Option<Settled>,
}

/// An upstream's request to its client, as the host was asked it.
struct Asked {
    key: String,
    method: String,
    params: Option<String>,
    request: ServerRequest,
}

/// How a parked request ended while no host request stood for it.
pub enum Settled {
    /// The result, as the host gets it (names and URIs mapped).
    Result(String),
    /// The upstream's error object (JSON text).
    Error(String),
    /// Manifold's own error.
    Failed(RouteError),
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The capability a host must declare to be asked `method`, if it may be asked at all.
fn capability_for(method: &str) -> Option<&'static str> {
    match method {
        "sampling/createMessage" => Some("sampling"),
        "elicitation/create" => Some("elicitation"),
        "roots/list" => Some("roots"),
        _ => None,
    }
}

impl Parked {
    pub fn new(key: Option<&StateKey>, ttl: Duration, runtime: tokio::runtime::Handle) -> Self {
        let mut replica = [0u8; 8];
        let _ = ring::rand::SecureRandom::fill(&ring::rand::SystemRandom::new(), &mut replica);
        Self {
            sealer: Sealer::new(key),
            replica: u64::from_le_bytes(replica),
            next: AtomicU64::new(1),
            table: Mutex::new(HashMap::new()),
            ttl,
            runtime,
        }
    }

    pub fn sealer(&self) -> &Sealer {
        &self.sealer
    }

    /// A new park for `ctx`'s request.
    pub fn open(&self, ctx: &Context) -> Arc<Park> {
        self.sweep();
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let (method, name) = ctx.route().map_or(("", String::new()), |r| {
            (
                r.method,
                r.exposed.as_deref().unwrap_or_default().to_owned(),
            )
        });
        let park = Arc::new(Park {
            id,
            caller: Arc::clone(&ctx.caller.id),
            method,
            name,
            created: Instant::now(),
            state: Mutex::new(ParkState::default()),
        });
        lock(&self.table).insert(id, Arc::clone(&park));
        park
    }

    /// The park is done with (its answer went to the host).
    pub fn close(&self, park: &Park) {
        lock(&self.table).remove(&park.id);
    }

    /// Drops parks older than the ttl; the upstream's requests they hold are refused.
    fn sweep(&self) {
        let expired: Vec<Arc<Park>> = {
            let mut table = lock(&self.table);
            let old: Vec<u64> = table
                .values()
                .filter(|p| p.created.elapsed() > self.ttl)
                .map(|p| p.id)
                .collect();
            old.iter().filter_map(|id| table.remove(id)).collect()
        };
        for park in expired {
            let asked = std::mem::take(&mut lock(&park.state).asked);
            for a in asked {
                let why = "the host did not answer in time (the stateless host never retried)";
                crate::router::ask::refuse(a.request, RouteError::Abandoned(why.into()));
            }
        }
    }

    /// An upstream's request to its client, during the parked request `park`; `first` is the
    /// original host request when this is the first one. The host is asked through an
    /// `input_required` answer to whichever host request stands for the original now, or,
    /// when none does, with the next `input_required`.
    pub fn ask(self: &Arc<Self>, park: &Arc<Park>, first: Option<Context>, request: ServerRequest) {
        if capability_for(&request.method).is_none() {
            let method = request.method.clone();
            return crate::router::ask::refuse(request, RouteError::NotForwarded(method));
        }
        let mut st = lock(&park.state);
        if let Some(ctx) = first {
            st.ctx = Some(ctx);
        }
        let refused = st.ctx.as_ref().and_then(|c| {
            let caps = c.asked.as_ref().map_or("{}", |a| &*a.client.capabilities);
            stateless::may_ask(caps, &request.method, request.params.as_deref()).err()
        });
        if let Some(needs) = refused {
            drop(st);
            // The stateless era's own refusal: the host did not declare what this needs.
            let needs = needs.split('.').next().unwrap_or(needs);
            let what = request.method.clone();
            let missing = RouteError::MissingCapability {
                capability: needs,
                what,
            };
            return crate::router::ask::refuse(request, missing);
        }
        // The upstream's own id names the question: unique while it waits.
        let id = request.reply.id();
        let mut key = manifold_protocol::scan::string_value(id)
            .map_or_else(|| id.to_owned(), |k| k.into_owned());
        if st.asked.iter().any(|a| a.key == key) {
            st.next_key += 1;
            key = format!("{key}-{}", st.next_key);
        }
        st.asked.push(Asked {
            key,
            method: request.method.clone(),
            params: request.params.clone(),
            request,
        });
        if st.ctx.is_some() && !st.gathering {
            // The host is asked once the rest of the round is in.
            st.gathering = true;
            let (parked, park) = (Arc::clone(self), Arc::clone(park));
            self.runtime.spawn(async move {
                tokio::time::sleep(ROUND_GATHER).await;
                let mut st = lock(&park.state);
                st.gathering = false;
                if let Some(ctx) = st.ctx.take() {
                    parked.input_required(&park, &mut st, ctx);
                }
            });
        }
        // Otherwise the next retry is asked it.
    }

    /// Answers `ctx` with the questions still open, under a state for the next round.
    fn input_required(&self, park: &Park, st: &mut ParkState, ctx: Context) {
        st.round += 1;
        let state = State {
            caller: park.caller.to_string(),
            method: park.method.to_owned(),
            name: park.name.clone(),
            park: Some((self.replica, park.id, st.round)),
            upstream: None,
            expires: now_ms() + u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
        };
        let mut requests = String::from("{");
        for (i, a) in st.asked.iter().enumerate() {
            if i > 0 {
                requests.push(',');
            }
            requests.push_str(&json_string(&a.key));
            requests.push_str(":{\"method\":");
            requests.push_str(&json_string(&a.method));
            if let Some(p) = &a.params {
                requests.push_str(",\"params\":");
                requests.push_str(p);
            }
            requests.push('}');
        }
        requests.push('}');
        let result = format!(
            "{{\"resultType\":\"input_required\",\"inputRequests\":{requests},\"requestState\":{}}}",
            json_string(&self.sealer.seal(&state))
        );
        ctx.reply(&result);
    }

    /// A stateless upstream's `input_required` `result` with its `requestState` sealed for
    /// `ctx`'s caller and request (the upstream's own inside); `None` when it has none.
    pub fn seal_upstream_state(&self, ctx: &Context, result: &str) -> Option<String> {
        let mut obj = RawObject::parse(result).ok()?;
        let upstream = obj.get_str("requestState")?.into_owned();
        let (method, name) = ctx.route().map_or(("", String::new()), |r| {
            (
                r.method,
                r.exposed.as_deref().unwrap_or_default().to_owned(),
            )
        });
        let state = State {
            caller: ctx.caller.id.to_string(),
            method: method.to_owned(),
            name,
            park: None,
            upstream: Some(upstream),
            expires: now_ms() + u64::try_from(self.ttl.as_millis()).unwrap_or(u64::MAX),
        };
        obj.set_raw("requestState", json_string(&self.sealer.seal(&state)));
        Some(obj.to_text())
    }

    /// The host's retry of a parked request: its answers go to the upstream, and it takes
    /// the original request's place.
    pub fn resume(&self, ctx: Context, state: &State, responses: Option<&str>) {
        let Some((replica, id, round)) = state.park else {
            return ctx.fail(&RouteError::RequestState("it names no request".into()));
        };
        if replica != self.replica {
            return ctx.fail(&RouteError::RequestState(
                "the request it continues waits on another Manifold replica (or one that restarted); send the original request again".into(),
            ));
        }
        let Some(park) = lock(&self.table).get(&id).cloned() else {
            return ctx.fail(&RouteError::RequestState(
                "the request it continues is over or expired; send the original request again"
                    .into(),
            ));
        };
        let responses = responses.and_then(|r| RawObject::parse(r).ok());
        let mut st = lock(&park.state);
        if st.round != round || st.ctx.is_some() {
            return ctx.fail(&RouteError::RequestState(
                "it was used already; each requestState is good for one retry".into(),
            ));
        }
        // The answers the host gave, to go to the upstream once the retry stands in place.
        let mut answers = Vec::new();
        let mut open = Vec::new();
        for a in std::mem::take(&mut st.asked) {
            match responses.as_ref().and_then(|r| r.get(&a.key)) {
                Some(value) => answers.push((a.request, value.to_owned())),
                None => open.push(a),
            }
        }
        st.asked = open;
        if let Some(settled) = st.settled.take() {
            drop(st);
            self.close(&park);
            refuse_all(answers);
            return deliver(ctx, settled);
        }
        if st.asked.is_empty() {
            st.ctx = Some(ctx);
        } else {
            // Some questions are still open: ask them again, under a new state.
            self.input_required(&park, &mut st, ctx);
        }
        drop(st);
        for (request, value) in answers {
            request.reply.result(&value);
        }
    }
}

fn refuse_all(answers: Vec<(ServerRequest, String)>) {
    for (request, _) in answers {
        let over = RouteError::Abandoned("the request is over".into());
        crate::router::ask::refuse(request, over);
    }
}

/// Sends a parked request's answer to the host request that now stands for it.
pub fn deliver(ctx: Context, settled: Settled) {
    match settled {
        Settled::Result(result) => ctx.reply(&result),
        Settled::Error(error) => {
            ctx.fail_upstream(&error);
        }
        Settled::Failed(err) => ctx.fail(&err),
    }
}

impl Park {
    /// Runs `f` with the host request that stands for the original now, if any.
    pub fn with_ctx<R>(&self, f: impl FnOnce(&Context) -> R) -> Option<R> {
        lock(&self.state).ctx.as_ref().map(f)
    }

    /// The host request that stands for the original now, taken to be answered; when there is
    /// none, what `settle` makes is kept for the next retry.
    pub fn claim(&self, settle: impl FnOnce() -> Settled) -> Option<Context> {
        let mut st = lock(&self.state);
        match st.ctx.take() {
            Some(ctx) => Some(ctx),
            None => {
                st.settled = Some(settle());
                None
            }
        }
    }

    /// Whether `state` was minted for this caller and request.
    pub fn matches(state: &State, caller: &str, method: &str, name: &str) -> bool {
        state.caller == caller && state.method == method && state.name == name
    }
}
