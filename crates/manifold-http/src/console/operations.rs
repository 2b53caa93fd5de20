//! What the console asks of the process that serves it, beyond the router: the configuration
//! in force and where it was read, the last reload's outcome, and writing a pin into the lock
//! file. The binary implements it (it owns the file, the lock file and the reload loop).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use manifold_catalog::{Kind, Pin};
use manifold_config::Config;

/// What the console reads of the process and asks it to do.
pub trait Operations: Send + Sync {
    /// The configuration in force (from start, or the last reload it accepted).
    fn running(&self) -> Arc<Running>;
    /// The last reload's outcome, whatever asked for it; `None` before the first.
    fn last_reload(&self) -> Option<ReloadRecord>;
    /// Writes `pin` as the pin of the item `original` of `kind` of upstream `upstream` (its
    /// key) into the lock file, every other pin kept, as `manifold pin` writes it. The lock
    /// file's path, or why nothing was written.
    fn repin(
        &self,
        upstream: &str,
        kind: Kind,
        original: &str,
        pin: Pin,
    ) -> Result<PathBuf, String>;
}

/// The configuration in force.
pub struct Running {
    /// The file it was read from.
    pub path: PathBuf,
    pub config: Config,
    /// The file's text as it was read, with every secret replaced by `<redacted>`; or why it
    /// cannot be shown.
    pub redacted: Result<String, String>,
}

/// One reload's outcome.
#[derive(Clone)]
pub struct ReloadRecord {
    /// What asked for it: `SIGHUP`, `file change`, `admin`, `console`.
    pub trigger: String,
    pub at: SystemTime,
    /// The report of what changed (JSON text), or why the file was refused.
    pub outcome: Result<String, String>,
}
