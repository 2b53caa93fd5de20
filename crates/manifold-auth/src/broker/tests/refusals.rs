//! Bad input and refusals: states, issuers, lying metadata, HTML, slow or absent servers, a
//! refused refresh, repeated 401s, step-up loops, a moved authorization server.

use std::sync::Arc;
use std::time::Duration;

use manifold_config::Identity;

use super::*;
use crate::{CredentialError, Rejection};

fn is_refused<T: std::fmt::Debug>(result: &Result<T, CredentialError>) -> bool {
    matches!(result, Err(CredentialError::Refused { .. }))
}

fn is_failed<T: std::fmt::Debug>(result: &Result<T, CredentialError>, text: &str) -> bool {
    matches!(result, Err(CredentialError::Failed { reason, .. }) if reason.contains(text))
}

async fn forge(mock: &Mock, config: CredentialsSettings) -> Setup {
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    setup(config, &[up], Arc::default())
}

#[tokio::test]
async fn a_wrong_reused_or_expired_state_is_refused() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    assert!(is_refused(&s.broker.callback("code=x&state=made-up").await));
    assert!(is_refused(&s.broker.callback("code=x").await));

    let link = s.broker.consent("forge", &alice, None).await.unwrap();
    let url = s.broker.authorize(&link.id, &alice.owner).await.unwrap();
    let back = format!("code=c&state={}&iss={}", query_of(&url)["state"], mock.base);
    assert!(s.broker.callback(&back).await.is_ok());
    assert!(
        is_refused(&s.broker.callback(&back).await),
        "a state is used once"
    );
    assert_eq!(mock.grants("authorization_code").len(), 1);

    let mut short = settings();
    short.consent_timeout = Duration::from_millis(200);
    let s = forge(&mock, short).await;
    let link = s.broker.consent("forge", &alice, None).await.unwrap();
    let url = s.broker.authorize(&link.id, &alice.owner).await.unwrap();
    tokio::time::sleep(Duration::from_millis(400)).await;
    let back = format!("code=c&state={}&iss={}", query_of(&url)["state"], mock.base);
    assert!(
        is_refused(&s.broker.callback(&back).await),
        "an expired state"
    );
    assert!(
        is_refused(&s.broker.pending(&link.id).await),
        "an expired link"
    );
}

#[tokio::test]
async fn a_callback_for_an_upstream_removed_meanwhile_keeps_nothing() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    let link = s.broker.consent("forge", &alice, None).await.unwrap();
    let url = s.broker.authorize(&link.id, &alice.owner).await.unwrap();
    s.broker.set_upstreams(&[]).await;
    let back = format!("code=c&state={}&iss={}", query_of(&url)["state"], mock.base);
    assert!(is_refused(&s.broker.callback(&back).await));
    assert!(s.store.list().await.unwrap().is_empty());
    assert!(mock.grants("authorization_code").is_empty());
}

#[tokio::test]
async fn a_consent_is_authorized_only_for_its_owner() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let link = s
        .broker
        .consent("forge", &caller("alice"), None)
        .await
        .unwrap();
    let other = s.broker.authorize(&link.id, &caller("mallory").owner).await;
    assert!(is_refused(&other), "{other:?}");
    assert!(is_refused(&s.broker.pending("no-such-consent").await));
}

#[tokio::test]
async fn an_iss_that_is_not_the_issuer_exactly_is_refused() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    let slash = format!("{}/", mock.base);
    assert!(is_refused(
        &consent_through(&s.broker, "forge", &alice, Some(&slash)).await
    ));
    assert!(is_refused(
        &consent_through(&s.broker, "forge", &alice, Some("https://evil.example.com")).await
    ));
    assert!(
        is_refused(&consent_through(&s.broker, "forge", &alice, None).await),
        "advertised, missing"
    );
    assert!(
        mock.grants("authorization_code").is_empty(),
        "no code redeemed"
    );

    mock.set(|k| k.iss_supported = false);
    let s = forge(&mock, settings()).await;
    assert!(
        consent_through(&s.broker, "forge", &alice, None)
            .await
            .is_ok(),
        "not advertised, absent"
    );
    let wrong = consent_through(&s.broker, "forge", &alice, Some("https://evil.example.com")).await;
    assert!(is_refused(&wrong), "not advertised, present and wrong");
}

