//! Discovery: the upstream's protected resource metadata (RFC 9728), then its authorization
//! server's metadata (RFC 8414 and OpenID Connect discovery), in the order the MCP
//! authorization specification gives, with the fallbacks of its 2025-03-26 revision.

use reqwest::{header, Url};
use serde::Deserialize;

use super::{get_json, Challenge, OAuthError};

/// RFC 9728 protected resource metadata (the fields a client uses).
#[derive(Clone, Debug, Deserialize)]
pub struct ResourceMetadata {
    pub resource: String,
    #[serde(default)]
    pub authorization_servers: Vec<String>,
    pub scopes_supported: Option<Vec<String>>,
}

/// RFC 8414 authorization server metadata (the fields a client uses).
#[derive(Clone, Debug, Default, Deserialize)]
pub struct AuthServerMetadata {
    pub issuer: String,
    pub authorization_endpoint: Option<String>,
    pub token_endpoint: Option<String>,
    pub registration_endpoint: Option<String>,
    pub scopes_supported: Option<Vec<String>>,
    pub code_challenge_methods_supported: Option<Vec<String>>,
    pub token_endpoint_auth_methods_supported: Option<Vec<String>>,
    #[serde(default)]
    pub client_id_metadata_document_supported: bool,
    #[serde(default)]
    pub authorization_response_iss_parameter_supported: bool,
}

impl AuthServerMetadata {
    /// Whether the server lists `method` among its token endpoint auth methods; RFC 8414's
    /// default when it lists none is `client_secret_basic`.
    pub fn accepts_auth_method(&self, method: &str) -> bool {
        match &self.token_endpoint_auth_methods_supported {
            Some(methods) => methods.iter().any(|m| m == method),
            None => method == "client_secret_basic",
        }
    }

    pub fn offers_scope(&self, scope: &str) -> bool {
        self.scopes_supported
            .as_ref()
            .is_some_and(|s| s.iter().any(|x| x == scope))
    }
}

/// Everything discovery found for one upstream.
#[derive(Clone, Debug)]
pub struct Discovered {
    /// The resource indicator (RFC 8707) to send, exactly as the resource metadata publishes
    /// it (the upstream's URL when it publishes none).
    pub resource: String,
    /// The resource's `scopes_supported`.
    pub resource_scopes: Option<Vec<String>>,
    /// The authorization server's issuer identifier, as named (exact string).
    pub issuer: String,
    pub metadata: AuthServerMetadata,
    /// False when the server published no metadata and the 2025-03-26 default endpoints
    /// are used.
    pub from_metadata: bool,
}

impl Discovered {
    pub fn token_endpoint(&self) -> Result<&str, OAuthError> {
        self.metadata
            .token_endpoint
            .as_deref()
            .ok_or_else(|| OAuthError::Invalid(format!("{} names no token endpoint", self.issuer)))
    }
}

