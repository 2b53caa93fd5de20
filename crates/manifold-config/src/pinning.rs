//! `[pinning]`: where the lock file of pinned tool and prompt definitions is, and what happens
//! to a tool or prompt that no longer matches its pin or has none.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::validate::Ctx;
use crate::ConfigError;

/// The lock file's name when `[pinning]` does not name one: beside the config file.
pub const DEFAULT_LOCK_FILE: &str = "manifold.lock";

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawPinning {
    pub(crate) lock: Option<String>,
    pub(crate) on_change: Option<String>,
    pub(crate) on_new: Option<String>,
}

/// A validated `[pinning]` section. Its presence turns checking on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PinningSettings {
    /// The lock file, resolved against the config file's folder.
    pub lock: PathBuf,
    pub on_change: OnChange,
    pub on_new: OnNew,
}

/// What happens to a tool or prompt whose definition differs from its pin.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnChange {
    /// Left out of every listing; calling it is an error naming the change.
    #[default]
    Hold,
    /// Served as it is now; the change is logged once.
    Warn,
}

/// What happens to a tool or prompt the lock file has no pin for.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OnNew {
    /// Left out of every listing until it is pinned.
    #[default]
    Hold,
    /// Served unpinned.
    Allow,
}

/// Where `manifold pin` writes the lock file of a config read from `source`: the path
/// `[pinning] lock` names, else `manifold.lock` beside the config.
pub fn lock_path(source: &Path, pinning: Option<&PinningSettings>) -> PathBuf {
    match pinning {
        Some(p) => p.lock.clone(),
        None => relative_to_config(source, DEFAULT_LOCK_FILE),
    }
}

pub(crate) fn settings(
    ctx: &Ctx<'_>,
    raw: Option<RawPinning>,
) -> Result<Option<PinningSettings>, ConfigError> {
    let Some(raw) = raw else { return Ok(None) };
    let lock = match raw.lock.as_deref() {
        None => DEFAULT_LOCK_FILE,
        Some("") => return Err(ctx.err("pinning.lock", "must not be empty")),
        Some(lock) => lock,
    };
    let on_change = match raw.on_change.as_deref() {
        None | Some("hold") => OnChange::Hold,
        Some("warn") => OnChange::Warn,
        Some(other) => return Err(ctx.err("pinning.on_change", choice(other, "hold", "warn"))),
    };
    let on_new = match raw.on_new.as_deref() {
        None | Some("hold") => OnNew::Hold,
        Some("allow") => OnNew::Allow,
        Some(other) => return Err(ctx.err("pinning.on_new", choice(other, "hold", "allow"))),
    };
    Ok(Some(PinningSettings {
        lock: relative_to_config(ctx.file, lock),
        on_change,
        on_new,
    }))
}

fn choice(got: &str, a: &str, b: &str) -> String {
    format!("{got:?} is not one of the choices; use {a:?} or {b:?}")
}

/// `path` as seen from the config file's folder (absolute paths are kept).
fn relative_to_config(source: &Path, path: &str) -> PathBuf {
    let path = Path::new(path);
    match source.parent() {
        Some(dir) if path.is_relative() && !dir.as_os_str().is_empty() => dir.join(path),
        _ => path.to_path_buf(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn parse(text: &str) -> Result<crate::Config, ConfigError> {
        crate::parse_str(Path::new("/etc/m/manifold.toml"), text, &|_| None)
    }

    #[test]
    fn defaults_hold_and_lock_beside_the_config() {
        let config = parse("[pinning]\n").unwrap();
        let pinning = config.pinning.unwrap();
        assert_eq!(pinning.lock, Path::new("/etc/m/manifold.lock"));
        assert_eq!(pinning.on_change, OnChange::Hold);
        assert_eq!(pinning.on_new, OnNew::Hold);
    }

    #[test]
    fn lock_is_relative_to_the_config_folder() {
        let config =
            parse("[pinning]\nlock = \"pins/a.lock\"\non_change = \"warn\"\non_new = \"allow\"\n")
                .unwrap();
        let pinning = config.pinning.unwrap();
        assert_eq!(pinning.lock, Path::new("/etc/m/pins/a.lock"));
        assert_eq!(pinning.on_change, OnChange::Warn);
        assert_eq!(pinning.on_new, OnNew::Allow);
    }

    #[test]
    fn without_the_section_nothing_is_checked_and_pin_writes_beside_the_config() {
        let config = parse("").unwrap();
        assert!(config.pinning.is_none());
        assert_eq!(
            lock_path(&config.source, None),
            Path::new("/etc/m/manifold.lock")
        );
    }

    #[test]
    fn errors_name_the_file_the_key_and_the_problem() {
        let e = parse("[pinning]\non_change = \"ignore\"\n").unwrap_err();
        assert_eq!(e.key, "pinning.on_change");
        assert!(e
            .to_string()
            .starts_with("/etc/m/manifold.toml: pinning.on_change: "));
        assert!(e.problem.contains("\"warn\""), "{e}");
        let e = parse("[pinning]\non_new = \"deny\"\n").unwrap_err();
        assert_eq!(e.key, "pinning.on_new");
        let e = parse("[pinning]\nlokc = \"x\"\n").unwrap_err();
        assert_eq!(e.key, "pinning.lokc");
        assert!(e.problem.starts_with("unknown key"), "{e}");
        let e = parse("[pinning]\nlock = \"\"\n").unwrap_err();
        assert_eq!(e.key, "pinning.lock");
    }
}
