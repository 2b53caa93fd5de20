//! Where each scheme's value goes, a team's values over the upstream's, and the refusal of an
//! operation whose schemes have no value.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::BTreeMap;

use manifold_config::Secret;
use manifold_openapi::{HttpRequest, Operation, Options};
use serde_json::json;
use url::Url;

use super::{team_security, Keys};

struct NoFiles;

impl manifold_openapi::Fetch for NoFiles {
    fn fetch(&self, _url: &Url) -> Result<Vec<u8>, String> {
        Err("no files in this test".to_owned())
    }
}

/// One operation per scheme, at `/{scheme}`, asking for that scheme alone.
fn operations() -> Vec<Operation> {
    let schemes = json!({
        "headerKey": {"type": "apiKey", "in": "header", "name": "X-Api-Key"},
        "queryKey": {"type": "apiKey", "in": "query", "name": "api key"},
        "cookieKey": {"type": "apiKey", "in": "cookie", "name": "session"},
        "token": {"type": "http", "scheme": "bearer"},
        "login": {"type": "http", "scheme": "basic"},
        "machine": {"type": "oauth2", "flows": {"clientCredentials": {
            "tokenUrl": "https://auth.example.com/token", "scopes": {}}}}
    });
    let mut paths = serde_json::Map::new();
    for scheme in schemes.as_object().unwrap().keys() {
        paths.insert(
            format!("/{scheme}"),
            json!({"get": {"operationId": scheme, "security": [{scheme: []}],
                "responses": {"204": {"description": "done"}}}}),
        );
    }
    let description = json!({
        "openapi": "3.0.3",
        "info": {"title": "vault", "version": "1"},
        "servers": [{"url": "https://vault.example.com"}],
        "components": {"securitySchemes": schemes},
        "paths": paths,
    });
    let text = description.to_string();
    let doc = manifold_openapi::load(
        text.as_bytes(),
        "https://vault.example.com/openapi.json",
        &NoFiles,
    )
    .unwrap();
    manifold_openapi::convert(&doc, &Options::default())
        .unwrap()
        .tools
}

fn keys(values: &[(&str, &str)]) -> Keys {
    Keys {
        values: values
            .iter()
            .map(|(k, v)| ((*k).to_owned(), Secret::new(*v)))
            .collect(),
        credential: None,
    }
}

/// The request of operation `name` with what its security asks for; `token` is the
/// credential's, for the OAuth 2 scheme (whose credential these keys stand in for).
fn secured(keys: &Keys, name: &str, token: Option<&str>) -> HttpRequest {
    let ops = operations();
    let op = ops.iter().find(|op| op.name == name).unwrap();
    let needs = match token {
        Some(_) => &op.security[0],
        None => keys.choose(op).unwrap(),
    };
    let mut request = op.request(&json!({})).unwrap();
    keys.apply(needs, token, &mut request);
    request
}

fn header<'a>(request: &'a HttpRequest, name: &str) -> Option<&'a str> {
    request
        .headers
        .iter()
        .find(|(n, _)| n.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

#[test]
fn each_scheme_value_goes_where_its_scheme_says() {
    let keys = keys(&[
        ("headerKey", "hk"),
        ("queryKey", "q&k"),
        ("cookieKey", "c k"),
        ("token", "tok"),
        ("login", "ann:pw"),
    ]);
    let r = secured(&keys, "headerKey", None);
    assert_eq!(header(&r, "X-Api-Key"), Some("hk"));
    assert_eq!(header(&r, "Authorization"), None);
    let r = secured(&keys, "queryKey", None);
    assert_eq!(r.url, "https://vault.example.com/queryKey?api%20key=q%26k");
    let r = secured(&keys, "cookieKey", None);
    assert_eq!(header(&r, "Cookie"), Some("session=c%20k"));
    let r = secured(&keys, "token", None);
    assert_eq!(header(&r, "Authorization"), Some("Bearer tok"));
    // "ann:pw" in base64.
    let r = secured(&keys, "login", None);
    assert_eq!(header(&r, "Authorization"), Some("Basic YW5uOnB3"));
}

#[test]
fn an_oauth2_scheme_sends_the_credentials_token_unless_it_has_a_value_of_its_own() {
    let r = secured(&keys(&[]), "machine", Some("issued"));
    assert_eq!(header(&r, "Authorization"), Some("Bearer issued"));
    let r = secured(&keys(&[("machine", "static")]), "machine", Some("issued"));
    assert_eq!(header(&r, "Authorization"), Some("Bearer static"));
}

#[test]
fn a_teams_security_key_replaces_that_schemes_value_and_nothing_else() {
    let mut values: BTreeMap<String, Secret> = [("token", "shared"), ("headerKey", "hk")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), Secret::new(v)))
        .collect();
    let team: BTreeMap<String, String> = [("security.token", "team-tok"), ("X-Team", "red")]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
    team_security(&mut values, &team);
    let keys = Keys {
        values,
        credential: None,
    };
    let r = secured(&keys, "token", None);
    assert_eq!(header(&r, "Authorization"), Some("Bearer team-tok"));
    let r = secured(&keys, "headerKey", None);
    assert_eq!(header(&r, "X-Api-Key"), Some("hk"));
    assert!(
        !keys.values.contains_key("X-Team"),
        "a plain header is no scheme"
    );
}

#[test]
fn an_operation_whose_scheme_has_no_value_is_refused_naming_it() {
    let ops = operations();
    let keys = keys(&[("token", "tok")]);
    let op = ops.iter().find(|op| op.name == "headerKey").unwrap();
    let why = keys.choose(op).unwrap_err();
    assert!(why.contains("security scheme headerKey"), "{why}");
    assert!(why.contains("[upstreams.<name>.security]"), "{why}");
    let op = ops.iter().find(|op| op.name == "machine").unwrap();
    let why = keys.choose(op).unwrap_err();
    assert!(
        why.contains("[upstreams.<name>.auth]"),
        "OAuth 2 names auth: {why}"
    );
    let unmet = keys.unconfigured(ops.iter(), false);
    assert_eq!(
        unmet,
        ["cookieKey", "headerKey", "login", "machine", "queryKey"]
    );
    assert!(!keys
        .unconfigured(ops.iter(), true)
        .contains(&"machine".to_owned()));
}
