//! The token endpoint: the authorization code redeemed, refresh, client credentials, token
//! exchange (RFC 8693) and the JWT-bearer grant (RFC 7523), all one request shape.

use std::fmt;

use manifold_config::SigningKey;
use reqwest::header;
use serde::Deserialize;

use super::client::{authenticate, ClientIdentity};
use super::{now_ms, parse_json, send, OAuthError};
use crate::store::Grant;

/// What a token endpoint answers. Its Debug form shows no token.
#[derive(Clone, Deserialize)]
pub struct TokenAnswer {
    pub access_token: String,
    #[serde(default)]
    pub token_type: Option<String>,
    #[serde(default)]
    pub expires_in: Option<u64>,
    #[serde(default)]
    pub refresh_token: Option<String>,
    #[serde(default)]
    pub scope: Option<String>,
    /// For token exchange: what was issued (an ID-JAG is
    /// `urn:ietf:params:oauth:token-type:id-jag`).
    #[serde(default)]
    pub issued_token_type: Option<String>,
}

impl fmt::Debug for TokenAnswer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenAnswer")
            .field("token_type", &self.token_type)
            .field("expires_in", &self.expires_in)
            .field("refreshable", &self.refresh_token.is_some())
            .field("scope", &self.scope)
            .finish()
    }
}

#[derive(Deserialize)]
struct ErrorAnswer {
    error: String,
}

/// Where a grant is asked for, and by whom.
pub struct Endpoint<'a> {
    pub url: &'a str,
    /// `None`: the endpoint is not told who asks (a token exchange without a client).
    pub client: Option<&'a ClientIdentity>,
    pub key: Option<&'a SigningKey>,
    /// The authorization server's issuer identifier, when discovery found it: the audience of
    /// a client assertion (the token endpoint's URL otherwise).
    pub issuer: Option<&'a str>,
}

/// Posts a grant to the token endpoint and reads its answer: an OAuth error is
/// [`OAuthError::Refused`], HTML or garbage a clear [`OAuthError::Invalid`].
pub async fn request(
    http: &reqwest::Client,
    endpoint: &Endpoint<'_>,
    mut form: Vec<(&'static str, String)>,
) -> Result<TokenAnswer, OAuthError> {
    let builder = http
        .post(endpoint.url)
        .header(header::ACCEPT, "application/json");
    let builder = match endpoint.client {
        Some(client) => {
            let audience = endpoint.issuer.unwrap_or(endpoint.url);
            authenticate(builder, &mut form, client, endpoint.key, audience)?
        }
        None => builder,
    };
    let answer = send(builder.form(&form), endpoint.url).await?;
    if answer.status.is_success() {
        let token: TokenAnswer = parse_json(&answer, endpoint.url)?;
        if token.access_token.is_empty() {
            return Err(OAuthError::Invalid(format!(
                "{} answered an empty access token",
                endpoint.url
            )));
        }
        return Ok(token);
    }
    match serde_json::from_slice::<ErrorAnswer>(&answer.body) {
        Ok(refusal) => Err(OAuthError::Refused {
            endpoint: endpoint.url.to_owned(),
            error: printable(&refusal.error),
        }),
        Err(_) => Err(parse_json::<ErrorAnswer>(&answer, endpoint.url)
            .err()
            .unwrap_or_else(|| OAuthError::Invalid(format!("{} failed", endpoint.url)))),
    }
}

/// An error code as the server sent it, kept short and printable (it goes into messages).
fn printable(code: &str) -> String {
    code.chars()
        .filter(|c| c.is_ascii_graphic())
        .take(64)
        .collect()
}

/// The authorization code grant, with the PKCE verifier and the resource (RFC 8707).
pub fn code_form(
    code: &str,
    verifier: &str,
    redirect_uri: &str,
    resource: &str,
) -> Vec<(&'static str, String)> {
    vec![
        ("grant_type", "authorization_code".to_owned()),
        ("code", code.to_owned()),
        ("code_verifier", verifier.to_owned()),
        ("redirect_uri", redirect_uri.to_owned()),
        ("resource", resource.to_owned()),
    ]
}

pub fn refresh_form(refresh_token: &str, resource: &str) -> Vec<(&'static str, String)> {
    vec![
        ("grant_type", "refresh_token".to_owned()),
        ("refresh_token", refresh_token.to_owned()),
        ("resource", resource.to_owned()),
    ]
}

pub fn client_credentials_form(scopes: &[String], resource: &str) -> Vec<(&'static str, String)> {
    let mut form = vec![
        ("grant_type", "client_credentials".to_owned()),
        ("resource", resource.to_owned()),
    ];
    push_scopes(&mut form, scopes);
    form
}

/// RFC 8693: `subject_token` of `subject_type`, for `audience`/`resource`, asking for
/// `requested` (an access token, or an ID-JAG).
pub struct Exchange<'a> {
    pub subject_token: &'a str,
    pub subject_type: &'a str,
    pub requested: Option<&'a str>,
    pub audience: Option<&'a str>,
    pub resource: Option<&'a str>,
    pub scopes: &'a [String],
}

