//! An in-process upstream that is its own authorization server: a tokio listener speaking
//! just enough HTTP/1.1 (one request per connection) to answer discovery, registration and
//! the token endpoint as each test sets it up.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;

#[derive(Clone, Debug)]
pub struct Request {
    pub method: String,
    pub path: String,
    pub headers: HashMap<String, String>,
    pub body: String,
}

impl Request {
    pub fn form(&self) -> HashMap<String, String> {
        reqwest::Url::parse(&format!("http://x/?{}", self.body))
            .unwrap()
            .query_pairs()
            .into_owned()
            .collect()
    }
}

/// How the server behaves; tests change it between steps.
pub struct Knobs {
    /// The issuer the resource metadata names (default: this server).
    pub names_issuer: Option<String>,
    /// `resource` in the resource metadata (default: `{base}/mcp`).
    pub resource: Option<String>,
    pub resource_metadata: bool,
    /// Where the resource metadata is, and whether the challenge names it.
    pub prm_path: &'static str,
    pub prm_in_challenge: bool,
    pub as_metadata: bool,
    /// Where the authorization server's metadata is, and the path of its issuer.
    pub metadata_path: &'static str,
    pub issuer_path: &'static str,
    pub metadata_issuer: Option<String>,
    pub pkce: bool,
    pub iss_supported: bool,
    pub cimd: bool,
    pub auth_methods: Vec<&'static str>,
    pub as_scopes: Option<Vec<&'static str>>,
    pub challenge_scope: Option<&'static str>,
    pub refuse_refresh: bool,
    pub html_tokens: bool,
    pub expires_in: u64,
    pub delay: Option<Duration>,
    pub issued: u32,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            names_issuer: None,
            resource: None,
            resource_metadata: true,
            prm_path: "/.well-known/oauth-protected-resource/mcp",
            prm_in_challenge: true,
            as_metadata: true,
            metadata_path: "/.well-known/oauth-authorization-server",
            issuer_path: "",
            metadata_issuer: None,
            pkce: true,
            iss_supported: true,
            cimd: false,
            auth_methods: vec!["none", "client_secret_basic", "client_secret_post"],
            as_scopes: None,
            challenge_scope: Some("read"),
            refuse_refresh: false,
            html_tokens: false,
            expires_in: 3600,
            delay: None,
            issued: 0,
        }
    }
}

pub struct Mock {
    pub base: String,
    pub knobs: Arc<Mutex<Knobs>>,
    pub requests: Arc<Mutex<Vec<Request>>>,
}

struct Answer {
    status: u16,
    content_type: &'static str,
    headers: Vec<(String, String)>,
    body: String,
}

fn json(status: u16, body: serde_json::Value) -> Answer {
    Answer {
        status,
        content_type: "application/json",
        headers: Vec::new(),
        body: body.to_string(),
    }
}

impl Mock {
    pub async fn start() -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://127.0.0.1:{}", listener.local_addr().unwrap().port());
        let mock = Self {
            base: base.clone(),
            knobs: Arc::default(),
            requests: Arc::default(),
        };
        let (knobs, requests) = (Arc::clone(&mock.knobs), Arc::clone(&mock.requests));
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (knobs, requests, base) = (knobs.clone(), requests.clone(), base.clone());
                tokio::spawn(async move {
                    let mut stream = BufReader::new(stream);
                    let Some(request) = read_request(&mut stream).await else {
                        return;
                    };
                    requests.lock().unwrap().push(request.clone());
                    let (answer, delay) = {
                        let mut knobs = knobs.lock().unwrap();
                        (route(&base, &request, &mut knobs), knobs.delay)
                    };
                    if let Some(delay) = delay {
                        tokio::time::sleep(delay).await;
                    }
                    let mut head = format!(
                        "HTTP/1.1 {} X\r\ncontent-type: {}\r\ncontent-length: {}\r\nconnection: close\r\n",
                        answer.status,
                        answer.content_type,
                        answer.body.len()
                    );
                    for (name, value) in &answer.headers {
                        head.push_str(&format!("{name}: {value}\r\n"));
                    }
                    head.push_str("\r\n");
                    let stream = stream.get_mut();
                    let _ = stream.write_all(head.as_bytes()).await;
                    let _ = stream.write_all(answer.body.as_bytes()).await;
                    let _ = stream.shutdown().await;
                });
            }
        });
        mock
    }

    pub fn set(&self, change: impl FnOnce(&mut Knobs)) {
        change(&mut self.knobs.lock().unwrap());
    }

    /// The requests made to `path` so far.
    pub fn seen(&self, path: &str) -> Vec<Request> {
        let requests = self.requests.lock().unwrap();
        requests
            .iter()
            .filter(|r| r.path == path)
            .cloned()
            .collect()
    }

    /// Token requests of `grant_type`.
    pub fn grants(&self, grant_type: &str) -> Vec<Request> {
        self.seen("/token")
            .into_iter()
            .filter(|r| r.form().get("grant_type").map(String::as_str) == Some(grant_type))
            .collect()
    }
}