#[tokio::test]
async fn metadata_that_lies_is_refused() {
    let mock = Mock::start().await;
    mock.set(|k| k.resource = Some("https://elsewhere.example/mcp".to_owned()));
    let s = forge(&mock, settings()).await;
    let result = consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base)).await;
    assert!(is_failed(&result, "names another resource"), "{result:?}");

    let mock = Mock::start().await;
    mock.set(|k| k.metadata_issuer = Some("https://other.example".to_owned()));
    let s = forge(&mock, settings()).await;
    let result = consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base)).await;
    assert!(is_failed(&result, "names issuer"), "{result:?}");

    let mock = Mock::start().await;
    mock.set(|k| k.pkce = false);
    let s = forge(&mock, settings()).await;
    let result = consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base)).await;
    assert!(is_failed(&result, "S256"), "{result:?}");
    assert!(mock.seen("/register").is_empty());
}

#[tokio::test]
async fn html_from_the_token_endpoint_is_a_clear_error() {
    let mock = Mock::start().await;
    mock.set(|k| k.html_tokens = true);
    let s = forge(&mock, settings()).await;
    let result = consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base)).await;
    assert!(is_failed(&result, "an HTML page"), "{result:?}");
    assert!(s.broker.token("forge", &caller("a")).await.is_err());
}

#[tokio::test]
async fn a_slow_or_absent_authorization_server_fails_within_the_timeout() {
    let mock = Mock::start().await;
    mock.set(|k| k.delay = Some(Duration::from_secs(30)));
    let mut quick = settings();
    quick.timeout = Duration::from_millis(300);
    let s = forge(&mock, quick.clone()).await;
    let link = s.broker.consent("forge", &caller("a"), None).await.unwrap();
    let bounded = tokio::time::timeout(
        Duration::from_secs(20),
        s.broker.authorize(&link.id, &caller("a").owner),
    )
    .await;
    let result = bounded.expect("the broker gave up on its own");
    assert!(is_failed(&result, "did not answer in time"), "{result:?}");

    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", closed.local_addr().unwrap());
    drop(closed);
    let s = setup(
        quick,
        &[upstream("forge", &url, oauth(Identity::PerUser))],
        Arc::default(),
    );
    let link = s.broker.consent("forge", &caller("a"), None).await.unwrap();
    let result = s.broker.authorize(&link.id, &caller("a").owner).await;
    assert!(is_failed(&result, "could not be reached"), "{result:?}");
}

#[tokio::test]
async fn a_refused_refresh_drops_the_grant_and_asks_for_consent() {
    let mock = Mock::start().await;
    mock.set(|k| {
        k.refuse_refresh = true;
        k.expires_in = 5;
    });
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let result = s.broker.token("forge", &alice).await;
    assert!(
        matches!(result, Err(CredentialError::ConsentNeeded { .. })),
        "{result:?}"
    );
    assert!(s.store.get("forge", &alice.owner).await.unwrap().is_none());
    assert_eq!(s.seen.saw("refreshed:forge:false"), 1);
}

fn unauthorized() -> Rejection {
    Rejection {
        status: 401,
        www_authenticate: Some(r#"Bearer error="invalid_token""#.to_owned()),
    }
}

#[tokio::test]
async fn a_401_is_answered_with_one_fresh_token_and_no_more() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", &alice).await.unwrap();
    let fresh = s
        .broker
        .rejected("forge", &alice, &sent, &unauthorized())
        .await
        .unwrap();
    assert_ne!(fresh, sent);
    let again = s
        .broker
        .rejected("forge", &alice, &fresh, &unauthorized())
        .await;
    assert!(
        matches!(again, Err(CredentialError::ConsentNeeded { .. })),
        "{again:?}"
    );
    assert_eq!(
        mock.grants("refresh_token").len(),
        1,
        "one refresh, not a loop"
    );
}

