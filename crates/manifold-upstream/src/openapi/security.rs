//! What a call sends for the security its operation asks for: each scheme's configured value
//! where the scheme says (a header, the query, a cookie, `Authorization`), and for OAuth 2 and
//! OpenID Connect schemes the bearer token of the upstream's [`Credential`]. An operation none
//! of whose alternatives can be met is refused before any request, naming what is missing.

use std::collections::BTreeMap;
use std::sync::Arc;

use base64::Engine;
use manifold_config::Secret;
use manifold_openapi::{ApiKeyLocation, HttpRequest, Operation, SecurityNeed};

use crate::credential::Credential;

/// The values an upstream has for its description's schemes.
pub(crate) struct Keys {
    pub(crate) values: BTreeMap<String, Secret>,
    /// The token source of `[upstreams.NAME.auth]`, for OAuth 2 and OpenID Connect schemes.
    pub(crate) credential: Option<Arc<dyn Credential>>,
}

impl Keys {
    /// Whether `need` can be met: a configured value, or a token source for OAuth 2.
    fn meets(&self, need: &SecurityNeed) -> bool {
        self.meets_with(need, self.credential.is_some())
    }

    fn meets_with(&self, need: &SecurityNeed, token_source: bool) -> bool {
        match need {
            SecurityNeed::OAuth2 { scheme, .. } | SecurityNeed::OpenIdConnect { scheme, .. } => {
                self.values.contains_key(scheme) || token_source
            }
            SecurityNeed::Other { .. } => false,
            other => self.values.contains_key(scheme_of(other)),
        }
    }

    /// The first alternative of `op` whose every scheme can be met; `Err` says which schemes
    /// have no value. An operation that declares none needs nothing.
    pub(crate) fn choose<'a>(&self, op: &'a Operation) -> Result<&'a [SecurityNeed], String> {
        if op.security.is_empty() {
            return Ok(&[]);
        }
        if let Some(met) = op
            .security
            .iter()
            .find(|alt| alt.iter().all(|need| self.meets(need)))
        {
            return Ok(met);
        }
        let wanted: Vec<String> = op
            .security
            .iter()
            .map(|alt| {
                let names: Vec<&str> = alt
                    .iter()
                    .filter(|need| !self.meets(need))
                    .map(scheme_of)
                    .collect();
                names.join(" and ")
            })
            .collect();
        Err(format!(
            "{} needs security scheme {}, which has no value: set it in [upstreams.<name>.security]{}",
            op.name,
            wanted.join(" or "),
            if op.security.iter().flatten().any(is_oauth) {
                " (or [upstreams.<name>.auth] for OAuth 2)"
            } else {
                ""
            }
        ))
    }

    /// Adds the values of `needs` to `request`; `token` is the credential's bearer token, for
    /// the OAuth 2 schemes without a value of their own.
    pub(crate) fn apply(&self, needs: &[SecurityNeed], token: Option<&str>, req: &mut HttpRequest) {
        for need in needs {
            let value = self.values.get(scheme_of(need)).map(Secret::expose);
            match need {
                SecurityNeed::ApiKey { location, name, .. } => {
                    let Some(value) = value else { continue };
                    match location {
                        ApiKeyLocation::Header => req.headers.push((name.clone(), value.into())),
                        ApiKeyLocation::Query => add_query(req, name, value),
                        ApiKeyLocation::Cookie => add_cookie(req, name, value),
                    }
                }
                SecurityNeed::Bearer { .. } => {
                    if let Some(value) = value {
                        authorization(req, format!("Bearer {value}"));
                    }
                }
                SecurityNeed::Basic { .. } => {
                    if let Some(value) = value {
                        let encoded = base64::engine::general_purpose::STANDARD.encode(value);
                        authorization(req, format!("Basic {encoded}"));
                    }
                }
                SecurityNeed::OAuth2 { .. } | SecurityNeed::OpenIdConnect { .. } => {
                    if let Some(token) = value.or(token) {
                        authorization(req, format!("Bearer {token}"));
                    }
                }
                SecurityNeed::Other { .. } => {}
            }
        }
    }

    /// Whether `needs` takes its bearer token from the credential (so a refusal is told to it).
    pub(crate) fn uses_credential(&self, needs: &[SecurityNeed]) -> bool {
        self.credential.is_some()
            && needs
                .iter()
                .any(|n| is_oauth(n) && !self.values.contains_key(scheme_of(n)))
    }

    /// The schemes `ops` ask for that have no value (nor, for OAuth 2, a token source when
    /// `token_source` is false), each once, sorted.
    pub(crate) fn unconfigured<'a>(
        &self,
        ops: impl Iterator<Item = &'a Operation>,
        token_source: bool,
    ) -> Vec<String> {
        let mut names: Vec<String> = ops
            .flat_map(|op| op.security.iter().flatten())
            .filter(|need| !self.meets_with(need, token_source))
            .map(|need| scheme_of(need).to_owned())
            .collect();
        names.sort_unstable();
        names.dedup();
        names
    }
}

/// A team's values for an upstream's schemes: each of the team's `headers.<upstream>` keys
/// written `security.SCHEME` replaces that scheme's value on the team's connection.
pub(crate) fn team_security(
    values: &mut BTreeMap<String, Secret>,
    team_headers: &BTreeMap<String, String>,
) {
    for (name, value) in team_headers {
        if let Some(scheme) = name.strip_prefix("security.") {
            values.insert(scheme.to_owned(), Secret::new(value.clone()));
        }
    }
}

fn is_oauth(need: &SecurityNeed) -> bool {
    matches!(
        need,
        SecurityNeed::OAuth2 { .. } | SecurityNeed::OpenIdConnect { .. }
    )
}

fn scheme_of(need: &SecurityNeed) -> &str {
    match need {
        SecurityNeed::ApiKey { scheme, .. }
        | SecurityNeed::Bearer { scheme }
        | SecurityNeed::Basic { scheme }
        | SecurityNeed::OAuth2 { scheme, .. }
        | SecurityNeed::OpenIdConnect { scheme, .. }
        | SecurityNeed::Other { scheme, .. } => scheme,
    }
}

/// One `Authorization` header: a second scheme of the same alternative replaces the first
/// (HTTP has one such header; descriptions that ask for two cannot be met otherwise).
fn authorization(req: &mut HttpRequest, value: String) {
    req.headers
        .retain(|(name, _)| !name.eq_ignore_ascii_case("authorization"));
    req.headers.push(("Authorization".to_owned(), value));
}

fn add_query(req: &mut HttpRequest, name: &str, value: &str) {
    let joint = if req.url.contains('?') { '&' } else { '?' };
    req.url = format!("{}{joint}{}={}", req.url, encode(name), encode(value));
}

fn add_cookie(req: &mut HttpRequest, name: &str, value: &str) {
    let pair = format!("{name}={}", encode(value));
    match req
        .headers
        .iter_mut()
        .find(|(n, _)| n.eq_ignore_ascii_case("cookie"))
    {
        Some((_, existing)) => {
            existing.push_str("; ");
            existing.push_str(&pair);
        }
        None => req.headers.push(("Cookie".to_owned(), pair)),
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "security_tests.rs"]
mod tests;