/// Asks the upstream, without a token, for its challenge: a POST of a JSON-RPC ping, which a
/// protected MCP endpoint refuses with 401 and `WWW-Authenticate`.
pub async fn probe(
    http: &reqwest::Client,
    upstream: &str,
) -> Result<Option<Challenge>, OAuthError> {
    let request = http
        .post(upstream)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::ACCEPT, "application/json, text/event-stream")
        .body(r#"{"jsonrpc":"2.0","id":0,"method":"ping"}"#);
    // Only the status and the header are read: an upstream that answers with a stream
    // (no token needed after all) is not waited on.
    let response = request.send().await.map_err(|_| {
        OAuthError::Unreachable(format!("{upstream} could not be asked for its challenge"))
    })?;
    let refused = matches!(response.status().as_u16(), 401 | 403);
    Ok(response
        .headers()
        .get(header::WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .filter(|_| refused)
        .and_then(Challenge::parse))
}

/// Where an upstream's resource metadata may be: the challenge's URL, else the path-aware
/// well-known location, then the root one.
pub fn resource_metadata_urls(upstream: &Url, challenge: Option<&Challenge>) -> Vec<String> {
    if let Some(url) = challenge.and_then(|c| c.resource_metadata.clone()) {
        return vec![url];
    }
    let origin = upstream.origin().ascii_serialization();
    let path = upstream.path().trim_end_matches('/');
    let mut urls = Vec::new();
    if !path.is_empty() {
        urls.push(format!(
            "{origin}/.well-known/oauth-protected-resource{path}"
        ));
    }
    urls.push(format!("{origin}/.well-known/oauth-protected-resource"));
    urls
}

/// Where an authorization server's metadata may be, in the specification's order.
pub fn auth_server_metadata_urls(issuer: &Url) -> Vec<String> {
    let origin = issuer.origin().ascii_serialization();
    let path = issuer.path().trim_end_matches('/');
    if path.is_empty() {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server"),
            format!("{origin}/.well-known/openid-configuration"),
        ]
    } else {
        vec![
            format!("{origin}/.well-known/oauth-authorization-server{path}"),
            format!("{origin}/.well-known/openid-configuration{path}"),
            format!("{origin}{path}/.well-known/openid-configuration"),
        ]
    }
}

/// Refuses resource metadata whose `resource` is not the upstream (RFC 9728 section 3.3):
/// the same origin, and the upstream's path at or under the resource's.
pub fn check_resource(upstream: &Url, resource: &str) -> Result<(), OAuthError> {
    let lie = || {
        OAuthError::Invalid(format!(
            "the resource metadata of {upstream} names another resource ({resource})"
        ))
    };
    let named = Url::parse(resource).map_err(|_| lie())?;
    if named.fragment().is_some() || named.origin() != upstream.origin() {
        return Err(lie());
    }
    let base = named.path().trim_end_matches('/');
    let path = upstream.path();
    let under = path == base
        || path.trim_end_matches('/') == base
        || path.strip_prefix(base).is_some_and(|r| r.starts_with('/'));
    if under {
        Ok(())
    } else {
        Err(lie())
    }
}