#[tokio::test]
async fn a_403_without_a_scope_to_ask_for_gets_no_new_token() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", &alice).await.unwrap();
    let forbidden = Rejection {
        status: 403,
        www_authenticate: None,
    };
    let result = s.broker.rejected("forge", &alice, &sent, &forbidden).await;
    assert!(is_failed(&result, "status 403"), "{result:?}");
    assert!(mock.grants("refresh_token").is_empty());
    assert_eq!(
        s.broker.token("forge", &alice).await.unwrap(),
        sent,
        "the grant is kept"
    );
}

fn insufficient(scope: &str) -> Rejection {
    Rejection {
        status: 403,
        www_authenticate: Some(format!(
            r#"Bearer error="insufficient_scope", scope="{scope}""#
        )),
    }
}

#[tokio::test]
async fn a_step_up_asks_for_the_union_of_scopes_and_is_not_repeated() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", &alice).await.unwrap();
    let result = s
        .broker
        .rejected("forge", &alice, &sent, &insufficient("write"))
        .await;
    let Err(CredentialError::ConsentNeeded { scopes, .. }) = result else {
        panic!("{result:?}");
    };
    assert_eq!(scopes.unwrap(), ["read", "write"]);

    let link = s.broker.consent("forge", &alice, None).await.unwrap();
    let url = s.broker.authorize(&link.id, &alice.owner).await.unwrap();
    assert_eq!(query_of(&url)["scope"], "read write");
    let back = format!("code=c&state={}&iss={}", query_of(&url)["state"], mock.base);
    s.broker.callback(&back).await.unwrap();

    let sent = s.broker.token("forge", &alice).await.unwrap();
    let again = s
        .broker
        .rejected("forge", &alice, &sent, &insufficient("write"))
        .await;
    assert!(is_failed(&again, "granted already"), "{again:?}");
}

