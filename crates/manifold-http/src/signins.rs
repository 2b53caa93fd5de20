//! Browser sign-ins kept in this process, for the web console's logins and the users' page:
//! a random session id (for an HttpOnly cookie) mapped by its hash, so that a dump of memory
//! hands out no live cookie, to who signed in, the CSRF token their forms carry and an expiry.
//! At most `MAX` are kept: past that the oldest is forgotten, so that repeated sign-ins cannot
//! grow memory without bound.

use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use manifold_auth::oauth::pkce::random_token;
use manifold_config::KeyHash;

/// How long a sign-in lasts.
pub(crate) const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);

/// One live sign-in: who (`T`) and its CSRF token.
#[derive(Clone)]
pub(crate) struct SignIn<T> {
    pub(crate) who: T,
    /// What every state-changing form of this sign-in carries.
    pub(crate) csrf: String,
    expires: Instant,
}

/// The sign-ins of one page, by the hash of their session id.
pub(crate) struct SignIns<T, const MAX: usize> {
    by_session: Mutex<HashMap<KeyHash, SignIn<T>>>,
}

impl<T, const MAX: usize> Default for SignIns<T, MAX> {
    fn default() -> Self {
        Self {
            by_session: Mutex::new(HashMap::new()),
        }
    }
}

impl<T: Clone, const MAX: usize> SignIns<T, MAX> {
    /// A new sign-in of `who`: its session id (for the cookie) and its CSRF token. `None` when
    /// the system's random source failed.
    pub(crate) fn open(&self, who: T) -> Option<(String, String)> {
        let session = random_token().ok()?;
        let csrf = random_token().ok()?;
        let now = Instant::now();
        let mut all = self.lock();
        all.retain(|_, s| s.expires > now);
        if all.len() >= MAX {
            let oldest = all.iter().min_by_key(|(_, s)| s.expires).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                all.remove(&oldest);
            }
        }
        let signed_in = SignIn {
            who,
            csrf: csrf.clone(),
            expires: now + LIFETIME,
        };
        all.insert(KeyHash::of(&session), signed_in);
        Some((session, csrf))
    }

    /// The live sign-in of `session`, if any (an expired one is forgotten).
    pub(crate) fn find(&self, session: &str) -> Option<SignIn<T>> {
        let key = KeyHash::of(session);
        let mut all = self.lock();
        match all.get(&key) {
            Some(s) if s.expires > Instant::now() => Some(s.clone()),
            Some(_) => {
                all.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the sign-in of `session`.
    pub(crate) fn close(&self, session: &str) {
        self.lock().remove(&KeyHash::of(session));
    }

    /// How many are kept (expired ones included until the next sign-in).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<KeyHash, SignIn<T>>> {
        self.by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

/// The value of the cookie `name`, if the request carries one.
pub(crate) fn cookie(req: &actix_web::HttpRequest, name: &str) -> Option<String> {
    req.headers()
        .get_all(actix_web::http::header::COOKIE)
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(found, _)| *found == name)
        .map(|(_, value)| value.to_owned())
}

/// Whether `presented` is `expected`, compared through their hashes so that the time taken
/// does not tell how much of a guess was right.
pub(crate) fn same_secret(presented: &str, expected: &str) -> bool {
    KeyHash::of(presented) == KeyHash::of(expected)
}
