//! Authentication of HTTP hosts against real tokens: an Ed25519 issuer, and its JWKS served
//! over HTTP on 127.0.0.1; API keys by their hashes.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::TcpListener;
use std::sync::Arc;
use std::time::{Duration, Instant};

use manifold_config::{AuthConfig, JwtConfig, KeyHash, TeamConfig};
use manifold_policy::{AuthError, Authenticator, Principal};
use manifold_testkit::jwt::{self, hs256_token, jwks, now, unsigned_token, Issuer, JwksServer};
use serde_json::{json, Value};

const ISS: &str = "https://idp.example";
const AUD: &str = "https://mcp.example/mcp";
const ALPHA_KEY: &str = "alpha-key-0123456789abcdef";
const BETA_KEY: &str = "beta-key-0123456789abcdef";
const METADATA_URL: &str = "https://mcp.example/.well-known/oauth-protected-resource";

fn team(name: &str, api_keys: &[&str], claims: &[&str]) -> TeamConfig {
    TeamConfig {
        name: name.to_owned(),
        api_keys: api_keys.iter().map(|k| KeyHash::of(k)).collect(),
        claims: claims.iter().map(|c| (*c).to_owned()).collect(),
        ..TeamConfig::default()
    }
}

fn teams() -> Vec<TeamConfig> {
    vec![
        team("alpha", &[ALPHA_KEY], &["alpha"]),
        team("beta", &[BETA_KEY], &["beta-group", "beta"]),
    ]
}

fn jwt_config(jwks_url: Option<String>, jwks: Option<Value>, min_refresh: Duration) -> JwtConfig {
    JwtConfig {
        issuer: ISS.to_owned(),
        audience: AUD.to_owned(),
        jwks_url,
        jwks: jwks.map(|j| j.to_string()),
        team_claim: "groups".to_owned(),
        leeway: Duration::from_secs(60),
        jwks_min_refresh: min_refresh,
    }
}

fn auth_config(jwt: Option<JwtConfig>) -> AuthConfig {
    AuthConfig {
        resource: Some(AUD.to_owned()),
        authorization_servers: vec![ISS.to_owned()],
        jwt,
    }
}

/// An authenticator fetching its keys from `server`.
fn over_http(server: &JwksServer, min_refresh: Duration) -> Authenticator {
    Authenticator::new(
        &auth_config(Some(jwt_config(Some(server.url()), None, min_refresh))),
        &teams(),
    )
}

fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

async fn with_token(auth: &Authenticator, token: &str) -> Result<Principal, AuthError> {
    auth.authenticate(Some(&bearer(token)), None).await
}

/// Asserts a refusal whose reason mentions `why` and contains nothing of the credential.
#[track_caller]
fn assert_refused(result: Result<Principal, AuthError>, why: &str, credential: &str) {
    match result {
        Err(AuthError::Invalid(reason)) => {
            assert!(reason.contains(why), "{reason:?} should mention {why:?}");
            for part in credential.split('.').filter(|p| p.len() >= 8) {
                assert!(!reason.contains(part), "{reason:?} leaks the credential");
            }
        }
        other => panic!("expected a refusal for {why:?}, got {other:?}"),
    }
}

