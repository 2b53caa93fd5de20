//! The token of an upstream with `[upstreams.NAME.auth]` on every request: asked of the
//! connection's [`Credential`] before sending, and asked again once when the upstream refuses
//! it (401, or 403 with `insufficient_scope`), after which the request goes once more. A second
//! refusal is not retried: the credential says what the caller is told.

use reqwest::header::WWW_AUTHENTICATE;
use reqwest::{RequestBuilder, Response, StatusCode};

use super::Client;
use crate::credential::Unauthorized;
use crate::error::UpstreamError;

/// Why a request was not answered by the upstream.
pub(super) enum Sent {
    /// The HTTP request failed.
    Http(reqwest::Error),
    /// No token could be sent, or every token sent was refused.
    Unauthorized(Unauthorized),
}

impl Client {
    /// Sends `request`, with the connection's token when it has a credential.
    pub(super) async fn send(&self, request: RequestBuilder) -> Result<Response, Sent> {
        let Some(credential) = &self.credential else {
            return request.send().await.map_err(Sent::Http);
        };
        let again = request.try_clone();
        let token = credential.token().await.map_err(Sent::Unauthorized)?;
        let response = request
            .bearer_auth(&token)
            .send()
            .await
            .map_err(Sent::Http)?;
        let Some(challenge) = refusal(&response) else {
            return Ok(response);
        };
        let status = response.status().as_u16();
        let fresh = credential
            .rejected(&token, status, challenge.as_deref())
            .await
            .map_err(Sent::Unauthorized)?;
        // A body that cannot be sent twice (none here: every body is bytes) keeps the refusal.
        let Some(again) = again else {
            return Ok(response);
        };
        let response = again.bearer_auth(&fresh).send().await.map_err(Sent::Http)?;
        let Some(challenge) = refusal(&response) else {
            return Ok(response);
        };
        let status = response.status().as_u16();
        let why = match credential
            .rejected(&fresh, status, challenge.as_deref())
            .await
        {
            Err(why) => why,
            Ok(_) => Unauthorized {
                consent: false,
                reason: format!("it refused a fresh token too (HTTP {status})"),
            },
        };
        Err(Sent::Unauthorized(why))
    }

    /// Request `id` could not be sent with a token it accepts.
    pub(super) fn unauthorized(&self, id: Option<u64>, why: Unauthorized) {
        let error = UpstreamError::Unauthorized {
            upstream: self.key.to_string(),
            reason: why.reason,
            consent: why.consent,
        };
        match (id, self.conn()) {
            (Some(id), Some(conn)) => conn.fail_request(id, error),
            _ => tracing::warn!(upstream = %self.key, "{error}"),
        }
    }
}

/// `Some(challenge)` when the upstream refused the token: 401, or 403 whose challenge says
/// `insufficient_scope` (a step-up); `None` otherwise.
fn refusal(response: &Response) -> Option<Option<String>> {
    let challenge = response
        .headers()
        .get(WWW_AUTHENTICATE)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    match response.status() {
        StatusCode::UNAUTHORIZED => Some(challenge),
        StatusCode::FORBIDDEN
            if challenge
                .as_deref()
                .is_some_and(|c| c.contains("insufficient_scope")) =>
        {
            Some(challenge)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    use futures::future::BoxFuture;
    use manifold_config::{HttpConfig, HttpKind};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::Sent;
    use crate::connection::{Events, Timing};
    use crate::credential::{Credential, Unauthorized};
    use crate::http::{start, Settings};

    struct Unheard;

    impl Events for Unheard {
        fn notification(&self, _method: &str, _params: Option<&str>) {}
    }

    /// A token source that hands out `first`, then `fresh` when told of a refusal, and
    /// records the refusals it was told of.
    struct Tokens {
        first: &'static str,
        fresh: &'static str,
        told: Mutex<Vec<(String, u16, Option<String>)>>,
    }

    impl Credential for Tokens {
        fn token(&self) -> BoxFuture<'_, Result<String, Unauthorized>> {
            Box::pin(async move { Ok(self.first.to_owned()) })
        }

        fn rejected<'a>(
            &'a self,
            sent: &'a str,
            status: u16,
            challenge: Option<&'a str>,
        ) -> BoxFuture<'a, Result<String, Unauthorized>> {
            let mut told = self.told.lock().unwrap();
            told.push((sent.to_owned(), status, challenge.map(str::to_owned)));
            let answer = if told.len() > 1 {
                Err(Unauthorized {
                    consent: true,
                    reason: "the caller must authorize again".into(),
                })
            } else {
                Ok(self.fresh.to_owned())
            };
            Box::pin(async move { answer })
        }
    }

    /// An upstream that accepts `Bearer good` only, answering anything else 401 with a
    /// challenge; returns its URL.
    async fn upstream() -> String {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 8192];
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    let head = String::from_utf8_lossy(&buf[..n]).to_ascii_lowercase();
                    let answer = if head.contains("authorization: bearer good") {
                        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\nconnection: close\r\n\r\n{}"
                    } else {
                        "HTTP/1.1 401 Unauthorized\r\nwww-authenticate: Bearer error=\"invalid_token\"\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
                    };
                    let _ = socket.write_all(answer.as_bytes()).await;
                });
            }
        });
        format!("http://{addr}/mcp")
    }

    async fn send_with(tokens: Arc<Tokens>) -> Result<u16, Unauthorized> {
        let url = upstream().await;
        let cfg = HttpConfig {
            url: url.clone(),
            kind: HttpKind::StreamableHttp,
            headers: Default::default(),
            connect_timeout: Duration::from_secs(2),
            auth: None,
        };
        let settings = Settings {
            key: "up".into(),
            timing: Timing {
                request: Duration::from_secs(5),
                max: Duration::from_secs(5),
            },
            max_message_bytes: 1 << 20,
            runtime: tokio::runtime::Handle::current(),
            credential: Some(tokens),
        };
        let started = start(&cfg, settings, Box::new(Unheard), |_| {}).unwrap();
        let client = started.client;
        let request = client.http.post(url).body("{}");
        match client.send(request).await {
            Ok(response) => Ok(response.status().as_u16()),
            Err(Sent::Unauthorized(why)) => Err(why),
            Err(Sent::Http(e)) => panic!("{e}"),
        }
    }

    #[tokio::test]
    async fn a_refused_token_is_replaced_once_and_the_request_sent_again() {
        let tokens = Arc::new(Tokens {
            first: "stale",
            fresh: "good",
            told: Mutex::new(Vec::new()),
        });
        assert_eq!(send_with(Arc::clone(&tokens)).await, Ok(200));
        let told = tokens.told.lock().unwrap().clone();
        assert_eq!(
            told,
            vec![(
                "stale".to_owned(),
                401,
                Some("Bearer error=\"invalid_token\"".to_owned())
            )]
        );
    }

    #[tokio::test]
    async fn a_fresh_token_refused_again_is_not_retried_and_says_why() {
        let tokens = Arc::new(Tokens {
            first: "stale",
            fresh: "also-bad",
            told: Mutex::new(Vec::new()),
        });
        let why = send_with(Arc::clone(&tokens)).await.unwrap_err();
        assert!(why.consent, "{why:?}");
        let told = tokens.told.lock().unwrap().clone();
        assert_eq!(
            told.len(),
            2,
            "told of each refusal, sent twice only: {told:?}"
        );
        assert_eq!(told[1].0, "also-bad");
    }
}
