//! Tests of whole configurations through the public entry points, plus shared helpers.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

/// A directory under the system temp dir, removed on drop. (No tempfile dependency: this is
/// all the tests need.)
pub(crate) struct TempDir(PathBuf);

impl TempDir {
    pub(crate) fn new(name: &str) -> TempDir {
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!(
            "manifold-config-test-{}-{n}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }

    pub(crate) fn path(&self) -> &Path {
        &self.0
    }

    pub(crate) fn file(&self, name: &str, contents: &str) -> PathBuf {
        let path = self.0.join(name);
        std::fs::write(&path, contents).unwrap();
        path
    }

    pub(crate) fn executable(&self, name: &str) -> PathBuf {
        let path = self.file(name, "#!/bin/sh\nexit 0\n");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

mod credentials;
mod json;
mod toml_errors;
mod toml_values;

use std::collections::BTreeMap;

use crate::{parse_str, Config, ConfigError, Transport};

/// The environment every test sees: fixed, so tests never depend on the machine.
pub(crate) fn test_env(name: &str) -> Option<String> {
    match name {
        "HOME" => Some("/home/me".to_owned()),
        "MY_TOKEN" => Some("tok-123".to_owned()),
        "GITHUB_TOKEN" => Some("ghp_secret".to_owned()),
        "BIN" => Some("/opt/bin".to_owned()),
        _ => None,
    }
}

pub(crate) fn toml(text: &str) -> Result<Config, ConfigError> {
    parse_str(Path::new("/etc/manifold/manifold.toml"), text, &test_env)
}

pub(crate) fn json(text: &str) -> Result<Config, ConfigError> {
    parse_str(Path::new("/etc/claude/config.json"), text, &test_env)
}

/// Parses `text` as TOML, expecting an error; returns (key, problem) after checking that the
/// Display form is `FILE: KEY: PROBLEM`.
pub(crate) fn toml_err(text: &str) -> (String, String) {
    let err = match toml(text) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(err) => err,
    };
    check_display(&err, "/etc/manifold/manifold.toml");
    (err.key, err.problem)
}

pub(crate) fn json_err(text: &str) -> (String, String) {
    let err = match json(text) {
        Ok(config) => panic!("expected an error, got {config:?}"),
        Err(err) => err,
    };
    check_display(&err, "/etc/claude/config.json");
    (err.key, err.problem)
}

fn check_display(err: &ConfigError, file: &str) {
    assert_eq!(err.file, PathBuf::from(file));
    assert_eq!(
        err.to_string(),
        format!("{file}: {}: {}", err.key, err.problem)
    );
}

pub(crate) fn stdio(config: &Config, index: usize) -> &crate::StdioConfig {
    match &config.upstreams[index].transport {
        Transport::Stdio(stdio) => stdio,
        other => panic!("upstream {index} is not a process: {other:?}"),
    }
}

pub(crate) fn http(config: &Config, index: usize) -> &crate::HttpConfig {
    match &config.upstreams[index].transport {
        Transport::Http(http) => http,
        other => panic!("upstream {index} is not an HTTP upstream: {other:?}"),
    }
}

pub(crate) fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn extension_picks_the_format() {
    let toml_text = "[upstreams.a]\ncommand = \"x\"\n";
    for name in ["c.toml", "c.TOML", "dir.d/c.Toml"] {
        let config = parse_str(Path::new(name), toml_text, &test_env).unwrap();
        assert_eq!(config.upstreams[0].key, "a", "{name}");
    }
    let json_text = r#"{"mcpServers": {"a": {"command": "x"}}}"#;
    let config = parse_str(Path::new("c.JSON"), json_text, &test_env).unwrap();
    assert_eq!(config.upstreams[0].key, "a");
}

#[test]
fn other_extensions_are_rejected_with_the_supported_ones() {
    for name in ["c.yaml", "c", "toml", "c.toml.bak", "c.jsonc"] {
        let err = parse_str(Path::new(name), "", &test_env).unwrap_err();
        assert_eq!(err.key, "(file)", "{name}");
        assert!(
            err.problem.contains(".toml") && err.problem.contains(".json"),
            "{err}"
        );
        assert!(
            err.to_string().starts_with(&format!("{name}: (file): ")),
            "{err}"
        );
    }
}

#[test]
fn load_reads_files_and_reports_unreadable_ones() {
    let dir = TempDir::new("load");
    let path = dir.file(
        "m.toml",
        "[upstreams.t]\ncommand = \"${BIN}/t\"\ncwd = \"work\"\n",
    );
    let config = crate::load_with_env(&path, &test_env).unwrap();
    assert_eq!(config.source, path);
    assert_eq!(stdio(&config, 0).command, "/opt/bin/t");
    assert_eq!(stdio(&config, 0).cwd, Some(dir.path().join("work")));

    let missing = dir.path().join("missing.toml");
    let err = crate::load(&missing).unwrap_err();
    assert_eq!(err.file, missing);
    assert_eq!(err.key, "(file)");
    assert!(err.problem.starts_with("cannot read the file: "), "{err}");

    // The extension is checked before reading, so a wrong file is reported as such.
    let err = crate::load(&dir.path().join("missing.yaml")).unwrap_err();
    assert!(err.problem.contains("unsupported file extension"), "{err}");
}

#[test]
fn load_uses_the_process_environment() {
    // PATH is set in every test environment; a variable that is certainly unset is an error.
    let dir = TempDir::new("procenv");
    let path = dir.file(
        "m.json",
        r#"{"mcpServers": {"a": {"command": "x", "args": ["${PATH}"]}}}"#,
    );
    let config = crate::load(&path).unwrap();
    assert_eq!(stdio(&config, 0).args, vec![std::env::var("PATH").unwrap()]);
    let var = "MANIFOLD_CONFIG_TEST_SURELY_UNSET_VARIABLE";
    let path = dir.file(
        "n.json",
        &format!(r#"{{"mcpServers": {{"a": {{"command": "${{{var}}}"}}}}}}"#),
    );
    let err = crate::load(&path).unwrap_err();
    assert_eq!(err.key, "mcpServers.a.command");
    assert_eq!(
        err.problem,
        format!("environment variable {var} is not set")
    );
}

#[test]
fn shipped_example_configs_load() {
    // The repository's examples must stay valid, every one of them; the variables they read
    // are given here. (The certificate files of secure.toml are read by `manifold check`.)
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let env = |name: &str| match name {
        "HOME" => Some("/home/me".to_owned()),
        "MANIFOLD_TOKEN_KEY" => Some("AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=".to_owned()),
        // Secrets the examples read (API keys, client secrets) are given stand-ins, distinct
        // by name since two teams may not share a key.
        _ => Some(format!("example-{name}-0123456789abcdef")),
    };
    let mut loaded = Vec::new();
    let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    for entry in entries {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !(name.ends_with(".toml") || name.ends_with(".json")) {
            continue;
        }
        let config = crate::load_with_env(&path, &env).unwrap_or_else(|e| panic!("{e}"));
        assert!(!config.upstreams.is_empty(), "{name}");
        loaded.push(name);
    }
    // Every example is loaded, the OpenAPI one among them.
    assert!(loaded.iter().any(|n| n == "openapi.toml"), "{loaded:?}");
}

#[test]
fn plain_http_with_credentials_beyond_loopback_is_warned_of() {
    let warn = |addr: &str, auth, tls| crate::cleartext_warning(addr.parse().unwrap(), auth, tls);
    let text = warn("0.0.0.0:8080", true, false).unwrap();
    assert!(
        text.contains("clear text") && text.contains("[server.tls]"),
        "{text}"
    );
    assert_eq!(warn("0.0.0.0:8080", true, true), None);
    assert_eq!(warn("127.0.0.1:8080", true, false), None);
    assert_eq!(warn("[::1]:8080", true, false), None);
    // Without credentials there is nothing to leak (and remote_refusal decides).
    assert_eq!(warn("0.0.0.0:8080", false, false), None);
}

#[test]
fn debug_of_a_whole_config_redacts_env_values() {
    let config =
        toml("[upstreams.gh]\ncommand = \"gh\"\nenv = { TOKEN = \"${GITHUB_TOKEN}\" }\n").unwrap();
    assert_eq!(stdio(&config, 0).env, map(&[("TOKEN", "ghp_secret")]));
    let text = format!("{config:?}");
    assert!(!text.contains("ghp_secret"), "{text}");
    assert!(
        text.contains("TOKEN") && text.contains("<redacted>"),
        "{text}"
    );
}