#[tokio::test]
async fn a_good_token_selects_its_team_and_names_its_subject() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));
    assert!(auth.required());

    let token = issuer.token(issuer.claims(AUD, "alice", json!({ "groups": "beta-group" })));
    // Nothing is cached before the first token: the keys must be fetched.
    assert!(auth.authenticate_now(Some(&bearer(&token)), None).is_none());
    let principal = with_token(&auth, &token).await.unwrap();
    assert_eq!(&*principal.team, "beta");
    assert_eq!(&*principal.id, "jwt:https://idp.example#alice");
    assert_eq!(server.hits(), 1);

    // Now the key is cached: the fast path decides, and nothing is fetched again.
    let other = issuer.token(issuer.claims(AUD, "bob", json!({ "groups": "alpha" })));
    let principal = auth
        .authenticate_now(Some(&bearer(&other)), None)
        .expect("decided without I/O")
        .unwrap();
    assert_eq!(&*principal.team, "alpha");
    assert_eq!(&*principal.id, "jwt:https://idp.example#bob");
    assert_eq!(server.hits(), 1);

    // Without sub, the principal is named after the team.
    let mut claims = issuer.claims(AUD, "-", json!({ "groups": "alpha" }));
    claims.as_object_mut().unwrap().remove("sub");
    let principal = with_token(&auth, &issuer.token(claims)).await.unwrap();
    assert_eq!(&*principal.id, "jwt:https://idp.example#team:alpha");
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn expiry_and_not_before_are_checked_with_leeway() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));
    let claims = |extra: Value| issuer.claims(AUD, "alice", extra);

    let expired = issuer.token(claims(json!({ "groups": "alpha", "exp": now() - 3600 })));
    assert_refused(with_token(&auth, &expired).await, "expired", &expired);
    let within_leeway = issuer.token(claims(json!({ "groups": "alpha", "exp": now() - 20 })));
    assert!(with_token(&auth, &within_leeway).await.is_ok());

    let early = issuer.token(claims(json!({ "groups": "alpha", "nbf": now() + 3600 })));
    assert_refused(with_token(&auth, &early).await, "not valid yet", &early);
    let nearly = issuer.token(claims(json!({ "groups": "alpha", "nbf": now() + 20 })));
    assert!(with_token(&auth, &nearly).await.is_ok());

    let mut no_exp = claims(json!({ "groups": "alpha" }));
    no_exp.as_object_mut().unwrap().remove("exp");
    let no_exp = issuer.token(no_exp);
    assert_refused(with_token(&auth, &no_exp).await, "no exp claim", &no_exp);
}

#[tokio::test]
async fn audience_and_issuer_must_match() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));

    let wrong_aud = issuer.token(issuer.claims(
        "https://other.example/mcp",
        "alice",
        json!({ "groups": "alpha" }),
    ));
    assert_refused(with_token(&auth, &wrong_aud).await, "audience", &wrong_aud);

    let aud_array = issuer.token(issuer.claims(
        AUD,
        "alice",
        json!({ "groups": "alpha", "aud": ["https://other.example/mcp", AUD] }),
    ));
    assert_eq!(&*with_token(&auth, &aud_array).await.unwrap().team, "alpha");

    let mut no_aud = issuer.claims(AUD, "alice", json!({ "groups": "alpha" }));
    no_aud.as_object_mut().unwrap().remove("aud");
    let no_aud = issuer.token(no_aud);
    assert_refused(with_token(&auth, &no_aud).await, "no aud claim", &no_aud);

    // Signed by the right key, but claiming another issuer.
    let wrong_iss = issuer.token(issuer.claims(
        AUD,
        "alice",
        json!({ "groups": "alpha", "iss": "https://evil.example" }),
    ));
    assert_refused(with_token(&auth, &wrong_iss).await, "issuer", &wrong_iss);
}

