//! Test support for JWT authentication: an issuer that signs tokens with a fresh Ed25519 key,
//! and a JWKS server on 127.0.0.1 (plain HTTP/1.1 from a std thread) whose keys can be
//! rotated while it runs.
//!
//! Behind the feature `jwt`, which brings in `jsonwebtoken` (with its pure-Rust crypto only).

use std::hash::{BuildHasher, Hasher};
use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::jwk::{Jwk, PublicKeyUse};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{json, Value};

/// Seconds since the Unix epoch, as `exp`, `nbf` and `iat` are written.
pub fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("the clock is after 1970")
        .as_secs()
}

/// A JWKS document of these keys.
pub fn jwks(keys: &[Value]) -> Value {
    json!({ "keys": keys })
}

/// Signs tokens as `issuer` with an Ed25519 key of its own, named `kid` in the JWKS.
pub struct Issuer {
    issuer: String,
    kid: String,
    key: EncodingKey,
    jwk: Value,
}

impl Issuer {
    /// A new issuer with a freshly generated key pair.
    pub fn new(issuer: &str, kid: &str) -> Self {
        install_provider();
        // PKCS#8 (RFC 8410) of an Ed25519 private key: a fixed prefix, then the 32-byte seed.
        const PKCS8_PREFIX: [u8; 16] = [
            0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22,
            0x04, 0x20,
        ];
        let mut der = PKCS8_PREFIX.to_vec();
        der.extend_from_slice(&random_seed());
        let key = EncodingKey::from_ed_der(&der);
        let mut jwk = Jwk::from_encoding_key(&key, Algorithm::EdDSA)
            .expect("the public half of a new Ed25519 key");
        jwk.common.key_id = Some(kid.to_owned());
        jwk.common.public_key_use = Some(PublicKeyUse::Signature);
        Self {
            issuer: issuer.to_owned(),
            kid: kid.to_owned(),
            key,
            jwk: serde_json::to_value(&jwk).expect("a JWK is JSON"),
        }
    }

    pub fn issuer(&self) -> &str {
        &self.issuer
    }

    pub fn kid(&self) -> &str {
        &self.kid
    }

    /// The public key as a JWK (`kty` OKP, `crv` Ed25519, `alg` EdDSA, `use` sig, `kid`).
    pub fn jwk(&self) -> Value {
        self.jwk.clone()
    }

    /// A JWKS document with this issuer's key only.
    pub fn jwks(&self) -> Value {
        jwks(&[self.jwk()])
    }

    /// `claims` signed with EdDSA, the header naming this issuer's kid. The claims are taken
    /// as given: add `iss`, `aud`, `exp` as the test needs (see [`Issuer::claims`]).
    pub fn token(&self, claims: Value) -> String {
        self.token_with_kid(Some(&self.kid), claims)
    }

    /// Like [`Issuer::token`], with another kid in the header (or none).
    pub fn token_with_kid(&self, kid: Option<&str>, claims: Value) -> String {
        let mut header = Header::new(Algorithm::EdDSA);
        header.kid = kid.map(str::to_owned);
        jsonwebtoken::encode(&header, &claims, &self.key).expect("signing a token")
    }

    /// Claims valid for an hour: `iss` this issuer, `aud`, `sub`, `iat` and `exp`; more can be
    /// merged in with `extra` (an object), which wins over these.
    pub fn claims(&self, aud: &str, sub: &str, extra: Value) -> Value {
        let mut claims = json!({
            "iss": self.issuer,
            "aud": aud,
            "sub": sub,
            "iat": now(),
            "exp": now() + 3600,
        });
        if let (Some(claims), Value::Object(extra)) = (claims.as_object_mut(), extra) {
            claims.extend(extra);
        }
        claims
    }
}

/// A token signed with HS256 under `secret`, for checking that HMAC tokens are refused.
pub fn hs256_token(secret: &[u8], kid: Option<&str>, claims: &Value) -> String {
    install_provider();
    let mut header = Header::new(Algorithm::HS256);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, &EncodingKey::from_secret(secret))
        .expect("signing a token")
}

