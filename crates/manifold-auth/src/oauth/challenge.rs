//! The `WWW-Authenticate` header an upstream answers a missing or refused token with
//! (RFC 6750 Bearer challenges, with RFC 9728's `resource_metadata`).

/// What a Bearer challenge says.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Challenge {
    /// Where the upstream's protected resource metadata is (RFC 9728).
    pub resource_metadata: Option<String>,
    /// The scopes the request needs (space-separated in the header).
    pub scopes: Option<Vec<String>>,
    /// `invalid_token`, `insufficient_scope`, ...
    pub error: Option<String>,
}

impl Challenge {
    /// The Bearer challenge in a `WWW-Authenticate` value, if there is one. Other schemes
    /// (Basic, DPoP, ...) in the same header are skipped.
    pub fn parse(header: &str) -> Option<Self> {
        let mut rest = header.trim_start();
        let mut found: Option<Self> = None;
        while !rest.is_empty() {
            let (scheme, after) = take_token(rest);
            if scheme.is_empty() {
                // Not a token where a scheme must be: skip one character and resynchronise.
                rest = rest.get(1..).unwrap_or_default().trim_start();
                continue;
            }
            let (params, after) = take_params(after);
            if scheme.eq_ignore_ascii_case("bearer") && found.is_none() {
                found = Some(Self::from_params(&params));
            }
            rest = after.trim_start_matches([',', ' ', '\t']);
        }
        found
    }

    fn from_params(params: &[(String, String)]) -> Self {
        let mut challenge = Self::default();
        for (name, value) in params {
            match name.to_ascii_lowercase().as_str() {
                "resource_metadata" => challenge.resource_metadata = Some(value.clone()),
                "scope" => {
                    let scopes: Vec<String> = value.split_whitespace().map(str::to_owned).collect();
                    challenge.scopes = (!scopes.is_empty()).then_some(scopes);
                }
                "error" => challenge.error = Some(value.clone()),
                _ => {}
            }
        }
        challenge
    }

    /// Whether this is a step-up: the token is good but lacks scopes.
    pub fn insufficient_scope(&self) -> bool {
        self.error.as_deref() == Some("insufficient_scope")
    }
}

fn is_token_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c)
}

fn take_token(text: &str) -> (&str, &str) {
    let end = text.find(|c| !is_token_char(c)).unwrap_or(text.len());
    (&text[..end], &text[end..])
}

/// The auth-params after a scheme, up to the next scheme (a token not followed by `=`).
fn take_params(mut text: &str) -> (Vec<(String, String)>, &str) {
    let mut params = Vec::new();
    loop {
        let trimmed = text.trim_start_matches([',', ' ', '\t']);
        let (name, after) = take_token(trimmed);
        let after_name = after.trim_start();
        if name.is_empty() || !after_name.starts_with('=') {
            return (params, trimmed);
        }
        let value_text = after_name[1..].trim_start();
        let (value, after_value) = match value_text.strip_prefix('"') {
            Some(quoted) => take_quoted(quoted),
            None => {
                let (value, after) = take_token(value_text);
                (value.to_owned(), after)
            }
        };
        params.push((name.to_owned(), value));
        text = after_value;
    }
}

fn take_quoted(text: &str) -> (String, &str) {
    let mut value = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '"' => return (value, &text[i + 1..]),
            '\\' => {
                if let Some((_, escaped)) = chars.next() {
                    value.push(escaped);
                }
            }
            _ => value.push(c),
        }
    }
    // An unterminated quote: what was there is the value.
    (value, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_resource_metadata_scope_and_error() {
        let c = Challenge::parse(
            r#"Bearer error="insufficient_scope", scope="files:read files:write", resource_metadata="https://mcp.example.com/.well-known/oauth-protected-resource/mcp""#,
        )
        .unwrap();
        assert_eq!(
            c.resource_metadata.as_deref(),
            Some("https://mcp.example.com/.well-known/oauth-protected-resource/mcp")
        );
        assert_eq!(
            c.scopes,
            Some(vec!["files:read".to_owned(), "files:write".to_owned()])
        );
        assert!(c.insufficient_scope());
    }

    #[test]
    fn finds_bearer_among_other_schemes_and_unquoted_values() {
        let c =
            Challenge::parse(r#"Basic realm="x", Bearer error=invalid_token, DPoP algs="ES256""#)
                .unwrap();
        assert_eq!(c.error.as_deref(), Some("invalid_token"));
        assert_eq!(c.resource_metadata, None);
        assert_eq!(Challenge::parse("bearer").unwrap(), Challenge::default());
    }

    #[test]
    fn no_bearer_or_garbage_is_none_without_panicking() {
        assert_eq!(Challenge::parse(r#"Basic realm="x""#), None);
        assert_eq!(Challenge::parse(""), None);
        assert_eq!(Challenge::parse("=,,\"\\"), None);
        let c = Challenge::parse("Bearer scope=\"unterminated").unwrap();
        assert_eq!(c.scopes, Some(vec!["unterminated".to_owned()]));
    }
}
