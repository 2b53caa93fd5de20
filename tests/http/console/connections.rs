//! The console's connections page without a credential broker, and its revoke form's
//! refusals (the listing and revoking of real connections are the browser tests').

use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::StatusCode;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

use super::{browser, TOKEN};

fn server() -> Server {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\nmetrics_token = \"{TOKEN}\"\n\n{}",
        named_fixture("alpha")
    );
    Server::start(&config)
}

#[test]
fn without_the_broker_the_page_says_there_are_no_per_user_upstreams() {
    let server = server();
    let r = browser()
        .get(server.admin_url("/console/connections"))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let page = r.text().unwrap();
    assert!(page.contains("id=\"no-broker\""), "{page}");
    assert!(
        page.contains("No upstream has per-user credentials"),
        "{page}"
    );
}

#[test]
fn a_revoke_needs_a_login_and_its_csrf_token() {
    let server = server();
    let c = browser();
    let revoke = [("upstream", "forge"), ("principal", "eng/key:alice")];
    // Not logged in.
    let r = c
        .post(server.admin_url("/console/connections/revoke"))
        .form(&revoke)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    // Logged in, without the CSRF token.
    let r = c
        .post(server.admin_url("/console/login"))
        .form(&[("token", TOKEN)])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    let cookie = r.headers()[SET_COOKIE].to_str().unwrap();
    let cookie = cookie.split(';').next().unwrap().to_owned();
    let r = c
        .post(server.admin_url("/console/connections/revoke"))
        .header("cookie", &cookie)
        .form(&revoke)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().unwrap().contains("CSRF"));
    // With the admin token as a bearer token: back to the page (nothing to revoke here).
    let r = c
        .post(server.admin_url("/console/connections/revoke"))
        .bearer_auth(TOKEN)
        .form(&revoke)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/console/connections");
}
