//! Whether a Redis answers, one state per URL whatever uses it, and the outage's log lines:
//! one when it stops answering (at most once a minute), one when it is back.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError, Weak};
use std::time::{Duration, Instant};

/// How long a Redis that failed is left alone by those that may skip it (the cache tier).
const RETRY: Duration = Duration::from_secs(1);
/// An outage is logged at most this often.
const LOG_EVERY: Duration = Duration::from_secs(60);

/// What one store using the URL says of an outage: its name (`the cache store`), what
/// happens while Redis is unreachable, and once it is back.
#[derive(Debug)]
pub struct User {
    pub name: &'static str,
    pub down: String,
    pub back: String,
}

/// The health of one Redis.
pub struct Health {
    /// The URL without its password, for logs.
    url: String,
    down: AtomicBool,
    /// While down: when Redis may be tried again, in ms after `base`.
    retry_at: AtomicU64,
    base: Instant,
    /// When an outage was last logged, and whether the current one was.
    logged: Mutex<(Option<Instant>, bool)>,
    /// The stores using it, for the log lines; each holds its own `Arc`.
    users: Mutex<Vec<Weak<User>>>,
}

impl Health {
    pub fn new(url: String) -> Self {
        Self {
            url,
            down: AtomicBool::new(false),
            retry_at: AtomicU64::new(0),
            base: Instant::now(),
            logged: Mutex::new((None, false)),
            users: Mutex::new(Vec::new()),
        }
    }

    /// Registers a store that uses this Redis, for as long as it keeps the returned `Arc`.
    pub fn user(&self, user: User) -> Arc<User> {
        let user = Arc::new(user);
        let mut users = lock(&self.users);
        users.retain(|u| u.strong_count() > 0);
        users.push(Arc::downgrade(&user));
        user
    }

    /// Whether the last exchange with Redis succeeded: the one flag every store reads.
    pub fn is_up(&self) -> bool {
        !self.down.load(Ordering::Acquire)
    }

    /// Whether Redis may be asked now: up, or a second has passed since it last failed.
    pub fn usable(&self) -> bool {
        self.is_up() || self.now_ms() >= self.retry_at.load(Ordering::Acquire)
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// An exchange failed (`why`): the first failure of an outage is logged.
    pub fn failed(&self, why: &str) {
        let retry = u64::try_from(RETRY.as_millis()).unwrap_or(1000);
        self.retry_at
            .store(self.now_ms() + retry, Ordering::Release);
        if self.down.swap(true, Ordering::AcqRel) {
            return;
        }
        let mut logged = lock(&self.logged);
        let due = logged.0.is_none_or(|at: Instant| at.elapsed() >= LOG_EVERY);
        logged.1 = due;
        if due {
            logged.0 = Some(Instant::now());
            let (names, is, what) = self.said(|u| &u.down);
            tracing::error!("{names} {is} unreachable: {}: {why}; {what}", self.url);
        }
    }

    /// An exchange succeeded: the end of an outage that was logged is logged too.
    pub fn ok(&self) {
        if self.down.swap(false, Ordering::AcqRel) && lock(&self.logged).1 {
            let (names, is, what) = self.said(|u| &u.back);
            tracing::warn!("{names} {is} reachable again: {}; {what}", self.url);
        }
    }

    /// The names of the stores using this Redis, the verb that agrees with them, and what
    /// each says (`text`), joined.
    fn said(&self, text: impl Fn(&User) -> &String) -> (String, &'static str, String) {
        let users: Vec<Arc<User>> = lock(&self.users).iter().filter_map(Weak::upgrade).collect();
        let mut names: Vec<&str> = Vec::new();
        for user in &users {
            if !names.contains(&user.name) {
                names.push(user.name);
            }
        }
        let is = if names.len() > 1 { "are" } else { "is" };
        let names = match names.as_slice() {
            [] => "Redis".to_owned(),
            [one] => (*one).to_owned(),
            [first @ .., last] => format!("{} and {last}", first.join(", ")),
        };
        let what: Vec<&str> = users.iter().map(|u| text(u).as_str()).collect();
        (names, is, what.join("; "))
    }
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn user(name: &'static str, down: &str) -> User {
        User {
            name,
            down: down.into(),
            back: String::new(),
        }
    }

    #[test]
    fn an_outage_names_every_store_that_uses_the_url() {
        let health = Health::new("redis://h:1".into());
        let cache = health.user(user("the cache store", "misses"));
        let (names, is, what) = health.said(|u| &u.down);
        assert_eq!(
            (names.as_str(), is, what.as_str()),
            ("the cache store", "is", "misses")
        );
        let limits = health.user(user("the limit store", "refused"));
        let (names, is, what) = health.said(|u| &u.down);
        assert_eq!(names, "the cache store and the limit store");
        assert_eq!((is, what.as_str()), ("are", "misses; refused"));
        drop((cache, limits));
        assert_eq!(health.said(|u| &u.down).0, "Redis");
    }

    #[test]
    fn one_flag_goes_down_and_up() {
        let health = Health::new("redis://h:1".into());
        assert!(health.is_up() && health.usable());
        health.failed("refused");
        assert!(!health.is_up() && !health.usable());
        health.ok();
        assert!(health.is_up());
    }
}
