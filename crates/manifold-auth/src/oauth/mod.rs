//! The OAuth protocol as the MCP authorization specification's client speaks it: the
//! challenge an upstream answers with, discovery of its metadata, the client's identity at an
//! authorization server, PKCE, and the token endpoint's grants.
//!
//! Every request is bounded by one timeout and reads at most [`BODY_LIMIT`] bytes; nothing
//! here logs or returns a secret in an error's text.

pub mod authorize;
pub mod challenge;
pub mod client;
pub mod discovery;
pub mod pkce;
pub mod token;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::{header, Method, RequestBuilder, StatusCode};
use serde::de::DeserializeOwned;

pub use challenge::Challenge;
pub use discovery::{AuthServerMetadata, Discovered, ResourceMetadata};

/// The most any metadata document or token answer may weigh.
pub const BODY_LIMIT: usize = 256 * 1024;

/// Why a step of the protocol failed. Texts name the URL and what was wrong, never a secret.
#[derive(Clone, Debug, thiserror::Error)]
pub enum OAuthError {
    /// No answer in time, or no connection.
    #[error("{0}")]
    Unreachable(String),
    /// The server answered with an OAuth error (`error`, e.g. `invalid_grant`).
    #[error("{endpoint} refused: {error}")]
    Refused { endpoint: String, error: String },
    /// The answer was not what the protocol says (HTML, a lie in metadata, a missing field).
    #[error("{0}")]
    Invalid(String),
}

impl OAuthError {
    /// Whether the server refused a grant as spent or revoked: the caller must authorize anew.
    pub fn is_invalid_grant(&self) -> bool {
        matches!(self, Self::Refused { error, .. } if error == "invalid_grant")
    }
}

/// An HTTP client for authorization servers: one timeout, no redirects followed (a metadata
/// or token endpoint that redirects is not trusted to mean it).
pub fn http_client(timeout: Duration) -> Result<reqwest::Client, OAuthError> {
    reqwest::Client::builder()
        .timeout(timeout)
        .connect_timeout(timeout)
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .map_err(|e| OAuthError::Invalid(format!("cannot build an HTTP client: {e}")))
}

/// One answer, read whole up to [`BODY_LIMIT`].
pub struct Answer {
    pub status: StatusCode,
    pub content_type: String,
    pub www_authenticate: Option<String>,
    pub body: Vec<u8>,
}

/// Sends `request` and reads its answer, bounded in size (the timeout is the client's).
pub async fn send(request: RequestBuilder, what: &str) -> Result<Answer, OAuthError> {
    let mut response = request
        .send()
        .await
        .map_err(|e| OAuthError::Unreachable(describe_failure(what, &e)))?;
    let status = response.status();
    let text_of = |name| {
        response
            .headers()
            .get(name)
            .and_then(|v: &header::HeaderValue| v.to_str().ok())
            .map(str::to_owned)
    };
    let content_type = text_of(header::CONTENT_TYPE).unwrap_or_default();
    let www_authenticate = text_of(header::WWW_AUTHENTICATE);
    let mut body = Vec::new();
    loop {
        match response.chunk().await {
            Ok(Some(chunk)) => {
                if body.len() + chunk.len() > BODY_LIMIT {
                    return Err(OAuthError::Invalid(format!(
                        "{what} answered more than {BODY_LIMIT} bytes"
                    )));
                }
                body.extend_from_slice(&chunk);
            }
            Ok(None) => break,
            Err(e) => return Err(OAuthError::Unreachable(describe_failure(what, &e))),
        }
    }
    Ok(Answer {
        status,
        content_type,
        www_authenticate,
        body,
    })
}

fn describe_failure(what: &str, error: &reqwest::Error) -> String {
    if error.is_timeout() {
        format!("{what} did not answer in time")
    } else if error.is_connect() {
        format!("{what} could not be reached")
    } else {
        // The URL is left out: a query could carry something that is not for a log.
        let kind = if error.is_decode() || error.is_body() {
            "an unreadable answer"
        } else if error.is_request() {
            "a request error"
        } else {
            "an HTTP error"
        };
        format!("{what} failed with {kind}")
    }
}

/// GETs a JSON document: `Ok(None)` for 404 (and the other answers that mean "not here"),
/// an error for an answer that is there but not a JSON object of the expected shape.
pub async fn get_json<T: DeserializeOwned>(
    http: &reqwest::Client,
    url: &str,
) -> Result<Option<T>, OAuthError> {
    let request = http
        .request(Method::GET, url)
        .header(header::ACCEPT, "application/json");
    let answer = send(request, url).await?;
    if !answer.status.is_success() {
        return Ok(None);
    }
    parse_json(&answer, url).map(Some)
}

/// The answer's body as `T`, or a clear error naming what came instead.
pub fn parse_json<T: DeserializeOwned>(answer: &Answer, what: &str) -> Result<T, OAuthError> {
    serde_json::from_slice(&answer.body).map_err(|e| {
        let kind = if answer.content_type.contains("html") {
            "an HTML page".to_owned()
        } else if answer.content_type.is_empty() {
            "a body that is not JSON".to_owned()
        } else {
            // serde's own text may quote a value from the body: only where it broke is told.
            format!(
                "{} that is not the expected JSON ({:?} error at line {}, column {})",
                answer.content_type,
                e.classify(),
                e.line(),
                e.column()
            )
        };
        OAuthError::Invalid(format!(
            "{what} answered {kind} (status {})",
            answer.status.as_u16()
        ))
    })
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(content_type: &str, body: &str) -> Answer {
        Answer {
            status: StatusCode::OK,
            content_type: content_type.to_owned(),
            www_authenticate: None,
            body: body.as_bytes().to_vec(),
        }
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Token {
        access_token: u64,
    }

    #[test]
    fn a_body_of_the_wrong_shape_is_named_without_quoting_it() {
        let wrong = answer("application/json", r#"{"access_token":"s3cret-value"}"#);
        let error = parse_json::<Token>(&wrong, "https://as/token")
            .unwrap_err()
            .to_string();
        assert!(!error.contains("s3cret"), "{error}");
        assert!(error.contains("https://as/token"), "{error}");
        let html = answer("text/html; charset=utf-8", "<html>");
        let error = parse_json::<Token>(&html, "https://as/token")
            .unwrap_err()
            .to_string();
        assert!(error.contains("an HTML page (status 200)"), "{error}");
    }
}
