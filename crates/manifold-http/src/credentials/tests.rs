//! The consent pages and the admin routes of connections, against a fake broker.

use std::sync::{Arc, Mutex};

use actix_web::body::MessageBody;
use actix_web::dev::ServiceResponse;
use actix_web::test::{call_service, init_service, TestRequest};
use actix_web::App;
use futures::future::BoxFuture;
use manifold_auth::{
    Completed, ConnectionInfo, ConsentLink, CredentialError, Owner, PendingConsent,
};
use manifold_config::{AuthConfig, KeyHash, TeamConfig};
use manifold_policy::Authenticator;

use super::{AdminConsents, Consents, CredentialPages};
use crate::{AuthSlot, HttpAuth};

const ALICE_KEY: &str = "alice-secret-key";
const BOB_KEY: &str = "bob-secret-key";
const AUTHORIZE: &str = "https://auth.example/authorize?state=s1";

fn principal_of(key: &str) -> String {
    format!("key:{}", KeyHash::of(key).label())
}

/// A broker with one consent for alice (`c-alice`), one of a shared identity (`c-shared`),
/// a callback that succeeds with `state=good`, and one kept connection.
#[derive(Default)]
struct Fake {
    /// The issuer of `c-jwt`, a consent for the JWT caller `eng/jwt:{issuer}#alice`.
    issuer: String,
    completed: Mutex<Vec<Completed>>,
    revoked: Mutex<Vec<(Option<String>, Owner)>>,
}

fn alice() -> Owner {
    Owner::caller("eng", &principal_of(ALICE_KEY))
}

impl Consents for Fake {
    fn pending<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<PendingConsent, CredentialError>> {
        Box::pin(async move {
            let (owner, principal, shared) = match id {
                "c-alice" => (alice(), format!("eng/{}", principal_of(ALICE_KEY)), false),
                "c-shared" => (Owner::shared(), "shared".to_owned(), true),
                "c-jwt" => {
                    let id = format!("jwt:{}#alice", self.issuer);
                    (Owner::caller("eng", &id), format!("eng/{id}"), false)
                }
                _ => {
                    return Err(CredentialError::Refused {
                        reason: "unknown consent".into(),
                    })
                }
            };
            Ok(PendingConsent {
                upstream: "forge".into(),
                owner,
                principal,
                shared,
            })
        })
    }

    fn authorize<'a>(
        &'a self,
        _id: &'a str,
        _owner: &'a Owner,
    ) -> BoxFuture<'a, Result<String, CredentialError>> {
        Box::pin(async { Ok(AUTHORIZE.to_owned()) })
    }

    fn callback<'a>(&'a self, query: &'a str) -> BoxFuture<'a, Result<Completed, CredentialError>> {
        Box::pin(async move {
            if query.contains("state=good") {
                Ok(Completed {
                    upstream: "forge".into(),
                    owner: alice(),
                    principal: "eng/alice".into(),
                    id: "c-alice".into(),
                    binding: None,
                })
            } else {
                Err(CredentialError::Refused {
                    reason: "the state is unknown or expired".into(),
                })
            }
        })
    }

    fn client_metadata(&self) -> Option<String> {
        Some(r#"{"client_id":"https://mcp.example/oauth/client.json"}"#.into())
    }

    fn connections<'a>(
        &'a self,
        _owner: Option<&'a Owner>,
    ) -> BoxFuture<'a, Result<Vec<ConnectionInfo>, CredentialError>> {
        Box::pin(async {
            Ok(vec![ConnectionInfo {
                upstream: "forge".into(),
                owner: alice().label(),
                principal: "eng/key:alice".into(),
                scopes: vec!["repo".into()],
                expires_at_ms: Some(1),
                obtained_at_ms: 0,
                refreshable: true,
            }])
        })
    }

    fn revoke<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, CredentialError>> {
        self.revoked
            .lock()
            .unwrap()
            .push((upstream.map(str::to_owned), *owner));
        Box::pin(async { Ok(1) })
    }

    fn consent<'a>(
        &'a self,
        _upstream: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
        Box::pin(async {
            Ok(ConsentLink {
                id: "c-shared".into(),
                url: "http://127.0.0.1:1/oauth/connect/c-shared".into(),
                expires_at_ms: 42,
            })
        })
    }

    fn per_user_upstreams(&self) -> Vec<String> {
        vec!["forge".into()]
    }

    fn connect<'a>(
        &'a self,
        _upstream: &'a str,
        _team: &'a str,
        _principal: &'a str,
    ) -> BoxFuture<'a, Result<ConsentLink, CredentialError>> {
        Box::pin(async {
            Ok(ConsentLink {
                id: "c-alice".into(),
                url: "http://127.0.0.1:1/oauth/connect/c-alice".into(),
                expires_at_ms: 42,
            })
        })
    }

    fn completed(&self, done: Completed) {
        self.completed.lock().unwrap().push(done);
    }
}

