//! Connections: with the credential broker, who is connected to each per-user upstream, with
//! which scopes, until when, and the upstream's failed refreshes; a revoke button per
//! connection. The same data the admin routes of `credentials/admin.rs` list and revoke;
//! never a token.

use super::{
    access, check_post, csrf_of, logged_in_page, refused_page, see_other, Console, PostedForm,
};
use actix_web::{web, HttpRequest, HttpResponse};

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use manifold_auth::{ConnectionInfo, Owner};
use manifold_telemetry::metrics;

use super::page::{escape, fill, CONNECTIONS};
use crate::credentials::Consents;

/// What the revoke form names: the connection's upstream and whose it is.
pub(super) struct Revoke {
    pub(super) upstream: String,
    pub(super) owner: Owner,
}

impl Revoke {
    /// The revoke form's fields: `upstream`, and `principal` as the listing shows it
    /// (`team/principal`, or the shared identity's, which has no team).
    pub(super) fn of_form(form: &HashMap<String, String>) -> Result<Self, &'static str> {
        let upstream = form.get("upstream").filter(|u| !u.is_empty());
        let principal = form.get("principal").filter(|p| !p.is_empty());
        let (Some(upstream), Some(principal)) = (upstream, principal) else {
            return Err("the form must name an upstream and a principal");
        };
        Ok(Self {
            upstream: upstream.clone(),
            owner: owner_of(principal),
        })
    }
}

/// The owner behind a listed principal: `team/principal` is a caller; one without a team
/// is the upstream's shared identity.
fn owner_of(principal: &str) -> Owner {
    match principal.split_once('/') {
        Some((team, id)) if !team.is_empty() => Owner::caller(team, id),
        _ => Owner::shared(),
    }
}

/// The body of the connections page; `done` is the outcome of the last revoke, if any.
pub(super) async fn body(
    consents: Option<&dyn Consents>,
    csrf: Option<&str>,
    done: Option<&str>,
) -> String {
    let notice = done.map_or_else(String::new, |d| {
        format!("<p class=\"notice\" id=\"done\">{}</p>", escape(d))
    });
    let Some(consents) = consents else {
        let none = "<p id=\"no-broker\">No upstream has per-user credentials: \
                    no upstream is configured with <code>auth.mode = \"oauth\"</code>.</p>";
        return fill(CONNECTIONS, &[("notice", &notice), ("connections", none)]);
    };
    let listing = match consents.connections(None).await {
        Ok(mut list) => {
            list.sort_by(|a, b| (&a.upstream, &a.principal).cmp(&(&b.upstream, &b.principal)));
            table(&list, csrf)
        }
        Err(e) => format!(
            "<p class=\"notice\">The connections could not be read: {}</p>",
            escape(&e.to_string())
        ),
    };
    fill(
        CONNECTIONS,
        &[("notice", &notice), ("connections", &listing)],
    )
}

fn table(list: &[ConnectionInfo], csrf: Option<&str>) -> String {
    if list.is_empty() {
        return "<p id=\"no-connections\">Nobody is connected to a per-user upstream.</p>"
            .to_owned();
    }
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let rows: String = list.iter().map(|c| row(c, csrf, now)).collect();
    format!(
        "<table id=\"connections\">\n<thead><tr><th>Upstream</th><th>Who</th><th>Owner</th>\
         <th>Scopes</th><th>Connected</th><th>Expires</th><th>Refresh</th>\
         <th>Failed refreshes (upstream)</th><th></th></tr></thead>\n<tbody>\n{rows}</tbody>\n</table>"
    )
}

fn row(c: &ConnectionInfo, csrf: Option<&str>, now_ms: u64) -> String {
    let csrf_field = csrf.map_or_else(String::new, |t| {
        format!(
            "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
            escape(t)
        )
    });
    let expires = c.expires_at_ms.map_or_else(
        || "never".to_owned(),
        |at| match at.checked_sub(now_ms) {
            Some(left) => format!("in {}", minutes(left)),
            None => format!("expired {} ago", minutes(now_ms - at)),
        },
    );
    format!(
        "<tr data-upstream=\"{upstream}\" data-principal=\"{principal}\"><td>{upstream}</td>\
         <td>{principal}</td><td><code>{owner}</code></td><td>{scopes}</td>\
         <td>{obtained} ago</td><td class=\"expires\">{expires}</td><td>{refresh}</td>\
         <td class=\"num refresh-failures\">{failures}</td><td>\
         <form method=\"post\" action=\"/console/connections/revoke\">{csrf_field}\
         <input type=\"hidden\" name=\"upstream\" value=\"{upstream}\">\
         <input type=\"hidden\" name=\"principal\" value=\"{principal}\">\
         <button type=\"submit\" class=\"revoke\">Revoke</button></form></td></tr>\n",
        upstream = escape(&c.upstream),
        principal = escape(&c.principal),
        owner = escape(&c.owner),
        scopes = escape(&c.scopes.join(" ")),
        obtained = minutes(now_ms.saturating_sub(c.obtained_at_ms)),
        refresh = if c.refreshable { "refreshable" } else { "none" },
        failures = metrics().credential_refresh_failures(&c.upstream),
    )
}

/// A span of milliseconds in minutes (seconds below one).
fn minutes(ms: u64) -> String {
    let d = Duration::from_millis(ms);
    match d.as_secs() {
        s @ 0..=59 => format!("{s} s"),
        s => format!("{} min", s / 60),
    }
}

/// The outcome of a revoke, carried by the 303 back to the connections page.
#[derive(serde::Deserialize)]
pub(super) struct Revoked {
    revoked: Option<usize>,
    upstream: Option<String>,
}

