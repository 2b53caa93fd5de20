//! `manifold check` and the example configs shipped under `config/`.

use std::path::Path;
use std::process::Command;

use manifold_testkit::process::*;

fn check(config: &Path) -> (i32, String, String) {
    check_with_env(config, &[])
}

fn check_with_env(config: &Path, env: &[(&str, &str)]) -> (i32, String, String) {
    let path = path_with_fixture();
    let mut env = env.to_vec();
    env.push(("PATH", &path));
    run_manifold(&["check", "--config", config.to_str().unwrap()], &env)
}

/// The example configs name `manifold-fixture` bare; make sure the test build of it is found.
fn path_with_fixture() -> String {
    let dir = Path::new(fixture_bin())
        .parent()
        .unwrap()
        .display()
        .to_string();
    format!("{dir}:{}", std::env::var("PATH").unwrap_or_default())
}

#[test]
fn check_prints_the_merged_catalog_and_every_renamed_name() {
    let dir = TempDir::new("check");
    let long = "p".repeat(70);
    let config = format!(
        "{}[upstreams.alpha.tools]\nrename = {{ echo = \"say\" }}\n{}prefix = {long:?}\n",
        named_fixture("alpha"),
        named_fixture("beta"),
    );
    let (code, out, err) = check(&dir.write("c.toml", &config));
    assert_eq!(code, 0, "{out}{err}");
    assert!(out.contains("say -> alpha:echo  [renamed]"), "{out}");
    assert!(out.contains("alpha__add -> alpha:add"), "{out}");
    assert!(out.contains("[shortened]"), "{out}");
    assert!(
        out.contains("alpha+fixture://alpha/readme -> alpha:fixture://alpha/readme"),
        "{out}"
    );
}

#[test]
fn check_marks_what_is_cached_and_warns_of_cached_tools_that_do_not_exist() {
    let dir = TempDir::new("check-cache");
    let config = format!(
        "{}cache = {{ ttl = \"30s\" }}\nresource_cache = {{ ttl = \"5m\" }}\n\
         tool_cache.whoami = {{ ttl = \"500ms\" }}\ntool_cache.nosuch = {{ ttl = \"1s\" }}\n",
        fixture_upstream("alpha", &["--name", "alpha", "--hints"]),
    );
    let (code, out, err) = check(&dir.write("c.toml", &config));
    assert_eq!(
        code, 0,
        "a missing tool is a warning, not a failure: {out}{err}"
    );
    // Read-only and closed-world: the upstream-wide rule; named: its own rule.
    assert!(
        out.contains("alpha__echo -> alpha:echo  [cached 30s, per team: config]"),
        "{out}"
    );
    assert!(
        out.contains("alpha__whoami -> alpha:whoami  [cached 500ms, per team: config]"),
        "{out}"
    );
    // Open-world by default, and not read-only: not cached.
    assert!(out.contains("alpha__add -> alpha:add\n"), "{out}");
    assert!(out.contains("alpha__crash -> alpha:crash\n"), "{out}");
    assert!(
        out.contains("alpha+fixture://alpha/readme -> alpha:fixture://alpha/readme  [cached 300s, per team: config]"),
        "{out}"
    );
    assert!(
        out.contains(
            "warning: upstreams.alpha.tool_cache.nosuch: the upstream lists no tool \"nosuch\""
        ),
        "{out}"
    );
}

#[test]
fn check_says_whether_the_config_or_a_stateless_upstreams_hints_decide_what_is_kept() {
    let dir = TempDir::new("check-cache-hints");
    let stateless = |name: &'static str| {
        fixture_upstream(name, &["--name", name, "--hints", "--era", "stateless"])
    };
    let config = format!(
        "{}resource_cache = {{ ttl = \"1m\", scope = \"shared\" }}\n{}",
        stateless("ruled"),
        stateless("free"),
    );
    let (code, out, err) = check(&dir.write("c.toml", &config));
    assert_eq!(code, 0, "{out}{err}");
    // The operator's rule outweighs the upstream's hints (the fixture says ttlMs 0, private).
    assert!(
        out.contains("ruled+fixture://ruled/readme -> ruled:fixture://ruled/readme  [cached 60s, shared: config]"),
        "{out}"
    );
    // No rule: Manifold keeps nothing, and hosts get the upstream's hints.
    assert!(
        out.contains(
            "free+fixture://free/readme -> free:fixture://free/readme  [upstream's cache hints]"
        ),
        "{out}"
    );
    assert!(out.contains("free__echo -> free:echo\n"), "{out}");
}

