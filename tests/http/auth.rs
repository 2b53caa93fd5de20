//! Authentication of HTTP hosts: API keys and JWTs (keys fetched from a JWKS served over
//! HTTP) on every route of both transports, the 401 challenge and the protected resource
//! metadata it points at, sessions owned by the principal that opened them, per-team views,
//! per-team headers to HTTP upstreams, and a per-team quota under concurrent calls.

use std::sync::{Arc, Barrier};
use std::time::Duration;

use reqwest::blocking::Response;
use reqwest::StatusCode;
use serde_json::{json, Value};

use manifold_testkit::http::*;
use manifold_testkit::jwt::{hs256_token, jwks, now, unsigned_token, Issuer, JwksServer};
use manifold_testkit::process::*;

const RED_KEY: &str = "red-key-0123456789abcdef";
const RED_KEY_2: &str = "red-key-2-0123456789abcdef";
const BLUE_KEY: &str = "blue-key-0123456789abcdef";
/// SHA-256 of `BLUE_KEY`, as a config names a key without holding it.
const BLUE_KEY_SHA256: &str = "a82c55b48a1bf76c29bb1b2815d500859eefc59bac427aac2f519331bf23b504";
const WRONG_KEY: &str = "wrong-key-0123456789abcdef";

const ISS: &str = "https://idp.example";
const AUD: &str = "manifold-test";

const METADATA_PATH: &str = "/.well-known/oauth-protected-resource";

// ---- a gateway started with environment variables and any listen address ----

/// `manifold serve` on `listen`, with `env` set (for `${VAR}` in the config).
struct Gateway(Server);

impl std::ops::Deref for Gateway {
    type Target = Server;

    fn deref(&self) -> &Server {
        &self.0
    }
}

impl Gateway {
    fn start(config: &str) -> Gateway {
        Gateway::start_with(config, &[], "127.0.0.1")
    }

    /// Everything Manifold logs is kept, so that a credential logged at any level is seen.
    fn start_with(config: &str, env: &[(&str, &str)], ip: &str) -> Gateway {
        Gateway(Server::start_with(config, "debug", env, ip))
    }

    fn metadata_url(&self) -> String {
        self.url(METADATA_PATH)
    }

    /// A host presenting `cred` on every request, not yet in a session.
    fn host(&self, cred: &Cred) -> Host {
        self.host_using(client_with(cred))
    }

    /// A host presenting `cred` that completed the handshake.
    fn ready(&self, cred: &Cred) -> Host {
        let mut host = self.host(cred);
        let r = host.initialize("2025-06-18");
        let status = r.status();
        assert_eq!(
            status,
            StatusCode::OK,
            "initialize as {cred:?}: {}\n{}",
            r.text().unwrap_or_default(),
            self.stderr()
        );
        assert!(host.session.is_some(), "no session id for {cred:?}");
        host
    }

    /// Waits (bounded) until `text` was logged `n` times: the log is read on a thread of its
    /// own, so a line may arrive just after the answer it goes with.
    fn wait_logged(&self, text: &str, n: usize) {
        eventually(&format!("{text:?} logged {n} times"), || {
            self.stderr().matches(text).count() >= n
        });
    }
}

// ---- credentials ----

/// A host presenting `cred` with the session id `session` (another's, or none at all).
fn with_session(gw: &Gateway, cred: &Cred, session: &str) -> Host {
    let mut host = gw.host(cred);
    host.session = Some(session.to_owned());
    host
}

