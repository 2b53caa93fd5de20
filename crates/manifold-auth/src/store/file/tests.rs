use std::sync::atomic::{AtomicUsize, Ordering};

use super::super::seal::tests::grant;
use super::*;

/// A directory of its own for one test, removed when dropped.
struct Dir(PathBuf);

impl Dir {
    fn new() -> Self {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "manifold-tokens-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).unwrap();
        Self(dir)
    }

    fn file(&self) -> PathBuf {
        self.0.join("tokens.sealed")
    }
}

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn key(byte: u8) -> SealKey {
    SealKey([byte; 32])
}

#[tokio::test]
async fn every_grant_survives_a_reopen_and_the_file_hides_them() {
    let dir = Dir::new();
    let (alice, bob) = (
        Owner::caller("eng", "key:alice"),
        Owner::caller("eng", "key:bob"),
    );
    {
        let store = FileStore::open(&dir.file(), &[key(1)]).unwrap();
        assert!(store.list().await.unwrap().is_empty());
        store
            .put("forge", &alice, &grant("secret-a"))
            .await
            .unwrap();
        store.put("forge", &bob, &grant("secret-b")).await.unwrap();
        store.put("wiki", &alice, &grant("secret-c")).await.unwrap();
        assert_eq!(store.remove(Some("wiki"), &alice).await.unwrap(), 1);
    }
    let bytes = fs::read(dir.file()).unwrap();
    let text = String::from_utf8_lossy(&bytes);
    assert!(
        !text.contains("secret") && !text.contains("forge"),
        "{text}"
    );
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(dir.file()).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600);
    }
    let reopened = FileStore::open(&dir.file(), &[key(1)]).unwrap();
    assert_eq!(
        reopened.get("forge", &alice).await.unwrap(),
        Some(grant("secret-a"))
    );
    assert_eq!(
        reopened.get("forge", &bob).await.unwrap(),
        Some(grant("secret-b"))
    );
    assert_eq!(reopened.get("wiki", &alice).await.unwrap(), None);
    assert_eq!(reopened.remove_upstream("forge").await.unwrap(), 2);
    let emptied = FileStore::open(&dir.file(), &[key(1)]).unwrap();
    assert!(emptied.list().await.unwrap().is_empty());
}

#[tokio::test]
async fn a_file_sealed_with_an_unknown_key_is_a_clear_error_at_start() {
    let dir = Dir::new();
    let store = FileStore::open(&dir.file(), &[key(1)]).unwrap();
    store
        .put("forge", &Owner::shared(), &grant("tok-x"))
        .await
        .unwrap();
    let e = FileStore::open(&dir.file(), &[key(2)])
        .err()
        .unwrap()
        .to_string();
    assert!(
        e.contains("tokens.sealed") && e.contains("another key"),
        "{e}"
    );
    assert!(!e.contains("tok-x"), "{e}");
    fs::write(dir.file(), b"not sealed").unwrap();
    assert!(FileStore::open(&dir.file(), &[key(1)]).is_err());
    let e = FileStore::open(&dir.file(), &[]).err().unwrap().to_string();
    assert!(e.contains("[credentials] key"), "{e}");
}

#[tokio::test]
async fn after_a_rotation_the_file_opens_and_is_sealed_again_with_the_new_key() {
    let dir = Dir::new();
    let owner = Owner::shared();
    let old = FileStore::open(&dir.file(), &[key(1)]).unwrap();
    old.put("forge", &owner, &grant("t1")).await.unwrap();
    let rotated = FileStore::open(&dir.file(), &[key(2), key(1)]).unwrap();
    assert_eq!(
        rotated.get("forge", &owner).await.unwrap(),
        Some(grant("t1"))
    );
    rotated.put("wiki", &owner, &grant("t2")).await.unwrap();
    // Written since the rotation: the old key is no longer needed.
    let new_only = FileStore::open(&dir.file(), &[key(2)]).unwrap();
    assert_eq!(new_only.list().await.unwrap().len(), 2);
}

#[tokio::test]
async fn a_write_that_fails_changes_nothing() {
    let dir = Dir::new();
    let path = dir.0.join("missing-dir").join("tokens.sealed");
    let store = FileStore::open(&path, &[key(1)]).unwrap();
    let e = store
        .put("forge", &Owner::shared(), &grant("t"))
        .await
        .err()
        .unwrap();
    assert!(e.to_string().contains("cannot be written"), "{e}");
    assert_eq!(store.get("forge", &Owner::shared()).await.unwrap(), None);
}
