//! `Debug` for `StdioConfig` and `HttpConfig` that never shows environment or header values:
//! they are often API tokens, and configs end up in logs and `manifold check` output.

use std::fmt;

use crate::{HttpConfig, OpenApiConfig, StdioConfig};

/// Shows the env keys with every value replaced by `<redacted>`.
struct RedactedEnv<'a>(&'a std::collections::BTreeMap<String, String>);

impl fmt::Debug for RedactedEnv<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_map()
            .entries(self.0.keys().map(|k| (k, format_args!("<redacted>"))))
            .finish()
    }
}

impl fmt::Debug for StdioConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StdioConfig")
            .field("command", &self.command)
            .field("args", &self.args)
            .field("env", &RedactedEnv(&self.env))
            .field("cwd", &self.cwd)
            .finish()
    }
}

impl fmt::Debug for HttpConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpConfig")
            .field("url", &self.url)
            .field("kind", &self.kind)
            .field("headers", &RedactedEnv(&self.headers))
            .field("connect_timeout", &self.connect_timeout)
            .field("auth", &self.auth)
            .finish()
    }
}

impl fmt::Debug for OpenApiConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("OpenApiConfig")
            .field("source", &self.source)
            .field("base_url", &self.base_url)
            .field("include", &self.include)
            .field("exclude", &self.exclude)
            .field("renames", &self.renames)
            .field("timeout", &self.timeout)
            .field("max_response_bytes", &self.max_response_bytes)
            .field("headers", &RedactedEnv(&self.headers))
            .field("security", &self.security)
            .field("auth", &self.auth)
            .finish()
    }
}

/// What replaces a secret wherever the configuration is shown.
pub const REDACTED: &str = "<redacted>";

/// Tables whose every value is a secret (the names are kept): header values, environment
/// values, OpenAPI security values.
const SECRET_TABLES: [&str; 3] = ["headers", "env", "security"];

/// Keys whose value is a secret whole, wherever they are: API keys (and their hashes), inline
/// JWT keys.
const SECRET_KEYS: [&str; 2] = ["api_keys", "jwks"];

/// Whether the value at `key` is a secret: a key of [`SECRET_KEYS`], any key ending in `token`
/// or `_key` (`metrics_token`, `request_state_key`) or naming a secret, a password or a
/// private key (`client_secret`, `private_key_file`).
fn secret_key(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    SECRET_KEYS.contains(&key.as_str())
        || key.ends_with("token")
        || key.ends_with("_key")
        || ["secret", "password", "private_key"]
            .iter()
            .any(|word| key.contains(word))
}

/// A configuration file's text (`path` says its format, by extension) as the console shows
/// it: parsed, every secret replaced by `<redacted>`, and written out again (comments and
/// layout are not kept). A secret is every value of a table of [`SECRET_TABLES`], the value of
/// every key [`secret_key`] names, and the user and password of any URL.
pub fn config_text(path: &std::path::Path, text: &str) -> Result<String, String> {
    let json = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("json"));
    if json {
        let mut value: serde_json::Value =
            serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
        redact_json(&mut value, false);
        return serde_json::to_string_pretty(&value).map_err(|e| e.to_string());
    }
    let mut table: toml::Table = text.parse().map_err(|e| format!("not TOML: {e}"))?;
    for (key, value) in table.iter_mut() {
        redact_toml(
            value,
            secret_key(key) || SECRET_TABLES.contains(&key.as_str()),
        );
    }
    toml::to_string_pretty(&table).map_err(|e| e.to_string())
}

fn redact_toml(value: &mut toml::Value, secret: bool) {
    match value {
        toml::Value::Table(table) => {
            for (key, value) in table.iter_mut() {
                let inner = secret || secret_key(key) || SECRET_TABLES.contains(&key.as_str());
                redact_toml(value, inner);
            }
        }
        toml::Value::Array(items) => items.iter_mut().for_each(|v| redact_toml(v, secret)),
        toml::Value::String(text) if secret => *text = REDACTED.to_owned(),
        toml::Value::String(text) => *text = crate::policy::redact_url(text),
        _ if secret => *value = toml::Value::String(REDACTED.to_owned()),
        _ => {}
    }
}

