//! The authorization request (the URL a browser is sent to) and the redirect back to
//! Manifold: scopes chosen, the authorization URL built, the callback's `iss` checked.

use reqwest::Url;

use super::{AuthServerMetadata, OAuthError};

/// The scopes to ask for: the operator's, else the challenge's, else the resource's
/// `scopes_supported`, else none; plus `offline_access` when the authorization server offers
/// it (so that a refresh token is granted).
pub fn choose_scopes(
    configured: Option<&[String]>,
    challenged: Option<&[String]>,
    resource_scopes: Option<&[String]>,
    metadata: &AuthServerMetadata,
) -> Vec<String> {
    let mut scopes: Vec<String> = configured
        .or(challenged)
        .or(resource_scopes)
        .map(<[String]>::to_vec)
        .unwrap_or_default();
    if metadata.offers_scope("offline_access") && !scopes.iter().any(|s| s == "offline_access") {
        scopes.push("offline_access".to_owned());
    }
    scopes
}

/// The union of two scope lists, in order, without repeats.
pub fn union(granted: &[String], more: &[String]) -> Vec<String> {
    let mut all = granted.to_vec();
    for scope in more {
        if !all.contains(scope) {
            all.push(scope.clone());
        }
    }
    all
}

/// What the authorization URL carries.
pub struct AuthorizationRequest<'a> {
    pub endpoint: &'a str,
    pub client_id: &'a str,
    pub redirect_uri: &'a str,
    pub code_challenge: &'a str,
    pub state: &'a str,
    pub resource: &'a str,
    pub scopes: &'a [String],
}

/// The authorization endpoint with `response_type=code`, PKCE S256, state, resource and
/// scope (omitted when there is none to ask for).
pub fn authorization_url(request: &AuthorizationRequest<'_>) -> Result<String, OAuthError> {
    let mut url = Url::parse(request.endpoint).map_err(|_| {
        OAuthError::Invalid(format!(
            "the authorization endpoint {:?} is not a URL",
            request.endpoint
        ))
    })?;
    {
        let mut query = url.query_pairs_mut();
        query
            .append_pair("response_type", "code")
            .append_pair("client_id", request.client_id)
            .append_pair("redirect_uri", request.redirect_uri)
            .append_pair("code_challenge", request.code_challenge)
            .append_pair("code_challenge_method", "S256")
            .append_pair("state", request.state)
            .append_pair("resource", request.resource);
        if !request.scopes.is_empty() {
            query.append_pair("scope", &request.scopes.join(" "));
        }
    }
    Ok(url.into())
}

/// Refuses a server that does not say it supports PKCE with S256.
pub fn require_s256(metadata: &AuthServerMetadata) -> Result<(), OAuthError> {
    let s256 = metadata
        .code_challenge_methods_supported
        .as_ref()
        .is_some_and(|m| m.iter().any(|x| x == "S256"));
    if s256 {
        Ok(())
    } else {
        Err(OAuthError::Invalid(format!(
            "{} does not advertise PKCE with S256 (code_challenge_methods_supported)",
            metadata.issuer
        )))
    }
}

/// The redirect's parameters.
#[derive(Debug, Default)]
pub struct CallbackQuery {
    pub code: Option<String>,
    pub state: Option<String>,
    pub iss: Option<String>,
    pub error: Option<String>,
}

