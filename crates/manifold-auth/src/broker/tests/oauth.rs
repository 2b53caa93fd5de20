//! The authorization code flow, discovery and refresh, as a caller and an operator see them.

use std::sync::Arc;

use manifold_config::{Identity, Secret, UpstreamAuth};

use super::*;
use crate::oauth::now_ms;
use crate::oauth::pkce::challenge_of;
use crate::CredentialError;

#[tokio::test]
async fn a_caller_without_a_grant_is_sent_to_consent_and_the_callback_keeps_the_grant() {
    let mock = Mock::start().await;
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let s = setup(settings(), &[up], Arc::default());
    let alice = caller("alice");

    let first = s.broker.token("forge", &alice).await;
    assert!(
        matches!(first, Err(CredentialError::ConsentNeeded { .. })),
        "{first:?}"
    );
    assert!(!s.broker.ready("forge", &alice).await);

    let link = s
        .broker
        .consent("forge", &alice, Some("b".to_owned()))
        .await
        .unwrap();
    assert_eq!(
        link.url,
        format!("http://127.0.0.1:9/oauth/connect/{}", link.id)
    );
    let pending = s.broker.pending(&link.id).await.unwrap();
    assert_eq!(pending.owner, alice.owner);
    assert_eq!(pending.principal, "eng/key:alice");
    assert!(!pending.shared);

    let url = s.broker.authorize(&link.id, &alice.owner).await.unwrap();
    assert!(
        url.starts_with(&format!("{}/authorize?", mock.base)),
        "{url}"
    );
    let q = query_of(&url);
    assert_eq!(q["response_type"], "code");
    assert_eq!(q["code_challenge_method"], "S256");
    assert_eq!(q["client_id"], "dyn-1", "registered dynamically");
    assert_eq!(q["redirect_uri"], "http://127.0.0.1:9/oauth/callback");
    assert_eq!(q["resource"], format!("{}/mcp", mock.base));
    assert_eq!(q["scope"], "read", "the challenge's scope");

    let back = format!("code=c1&state={}&iss={}", q["state"], mock.base);
    let done = s.broker.callback(&back).await.unwrap();
    assert_eq!(done.id, link.id);
    assert_eq!(done.binding.as_deref(), Some("b"));
    assert_eq!(done.owner, alice.owner);

    let redeemed = &mock.grants("authorization_code")[0].form();
    assert_eq!(
        challenge_of(&redeemed["code_verifier"]),
        q["code_challenge"]
    );
    assert_eq!(redeemed["resource"], format!("{}/mcp", mock.base));
    assert_eq!(redeemed["code"], "c1");

    let token = s.broker.token("forge", &alice).await.unwrap();
    assert!(token.starts_with("tok-"), "{token}");
    assert!(s.broker.ready("forge", &alice).await);
    assert!(
        s.broker.token("forge", &caller("bob")).await.is_err(),
        "per user"
    );
    assert_eq!(s.seen.saw("asked:forge"), 1);
    assert_eq!(s.seen.saw("completed:forge"), 1);
    let registration = &mock.seen("/register")[0].body;
    assert!(
        registration.contains(r#""application_type":"native""#),
        "{registration}"
    );
}

#[tokio::test]
async fn offline_access_is_asked_only_when_the_server_offers_it() {
    let mock = Mock::start().await;
    mock.set(|k| {
        k.challenge_scope = None;
        k.as_scopes = Some(vec!["read", "offline_access"]);
    });
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let s = setup(settings(), &[up], Arc::default());
    let link = s.broker.consent("forge", &caller("a"), None).await.unwrap();
    let url = s
        .broker
        .authorize(&link.id, &caller("a").owner)
        .await
        .unwrap();
    assert_eq!(
        query_of(&url)["scope"],
        "read write offline_access",
        "scopes_supported, then offline_access"
    );

    let mock = Mock::start().await;
    mock.set(|k| k.challenge_scope = None);
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let s = setup(settings(), &[up], Arc::default());
    let link = s.broker.consent("forge", &caller("a"), None).await.unwrap();
    let url = s
        .broker
        .authorize(&link.id, &caller("a").owner)
        .await
        .unwrap();
    assert_eq!(query_of(&url)["scope"], "read write");
}

#[tokio::test]
async fn a_server_supporting_client_metadata_documents_gets_manifolds_own() {
    let mock = Mock::start().await;
    mock.set(|k| k.cimd = true);
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let mut config = settings();
    config.public_url = Some("https://mcp.example.com/".to_owned());
    let s = setup(config, &[up], Arc::default());
    let link = s.broker.consent("forge", &caller("a"), None).await.unwrap();
    assert!(link
        .url
        .starts_with("https://mcp.example.com/oauth/connect/"));
    let url = s
        .broker
        .authorize(&link.id, &caller("a").owner)
        .await
        .unwrap();
    let q = query_of(&url);
    assert_eq!(q["client_id"], "https://mcp.example.com/oauth/client.json");
    assert_eq!(q["redirect_uri"], "https://mcp.example.com/oauth/callback");
    assert!(mock.seen("/register").is_empty(), "no registration");
    let document: serde_json::Value =
        serde_json::from_str(&s.broker.client_metadata().unwrap()).unwrap();
    assert_eq!(
        document["client_id"],
        "https://mcp.example.com/oauth/client.json"
    );
    assert_eq!(
        document["redirect_uris"][0],
        "https://mcp.example.com/oauth/callback"
    );

    let plain = setup(settings(), &[], Arc::default());
    assert!(
        plain.broker.client_metadata().is_none(),
        "no https public_url, no document"
    );
}

#[tokio::test]
async fn a_pre_registered_client_authenticates_as_the_metadata_prefers() {
    let mock = Mock::start().await;
    mock.set(|k| k.auth_methods = vec!["client_secret_post"]);
    let mut auth = oauth(Identity::PerUser);
    if let UpstreamAuth::OAuth(o) = &mut auth {
        o.client.client_id = Some("pre".to_owned());
        o.client.client_secret = Some(Secret::new("pre-secret"));
    }
    let up = upstream("forge", &format!("{}/mcp", mock.base), auth);
    let s = setup(settings(), &[up], Arc::default());
    consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base))
        .await
        .unwrap();
    let request = &mock.grants("authorization_code")[0];
    assert_eq!(request.form()["client_id"], "pre");
    assert_eq!(request.form()["client_secret"], "pre-secret");
    assert!(!request.headers.contains_key("authorization"));
    assert!(mock.seen("/register").is_empty());
}

