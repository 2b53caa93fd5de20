//! Shared server state: configuration, prebuilt catalogs, dynamic tools, in-flight calls and
//! the fixture's own requests waiting for their client's answer. All of it is process-wide,
//! shared by every client (there is only one over stdio).

use std::collections::hash_map::RandomState;
use std::collections::HashMap;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use manifold_protocol::version::Era;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use crate::era::EraFlag;
use crate::exchange::Transport;
use crate::listen::{Change, Listens};
use crate::subscriptions::Subscriptions;
use crate::tasks::Tasks;
use crate::{catalog, rpc, tools, Args};

/// A client's answer to one of the fixture's requests: its `result` (as sent), or its
/// `error`.
pub type Answer = Result<Box<RawValue>, Value>;

pub struct State {
    pub args: Args,
    pub pid: u32,
    /// Messages that belong to no request (list_changed), and exiting.
    pub transport: Arc<dyn Transport>,
    /// Static tools (built once at start so tools/list only clones).
    pub tools: Vec<Value>,
    pub prompts: Vec<Value>,
    pub resources: Vec<Value>,
    pub templates: Vec<Value>,
    /// Tools added at run time by `add_tool`: (name, descriptor).
    dynamic: RwLock<Vec<(String, Value)>>,
    /// Threaded calls that a `notifications/cancelled` can still stop, keyed by id JSON text.
    inflight: Mutex<HashMap<String, Arc<CancelToken>>>,
    cancelled: AtomicU64,
    /// The fixture's requests to clients awaiting an answer, keyed by id JSON text.
    asking: Mutex<HashMap<String, Sender<Answer>>>,
    next_ask: AtomicU64,
    /// --tasks: every task and what its tool ended with.
    pub tasks: Tasks,
    /// --subscriptions: the resources each client is subscribed to.
    pub subscriptions: Subscriptions,
    /// How many times each tool was called and each resource read, by `tool:NAME` or
    /// `read:URI` (what `call_count` reports).
    served: Mutex<HashMap<String, u64>>,
    /// `--era dual` over stdio: the era the connection's first request chose.
    pub stdio_era: OnceLock<Era>,
    /// Session era: the capabilities each client declared in `initialize`, by client name.
    declared: Mutex<HashMap<String, Value>>,
    /// Stateless era: the open `subscriptions/listen` streams.
    pub listens: Listens,
    /// --conformance: whether `test_trigger_prompt_change` added its prompt.
    dynamic_prompt: AtomicBool,
    /// The keys that seal request states (multi round-trip requests), new in each process.
    seal_keys: (RandomState, RandomState),
}

impl State {
    pub fn new(args: Args, pid: u32, transport: Arc<dyn Transport>) -> Self {
        let dynamic = tools::initial_dynamic(&args);
        Self {
            tools: tools::static_tools(&args),
            prompts: catalog::prompts(&args),
            resources: catalog::resources(&args),
            templates: catalog::templates(&args),
            args,
            pid,
            transport,
            dynamic: RwLock::new(dynamic),
            inflight: Mutex::new(HashMap::new()),
            cancelled: AtomicU64::new(0),
            asking: Mutex::new(HashMap::new()),
            next_ask: AtomicU64::new(1),
            tasks: Tasks::default(),
            subscriptions: Subscriptions::default(),
            served: Mutex::new(HashMap::new()),
            stdio_era: OnceLock::new(),
            declared: Mutex::new(HashMap::new()),
            listens: Listens::default(),
            dynamic_prompt: AtomicBool::new(false),
            seal_keys: (RandomState::new(), RandomState::new()),
        }
    }

    /// Session era: remembers the capabilities `client` declared in `initialize`.
    pub fn remember_capabilities(&self, client: &str, capabilities: &Value) {
        let mut declared = self.declared.lock().unwrap_or_else(PoisonError::into_inner);
        declared.insert(client.to_owned(), capabilities.clone());
    }

    /// Session era: whether `client` declared `capability` in `initialize` (true for a client
    /// that never initialized: the fixture serves those too, and asks them anyway).
    pub fn declared(&self, client: &str, capability: &str) -> bool {
        let declared = self.declared.lock().unwrap_or_else(PoisonError::into_inner);
        declared
            .get(client)
            .is_none_or(|caps| caps.get(capability).is_some_and(Value::is_object))
    }

    /// A 128-bit keyed digest of `bytes` (SipHash under two random keys of this process), as
    /// hex: what seals a request state.
    pub fn seal(&self, bytes: &[u8]) -> String {
        let (a, b) = &self.seal_keys;
        format!("{:016x}{:016x}", a.hash_one(bytes), b.hash_one(bytes))
    }

    /// Something the clients may want to hear about changed: the session era's clients get
    /// a list change on their own stream as always (not with --era stateless, nor over a
    /// stdio connection that chose the stateless era), and every listen stream that opted in
    /// gets it. Resource updates reach session-era subscribers through `subscriptions`
    /// instead. Returns how many listen streams were told.
    pub fn changed(&self, change: &Change) -> usize {
        if let Some(method) = change.list_changed() {
            let stateless = self.args.era == EraFlag::Stateless
                || self.stdio_era.get() == Some(&Era::Stateless);
            if !stateless {
                self.transport
                    .broadcast(&rpc::notification(method, &json!({})));
            }
        }
        self.listens.deliver(change)
    }

    /// --conformance: adds `test_dynamic_prompt`, or removes it; true if it is there now.
    pub fn toggle_dynamic_prompt(&self) -> bool {
        !self.dynamic_prompt.fetch_xor(true, Ordering::Relaxed)
    }

