//! Who Manifold is at an authorization server: a Client ID Metadata Document, a
//! pre-registered client, or one registered dynamically (RFC 7591); and how it authenticates
//! at the token endpoint.

use std::fmt;

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use manifold_config::{ClientSettings, SigningKey};
use reqwest::{header, RequestBuilder, Url};
use serde::{Deserialize, Serialize};

use super::{now_ms, parse_json, pkce::random_token, send, AuthServerMetadata, OAuthError};

/// How a client proves itself at the token endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AuthMethod {
    /// A public client: `client_id` in the form.
    None,
    /// `client_secret_basic`.
    Basic,
    /// `client_secret_post`.
    Post,
    /// `private_key_jwt` (RFC 7523): a signed assertion.
    PrivateKeyJwt,
}

/// A client at one authorization server. Its Debug form shows no secret.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct ClientIdentity {
    pub client_id: String,
    pub client_secret: Option<String>,
    pub method: AuthMethod,
}

impl fmt::Debug for ClientIdentity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClientIdentity")
            .field("client_id", &self.client_id)
            .field("method", &self.method)
            .finish()
    }
}

/// The method for a client with (or without) a secret, as the server's metadata prefers:
/// `client_secret_basic` unless only `client_secret_post` is offered.
pub fn secret_method(metadata: &AuthServerMetadata, has_secret: bool) -> AuthMethod {
    if !has_secret {
        AuthMethod::None
    } else if !metadata.accepts_auth_method("client_secret_basic")
        && metadata.accepts_auth_method("client_secret_post")
    {
        AuthMethod::Post
    } else {
        AuthMethod::Basic
    }
}

/// Manifold's client at an authorization server when it needs no registration, in this
/// order: an operator-hosted Client ID Metadata Document, the pre-registered client,
/// Manifold's own document. `None`: dynamic registration is what is left.
pub fn configured(
    settings: &ClientSettings,
    own_document: Option<&str>,
    metadata: &AuthServerMetadata,
) -> Option<ClientIdentity> {
    let document = |url: &str| ClientIdentity {
        client_id: url.to_owned(),
        client_secret: None,
        method: AuthMethod::None,
    };
    let cimd = metadata.client_id_metadata_document_supported;
    if let (true, Some(url)) = (cimd, settings.metadata_url.as_deref()) {
        return Some(document(url));
    }
    if let Some(client_id) = &settings.client_id {
        return Some(pre_registered(client_id, settings, metadata));
    }
    own_document.filter(|_| cimd).map(document)
}

/// The pre-registered client, authenticating as the server's metadata prefers.
pub fn pre_registered(
    client_id: &str,
    settings: &ClientSettings,
    metadata: &AuthServerMetadata,
) -> ClientIdentity {
    let secret = settings
        .client_secret
        .as_ref()
        .map(|s| s.expose().to_owned());
    ClientIdentity {
        client_id: client_id.to_owned(),
        method: secret_method(metadata, secret.is_some()),
        client_secret: secret,
    }
}

#[derive(Deserialize)]
struct Registered {
    client_id: String,
    client_secret: Option<String>,
    token_endpoint_auth_method: Option<String>,
}

/// Registers Manifold (RFC 7591): a public client when the server accepts one, else one with
/// a secret.
pub async fn register(
    http: &reqwest::Client,
    endpoint: &str,
    metadata: &AuthServerMetadata,
    redirect_uri: &str,
) -> Result<ClientIdentity, OAuthError> {
    let method = if metadata.accepts_auth_method("none") {
        "none"
    } else if metadata.accepts_auth_method("client_secret_basic") {
        "client_secret_basic"
    } else {
        "client_secret_post"
    };
    let loopback = Url::parse(redirect_uri)
        .ok()
        .and_then(|u| {
            u.host_str()
                .map(|h| h == "127.0.0.1" || h == "localhost" || h == "[::1]")
        })
        .unwrap_or(false);
    let body = serde_json::json!({
        "client_name": "Manifold",
        "redirect_uris": [redirect_uri],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": method,
        "application_type": if loopback { "native" } else { "web" },
    });
    let request = http
        .post(endpoint)
        .header(header::ACCEPT, "application/json")
        .header(header::CONTENT_TYPE, "application/json")
        .body(body.to_string());
    let answer = send(request, endpoint).await?;
    if !answer.status.is_success() {
        return Err(OAuthError::Invalid(format!(
            "{endpoint} refused the registration (status {})",
            answer.status.as_u16()
        )));
    }
    let registered: Registered = parse_json(&answer, endpoint)?;
    // The method the server registered, else the one asked for; one that needs a secret
    // without a secret given is a public client's.
    let registered_method = registered.token_endpoint_auth_method.as_deref();
    let method = match (
        registered_method.unwrap_or(method),
        &registered.client_secret,
    ) {
        ("client_secret_post", Some(_)) => AuthMethod::Post,
        ("client_secret_basic", Some(_)) => AuthMethod::Basic,
        _ => AuthMethod::None,
    };
    Ok(ClientIdentity {
        client_id: registered.client_id,
        client_secret: registered.client_secret,
        method,
    })
}

