//! Where tokens are kept: the [`TokenStore`] seam and the types it keeps.
//!
//! A store keeps one [`Grant`] per (upstream, [`Owner`]), and short-lived single-use records
//! (a consent in progress) that any replica may complete. Stores that keep anything at rest
//! (a file, Redis) seal what they keep with AES-256-GCM; the owner is a hash, so a key names
//! no person. Refresh is single-flight: [`TokenStore::lock`] lets one replica spend a refresh
//! token while the others wait for what it stores.

use std::fmt;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

/// Whose token it is: a SHA-256 of the caller (team and principal id), or of the upstream's
/// shared identity. Never reversed; shown by its [`label`](Owner::label).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner([u8; 32]);

impl Owner {
    /// A caller: `principal` is the principal id (`key:NAME`, `jwt:ISS#SUB`, `local`).
    pub fn caller(team: &str, principal: &str) -> Self {
        let mut hash = Sha256::new();
        hash.update(b"caller\0");
        hash.update(team.as_bytes());
        hash.update(b"\0");
        hash.update(principal.as_bytes());
        Self(hash.finalize().into())
    }

    /// The one identity of a shared authorization or of client credentials.
    pub fn shared() -> Self {
        Self(Sha256::digest(b"shared\0").into())
    }

    /// The full hash, lower-case hex: how stores key a grant.
    pub fn hex(&self) -> String {
        self.0.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// The first 12 hex digits: enough to tell owners apart in a listing or a log line.
    pub fn label(&self) -> String {
        self.hex()[..12].to_owned()
    }

    /// The owner whose [`hex`](Owner::hex) this is.
    pub fn from_hex(text: &str) -> Option<Self> {
        if text.len() != 64 {
            return None;
        }
        let mut bytes = [0u8; 32];
        for (i, byte) in bytes.iter_mut().enumerate() {
            *byte = u8::from_str_radix(text.get(2 * i..2 * i + 2)?, 16).ok()?;
        }
        Some(Self(bytes))
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Owner({})", self.label())
    }
}

/// A token kept for (upstream, owner), with what refreshing it needs. Its Debug form shows
/// no token.
#[derive(Clone, PartialEq, Serialize, Deserialize)]
pub struct Grant {
    pub access_token: String,
    /// `Bearer` unless the token endpoint said otherwise.
    pub token_type: String,
    /// When the access token expires, in milliseconds since the Unix epoch; `None`: unknown.
    pub expires_at_ms: Option<u64>,
    pub refresh_token: Option<String>,
    /// The scopes granted (or asked for, when the answer did not say).
    pub scopes: Vec<String>,
    /// The issuer of the authorization server that granted it.
    pub issuer: Option<String>,
    /// The client it was granted to (a refresh must use the same).
    pub client_id: Option<String>,
    /// Who it is for, as listed to an operator (`team/principal`); never a secret.
    pub principal: String,
    /// When it was obtained (or last refreshed), milliseconds since the Unix epoch.
    pub obtained_at_ms: u64,
}

impl fmt::Debug for Grant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Grant")
            .field("token_type", &self.token_type)
            .field("expires_at_ms", &self.expires_at_ms)
            .field("refreshable", &self.refresh_token.is_some())
            .field("scopes", &self.scopes)
            .field("issuer", &self.issuer)
            .field("principal", &self.principal)
            .finish()
    }
}

/// A store that could not be reached or read; the text names the store and never a token.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct StoreError(pub String);

/// Where grants are kept. Implemented in memory ([`crate::store`]'s `MemoryStore`), in an
/// encrypted file, and in Redis (shared by replicas).
pub trait TokenStore: Send + Sync {
    /// Whether replicas share it (Redis): a refresh then takes [`lock`](TokenStore::lock).
    fn is_shared(&self) -> bool;

    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>>;

    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Removes the owner's grant for `upstream`, or every grant of the owner (`None`);
    /// returns how many there were.
    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Removes every grant for `upstream` (a reload removed it); returns how many.
    fn remove_upstream<'a>(&'a self, upstream: &'a str)
        -> BoxFuture<'a, Result<usize, StoreError>>;

    /// Every grant, with its upstream and owner (for listings; callers show no token).
    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>>;

    /// Takes the refresh lock of (upstream, owner) for at most `ttl`: `true` when this caller
    /// holds it now, `false` when another (replica) does. Released by
    /// [`unlock`](TokenStore::unlock) or when `ttl` runs out.
    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>>;

    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Keeps `value` under `key` for at most `ttl`, to be taken once (a consent in progress:
    /// the replica that receives its callback may not be the one that started it).
    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>>;

    /// Reads what [`put_once`](TokenStore::put_once) kept under `key`, leaving it there.
    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;

    /// Takes what [`put_once`](TokenStore::put_once) kept under `key`: the first taker gets
    /// it, every later one `None` (atomic across replicas).
    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>>;
}

mod fallback;
mod file;
mod memory;
pub mod seal;

pub use fallback::Fallback;
pub use file::FileStore;
pub use memory::MemoryStore;
pub use seal::Sealer;
