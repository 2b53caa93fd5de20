//! Who is logged in to the console: a random session id in an HttpOnly cookie, mapped (in
//! memory, never the admin token itself) to its expiry and its CSRF token.

use crate::signins::SignIns;
pub(super) use crate::signins::LIFETIME;

/// The cookie that carries a login's session id.
pub(super) const COOKIE: &str = "manifold_console";
/// Logins kept at most: past this the oldest is forgotten.
const MAX_LOGINS: usize = 256;

/// The console's logins: nobody in particular, the admin token's holder.
pub(super) type Logins = SignIns<(), MAX_LOGINS>;

/// The session id of the console's cookie, if the request carries one.
pub(super) fn session_cookie(req: &actix_web::HttpRequest) -> Option<String> {
    crate::signins::cookie(req, COOKIE)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_login_is_found_by_its_session_until_closed() {
        let logins = Logins::default();
        let (session, csrf) = logins.open(()).unwrap();
        assert_eq!(logins.find(&session).unwrap().csrf, csrf);
        assert!(logins.find("not-a-session").is_none());
        logins.close(&session);
        assert!(logins.find(&session).is_none());
    }

    #[test]
    fn logins_are_bounded() {
        let logins = Logins::default();
        let first = logins.open(()).unwrap().0;
        for _ in 0..MAX_LOGINS {
            logins.open(()).unwrap();
        }
        assert!(logins.find(&first).is_none());
        let count = logins.len();
        assert_eq!(count, MAX_LOGINS);
    }
}
