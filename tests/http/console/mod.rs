//! The web console on the admin address, page by page: who may see it and how a login works
//! (`login`, `oidc`), and what each page shows and does. Every test drives the real binary.

mod catalog;
mod config;
mod connections;
mod login;
mod oidc;
mod replicas;
mod teams;
mod try_tool;

use reqwest::blocking::Client;
use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::redirect::Policy;
use reqwest::StatusCode;

use manifold_testkit::http::Server;

/// The admin token (`server.metrics_token`) of every console test's Manifold.
const TOKEN: &str = "console-admin-token-0123456789abcdef";

/// A browser's view: redirects are seen, not followed.
fn browser() -> Client {
    Client::builder()
        .redirect(Policy::none())
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .unwrap()
}

/// A page of the console read with the admin token as a bearer token (200, or the test fails).
fn admin_page(server: &Server, path: &str) -> String {
    let r = browser()
        .get(server.admin_url(path))
        .bearer_auth(TOKEN)
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK, "{path}");
    r.text().unwrap()
}

/// Logs in with the form: the session cookie (`name=value`) it set.
fn log_in(server: &Server, c: &Client) -> String {
    let r = c
        .post(server.admin_url("/console/login"))
        .form(&[("token", TOKEN)])
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/console/");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.contains(attribute), "{set}");
    }
    assert!(!set.contains(TOKEN), "the cookie is not the token: {set}");
    set.split(';').next().unwrap().to_owned()
}

/// The value of the first hidden `csrf` field on a page.
fn csrf_on(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    page[at..].split('"').next().unwrap().to_owned()
}
