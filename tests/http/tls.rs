//! TLS on the HTTP listener (`[server.tls]`): tool calls and event streams over HTTPS, HTTP/2
//! when the host offers it by ALPN, refusal of a host that trusts another CA, start-up refused
//! for a missing or mismatched key, and the warning for credentials over plain HTTP beyond
//! loopback (none with TLS, whose protected resource metadata names an https:// resource).
//! Certificates are made here with the `openssl` command (a CA and a leaf for 127.0.0.1 and
//! localhost).

use std::path::{Path, PathBuf};
use std::process::Command;

use reqwest::blocking::Client;
use reqwest::{Certificate, StatusCode, Version};
use serde_json::json;

use manifold_testkit::http::*;
use manifold_testkit::process::*;

const KEY: &str = "tls-test-key-0123456789abcdef";

/// What `openssl` reads: one section per certificate kind, so that no machine-wide
/// openssl.cnf changes the extensions.
const OPENSSL_CNF: &str = "\
[req]
distinguished_name = dn
prompt = no
[dn]
CN = Manifold test CA
[ca]
basicConstraints = critical, CA:TRUE
keyUsage = critical, keyCertSign, cRLSign
subjectKeyIdentifier = hash
[leaf]
basicConstraints = critical, CA:FALSE
keyUsage = critical, digitalSignature
extendedKeyUsage = serverAuth
subjectAltName = IP:127.0.0.1, DNS:localhost
subjectKeyIdentifier = hash
authorityKeyIdentifier = keyid
";

/// A test CA and a leaf certificate it signed, with their keys, as PEM files.
struct Pki {
    dir: TempDir,
}

impl Pki {
    fn new() -> Pki {
        let dir = TempDir::new("pki");
        let cnf = dir.write("openssl.cnf", OPENSSL_CNF);
        let cnf = cnf.to_str().unwrap();
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        openssl(
            &dir,
            &["req", "-x509", "-config", cnf, "-extensions", "ca"],
            &ec,
            &["-days", "2", "-keyout", "ca-key.pem", "-out", "ca.pem"],
        );
        openssl(
            &dir,
            &["req", "-new", "-config", cnf, "-subj", "/CN=localhost"],
            &ec,
            &["-keyout", "key.pem", "-out", "leaf.csr"],
        );
        openssl(
            &dir,
            &["x509", "-req", "-in", "leaf.csr", "-CA", "ca.pem"],
            &[],
            &[
                "-CAkey",
                "ca-key.pem",
                "-set_serial",
                "2",
                "-days",
                "2",
                "-extfile",
                cnf,
                "-extensions",
                "leaf",
                "-out",
                "cert.pem",
            ],
        );
        Pki { dir }
    }

