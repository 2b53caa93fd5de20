//! Tokens without a browser: client credentials, token exchange, identity assertion.

use std::sync::Arc;

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use manifold_config::{
    ClientCredentialsSettings, IdentityAssertionSettings, Secret, SigningKey,
    TokenExchangeSettings, UpstreamAuth,
};

use super::*;
use crate::{CredentialError, Rejection};

/// A P-256 key made for these tests only.
const TEST_KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgJ0WjsNyivetPxXOz
DqoqDCHIgCBBJBeZV6a5N2sM5ZmhRANCAASkxW1M+jc4pep1+yjb8m1AOcMD3aXZ
X+IXZgsNK4ZLd16DLImzrBZlMobW4JqSJifgUaMN0xw/Pb1FPBWH++2H
-----END PRIVATE KEY-----
";

fn client_credentials(secret: Option<&str>, key: Option<&str>) -> UpstreamAuth {
    UpstreamAuth::ClientCredentials(ClientCredentialsSettings {
        client_id: "ci".to_owned(),
        client_secret: secret.map(Secret::new),
        signing_key: key.map(|pem| SigningKey {
            pem: Secret::new(pem),
            algorithm: "ES256".to_owned(),
            key_id: Some("k1".to_owned()),
        }),
        scopes: Some(vec!["read".to_owned()]),
        token_endpoint: None,
    })
}

#[tokio::test]
async fn client_credentials_are_obtained_once_cached_and_stepped_up() {
    let mock = Mock::start().await;
    let up = upstream(
        "ci",
        &format!("{}/mcp", mock.base),
        client_credentials(Some("s3cret"), None),
    );
    let s = setup(settings(), &[up], Arc::default());
    assert!(s.broker.ready("ci", &caller("a")).await);
    let first = s.broker.token("ci", &caller("a")).await.unwrap();
    assert_eq!(
        s.broker.token("ci", &caller("b")).await.unwrap(),
        first,
        "one shared token"
    );
    let requests = mock.grants("client_credentials");
    assert_eq!(requests.len(), 1);
    assert_eq!(s.seen.saw("refreshed:ci:true"), 1, "obtained, counted");
    let basic = format!("Basic {}", STANDARD.encode("ci:s3cret"));
    assert_eq!(requests[0].headers["authorization"], basic);
    assert_eq!(requests[0].form()["scope"], "read");
    assert_eq!(requests[0].form()["resource"], format!("{}/mcp", mock.base));

    let rejection = Rejection {
        status: 403,
        www_authenticate: Some(r#"Bearer error="insufficient_scope", scope="write""#.to_owned()),
    };
    let stepped = s
        .broker
        .rejected("ci", &caller("a"), &first, &rejection)
        .await
        .unwrap();
    assert_ne!(stepped, first);
    assert_eq!(
        mock.grants("client_credentials")[1].form()["scope"],
        "read write"
    );
    let again = s
        .broker
        .rejected("ci", &caller("a"), &stepped, &rejection)
        .await;
    assert!(
        matches!(again, Err(CredentialError::Failed { .. })),
        "{again:?}"
    );

    let unauthorized = Rejection {
        status: 401,
        www_authenticate: None,
    };
    let fresh = s
        .broker
        .rejected("ci", &caller("a"), &stepped, &unauthorized)
        .await
        .unwrap();
    let twice = s
        .broker
        .rejected("ci", &caller("a"), &fresh, &unauthorized)
        .await;
    assert!(
        matches!(twice, Err(CredentialError::Failed { .. })),
        "retry limit: {twice:?}"
    );
}

#[tokio::test]
async fn client_credentials_sign_a_private_key_jwt() {
    let mock = Mock::start().await;
    let up = upstream(
        "ci",
        &format!("{}/mcp", mock.base),
        client_credentials(None, Some(TEST_KEY)),
    );
    let s = setup(settings(), &[up], Arc::default());
    s.broker.token("ci", &caller("a")).await.unwrap();
    let form = mock.grants("client_credentials")[0].form();
    assert_eq!(
        form["client_assertion_type"],
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
    let parts: Vec<&str> = form["client_assertion"].split('.').collect();
    assert_eq!(parts.len(), 3);
    let header: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[0]).unwrap()).unwrap();
    let claims: serde_json::Value =
        serde_json::from_slice(&URL_SAFE_NO_PAD.decode(parts[1]).unwrap()).unwrap();
    assert_eq!(header["alg"], "ES256");
    assert_eq!(header["kid"], "k1");
    assert_eq!(claims["iss"], "ci");
    assert_eq!(claims["sub"], "ci");
    // The audience is the authorization server's issuer identifier, one string (RFC 7523 as
    // updated by its successor draft), not its token endpoint.
    assert_eq!(claims["aud"], mock.base);
    assert!(claims["jti"].as_str().is_some_and(|j| !j.is_empty()));
    let (iat, exp) = (
        claims["iat"].as_u64().unwrap(),
        claims["exp"].as_u64().unwrap(),
    );
    assert!(exp > iat && exp - iat <= 300, "iat {iat}, exp {exp}");
}