#[tokio::test]
async fn a_rotated_key_is_fetched_once_the_refresh_interval_has_passed() {
    let min_refresh = Duration::from_secs(2);
    let old = Issuer::new(ISS, "old");
    let new = Issuer::new(ISS, "new");
    let server = JwksServer::start(old.jwks());
    let auth = over_http(&server, min_refresh);

    let old_token = old.token(old.claims(AUD, "alice", json!({ "groups": "alpha" })));
    assert!(with_token(&auth, &old_token).await.is_ok());
    assert_eq!(server.hits(), 1);

    // A key the JWKS does not have yet: refused, and no fetch within the refresh interval.
    let new_token = new.token(new.claims(AUD, "alice", json!({ "groups": "alpha" })));
    assert_refused(
        with_token(&auth, &new_token).await,
        "kid \"new\"",
        &new_token,
    );
    assert_eq!(server.hits(), 1);

    // The issuer publishes the new key; still within the interval, so still refused, and the
    // fast path says so without asking for I/O.
    server.set(jwks(&[old.jwk(), new.jwk()]));
    let now_result = auth.authenticate_now(Some(&bearer(&new_token)), None);
    assert!(matches!(now_result, Some(Err(AuthError::Invalid(_)))));
    assert_eq!(server.hits(), 1);

    tokio::time::sleep(min_refresh + Duration::from_millis(100)).await;
    assert!(auth
        .authenticate_now(Some(&bearer(&new_token)), None)
        .is_none());
    let principal = with_token(&auth, &new_token).await.unwrap();
    assert_eq!(&*principal.team, "alpha");
    assert_eq!(server.hits(), 2);

    // Both keys are cached now.
    assert!(auth
        .authenticate_now(Some(&bearer(&old_token)), None)
        .unwrap()
        .is_ok());
    assert!(auth
        .authenticate_now(Some(&bearer(&new_token)), None)
        .unwrap()
        .is_ok());
    assert_eq!(server.hits(), 2);

    // A kid that no JWKS has: one more fetch after the interval, then refused.
    let stranger = Issuer::new(ISS, "stranger");
    let stranger_token = stranger.token(stranger.claims(AUD, "eve", json!({ "groups": "alpha" })));
    tokio::time::sleep(min_refresh + Duration::from_millis(100)).await;
    assert_refused(
        with_token(&auth, &stranger_token).await,
        "kid \"stranger\"",
        &stranger_token,
    );
    assert_eq!(server.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_share_one_fetch() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = Arc::new(over_http(&server, Duration::from_secs(30)));
    let token = issuer.token(issuer.claims(AUD, "alice", json!({ "groups": "alpha" })));

    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..16 {
        let auth = auth.clone();
        let token = token.clone();
        tasks.spawn(async move { with_token(&auth, &token).await });
    }
    while let Some(result) = tasks.join_next().await {
        assert_eq!(&*result.unwrap().unwrap().team, "alpha");
    }
    assert_eq!(server.hits(), 1);
}

#[tokio::test]
async fn a_signature_by_another_key_under_the_same_kid_is_refused() {
    let issuer = Issuer::new(ISS, "k1");
    let impostor = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));

    let forged = impostor.token(impostor.claims(AUD, "mallory", json!({ "groups": "alpha" })));
    assert_refused(with_token(&auth, &forged).await, "signature", &forged);
}

#[tokio::test]
async fn the_team_claim_maps_through_the_teams_claims() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));
    let token =
        |groups: Value| issuer.token(issuer.claims(AUD, "alice", json!({ "groups": groups })));

    // An array: the first value that names a team wins.
    let array = token(json!(["staff", "beta", "alpha"]));
    assert_eq!(&*with_token(&auth, &array).await.unwrap().team, "beta");
    let array = token(json!([7, "alpha"]));
    assert_eq!(&*with_token(&auth, &array).await.unwrap().team, "alpha");

    let none = token(json!(["staff", "admins"]));
    assert_refused(with_token(&auth, &none).await, "names no team", &none);
    let unknown = token(json!("gamma"));
    assert_refused(with_token(&auth, &unknown).await, "names no team", &unknown);
    // A team's name is not a claim value unless the team lists it.
    let beta_name_only = Authenticator::new(
        &auth_config(Some(jwt_config(
            Some(server.url()),
            None,
            Duration::from_secs(30),
        ))),
        &[team("beta", &[], &["beta-group"])],
    );
    let by_name = token(json!("beta"));
    assert_refused(
        with_token(&beta_name_only, &by_name).await,
        "names no team",
        &by_name,
    );

    let wrong_type = token(json!({ "team": "alpha" }));
    assert_refused(
        with_token(&auth, &wrong_type).await,
        "not a string or an array",
        &wrong_type,
    );
    let mut missing = issuer.claims(AUD, "alice", json!({}));
    missing.as_object_mut().unwrap().remove("groups");
    let missing = issuer.token(missing);
    assert_refused(
        with_token(&auth, &missing).await,
        "has no \"groups\" claim",
        &missing,
    );
}

