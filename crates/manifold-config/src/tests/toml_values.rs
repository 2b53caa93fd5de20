//! Valid TOML configurations: defaults, every setting, ordering, skipping, interpolation.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{http, map, stdio, test_env, toml, toml_err};
use crate::parse_str;

#[test]
fn empty_file_gives_every_server_and_name_default() {
    let config = toml("").unwrap();
    assert_eq!(config.source, PathBuf::from("/etc/manifold/manifold.toml"));
    assert_eq!(config.server.page_size, 1000);
    assert_eq!(config.server.max_message_bytes, 4 * 1024 * 1024);
    assert_eq!(config.server.request_timeout, Duration::from_millis(60_000));
    assert_eq!(config.server.startup_timeout, Duration::from_millis(10_000));
    assert_eq!(config.server.shutdown_grace, Duration::from_millis(2_000));
    assert_eq!(config.server.stall_timeout, Duration::from_millis(60_000));
    assert!(config.server.cpus.is_empty());
    assert_eq!(config.names.separator, "__");
    assert_eq!(config.names.max_length, 64);
    assert!(config.upstreams.is_empty() && config.skipped.is_empty());
}

#[test]
fn empty_tables_also_give_defaults() {
    let config = toml("[server]\n[names]\n[upstreams]\n").unwrap();
    assert_eq!(config.server.page_size, 1000);
    assert_eq!(config.names.separator, "__");
    assert!(config.upstreams.is_empty());
}

#[test]
fn upstream_defaults() {
    let config = toml("[upstreams.time]\ncommand = \"mcp-server-time\"\n").unwrap();
    let up = &config.upstreams[0];
    assert_eq!(up.key, "time");
    assert_eq!(up.prefix, "time");
    assert_eq!(up.request_timeout, None);
    assert_eq!(up.max_message_bytes, 64 * 1024 * 1024);
    assert_eq!(up.restart.initial_backoff, Duration::from_millis(250));
    assert_eq!(up.restart.max_backoff, Duration::from_millis(30_000));
    assert_eq!(up.era, crate::EraChoice::Auto);
    for filter in [&up.tools, &up.prompts] {
        assert!(filter.include.is_empty() && filter.exclude.is_empty() && filter.rename.is_empty());
    }
    let s = stdio(&config, 0);
    assert_eq!(s.command, "mcp-server-time");
    assert!(s.args.is_empty() && s.env.is_empty());
    assert_eq!(s.cwd, None);
}

const FULL: &str = r#"
[server]
page_size = 0
max_message_bytes = 1024
request_timeout_ms = 5
startup_timeout_ms = 0
shutdown_grace_ms = 7
stall_timeout_ms = 9
cpus = [1, 0, 1]

[names]
separator = "-x_9"
max_length = 128

[upstreams.time]
command = "mcp-server-time"
args = ["--local-timezone", "UTC"]
env = { TZ = "UTC", TOKEN = "${MY_TOKEN}" }
cwd = "."
prefix = ""
enabled = true
request_timeout_ms = 30000
max_message_bytes = 67108864
restart_initial_backoff_ms = 100
restart_max_backoff_ms = 100

[upstreams.time.tools]
include = ["get_*"]
exclude = ["convert_time"]
rename = { get_current_time = "now" }

[upstreams.time.prompts]
exclude = ["*"]
"#;