/// Hosts authenticate with alice's or bob's key, both of team eng.
fn auth() -> AuthSlot {
    let team = TeamConfig {
        name: "eng".into(),
        api_keys: vec![KeyHash::of(ALICE_KEY), KeyHash::of(BOB_KEY)],
        ..TeamConfig::default()
    };
    AuthSlot::new(HttpAuth {
        authenticator: Arc::new(Authenticator::new(&AuthConfig::default(), &[team])),
        resource: None,
    })
}

fn run(test: impl std::future::Future<Output = ()>) {
    actix_web::rt::System::new().block_on(test);
}

/// The consent routes around `fake`, with hosts authenticated by [`auth`].
macro_rules! pages {
    ($fake:expr) => {{
        let consents: Arc<dyn Consents> = $fake.clone();
        let data = CredentialPages::new(consents, auth(), None);
        init_service(
            App::new()
                .app_data(data)
                .configure(crate::credentials::host_routes),
        )
        .await
    }};
}

fn header<B>(r: &ServiceResponse<B>, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

fn body_of(r: ServiceResponse) -> String {
    let bytes = r.into_body().try_into_bytes().unwrap_or_default();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Every answer of the consent routes carries the page headers.
fn assert_secure<B>(r: &ServiceResponse<B>) {
    assert_eq!(header(r, "cache-control"), "no-store");
    assert_eq!(
        header(r, "content-security-policy"),
        "default-src 'none'; form-action 'self'"
    );
    assert_eq!(header(r, "x-frame-options"), "DENY");
    assert_eq!(header(r, "referrer-policy"), "no-referrer");
}

fn key_post(key: Option<&str>) -> TestRequest {
    let form = key.map_or_else(String::new, |k| format!("key={k}"));
    TestRequest::post()
        .uri("/oauth/connect/c-alice")
        .insert_header(("content-type", "application/x-www-form-urlencoded"))
        .set_payload(form)
}

#[test]
fn a_shared_consent_goes_straight_to_the_authorization_server() {
    run(async {
        let app = pages!(Arc::<Fake>::default());
        let req = TestRequest::get()
            .uri("/oauth/connect/c-shared")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 302);
        assert_eq!(header(&r, "location"), AUTHORIZE);
        assert_secure(&r);
    });
}

#[test]
fn a_caller_proves_who_they_are_with_their_api_key() {
    run(async {
        let app = pages!(Arc::<Fake>::default());
        // Opened: the form, and nothing of the authorization server yet.
        let req = TestRequest::get()
            .uri("/oauth/connect/c-alice")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 200);
        assert_secure(&r);
        let form = body_of(r);
        assert!(form.contains("<form method=\"post\">"), "{form}");
        assert!(!form.contains("auth.example"), "{form}");
        // No key: the form again.
        let r = call_service(&app, key_post(None).to_request()).await;
        assert_eq!(r.status(), 200);
        assert!(body_of(r).contains("name=\"key\""));
        // Another caller's key: refused, and the key is not echoed.
        let r = call_service(&app, key_post(Some(BOB_KEY)).to_request()).await;
        assert_eq!(r.status(), 403);
        assert_secure(&r);
        let page = body_of(r);
        assert!(page.contains("made for someone else"), "{page}");
        assert!(!page.contains(BOB_KEY));
        // An unknown key: the form again, without the key.
        let r = call_service(&app, key_post(Some("nobody")).to_request()).await;
        assert_eq!(r.status(), 401);
        assert!(!body_of(r).contains("nobody"));
        // The caller's own key: on to the authorization server.
        let r = call_service(&app, key_post(Some(ALICE_KEY)).to_request()).await;
        assert_eq!(r.status(), 303);
        assert_eq!(header(&r, "location"), AUTHORIZE);
        assert_secure(&r);
    });
}

#[test]
fn an_unknown_consent_is_a_400_that_says_nothing_more() {
    run(async {
        let app = pages!(Arc::<Fake>::default());
        let req = TestRequest::get()
            .uri("/oauth/connect/%3Cscript%3E")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 400);
        assert_secure(&r);
        let page = body_of(r);
        assert!(
            page.contains("unknown, was already used, or has expired"),
            "{page}"
        );
        assert!(!page.contains("<script>"), "{page}");
    });
}