#[test]
fn check_fails_on_collisions_naming_file_and_keys() {
    let dir = TempDir::new("check");
    let config = format!(
        "{}prefix = \"\"\n{}prefix = \"\"\n",
        named_fixture("alpha"),
        named_fixture("beta"),
    );
    let path = dir.write("clash.toml", &config);
    let (code, out, err) = check(&path);
    assert_ne!(code, 0, "{out}");
    assert!(
        err.contains("clash.toml")
            && err.contains("collision")
            && err.contains("upstreams.alpha")
            && err.contains("upstreams.beta"),
        "{err}"
    );
}

#[test]
fn check_fails_on_bad_configs_and_dead_upstreams() {
    let dir = TempDir::new("check");
    let (code, _, err) = check(&dir.write("bad.toml", "[upstreams.a]\ncomand = \"x\"\n"));
    assert_ne!(code, 0);
    assert!(err.contains("bad.toml") && err.contains("comand"), "{err}");
    let (code, _, err) = check(&dir.write(
        "dead.toml",
        "[upstreams.ghost]\ncommand = \"/nonexistent/ghost-server\"\n",
    ));
    assert_ne!(code, 0);
    assert!(
        err.contains("dead.toml") && err.contains("upstreams.ghost"),
        "{err}"
    );
    let (code, _, err) = check(&dir.write(
        "dup.toml",
        &format!(
            "{}prefix = \"x\"\n{}prefix = \"x\"\n",
            fixture_upstream("a", &[]),
            fixture_upstream("b", &[])
        ),
    ));
    assert_ne!(code, 0);
    assert!(err.contains("dup.toml") && err.contains("prefix"), "{err}");
    let (code, _, err) = check(&dir.write("x.yaml", ""));
    assert_ne!(code, 0);
    assert!(err.contains("x.yaml"), "{err}");
}

#[test]
fn claude_desktop_json_works_as_is() {
    let dir = TempDir::new("json");
    let json = serde_json::json!({
        "globalShortcut": "Ctrl+Space",
        "mcpServers": {
            "my notes": {"command": fixture_bin(), "args": ["--name", "notes"], "env": {"X": "1"}},
            // An HTTP server nobody listens for: check names it; serving goes on without it.
            "remote": {"type": "http", "url": "http://127.0.0.1:9/mcp"}
        }
    });
    let path = dir.write("claude_desktop_config.json", &json.to_string());
    let (code, out, err) = check(&path);
    assert_ne!(code, 0, "{out}{err}");
    assert!(
        err.contains("remote") && err.contains("cannot reach http://127.0.0.1:9/mcp"),
        "{err}"
    );
    assert!(
        out.contains("my_notes__echo -> my notes:echo  [sanitized]")
            || out.contains("my_notes__echo"),
        "{out}"
    );
    let mut m = Manifold::start_with(&["serve", "--config", path.to_str().unwrap()], dir);
    m.initialize();
    assert_eq!(
        text_of(&m.call("my_notes__echo", serde_json::json!({"text": "json"}))),
        "json"
    );
}

