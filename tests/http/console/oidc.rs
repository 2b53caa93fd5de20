//! Signing in to the web console at the `[auth.jwt]` issuer (`[server.console]`): the
//! browser goes to the issuer with PKCE and a nonce and comes back with a code; an ID token
//! that holds the admin claim opens a console login, any other is refused. The issuer is
//! served by the test: its discovery document, and a token endpoint answering with the ID
//! token the test signed for that sign-in.

use std::sync::{Arc, Mutex};

use reqwest::blocking::Client;
use reqwest::header::{LOCATION, SET_COOKIE};
use reqwest::StatusCode;
use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::jwt::Issuer;
use manifold_testkit::process::*;
use manifold_testkit::rest;

use super::browser;

const CLIENT: &str = "manifold-console";

/// The test's issuer: what its token endpoint answers, and what it was asked.
struct TestIssuer {
    url: String,
    keys: Issuer,
    id_token: Arc<Mutex<String>>,
    token_requests: Arc<Mutex<Vec<String>>>,
}

fn start_issuer() -> TestIssuer {
    let base = Arc::new(Mutex::new(String::new()));
    let id_token = Arc::new(Mutex::new(String::new()));
    let token_requests = Arc::new(Mutex::new(Vec::new()));
    let (b, t, r) = (base.clone(), id_token.clone(), token_requests.clone());
    let url = rest::serve(move |mut stream| {
        let Some(request) = rest::read_request(&mut stream) else {
            return;
        };
        let issuer = b.lock().unwrap().clone();
        let body = match request.path() {
            "/.well-known/openid-configuration" => json!({
                "issuer": issuer,
                "authorization_endpoint": format!("{issuer}/authorize"),
                "token_endpoint": format!("{issuer}/token"),
                "jwks_uri": format!("{issuer}/jwks"),
            }),
            "/token" => {
                r.lock().unwrap().push(request.body.clone());
                json!({"access_token": "unused", "token_type": "Bearer", "id_token": *t.lock().unwrap()})
            }
            _ => return rest::reply(&mut stream, "404 Not Found", "text/plain", "no\n"),
        };
        rest::reply(&mut stream, "200 OK", "application/json", &body.to_string());
    });
    *base.lock().unwrap() = url.clone();
    TestIssuer {
        keys: Issuer::new(&url, "console-k1"),
        url,
        id_token,
        token_requests,
    }
}

fn server(issuer: &TestIssuer) -> Server {
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n\
         [server.console]\nlogin_client_id = \"{CLIENT}\"\nadmin_claim = \"roles\"\n\
         admin_value = \"manifold-admin\"\n\n\
         [auth.jwt]\nissuer = \"{iss}\"\naudience = \"https://mcp.example/mcp\"\n\
         jwks = '{jwks}'\n\n[teams.eng]\n\n{alpha}",
        iss = issuer.url,
        jwks = issuer.keys.jwks(),
        alpha = named_fixture("alpha"),
    );
    Server::start(&config)
}

/// The value of `name` in `url`'s query, still percent-encoded.
fn param(url: &str, name: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
        .unwrap_or_default()
        .to_owned()
}

/// Starts a sign-in and comes back from the issuer, whose token endpoint answers with an
/// ID token of `claims` (plus the sign-in's nonce): the callback's answer.
fn sign_in(
    server: &Server,
    issuer: &TestIssuer,
    c: &Client,
    claims: serde_json::Value,
) -> reqwest::blocking::Response {
    let r = c
        .get(server.admin_url("/console/login/oidc"))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FOUND);
    let to = r.headers()[LOCATION].to_str().unwrap().to_owned();
    assert!(
        to.starts_with(&format!("{}/authorize?", issuer.url)),
        "{to}"
    );
    assert_eq!(param(&to, "client_id"), CLIENT);
    assert_eq!(param(&to, "code_challenge_method"), "S256");
    let redirect = param(&to, "redirect_uri");
    assert!(
        redirect.ends_with("%2Fconsole%2Flogin%2Foidc%2Fcallback"),
        "back to the admin address: {redirect}"
    );
    let mut claims = issuer.keys.claims(CLIENT, "ops-1", claims);
    claims["nonce"] = json!(param(&to, "nonce"));
    *issuer.id_token.lock().unwrap() = issuer.keys.token(claims);
    c.get(server.admin_url(&format!(
        "/console/login/oidc/callback?state={}&code=the-code",
        param(&to, "state")
    )))
    .send()
    .unwrap()
}

