//! TLS for the HTTP listener (`[server.tls]`): the certificate chain and key read from PEM
//! files into a rustls server configuration. actix-web adds the ALPN protocols (`h2`, then
//! `http/1.1`) when it binds, so hosts that offer HTTP/2 get it.
//!
//! Every problem is a `ConfigError` naming the config file, the key (`server.tls.cert` or
//! `server.tls.key`) and the PEM file, so that `manifold serve` refuses to start, and
//! `manifold check` fails, with the same message.

use std::path::Path;
use std::sync::Arc;

use arc_swap::ArcSwap;
use manifold_config::{ConfigError, TlsSettings};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
pub use rustls::ServerConfig;

const CERT_KEY: &str = "server.tls.cert";
const KEY_KEY: &str = "server.tls.key";

/// The listener's certificate chain and key: read from the PEM files when the listener is
/// set up, and again at every configuration reload, so that a renewed certificate is served
/// to new connections without a restart (connections already open keep theirs).
#[derive(Debug, Clone)]
pub struct Certificate(Arc<ArcSwap<CertifiedKey>>);

impl Certificate {
    /// Reads the files `settings` name. `config_file` is the file the settings came from,
    /// for errors.
    pub fn load(config_file: &Path, settings: &TlsSettings) -> Result<Self, ConfigError> {
        let key = certified_key(config_file, settings)?;
        Ok(Self(Arc::new(ArcSwap::from_pointee(key))))
    }

    /// Serves `other`'s certificate from now on (one read by a reload, checked already).
    pub fn replace_with(&self, other: &Certificate) {
        self.0.store(other.0.load_full());
    }

    /// The rustls configuration that serves this certificate (and whatever replaces it).
    pub fn server_config(&self) -> Result<ServerConfig, ConfigError> {
        // The provider is named here rather than taken from the process default: another
        // crate in the build may enable a second one, and then rustls cannot pick one.
        let config = ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| ConfigError {
                file: std::path::PathBuf::new(),
                key: CERT_KEY.to_owned(),
                problem: format!("TLS cannot be set up: {e}"),
            })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::new(Resolver(Arc::clone(&self.0))));
        Ok(config)
    }
}

/// Serves whichever certificate the [`Certificate`] holds when a connection starts.
#[derive(Debug)]
struct Resolver(Arc<ArcSwap<CertifiedKey>>);

impl ResolvesServerCert for Resolver {
    fn resolve(&self, _: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.load_full())
    }
}

/// The rustls configuration for `settings`, read from disk now (see [`Certificate`]).
pub fn server_config(
    config_file: &Path,
    settings: &TlsSettings,
) -> Result<ServerConfig, ConfigError> {
    Certificate::load(config_file, settings)?.server_config()
}

/// The chain and key of `settings`, checked to belong together.
fn certified_key(config_file: &Path, settings: &TlsSettings) -> Result<CertifiedKey, ConfigError> {
    let err = |key: &str, problem: String| ConfigError {
        file: config_file.to_path_buf(),
        key: key.to_owned(),
        problem,
    };
    let chain = certificates(&settings.cert).map_err(|p| err(CERT_KEY, p))?;
    let key = private_key(&settings.key).map_err(|p| err(KEY_KEY, p))?;
    CertifiedKey::from_der(chain, key, &provider()).map_err(|e| {
        let problem = match e {
            rustls::Error::InconsistentKeys(_) => format!(
                "{} does not match the certificate in {}",
                settings.key.display(),
                settings.cert.display()
            ),
            other => format!("{} cannot be used: {other}", settings.key.display()),
        };
        err(KEY_KEY, problem)
    })
}

fn provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

/// Every certificate in the PEM file at `path`, in file order (the leaf first).
fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let pem = read(path)?;
    let chain = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| not_pem(path, &e))?;
    if chain.is_empty() {
        return Err(format!(
            "{} holds no PEM certificate (-----BEGIN CERTIFICATE-----)",
            path.display()
        ));
    }
    Ok(chain)
}

/// The first private key in the PEM file at `path`.
fn private_key(path: &Path) -> Result<PrivateKeyDer<'static>, String> {
    let pem = read(path)?;
    PrivateKeyDer::from_pem_slice(&pem).map_err(|e| match e {
        pem::Error::NoItemsFound => format!(
            "{} holds no unencrypted PEM private key (PKCS#8, PKCS#1 or SEC1)",
            path.display()
        ),
        other => not_pem(path, &other),
    })
}

fn read(path: &Path) -> Result<Vec<u8>, String> {
    std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))
}

fn not_pem(path: &Path, e: &pem::Error) -> String {
    format!("{} is not valid PEM: {e}", path.display())
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    fn settings(dir: &Path, cert: &str, key: &str) -> TlsSettings {
        let cert_path = dir.join("cert.pem");
        let key_path = dir.join("key.pem");
        std::fs::write(&cert_path, cert).unwrap();
        std::fs::write(&key_path, key).unwrap();
        TlsSettings {
            cert: cert_path,
            key: key_path,
        }
    }

    fn problem(settings: &TlsSettings) -> (String, String) {
        let e = server_config(Path::new("/etc/m.toml"), settings).unwrap_err();
        assert_eq!(e.file, PathBuf::from("/etc/m.toml"));
        (e.key, e.problem)
    }

    #[test]
    fn missing_and_non_pem_files_are_named() {
        let dir = std::env::temp_dir().join(format!("manifold-tls-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let gone = TlsSettings {
            cert: dir.join("nope.pem"),
            key: dir.join("nope-key.pem"),
        };
        let (key, text) = problem(&gone);
        assert_eq!(key, CERT_KEY);
        assert!(
            text.starts_with("cannot read ") && text.contains("nope.pem"),
            "{text}"
        );
        let (key, text) = problem(&settings(&dir, "not pem at all\n", "x"));
        assert_eq!(key, CERT_KEY);
        assert!(text.contains("holds no PEM certificate"), "{text}");
        let broken = "-----BEGIN CERTIFICATE-----\nAAAA\n";
        let (key, text) = problem(&settings(&dir, broken, "x"));
        assert_eq!(key, CERT_KEY);
        assert!(text.contains("is not valid PEM"), "{text}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}