#[tokio::test]
async fn step_ups_stop_at_the_limit() {
    let mock = Mock::start().await;
    let s = forge(&mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", &alice).await.unwrap();
    for round in 0..3 {
        let scope = format!("s{round}");
        let result = s
            .broker
            .rejected("forge", &alice, &sent, &insufficient(&scope))
            .await;
        assert!(
            matches!(result, Err(CredentialError::ConsentNeeded { .. })),
            "{result:?}"
        );
    }
    let result = s
        .broker
        .rejected("forge", &alice, &sent, &insufficient("s9"))
        .await;
    assert!(is_failed(&result, "not repeated"), "{result:?}");
}

#[tokio::test]
async fn a_moved_authorization_server_drops_the_grant_and_the_client() {
    let upstream_mock = Mock::start().await;
    let other = Mock::start().await;
    let s = forge(&upstream_mock, settings()).await;
    let alice = caller("alice");
    consent_through(&s.broker, "forge", &alice, Some(&upstream_mock.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", &alice).await.unwrap();

    upstream_mock.set(|k| k.names_issuer = Some(other.base.clone()));
    let challenge = format!(
        r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
        upstream_mock.base
    );
    let rejection = Rejection {
        status: 401,
        www_authenticate: Some(challenge),
    };
    let result = s.broker.rejected("forge", &alice, &sent, &rejection).await;
    assert!(
        matches!(result, Err(CredentialError::ConsentNeeded { .. })),
        "{result:?}"
    );
    assert!(s.store.get("forge", &alice.owner).await.unwrap().is_none());

    consent_through(&s.broker, "forge", &alice, Some(&other.base))
        .await
        .unwrap();
    assert_eq!(
        other.seen("/register").len(),
        1,
        "a new client at the new server"
    );
    assert_eq!(
        other.grants("authorization_code")[0].form()["client_id"],
        "dyn-1"
    );
    assert_eq!(upstream_mock.grants("authorization_code").len(), 1);
}

/// Alice's grant at `first`, then the upstream names `second` and refuses the token: the
/// refusal as the upstream transport reports it.
async fn moved_under(s: &Setup, first: &Mock, second: &Mock, alice: &Caller) -> Rejection {
    consent_through(&s.broker, "forge", alice, Some(&first.base))
        .await
        .unwrap();
    let sent = s.broker.token("forge", alice).await.unwrap();
    first.set(|k| k.names_issuer = Some(second.base.clone()));
    let rejection = Rejection {
        status: 401,
        www_authenticate: Some(format!(
            r#"Bearer resource_metadata="{}/.well-known/oauth-protected-resource/mcp""#,
            first.base
        )),
    };
    let result = s.broker.rejected("forge", alice, &sent, &rejection).await;
    assert!(
        matches!(result, Err(CredentialError::ConsentNeeded { .. })),
        "{result:?}"
    );
    rejection
}

#[tokio::test]
async fn a_moved_authorization_server_is_discovered_and_registered_with_at_once() {
    let (first, second) = (Mock::start().await, Mock::start().await);
    second.set(|k| k.issued = 100);
    let s = forge(&first, settings()).await;
    let alice = caller("alice");
    moved_under(&s, &first, &second, &alice).await;
    assert_eq!(
        second.seen("/register").len(),
        1,
        "registered at the new server as soon as the move is seen"
    );

    let url = {
        let link = s.broker.consent("forge", &alice, None).await.unwrap();
        s.broker.authorize(&link.id, &alice.owner).await.unwrap()
    };
    assert!(
        url.starts_with(&format!("{}/authorize", second.base)),
        "{url}"
    );
    assert_eq!(query_of(&url)["client_id"], "dyn-101");
    assert_eq!(second.seen("/register").len(), 1, "and only once");
    assert_eq!(first.seen("/register").len(), 1);
}

#[tokio::test]
async fn another_replica_follows_a_moved_authorization_server() {
    let (first, second) = (Mock::start().await, Mock::start().await);
    second.set(|k| k.issued = 100);
    let store = TestStore::shared();
    let up = upstream(
        "forge",
        &format!("{}/mcp", first.base),
        oauth(Identity::PerUser),
    );
    let one = setup(settings(), std::slice::from_ref(&up), Arc::clone(&store));
    let two = setup(settings(), &[up], Arc::clone(&store));
    // The second replica learned the first server through a consent of its own.
    let bob = caller("bob");
    consent_through(&two.broker, "forge", &bob, Some(&first.base))
        .await
        .unwrap();
    let alice = caller("alice");
    moved_under(&one, &first, &second, &alice).await;
    consent_through(&one.broker, "forge", &alice, Some(&second.base))
        .await
        .unwrap();

    // A grant of the new server, near expiry, is refreshed there, not dropped.
    let mut grant = store.get("forge", &alice.owner).await.unwrap().unwrap();
    grant.expires_at_ms = Some(crate::oauth::now_ms() + 10_000);
    store.put("forge", &alice.owner, &grant).await.unwrap();
    let refreshed = two.broker.token("forge", &alice).await;
    assert!(refreshed.is_ok(), "{refreshed:?}");
    assert_eq!(
        second.grants("refresh_token")[0].form()["client_id"],
        "dyn-101"
    );

    // And a consent it starts goes to the new server.
    let link = two.broker.consent("forge", &bob, None).await.unwrap();
    let url = two.broker.authorize(&link.id, &bob.owner).await.unwrap();
    assert!(
        url.starts_with(&format!("{}/authorize", second.base)),
        "{url}"
    );
    assert_eq!(query_of(&url)["client_id"], "dyn-101");
    assert!(first
        .seen("/token")
        .iter()
        .all(|r| !r.body.contains("dyn-101")));
}