pub fn exchange_form(exchange: &Exchange<'_>) -> Vec<(&'static str, String)> {
    let mut form = vec![
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:token-exchange".to_owned(),
        ),
        ("subject_token", exchange.subject_token.to_owned()),
        ("subject_token_type", exchange.subject_type.to_owned()),
    ];
    if let Some(requested) = exchange.requested {
        form.push(("requested_token_type", requested.to_owned()));
    }
    if let Some(audience) = exchange.audience {
        form.push(("audience", audience.to_owned()));
    }
    if let Some(resource) = exchange.resource {
        form.push(("resource", resource.to_owned()));
    }
    push_scopes(&mut form, exchange.scopes);
    form
}

/// RFC 7523's JWT-bearer grant (the identity assertion redeemed).
pub fn jwt_bearer_form(
    assertion: &str,
    scopes: &[String],
    resource: &str,
) -> Vec<(&'static str, String)> {
    let mut form = vec![
        (
            "grant_type",
            "urn:ietf:params:oauth:grant-type:jwt-bearer".to_owned(),
        ),
        ("assertion", assertion.to_owned()),
        ("resource", resource.to_owned()),
    ];
    push_scopes(&mut form, scopes);
    form
}

fn push_scopes(form: &mut Vec<(&'static str, String)>, scopes: &[String]) {
    if !scopes.is_empty() {
        form.push(("scope", scopes.join(" ")));
    }
}

/// What is kept of an answer: the scopes it says (else those asked for), its expiry, and a
/// refresh token (else, on a refresh, the one that was spent, which stays valid).
pub struct Keep<'a> {
    pub asked: &'a [String],
    pub issuer: Option<&'a str>,
    pub client_id: Option<&'a str>,
    pub principal: &'a str,
    pub previous_refresh: Option<&'a str>,
}

pub fn into_grant(answer: TokenAnswer, keep: &Keep<'_>) -> Grant {
    let now = now_ms();
    Grant {
        access_token: answer.access_token,
        token_type: answer.token_type.unwrap_or_else(|| "Bearer".to_owned()),
        expires_at_ms: answer
            .expires_in
            .map(|s| now.saturating_add(s.saturating_mul(1000))),
        refresh_token: answer
            .refresh_token
            .or_else(|| keep.previous_refresh.map(str::to_owned)),
        scopes: answer.scope.map_or_else(
            || keep.asked.to_vec(),
            |s| s.split_whitespace().map(str::to_owned).collect(),
        ),
        issuer: keep.issuer.map(str::to_owned),
        client_id: keep.client_id.map(str::to_owned),
        principal: keep.principal.to_owned(),
        obtained_at_ms: now,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_answer_debug_form_shows_no_token() {
        let answer: TokenAnswer = serde_json::from_str(
            r#"{"access_token":"sekrit","refresh_token":"r-sekrit","expires_in":60}"#,
        )
        .unwrap();
        let shown = format!("{answer:?}");
        assert!(!shown.contains("sekrit"), "{shown}");
    }

    #[test]
    fn a_refresh_without_a_new_refresh_token_keeps_the_old_one() {
        let answer: TokenAnswer =
            serde_json::from_str(r#"{"access_token":"a","scope":"x y"}"#).unwrap();
        let grant = into_grant(
            answer,
            &Keep {
                asked: &[],
                issuer: Some("https://as"),
                client_id: Some("c"),
                principal: "t/p",
                previous_refresh: Some("old"),
            },
        );
        assert_eq!(grant.refresh_token.as_deref(), Some("old"));
        assert_eq!(grant.scopes, ["x", "y"]);
        assert_eq!(grant.token_type, "Bearer");
        assert_eq!(grant.expires_at_ms, None);
    }

    #[test]
    fn error_codes_are_kept_printable_and_short() {
        assert_eq!(
            printable("invalid_grant\n<script>"),
            "invalid_grant<script>"
        );
        assert_eq!(printable(&"x".repeat(100)).len(), 64);
    }
}
