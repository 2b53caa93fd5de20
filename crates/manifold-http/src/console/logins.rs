//! Who is logged in to the console: a random session id in an HttpOnly cookie, mapped here
//! (in memory, never the admin token itself) to its expiry and its CSRF token.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

use manifold_auth::oauth::pkce::random_token;
use manifold_config::KeyHash;

/// The cookie that carries a login's session id.
pub(super) const COOKIE: &str = "manifold_console";
/// How long a login lasts; then the login page asks for the token again.
pub(super) const LIFETIME: Duration = Duration::from_secs(8 * 60 * 60);
/// Logins kept at most: past this the oldest is forgotten, so that repeated logins cannot
/// grow memory without bound.
const MAX_LOGINS: usize = 256;

/// One login.
#[derive(Clone)]
pub(super) struct Login {
    expires: Instant,
    /// What every state-changing form of this login carries.
    pub(super) csrf: String,
}

/// The logins of the console, keyed by the hash of their session id (a dump of memory does
/// not hand out live cookies).
#[derive(Default)]
pub(super) struct Logins {
    by_session: Mutex<HashMap<KeyHash, Login>>,
}

impl Logins {
    /// A new login: its session id (for the cookie) and its CSRF token. `None` when the
    /// system's random source failed.
    pub(super) fn open(&self) -> Option<(String, String)> {
        let session = random_token().ok()?;
        let csrf = random_token().ok()?;
        let now = Instant::now();
        let mut all = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.retain(|_, login| login.expires > now);
        if all.len() >= MAX_LOGINS {
            let oldest = all.iter().min_by_key(|(_, l)| l.expires).map(|(k, _)| *k);
            if let Some(oldest) = oldest {
                all.remove(&oldest);
            }
        }
        let login = Login {
            expires: now + LIFETIME,
            csrf: csrf.clone(),
        };
        all.insert(KeyHash::of(&session), login);
        Some((session, csrf))
    }

    /// The live login of `session`, if any (an expired one is forgotten).
    pub(super) fn find(&self, session: &str) -> Option<Login> {
        let key = KeyHash::of(session);
        let mut all = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match all.get(&key) {
            Some(login) if login.expires > Instant::now() => Some(login.clone()),
            Some(_) => {
                all.remove(&key);
                None
            }
            None => None,
        }
    }

    /// Ends the login of `session`.
    pub(super) fn close(&self, session: &str) {
        let mut all = self
            .by_session
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        all.remove(&KeyHash::of(session));
    }
}

/// The session id of the console's cookie, if the request carries one.
pub(super) fn session_cookie(req: &actix_web::HttpRequest) -> Option<String> {
    cookie(req, COOKIE)
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_found_by_its_session_until_closed() {
        let logins = Logins::default();
        let (session, csrf) = logins.open().unwrap();
        assert_eq!(logins.find(&session).unwrap().csrf, csrf);
        assert!(logins.find("not-a-session").is_none());
        logins.close(&session);
        assert!(logins.find(&session).is_none());
    }

    #[test]
    fn logins_are_bounded() {
        let logins = Logins::default();
        let first = logins.open().unwrap().0;
        for _ in 0..MAX_LOGINS {
            logins.open().unwrap();
        }
        assert!(logins.find(&first).is_none());
        let count = logins.by_session.lock().unwrap().len();
        assert_eq!(count, MAX_LOGINS);
    }
}