/// The upstream's resource metadata, checked, or `None` when it publishes none.
pub async fn resource_metadata(
    http: &reqwest::Client,
    upstream: &Url,
    challenge: Option<&Challenge>,
) -> Result<Option<ResourceMetadata>, OAuthError> {
    for url in resource_metadata_urls(upstream, challenge) {
        if let Some(metadata) = get_json::<ResourceMetadata>(http, &url).await? {
            check_resource(upstream, &metadata.resource)?;
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

/// The metadata of the authorization server `issuer`, whose `issuer` must be that exact
/// string; `None` when none of the locations has any.
pub async fn auth_server_metadata(
    http: &reqwest::Client,
    issuer: &str,
) -> Result<Option<AuthServerMetadata>, OAuthError> {
    let url = Url::parse(issuer).map_err(|_| {
        OAuthError::Invalid(format!("{issuer:?} is not an authorization server URL"))
    })?;
    for location in auth_server_metadata_urls(&url) {
        if let Some(metadata) = get_json::<AuthServerMetadata>(http, &location).await? {
            if metadata.issuer != issuer {
                return Err(OAuthError::Invalid(format!(
                    "the metadata at {location} names issuer {:?}, not {issuer:?}",
                    metadata.issuer
                )));
            }
            return Ok(Some(metadata));
        }
    }
    Ok(None)
}

/// The 2025-03-26 defaults for a server without metadata: the endpoints at its origin.
fn default_endpoints(origin: &str) -> AuthServerMetadata {
    AuthServerMetadata {
        issuer: origin.to_owned(),
        authorization_endpoint: Some(format!("{origin}/authorize")),
        token_endpoint: Some(format!("{origin}/token")),
        registration_endpoint: Some(format!("{origin}/register")),
        code_challenge_methods_supported: Some(vec!["S256".to_owned()]),
        token_endpoint_auth_methods_supported: Some(vec![
            "none".to_owned(),
            "client_secret_basic".to_owned(),
            "client_secret_post".to_owned(),
        ]),
        ..AuthServerMetadata::default()
    }
}

/// Discovers the upstream's authorization server: `configured` (the operator's choice) or
/// the one its resource metadata names, else (2025-03-26) the upstream's origin.
pub async fn discover(
    http: &reqwest::Client,
    upstream: &str,
    configured: Option<&str>,
    challenge: Option<&Challenge>,
) -> Result<Discovered, OAuthError> {
    let url = Url::parse(upstream)
        .map_err(|_| OAuthError::Invalid(format!("{upstream:?} is not an upstream URL")))?;
    let resource = resource_metadata(http, &url, challenge).await?;
    let named = resource
        .as_ref()
        .and_then(|r| r.authorization_servers.first().cloned());
    let legacy = configured.is_none() && named.is_none();
    let issuer = match (configured, named) {
        (Some(issuer), _) => issuer.to_owned(),
        (None, Some(issuer)) => issuer,
        (None, None) => url.origin().ascii_serialization(),
    };
    let (metadata, from_metadata) = match auth_server_metadata(http, &issuer).await? {
        Some(metadata) => (metadata, true),
        None if legacy => (default_endpoints(&issuer), false),
        None => {
            return Err(OAuthError::Invalid(format!(
                "the authorization server {issuer} publishes no metadata"
            )))
        }
    };
    Ok(Discovered {
        resource: resource
            .as_ref()
            .map_or_else(|| upstream.to_owned(), |r| r.resource.clone()),
        resource_scopes: resource.and_then(|r| r.scopes_supported),
        issuer,
        metadata,
        from_metadata,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(text: &str) -> Url {
        Url::parse(text).unwrap()
    }

    #[test]
    fn resource_metadata_is_looked_for_path_aware_then_at_the_root() {
        assert_eq!(
            resource_metadata_urls(&url("https://h.example/tenant/mcp"), None),
            [
                "https://h.example/.well-known/oauth-protected-resource/tenant/mcp",
                "https://h.example/.well-known/oauth-protected-resource"
            ]
        );
        let challenge = Challenge {
            resource_metadata: Some("https://h.example/custom.json".to_owned()),
            ..Challenge::default()
        };
        assert_eq!(
            resource_metadata_urls(&url("https://h.example/mcp"), Some(&challenge)),
            ["https://h.example/custom.json"]
        );
    }

    #[test]
    fn auth_server_metadata_locations_follow_the_specification_order() {
        assert_eq!(
            auth_server_metadata_urls(&url("https://as.example/tenant1")),
            [
                "https://as.example/.well-known/oauth-authorization-server/tenant1",
                "https://as.example/.well-known/openid-configuration/tenant1",
                "https://as.example/tenant1/.well-known/openid-configuration"
            ]
        );
        assert_eq!(
            auth_server_metadata_urls(&url("https://as.example")),
            [
                "https://as.example/.well-known/oauth-authorization-server",
                "https://as.example/.well-known/openid-configuration"
            ]
        );
    }

    #[test]
    fn a_resource_that_is_not_the_upstream_is_refused() {
        let upstream = url("https://h.example/mcp");
        assert!(check_resource(&upstream, "https://h.example/mcp").is_ok());
        assert!(check_resource(&upstream, "https://h.example").is_ok());
        assert!(check_resource(&upstream, "https://h.example/").is_ok());
        assert!(check_resource(&upstream, "https://evil.example/mcp").is_err());
        assert!(check_resource(&upstream, "https://h.example/other").is_err());
        assert!(check_resource(&upstream, "https://h.example/mc").is_err());
        assert!(check_resource(&upstream, "http://h.example/mcp").is_err());
        assert!(check_resource(&upstream, "not a url").is_err());
    }
}