#[test]
fn every_setting_is_read() {
    let config = toml(FULL).unwrap();
    assert_eq!(config.server.page_size, 0);
    assert_eq!(config.server.max_message_bytes, 1024);
    assert_eq!(config.server.request_timeout, Duration::from_millis(5));
    assert_eq!(config.server.startup_timeout, Duration::ZERO);
    assert_eq!(config.server.shutdown_grace, Duration::from_millis(7));
    assert_eq!(config.server.stall_timeout, Duration::from_millis(9));
    assert_eq!(config.server.cpus, [1, 0], "duplicates are dropped");
    assert_eq!(config.names.separator, "-x_9");
    assert_eq!(config.names.max_length, 128);
    let up = &config.upstreams[0];
    assert_eq!(up.prefix, "", "an empty prefix is allowed");
    assert_eq!(up.request_timeout, Some(Duration::from_millis(30_000)));
    assert_eq!(up.max_message_bytes, 67_108_864);
    assert_eq!(up.restart.initial_backoff, Duration::from_millis(100));
    assert_eq!(up.restart.max_backoff, Duration::from_millis(100));
    assert_eq!(up.tools.include, vec!["get_*"]);
    assert_eq!(up.tools.exclude, vec!["convert_time"]);
    assert_eq!(up.tools.rename, map(&[("get_current_time", "now")]));
    assert!(up.tools.admits("get_current_time") && !up.tools.admits("convert_time"));
    assert_eq!(up.prompts.exclude, vec!["*"]);
    assert!(!up.prompts.admits("anything"));
    let s = stdio(&config, 0);
    assert_eq!(s.args, vec!["--local-timezone", "UTC"]);
    assert_eq!(s.env, map(&[("TOKEN", "tok-123"), ("TZ", "UTC")]));
    assert_eq!(s.cwd, Some(PathBuf::from("/etc/manifold/.")));
}

#[test]
fn upstreams_are_sorted_by_key_and_keys_may_hold_spaces() {
    let text = "[upstreams.zeta]\ncommand = \"z\"\n[upstreams.\"my server\"]\ncommand = \"m\"\n\
                [upstreams.alpha]\ncommand = \"a\"\nprefix = \"custom\"\n";
    let config = toml(text).unwrap();
    let keys: Vec<_> = config.upstreams.iter().map(|u| u.key.as_str()).collect();
    assert_eq!(keys, ["alpha", "my server", "zeta"]);
    let prefixes: Vec<_> = config.upstreams.iter().map(|u| u.prefix.as_str()).collect();
    assert_eq!(
        prefixes,
        ["custom", "my server", "zeta"],
        "prefix is raw; the catalog sanitizes"
    );
}

#[test]
fn disabled_upstreams_are_skipped_without_validation() {
    let text = "[upstreams.off]\ncommand = \"${NOT_SET}\"\nenabled = false\n\
                [upstreams.on]\ncommand = \"on\"\nenabled = true\n";
    let config = toml(text).unwrap();
    assert_eq!(config.upstreams.len(), 1);
    assert_eq!(config.upstreams[0].key, "on");
    assert_eq!(
        config.skipped,
        vec![("off".to_owned(), "disabled".to_owned())]
    );
    // Only enabled upstreams count: zero of them is a valid (empty) configuration.
    let config = toml("[upstreams.off]\ncommand = \"x\"\nenabled = false\n").unwrap();
    assert!(config.upstreams.is_empty());
    // Unknown keys are still errors in a disabled upstream: they are typos either way.
    let (key, _) = toml_err("[upstreams.off]\ncommand = \"x\"\nenabled = false\nenv2 = 1\n");
    assert_eq!(key, "upstreams.off.env2");
}

#[test]
fn interpolation_applies_to_command_args_env_and_cwd() {
    let text = r#"
[upstreams.gh]
command = "${BIN}/server"
args = ["--home", "${HOME}", "price=$$5", "$${HOME}", "$PLAIN"]
env = { TOKEN = "Bearer ${GITHUB_TOKEN}", LITERAL = "a$$b" }
cwd = "${HOME}/work"
prefix = "${HOME}"
"#;
    let config = toml(text).unwrap();
    let s = stdio(&config, 0);
    assert_eq!(s.command, "/opt/bin/server");
    assert_eq!(
        s.args,
        vec!["--home", "/home/me", "price=$5", "${HOME}", "$PLAIN"]
    );
    assert_eq!(
        s.env,
        map(&[("LITERAL", "a$b"), ("TOKEN", "Bearer ghp_secret")])
    );
    assert_eq!(s.cwd, Some(PathBuf::from("/home/me/work")));
    assert_eq!(
        config.upstreams[0].prefix, "${HOME}",
        "only process settings are interpolated"
    );
}