#[test]
fn the_callback_completes_the_consent_or_says_why_not() {
    run(async {
        let fake = Arc::<Fake>::default();
        let app = pages!(fake);
        let req = TestRequest::get()
            .uri("/oauth/callback?code=x&state=good")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 200);
        assert_secure(&r);
        assert!(body_of(r).contains("forge is connected"));
        assert_eq!(fake.completed.lock().unwrap().len(), 1, "the core is told");
        let req = TestRequest::get()
            .uri("/oauth/callback?code=x&state=bad")
            .to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 400);
        assert_secure(&r);
        assert!(body_of(r).contains("the state is unknown or expired"));
        assert_eq!(fake.completed.lock().unwrap().len(), 1);
    });
}

#[test]
fn the_client_metadata_document_is_served() {
    run(async {
        let app = pages!(Arc::<Fake>::default());
        let req = TestRequest::get().uri("/oauth/client.json").to_request();
        let r = call_service(&app, req).await;
        assert_eq!(r.status(), 200);
        assert_eq!(header(&r, "content-type"), "application/json");
        assert!(body_of(r).contains("client_id"));
    });
}

const ADMIN_TOKEN: &str = "admin-token";

/// The admin routes of connections around `fake`, behind [`ADMIN_TOKEN`].
macro_rules! admin {
    ($fake:expr) => {{
        let consents: Arc<dyn Consents> = $fake.clone();
        let data = AdminConsents::new(consents, Some(KeyHash::of(ADMIN_TOKEN)));
        init_service(App::new().app_data(data).configure(super::admin_routes)).await
    }};
}

fn with_token(req: TestRequest) -> TestRequest {
    req.insert_header(("authorization", format!("Bearer {ADMIN_TOKEN}")))
}

#[test]
fn connections_are_listed_and_revoked_with_the_admin_token_only() {
    run(async {
        let fake = Arc::<Fake>::default();
        let app = admin!(fake);
        let revoke = || {
            TestRequest::post().uri("/connections/revoke").set_json(
                serde_json::json!({"team": "eng", "principal": "key:alice", "upstream": "forge"}),
            )
        };
        for req in [
            TestRequest::get().uri("/connections"),
            revoke(),
            TestRequest::post().uri("/login/forge"),
        ] {
            let r = call_service(&app, req.to_request()).await;
            assert_eq!(r.status(), 401);
        }
        assert!(fake.revoked.lock().unwrap().is_empty());
        let r = call_service(
            &app,
            with_token(TestRequest::get().uri("/connections")).to_request(),
        )
        .await;
        assert_eq!(r.status(), 200);
        let listing: serde_json::Value = serde_json::from_str(&body_of(r)).unwrap();
        let first = &listing["connections"][0];
        assert_eq!(first["upstream"], "forge");
        assert_eq!(first["principal"], "eng/key:alice");
        assert!(!listing.to_string().contains("token\""), "{listing}");
        let r = call_service(&app, with_token(revoke()).to_request()).await;
        assert_eq!(r.status(), 200);
        assert_eq!(body_of(r), r#"{"revoked":1}"#);
        let revoked = fake.revoked.lock().unwrap().clone();
        assert_eq!(
            revoked,
            vec![(Some("forge".to_owned()), Owner::caller("eng", "key:alice"))]
        );
        let r = call_service(
            &app,
            with_token(TestRequest::post().uri("/login/forge")).to_request(),
        )
        .await;
        assert_eq!(r.status(), 200);
        let link: serde_json::Value = serde_json::from_str(&body_of(r)).unwrap();
        assert_eq!(link["expires_at_ms"], 42);
        assert!(link["url"]
            .as_str()
            .unwrap()
            .ends_with("/oauth/connect/c-shared"));
    });
}

#[test]
fn a_revocation_names_a_caller_or_the_shared_identity() {
    run(async {
        let fake = Arc::<Fake>::default();
        let app = admin!(fake);
        let post = |body: serde_json::Value| {
            with_token(
                TestRequest::post()
                    .uri("/connections/revoke")
                    .set_json(body),
            )
            .to_request()
        };
        let r = call_service(&app, post(serde_json::json!({"team": "eng"}))).await;
        assert_eq!(r.status(), 400);
        let r = call_service(&app, post(serde_json::json!({"shared": true}))).await;
        assert_eq!(r.status(), 200);
        assert_eq!(fake.revoked.lock().unwrap()[0], (None, Owner::shared()));
    });
}

mod account;
mod login;
