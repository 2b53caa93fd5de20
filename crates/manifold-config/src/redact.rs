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

#[cfg(test)]
mod tests {
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