async fn read_request(stream: &mut BufReader<tokio::net::TcpStream>) -> Option<Request> {
    let mut line = String::new();
    stream.read_line(&mut line).await.ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let target = parts.next()?.to_owned();
    let mut headers = HashMap::new();
    loop {
        let mut line = String::new();
        stream.read_line(&mut line).await.ok()?;
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.insert(name.to_ascii_lowercase(), value.trim().to_owned());
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length];
    stream.read_exact(&mut body).await.ok()?;
    let path = target.split('?').next().unwrap_or_default().to_owned();
    Some(Request {
        method,
        path,
        headers,
        body: String::from_utf8_lossy(&body).into_owned(),
    })
}

fn route(base: &str, request: &Request, knobs: &mut Knobs) -> Answer {
    let not_found = || json(404, serde_json::json!({}));
    let issuer = format!("{base}{}", knobs.issuer_path);
    let path = request.path.as_str();
    match (request.method.as_str(), request.path.as_str()) {
        ("POST", "/mcp") => {
            let mut challenge = "Bearer error=\"invalid_token\"".to_owned();
            if knobs.prm_in_challenge {
                challenge.push_str(&format!(
                    r#", resource_metadata="{base}{}""#,
                    knobs.prm_path
                ));
            }
            if let Some(scope) = knobs.challenge_scope {
                challenge.push_str(&format!(r#", scope="{scope}""#));
            }
            let mut answer = json(401, serde_json::json!({}));
            answer
                .headers
                .push(("www-authenticate".to_owned(), challenge));
            answer
        }
        ("GET", _) if knobs.resource_metadata && path == knobs.prm_path => json(
            200,
            serde_json::json!({
                "resource": knobs.resource.clone().unwrap_or_else(|| format!("{base}/mcp")),
                "authorization_servers": [knobs.names_issuer.clone().unwrap_or_else(|| issuer.clone())],
                "scopes_supported": ["read", "write"],
            }),
        ),
        ("GET", _) if knobs.as_metadata && path == knobs.metadata_path => {
            let mut metadata = serde_json::json!({
                "issuer": knobs.metadata_issuer.clone().unwrap_or_else(|| issuer.clone()),
                "authorization_endpoint": format!("{base}/authorize"),
                "token_endpoint": format!("{base}/token"),
                "registration_endpoint": format!("{base}/register"),
                "response_types_supported": ["code"],
                "token_endpoint_auth_methods_supported": knobs.auth_methods,
                "authorization_response_iss_parameter_supported": knobs.iss_supported,
                "client_id_metadata_document_supported": knobs.cimd,
            });
            if knobs.pkce {
                metadata["code_challenge_methods_supported"] = serde_json::json!(["S256"]);
            }
            if let Some(scopes) = &knobs.as_scopes {
                metadata["scopes_supported"] = serde_json::json!(scopes);
            }
            json(200, metadata)
        }
        ("POST", "/register") => {
            knobs.issued += 1;
            let client_id = format!("dyn-{}", knobs.issued);
            match knobs.auth_methods.first() {
                Some(method) if !knobs.auth_methods.contains(&"none") => json(
                    201,
                    serde_json::json!({"client_id": client_id, "client_secret": "dyn-secret", "token_endpoint_auth_method": method}),
                ),
                _ => json(
                    201,
                    serde_json::json!({"client_id": client_id, "token_endpoint_auth_method": "none"}),
                ),
            }
        }
        ("POST", "/token") => token(request, knobs),
        _ => not_found(),
    }
}

fn token(request: &Request, knobs: &mut Knobs) -> Answer {
    if knobs.html_tokens {
        return Answer {
            status: 200,
            content_type: "text/html",
            headers: Vec::new(),
            body: "<html><body>Sign in</body></html>".to_owned(),
        };
    }
    let form = request.form();
    if form.get("grant_type").map(String::as_str) == Some("refresh_token") && knobs.refuse_refresh {
        return json(400, serde_json::json!({"error": "invalid_grant"}));
    }
    knobs.issued += 1;
    let mut answer = serde_json::json!({
        "access_token": format!("tok-{}", knobs.issued),
        "token_type": "Bearer",
        "expires_in": knobs.expires_in,
        "refresh_token": format!("ref-{}", knobs.issued),
    });
    if let Some(scope) = form.get("scope") {
        answer["scope"] = serde_json::json!(scope);
    }
    if form.get("requested_token_type").map(String::as_str)
        == Some("urn:ietf:params:oauth:token-type:id-jag")
    {
        answer["access_token"] = serde_json::json!(format!("jag-{}", knobs.issued));
        answer["issued_token_type"] = serde_json::json!("urn:ietf:params:oauth:token-type:id-jag");
        answer["token_type"] = serde_json::json!("N_A");
    }
    json(200, answer)
}
