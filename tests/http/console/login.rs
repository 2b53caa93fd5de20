//! The web console on the admin address: who may see its pages, what a login is, that every
//! state-changing form needs the login's CSRF token, and the headers every page carries.

use reqwest::blocking::Response;
use reqwest::header::{HeaderMap, LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

use super::{browser, csrf_on, log_in, TOKEN};

fn console_server() -> Server {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{}\n{}",
        named_fixture("alpha"),
        fixture_upstream("broken", &["--exit-on-start", "3"])
    );
    Server::start(&config)
}

fn assert_strict_headers(headers: &HeaderMap, what: &str) {
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.contains("default-src 'self'"), "{what}: {csp}");
    assert!(!csp.contains("unsafe-inline"), "{what}: {csp}");
    assert_eq!(headers["x-frame-options"], "DENY", "{what}");
    assert_eq!(headers["cache-control"], "no-store", "{what}");
    assert_eq!(headers["referrer-policy"], "no-referrer", "{what}");
}

#[test]
fn a_page_without_a_login_redirects_to_the_login_page() {
    let server = console_server();
    let c = browser();
    let r = c.get(server.admin_url("/console/")).send().unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/console/login");
    // A made-up session is no login, and neither is a wrong bearer token.
    let r = c
        .get(server.admin_url("/console/"))
        .header("cookie", "manifold_console=made-up")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = c
        .get(server.admin_url("/console/"))
        .bearer_auth("not-the-token")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = c.get(server.admin_url("/console/login")).send().unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert!(r.text().unwrap().contains("<form class=\"login\""));
    // A wrong token in the form opens no login.
    let r = c
        .post(server.admin_url("/console/login"))
        .form(&[("token", "not-the-token")])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get(SET_COOKIE).is_none());
}

#[test]
fn the_admin_token_as_bearer_or_a_login_shows_the_overview() {
    let server = console_server();
    let c = browser();
    eventually("alpha is up", || {
        let r = c
            .get(server.admin_url("/console/"))
            .bearer_auth(TOKEN)
            .send()
            .unwrap();
        r.status() == StatusCode::OK && r.text().unwrap().contains("state-up\">up")
    });
    // One call that works and one that fails, as the overview counts them.
    let mut host = server.ready_host();
    assert!(host.call("alpha__echo", json!({"text": "a"}))["result"].is_object());
    host.call("alpha__fail", json!({}));
    let cookie = log_in(&server, &c);
    let page = c
        .get(server.admin_url("/console/"))
        .header("cookie", &cookie)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let alpha = page
        .lines()
        .find(|l| l.contains("data-upstream=\"alpha\""))
        .expect("alpha's row");
    assert!(
        alpha.contains("<td class=\"num\">2</td><td class=\"num\">1</td>"),
        "two calls, one error: {alpha}"
    );
    // Their latency over the last minutes, and the chart's one point so far.
    for quantile in ["p50", "p95"] {
        let cell = format!("<td class=\"num {quantile}\">");
        let at = alpha.find(&cell).expect(quantile) + cell.len();
        let value = alpha[at..].split('<').next().unwrap();
        assert!(
            value.ends_with(" ms") || value.ends_with(" µs") || value.ends_with(" s"),
            "{quantile}: {alpha}"
        );
    }
    assert!(
        alpha.contains("<svg class=\"latency-chart\"") && alpha.contains("data-points=\"1\""),
        "{alpha}"
    );
    let broken = page
        .lines()
        .find(|l| l.contains("data-upstream=\"broken\""))
        .expect("broken's row");
    assert!(
        broken.contains("<td class=\"num p50\"></td>"),
        "no calls: {broken}"
    );
    assert!(page.contains("data-upstream=\"broken\""), "{page}");
    assert!(page.contains("state-down\">down"), "{page}");
    assert!(
        page.contains("2025-11-25"),
        "alpha's protocol version: {page}"
    );
    // Nothing on the page is fetched from elsewhere, and no script is inline.
    assert!(
        !page.contains("http://") && !page.contains("https://"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
}

#[test]
fn a_post_without_the_login_s_csrf_token_is_refused() {
    let server = console_server();
    let c = browser();
    let cookie = log_in(&server, &c);
    let page = c
        .get(server.admin_url("/console/"))
        .header("cookie", &cookie)
        .send()
        .unwrap()
        .text()
        .unwrap();
    let csrf = csrf_on(&page);
    let logout = |form: &[(&str, &str)]| -> Response {
        c.post(server.admin_url("/console/logout"))
            .header("cookie", &cookie)
            .form(form)
            .send()
            .unwrap()
    };
    assert_eq!(logout(&[]).status(), StatusCode::FORBIDDEN);
    assert_eq!(logout(&[("csrf", "wrong")]).status(), StatusCode::FORBIDDEN);
    // Another login's token is not this login's.
    let other = csrf_on(
        &c.get(server.admin_url("/console/"))
            .header("cookie", log_in(&server, &c))
            .send()
            .unwrap()
            .text()
            .unwrap(),
    );
    assert_eq!(logout(&[("csrf", &other)]).status(), StatusCode::FORBIDDEN);
    // Still logged in after the refusals; the right token logs out.
    let r = logout(&[("csrf", &csrf)]);
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let r = c
        .get(server.admin_url("/console/"))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER, "logged out");
    // Without any login a POST is refused too.
    let r = c
        .post(server.admin_url("/console/logout"))
        .form(&[("csrf", &csrf)])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}

#[test]
fn every_console_answer_carries_the_strict_headers() {
    let server = console_server();
    let c = browser();
    let cookie = log_in(&server, &c);
    let checks = [
        ("/console/", Some(&cookie)),
        ("/console/", None),
        ("/console/login", None),
        ("/console/assets/console.css", None),
        ("/console/assets/refresh.js", None),
        ("/console/no-such-page", Some(&cookie)),
    ];
    for (path, cookie) in checks {
        let mut request = c.get(server.admin_url(path));
        if let Some(cookie) = cookie {
            request = request.header("cookie", cookie.as_str());
        }
        let r = request.send().unwrap();
        assert_strict_headers(r.headers(), path);
    }
    let r = c
        .post(server.admin_url("/console/logout"))
        .header("cookie", &cookie)
        .form(&[("csrf", "wrong")])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert_strict_headers(r.headers(), "a refused POST");
}

#[test]
fn without_an_admin_token_there_is_no_console() {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}",
        named_fixture("alpha")
    );
    let server = Server::start(&config);
    let r = browser().get(server.admin_url("/console/")).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert!(r.text().unwrap().contains("server.metrics_token"));
}

#[test]
fn a_post_whose_body_is_no_form_is_refused_for_its_missing_csrf_token() {
    let server = console_server();
    let c = browser();
    let cookie = log_in(&server, &c);
    let r = c
        .post(server.admin_url("/console/logout"))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = c
        .post(server.admin_url("/console/logout"))
        .header("cookie", &cookie)
        .header("content-type", "application/json")
        .body("{\"csrf\":\"x\"}")
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
}