fn initialize_body() -> String {
    json!({"jsonrpc": "2.0", "id": 0, "method": "initialize",
        "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                   "clientInfo": {"name": "test", "version": "1"}}})
    .to_string()
}

fn ping_body() -> String {
    json!({"jsonrpc": "2.0", "id": 77, "method": "ping"}).to_string()
}

// ---- assertions ----

/// Asserts a 401 with the challenge naming this gateway's metadata document (and
/// `error="invalid_token"` exactly when a credential was refused rather than missing), and
/// a JSON-RPC error body; returns the challenge.
#[track_caller]
fn assert_unauthorized(r: Response, gw: &Gateway, invalid_token: bool) -> String {
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED, "{:?}", r.headers());
    assert!(
        r.headers().get("mcp-session-id").is_none(),
        "a refused request got a session"
    );
    let challenge = r
        .headers()
        .get("www-authenticate")
        .expect("a 401 carries WWW-Authenticate")
        .to_str()
        .unwrap()
        .to_owned();
    let expected = format!("Bearer resource_metadata=\"{}\"", gw.metadata_url());
    assert!(challenge.starts_with(&expected), "{challenge}");
    assert_eq!(
        challenge.contains("error=\"invalid_token\""),
        invalid_token,
        "{challenge}"
    );
    assert_eq!(content_type(&r), "application/json");
    let body: Value = serde_json::from_str(&r.text().unwrap()).unwrap();
    assert_eq!(body["jsonrpc"], "2.0", "{body}");
    assert!(body["id"].is_null(), "{body}");
    assert!(body["error"]["code"].is_i64(), "{body}");
    assert!(body["error"]["message"].is_string(), "{body}");
    challenge
}

/// The `error_description` of a challenge.
fn description(challenge: &str) -> &str {
    challenge
        .split("error_description=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap_or_else(|| panic!("no error_description in {challenge}"))
}

/// `[auth]` with JWTs from `jwks` (a `jwks_url = ...` or `jwks = ...` line), team claim
/// `groups`, refetching on an unknown kid at once.
fn jwt_auth(jwks_line: &str) -> String {
    format!(
        r#"[auth]
authorization_servers = ["{ISS}"]

[auth.jwt]
issuer = "{ISS}"
audience = "{AUD}"
{jwks_line}
team_claim = "groups"
jwks_min_refresh_ms = 0
"#
    )
}

fn inline_jwks(issuer: &Issuer) -> String {
    format!("jwks = '{}'", issuer.jwks())
}

fn token_for(issuer: &Issuer, sub: &str, groups: Value) -> String {
    issuer.token(issuer.claims(AUD, sub, json!({ "groups": groups })))
}

// ---- tests ----

#[test]
fn api_keys_are_accepted_as_bearer_or_x_api_key_and_refusals_get_the_challenge() {
    let config = format!(
        r#"[teams.red]
api_keys = ["${{RED_KEY}}"]

[teams.blue]
api_keys = ["sha256:{BLUE_KEY_SHA256}"]

{}"#,
        two_fixtures()
    );
    let gw = Gateway::start_with(&config, &[("RED_KEY", RED_KEY)], "127.0.0.1");

    // A key from the environment, as a bearer token.
    let mut red = gw.ready(&Cred::bearer(RED_KEY));
    assert_eq!(
        text_of(&red.call("alpha__echo", json!({"text": "red"}))),
        "red"
    );
    // A key configured by its hash, as X-API-Key.
    let mut blue = gw.ready(&Cred::api_key(BLUE_KEY));
    assert_eq!(
        text_of(&blue.call("beta__echo", json!({"text": "blue"}))),
        "blue"
    );
    // The scheme is matched without regard to case.
    let mut lower = gw.ready(&Cred::Authorization(format!("bearer {RED_KEY}")));
    assert_eq!(lower.request("ping", json!({}))["result"], json!({}));

    let mut refusals = 0;
    // No credentials: a challenge without error="invalid_token".
    let r = gw
        .host(&Cred::None)
        .post_raw(initialize_body())
        .send()
        .unwrap();
    let challenge = assert_unauthorized(r, &gw, false);
    assert!(!challenge.contains("error_description"), "{challenge}");
    refusals += 1;

    // A wrong key, however presented, and keys that differ from a real one only slightly.
    let red_upper = RED_KEY.to_uppercase();
    let red_prefix = &RED_KEY[..RED_KEY.len() - 1];
    for cred in [
        Cred::bearer(WRONG_KEY),
        Cred::api_key(WRONG_KEY),
        Cred::bearer(&red_upper),
        Cred::api_key(red_prefix),
        // The hash is what the config holds, not a key.
        Cred::api_key(&format!("sha256:{BLUE_KEY_SHA256}")),
        Cred::bearer(BLUE_KEY_SHA256),
    ] {
        let r = gw.host(&cred).post_raw(initialize_body()).send().unwrap();
        assert_unauthorized(r, &gw, true);
        refusals += 1;
    }

    // Malformed Authorization headers.
    for value in [
        format!("Basic {RED_KEY}"),
        "Bearer".to_owned(),
        format!("Token {RED_KEY}"),
        // A key with no scheme at all.
        RED_KEY.to_owned(),
    ] {
        let r = gw
            .host(&Cred::Authorization(value.clone()))
            .post_raw(initialize_body())
            .send()
            .unwrap();
        let challenge = assert_unauthorized(r, &gw, true);
        assert!(!challenge.contains(RED_KEY), "{value}: {challenge}");
        refusals += 1;
    }

    // Every route needs the credentials, also inside an open session: without them, the
    // session's POST, GET and DELETE are refused (not served, not 404), and it lives on.
    let session = red.session.clone().unwrap();
    let bare = with_session(&gw, &Cred::None, &session);
    assert_unauthorized(bare.post_raw(ping_body()).send().unwrap(), &gw, false);
    assert_unauthorized(bare.listen(None), &gw, false);
    assert_unauthorized(bare.delete(), &gw, false);
    let wrong = with_session(&gw, &Cred::bearer(WRONG_KEY), &session);
    assert_unauthorized(wrong.post_raw(ping_body()).send().unwrap(), &gw, true);
    assert_unauthorized(wrong.listen(None), &gw, true);
    assert_unauthorized(wrong.delete(), &gw, true);
    refusals += 6;
    assert_eq!(red.request("ping", json!({}))["result"], json!({}));
    assert_eq!(red.delete().status(), StatusCode::OK);

    // Every refusal was logged; no key, right or wrong, ever was.
    gw.wait_logged("authentication failed", refusals);
    let log = gw.stderr();
    for secret in [RED_KEY, RED_KEY_2, BLUE_KEY, WRONG_KEY, red_upper.as_str()] {
        assert!(!log.contains(secret), "{secret} in the log:\n{log}");
    }
    // Not even the part of a key that is long enough to matter.
    assert!(!log.contains(&RED_KEY[..12]), "{log}");
}

#[test]
fn jwts_are_checked_against_keys_fetched_over_http_and_rotated_keys_are_found() {
    let k1 = Issuer::new(ISS, "k1");
    let k2 = Issuer::new(ISS, "k2");
    let server = JwksServer::start(k1.jwks());
    let config = format!(
        r#"{}
[teams.red]
claims = ["red-eng"]
upstreams = ["alpha"]

[teams.blue]
upstreams = ["beta"]

{}"#,
        jwt_auth(&format!("jwks_url = {:?}", server.url())),
        two_fixtures()
    );
    let gw = Gateway::start(&config);

    // The team comes from the claim: a value listed by red among others, and blue's name.
    let red_token = token_for(&k1, "alice", json!(["staff", "red-eng"]));
    let mut red = gw.ready(&Cred::bearer(&red_token));
    let red_tools = red.all_tool_names();
    assert!(!red_tools.is_empty());
    assert!(
        red_tools.iter().all(|t| t.starts_with("alpha__")),
        "{red_tools:?}"
    );
    let blue_token = token_for(&k1, "bob", json!("blue"));
    let mut blue = gw.ready(&Cred::bearer(&blue_token));
    let blue_tools = blue.all_tool_names();
    assert!(
        !blue_tools.is_empty() && blue_tools.iter().all(|t| t.starts_with("beta__")),
        "{blue_tools:?}"
    );
    assert_eq!(
        text_of(&blue.call("beta__echo", json!({"text": "jwt"}))),
        "jwt"
    );
    assert!(server.hits() >= 1);

    // Refused tokens, each with error="invalid_token" and a reason.
    let claims = |extra: Value| {
        let mut c = k1.claims(AUD, "alice", json!({"groups": "red-eng"}));
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let impostor = Issuer::new(ISS, "k1");
    let unknown_kid = k2.token(claims(json!({})));
    let refused: Vec<(&str, String, &str)> = vec![
        (
            "expired",
            k1.token(claims(json!({"exp": now() - 3600}))),
            "expired",
        ),
        (
            "wrong audience",
            k1.token(claims(json!({"aud": "someone-else"}))),
            "audience",
        ),
        (
            "wrong issuer",
            k1.token(claims(json!({"iss": "https://other-idp.example"}))),
            "issuer",
        ),
        ("unknown kid", unknown_kid.clone(), "kid"),
        (
            "signed by another key under a known kid",
            impostor.token(claims(json!({}))),
            "signature",
        ),
        (
            "a team claim naming no team",
            k1.token(claims(json!({"groups": ["green"]}))),
            "names no team",
        ),
        (
            "HMAC",
            hs256_token(b"secret", Some("k1"), &claims(json!({}))),
            "HMAC",
        ),
        (
            "unsigned",
            unsigned_token(Some("k1"), &claims(json!({}))),
            "unsigned",
        ),
    ];
    for (what, token, why) in &refused {
        let r = gw
            .host(&Cred::bearer(token))
            .post_raw(initialize_body())
            .send()
            .unwrap();
        let challenge = assert_unauthorized(r, &gw, true);
        assert!(description(&challenge).contains(why), "{what}: {challenge}");
        // A session's requests are refused the same way.
        let r = with_session(&gw, &Cred::bearer(token), red.session.as_deref().unwrap())
            .post_raw(ping_body())
            .send()
            .unwrap();
        assert_unauthorized(r, &gw, true);
    }

    // A key rotated into the JWKS is fetched when a token names it.
    let hits = server.hits();
    server.set(jwks(&[k1.jwk(), k2.jwk()]));
    let mut rotated = gw.ready(&Cred::bearer(&unknown_kid));
    assert!(rotated
        .all_tool_names()
        .iter()
        .all(|t| t.starts_with("alpha__")));
    assert!(server.hits() > hits, "the JWKS was not fetched again");
    // The old key still works, and the sessions opened before go on.
    assert_eq!(red.request("ping", json!({}))["result"], json!({}));
    let again = token_for(&k1, "carol", json!("red-eng"));
    gw.ready(&Cred::bearer(&again));

    // While the JWKS cannot be fetched, a token of a key not known yet is refused (a 401,
    // not a server error) and the keys fetched before stay in use.
    let k3 = Issuer::new(ISS, "k3");
    let k3_token = token_for(&k3, "dave", json!("blue"));
    server.set_status(503);
    let hits = server.hits();
    let r = gw
        .host(&Cred::bearer(&k3_token))
        .post_raw(initialize_body())
        .send()
        .unwrap();
    let challenge = assert_unauthorized(r, &gw, true);
    assert!(description(&challenge).contains("kid"), "{challenge}");
    assert!(server.hits() > hits, "the JWKS was not asked for");
    gw.ready(&Cred::bearer(&token_for(&k2, "erin", json!("blue"))));
    server.set_status(200);
    server.set(jwks(&[k2.jwk(), k3.jwk()]));
    gw.ready(&Cred::bearer(&k3_token));

    // No token reached the log.
    gw.wait_logged("authentication failed", 2 * refused.len() + 1);
    let log = gw.stderr();
    for token in [&red_token, &blue_token, &unknown_kid, &again, &k3_token] {
        let signature = token.rsplit('.').next().unwrap();
        assert!(!log.contains(signature), "a token's signature in the log");
    }
}

#[test]
fn the_challenge_points_at_the_protected_resource_metadata() {
    let k1 = Issuer::new(ISS, "k1");
    let resource = "https://mcp.example/mcp";
    let config = format!(
        r#"[auth]
resource = "{resource}"
authorization_servers = ["{ISS}", "https://idp2.example"]

[auth.jwt]
issuer = "{ISS}"
{}

[teams.red]

{}"#,
        inline_jwks(&k1),
        named_fixture("alpha")
    );
    let gw = Gateway::start(&config);
    let c = client();
    let expected = json!({
        "resource": resource,
        "authorization_servers": [ISS, "https://idp2.example"],
        "bearer_methods_supported": ["header"],
    });
    // Served without credentials, at both addresses.
    for path in [METADATA_PATH.to_owned(), format!("{METADATA_PATH}/mcp")] {
        let r = c.get(gw.url(&path)).send().unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert!(content_type(&r).starts_with("application/json"), "{path}");
        let doc: Value = r.json().unwrap();
        for (key, value) in expected.as_object().unwrap() {
            assert_eq!(&doc[key], value, "{path}: {doc}");
        }
    }
    // The challenge of a 401 names the document, which can be fetched from there.
    let r = gw
        .host(&Cred::None)
        .post_raw(initialize_body())
        .send()
        .unwrap();
    let challenge = assert_unauthorized(r, &gw, false);
    let url = challenge
        .split("resource_metadata=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();
    let doc: Value = c.get(url).send().unwrap().json().unwrap();
    assert_eq!(doc["resource"], resource);
    assert_eq!(doc["bearer_methods_supported"], json!(["header"]));
    // The challenge names the address the host used.
    let r = c
        .post(gw.url("/mcp"))
        .header("host", "gateway.example:8443")
        .header("content-type", "application/json")
        .header("accept", "application/json, text/event-stream")
        .body(initialize_body())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let challenge = r.headers()["www-authenticate"].to_str().unwrap();
    assert!(
        challenge.starts_with(&format!(
            "Bearer resource_metadata=\"http://gateway.example:8443{METADATA_PATH}\""
        )),
        "{challenge}"
    );
    // The resource is the default audience: a token for it passes, one for another fails.
    gw.ready(&Cred::bearer(&k1.token(k1.claims(
        resource,
        "alice",
        json!({"team": "red"}),
    ))));
    let r = gw
        .host(&Cred::bearer(&k1.token(k1.claims(
            AUD,
            "alice",
            json!({"team": "red"}),
        ))))
        .post_raw(initialize_body())
        .send()
        .unwrap();
    assert_unauthorized(r, &gw, true);

    // API keys alone: the resource is this server's /mcp as addressed, and no servers.
    let gw = Gateway::start_with(
        &format!(
            "[teams.red]\napi_keys = [\"{RED_KEY}\"]\n\n{}",
            named_fixture("alpha")
        ),
        &[],
        "127.0.0.1",
    );
    let doc: Value = c.get(gw.metadata_url()).send().unwrap().json().unwrap();
    assert_eq!(doc["resource"], gw.url("/mcp"), "{doc}");
    assert_eq!(doc["authorization_servers"], json!([]), "{doc}");
    assert_eq!(doc["bearer_methods_supported"], json!(["header"]), "{doc}");

    // Without authentication there is nothing to describe.
    let gw = Gateway::start(&named_fixture("alpha"));
    let r = c.get(gw.metadata_url()).send().unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
}

#[test]
fn a_session_answers_only_the_principal_that_opened_it() {
    let k1 = Issuer::new(ISS, "k1");
    let config = format!(
        r#"{}
[teams.red]
api_keys = ["{RED_KEY}", "{RED_KEY_2}"]
claims = ["red"]

[teams.blue]
claims = ["blue"]

{}"#,
        jwt_auth(&inline_jwks(&k1)),
        two_fixtures()
    );
    let gw = Gateway::start(&config);
    let key_a = Cred::bearer(RED_KEY);
    let mut a = gw.ready(&key_a);
    let session = a.session.clone().unwrap();

    // What a session id that never existed gets, for each method.
    let unknown = with_session(&gw, &key_a, "0123456789abcdef0123456789abcdef");
    let never = |r: Response| -> (StatusCode, String) { (r.status(), r.text().unwrap()) };
    let unknown_post = never(unknown.post_raw(ping_body()).send().unwrap());
    let unknown_get = never(unknown.listen(None));
    let unknown_delete = never(unknown.delete());
    assert_eq!(unknown_post.0, StatusCode::NOT_FOUND);
    assert_eq!(unknown_get.0, StatusCode::NOT_FOUND);
    assert_eq!(unknown_delete.0, StatusCode::NOT_FOUND);

    // Another key of the same team (either header), and a JWT of the same team: the session
    // is as unknown to them as one that never existed.
    let alice = token_for(&k1, "alice", json!("red"));
    for other in [
        Cred::bearer(RED_KEY_2),
        Cred::api_key(RED_KEY_2),
        Cred::bearer(&alice),
    ] {
        let h = with_session(&gw, &other, &session);
        assert_eq!(
            never(h.post_raw(ping_body()).send().unwrap()),
            unknown_post,
            "{other:?}"
        );
        let call = json!({"jsonrpc": "2.0", "id": 5, "method": "tools/call",
            "params": {"name": "alpha__echo", "arguments": {"text": "stolen"}}});
        assert_eq!(
            never(h.post_raw(call.to_string()).send().unwrap()),
            unknown_post,
            "{other:?}"
        );
        assert_eq!(never(h.listen(None)), unknown_get, "{other:?}");
        assert_eq!(never(h.delete()), unknown_delete, "{other:?}");
    }
    // The same key, presented either way, is the same principal: the session goes on.
    assert_eq!(
        text_of(&a.call("alpha__echo", json!({"text": "mine"}))),
        "mine"
    );
    let mut a_by_header = with_session(&gw, &Cred::api_key(RED_KEY), &session);
    a_by_header.next_id = 100;
    assert_eq!(a_by_header.request("ping", json!({}))["result"], json!({}));

    // A JWT session belongs to its subject, not to the token: another token of the same
    // subject works, another subject of the same team and the team's API key do not.
    let mut j = gw.ready(&Cred::bearer(&alice));
    let jwt_session = j.session.clone().unwrap();
    let bob = token_for(&k1, "bob", json!("red"));
    for other in [Cred::bearer(&bob), Cred::bearer(RED_KEY)] {
        let h = with_session(&gw, &other, &jwt_session);
        assert_eq!(
            never(h.post_raw(ping_body()).send().unwrap()),
            unknown_post,
            "{other:?}"
        );
    }
    let alice_again = k1.token(k1.claims(
        AUD,
        "alice",
        json!({"groups": "red", "iat": now() - 5, "jti": "another"}),
    ));
    assert_ne!(alice_again, alice);
    let mut j2 = with_session(&gw, &Cred::bearer(&alice_again), &jwt_session);
    j2.next_id = 100;
    assert_eq!(j2.request("ping", json!({}))["result"], json!({}));
    assert_eq!(j.request("ping", json!({}))["result"], json!({}));
    // The same subject with a token for another team is another caller: a session keeps the
    // team (view, limits, upstream credentials) it was opened as.
    let alice_blue = token_for(&k1, "alice", json!("blue"));
    let h = with_session(&gw, &Cred::bearer(&alice_blue), &jwt_session);
    assert_eq!(never(h.post_raw(ping_body()).send().unwrap()), unknown_post);

    // Its owner ends it; then it is gone for the owner too.
    assert_eq!(a.delete().status(), StatusCode::OK);
    assert_eq!(
        never(a.post_raw(ping_body()).send().unwrap()).0,
        StatusCode::NOT_FOUND
    );
}

#[test]
fn two_teams_see_their_own_views_at_once_and_hidden_tools_are_unknown() {
    let config = format!(
        r#"[teams.red]
api_keys = ["{RED_KEY}"]
upstreams = ["alpha"]
tools = {{ exclude = ["alpha__crash"] }}

[teams.blue]
api_keys = ["{BLUE_KEY}"]
upstreams = ["beta"]
tools = {{ include = ["beta__echo", "beta__add", "beta__call_count"] }}

{}"#,
        two_fixtures()
    );
    let gw = Gateway::start(&config);
    let mut red = gw.ready(&Cred::bearer(RED_KEY));
    let mut blue = gw.ready(&Cred::api_key(BLUE_KEY));

    // Both teams list and call at the same time, each several times.
    let (red_seen, blue_seen) = std::thread::scope(|s| {
        let r = s.spawn(|| {
            let mut seen = Vec::new();
            for i in 0..5 {
                seen.push(red.all_tool_names());
                let text = format!("red {i}");
                assert_eq!(
                    text_of(&red.call("alpha__echo", json!({"text": text}))),
                    text
                );
            }
            seen
        });
        let b = s.spawn(|| {
            let mut seen = Vec::new();
            for i in 0..5 {
                seen.push(blue.all_tool_names());
                let text = format!("blue {i}");
                assert_eq!(
                    text_of(&blue.call("beta__echo", json!({"text": text}))),
                    text
                );
            }
            seen
        });
        (r.join().unwrap(), b.join().unwrap())
    });
    let red_tools = &red_seen[0];
    assert!(
        red_seen.iter().all(|t| t == red_tools),
        "red's list changed"
    );
    assert!(
        red_tools.contains(&"alpha__echo".to_owned()),
        "{red_tools:?}"
    );
    assert!(
        red_tools.contains(&"alpha__add".to_owned()),
        "{red_tools:?}"
    );
    assert!(
        red_tools
            .iter()
            .all(|t| t.starts_with("alpha__") && t != "alpha__crash"),
        "{red_tools:?}"
    );
    for seen in &blue_seen {
        let mut sorted = seen.clone();
        sorted.sort();
        assert_eq!(sorted, ["beta__add", "beta__call_count", "beta__echo"]);
    }

    // Calling a hidden tool is answered exactly as calling one that does not exist.
    let status_and_answer = |host: &mut Host, tool: &str| -> (StatusCode, Value) {
        let (id, r) = host.send(
            "tools/call",
            json!({"name": tool, "arguments": {"text": "x", "a": 1, "b": 2}}),
        );
        let status = r.status();
        let answer = messages_of(r)
            .into_iter()
            .find(|m| m["id"] == json!(id))
            .unwrap();
        (status, answer)
    };
    for (is_red, hidden, fake) in [
        (true, "alpha__crash", "alpha__no_such_tool"),
        (true, "beta__echo", "beta__no_such_tool"),
        (false, "alpha__echo", "alpha__no_such_tool"),
        (false, "beta__whoami", "beta__no_such_tool"),
        (false, "beta__crash", "beta__no_such_tool"),
    ] {
        let host = if is_red { &mut red } else { &mut blue };
        let (unknown_status, unknown) = status_and_answer(host, fake);
        let (hidden_status, answer) = status_and_answer(host, hidden);
        assert_eq!(hidden_status, unknown_status, "{hidden}");
        assert!(unknown.get("error").is_some(), "{unknown}");
        assert_eq!(
            error_renamed(&answer, hidden, fake),
            unknown["error"].to_string(),
            "{hidden}"
        );
    }
    // Nothing hidden reached an upstream: neither crash ran, and both still serve.
    assert_eq!(
        text_of(&red.call("alpha__call_count", json!({"what": "tool:crash"}))),
        "0"
    );
    assert_eq!(
        text_of(&blue.call("beta__call_count", json!({"what": "tool:crash"}))),
        "0"
    );
    assert_eq!(
        text_of(&blue.call("beta__call_count", json!({"what": "tool:whoami"}))),
        "0"
    );
    assert_eq!(
        text_of(&red.call("alpha__echo", json!({"text": "up"}))),
        "up"
    );
    assert_eq!(
        text_of(&blue.call("beta__echo", json!({"text": "up"}))),
        "up"
    );
}

#[test]
fn each_team_sends_its_own_upstream_headers_and_never_the_hosts_credentials() {
    let up = FixtureHttp::start(0, &["--name", "remote"]);
    let k1 = Issuer::new(ISS, "k1");
    let config = format!(
        r#"{}
[teams.red]
api_keys = ["{RED_KEY}"]
headers.remote = {{ Authorization = "Bearer ${{RED_REMOTE}}" }}

[teams.blue]
api_keys = ["{BLUE_KEY}"]

[teams.green]
claims = ["green"]

[upstreams.remote]
url = "{url}"
transport = "streamable-http"
headers = {{ Authorization = "Bearer shared" }}

[upstreams.open]
url = "{url}"
transport = "streamable-http"
"#,
        jwt_auth(&inline_jwks(&k1)),
        url = up.url("/mcp"),
    );
    let red_remote = "red-remote-token-0123456789";
    let gw = Gateway::start_with(&config, &[("RED_REMOTE", red_remote)], "127.0.0.1");
    let green_token = token_for(&k1, "gail", json!("green"));
    let mut red = gw.ready(&Cred::bearer(RED_KEY));
    let mut blue = gw.ready(&Cred::api_key(BLUE_KEY));
    let mut green = gw.ready(&Cred::bearer(&green_token));
    // A second session of red's shares red's headers.
    let mut red_again = gw.ready(&Cred::api_key(RED_KEY));

    let red_header = format!("Bearer {red_remote}");
    // Interleaved, several rounds: no team's call goes out with another's headers.
    for round in 0..3 {
        for (who, host, remote, open) in [
            ("red", &mut red, Some(red_header.as_str()), None),
            ("blue", &mut blue, Some("Bearer shared"), None),
            ("green", &mut green, Some("Bearer shared"), None),
            ("red again", &mut red_again, Some(red_header.as_str()), None),
        ] {
            let seen = text_json(&host.call("remote__trace_context", json!({})));
            assert_eq!(
                seen["authorization"].as_str(),
                remote,
                "{who}, round {round}: {seen}"
            );
            let seen = text_json(&host.call("open__trace_context", json!({})));
            assert_eq!(
                seen["authorization"].as_str(),
                open,
                "{who}, round {round}: {seen}"
            );
        }
    }
    // The other tools of the upstream work for every team too.
    for host in [&mut red, &mut blue, &mut green] {
        assert_eq!(
            text_of(&host.call("remote__echo", json!({"text": "over http"}))),
            "over http"
        );
    }
    // Neither the hosts' credentials nor the team's upstream token show in the log.
    let log = gw.stderr();
    for secret in [RED_KEY, BLUE_KEY, red_remote] {
        assert!(!log.contains(secret), "{secret} in the log");
    }
    assert!(!log.contains(green_token.rsplit('.').next().unwrap()));
}

#[test]
fn a_quota_lets_exactly_its_count_through_concurrent_calls() {
    const CALLS: usize = 20;
    const SESSIONS: usize = 4;
    let config = format!(
        r#"[teams.red]
api_keys = ["{RED_KEY}", "{RED_KEY_2}"]

[teams.red.tool_limits.alpha__add]
quota = "5/day"

[teams.blue]
api_keys = ["{BLUE_KEY}"]

{}"#,
        named_fixture("alpha")
    );
    let gw = Gateway::start(&config);
    // Sessions of the same team, opened with either of its keys.
    let hosts: Vec<Host> = (0..SESSIONS)
        .map(|i| {
            let key = if i % 2 == 0 { RED_KEY } else { RED_KEY_2 };
            gw.ready(&Cred::bearer(key))
        })
        .collect();
    let start = Arc::new(Barrier::new(CALLS));
    let answers: Vec<(StatusCode, Value)> = std::thread::scope(|s| {
        let threads: Vec<_> = (0..CALLS)
            .map(|i| {
                let base = &hosts[i % SESSIONS];
                // Each call its own POST, on a session shared with other threads.
                let mut host = Host {
                    client: base.client.clone(),
                    url: base.url.clone(),
                    session: base.session.clone(),
                    next_id: 1000 + i as u64,
                };
                let start = Arc::clone(&start);
                s.spawn(move || {
                    start.wait();
                    let (id, r) = host.send(
                        "tools/call",
                        json!({"name": "alpha__add", "arguments": {"a": i, "b": 1}}),
                    );
                    let status = r.status();
                    let answer = messages_of(r)
                        .into_iter()
                        .find(|m| m["id"] == json!(id))
                        .unwrap_or_else(|| panic!("no answer to call {i}"));
                    (status, answer)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    });
    for (status, answer) in &answers {
        assert_eq!(*status, StatusCode::OK, "{answer}");
    }
    let passed: Vec<&Value> = answers
        .iter()
        .map(|(_, a)| a)
        .filter(|a| a.get("result").is_some())
        .collect();
    assert_eq!(passed.len(), 5, "{answers:?}");
    for a in &passed {
        assert_ne!(a["result"]["isError"], json!(true), "{a}");
    }
    let refused: Vec<&Value> = answers
        .iter()
        .map(|(_, a)| a)
        .filter(|a| a.get("result").is_none())
        .collect();
    assert_eq!(refused.len(), CALLS - 5);
    for a in refused {
        assert_eq!(code(a), -32015, "{a}");
        let data = &a["error"]["data"];
        assert_eq!(data["kind"], "quota_exceeded", "{a}");
        let retry = data["retryAfterMs"].as_u64().unwrap_or(0);
        assert!(retry > 0 && retry <= 86_400_000, "{a}");
    }
    // Only the calls let through reached the upstream.
    let mut red = hosts.into_iter().next().unwrap();
    assert_eq!(
        text_of(&red.call("alpha__call_count", json!({"what": "tool:add"}))),
        "5"
    );
    // The quota is red's: blue calls on, and red stays refused.
    let mut blue = gw.ready(&Cred::bearer(BLUE_KEY));
    let r = blue.call("alpha__add", json!({"a": 1, "b": 2}));
    assert_eq!(text_of(&r), "3", "{r}");
    assert_eq!(
        code(&red.call("alpha__add", json!({"a": 1, "b": 2}))),
        -32015
    );
    assert_eq!(
        text_of(&red.call("alpha__call_count", json!({"what": "tool:add"}))),
        "6"
    );
}

#[test]
fn the_sse_transport_requires_credentials_too() {
    let config = format!(
        "[teams.red]\napi_keys = [\"{RED_KEY}\", \"{RED_KEY_2}\"]\n\n{}",
        two_fixtures()
    );
    let gw = Gateway::start(&config);
    let open = |cred: &Cred| {
        client_with(cred)
            .get(gw.url("/sse"))
            .header("accept", "text/event-stream")
            .timeout(Duration::from_secs(3600))
            .send()
            .unwrap()
    };
    assert_unauthorized(open(&Cred::None), &gw, false);
    assert_unauthorized(open(&Cred::bearer(WRONG_KEY)), &gw, true);
    assert_unauthorized(
        open(&Cred::Authorization(format!("Basic {RED_KEY}"))),
        &gw,
        true,
    );

    // With a key, the stream opens; its messages need the same principal's credentials.
    let r = open(&Cred::api_key(RED_KEY));
    assert_eq!(r.status(), StatusCode::OK);
    let mut events = Events::new(r);
    let endpoint = events.next_event().unwrap();
    assert_eq!(endpoint.kind.as_deref(), Some("endpoint"));
    let post_url = gw.url(&endpoint.data);
    let post = |cred: &Cred, body: Value| {
        client_with(cred)
            .post(&post_url)
            .header("content-type", "application/json")
            .body(body.to_string())
            .send()
            .unwrap()
    };
    let init = json!({"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2024-11-05","capabilities":{},"clientInfo":{"name":"old","version":"1"}}});
    assert_unauthorized(post(&Cred::None, init.clone()), &gw, false);
    assert_unauthorized(post(&Cred::bearer(WRONG_KEY), init.clone()), &gw, true);
    // Another key of the same team: as if the session did not exist.
    let unknown = client_with(&Cred::bearer(RED_KEY))
        .post(gw.url("/messages?sessionId=0123456789abcdef0123456789abcdef"))
        .header("content-type", "application/json")
        .body(init.to_string())
        .send()
        .unwrap();
    let unknown = (unknown.status(), unknown.text().unwrap());
    assert_eq!(unknown.0, StatusCode::NOT_FOUND);
    let r = post(&Cred::bearer(RED_KEY_2), init.clone());
    assert_eq!((r.status(), r.text().unwrap()), unknown);

    // The owner, by either header.
    assert_eq!(
        post(&Cred::bearer(RED_KEY), init).status(),
        StatusCode::ACCEPTED
    );
    let (_, answer) = events.next_message().unwrap();
    assert_eq!(answer["id"], 1, "{answer}");
    assert_eq!(answer["result"]["protocolVersion"], "2024-11-05");
    post(
        &Cred::bearer(RED_KEY),
        json!({"jsonrpc":"2.0","method":"notifications/initialized"}),
    );
    let call = json!({"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"beta__echo","arguments":{"text":"old school"}}});
    assert_eq!(
        post(&Cred::api_key(RED_KEY), call).status(),
        StatusCode::ACCEPTED
    );
    let (_, answer) = events.next_message().unwrap();
    assert_eq!(answer["id"], 2, "{answer}");
    assert_eq!(text_of(&answer), "old school");
    events.close();
}

#[test]
fn listening_beyond_loopback_is_allowed_once_hosts_must_authenticate() {
    let dir = TempDir::new("auth-remote");
    let check = |name: &str, config: &str| {
        let path = dir.write(name, config);
        run_manifold(
            &["check", "--no-start", "--config", path.to_str().unwrap()],
            &[],
        )
    };
    let upstream = named_fixture("alpha");
    let listen = "[server]\nlisten = \"0.0.0.0:0\"\n\n";
    let keys = format!("[teams.red]\napi_keys = [\"{RED_KEY}\"]\n\n");
    let k1 = Issuer::new(ISS, "k1");
    let jwt = format!("{}\n[teams.red]\n\n", jwt_auth(&inline_jwks(&k1)));

    let (code, _, err) = check("open.toml", &format!("{listen}{upstream}"));
    assert_ne!(code, 0);
    assert!(
        err.contains("server.listen") && err.contains("allow_remote"),
        "{err}"
    );
    // A team without keys authenticates no one.
    let (code, _, _) = check(
        "keyless.toml",
        &format!("{listen}[teams.red]\n\n{upstream}"),
    );
    assert_ne!(code, 0);
    for (name, auth) in [("keys.toml", &keys), ("jwt.toml", &jwt)] {
        let (code, _, err) = check(name, &format!("{listen}{auth}{upstream}"));
        assert_eq!(code, 0, "{name}: {err}");
    }

    // Served on every interface: reachable over loopback, and only with a key.
    let gw = Gateway::start_with(&format!("{keys}{upstream}"), &[], "0.0.0.0");
    let r = gw
        .host(&Cred::None)
        .post_raw(initialize_body())
        .send()
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let mut red = gw.ready(&Cred::bearer(RED_KEY));
    assert_eq!(
        text_of(&red.call("alpha__echo", json!({"text": "remote"}))),
        "remote"
    );
}

#[test]
fn upstream_notifications_reach_only_teams_that_may_use_the_upstream() {
    let config = format!(
        r#"[server]
sse_keepalive_ms = 100

[teams.red]
api_keys = ["{RED_KEY}"]
upstreams = ["alpha"]

[teams.blue]
api_keys = ["{BLUE_KEY}"]

{}"#,
        two_fixtures()
    );
    let gw = Gateway::start(&config);
    let red = gw.ready(&Cred::bearer(RED_KEY));
    let mut blue = gw.ready(&Cred::bearer(BLUE_KEY));
    let mut streams: Vec<Events> = [&red, &blue].iter().map(|h| Events::attached(h)).collect();
    // beta logs (red may not use beta), then alpha logs the end marker.
    blue.call(
        "beta__log",
        json!({"level": "error", "message": "from beta"}),
    );
    blue.call("alpha__log", json!({"level": "error", "message": "end"}));
    let heard = |events: &mut Events| {
        let mut texts = Vec::new();
        loop {
            let (_, m) = events.next_message().expect("a message");
            if m["method"] != "notifications/message" {
                continue;
            }
            let text = m["params"]["data"].as_str().unwrap_or_default().to_owned();
            if text == "end" {
                return texts;
            }
            texts.push(text);
        }
    };
    assert_eq!(heard(&mut streams[1]), ["from beta"], "blue hears beta");
    assert!(
        heard(&mut streams[0]).is_empty(),
        "red hears nothing of beta"
    );
}