/// Adds the client's authentication to a token request (`form` is sent as the body).
pub fn authenticate(
    request: RequestBuilder,
    form: &mut Vec<(&'static str, String)>,
    client: &ClientIdentity,
    key: Option<&SigningKey>,
    audience: &str,
) -> Result<RequestBuilder, OAuthError> {
    match (client.method, &client.client_secret, key) {
        (AuthMethod::PrivateKeyJwt, _, Some(key)) => {
            form.push(("client_id", client.client_id.clone()));
            form.push((
                "client_assertion_type",
                "urn:ietf:params:oauth:client-assertion-type:jwt-bearer".to_owned(),
            ));
            form.push((
                "client_assertion",
                assertion(&client.client_id, key, audience)?,
            ));
            Ok(request)
        }
        (AuthMethod::Basic, Some(secret), _) => {
            // RFC 6749 section 2.3.1: both parts are form-encoded before base64.
            let pair = format!("{}:{}", form_encode(&client.client_id), form_encode(secret));
            let value = format!("Basic {}", STANDARD.encode(pair));
            Ok(request.header(header::AUTHORIZATION, value))
        }
        (AuthMethod::Post, Some(secret), _) => {
            form.push(("client_id", client.client_id.clone()));
            form.push(("client_secret", secret.clone()));
            Ok(request)
        }
        _ => {
            form.push(("client_id", client.client_id.clone()));
            Ok(request)
        }
    }
}

/// `application/x-www-form-urlencoded` of one value.
fn form_encode(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => out.push_str(&format!("%{byte:02X}")),
        }
    }
    out
}

#[derive(Serialize)]
struct AssertionClaims<'a> {
    iss: &'a str,
    sub: &'a str,
    aud: &'a str,
    jti: String,
    iat: u64,
    exp: u64,
}

/// A `private_key_jwt` client assertion for `audience`, valid 5 minutes. The audience is the
/// authorization server's issuer identifier, one string, as RFC 7523's update requires (the
/// token endpoint's URL, which RFC 7523 also allowed, is open to an assertion meant for one
/// server being replayed at another); only when no issuer is known (a token endpoint given
/// without discovery) is it the endpoint's URL.
pub fn assertion(client_id: &str, key: &SigningKey, audience: &str) -> Result<String, OAuthError> {
    let algorithm: Algorithm = key.algorithm.parse().map_err(|_| {
        OAuthError::Invalid(format!("unknown signing algorithm {:?}", key.algorithm))
    })?;
    let pem = key.pem.expose().as_bytes();
    let encoding = match algorithm {
        Algorithm::ES256 | Algorithm::ES384 => EncodingKey::from_ec_pem(pem),
        Algorithm::EdDSA => EncodingKey::from_ed_pem(pem),
        _ => EncodingKey::from_rsa_pem(pem),
    }
    .map_err(|_| {
        OAuthError::Invalid(format!("the {} signing key cannot be read", key.algorithm))
    })?;
    let mut header = Header::new(algorithm);
    header.kid.clone_from(&key.key_id);
    let now = now_ms() / 1000;
    let claims = AssertionClaims {
        iss: client_id,
        sub: client_id,
        aud: audience,
        jti: random_token()?,
        iat: now,
        exp: now + 300,
    };
    jsonwebtoken::encode(&header, &claims, &encoding)
        .map_err(|_| OAuthError::Invalid("the client assertion could not be signed".to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn metadata(methods: Option<&[&str]>) -> AuthServerMetadata {
        AuthServerMetadata {
            issuer: "https://as.example".to_owned(),
            token_endpoint_auth_methods_supported: methods
                .map(|m| m.iter().map(|s| (*s).to_owned()).collect()),
            ..AuthServerMetadata::default()
        }
    }

    #[test]
    fn the_secret_method_follows_the_metadata() {
        assert_eq!(secret_method(&metadata(None), true), AuthMethod::Basic);
        assert_eq!(
            secret_method(&metadata(Some(&["client_secret_post"])), true),
            AuthMethod::Post
        );
        assert_eq!(
            secret_method(
                &metadata(Some(&["client_secret_basic", "client_secret_post"])),
                true
            ),
            AuthMethod::Basic
        );
        assert_eq!(secret_method(&metadata(None), false), AuthMethod::None);
    }

    #[test]
    fn basic_credentials_are_form_encoded() {
        assert_eq!(form_encode("a b:c"), "a+b%3Ac");
    }

    #[test]
    fn a_bad_key_is_a_clear_error_without_the_key() {
        let key = SigningKey {
            pem: manifold_config::Secret::new("-----BEGIN SECRET-----"),
            algorithm: "RS256".to_owned(),
            key_id: None,
        };
        let error = assertion("c", &key, "https://as.example/token").unwrap_err();
        assert!(!error.to_string().contains("BEGIN"), "{error}");
    }
}