#[tokio::test]
async fn a_registered_client_authenticates_as_the_server_registered_it() {
    for (method, basic) in [("client_secret_basic", true), ("client_secret_post", false)] {
        let mock = Mock::start().await;
        mock.set(|k| k.auth_methods = vec![method]);
        let up = upstream(
            "forge",
            &format!("{}/mcp", mock.base),
            oauth(Identity::PerUser),
        );
        let s = setup(settings(), &[up], Arc::default());
        consent_through(&s.broker, "forge", &caller("a"), Some(&mock.base))
            .await
            .unwrap();
        let request = &mock.grants("authorization_code")[0];
        let sent_basic = request.headers.contains_key("authorization");
        assert_eq!(sent_basic, basic, "{method}");
        assert_eq!(
            request.form().contains_key("client_secret"),
            !basic,
            "{method}"
        );
        let asked: serde_json::Value =
            serde_json::from_str(&mock.seen("/register")[0].body).unwrap();
        assert_eq!(asked["token_endpoint_auth_method"], method);
    }
}

/// The metadata locations the specification names, each tried in its order: the resource
/// metadata named by the challenge or at the path-aware well-known location (the root one
/// never asked when that answers), then at the root; the authorization server's metadata
/// for an issuer with a path, at each of its three locations.
#[tokio::test]
async fn discovery_finds_metadata_at_each_location_in_order() {
    let variants: [(&str, bool, &str, &str); 4] = [
        (
            "/.well-known/oauth-protected-resource/mcp",
            true,
            "/.well-known/oauth-authorization-server",
            "",
        ),
        (
            "/.well-known/oauth-protected-resource/mcp",
            false,
            "/.well-known/openid-configuration",
            "",
        ),
        (
            "/.well-known/oauth-protected-resource",
            false,
            "/.well-known/oauth-authorization-server/tenant1",
            "/tenant1",
        ),
        (
            "/custom/metadata/location.json",
            true,
            "/tenant1/.well-known/openid-configuration",
            "/tenant1",
        ),
    ];
    for (prm_path, prm_in_challenge, metadata_path, issuer_path) in variants {
        let mock = Mock::start().await;
        mock.set(|k| {
            k.prm_path = prm_path;
            k.prm_in_challenge = prm_in_challenge;
            k.metadata_path = metadata_path;
            k.issuer_path = issuer_path;
        });
        let up = upstream(
            "forge",
            &format!("{}/mcp", mock.base),
            oauth(Identity::PerUser),
        );
        let s = setup(settings(), &[up], Arc::default());
        let issuer = format!("{}{issuer_path}", mock.base);
        let done = consent_through(&s.broker, "forge", &caller("a"), Some(&issuer)).await;
        assert!(done.is_ok(), "{prm_path} {metadata_path}: {done:?}");
        if prm_path.ends_with("/mcp") {
            assert!(
                mock.seen("/.well-known/oauth-protected-resource")
                    .is_empty(),
                "{prm_path}"
            );
        }
    }
}

