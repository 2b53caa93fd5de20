//! [`FileStore`]: every grant in one sealed file, for one process (`store = "file"`).
//!
//! The file is read once, at start, and written whole after each change: a temporary file
//! beside it (mode 0600) is written, flushed to disk and renamed over it, so that a crash
//! leaves either the old grants or the new ones, never a torn file. Writes are made on a
//! blocking thread, one at a time. Refresh locks and once-values (consents in progress) are
//! kept in memory: one process has nobody to share them with, and a consent interrupted by a
//! restart is asked again.

use std::collections::BTreeMap;
use std::fs;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use futures::future::BoxFuture;
use futures::FutureExt;
use manifold_config::SealKey;
use serde::{Deserialize, Serialize};

use super::memory::MemoryStore;
use super::seal::Sealer;
use super::{Grant, Owner, StoreError, TokenStore};

/// What the seal of the whole file binds it to.
const PLACE: &[u8] = b"file";

/// Grants in a sealed file; locks and once-values in memory.
pub struct FileStore {
    inner: Arc<Inner>,
}

struct Inner {
    path: PathBuf,
    sealer: Sealer,
    /// The grants as last written; reads are served from here.
    memory: MemoryStore,
    /// Held by the one change being written, on a blocking thread.
    writer: Mutex<()>,
}

/// The file's content once opened.
#[derive(Serialize, Deserialize)]
struct Content {
    grants: Vec<Entry>,
}

#[derive(Serialize, Deserialize)]
struct Entry {
    upstream: String,
    /// [`Owner::hex`].
    owner: String,
    grant: Grant,
}

type Grants = BTreeMap<(String, Owner), Grant>;

impl FileStore {
    /// Opens the store at `path`, reading the grants it holds (none when there is no file
    /// yet). A file that does not open with `keys` is an error naming the file.
    pub fn open(path: &Path, keys: &[SealKey]) -> Result<Self, StoreError> {
        let sealer = Sealer::new(keys)?;
        let memory = MemoryStore::new();
        match fs::read(path) {
            Ok(sealed) => {
                memory.replace(read(&sealer, &sealed).map_err(|e| {
                    StoreError(format!("the token file {}: {}", path.display(), e.0))
                })?)
            }
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(StoreError(format!(
                    "the token file {} cannot be read: {e}",
                    path.display()
                )))
            }
        }
        Ok(Self {
            inner: Arc::new(Inner {
                path: path.to_owned(),
                sealer,
                memory,
                writer: Mutex::new(()),
            }),
        })
    }

    /// Applies `change` to the grants and writes them, on a blocking thread; the grants in
    /// memory change only once the file is written. `change` says whether anything changed
    /// (nothing to write otherwise) and what to return.
    async fn change<T, F>(&self, change: F) -> Result<T, StoreError>
    where
        T: Send + 'static,
        F: FnOnce(&mut Grants) -> (bool, T) + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        tokio::task::spawn_blocking(move || {
            let _writing = inner.writer.lock().unwrap_or_else(PoisonError::into_inner);
            let mut grants = inner.memory.snapshot();
            let (changed, out) = change(&mut grants);
            if changed {
                inner.write(&grants)?;
                inner.memory.replace(grants);
            }
            Ok(out)
        })
        .await
        .map_err(|e| StoreError(format!("writing the token file failed: {e}")))?
    }
}

/// The grants in a sealed file's bytes.
fn read(sealer: &Sealer, sealed: &[u8]) -> Result<Grants, StoreError> {
    let opened = sealer.open(PLACE, sealed).map_err(|_| {
        StoreError(
            "does not open with the configured keys ([credentials] key, previous_keys): \
             it was sealed with another key, or altered"
                .into(),
        )
    })?;
    let content: Content = serde_json::from_slice(&opened.value)
        .map_err(|_| StoreError("opens but holds no grants Manifold can read".into()))?;
    let mut grants = Grants::new();
    for entry in content.grants {
        let owner = Owner::from_hex(&entry.owner)
            .ok_or_else(|| StoreError("holds a grant of an unreadable owner".into()))?;
        grants.insert((entry.upstream, owner), entry.grant);
    }
    Ok(grants)
}