pub(super) async fn connections_page(
    req: HttpRequest,
    console: web::Data<Console>,
    outcome: web::Query<Revoked>,
) -> HttpResponse {
    let access = match access(&req, &console) {
        Ok(access) => access,
        Err(refusal) => return refused_page(refusal),
    };
    let done = match (&outcome.revoked, &outcome.upstream) {
        (Some(n), Some(upstream)) => Some(format!("Revoked {n} connection(s) to {upstream}.")),
        _ => None,
    };
    let consents = console.consents.as_deref();
    let body = body(consents, csrf_of(&access), done.as_deref()).await;
    logged_in_page(&req, &console, "Connections", 0, |_| body)
}

/// `POST /console/connections/revoke`: forgets one caller's (or the shared identity's)
/// connection to one upstream, then back to the page, which says how many went.
pub(super) async fn revoke_connection(
    req: HttpRequest,
    console: web::Data<Console>,
    form: PostedForm,
) -> HttpResponse {
    let form = match check_post(&req, &console, form) {
        Ok((_, form)) => form,
        Err(refusal) => return refusal,
    };
    let Some(consents) = &console.consents else {
        return see_other("/console/connections");
    };
    let what = match Revoke::of_form(&form) {
        Ok(what) => what,
        Err(why) => return bad_form(why),
    };
    match consents.revoke(Some(&what.upstream), &what.owner).await {
        Ok(n) => see_other(&format!(
            "/console/connections?revoked={n}&upstream={}",
            super::page::url_encode(&what.upstream)
        )),
        Err(e) => HttpResponse::BadGateway()
            .content_type("text/plain; charset=utf-8")
            .body(format!("the connection was not revoked: {e}\n")),
    }
}

fn bad_form(why: &str) -> HttpResponse {
    HttpResponse::BadRequest()
        .content_type("text/plain; charset=utf-8")
        .body(format!("{why}\n"))
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use futures::future::BoxFuture;
    use manifold_auth::{Completed, ConsentLink, CredentialError, PendingConsent};

    /// A broker with alice's connection to forge and nothing else.
    struct OneConnection;

    fn refused<T: Send + 'static>() -> BoxFuture<'static, Result<T, CredentialError>> {
        Box::pin(async {
            Err(CredentialError::Refused {
                reason: "not in this test".into(),
            })
        })
    }

    impl Consents for OneConnection {
        fn pending<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<PendingConsent, CredentialError>> {
            refused()
        }
        fn authorize<'a>(
            &'a self,
            _: &'a str,
            _: &'a Owner,
        ) -> BoxFuture<'a, Result<String, CredentialError>> {
            refused()
        }
        fn callback<'a>(&'a self, _: &'a str) -> BoxFuture<'a, Result<Completed, CredentialError>> {
            refused()
        }
        fn client_metadata(&self) -> Option<String> {
            None
        }
        fn connections<'a>(
            &'a self,
            _: Option<&'a Owner>,
        ) -> BoxFuture<'a, Result<Vec<ConnectionInfo>, CredentialError>> {
            Box::pin(async {
                Ok(vec![ConnectionInfo {
                    upstream: "forge".into(),
                    owner: Owner::caller("eng", "key:alice").label(),
                    principal: "eng/key:alice".into(),
                    scopes: vec!["repo".into(), "read:user".into()],
                    expires_at_ms: None,
                    obtained_at_ms: 0,
                    refreshable: true,
                }])
            })
        }
        fn revoke<'a>(
            &'a self,
            _: Option<&'a str>,
            _: &'a Owner,
        ) -> BoxFuture<'a, Result<usize, CredentialError>> {
            Box::pin(async { Ok(1) })
        }
        fn consent<'a>(
            &'a self,
            _: &'a str,
        ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
            refused()
        }
        fn per_user_upstreams(&self) -> Vec<String> {
            Vec::new()
        }
        fn connect<'a>(
            &'a self,
            _: &'a str,
            _: &'a str,
            _: &'a str,
        ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
            refused()
        }
        fn completed(&self, _: Completed) {}
    }

    #[tokio::test]
    async fn each_connection_is_listed_with_a_revoke_form_carrying_the_csrf_token() {
        let page = body(
            Some(&OneConnection),
            Some("csrf-1"),
            Some("Revoked 1 connection(s) to x."),
        )
        .await;
        assert!(
            page.contains("<tr data-upstream=\"forge\" data-principal=\"eng/key:alice\">"),
            "{page}"
        );
        assert!(page.contains("repo read:user"), "{page}");
        assert!(page.contains("name=\"csrf\" value=\"csrf-1\""), "{page}");
        assert!(
            page.contains("name=\"principal\" value=\"eng/key:alice\""),
            "{page}"
        );
        assert!(page.contains("id=\"done\""), "{page}");
        let form: HashMap<String, String> = [("upstream", "forge"), ("principal", "eng/key:alice")]
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v.to_owned()))
            .collect();
        let what = Revoke::of_form(&form).unwrap();
        assert_eq!(what.upstream, "forge");
        assert!(what.owner == Owner::caller("eng", "key:alice"));
        assert!(Revoke::of_form(&HashMap::new()).is_err());
    }

    #[test]
    fn a_listed_principal_names_its_owner() {
        assert!(owner_of("eng/key:alice") == Owner::caller("eng", "key:alice"));
        assert!(
            owner_of("eng/jwt:https://idp/#a/b") == Owner::caller("eng", "jwt:https://idp/#a/b")
        );
        assert!(owner_of("/shared") == Owner::shared());
        assert!(owner_of("shared") == Owner::shared());
    }
}