#[tokio::test]
async fn a_server_without_metadata_gets_the_2025_03_26_endpoints() {
    let mock = Mock::start().await;
    mock.set(|k| {
        k.resource_metadata = false;
        k.as_metadata = false;
    });
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let s = setup(settings(), &[up], Arc::default());
    consent_through(&s.broker, "forge", &caller("a"), None)
        .await
        .unwrap();
    assert_eq!(mock.seen("/register").len(), 1);
    assert_eq!(mock.grants("authorization_code").len(), 1);
    assert_eq!(
        mock.grants("authorization_code")[0].form()["resource"],
        format!("{}/mcp", mock.base)
    );
}

fn near_expiry(principal: &str, issuer: &str, client: &str) -> Grant {
    Grant {
        access_token: "old".to_owned(),
        token_type: "Bearer".to_owned(),
        expires_at_ms: Some(now_ms() + 10_000),
        refresh_token: Some("ref-old".to_owned()),
        scopes: vec!["read".to_owned()],
        issuer: Some(issuer.to_owned()),
        client_id: Some(client.to_owned()),
        principal: principal.to_owned(),
        obtained_at_ms: now_ms(),
    }
}

/// An upstream whose client `pre` is pre-registered (so that a refresh knows its client).
fn pre_registered(mock: &Mock, identity: Identity) -> UpstreamConfig {
    let mut auth = oauth(identity);
    if let UpstreamAuth::OAuth(o) = &mut auth {
        o.client.client_id = Some("pre".to_owned());
    }
    upstream("forge", &format!("{}/mcp", mock.base), auth)
}

#[tokio::test]
async fn a_grant_near_expiry_is_refreshed_once_for_concurrent_callers() {
    let mock = Mock::start().await;
    mock.set(|k| k.delay = Some(std::time::Duration::from_millis(300)));
    let s = setup(
        settings(),
        &[pre_registered(&mock, Identity::PerUser)],
        Arc::default(),
    );
    let alice = caller("alice");
    s.store
        .put(
            "forge",
            &alice.owner,
            &near_expiry("eng/key:alice", &mock.base, "pre"),
        )
        .await
        .unwrap();

    let calls = (0..5).map(|_| s.broker.token("forge", &alice));
    let tokens = futures::future::join_all(calls).await;
    let first = tokens[0].clone().unwrap();
    assert_ne!(first, "old");
    assert!(
        tokens.iter().all(|t| t.as_ref().ok() == Some(&first)),
        "{tokens:?}"
    );
    let refreshes = mock.grants("refresh_token");
    assert_eq!(refreshes.len(), 1);
    assert_eq!(refreshes[0].form()["refresh_token"], "ref-old");
    assert_eq!(
        refreshes[0].form()["resource"],
        format!("{}/mcp", mock.base)
    );
    assert_eq!(s.seen.saw("refreshed:forge:true"), 1);
    let kept = s.store.get("forge", &alice.owner).await.unwrap().unwrap();
    assert_eq!(kept.access_token, first);
    assert_eq!(kept.principal, "eng/key:alice");
}