#[tokio::test]
async fn unsigned_and_hmac_tokens_are_refused() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));
    let claims = issuer.claims(AUD, "mallory", json!({ "groups": "alpha" }));

    let unsigned = unsigned_token(Some("k1"), &claims);
    assert_refused(with_token(&auth, &unsigned).await, "alg none", &unsigned);

    // HS256 keyed with the public key's own text: the classic algorithm confusion.
    let public_x = issuer.jwk()["x"].as_str().unwrap().to_owned();
    let hmac = hs256_token(public_x.as_bytes(), Some("k1"), &claims);
    assert_refused(with_token(&auth, &hmac).await, "HMAC", &hmac);
    let hmac = hs256_token(b"a shared secret", None, &claims);
    assert_refused(with_token(&auth, &hmac).await, "HMAC", &hmac);

    // Refused before any key is needed: nothing was fetched.
    assert_eq!(server.hits(), 0);
    assert!(matches!(
        auth.authenticate_now(Some(&bearer(&unsigned)), None),
        Some(Err(AuthError::Invalid(_)))
    ));
}

#[tokio::test]
async fn an_inline_jwks_needs_no_fetch_and_has_no_hmac_keys() {
    let issuer = Issuer::new(ISS, "k1");
    let secret = json!({ "kty": "oct", "kid": "shared", "k": "c2VjcmV0LXNlY3JldC1zZWNyZXQ" });
    let auth = Authenticator::new(
        &auth_config(Some(jwt_config(
            None,
            Some(jwks(&[issuer.jwk(), secret])),
            Duration::from_secs(30),
        ))),
        &teams(),
    );
    let token = issuer.token(issuer.claims(AUD, "alice", json!({ "groups": "alpha" })));
    let principal = auth
        .authenticate_now(Some(&bearer(&token)), None)
        .expect("inline keys need no fetch")
        .unwrap();
    assert_eq!(&*principal.team, "alpha");

    // No jwks_url: an unknown kid is refused at once.
    let stranger = Issuer::new(ISS, "k2");
    let token = stranger.token(stranger.claims(AUD, "eve", json!({ "groups": "alpha" })));
    assert!(matches!(
        auth.authenticate_now(Some(&bearer(&token)), None),
        Some(Err(AuthError::Invalid(_)))
    ));

    // A token with no kid is verified with the only key that fits its algorithm.
    let no_kid = issuer.token_with_kid(
        None,
        issuer.claims(AUD, "alice", json!({ "groups": "alpha" })),
    );
    assert!(with_token(&auth, &no_kid).await.is_ok());
}

#[tokio::test]
async fn a_failing_jwks_endpoint_refuses_within_the_fetch_timeout() {
    // Accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/jwks.json", silent.local_addr().unwrap());
    let auth = Authenticator::new(
        &auth_config(Some(jwt_config(Some(url), None, Duration::from_secs(30)))),
        &teams(),
    )
    .with_fetch_timeout(Duration::from_millis(300));
    let issuer = Issuer::new(ISS, "k1");
    let token = issuer.token(issuer.claims(AUD, "alice", json!({ "groups": "alpha" })));
    let started = Instant::now();
    assert_refused(with_token(&auth, &token).await, "kid \"k1\"", &token);
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "took {:?}",
        started.elapsed()
    );
    drop(silent);

    // An endpoint that answers 500: refused; once healed, the key is found after the interval.
    let server = JwksServer::start(issuer.jwks());
    server.set_status(500);
    let min_refresh = Duration::from_millis(500);
    let auth = over_http(&server, min_refresh);
    assert_refused(with_token(&auth, &token).await, "kid \"k1\"", &token);
    assert_eq!(server.hits(), 1);
    server.set_status(200);
    tokio::time::sleep(min_refresh + Duration::from_millis(100)).await;
    assert_eq!(&*with_token(&auth, &token).await.unwrap().team, "alpha");
    assert_eq!(server.hits(), 2);
}

