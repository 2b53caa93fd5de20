//! The HTML a browser sees during a consent: small pages with nothing but text and one form,
//! every value escaped, and headers that keep them out of caches, frames and referrers.

use actix_web::http::header;
use actix_web::http::StatusCode;
use actix_web::{HttpResponse, HttpResponseBuilder};

/// What every answer of the consent routes carries: no cache keeps a page (a consent id or a
/// code may be in its URL), no script, style or frame runs on it, a form posts back only to
/// Manifold, and no referrer leaks a URL to the authorization server.
pub(super) fn secure(mut builder: HttpResponseBuilder) -> HttpResponseBuilder {
    builder
        .insert_header((header::CACHE_CONTROL, "no-store"))
        .insert_header((
            header::CONTENT_SECURITY_POLICY,
            "default-src 'none'; form-action 'self'",
        ))
        .insert_header((header::X_FRAME_OPTIONS, "DENY"))
        .insert_header((header::REFERRER_POLICY, "no-referrer"))
        .insert_header((header::X_CONTENT_TYPE_OPTIONS, "nosniff"));
    builder
}

/// A redirect (302 after a GET, 303 after the key form's POST) to `location`.
pub(super) fn redirect(status: StatusCode, location: &str) -> HttpResponse {
    secure(HttpResponse::build(status))
        .insert_header((header::LOCATION, location))
        .finish()
}

/// A page of one heading and one paragraph (`body` is escaped here).
pub(super) fn text(status: StatusCode, title: &str, body: &str) -> HttpResponse {
    html(status, title, &format!("<p>{}</p>", escape(body)))
}

/// The consent's link is unknown, used or expired: nothing else is said about it.
pub(super) fn unusable() -> HttpResponse {
    text(
        StatusCode::BAD_REQUEST,
        "Link not usable",
        "This link is unknown, was already used, or has expired. Ask your host for a new one.",
    )
}

/// The browser user proved to be someone other than the caller the link was made for.
pub(super) fn someone_else() -> HttpResponse {
    text(
        StatusCode::FORBIDDEN,
        "Not your link",
        "This link was made for someone else. Open the link your own host gave you.",
    )
}

/// The form asking for the API key the caller's host uses; it posts back to the same URL.
/// `note`, when given, says why it is shown again. The key is never written into a page.
pub(super) fn key_form(status: StatusCode, upstream: &str, note: Option<&str>) -> HttpResponse {
    let note = note.map_or_else(String::new, |n| {
        format!("<p><strong>{}</strong></p>", escape(n))
    });
    let body = format!(
        "{note}<p>To connect {upstream}, enter the API key your host uses with Manifold, so \
         that the connection is made for you.</p>\n<form method=\"post\">\n\
         <label>API key <input type=\"password\" name=\"key\" autocomplete=\"off\" \
         required></label>\n<button type=\"submit\">Continue</button>\n</form>",
        upstream = escape(upstream),
    );
    html(status, "Connect", &body)
}

/// The users' page's sign-in form: the API key their host uses, and (`oidc`) a link to
/// sign in at the identity provider instead.
pub(super) fn account_sign_in(status: StatusCode, note: Option<&str>, oidc: bool) -> HttpResponse {
    let note = note.map_or_else(String::new, |n| {
        format!("<p><strong>{}</strong></p>", escape(n))
    });
    let oidc = if oidc {
        "\n<p><a id=\"sign-in-at-issuer\" href=\"/oauth/account/signin\">Sign in with your \
         identity provider</a></p>"
    } else {
        ""
    };
    let body = format!(
        "{note}<p>Enter the API key your host uses with Manifold to see and manage your \
         connections to upstreams that act as you.</p>\n\
         <form method=\"post\" action=\"/oauth/account/login\">\n\
         <label>API key <input type=\"password\" name=\"key\" id=\"key\" \
         autocomplete=\"off\" required></label>\n\
         <button type=\"submit\" id=\"sign-in\">Sign in</button>\n</form>{oidc}"
    );
    html(status, "Your connections", &body)
}

/// The signed-in users' page: their own connections (each with a revoke form), and a
/// connect form for each per-user upstream. `query`: the last revoke's outcome.
pub(super) fn account(
    account: &super::account::Account,
    connections: &[manifold_auth::ConnectionInfo],
    upstreams: &[String],
    query: &str,
) -> HttpResponse {
    let csrf = format!(
        "<input type=\"hidden\" name=\"csrf\" value=\"{}\">",
        escape(&account.csrf)
    );
    let form = |action: &str, upstream: &str, label: &str| {
        format!(
            "<form method=\"post\" action=\"/oauth/account/{action}\">{csrf}\
             <input type=\"hidden\" name=\"upstream\" value=\"{upstream}\">\
             <button type=\"submit\" class=\"{action}\">{label}</button></form>",
            upstream = escape(upstream),
        )
    };
    let done = query
        .strip_prefix("revoked=")
        .and_then(|n| n.parse::<usize>().ok())
        .map_or_else(String::new, |n| {
            format!("<p id=\"done\">Revoked {n} connection(s).</p>\n")
        });
    let rows: String = upstreams
        .iter()
        .map(|upstream| {
            let mine = connections.iter().find(|c| &c.upstream == upstream);
            let (state, action) = match mine {
                Some(c) => (
                    format!("connected ({})", escape(&c.scopes.join(" "))),
                    form("revoke", upstream, "Revoke"),
                ),
                None => ("not connected".to_owned(), form("connect", upstream, "Connect")),
            };
            format!(
                "<tr data-upstream=\"{u}\"><td>{u}</td><td class=\"state\">{state}</td><td>{action}</td></tr>\n",
                u = escape(upstream)
            )
        })
        .collect();
    let body = format!(
        "<p>Signed in as <strong id=\"who\">{team}/{principal}</strong>.</p>\n{done}\
         <table id=\"connections\">\n<tr><th>Upstream</th><th>Your connection</th><th></th></tr>\n\
         {rows}</table>\n\
         <form method=\"post\" action=\"/oauth/account/logout\">{csrf}\
         <button type=\"submit\" id=\"sign-out\">Sign out</button></form>",
        team = escape(&account.team),
        principal = escape(&account.principal),
    );
    html(StatusCode::OK, "Your connections", &body)
}

fn html(status: StatusCode, title: &str, body: &str) -> HttpResponse {
    let title = escape(title);
    secure(HttpResponse::build(status))
        .content_type("text/html; charset=utf-8")
        .body(format!(
            "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
             <title>{title} - Manifold</title></head>\n<body>\n<h1>{title}</h1>\n{body}\n\
             </body></html>\n"
        ))
}

pub(super) use crate::markup::escape;

#[cfg(test)]
mod tests {
    #[test]
    fn markup_is_escaped() {
        assert_eq!(
            super::escape(r#"<a href="x">&'</a>"#),
            "&lt;a href=&quot;x&quot;&gt;&amp;&#39;&lt;/a&gt;"
        );
    }
}