    pub fn has_dynamic_prompt(&self) -> bool {
        self.dynamic_prompt.load(Ordering::Relaxed)
    }

    /// Counts one call of tool `name` or read of a resource (`what` = `tool:NAME`, `read:URI`).
    pub fn count(&self, what: String) {
        *self
            .served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(what)
            .or_default() += 1;
    }

    pub fn counted(&self, what: &str) -> u64 {
        self.served
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(what)
            .copied()
            .unwrap_or(0)
    }

    pub fn exit(&self, code: i32) -> ! {
        self.transport.exit(code)
    }

    pub fn prompts_enabled(&self) -> bool {
        !self.args.no_prompts
    }

    pub fn resources_enabled(&self) -> bool {
        !self.args.no_resources
    }

    /// resources/subscribe exists only with --conformance or --subscriptions, so that
    /// without them the fixture stays exactly what the other tests expect.
    pub fn subscriptions_enabled(&self) -> bool {
        (self.args.conformance || self.args.subscriptions) && self.resources_enabled()
    }

    /// Runs `f` over the dynamic tools under the read lock.
    pub fn with_dynamic<R>(&self, f: impl FnOnce(&[(String, Value)]) -> R) -> R {
        let dynamic = self.dynamic.read().unwrap_or_else(PoisonError::into_inner);
        f(&dynamic)
    }

    /// Adds a dynamic tool; false if the name is already taken.
    pub fn add_dynamic(&self, name: &str, descriptor: Value) -> bool {
        let mut dynamic = self.dynamic.write().unwrap_or_else(PoisonError::into_inner);
        if dynamic.iter().any(|(n, _)| n == name) {
            return false;
        }
        dynamic.push((name.to_owned(), descriptor));
        true
    }

    /// Adds a dynamic tool, or replaces the descriptor of the one of that name.
    pub fn set_dynamic(&self, name: &str, descriptor: Value) {
        let mut dynamic = self.dynamic.write().unwrap_or_else(PoisonError::into_inner);
        match dynamic.iter_mut().find(|(n, _)| n == name) {
            Some((_, old)) => *old = descriptor,
            None => dynamic.push((name.to_owned(), descriptor)),
        }
    }

    /// Removes the dynamic tool `name`; false if there was none.
    pub fn remove_dynamic(&self, name: &str) -> bool {
        let mut dynamic = self.dynamic.write().unwrap_or_else(PoisonError::into_inner);
        let before = dynamic.len();
        dynamic.retain(|(n, _)| n != name);
        dynamic.len() != before
    }

    /// Registers an in-flight call under its key (`exchange::request_key`).
    pub fn register(&self, key: &str) -> Arc<CancelToken> {
        let token = Arc::new(CancelToken::default());
        self.lock_inflight()
            .insert(key.to_owned(), Arc::clone(&token));
        token
    }

    /// Ends an in-flight call; true (and counted) if it was cancelled, so no response is sent.
    pub fn finish(&self, key: &str, token: &CancelToken) -> bool {
        self.lock_inflight().remove(key);
        let cancelled = token.is_cancelled();
        if cancelled {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        cancelled
    }

    pub fn cancel(&self, key: &str) {
        if let Some(token) = self.lock_inflight().get(key) {
            token.cancel();
        }
    }

    pub fn cancelled_count(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
    }

    /// A fresh id for a request to a client, and where its answer will arrive.
    pub fn expect_answer(&self) -> (Value, Receiver<Answer>) {
        let id = Value::from(self.next_ask.fetch_add(1, Ordering::Relaxed));
        let (tx, rx) = mpsc::channel();
        self.lock_asking().insert(id.to_string(), tx);
        (id, rx)
    }

    /// [`State::expect_answer`] with the id `name` (a string), or `name-N` while a request
    /// of that id is still waiting: the multi round-trip tools name their session-era
    /// requests after their input keys.
    pub fn expect_named_answer(&self, name: &str) -> (Value, Receiver<Answer>) {
        let (tx, rx) = mpsc::channel();
        let mut asking = self.lock_asking();
        let mut id = Value::from(name);
        while asking.contains_key(&id.to_string()) {
            let n = self.next_ask.fetch_add(1, Ordering::Relaxed);
            id = Value::from(format!("{name}-{n}"));
        }
        asking.insert(id.to_string(), tx);
        (id, rx)
    }

    pub fn forget_answer(&self, id: &Value) {
        self.lock_asking().remove(&id.to_string());
    }

    /// Hands a client's answer to the request waiting for it; false if none is (an unknown
    /// id, or one that timed out).
    pub fn resolve(&self, id: &Value, answer: Answer) -> bool {
        let waiting = self.lock_asking().remove(&id.to_string());
        waiting.is_some_and(|tx| tx.send(answer).is_ok())
    }

    fn lock_asking(&self) -> std::sync::MutexGuard<'_, HashMap<String, Sender<Answer>>> {
        self.asking.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn lock_inflight(&self) -> std::sync::MutexGuard<'_, HashMap<String, Arc<CancelToken>>> {
        self.inflight.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[derive(Default)]
pub struct CancelToken {
    cancelled: Mutex<bool>,
    wake: Condvar,
}

impl CancelToken {
    pub fn cancel(&self) {
        *self
            .cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = true;
        self.wake.notify_all();
    }

    pub fn is_cancelled(&self) -> bool {
        *self
            .cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `duration` unless cancelled first; true if cancelled.
    pub fn sleep(&self, duration: Duration) -> bool {
        let guard = self
            .cancelled
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let (guard, _) = self
            .wake
            .wait_timeout_while(guard, duration, |cancelled| !*cancelled)
            .unwrap_or_else(PoisonError::into_inner);
        *guard
    }
}