#[test]
fn an_administrator_signs_in_at_the_issuer_and_others_are_refused() {
    let issuer = start_issuer();
    let server = server(&issuer);
    let c = browser();
    // The login page offers the issuer's sign-in; with no admin token there is no form to
    // post one to.
    let page = c
        .get(server.admin_url("/console/login"))
        .send()
        .unwrap()
        .text()
        .unwrap();
    assert!(page.contains("id=\"oidc-login\""), "{page}");

    // An ID token without the admin value: refused, no login.
    let r = sign_in(&server, &issuer, &c, json!({"roles": ["viewer"]}));
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get(SET_COOKIE).is_none());
    assert!(r.text().unwrap().contains("console administrator"));

    // With it (one of the claim's values): a login, whose cookie opens the overview.
    let r = sign_in(
        &server,
        &issuer,
        &c,
        json!({"roles": ["viewer", "manifold-admin"]}),
    );
    assert_eq!(r.status(), StatusCode::SEE_OTHER);
    assert_eq!(r.headers()[LOCATION], "/console/");
    let set = r.headers()[SET_COOKIE].to_str().unwrap().to_owned();
    assert!(
        set.contains("HttpOnly") && set.contains("SameSite=Strict"),
        "{set}"
    );
    let cookie = set.split(';').next().unwrap().to_owned();
    let overview = c
        .get(server.admin_url("/console/"))
        .header("cookie", &cookie)
        .send()
        .unwrap();
    assert_eq!(overview.status(), StatusCode::OK);
    assert!(overview.text().unwrap().contains("id=\"upstreams\""));
    // The code was redeemed with the PKCE verifier, by the console's client.
    let redeemed = issuer.token_requests.lock().unwrap().clone();
    assert_eq!(redeemed.len(), 2, "{redeemed:?}");
    assert!(redeemed[1].contains("code_verifier=") && redeemed[1].contains(CLIENT));

    // A callback whose state was already used (or never issued) opens nothing.
    let replay = c
        .get(server.admin_url("/console/login/oidc/callback?state=made-up&code=the-code"))
        .send()
        .unwrap();
    assert_eq!(replay.status(), StatusCode::FORBIDDEN);
    assert!(replay.headers().get(SET_COOKIE).is_none());
}

#[test]
fn an_id_token_for_another_client_or_with_another_nonce_is_refused() {
    let issuer = start_issuer();
    let server = server(&issuer);
    let c = browser();
    // Signed for the host audience rather than the console's client.
    let r = c
        .get(server.admin_url("/console/login/oidc"))
        .send()
        .unwrap();
    let to = r.headers()[LOCATION].to_str().unwrap().to_owned();
    let mut claims = issuer.keys.claims(
        "https://mcp.example/mcp",
        "ops-1",
        json!({"roles": "manifold-admin"}),
    );
    claims["nonce"] = json!(param(&to, "nonce"));
    *issuer.id_token.lock().unwrap() = issuer.keys.token(claims);
    let r = c
        .get(server.admin_url(&format!(
            "/console/login/oidc/callback?state={}&code=x",
            param(&to, "state")
        )))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get(SET_COOKIE).is_none());
    // The right audience, the nonce of another sign-in.
    let r = c
        .get(server.admin_url("/console/login/oidc"))
        .send()
        .unwrap();
    let to = r.headers()[LOCATION].to_str().unwrap().to_owned();
    let mut claims = issuer
        .keys
        .claims(CLIENT, "ops-1", json!({"roles": "manifold-admin"}));
    claims["nonce"] = json!("not-this-sign-in");
    *issuer.id_token.lock().unwrap() = issuer.keys.token(claims);
    let r = c
        .get(server.admin_url(&format!(
            "/console/login/oidc/callback?state={}&code=x",
            param(&to, "state")
        )))
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.headers().get(SET_COOKIE).is_none());
}