/// An unsigned token (`alg` none, empty signature), for checking that it is refused.
pub fn unsigned_token(kid: Option<&str>, claims: &Value) -> String {
    let mut header = json!({ "alg": "none", "typ": "JWT" });
    if let Some(kid) = kid {
        header["kid"] = json!(kid);
    }
    format!(
        "{}.{}.",
        base64url(header.to_string().as_bytes()),
        base64url(claims.to_string().as_bytes())
    )
}

/// Base64url without padding, as JWTs are written.
pub fn base64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// The pure-Rust crypto provider of jsonwebtoken, whatever features are turned on (an error
/// means one is installed already).
fn install_provider() {
    let _ = jsonwebtoken::crypto::rust_crypto::DEFAULT_PROVIDER.install_default();
}

/// 32 unpredictable bytes from std alone: SipHash under the randomly keyed `RandomState`, over
/// the time and a counter. Good for test keys, not meant for anything else.
fn random_seed() -> [u8; 32] {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    let mut seed = [0u8; 32];
    for chunk in seed.chunks_mut(8) {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u128(nanos);
        hasher.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        chunk.copy_from_slice(&hasher.finish().to_le_bytes());
    }
    seed
}

/// Serves `GET /jwks.json` on 127.0.0.1 (a free port) from a std thread, one connection at a
/// time, each answered with `Connection: close`. Stops when dropped.
pub struct JwksServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

struct Shared {
    jwks: Mutex<String>,
    status: AtomicU16,
    hits: AtomicUsize,
    stop: AtomicBool,
}

impl JwksServer {
    pub fn start(jwks: Value) -> JwksServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("binding a JWKS server");
        let addr = listener.local_addr().expect("the JWKS server's address");
        let shared = Arc::new(Shared {
            jwks: Mutex::new(jwks.to_string()),
            status: AtomicU16::new(200),
            hits: AtomicUsize::new(0),
            stop: AtomicBool::new(false),
        });
        let serving = shared.clone();
        let thread = std::thread::Builder::new()
            .name("jwks-server".into())
            .spawn(move || {
                for stream in listener.incoming() {
                    if serving.stop.load(Ordering::SeqCst) {
                        break;
                    }
                    if let Ok(stream) = stream {
                        serve(&serving, stream);
                    }
                }
            })
            .expect("starting the JWKS server's thread");
        JwksServer {
            addr,
            shared,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:<port>/jwks.json`.
    pub fn url(&self) -> String {
        format!("http://{}/jwks.json", self.addr)
    }

    /// Serves this document from now on (a key rotation).
    pub fn set(&self, jwks: Value) {
        *self.shared.jwks.lock().unwrap() = jwks.to_string();
    }

    /// Answers `GET /jwks.json` with this status from now on (200 again to heal).
    pub fn set_status(&self, status: u16) {
        self.shared.status.store(status, Ordering::SeqCst);
    }

    /// How many times `GET /jwks.json` was asked for.
    pub fn hits(&self) -> usize {
        self.shared.hits.load(Ordering::SeqCst)
    }
}

impl Drop for JwksServer {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Wakes the accept loop so that it sees the stop flag.
        let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn serve(shared: &Shared, mut stream: TcpStream) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let _ = stream.set_write_timeout(Some(Duration::from_secs(5)));
    let mut request = Vec::new();
    let mut buf = [0u8; 1024];
    while !request.windows(4).any(|w| w == b"\r\n\r\n") && request.len() < 16 * 1024 {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => request.extend_from_slice(&buf[..n]),
        }
    }
    let request = String::from_utf8_lossy(&request);
    let mut first = request.lines().next().unwrap_or_default().split(' ');
    let (status, body) = match (first.next(), first.next()) {
        (Some("GET"), Some("/jwks.json")) => {
            shared.hits.fetch_add(1, Ordering::SeqCst);
            (
                shared.status.load(Ordering::SeqCst),
                shared.jwks.lock().unwrap().clone(),
            )
        }
        _ => (404, String::from("{}")),
    };
    let response = format!(
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        if status == 200 { "OK" } else { "Status" },
        body.len()
    );
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Write);
}