#[tokio::test]
async fn token_exchange_trades_the_callers_own_token() {
    let mock = Mock::start().await;
    let auth = UpstreamAuth::TokenExchange(TokenExchangeSettings {
        token_endpoint: format!("{}/token", mock.base),
        client_id: Some("manifold".to_owned()),
        client_secret: Some(Secret::new("m-secret")),
        audience: Some("wiki".to_owned()),
        resource: None,
        scopes: Some(vec!["read".to_owned()]),
        subject_token_type: "urn:ietf:params:oauth:token-type:jwt".to_owned(),
    });
    let url = format!("{}/mcp", mock.base);
    let s = setup(settings(), &[upstream("wiki", &url, auth)], Arc::default());
    let without = s.broker.token("wiki", &caller("a")).await;
    assert!(
        matches!(without, Err(CredentialError::Refused { .. })),
        "{without:?}"
    );
    assert!(!s.broker.ready("wiki", &caller("a")).await);

    let alice = Caller::new(
        Arc::from("eng"),
        Arc::from("jwt:iss#alice"),
        Some(Arc::from("alice-jwt")),
    );
    let token = s.broker.token("wiki", &alice).await.unwrap();
    assert_eq!(
        s.broker.token("wiki", &alice).await.unwrap(),
        token,
        "cached per caller"
    );
    let form = mock.grants("urn:ietf:params:oauth:grant-type:token-exchange")[0].form();
    assert_eq!(form["subject_token"], "alice-jwt");
    assert_eq!(form["audience"], "wiki");
    assert_eq!(form["resource"], url);
    let listed = s.broker.connections(Some(&alice.owner)).await.unwrap();
    assert_eq!(listed[0].principal, "eng/jwt:iss#alice");
    assert_ne!(token, "alice-jwt", "never passed through");
}

#[tokio::test]
async fn identity_assertion_gets_an_id_jag_then_redeems_it() {
    let idp = Mock::start().await;
    let upstream_mock = Mock::start().await;
    let auth = UpstreamAuth::IdentityAssertion(IdentityAssertionSettings {
        idp_token_endpoint: format!("{}/token", idp.base),
        idp_client_id: Some("idp-client".to_owned()),
        idp_client_secret: Some(Secret::new("idp-secret")),
        authorization_server: None,
        client_id: "crm-client".to_owned(),
        client_secret: Some(Secret::new("crm-secret")),
        scopes: Some(vec!["read".to_owned()]),
        subject_token_type: "urn:ietf:params:oauth:token-type:id_token".to_owned(),
    });
    let url = format!("{}/mcp", upstream_mock.base);
    let s = setup(settings(), &[upstream("crm", &url, auth)], Arc::default());
    let alice = Caller::new(
        Arc::from("eng"),
        Arc::from("jwt:iss#alice"),
        Some(Arc::from("alice-id-token")),
    );
    let token = s.broker.token("crm", &alice).await.unwrap();
    assert!(token.starts_with("tok-"), "{token}");

    let asked = idp.grants("urn:ietf:params:oauth:grant-type:token-exchange")[0].form();
    assert_eq!(
        asked["requested_token_type"],
        "urn:ietf:params:oauth:token-type:id-jag"
    );
    assert_eq!(asked["subject_token"], "alice-id-token");
    assert_eq!(asked["audience"], upstream_mock.base);
    assert_eq!(asked["resource"], url);
    let redeemed = &upstream_mock.grants("urn:ietf:params:oauth:grant-type:jwt-bearer")[0];
    assert!(redeemed.form()["assertion"].starts_with("jag-"));
    assert_eq!(
        redeemed.headers["authorization"],
        format!("Basic {}", STANDARD.encode("crm-client:crm-secret"))
    );
}

#[tokio::test]
async fn a_failure_names_no_secret() {
    let mock = Mock::start().await;
    mock.set(|k| k.html_tokens = true);
    let up = upstream(
        "ci",
        &format!("{}/mcp", mock.base),
        client_credentials(Some("s3cret"), None),
    );
    let s = setup(settings(), &[up], Arc::default());
    let exchange = Caller::new(
        Arc::from("eng"),
        Arc::from("jwt:i#a"),
        Some(Arc::from("caller-jwt")),
    );
    let error = s.broker.token("ci", &exchange).await.unwrap_err();
    for shown in [
        error.to_string(),
        format!("{error:?}"),
        format!("{exchange:?}"),
    ] {
        assert!(
            !shown.contains("s3cret") && !shown.contains("caller-jwt"),
            "{shown}"
        );
    }
    assert!(error.to_string().contains("an HTML page"), "{error}");
    assert_eq!(s.seen.saw("refreshed:ci:false"), 1);
}
