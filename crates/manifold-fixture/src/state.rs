//! Shared server state: configuration, prebuilt catalogs, dynamic tools and in-flight calls.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError, RwLock};
use std::time::Duration;

use serde_json::Value;

use crate::rpc::Output;
use crate::{catalog, tools, Args};

pub struct State {
    pub args: Args,
    pub pid: u32,
    pub out: Output,
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
}

impl State {
    pub fn new(args: Args, pid: u32) -> Self {
        Self {
            tools: tools::static_tools(&args),
            prompts: catalog::prompts(&args),
            resources: catalog::resources(&args.name),
            templates: catalog::templates(&args.name),
            args,
            pid,
            out: Output::new(),
            dynamic: RwLock::new(Vec::new()),
            inflight: Mutex::new(HashMap::new()),
            cancelled: AtomicU64::new(0),
        }
    }

    pub fn prompts_enabled(&self) -> bool {
        !self.args.no_prompts
    }

    pub fn resources_enabled(&self) -> bool {
        !self.args.no_resources
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

    pub fn register(&self, id: &Value) -> Arc<CancelToken> {
        let token = Arc::new(CancelToken::default());
        self.lock_inflight()
            .insert(id.to_string(), Arc::clone(&token));
        token
    }

    /// Ends an in-flight call; true (and counted) if it was cancelled, so no response is sent.
    pub fn finish(&self, id: &Value, token: &CancelToken) -> bool {
        self.lock_inflight().remove(&id.to_string());
        let cancelled = token.is_cancelled();
        if cancelled {
            self.cancelled.fetch_add(1, Ordering::Relaxed);
        }
        cancelled
    }

    pub fn cancel(&self, request_id: &Value) {
        if let Some(token) = self.lock_inflight().get(&request_id.to_string()) {
            token.cancel();
        }
    }

    pub fn cancelled_count(&self) -> u64 {
        self.cancelled.load(Ordering::Relaxed)
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
