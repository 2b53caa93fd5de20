//! Runs the real `manifold` binary serving HTTP on a loopback port it picks, and speaks
//! Streamable HTTP and the HTTP+SSE transport to it the way a host does. Every wait is
//! bounded, so a broken build fails instead of hanging.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use reqwest::blocking::Client;
use reqwest::header::{HeaderMap, HeaderName, HeaderValue};
use reqwest::StatusCode;
use serde_json::Value;

use crate::process::{admin_port_in, exit_within, manifold_bin, Manifold, TempDir, WAIT};

mod fixture;
mod host;

pub use fixture::FixtureHttp;
pub use host::{code, content_type, messages_of, Event, Events, Host};

/// A running `manifold serve --listen 127.0.0.1:0`.
pub struct Server {
    pub child: Child,
    pub port: u16,
    pub stderr: Arc<Mutex<String>>,
    /// `https` when the config has `[server.tls]`.
    pub scheme: &'static str,
    /// Holds the config; removed when the server is dropped.
    _dir: TempDir,
}

impl Server {
    /// Starts Manifold on `config` (TOML text) with an HTTP listener on a free loopback port.
    pub fn start(config: &str) -> Server {
        Server::start_with(config, "info,manifold_upstream=debug", &[], "127.0.0.1")
    }

    /// The same, logging at `log` (`MANIFOLD_LOG`), with `env` set, listening on `ip` (a free
    /// port); reached on loopback all the same.
    pub fn start_with(config: &str, log: &str, env: &[(&str, &str)], ip: &str) -> Server {
        Server::launch(config, log, env, ip, "http")
    }

    /// Starts Manifold serving HTTPS on `ip` (a free port): `tls` is the `[server.tls]` table
    /// added to `config`. Hosts must trust the CA that signed its certificate (`host_using`).
    pub fn start_https(config: &str, tls: &str, ip: &str) -> Server {
        let config = format!("{config}\n{tls}");
        Server::launch(&config, "info,manifold_upstream=debug", &[], ip, "https")
    }