fn redact_json(value: &mut serde_json::Value, secret: bool) {
    use serde_json::Value;
    match value {
        Value::Object(members) => {
            for (key, value) in members.iter_mut() {
                let inner = secret || secret_key(key) || SECRET_TABLES.contains(&key.as_str());
                redact_json(value, inner);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(|v| redact_json(v, secret)),
        Value::String(text) if secret => *text = REDACTED.to_owned(),
        Value::String(text) => *text = crate::policy::redact_url(text),
        Value::Null => {}
        _ if secret => *value = Value::String(REDACTED.to_owned()),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_shown_configuration_has_no_secret_left() {
        let text = r#"
[server]
metrics_token = "tok-metrics-0123456789"
request_state_key = "state-key-0123456789"

[limits]
redis_url = "redis://:redis-pass@127.0.0.1:6379"

[teams.red]
api_keys = ["red-api-key-0123456789", { name = "ci", key = "ci-key-0123456789" }]

[upstreams.github]
url = "https://user:url-pass@example.com/mcp"
headers = { Authorization = "Bearer header-secret" }

[upstreams.github.auth]
mode = "client_credentials"
client_secret = "client-secret-value"

[upstreams.files]
command = "npx"
env = { GITHUB_TOKEN = "ghp_env_secret" }
"#;
        let shown = super::config_text(std::path::Path::new("m.toml"), text).unwrap();
        for secret in [
            "tok-metrics",
            "state-key",
            "redis-pass",
            "red-api-key",
            "ci-key",
            "url-pass",
            "header-secret",
            "client-secret-value",
            "ghp_env_secret",
        ] {
            assert!(!shown.contains(secret), "{secret} in {shown}");
        }
        for kept in [
            "Authorization",
            "GITHUB_TOKEN",
            "npx",
            "client_credentials",
            "example.com/mcp",
        ] {
            assert!(shown.contains(kept), "{kept} not in {shown}");
        }
    }

    #[test]
    fn a_claude_json_file_is_redacted_the_same_way() {
        let text = r#"{"mcpServers":{"x":{"command":"npx","env":{"API_TOKEN":"json-secret"}}}}"#;
        let shown = super::config_text(std::path::Path::new("c.json"), text).unwrap();
        assert!(
            !shown.contains("json-secret") && shown.contains("API_TOKEN"),
            "{shown}"
        );
    }

    #[test]
    fn debug_shows_header_names_but_not_values() {
        let http = crate::HttpConfig {
            url: "https://example.com/mcp".into(),
            kind: crate::HttpKind::Auto,
            headers: [("Authorization".to_owned(), "Bearer sk-secret".to_owned())].into(),
            connect_timeout: std::time::Duration::from_secs(1),
            auth: None,
        };
        let text = format!("{:?}", crate::Transport::Http(http));
        assert!(!text.contains("sk-secret"), "{text}");
        assert!(
            text.contains("Authorization") && text.contains("<redacted>"),
            "{text}"
        );
    }

    use crate::StdioConfig;

    fn config() -> StdioConfig {
        StdioConfig {
            command: "mcp-server-github".into(),
            args: vec!["--verbose".into()],
            env: [("GITHUB_TOKEN".to_owned(), "ghp_supersecret".to_owned())].into(),
            cwd: Some("/srv".into()),
        }
    }

    #[test]
    fn debug_shows_env_keys_but_not_values() {
        for text in [format!("{:?}", config()), format!("{:#?}", config())] {
            assert!(!text.contains("ghp_supersecret"), "{text}");
            assert!(text.contains("GITHUB_TOKEN"), "{text}");
            assert!(text.contains("<redacted>"), "{text}");
            assert!(
                text.contains("mcp-server-github") && text.contains("--verbose"),
                "{text}"
            );
            assert!(text.contains("/srv"), "{text}");
        }
        assert_eq!(
            format!("{:?}", config()),
            "StdioConfig { command: \"mcp-server-github\", args: [\"--verbose\"], \
             env: {\"GITHUB_TOKEN\": <redacted>}, cwd: Some(\"/srv\") }"
        );
    }

    #[test]
    fn redaction_reaches_through_transport() {
        let text = format!("{:?}", crate::Transport::Stdio(config()));
        assert!(
            !text.contains("ghp_supersecret") && text.contains("<redacted>"),
            "{text}"
        );
    }
}