#[test]
fn missing_variables_name_the_key() {
    let cases = [
        ("command = \"${NOPE}\"", "upstreams.gh.command"),
        (
            "command = \"x\"\nargs = [\"a\", \"${NOPE}\"]",
            "upstreams.gh.args[1]",
        ),
        (
            "command = \"x\"\nenv = { TOKEN = \"${NOPE}\" }",
            "upstreams.gh.env.TOKEN",
        ),
        ("command = \"x\"\ncwd = \"${NOPE}/w\"", "upstreams.gh.cwd"),
    ];
    for (body, want_key) in cases {
        let (key, problem) = toml_err(&format!("[upstreams.gh]\n{body}\n"));
        assert_eq!(key, want_key);
        assert_eq!(problem, "environment variable NOPE is not set");
    }
    let err = toml("[upstreams.gh]\ncommand = \"x\"\nenv = { TOKEN = \"${NOPE}\" }\n").unwrap_err();
    assert_eq!(
        err.to_string(),
        "/etc/manifold/manifold.toml: upstreams.gh.env.TOKEN: environment variable NOPE is not set"
    );
}

#[test]
fn unterminated_interpolation_is_an_error() {
    let (key, problem) = toml_err("[upstreams.gh]\ncommand = \"x\"\nargs = [\"${HOME\"]\n");
    assert_eq!(key, "upstreams.gh.args[0]");
    assert!(problem.contains("unterminated"), "{problem}");
}

#[test]
fn relative_cwd_resolves_against_the_config_directory() {
    let parse = |file: &str, cwd: &str| {
        let text = format!("[upstreams.a]\ncommand = \"x\"\ncwd = \"{cwd}\"\n");
        let config = parse_str(Path::new(file), &text, &test_env).unwrap();
        stdio(&config, 0).cwd.clone()
    };
    assert_eq!(
        parse("/etc/m/c.toml", "data"),
        Some(PathBuf::from("/etc/m/data"))
    );
    assert_eq!(
        parse("/etc/m/c.toml", "../x"),
        Some(PathBuf::from("/etc/m/../x"))
    );
    assert_eq!(parse("/etc/m/c.toml", "/abs"), Some(PathBuf::from("/abs")));
    assert_eq!(parse("rel/c.toml", "data"), Some(PathBuf::from("rel/data")));
    // A bare file name has no directory to join; the path stays relative to manifold's own.
    assert_eq!(parse("c.toml", "data"), Some(PathBuf::from("data")));
}

#[test]
fn tls_paths_resolve_against_the_config_directory() {
    let text = "[server.tls]\ncert = \"tls/cert.pem\"\nkey = \"${HOME}/key.pem\"\n";
    let tls = toml(text).unwrap().server.http.tls.unwrap();
    assert_eq!(tls.cert, PathBuf::from("/etc/manifold/tls/cert.pem"));
    assert_eq!(tls.key, PathBuf::from("/home/me/key.pem"));
    assert_eq!(toml("").unwrap().server.http.tls, None);
}