    fn launch(
        config: &str,
        log: &str,
        env: &[(&str, &str)],
        ip: &str,
        scheme: &'static str,
    ) -> Server {
        let dir = TempDir::new("http");
        let path = dir.write("manifold.toml", config);
        let mut cmd = Command::new(manifold_bin());
        cmd.args(["serve", "--config", path.to_str().unwrap()])
            .args(["--listen", &format!("{ip}:0")])
            .env("MANIFOLD_LOG", log)
            .envs(env.iter().copied());
        let (child, port, stderr) = spawn_listening(cmd, "manifold", ip);
        Server {
            child,
            port,
            stderr,
            scheme,
            _dir: dir,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://127.0.0.1:{}{path}", self.scheme, self.port)
    }

    /// The config file it serves (rewrite it, then reload).
    pub fn config_path(&self) -> std::path::PathBuf {
        self._dir.path().join("manifold.toml")
    }

    /// Writes `config` over the file it serves and asks for a reload on the admin address
    /// (`server.admin = "127.0.0.1:0"`); returns the status and the answer.
    pub fn reload(&self, config: &str) -> (StatusCode, Value) {
        std::fs::write(self.config_path(), config).unwrap();
        let r = client().post(self.admin_url("/reload")).send().unwrap();
        let status = r.status();
        (status, r.json().unwrap_or(Value::Null))
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// `path` on the admin address (`server.admin = "127.0.0.1:0"` in the config).
    pub fn admin_url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", admin_port_in(|| self.stderr()))
    }

    /// A host: a client with its own connection pool, not yet in a session.
    pub fn host(&self) -> Host {
        self.host_using(client())
    }

    /// A host sending its requests with `client` (default headers such as credentials).
    pub fn host_using(&self, client: Client) -> Host {
        Host {
            client,
            url: self.url("/mcp"),
            session: None,
            next_id: 1,
        }
    }

    /// A host presenting the API key `key` (`X-API-Key`) that completed the handshake.
    pub fn ready_host_with_key(&self, key: &str) -> Host {
        self.ready_host_using(client_with(&Cred::api_key(key)))
    }

    /// The text of `/metrics` on the admin address (`server.admin = "127.0.0.1:0"`).
    pub fn scrape(&self) -> String {
        get_text(&self.admin_url("/metrics"))
    }

    /// The value of every sample of `name` on the admin address's `/metrics` whose labels
    /// include `labels`, summed (0 if none): see [`crate::metrics::sum`].
    pub fn metric(&self, name: &str, labels: &[(&str, &str)]) -> f64 {
        crate::metrics::sum(&self.scrape(), name, labels)
    }

    /// A host that completed the handshake.
    pub fn ready_host(&self) -> Host {
        self.ready_host_using(client())
    }

    /// A host sending its requests with `client` that completed the handshake.
    pub fn ready_host_using(&self, client: Client) -> Host {
        let mut host = self.host_using(client);
        let init = host.initialize("2025-06-18");
        assert_eq!(init.status(), StatusCode::OK, "{}", self.stderr());
        host
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        // Unless a test stopped it already (its pid may be another process's by now).
        let running = self.child.try_wait().ok().flatten().is_none();
        if let Some(pid) = i32::try_from(self.child.id()).ok().filter(|_| running) {
            // SIGTERM: the shutdown a supervisor gives.
            let _ = Command::new("kill").arg(pid.to_string()).status();
        }
        let until = Instant::now() + Duration::from_secs(10);
        while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs `manifold serve` on `config` (TOML text), expecting it to refuse to start: it must
/// exit with a failure status (bounded wait); returns what it wrote to stderr.
pub fn serve_refused(config: &str) -> String {
    let dir = TempDir::new("refused");
    let path = dir.write("manifold.toml", config);
    let mut child = Command::new(manifold_bin())
        .args(["serve", "--config", path.to_str().unwrap()])
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let Some(status) = exit_within(&mut child, WAIT) else {
        let _ = child.kill();
        panic!("manifold serve did not refuse to start");
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut stderr).unwrap();
    assert!(!status.success(), "exited with {status}: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    stderr
}

/// Spawns `cmd` with its stderr collected, and waits (bounded) for the port it reports
/// listening on at `ip`.
pub fn spawn_listening(mut cmd: Command, what: &str, ip: &str) -> (Child, u16, Arc<Mutex<String>>) {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{what} does not start: {e}"));
    let stderr = Arc::new(Mutex::new(String::new()));
    let (tx, rx) = std::sync::mpsc::channel();
    let sink = Arc::clone(&stderr);
    let pipe = child.stderr.take().unwrap();
    let marker = format!("listening on {ip}:");
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines() {
            let Ok(line) = line else { return };
            // The admin address, when there is one, is not the one hosts use.
            let admin = line.contains("admin listening on");
            let port = listening_port(&line, &marker).filter(|_| !admin);
            // Kept before the port is told, so that a test reading the log once the server
            // listens finds the line that said so.
            {
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
            if let Some(port) = port {
                let _ = tx.send(port);
            }
        }
    });
    let port = rx.recv_timeout(WAIT).unwrap_or_else(|_| {
        let _ = child.kill();
        panic!("{what} did not listen; stderr:\n{}", stderr.lock().unwrap())
    });
    (child, port, stderr)
}

fn listening_port(line: &str, marker: &str) -> Option<u16> {
    let rest = line.split(marker).nth(1)?;
    rest.split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()
}

pub fn client() -> Client {
    Client::builder()
        .timeout(WAIT)
        .build()
        .expect("an HTTP client")
}

/// The body of a GET of `url`, which must succeed.
pub fn get_text(url: &str) -> String {
    let r = client().get(url).send().unwrap();
    assert!(r.status().is_success(), "GET {url}: {}", r.status());
    r.text().unwrap()
}

impl Manifold {
    /// The text of `/metrics` on the admin address (`--admin 127.0.0.1:0`).
    pub fn scrape(&self) -> String {
        get_text(&format!("http://127.0.0.1:{}/metrics", self.admin_port()))
    }
}

/// What a host presents.
#[derive(Clone, Debug)]
pub enum Cred {
    None,
    /// `Authorization: Bearer <token>`.
    Bearer(String),
    /// `X-API-Key: <key>`.
    ApiKey(String),
    /// `Authorization: <value>`, as given.
    Authorization(String),
}

impl Cred {
    pub fn bearer(token: &str) -> Cred {
        Cred::Bearer(token.to_owned())
    }

    pub fn api_key(key: &str) -> Cred {
        Cred::ApiKey(key.to_owned())
    }
}

/// A client presenting `cred` on every request.
pub fn client_with(cred: &Cred) -> Client {
    let mut headers = HeaderMap::new();
    let mut set = |name: &'static str, value: String| {
        headers.insert(
            HeaderName::from_static(name),
            HeaderValue::from_str(&value).unwrap(),
        );
    };
    match cred {
        Cred::None => {}
        Cred::Bearer(token) => set("authorization", format!("Bearer {token}")),
        Cred::ApiKey(key) => set("x-api-key", key.clone()),
        Cred::Authorization(value) => set("authorization", value.clone()),
    }
    Client::builder()
        .timeout(WAIT)
        .default_headers(headers)
        .build()
        .expect("an HTTP client")
}