/// A named key is a person's: its principal is `key:NAME`, so that tokens Manifold keeps for
/// upstreams are that person's.
#[tokio::test]
async fn a_named_key_is_its_holders_principal() {
    let alice = "alice-key-0123456789abcdef";
    let mut alpha = team("alpha", &[ALPHA_KEY, alice], &["alpha"]);
    alpha.key_names = vec![(KeyHash::of(alice), "alice".to_owned())];
    let auth = Authenticator::new(&AuthConfig::default(), &[alpha]);
    let principal = auth.authenticate(Some(&bearer(alice)), None).await.unwrap();
    assert_eq!((&*principal.team, &*principal.id), ("alpha", "key:alice"));
    let unnamed = auth.authenticate(None, Some(ALPHA_KEY)).await.unwrap();
    let label = KeyHash::of(ALPHA_KEY).label();
    assert_eq!(&*unnamed.id, format!("key:{label}"));
}

#[tokio::test]
async fn api_keys_select_their_team_by_either_header() {
    let auth = Authenticator::new(&AuthConfig::default(), &teams());
    assert!(auth.required());
    let label = KeyHash::of(ALPHA_KEY).label();

    let principal = auth
        .authenticate(Some(&bearer(ALPHA_KEY)), None)
        .await
        .unwrap();
    assert_eq!(&*principal.team, "alpha");
    assert_eq!(&*principal.id, format!("key:{label}"));
    let principal = auth.authenticate(None, Some(BETA_KEY)).await.unwrap();
    assert_eq!(&*principal.team, "beta");
    assert_eq!(
        &*principal.id,
        format!("key:{}", KeyHash::of(BETA_KEY).label())
    );
    // The scheme is matched without regard to case; the fast path gives the same answer.
    let principal = auth
        .authenticate_now(Some(&format!("bearer {BETA_KEY}")), None)
        .unwrap()
        .unwrap();
    assert_eq!(&*principal.team, "beta");
    // A bearer credential wins over X-API-Key; a non-bearer Authorization yields to it.
    let principal = auth
        .authenticate(Some(&bearer(ALPHA_KEY)), Some(BETA_KEY))
        .await
        .unwrap();
    assert_eq!(&*principal.team, "alpha");
    let principal = auth
        .authenticate(Some("Basic dXNlcjpwYXNz"), Some(BETA_KEY))
        .await
        .unwrap();
    assert_eq!(&*principal.team, "beta");

    let wrong = "not-a-key-of-any-team-0123456789";
    assert_refused(
        auth.authenticate(Some(&bearer(wrong)), None).await,
        "API key is not known",
        wrong,
    );
    assert_refused(
        auth.authenticate(None, Some(wrong)).await,
        "API key is not known",
        wrong,
    );
    assert_refused(
        auth.authenticate(Some("Basic dXNlcjpwYXNz"), None).await,
        "not a Bearer",
        "dXNlcjpwYXNz",
    );
    assert_refused(auth.authenticate(Some("Bearer "), None).await, "empty", "");

    assert!(matches!(
        auth.authenticate(None, None).await,
        Err(AuthError::Missing)
    ));
    assert!(matches!(
        auth.authenticate(Some("  "), Some("")).await,
        Err(AuthError::Missing)
    ));
    assert!(matches!(
        auth.authenticate_now(None, None),
        Some(Err(AuthError::Missing))
    ));
}

