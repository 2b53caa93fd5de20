//! The users' page: each user sees and revokes their own connections alone.

use super::*;

fn sign_in_request(key: &str) -> TestRequest {
    TestRequest::post()
        .uri("/oauth/account/login")
        .insert_header(("content-type", "application/x-www-form-urlencoded"))
        .set_payload(format!("key={key}"))
}

/// The session cookie (`name=value`) a sign-in set.
fn cookie_of(r: &ServiceResponse, key: &str) -> String {
    assert_eq!(r.status(), 303);
    assert_secure(r);
    let cookie = header(r, "set-cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/oauth/account"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(!cookie.contains(key), "the cookie is not the key");
    cookie.split(';').next().unwrap().to_owned()
}

fn page_of(cookie: &str) -> TestRequest {
    TestRequest::get()
        .uri("/oauth/account")
        .insert_header(("cookie", cookie.to_owned()))
}

fn action(cookie: &str, what: &str, csrf: Option<&str>) -> TestRequest {
    let csrf = csrf.map_or_else(String::new, |c| format!("&csrf={c}"));
    TestRequest::post()
        .uri(&format!("/oauth/account/{what}"))
        .insert_header(("cookie", cookie.to_owned()))
        .insert_header(("content-type", "application/x-www-form-urlencoded"))
        .set_payload(format!("upstream=forge{csrf}"))
}

fn csrf_on(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a CSRF field") + 19;
    page[at..].split('"').next().unwrap().to_owned()
}

#[test]
fn a_user_sees_and_revokes_their_own_connections_and_nobody_elses() {
    run(async {
        let fake = Arc::<Fake>::default();
        let app = pages!(fake);
        // Not signed in: the form.
        let r = call_service(&app, TestRequest::get().uri("/oauth/account").to_request()).await;
        assert_eq!(r.status(), 200);
        assert_secure(&r);
        assert!(body_of(r).contains("action=\"/oauth/account/login\""));
        let made_up = action("manifold_account=made-up", "revoke", None);
        let r = call_service(&app, made_up.to_request()).await;
        assert_eq!(r.status(), 403);

        // Bob is not shown alice's connection, and cannot revoke without his CSRF token.
        let r = call_service(&app, sign_in_request(BOB_KEY).to_request()).await;
        let bob = cookie_of(&r, BOB_KEY);
        let page = body_of(call_service(&app, page_of(&bob).to_request()).await);
        assert!(page.contains(&principal_of(BOB_KEY)), "{page}");
        assert!(!page.contains(&principal_of(ALICE_KEY)), "{page}");
        assert!(
            !page.contains("repo"),
            "alice's scopes are not shown: {page}"
        );
        assert!(page.contains("not connected"), "{page}");
        let r = call_service(&app, action(&bob, "revoke", None).to_request()).await;
        assert_eq!(r.status(), 403);
        assert!(fake.revoked.lock().unwrap().is_empty());

        // Alice sees hers and revokes it: only her own owner is named.
        let r = call_service(&app, sign_in_request(ALICE_KEY).to_request()).await;
        let alice_cookie = cookie_of(&r, ALICE_KEY);
        let page = body_of(call_service(&app, page_of(&alice_cookie).to_request()).await);
        assert!(page.contains("connected (repo)"), "{page}");
        let csrf = csrf_on(&page);
        let r = call_service(
            &app,
            action(&alice_cookie, "revoke", Some(&csrf)).to_request(),
        )
        .await;
        assert_eq!(r.status(), 303);
        assert_eq!(header(&r, "location"), "/oauth/account?revoked=1");
        assert_eq!(
            fake.revoked.lock().unwrap().clone(),
            vec![(Some("forge".to_owned()), alice())]
        );
        // Bob's CSRF token is not alice's.
        let bob_page = body_of(call_service(&app, page_of(&bob).to_request()).await);
        let stolen = action(&alice_cookie, "revoke", Some(&csrf_on(&bob_page)));
        let r = call_service(&app, stolen.to_request()).await;
        assert_eq!(r.status(), 403);
        // Connecting ahead of a call goes straight to the authorization server.
        let r = call_service(
            &app,
            action(&alice_cookie, "connect", Some(&csrf)).to_request(),
        )
        .await;
        assert_eq!(r.status(), 303);
        assert_eq!(header(&r, "location"), AUTHORIZE);
    });
}

#[test]
fn a_wrong_key_signs_nobody_in() {
    run(async {
        let app = pages!(Arc::<Fake>::default());
        let r = call_service(&app, sign_in_request("nobody").to_request()).await;
        assert_eq!(r.status(), 401);
        assert!(header(&r, "set-cookie").is_empty());
        assert!(!body_of(r).contains("nobody"));
    });
}
