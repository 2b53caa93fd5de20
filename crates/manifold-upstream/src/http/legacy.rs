//! The 2024-11-05 HTTP+SSE transport: a GET opens an SSE stream whose first event names the
//! URL messages are POSTed to; everything the upstream sends, answers included, comes on that
//! stream, and its end is the connection's end.

use std::sync::Arc;

use manifold_protocol::sse::Parser;
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::Url;

use super::auth::Sent;
use super::{error_chain, preview, trace_headers, Client, Mode};
use crate::outbound::Outbound;

impl Client {
    /// The HTTP+SSE transport: a GET opens the stream, whose first event names the URL that
    /// messages are POSTed to; then the message that asked (`initialize`) goes there.
    pub(super) async fn fall_back(self: Arc<Self>, first: Outbound) {
        let response = match self
            .send(
                self.request(reqwest::Method::GET, self.url.clone())
                    .header(ACCEPT, "text/event-stream"),
            )
            .await
        {
            Ok(r) if r.status().is_success() => r,
            Ok(r) => {
                return self.fail(&format!(
                    "it refused both Streamable HTTP and the HTTP+SSE transport (GET: HTTP {})",
                    r.status()
                ))
            }
            Err(Sent::Http(e)) => {
                return self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(Sent::Unauthorized(why)) => return self.unauthorized(first.id, why),
        };
        let client = Arc::clone(&self);
        let (endpoint_tx, endpoint_rx) = tokio::sync::oneshot::channel();
        self.runtime
            .spawn(async move { client.legacy_stream(response, endpoint_tx).await });
        match endpoint_rx.await {
            Ok(post) => self.post_legacy(post, first).await,
            Err(_) => self.fail("its SSE stream ended before naming the endpoint for messages"),
        }
    }

    /// Reads the HTTP+SSE stream: the `endpoint` event first, then messages. The stream's end
    /// is the connection's end.
    async fn legacy_stream(
        self: Arc<Self>,
        mut response: reqwest::Response,
        endpoint: tokio::sync::oneshot::Sender<Url>,
    ) {
        let mut parser = Parser::new(self.max);
        let mut endpoint = Some(endpoint);
        let mut closed = self.closed.subscribe();
        loop {
            let chunk = tokio::select! {
                chunk = response.chunk() => chunk,
                _ = closed.wait_for(|c| *c) => return,
            };
            let bytes = match chunk {
                Ok(Some(bytes)) => bytes,
                Ok(None) => return self.fail("its SSE stream ended"),
                Err(e) => return self.fail(&format!("its SSE stream broke: {}", error_chain(&e))),
            };
            let mut broken = None;
            parser.feed(&bytes, |event| {
                if broken.is_some() {
                    return;
                }
                if event.kind == "endpoint" {
                    match self.url.join(event.data.trim()) {
                        Ok(post) => {
                            self.state().mode = Mode::Sse { post: post.clone() };
                            if let Some(tx) = endpoint.take() {
                                let _ = tx.send(post);
                            }
                        }
                        Err(e) => broken = Some(format!("its endpoint event is not a URL: {e}")),
                    }
                } else {
                    broken = self.event(event, false, None).err();
                }
            });
            if let Some(problem) = broken {
                return self.fail(&problem);
            }
        }
    }

    pub(super) async fn post_legacy(self: Arc<Self>, post: Url, msg: Outbound) {
        let request = self
            .http
            .post(post)
            .headers(self.headers.clone())
            .header(CONTENT_TYPE, "application/json")
            .headers(trace_headers(msg.trace.as_ref()))
            .body(msg.body());
        let sent = self.send(request).await;
        match sent {
            Ok(r) if r.status().is_success() => {}
            Ok(r) => {
                let status = r.status();
                let text = r.text().await.unwrap_or_default();
                self.refuse(msg.id, &format!("HTTP {status}: {}", preview(&text)));
            }
            Err(Sent::Http(e)) if e.is_connect() => {
                self.fail(&format!("cannot reach {}: {}", self.url, error_chain(&e)))
            }
            Err(Sent::Http(e)) => self.refuse(msg.id, &format!("POST failed: {}", error_chain(&e))),
            Err(Sent::Unauthorized(why)) => self.unauthorized(msg.id, why),
        }
    }
}