/// Every file under `config/` loads; the ones that need only what the repository builds
/// also pass `check`, which starts their upstreams.
#[test]
fn every_shipped_config_loads() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config");
    let mut seen = 0;
    for entry in std::fs::read_dir(&root).unwrap() {
        let path = entry.unwrap().path();
        // config/tls/ holds the certificate made for secure.toml, when one was made.
        if !path.is_file() {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        seen += 1;
        if text.contains("manifold-fixture") {
            let (code, out, err) = if text.contains("[server.tls]") {
                check_with_certificate(&path, &text)
            } else {
                check(&path)
            };
            assert_eq!(code, 0, "{}: {out}{err}", path.display());
            assert!(
                out.contains("__"),
                "{}: empty catalog: {out}",
                path.display()
            );
        } else {
            // Real peers are installed by the interop suite; here the file and names must hold.
            // The secret config/remote.toml interpolates into a header; the keys and client
            // secrets of config/credentials.toml.
            let (code, out, err) = run_manifold(
                &["check", "--no-start", "--config", path.to_str().unwrap()],
                &[
                    ("MANIFOLD_EXAMPLE_TOKEN", "example"),
                    (
                        "MANIFOLD_TOKEN_KEY",
                        "AAECAwQFBgcICQoLDA0ODxAREhMUFRYXGBkaGxwdHh8=",
                    ),
                    ("ALICE_KEY", "alice-example-key-0123456789"),
                    ("BOB_KEY", "bob-example-key-0123456789"),
                    ("CI_SECRET", "example"),
                    ("EXCHANGE_SECRET", "example"),
                    ("CRM_SECRET", "example"),
                ],
            );
            assert_eq!(code, 0, "{}: {err}", path.display());
            // `check` says how each upstream with `auth` is authorized and read.
            if text.contains("[upstreams.forge.auth]") {
                assert!(out.contains("auth: oauth, each caller as themselves; catalog read with the operator's login (manifold login forge)"), "{out}");
                assert!(out.contains("auth: client credentials"), "{out}");
            }
        }
    }
    assert!(seen >= 2, "config/ should hold the demo and examples");
}

/// The demo is the first thing a newcomer runs: it exposes what a person would try (tools, a
/// readme, prompts, skills) and none of the fixture's test hooks (fault injection, counters).
#[test]
fn the_demo_exposes_only_what_a_person_would_try() {
    let demo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../config/demo.toml");
    let (code, out, err) = check(&demo);
    assert_eq!(code, 0, "{out}{err}");
    let section = |name: &str| -> Vec<String> {
        let head = format!("{name} (");
        out.lines()
            .skip_while(|l| !l.starts_with(&head))
            .skip(1)
            .take_while(|l| l.starts_with("  "))
            .filter_map(|l| l.split_whitespace().next().map(str::to_owned))
            .collect()
    };
    let mut tools = section("tools");
    tools.sort();
    assert_eq!(
        tools,
        [
            "calc__sum",
            "notes__echo",
            "notes__progress",
            "notes__sleep"
        ],
        "{out}"
    );
    let resources = section("resources");
    assert!(
        resources.iter().any(|uri| uri.ends_with("/readme")),
        "a readme to read: {out}"
    );
    assert!(!section("prompts").is_empty(), "a prompt to try: {out}");
    assert!(
        out.lines()
            .any(|l| l.trim_start().starts_with("skill://notes/") && l.contains("/SKILL.md")),
        "skills to list and read: {out}"
    );
}

/// `check` of a config with `[server.tls]` (config/secure.toml), copied beside the files its
/// comment tells how to make, so that `check` reads a real certificate and key and the lock
/// file `manifold pin` wrote.
fn check_with_certificate(path: &Path, text: &str) -> (i32, String, String) {
    let dir = TempDir::new("secure");
    let copy = dir.write(path.file_name().unwrap().to_str().unwrap(), text);
    std::fs::create_dir(dir.path().join("tls")).unwrap();
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "30", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"])
        .args(["-addext", "basicConstraints=critical,CA:FALSE"])
        .args(["-keyout", "tls/key.pem", "-out", "tls/cert.pem"])
        .current_dir(dir.path())
        .output()
        .expect("the openssl command (Debian package openssl)");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let env = [("MANIFOLD_API_KEY", "example-key-0123456789abcdef")];
    // Its [pinning] needs the lock file its comment says to write first.
    let (code, _, err) = run_manifold(&["pin", "--config", copy.to_str().unwrap()], &env);
    assert_eq!(code, 0, "{err}");
    check_with_env(&copy, &env)
}

#[test]
fn serve_logs_the_upstreams_it_skips() {
    let config = format!(
        "{}{}enabled = false\n",
        named_fixture("alpha"),
        named_fixture("off"),
    );
    let mut m = Manifold::start(&config);
    m.initialize();
    m.assert_logged("skipped: disabled");
}