#[test]
fn http_upstreams_and_listener_settings_are_read() {
    let config = toml(
        r#"
[server]
listen = "0.0.0.0:8080"
allow_remote = true
allowed_origins = ["https://app.example.com", "*"]
http_workers = 3
session_idle_timeout_ms = 1000
sse_keepalive_ms = 2000
max_sessions = 5
max_requests_per_session = 6
replay_events = 7
drain_delay = "5s"
drain_timeout = "1500ms"
client_timeout = "3s"
keep_alive = "20s"

[upstreams.remote]
url = "https://example.com/${HOME}/mcp"
transport = "sse"
headers = { Authorization = "Bearer ${MY_TOKEN}" }
connect_timeout_ms = 1500
required = true

[upstreams.auto]
url = "http://127.0.0.1:9000/mcp"
"#,
    )
    .unwrap();
    let h = &config.server.http;
    assert_eq!(h.listen, Some("0.0.0.0:8080".parse().unwrap()));
    assert!(h.allow_remote);
    assert_eq!(h.allowed_origins, ["https://app.example.com", "*"]);
    assert_eq!(
        (
            h.workers,
            h.max_sessions,
            h.max_requests_per_session,
            h.replay_events
        ),
        (3, 5, 6, 7)
    );
    assert_eq!(h.session_idle_timeout, Duration::from_millis(1000));
    assert_eq!(h.keepalive, Duration::from_millis(2000));
    assert_eq!(
        (h.drain_delay, h.drain_timeout),
        (Duration::from_secs(5), Duration::from_millis(1500))
    );
    assert_eq!(
        (h.client_timeout, h.keep_alive),
        (Duration::from_secs(3), Duration::from_secs(20))
    );
    let remote = http(&config, 1);
    assert_eq!(remote.url, "https://example.com//home/me/mcp");
    assert_eq!(remote.kind, crate::HttpKind::Sse);
    assert_eq!(remote.headers, map(&[("Authorization", "Bearer tok-123")]));
    assert_eq!(remote.connect_timeout, Duration::from_millis(1500));
    assert!(config.upstreams[1].required);
    let auto = http(&config, 0);
    assert_eq!(auto.kind, crate::HttpKind::Auto);
    assert_eq!(auto.connect_timeout, Duration::from_secs(10));
    assert!(!config.upstreams[0].required);
    let port_only = toml("[server]\nlisten = \"8080\"\n").unwrap().server.http;
    assert_eq!(port_only.listen, Some("127.0.0.1:8080".parse().unwrap()));
    let defaults = toml("").unwrap().server.http;
    assert_eq!(defaults.listen, None);
    assert_eq!(defaults.workers, 2);
    assert_eq!(defaults.max_sessions, 4096);
    // A signal stops a local Manifold as soon as what it is doing is done.
    assert_eq!(defaults.drain_delay, Duration::ZERO);
    assert_eq!(defaults.drain_timeout, Duration::from_secs(30));
    let none = toml("[server]\ndrain_delay = \"0s\"\ndrain_timeout = \"0s\"\n").unwrap();
    assert!(none.server.http.drain_delay.is_zero() && none.server.http.drain_timeout.is_zero());
}

#[test]
fn telemetry_settings_are_read_with_their_defaults() {
    let c = toml("").unwrap();
    assert!(c.telemetry.metrics, "metrics are on by default");
    assert_eq!(c.telemetry.log_format, crate::LogFormat::Text);
    assert_eq!(c.telemetry.otlp_endpoint, None);
    assert_eq!(c.server.admin, None);
    let c = toml(
        "[server]\nadmin = \"9464\"\n\n[telemetry]\nlog_level = \"debug\"\nlog_format = \"json\"\n\
         metrics = false\notlp_endpoint = \"http://127.0.0.1:4317\"\notlp_protocol = \"grpc\"\n\
         service_name = \"gw\"\nsampler = \"parentbased_traceidratio\"\nsampler_arg = 0.25\n\
         resource_attributes = { \"deployment.environment\" = \"staging\" }\n",
    )
    .unwrap();
    assert_eq!(c.server.admin, Some(([127, 0, 0, 1], 9464).into()));
    let t = &c.telemetry;
    assert_eq!(t.log_level.as_deref(), Some("debug"));
    assert_eq!(t.log_format, crate::LogFormat::Json);
    assert!(!t.metrics);
    assert_eq!(t.otlp_endpoint.as_deref(), Some("http://127.0.0.1:4317"));
    assert_eq!(t.otlp_protocol, Some(crate::OtlpProtocol::Grpc));
    assert_eq!(t.service_name.as_deref(), Some("gw"));
    assert_eq!(t.sampler.as_deref(), Some("parentbased_traceidratio"));
    assert_eq!(t.sampler_arg, Some(0.25));
    assert_eq!(
        t.resource_attributes,
        vec![("deployment.environment".to_owned(), "staging".to_owned())]
    );
}

