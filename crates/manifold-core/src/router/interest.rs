//! What upstreams were asked on the hosts' behalf: the most verbose log level any session
//! wants, and one subscription per resource however many sessions (and cache entries) want
//! it, counted, so that the upstream is asked again when it restarts and told to stop when
//! the last one goes.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::Router;
use crate::session::Session;

/// What upstreams were asked on the hosts' behalf.
#[derive(Default)]
pub(in crate::router) struct Interest {
    /// The log level last asked of each upstream (by index), if one was. Locked only to read
    /// or record a level, never across the request.
    levels: Mutex<HashMap<usize, u8>>,
    /// How many sessions subscribe to each (upstream, original URI). Locked to count.
    subscriptions: Mutex<HashMap<(usize, String), usize>>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Interest {
    /// Counts one more session on `(upstream, uri)`; true if it is the first.
    pub(in crate::router) fn subscribe(&self, upstream: usize, uri: &str) -> bool {
        let mut subs = lock(&self.subscriptions);
        let n = subs.entry((upstream, uri.to_owned())).or_insert(0);
        *n += 1;
        *n == 1
    }

    /// Counts one session fewer on `(upstream, uri)`; true if it was the last.
    pub(in crate::router) fn unsubscribe(&self, upstream: usize, uri: &str) -> bool {
        let mut subs = lock(&self.subscriptions);
        let key = (upstream, uri.to_owned());
        match subs.get_mut(&key) {
            Some(n) if *n > 1 => {
                *n -= 1;
                false
            }
            Some(_) => {
                subs.remove(&key);
                true
            }
            None => false,
        }
    }

    pub(in crate::router) fn subscribed_on(&self, upstream: usize) -> Vec<String> {
        lock(&self.subscriptions)
            .keys()
            .filter(|(u, _)| *u == upstream)
            .map(|(_, uri)| uri.clone())
            .collect()
    }

    /// The level last asked of `upstream`, if one was.
    pub(in crate::router) fn level_of(&self, upstream: usize) -> Option<u8> {
        lock(&self.levels).get(&upstream).copied()
    }

    pub(in crate::router) fn set_level(&self, upstream: usize, level: u8) {
        lock(&self.levels).insert(upstream, level);
    }

    /// A restarted upstream logs at its own default again.
    pub(in crate::router) fn forget_level(&self, upstream: usize) {
        lock(&self.levels).remove(&upstream);
    }
}

impl Router {
    /// Undoes what a session asked of upstreams (it is ending).
    pub(in crate::router) fn forget_session(self: &Arc<Self>, session: &Session) {
        let catalog = self.hub.catalog();
        // A session whose home is another replica holds no upstream subscription here.
        let held = !session.is_away();
        for exposed in session.take_subscriptions().into_iter().filter(|_| held) {
            if let Some((upstream, original)) = catalog.resolve_uri(&exposed) {
                if self.interest.unsubscribe(upstream, &original) {
                    self.tell_subscription(upstream, &original, false);
                }
            }
        }
        if session.log_level().is_some() {
            let router = Arc::clone(self);
            self.runtime
                .spawn(async move { router.apply_log_levels(None).await });
        }
    }
}