#[tokio::test]
async fn api_keys_still_work_when_jwts_are_configured() {
    let issuer = Issuer::new(ISS, "k1");
    let server = JwksServer::start(issuer.jwks());
    let auth = over_http(&server, Duration::from_secs(30));
    let principal = auth
        .authenticate(Some(&bearer(ALPHA_KEY)), None)
        .await
        .unwrap();
    assert_eq!(&*principal.team, "alpha");
    assert_eq!(server.hits(), 0);

    // Without JWTs configured, a JWT-shaped bearer is just an unknown API key.
    let keys_only = Authenticator::new(&AuthConfig::default(), &teams());
    let token = issuer.token(issuer.claims(AUD, "alice", json!({ "groups": "alpha" })));
    assert_refused(
        keys_only.authenticate(Some(&bearer(&token)), None).await,
        "API key is not known",
        &token,
    );
}

#[test]
fn authentication_is_required_only_with_keys_or_jwts() {
    let open = Authenticator::new(&AuthConfig::default(), &[team("alpha", &[], &["alpha"])]);
    assert!(!open.required());
    let keys = Authenticator::new(&AuthConfig::default(), &teams());
    assert!(keys.required());
    let issuer = Issuer::new(ISS, "k1");
    let jwts = Authenticator::new(
        &auth_config(Some(jwt_config(
            None,
            Some(issuer.jwks()),
            Duration::from_secs(30),
        ))),
        &[],
    );
    assert!(jwts.required());
}

#[test]
fn challenges_name_the_metadata_and_why_without_secrets() {
    let auth = Authenticator::new(&AuthConfig::default(), &teams());
    assert_eq!(
        auth.challenge(METADATA_URL, &AuthError::Missing),
        format!("Bearer resource_metadata=\"{METADATA_URL}\"")
    );

    let wrong = "not-a-key-of-any-team-0123456789";
    let error = auth
        .authenticate_now(None, Some(wrong))
        .unwrap()
        .unwrap_err();
    let challenge = auth.challenge(METADATA_URL, &error);
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"{METADATA_URL}\", error=\"invalid_token\", \
             error_description=\""
        )),
        "{challenge}"
    );
    assert!(challenge.contains("API key is not known"), "{challenge}");
    assert!(!challenge.contains(wrong), "{challenge}");
    assert!(challenge.ends_with('"'), "{challenge}");

    // Quotes and line breaks in a reason cannot break out of the quoted string.
    let challenge = auth.challenge(
        METADATA_URL,
        &AuthError::Invalid("a \"quoted\"\r\nreason".into()),
    );
    assert!(
        challenge.ends_with("error_description=\"a 'quoted'??reason\""),
        "{challenge}"
    );
}

#[test]
fn metadata_is_rfc9728_json() {
    let auth = Authenticator::new(&auth_config(None), &teams());
    let doc: Value = serde_json::from_str(&auth.metadata(AUD)).unwrap();
    assert_eq!(
        doc,
        json!({
            "resource": AUD,
            "authorization_servers": [ISS],
            "bearer_methods_supported": ["header"],
            "resource_name": "Manifold",
        })
    );
}

#[test]
fn the_support_issuer_makes_fresh_ed25519_keys() {
    // The test support itself (its JWKS server is exercised by every test above).
    let issuer = Issuer::new(ISS, "k1");
    let jwk = issuer.jwk();
    assert_eq!(jwk["kty"], "OKP");
    assert_eq!(jwk["crv"], "Ed25519");
    assert_eq!(jwk["kid"], "k1");
    assert_eq!(jwk["alg"], "EdDSA");
    assert_ne!(
        Issuer::new(ISS, "k1").jwk()["x"],
        jwk["x"],
        "keys are fresh"
    );
    assert_eq!(
        jwt::base64url(b"any carnal pleas"),
        "YW55IGNhcm5hbCBwbGVhcw"
    );
    assert_eq!(jwt::base64url(b"\xfb\xff"), "-_8");
}