#[test]
fn caches_are_read() {
    use crate::{CacheRule, CacheScope};
    let config = toml(
        r#"
        [cache]
        max_bytes = "8MiB"
        max_argument_bytes = 1024

        [upstreams.fs]
        command = "x"
        cache = { ttl = "30s" }
        resource_cache = { ttl = "5m", scope = "shared", max_bytes = "1MiB" }
        [upstreams.fs.tool_cache.search]
        ttl = "500ms"
        max_bytes = 65536
        "#,
    )
    .unwrap();
    assert_eq!(config.cache.max_bytes, 8 << 20);
    assert_eq!(config.cache.max_argument_bytes, 1024);
    let caches = &config.upstreams[0].caches;
    assert_eq!(
        caches.read_only_tools,
        Some(CacheRule {
            ttl: Duration::from_secs(30),
            max_bytes: None,
            scope: CacheScope::Team,
        })
    );
    let resources = caches.resources.as_ref().unwrap();
    assert_eq!(resources.scope, CacheScope::Shared);
    assert_eq!(resources.max_bytes, Some(1 << 20));
    assert_eq!(resources.ttl, Duration::from_secs(300));
    assert_eq!(caches.tools["search"].ttl, Duration::from_millis(500));
    assert_eq!(caches.tools["search"].max_bytes, Some(65536));
    let plain = toml("[upstreams.fs]\ncommand = \"x\"\n").unwrap();
    assert!(plain.upstreams[0].caches.is_empty());
    assert_eq!(plain.cache.max_bytes, 64 << 20);
    assert_eq!(plain.cache.max_argument_bytes, 16 * 1024);
    assert!(matches!(plain.cache.backend, crate::CacheBackend::Memory));
}

#[test]
fn a_shared_cache_in_redis_is_read() {
    use crate::CacheBackend;
    let config = toml(
        r#"
        [cache]
        backend = "redis"
        redis_url = "redis://:${MY_TOKEN}@10.0.0.5:6379/2"
        redis_timeout_ms = 40
        key_prefix = "prod"
        "#,
    )
    .unwrap();
    let CacheBackend::Redis(redis) = &config.cache.backend else {
        panic!("not redis: {:?}", config.cache.backend);
    };
    assert_eq!(redis.url, "redis://:tok-123@10.0.0.5:6379/2");
    assert_eq!(redis.timeout, Duration::from_millis(40));
    assert_eq!(redis.key_prefix, "prod");
    let shown = format!("{:?}", config.cache);
    assert!(!shown.contains("tok-123"), "{shown}");
    // Defaults: a 100 ms timeout and the prefix the limits use.
    let config =
        toml("[cache]\nbackend = \"redis\"\nredis_url = \"redis://127.0.0.1:6379\"\n").unwrap();
    let CacheBackend::Redis(redis) = &config.cache.backend else {
        panic!("not redis");
    };
    assert_eq!(redis.timeout, Duration::from_millis(100));
    assert_eq!(redis.key_prefix, "manifold");
}

#[test]
fn each_upstream_names_its_protocol_era() {
    let config = toml(
        "[upstreams.a]\ncommand = \"x\"\nera = \"session\"\n\
         [upstreams.b]\nurl = \"http://127.0.0.1:1/mcp\"\nera = \"stateless\"\n\
         [upstreams.c]\ncommand = \"x\"\nera = \"auto\"\n",
    )
    .unwrap();
    let eras: Vec<_> = config.upstreams.iter().map(|u| u.era.name()).collect();
    assert_eq!(eras, ["session", "stateless", "auto"]);
}

#[test]
fn health_settings_are_read_and_zero_turns_a_part_off() {
    let config = toml(
        r#"
[upstreams.a]
command = "x"

[upstreams.b]
command = "x"
health_interval = "250ms"
health_timeout = "100ms"
breaker_failures = 3
breaker_cooldown = "2s"
restart_after = "1m"

[upstreams.c]
command = "x"
health_interval = "0s"
breaker_failures = 0
restart_after = "0s"
"#,
    )
    .unwrap();
    let by_key = |k: &str| {
        let up = config.upstreams.iter().find(|u| u.key == k).unwrap();
        up.health.clone()
    };
    assert_eq!(by_key("a"), crate::HealthPolicy::default());
    let d = crate::HealthPolicy::default();
    assert_eq!(
        (d.interval, d.timeout, d.breaker_failures),
        (
            Some(Duration::from_secs(10)),
            Duration::from_secs(5),
            Some(5)
        )
    );
    let b = by_key("b");
    assert_eq!(b.interval, Some(Duration::from_millis(250)));
    assert_eq!(b.timeout, Duration::from_millis(100));
    assert_eq!(b.breaker_failures, Some(3));
    assert_eq!(b.breaker_cooldown, Duration::from_secs(2));
    assert_eq!(b.restart_after, Some(Duration::from_secs(60)));
    let c = by_key("c");
    assert_eq!(
        (c.interval, c.breaker_failures, c.restart_after),
        (None, None, None)
    );
}