    fn file(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// The `[server.tls]` table serving this leaf with `key` as its key file.
    fn table_with_key(&self, key: &Path) -> String {
        format!(
            "[server.tls]\ncert = {:?}\nkey = {:?}\n",
            self.file("cert.pem"),
            key
        )
    }

    fn table(&self) -> String {
        self.table_with_key(&self.file("key.pem"))
    }

    /// A client trusting this CA only, offering HTTP/2 and HTTP/1.1 by ALPN.
    fn client(&self) -> Client {
        self.client_builder().build().unwrap()
    }

    fn client_builder(&self) -> reqwest::blocking::ClientBuilder {
        let ca = std::fs::read(self.file("ca.pem")).unwrap();
        Client::builder()
            .timeout(WAIT)
            .tls_built_in_root_certs(false)
            .add_root_certificate(Certificate::from_pem(&ca).unwrap())
    }
}

fn openssl(dir: &TempDir, head: &[&str], key: &[&str], tail: &[&str]) {
    let out = Command::new("openssl")
        .args(head)
        .args(key)
        .args(tail)
        .current_dir(dir.path())
        .output()
        .expect("the openssl command (Debian package openssl)");
    assert!(
        out.status.success(),
        "openssl {head:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Every error in `e`'s chain, for a message that names the cause.
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

#[test]
fn tools_are_called_over_https_with_http2_when_the_host_offers_it() {
    let pki = Pki::new();
    // Quick keep-alives, so that the session's own stream shows it is attached.
    let config = format!(
        "[server]\nsse_keepalive_ms = 100\n\n{}",
        named_fixture("alpha")
    );
    let server = Server::start_https(&config, &pki.table(), "127.0.0.1");
    let stderr = server.stderr();
    assert!(
        stderr.contains("Streamable HTTP at https://127.0.0.1:"),
        "{stderr}"
    );

    let mut h2 = server.ready_host_using(pki.client());
    let (_, r) = h2.send("tools/list", json!({}));
    assert_eq!((r.status(), r.version()), (StatusCode::OK, Version::HTTP_2));
    let answer = h2.call("alpha__echo", json!({"text": "over h2"}));
    assert_eq!(text_of(&answer), "over h2");
    // Streams work over HTTP/2 too: a POST answered with progress events, and the GET stream.
    let progress = json!({"name": "alpha__progress", "arguments": {"steps": 2}, "_meta": {"progressToken": "t"}});
    let (_, r) = h2.send("tools/call", progress);
    assert_eq!(content_type(&r), "text/event-stream");
    let messages = messages_of(r);
    assert_eq!(text_of(messages.last().unwrap()), "progressed 2");
    Events::attached(&h2).close();

    let mut h1 = server.ready_host_using(pki.client_builder().http1_only().build().unwrap());
    let (_, r) = h1.send("tools/list", json!({}));
    assert_eq!(
        (r.status(), r.version()),
        (StatusCode::OK, Version::HTTP_11)
    );
    let answer = h1.call("alpha__echo", json!({"text": "over http/1.1"}));
    assert_eq!(text_of(&answer), "over http/1.1");
}

#[test]
fn a_host_that_trusts_another_ca_is_refused() {
    let pki = Pki::new();
    let other = Pki::new();
    let server = Server::start_https(&named_fixture("alpha"), &pki.table(), "127.0.0.1");
    let e = other
        .client()
        .get(server.url("/healthz"))
        .send()
        .unwrap_err();
    let text = chain(&e);
    assert!(e.is_connect() && text.contains("certificate"), "{text}");
    // Plain HTTP to the TLS port gets no answer either.
    let plain = client().get(format!("http://127.0.0.1:{}/healthz", server.port));
    assert!(plain.send().is_err());
}

#[test]
fn serve_and_check_refuse_a_missing_or_mismatched_key_naming_the_file() {
    let pki = Pki::new();
    let other = Pki::new();
    let missing = pki.file("missing-key.pem");
    let stderr = serve_refused(&format!(
        "{}{}",
        named_fixture("alpha"),
        pki.table_with_key(&missing)
    ));
    assert!(
        stderr.contains("server.tls.key")
            && stderr.contains(missing.to_str().unwrap())
            && stderr.contains("cannot read"),
        "{stderr}"
    );

    let foreign = other.file("key.pem");
    let stderr = serve_refused(&format!(
        "{}{}",
        named_fixture("alpha"),
        pki.table_with_key(&foreign)
    ));
    assert!(
        stderr.contains("server.tls.key")
            && stderr.contains(foreign.to_str().unwrap())
            && stderr.contains("does not match the certificate"),
        "{stderr}"
    );

    // A certificate file that holds a key instead.
    let swapped = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        pki.file("key.pem"),
        pki.file("key.pem")
    );
    let stderr = serve_refused(&format!("{}{swapped}", named_fixture("alpha")));
    assert!(
        stderr.contains("server.tls.cert") && stderr.contains("holds no PEM certificate"),
        "{stderr}"
    );

    // `check` reads the files too, without starting anything.
    let dir = TempDir::new("tls-check");
    let config = format!("{}{}", named_fixture("alpha"), pki.table_with_key(&missing));
    let path = dir.write("m.toml", &config);
    let (code, _, err) = run_manifold(
        &["check", "--no-start", "--config", path.to_str().unwrap()],
        &[],
    );
    assert_ne!(code, 0, "{err}");
    assert!(
        err.contains("server.tls.key") && err.contains("missing-key.pem"),
        "{err}"
    );
}

#[test]
fn credentials_over_plain_http_beyond_loopback_are_warned_of() {
    let keys = format!(
        "[teams.red]\napi_keys = [\"{KEY}\"]\n\n{}",
        named_fixture("alpha")
    );
    let plain = Server::start_with(&keys, "info", &[], "0.0.0.0");
    let stderr = plain.stderr();
    assert!(
        stderr.contains("WARN") && stderr.contains("clear text") && stderr.contains("[server.tls]"),
        "{stderr}"
    );

    let pki = Pki::new();
    let secure = Server::start_https(&keys, &pki.table(), "0.0.0.0");
    assert!(
        !secure.stderr().contains("clear text"),
        "{}",
        secure.stderr()
    );
    // Hosts are pointed at the https:// resource in the protected resource metadata.
    let metadata: serde_json::Value = pki
        .client()
        .get(secure.url("/.well-known/oauth-protected-resource"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let resource = metadata["resource"].as_str().unwrap();
    assert!(resource.starts_with("https://127.0.0.1:"), "{metadata}");
    let loopback = Server::start_with(&keys, "info", &[], "127.0.0.1");
    assert!(!loopback.stderr().contains("clear text"));
}

#[test]
fn a_reload_serves_renewed_certificate_files_to_new_connections() {
    let (first, second) = (Pki::new(), Pki::new());
    let served = TempDir::new("served-tls");
    let put = |cert: &Pki, key: &Pki| {
        std::fs::copy(cert.file("cert.pem"), served.path().join("cert.pem")).unwrap();
        std::fs::copy(key.file("key.pem"), served.path().join("key.pem")).unwrap();
    };
    put(&first, &first);
    let table = format!(
        "[server.tls]\ncert = {:?}\nkey = {:?}\n",
        served.path().join("cert.pem"),
        served.path().join("key.pem")
    );
    let config = format!(
        "[server]\nadmin = \"127.0.0.1:0\"\n\n{}",
        named_fixture("alpha")
    );
    let server = Server::start_https(&config, &table, "127.0.0.1");
    let healthz = |pki: &Pki| pki.client().get(server.url("/healthz")).send();
    assert!(healthz(&first).is_ok());
    assert!(healthz(&second).is_err());
    let file = std::fs::read_to_string(server.config_path()).unwrap();
    // A key that is not the certificate's is refused; the old pair serves on.
    put(&second, &first);
    let (status, answer) = server.reload(&file);
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{answer}");
    assert!(
        answer["error"].as_str().unwrap().contains("does not match"),
        "{answer}"
    );
    assert!(healthz(&first).is_ok());
    // The renewed pair is served to new connections.
    put(&second, &second);
    let (status, answer) = server.reload(&file);
    assert_eq!(status, StatusCode::OK, "{answer}");
    assert_eq!(answer["tls_reread"], true, "{answer}");
    assert!(healthz(&second).is_ok());
    assert!(healthz(&first).is_err());
}