#[tokio::test]
async fn with_a_shared_store_one_replica_refreshes_and_the_other_waits_for_its_grant() {
    let mock = Mock::start().await;
    mock.set(|k| k.delay = Some(std::time::Duration::from_millis(300)));
    let store = TestStore::shared();
    let up = pre_registered(&mock, Identity::Shared);
    let one = setup(settings(), std::slice::from_ref(&up), Arc::clone(&store));
    let two = setup(settings(), &[up], Arc::clone(&store));
    store
        .put(
            "forge",
            &Owner::shared(),
            &near_expiry("shared", &mock.base, "pre"),
        )
        .await
        .unwrap();

    let (x, y) = (caller("x"), caller("y"));
    let (a, b) = tokio::join!(one.broker.token("forge", &x), two.broker.token("forge", &y));
    assert_eq!(a.clone().unwrap(), b.unwrap());
    assert_ne!(a.unwrap(), "old");
    assert_eq!(
        mock.grants("refresh_token").len(),
        1,
        "one refresh across replicas"
    );
}

#[tokio::test]
async fn connections_are_listed_revoked_and_dropped_with_their_upstream() {
    let mock = Mock::start().await;
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let s = setup(settings(), std::slice::from_ref(&up), Arc::default());
    let (alice, bob) = (caller("alice"), caller("bob"));
    consent_through(&s.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    consent_through(&s.broker, "forge", &bob, Some(&mock.base))
        .await
        .unwrap();

    let all = s.broker.connections(None).await.unwrap();
    assert_eq!(all.len(), 2);
    let mine = s.broker.connections(Some(&alice.owner)).await.unwrap();
    assert_eq!(mine.len(), 1);
    assert_eq!(mine[0].principal, "eng/key:alice");
    assert_eq!(mine[0].owner, alice.owner.label());
    assert!(mine[0].refreshable);
    let listed = serde_json::to_string(&all).unwrap();
    assert!(
        !listed.contains("tok-") && !listed.contains("ref-"),
        "{listed}"
    );

    assert_eq!(
        s.broker.revoke(Some("forge"), &alice.owner).await.unwrap(),
        1
    );
    assert!(s.broker.token("forge", &alice).await.is_err());
    assert!(s.broker.token("forge", &bob).await.is_ok());

    assert_eq!(s.broker.set_upstreams(&[up]).await, Vec::<String>::new());
    assert!(s.broker.auth_of("forge").is_some());
    assert_eq!(s.broker.set_upstreams(&[]).await, ["forge"]);
    assert!(s.broker.auth_of("forge").is_none());
    assert!(s.broker.connections(None).await.unwrap().is_empty());
}

#[tokio::test]
async fn a_dynamic_registration_is_kept_for_other_replicas_and_restarts() {
    let mock = Mock::start().await;
    let store = TestStore::shared();
    let up = upstream(
        "forge",
        &format!("{}/mcp", mock.base),
        oauth(Identity::PerUser),
    );
    let one = setup(settings(), std::slice::from_ref(&up), Arc::clone(&store));
    let alice = caller("alice");
    consent_through(&one.broker, "forge", &alice, Some(&mock.base))
        .await
        .unwrap();
    let mut grant = store.get("forge", &alice.owner).await.unwrap().unwrap();
    grant.expires_at_ms = Some(now_ms() + 10_000);
    store.put("forge", &alice.owner, &grant).await.unwrap();

    let two = setup(settings(), &[up], Arc::clone(&store));
    let refreshed = two.broker.token("forge", &alice).await.unwrap();
    assert_ne!(refreshed, grant.access_token);
    assert_eq!(mock.seen("/register").len(), 1, "registered once");
    assert_eq!(mock.grants("refresh_token")[0].form()["client_id"], "dyn-1");
    let link = two
        .broker
        .consent("forge", &caller("bob"), None)
        .await
        .unwrap();
    let url = two
        .broker
        .authorize(&link.id, &caller("bob").owner)
        .await
        .unwrap();
    assert_eq!(query_of(&url)["client_id"], "dyn-1");
    assert_eq!(mock.seen("/register").len(), 1);
}
