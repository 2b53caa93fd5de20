//! The OpenID Connect login of browser users, against an issuer served in the test.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use actix_web::test::{call_service, init_service, TestRequest};
use actix_web::{web, App, HttpResponse, HttpServer};
use manifold_config::{JwtConfig, TeamConfig};
use manifold_testkit::jwt::Issuer;
use serde_json::json;

use super::{assert_secure, auth, body_of, header, run, Fake, AUTHORIZE};
use crate::credentials::{Consents, CredentialPages, LoginSettings};

/// What the issuer's token endpoint answers: the ID token the test put there.
type Minted = web::Data<Mutex<String>>;

/// Serves the issuer's discovery document and token endpoint on 127.0.0.1; returns its URL.
fn start_issuer(minted: Minted) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let issuer = url.clone();
    let server = HttpServer::new(move || {
        let doc = json!({
            "issuer": issuer,
            "authorization_endpoint": format!("{issuer}/authorize"),
            "token_endpoint": format!("{issuer}/token"),
            "jwks_uri": format!("{issuer}/jwks"),
        });
        App::new()
            .app_data(minted.clone())
            .route(
                "/.well-known/openid-configuration",
                web::get().to(move || {
                    let doc = doc.clone();
                    async move { HttpResponse::Ok().json(doc) }
                }),
            )
            .route(
                "/token",
                web::post().to(|minted: Minted| async move {
                    let id_token = minted.lock().unwrap().clone();
                    HttpResponse::Ok().json(json!({"access_token": "at", "id_token": id_token}))
                }),
            )
    })
    .workers(1)
    .disable_signals()
    .listen(listener)
    .unwrap()
    .run();
    actix_web::rt::spawn(server);
    url
}

/// The value of `name` in the query of `url`, as it is written there.
fn param(url: &str, name: &str) -> String {
    let query = url.split_once('?').map_or("", |(_, q)| q);
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix(&format!("{name}=")))
        .unwrap_or_default()
        .to_owned()
}

fn settings(issuer: &Issuer) -> LoginSettings {
    LoginSettings {
        jwt: JwtConfig {
            issuer: issuer.issuer().to_owned(),
            audience: "https://mcp.example/mcp".into(),
            jwks_url: None,
            jwks: Some(issuer.jwks().to_string()),
            team_claim: "team".into(),
            leeway: Duration::from_secs(60),
            jwks_min_refresh: Duration::from_secs(60),
        },
        teams: vec![TeamConfig {
            name: "eng".into(),
            claims: vec!["eng".into()],
            ..TeamConfig::default()
        }],
        client_id: "manifold-login".into(),
        client_secret: None,
        public_url: Some("https://mcp.example".into()),
        timeout: Duration::from_secs(10),
        ttl: Duration::from_secs(600),
    }
}

#[test]
fn a_jwt_caller_signs_in_at_the_issuer_and_only_they_pass() {
    run(async {
        let minted = web::Data::new(Mutex::new(String::new()));
        let url = start_issuer(minted.clone());
        let issuer = Issuer::new(&url, "k1");
        let fake = Arc::new(Fake {
            issuer: url.clone(),
            ..Fake::default()
        });
        let consents: Arc<dyn Consents> = fake.clone();
        let data = CredentialPages::new(consents, auth(), Some(settings(&issuer)));
        let app = init_service(
            App::new()
                .app_data(data)
                .configure(super::super::host_routes),
        )
        .await;
        // Opens the link, signs in as `sub` (with the login's nonce, or `nonce`), and comes
        // back: the answer to the login's callback.
        let sign_in = |sub: &'static str, nonce: Option<&'static str>| {
            let (app, minted, issuer) = (&app, &minted, &issuer);
            async move {
                let req = TestRequest::get().uri("/oauth/connect/c-jwt").to_request();
                let r = call_service(app, req).await;
                assert_eq!(r.status(), 302);
                assert_secure(&r);
                let to = header(&r, "location");
                assert!(
                    to.starts_with(&format!("{}/authorize?", issuer.issuer())),
                    "{to}"
                );
                assert_eq!(param(&to, "client_id"), "manifold-login");
                assert_eq!(param(&to, "code_challenge_method"), "S256");
                assert_eq!(
                    param(&to, "redirect_uri"),
                    "https%3A%2F%2Fmcp.example%2Foauth%2Flogin%2Fcallback"
                );
                let sent = param(&to, "nonce");
                let extra = json!({"team": "eng", "nonce": nonce.unwrap_or(&sent)});
                *minted.lock().unwrap() = issuer.token(issuer.claims("manifold-login", sub, extra));
                let back = format!("/oauth/login/callback?code=c&state={}", param(&to, "state"));
                call_service(app, TestRequest::get().uri(&back).to_request()).await
            }
        };
        let r = sign_in("bob", None).await;
        assert_eq!(r.status(), 403, "another user");
        assert!(body_of(r).contains("made for someone else"));
        let r = sign_in("alice", Some("another-nonce")).await;
        assert_eq!(r.status(), 400, "a token of another login");
        assert!(body_of(r).contains("nonce"));
        let r = sign_in("alice", None).await;
        assert_eq!(r.status(), 302);
        assert_eq!(header(&r, "location"), AUTHORIZE);
        let req = TestRequest::get()
            .uri("/oauth/login/callback?code=c&state=unknown")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 400);
        assert!(body_of(r).contains("unknown, was already used, or has expired"));
    });
}

#[test]
fn a_jwt_user_signs_in_to_their_page_at_the_issuer() {
    run(async {
        let minted = web::Data::new(Mutex::new(String::new()));
        let url = start_issuer(minted.clone());
        let issuer = Issuer::new(&url, "k1");
        let consents: Arc<dyn Consents> = Arc::new(Fake::default());
        let data = CredentialPages::new(consents, auth(), Some(settings(&issuer)));
        let app = init_service(
            App::new()
                .app_data(data)
                .configure(super::super::host_routes),
        )
        .await;
        let req = TestRequest::get().uri("/oauth/account").to_request();
        let page = body_of(call_service(&app, req).await);
        assert!(page.contains("href=\"/oauth/account/signin\""), "{page}");
        let req = TestRequest::get().uri("/oauth/account/signin").to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 302);
        let to = header(&r, "location");
        assert!(to.starts_with(&format!("{url}/authorize?")), "{to}");
        let extra = json!({"team": "eng", "nonce": param(&to, "nonce")});
        *minted.lock().unwrap() = issuer.token(issuer.claims("manifold-login", "carol", extra));
        let back = format!("/oauth/login/callback?code=c&state={}", param(&to, "state"));
        let r = call_service(&app, TestRequest::get().uri(&back).to_request()).await;
        assert_eq!(r.status(), 303);
        assert_eq!(header(&r, "location"), "/oauth/account");
        let cookie = header(&r, "set-cookie");
        assert!(
            cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
            "{cookie}"
        );
        let cookie = cookie.split(';').next().unwrap().to_owned();
        let req = TestRequest::get()
            .uri("/oauth/account")
            .insert_header(("cookie", cookie))
            .to_request();
        let page = body_of(call_service(&app, req).await);
        assert!(page.contains(&format!("eng/jwt:{url}#carol")), "{page}");
        // The fake's connection is alice's (by her key): not carol's to see.
        assert!(
            page.contains("not connected") && !page.contains("repo"),
            "{page}"
        );
    });
}