pub fn parse_callback(query: &str) -> CallbackQuery {
    let mut parsed = CallbackQuery::default();
    let pairs = reqwest::Url::parse("http://callback.invalid/")
        .map(|mut u| {
            u.set_query(Some(query.trim_start_matches('?')));
            u.query_pairs()
                .map(|(k, v)| (k.into_owned(), v.into_owned()))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default();
    for (name, value) in pairs {
        let slot = match name.as_str() {
            "code" => &mut parsed.code,
            "state" => &mut parsed.state,
            "iss" => &mut parsed.iss,
            "error" => &mut parsed.error,
            _ => continue,
        };
        // A repeated parameter is refused by keeping neither (RFC 6749 section 3.1).
        *slot = if slot.is_some() {
            Some(String::new())
        } else {
            Some(value)
        };
    }
    parsed
}

/// RFC 9207: an `iss` that is there must be the issuer exactly (no normalisation); one that
/// is missing is refused when the server advertises sending it.
pub fn check_iss(iss: Option<&str>, issuer: &str, advertised: bool) -> Result<(), OAuthError> {
    match iss {
        Some(iss) if iss == issuer => Ok(()),
        Some(_) => Err(OAuthError::Invalid(format!(
            "the authorization response came from another issuer than {issuer}"
        ))),
        None if advertised => Err(OAuthError::Invalid(format!(
            "the authorization response from {issuer} lacks its iss parameter"
        ))),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(s: &[&str]) -> Vec<String> {
        s.iter().map(|x| (*x).to_owned()).collect()
    }

    #[test]
    fn scopes_come_from_the_challenge_then_the_resource_plus_offline_access() {
        let mut metadata = AuthServerMetadata::default();
        let challenged = strings(&["a"]);
        let supported = strings(&["b", "c"]);
        assert_eq!(
            choose_scopes(None, Some(&challenged), Some(&supported), &metadata),
            ["a"]
        );
        assert_eq!(
            choose_scopes(None, None, Some(&supported), &metadata),
            ["b", "c"]
        );
        assert!(choose_scopes(None, None, None, &metadata).is_empty());
        metadata.scopes_supported = Some(strings(&["offline_access"]));
        assert_eq!(
            choose_scopes(None, None, None, &metadata),
            ["offline_access"]
        );
        let configured = strings(&["x"]);
        assert_eq!(
            choose_scopes(Some(&configured), Some(&challenged), None, &metadata),
            ["x", "offline_access"]
        );
    }

    #[test]
    fn the_authorization_url_carries_pkce_state_resource_and_scope() {
        let scopes = strings(&["a", "b"]);
        let url = authorization_url(&AuthorizationRequest {
            endpoint: "https://as.example/authorize?tenant=1",
            client_id: "https://m.example/oauth/client.json",
            redirect_uri: "https://m.example/oauth/callback",
            code_challenge: "CH",
            state: "ST",
            resource: "https://up.example/mcp",
            scopes: &scopes,
        })
        .unwrap();
        let parsed = Url::parse(&url).unwrap();
        let pairs: Vec<(String, String)> = parsed.query_pairs().into_owned().collect();
        let get = |k: &str| pairs.iter().find(|(n, _)| n == k).map(|(_, v)| v.as_str());
        assert_eq!(get("tenant"), Some("1"));
        assert_eq!(get("response_type"), Some("code"));
        assert_eq!(get("code_challenge_method"), Some("S256"));
        assert_eq!(get("state"), Some("ST"));
        assert_eq!(get("resource"), Some("https://up.example/mcp"));
        assert_eq!(get("scope"), Some("a b"));
    }

    #[test]
    fn iss_is_compared_exactly() {
        assert!(check_iss(Some("https://as.example"), "https://as.example", true).is_ok());
        assert!(check_iss(Some("https://as.example/"), "https://as.example", true).is_err());
        assert!(check_iss(Some("https://evil.example"), "https://as.example", false).is_err());
        assert!(check_iss(None, "https://as.example", true).is_err());
        assert!(check_iss(None, "https://as.example", false).is_ok());
    }

    #[test]
    fn the_callback_query_is_read_and_repeats_are_void() {
        let q = parse_callback("code=c%20d&state=s&iss=https%3A%2F%2Fas");
        assert_eq!(q.code.as_deref(), Some("c d"));
        assert_eq!(q.iss.as_deref(), Some("https://as"));
        let q = parse_callback("state=a&state=b");
        assert_eq!(q.state.as_deref(), Some(""));
    }

    #[test]
    fn pkce_must_be_advertised() {
        let mut metadata = AuthServerMetadata::default();
        assert!(require_s256(&metadata).is_err());
        metadata.code_challenge_methods_supported = Some(strings(&["plain"]));
        assert!(require_s256(&metadata).is_err());
        metadata.code_challenge_methods_supported = Some(strings(&["S256"]));
        assert!(require_s256(&metadata).is_ok());
    }
}
