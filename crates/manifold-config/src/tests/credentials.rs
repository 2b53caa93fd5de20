//! `[upstreams.NAME.auth]`, `[credentials]` and named API keys.

use super::{http, toml, toml_err};
use crate::{Identity, TokenStoreSettings, UpstreamAuth};

const KEY: &str = "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=";

fn with_auth(auth: &str) -> String {
    format!(
        "[upstreams.forge]\nurl = \"https://forge.example/mcp\"\n[upstreams.forge.auth]\n{auth}\n"
    )
}

#[test]
fn each_mode_reads_its_settings() {
    let config = toml(&with_auth(
        "mode = \"oauth\"\nidentity = \"shared\"\nclient_id = \"m\"\nclient_secret = \"s3cret\"\nscopes = [\"repo\"]",
    ))
    .unwrap();
    let Some(UpstreamAuth::OAuth(oauth)) = &http(&config, 0).auth else {
        panic!("{:?}", http(&config, 0).auth);
    };
    assert_eq!(oauth.identity, Identity::Shared);
    assert_eq!(oauth.client.client_id.as_deref(), Some("m"));
    assert_eq!(
        oauth.client.client_secret.as_ref().map(|s| s.expose()),
        Some("s3cret")
    );
    assert!(oauth.client.dynamic_registration);
    assert!(
        !format!("{config:?}").contains("s3cret"),
        "secrets never printed"
    );

    let config = toml(&with_auth("mode = \"oauth\"")).unwrap();
    let auth = http(&config, 0).auth.clone().unwrap();
    assert!(auth.per_caller(), "per-user is the default identity");

    let config = toml(&with_auth(
        "mode = \"token_exchange\"\ntoken_endpoint = \"https://idp.example/token\"\naudience = \"forge\"",
    ))
    .unwrap();
    let Some(UpstreamAuth::TokenExchange(exchange)) = &http(&config, 0).auth else {
        panic!();
    };
    assert_eq!(
        exchange.subject_token_type,
        "urn:ietf:params:oauth:token-type:jwt"
    );

    let config = toml(&with_auth(
        "mode = \"client_credentials\"\nclient_id = \"ci\"\nclient_secret = \"x\"",
    ))
    .unwrap();
    assert!(!http(&config, 0).auth.as_ref().unwrap().per_caller());
}

#[test]
fn a_mode_refuses_the_settings_of_another() {
    let (key, problem) = toml_err(&with_auth(
        "mode = \"oauth\"\ntoken_endpoint = \"https://x/t\"",
    ));
    assert_eq!(key, "upstreams.forge.auth.token_endpoint");
    assert!(
        problem.contains("not a setting of mode = \"oauth\""),
        "{problem}"
    );
    let (key, problem) = toml_err(&with_auth("mode = \"password\""));
    assert_eq!(key, "upstreams.forge.auth.mode");
    assert!(problem.contains("is not a mode"), "{problem}");
    let (key, _) = toml_err(&with_auth("identity = \"shared\""));
    assert_eq!(key, "upstreams.forge.auth.mode");
    let (key, problem) = toml_err(&with_auth(
        "mode = \"client_credentials\"\nclient_id = \"ci\"",
    ));
    assert_eq!(key, "upstreams.forge.auth.client_secret");
    assert!(problem.contains("exactly one"), "{problem}");
    let (key, _) = toml_err(&with_auth("mode = \"token_exchange\""));
    assert_eq!(key, "upstreams.forge.auth.token_endpoint");
    let (key, problem) =
        toml_err("[upstreams.p]\ncommand = \"x\"\n[upstreams.p.auth]\nmode = \"oauth\"\n");
    assert_eq!(key, "upstreams.p.auth");
    assert!(problem.contains("HTTP upstreams"), "{problem}");
}

#[test]
fn stores_at_rest_need_a_sealing_key() {
    let config = toml("").unwrap();
    assert_eq!(config.credentials.store, TokenStoreSettings::Memory);
    assert_eq!(config.credentials.consent_timeout.as_secs(), 600);
    let (key, problem) = toml_err("[credentials]\nstore = \"file\"\nfile = \"tokens\"\n");
    assert_eq!(key, "credentials.key");
    assert!(problem.contains("sealed"), "{problem}");
    let config = toml(&format!(
        "[credentials]\nstore = \"file\"\nfile = \"tokens\"\nkey = \"{KEY}\"\nprevious_keys = [\"{KEY}\"]\npublic_url = \"https://mcp.example/\"\n"
    ))
    .unwrap();
    assert!(matches!(
        config.credentials.store,
        TokenStoreSettings::File(_)
    ));
    assert_eq!(config.credentials.keys.len(), 2);
    assert_eq!(config.credentials.keys[0].0[1], 1);
    assert_eq!(
        config.credentials.public_url.as_deref(),
        Some("https://mcp.example")
    );
    assert!(!format!("{config:?}").contains(KEY));
    let (key, problem) = toml_err("[credentials]\nkey = \"c2hvcnQ=\"\n");
    assert_eq!(key, "credentials.key");
    assert!(problem.contains("32 bytes"), "{problem}");
    let (key, _) = toml_err("[credentials]\nstore = \"redis\"\n");
    assert_eq!(key, "credentials.redis_url");
    let (key, _) = toml_err("[credentials]\nfile = \"x\"\n");
    assert_eq!(key, "credentials.file");
}

#[test]
fn a_named_key_gives_its_holder_a_principal() {
    let config = toml(
        "[teams.eng]\napi_keys = [\"plain-key-0123456789abcdef\", { name = \"alice\", key = \"alice-key-0123456789abcdef\" }]\n",
    )
    .unwrap();
    let team = &config.teams[0];
    assert_eq!(team.api_keys.len(), 2);
    assert_eq!(team.key_names.len(), 1);
    assert_eq!(team.key_names[0].1, "alice");
    assert_eq!(team.key_names[0].0, team.api_keys[1]);
    let (key, problem) = toml_err(
        "[teams.eng]\napi_keys = [{ name = \"a b\", key = \"alice-key-0123456789abcdef\" }]\n",
    );
    assert_eq!(key, "teams.eng.api_keys[0].name");
    assert!(problem.contains("1-64"), "{problem}");
}