impl Inner {
    /// Writes `grants`, sealed, over the file: a temporary file (0600) renamed over it.
    fn write(&self, grants: &Grants) -> Result<(), StoreError> {
        let content = Content {
            grants: grants
                .iter()
                .map(|((upstream, owner), grant)| Entry {
                    upstream: upstream.clone(),
                    owner: owner.hex(),
                    grant: grant.clone(),
                })
                .collect(),
        };
        let json = serde_json::to_vec(&content)
            .map_err(|e| StoreError(format!("the grants could not be written: {e}")))?;
        let sealed = self.sealer.seal(PLACE, &json)?;
        let failed = |e: std::io::Error| {
            StoreError(format!(
                "the token file {} cannot be written: {e}",
                self.path.display()
            ))
        };
        let temp = temporary(&self.path);
        let mut file = private_file(&temp).map_err(failed)?;
        file.write_all(&sealed).map_err(failed)?;
        file.sync_all().map_err(failed)?;
        drop(file);
        fs::rename(&temp, &self.path).map_err(failed)?;
        // The rename itself is durable once the directory is flushed; not every filesystem
        // allows that, and the grants are written either way.
        if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = fs::File::open(dir).and_then(|d| d.sync_all());
        }
        Ok(())
    }
}

/// The temporary file beside `path` that is renamed over it.
fn temporary(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".tmp");
    path.with_file_name(name)
}

/// A new file only its owner may read or write (on Unix).
fn private_file(path: &Path) -> std::io::Result<fs::File> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    options.open(path)
}

impl TokenStore for FileStore {
    fn is_shared(&self) -> bool {
        false
    }

    fn get<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<Option<Grant>, StoreError>> {
        self.inner.memory.get(upstream, owner)
    }

    fn put<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        grant: &'a Grant,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let (upstream, owner, grant) = (upstream.to_owned(), *owner, grant.clone());
        self.change(move |grants| {
            grants.insert((upstream, owner), grant);
            (true, ())
        })
        .boxed()
    }

    fn remove<'a>(
        &'a self,
        upstream: Option<&'a str>,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let (upstream, owner) = (upstream.map(str::to_owned), *owner);
        self.change(move |grants| {
            let before = grants.len();
            grants.retain(|(u, o), _| !(*o == owner && upstream.as_ref().is_none_or(|x| x == u)));
            let removed = before - grants.len();
            (removed > 0, removed)
        })
        .boxed()
    }

    fn remove_upstream<'a>(
        &'a self,
        upstream: &'a str,
    ) -> BoxFuture<'a, Result<usize, StoreError>> {
        let upstream = upstream.to_owned();
        self.change(move |grants| {
            let before = grants.len();
            grants.retain(|(u, _), _| *u != upstream);
            let removed = before - grants.len();
            (removed > 0, removed)
        })
        .boxed()
    }

    fn list(&self) -> BoxFuture<'_, Result<Vec<(String, Owner, Grant)>, StoreError>> {
        self.inner.memory.list()
    }

    fn lock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
        ttl: Duration,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        self.inner.memory.lock(upstream, owner, ttl)
    }

    fn unlock<'a>(
        &'a self,
        upstream: &'a str,
        owner: &'a Owner,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.memory.unlock(upstream, owner)
    }

    fn put_once<'a>(
        &'a self,
        key: &'a str,
        value: &'a [u8],
        ttl: Duration,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.inner.memory.put_once(key, value, ttl)
    }

    fn peek_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.inner.memory.peek_once(key)
    }

    fn take_once<'a>(&'a self, key: &'a str) -> BoxFuture<'a, Result<Option<Vec<u8>>, StoreError>> {
        self.inner.memory.take_once(key)
    }
}

#[cfg(test)]
mod tests;
