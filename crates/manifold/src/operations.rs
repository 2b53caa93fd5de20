//! The console's view of this process: the configuration in force (recorded at start and by
//! every reload it accepts), the last reload's outcome whatever asked for it, and the re-pin of
//! one item in the lock file.

use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::SystemTime;

use manifold_catalog::{Kind, Pin};
use manifold_config::Config;
use manifold_http::{Operations, ReloadRecord, Running};

/// What the reload loop records and the console reads.
pub struct Operated {
    running: Mutex<Arc<Running>>,
    last: Mutex<Option<ReloadRecord>>,
    /// Re-pins run one at a time: each reads the lock file, changes one pin and writes it whole.
    pinning: Mutex<()>,
}

impl Operated {
    /// Records `config`, read from `path` at start.
    pub fn new(path: PathBuf, config: &Config) -> Arc<Self> {
        Arc::new(Self {
            running: Mutex::new(Arc::new(running(path, config))),
            last: Mutex::new(None),
            pinning: Mutex::new(()),
        })
    }

    /// Records a reload's outcome, and the configuration it put in force when it was accepted.
    pub fn reloaded(&self, trigger: &str, outcome: &Result<String, String>, config: &Config) {
        if outcome.is_ok() {
            let path = self.running().path.clone();
            let now = Arc::new(running(path, config));
            *self.running.lock().unwrap_or_else(PoisonError::into_inner) = now;
        }
        let record = ReloadRecord {
            trigger: trigger.to_owned(),
            at: SystemTime::now(),
            outcome: outcome.clone(),
        };
        *self.last.lock().unwrap_or_else(PoisonError::into_inner) = Some(record);
    }
}

/// The configuration in force, with the file's text read now (just after it was loaded) and
/// redacted.
fn running(path: PathBuf, config: &Config) -> Running {
    let redacted = std::fs::read_to_string(&path)
        .map_err(|e| format!("{}: cannot read the file: {e}", path.display()))
        .and_then(|text| manifold_config::redact::config_text(&path, &text));
    Running {
        path,
        config: config.clone(),
        redacted,
    }
}

impl Operations for Operated {
    fn running(&self) -> Arc<Running> {
        Arc::clone(&self.running.lock().unwrap_or_else(PoisonError::into_inner))
    }

    fn last_reload(&self) -> Option<ReloadRecord> {
        self.last
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    fn repin(
        &self,
        upstream: &str,
        kind: Kind,
        original: &str,
        pin: Pin,
    ) -> Result<PathBuf, String> {
        let running = self.running();
        let Some(pinning) = &running.config.pinning else {
            return Err("pinning is off: the configuration has no [pinning]".to_owned());
        };
        let path = manifold_config::lock_path(&running.config.source, Some(pinning));
        let _one_at_a_time = self.pinning.lock().unwrap_or_else(PoisonError::into_inner);
        crate::pin::repin(&path, upstream, kind, original, pin).map_err(|e| format!("{e:#}"))?;
        Ok(path)
    }
}
