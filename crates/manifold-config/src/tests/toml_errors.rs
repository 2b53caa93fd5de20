//! Invalid TOML configurations: every error names the file and the offending key.

use super::toml_err;

fn upstream_err(body: &str) -> (String, String) {
    toml_err(&format!("[upstreams.up]\ncommand = \"x\"\n{body}\n"))
}

#[test]
fn server_settings_are_range_checked() {
    let (key, problem) = toml_err("[server]\nmax_message_bytes = 1023\n");
    assert_eq!(key, "server.max_message_bytes");
    assert_eq!(problem, "1023 is too small; must be at least 1024");
    let (key, problem) = toml_err("[server]\nrequest_timeout_ms = 0\n");
    assert_eq!(key, "server.request_timeout_ms");
    assert_eq!(problem, "0 is too small; must be greater than 0");
    let (key, problem) = toml_err("[server]\ncpus = [0, 1024]\n");
    assert_eq!(key, "server.cpus");
    assert_eq!(problem, "1024 is not a CPU number; must be 0 to 1023");
    let (key, problem) = toml_err("[server]\npage_size = -1\n");
    assert_eq!(key, "server.page_size");
    assert!(problem.contains("-1"), "{problem}");
}

#[test]
fn separator_must_be_short_and_host_safe() {
    for bad in ["/", ".", ":", "a/b", "", "123456789", "é", " "] {
        let (key, problem) = toml_err(&format!("[names]\nseparator = \"{bad}\"\n"));
        assert_eq!(key, "names.separator", "{bad:?}");
        assert!(problem.contains("'/', '.' or ':'"), "{problem}");
        assert!(problem.contains("1 to 8"), "{problem}");
    }
    for good in ["_", "-", "12345678", "__", "aZ9-_"] {
        assert!(
            super::toml(&format!("[names]\nseparator = \"{good}\"\n")).is_ok(),
            "{good}"
        );
    }
}

#[test]
fn max_length_must_be_between_1_and_128() {
    for bad in [0, 129, 100_000] {
        let (key, problem) = toml_err(&format!("[names]\nmax_length = {bad}\n"));
        assert_eq!(key, "names.max_length");
        assert_eq!(
            problem,
            format!("{bad} is out of range; must be between 1 and 128")
        );
    }
    assert_eq!(
        super::toml("[names]\nmax_length = 1\n")
            .unwrap()
            .names
            .max_length,
        1
    );
}

#[test]
fn command_is_required_and_non_empty() {
    let (key, problem) = toml_err("[upstreams.up]\nargs = []\n");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        (
            "upstreams.up.command",
            "required key is missing (or give `url` for an HTTP upstream, or `openapi` for a \
             service an OpenAPI description describes)"
        )
    );
    let (key, problem) = toml_err("[upstreams.up]\ncommand = \"\"\n");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("upstreams.up.command", "must not be empty")
    );
    // Empty only after interpolation still counts.
    let env = |name: &str| (name == "EMPTY").then(String::new);
    let err = crate::parse_str(
        std::path::Path::new("m.toml"),
        "[upstreams.up]\ncommand = \"${EMPTY}\"\n",
        &env,
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "m.toml: upstreams.up.command: must not be empty"
    );
}

#[test]
fn health_settings_are_checked() {
    for (body, key, problem) in [
        (
            "health_timeout = \"0s\"",
            "upstreams.up.health_timeout",
            "must be greater than 0",
        ),
        (
            "breaker_cooldown = \"0ms\"",
            "upstreams.up.breaker_cooldown",
            "must be greater than 0",
        ),
        (
            "health_interval = \"10\"",
            "upstreams.up.health_interval",
            "\"10\" is not a duration: use a number and ms, s, m, h or d (\"30s\")",
        ),
        ("restart_after = 5", "upstreams.up.restart_after", ""),
    ] {
        let (k, p) = upstream_err(body);
        assert_eq!(k, key, "{body}");
        assert!(p.contains(problem), "{body}: {p}");
    }
}

#[test]
fn upstream_settings_are_range_checked() {
    let (key, problem) =
        upstream_err("restart_initial_backoff_ms = 500\nrestart_max_backoff_ms = 499");
    assert_eq!(key, "upstreams.up.restart_max_backoff_ms");
    assert_eq!(problem, "499 is less than restart_initial_backoff_ms (500)");
    // The default maximum (30000) is checked against a larger initial value too.
    let (key, _) = upstream_err("restart_initial_backoff_ms = 30001");
    assert_eq!(key, "upstreams.up.restart_max_backoff_ms");
    let (key, _) = upstream_err("restart_max_backoff_ms = 249");
    assert_eq!(key, "upstreams.up.restart_max_backoff_ms");
    let (key, problem) = upstream_err("restart_initial_backoff_ms = 0");
    assert_eq!(key, "upstreams.up.restart_initial_backoff_ms");
    assert!(problem.contains("greater than 0"), "{problem}");
    let (key, problem) = upstream_err("max_message_bytes = 10");
    assert_eq!(key, "upstreams.up.max_message_bytes");
    assert!(problem.contains("at least 1024"), "{problem}");
    let (key, _) = upstream_err("request_timeout_ms = 0");
    assert_eq!(key, "upstreams.up.request_timeout_ms");
}

#[test]
fn renames_and_env_names_are_checked() {
    let (key, problem) = upstream_err("[upstreams.up.tools]\nrename = { a = \"\" }");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("upstreams.up.tools.rename.a", "must not be empty")
    );
    let (key, problem) = upstream_err("env = { \"A=B\" = \"x\" }");
    assert_eq!(key, "upstreams.up.env.\"A=B\"");
    assert!(problem.contains("invalid variable name"), "{problem}");
    let (key, _) = upstream_err("env = { \"\" = \"x\" }");
    assert_eq!(key, "upstreams.up.env.\"\"");
    let (key, problem) = upstream_err("args = [\"a\\u0000b\"]");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("upstreams.up.args[0]", "contains a NUL character")
    );
}

#[test]
fn tls_needs_both_files_and_nothing_else() {
    let (key, problem) = toml_err("[server.tls]\ncert = \"c.pem\"\n");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("server.tls.key", "required key is missing")
    );
    let (key, problem) = toml_err("[server.tls]\ncert = \"c.pem\"\nkey = \"k.pem\"\nca = \"x\"\n");
    assert_eq!(key, "server.tls.ca");
    assert!(problem == "unknown key; expected cert or key", "{problem}");
    let (key, problem) = toml_err("[server.tls]\ncert = \" \"\nkey = \"k.pem\"\n");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("server.tls.cert", "must name a PEM file")
    );
    let (key, problem) = toml_err("[server.tls]\ncert = \"c.pem\"\nkey = \"${NOPE}\"\n");
    assert_eq!(key, "server.tls.key");
    assert!(problem.contains("NOPE"), "{problem}");
}

#[test]
fn the_console_s_sign_in_needs_an_issuer_and_an_admin_claim() {
    let console = "[server.console]\nlogin_client_id = \"c\"\nadmin_claim = \"roles\"\n\
                   admin_value = \"admin\"\n";
    let (key, problem) = toml_err(console);
    assert_eq!(key, "server.console");
    assert!(problem.contains("[auth.jwt]"), "{problem}");
    let (key, problem) =
        toml_err("[server.console]\nlogin_client_id = \"c\"\nadmin_claim = \"roles\"\n");
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("server.console.admin_value", "required key is missing")
    );
    let (key, problem) = toml_err(&console.replace("\"roles\"", "\" \""));
    assert_eq!(
        (key.as_str(), problem.as_str()),
        ("server.console.admin_claim", "must not be empty")
    );
    let with_jwt = format!(
        "{console}public_url = \"admin.example\"\n\n[auth.jwt]\nissuer = \"https://idp\"\n\
         audience = \"a\"\njwks_url = \"https://idp/jwks\"\n"
    );
    let (key, _) = toml_err(&with_jwt);
    assert_eq!(key, "server.console.public_url");
}

#[test]
fn unknown_keys_are_named_with_their_path() {
    let (key, problem) = toml_err("[upstreams.time]\ncomand = \"x\"\n");
    assert_eq!(key, "upstreams.time.comand");
    assert!(
        problem.starts_with("unknown key; expected one of command, url, openapi"),
        "{problem}"
    );
    let cases = [
        ("pagesize = 1", "pagesize"),
        ("[server]\npagesize = 1", "server.pagesize"),
        ("[names]\nsep = \"_\"", "names.sep"),
        (
            "[upstreams.t]\ncommand = \"x\"\n[upstreams.t.tools]\ninclud = []",
            "upstreams.t.tools.includ",
        ),
        (
            "[upstreams.t]\ncommand = \"x\"\n[upstreams.t.prompts]\nx = 1",
            "upstreams.t.prompts.x",
        ),
        (
            "[upstreams.\"my s.rv\"]\ncommand = \"x\"\nurls = \"http://h\"",
            "upstreams.\"my s.rv\".urls",
        ),
    ];
    for (text, want) in cases {
        let (key, problem) = toml_err(text);
        assert_eq!(key, want, "{text}");
        assert!(problem.starts_with("unknown key"), "{problem}");
    }
    let (_, problem) = toml_err("[server]\npagesize = 1\n");
    assert!(
        problem.contains("page_size") && !problem.contains('`'),
        "{problem}"
    );
}

#[test]
fn wrong_types_are_named_with_their_path() {
    let cases = [
        ("[server]\npage_size = \"10\"", "server.page_size"),
        ("server = 3", "server"),
        ("upstreams = 3", "upstreams"),
        ("[upstreams]\nt = \"x\"", "upstreams.t"),
        ("[upstreams.t]\ncommand = 1", "upstreams.t.command"),
        (
            "[upstreams.t]\ncommand = \"x\"\nargs = \"a b\"",
            "upstreams.t.args",
        ),
        (
            "[upstreams.t]\ncommand = \"x\"\nenv = { A = 1 }",
            "upstreams.t.env.A",
        ),
        (
            "[upstreams.t]\ncommand = \"x\"\nenabled = \"no\"",
            "upstreams.t.enabled",
        ),
        (
            "[upstreams.t]\ncommand = \"x\"\ntools = { include = \"a\" }",
            "upstreams.t.tools.include",
        ),
    ];
    for (text, want) in cases {
        let (key, problem) = toml_err(text);
        assert_eq!(key, want, "{text}");
        assert!(
            problem.contains("invalid type") || problem.contains("expected"),
            "{problem}"
        );
        assert!(
            !problem.contains("Raw"),
            "internal type names leak: {problem}"
        );
    }
}

#[test]
fn syntax_errors_carry_line_and_column() {
    let (key, problem) = toml_err("[server]\npage_size = 10\nmax_message_bytes = = 3\n");
    assert_eq!(key, "(file)");
    assert!(
        problem.starts_with("TOML syntax error at line 3, column "),
        "{problem}"
    );
    let (_, problem) = toml_err("[upstreams.a]\ncommand = \"x\"\ncommand = \"y\"\n");
    assert!(
        problem.starts_with("TOML syntax error at line 3, column 1"),
        "{problem}"
    );
    assert!(problem.contains("duplicate"), "{problem}");
    let (_, problem) = toml_err("[upstreams.a\n");
    assert!(
        problem.starts_with("TOML syntax error at line 1, column "),
        "{problem}"
    );
}

#[test]
fn http_upstreams_are_checked() {
    let cases = [
        (
            "command = \"x\"\nurl = \"http://h\"",
            "upstreams.u",
            "both `command` and `url`",
        ),
        (
            "url = \"h:80\"",
            "upstreams.u.url",
            "not an http:// or https:// URL",
        ),
        (
            "url = \"http:///mcp\"",
            "upstreams.u.url",
            "not an http:// or https:// URL",
        ),
        (
            "url = \"http://h\"\ntransport = \"ws\"",
            "upstreams.u.transport",
            "\"streamable-http\" or \"sse\"",
        ),
        (
            "url = \"http://h\"\nargs = [\"a\"]",
            "upstreams.u.args",
            "process upstreams",
        ),
        (
            "command = \"x\"\ntransport = \"sse\"",
            "upstreams.u.transport",
            "HTTP upstreams",
        ),
        (
            "command = \"x\"\nheaders = { A = \"b\" }",
            "upstreams.u.headers",
            "HTTP upstreams",
        ),
        (
            "url = \"http://h\"\nheaders = { \"A B\" = \"b\" }",
            "upstreams.u.headers.\"A B\"",
            "header name",
        ),
        (
            "url = \"http://h\"\nheaders = { A = \"b\\nc\" }",
            "upstreams.u.headers.A",
            "line break",
        ),
        (
            "url = \"http://h\"\nconnect_timeout_ms = 0",
            "upstreams.u.connect_timeout_ms",
            "greater than 0",
        ),
    ];
    for (body, want_key, says) in cases {
        let (key, problem) = toml_err(&format!("[upstreams.u]\n{body}\n"));
        assert_eq!(key, want_key, "{body}");
        assert!(problem.contains(says), "{body}: {problem}");
    }
}

#[test]
fn http_server_settings_are_checked() {
    let cases = [
        ("listen = \"localhost\"", "server.listen", "IP:PORT"),
        ("listen = \"0.0.0.0:8080\"", "server.listen", "allow_remote"),
        ("http_workers = 0", "server.http_workers", "greater than 0"),
        ("max_sessions = 0", "server.max_sessions", "greater than 0"),
        (
            "max_requests_per_session = 0",
            "server.max_requests_per_session",
            "greater than 0",
        ),
        (
            "session_idle_timeout_ms = 0",
            "server.session_idle_timeout_ms",
            "greater than 0",
        ),
        (
            "sse_keepalive_ms = 0",
            "server.sse_keepalive_ms",
            "greater than 0",
        ),
        (
            "allowed_origins = [\"example.com\"]",
            "server.allowed_origins[0]",
            "scheme://host",
        ),
        (
            "session_queue_bytes = 10",
            "server.session_queue_bytes",
            "at least 65536",
        ),
        (
            "stall_timeout_ms = 0",
            "server.stall_timeout_ms",
            "greater than 0",
        ),
        (
            "drain_delay = \"5\"",
            "server.drain_delay",
            "not a duration",
        ),
        (
            "drain_timeout = \"1.5s\"",
            "server.drain_timeout",
            "not a duration",
        ),
        (
            "client_timeout = \"0s\"",
            "server.client_timeout",
            "must be greater than 0",
        ),
        ("keep_alive = \"x\"", "server.keep_alive", "not a duration"),
    ];
    for (body, want_key, says) in cases {
        let (key, problem) = toml_err(&format!("[server]\n{body}\n"));
        assert_eq!(key, want_key, "{body}");
        assert!(problem.contains(says), "{body}: {problem}");
    }
}

#[test]
fn telemetry_settings_are_checked() {
    let cases = [
        ("[server]\nadmin = \"metrics\"", "server.admin", "IP:PORT"),
        (
            "[server]\nadmin = \"0.0.0.0:9464\"",
            "server.admin",
            "allow_remote",
        ),
        (
            "[telemetry]\nlog_format = \"xml\"",
            "telemetry.log_format",
            "\"json\"",
        ),
        (
            "[telemetry]\notlp_protocol = \"http/json\"",
            "telemetry.otlp_protocol",
            "grpc",
        ),
        (
            "[telemetry]\notlp_endpoint = \"collector:4317\"",
            "telemetry.otlp_endpoint",
            "http://",
        ),
        (
            "[telemetry]\nsampler = \"sometimes\"",
            "telemetry.sampler",
            "parentbased_always_on",
        ),
        (
            "[telemetry]\nsampler_arg = 2.0",
            "telemetry.sampler_arg",
            "between 0 and 1",
        ),
        ("[telemetry]\ntraces = true", "telemetry", "unknown key"),
    ];
    for (body, want_key, says) in cases {
        let (key, problem) = toml_err(&format!("{body}\n"));
        assert!(key.starts_with(want_key), "{body}: {key}");
        assert!(problem.contains(says), "{body}: {problem}");
    }
}

#[test]
fn cache_mistakes_are_named() {
    let cases = [
        ("cache = {}", "upstreams.up.cache.ttl", "is required"),
        (
            "cache = { ttl = \"30\" }",
            "upstreams.up.cache.ttl",
            "is not a duration",
        ),
        (
            "cache = { ttl = \"0s\" }",
            "upstreams.up.cache.ttl",
            "greater than 0",
        ),
        (
            "resource_cache = { ttl = \"1s\", scope = \"all\" }",
            "upstreams.up.resource_cache.scope",
            "\"team\" or \"shared\"",
        ),
        (
            "tool_cache.t = { ttl = \"1s\", max_bytes = \"lots\" }",
            "upstreams.up.tool_cache.t.max_bytes",
            "is not a size",
        ),
        (
            "tool_cache.t = { ttl = \"1s\", ttl2 = 1 }",
            "upstreams.up.tool_cache.t.ttl2",
            "unknown key",
        ),
        (
            "tool_cache.t = { ttl = \"1s\", max_bytes = \"1GiB\" }",
            "upstreams.up.tool_cache.t.max_bytes",
            "add up to more than cache.max_bytes",
        ),
        (
            "isolation = \"session\"\ncache = { ttl = \"1s\" }",
            "upstreams.up.cache",
            "isolation = \"session\"",
        ),
    ];
    for (body, want_key, want_problem) in cases {
        let (key, problem) = upstream_err(body);
        assert_eq!(key, want_key, "{body}: {problem}");
        assert!(problem.contains(want_problem), "{body}: {problem}");
    }
    let (key, problem) = toml_err(
        "[cache]\nmax_bytes = 1024\n[upstreams.up]\ncommand = \"x\"\ncache = { ttl = \"1s\" }\ntool_cache.t = { ttl = \"1s\", max_bytes = 1024 }\n",
    );
    assert_eq!(key, "cache.max_bytes");
    assert!(problem.contains("leaving nothing"), "{problem}");
    let (key, _) = toml_err("[cache]\nmax_bytes = 0\n");
    assert_eq!(key, "cache.max_bytes");
}

#[test]
fn shared_cache_mistakes_are_named() {
    let cases = [
        (
            "backend = \"redis\"",
            "cache.redis_url",
            "is required with Redis as the backend",
        ),
        (
            "backend = \"etcd\"",
            "cache.backend",
            "\"etcd\" is not a backend; use \"memory\" or \"redis\"",
        ),
        (
            "redis_url = \"redis://127.0.0.1:6379\"",
            "cache.redis_url",
            "is set but cache.backend is not \"redis\"",
        ),
        (
            "backend = \"memory\"\nkey_prefix = \"p\"",
            "cache.key_prefix",
            "is set but cache.backend is not \"redis\"",
        ),
        (
            "backend = \"redis\"\nredis_url = \"http://:hunter2@127.0.0.1:6379\"",
            "cache.redis_url",
            "\"http://<redacted>@127.0.0.1:6379\" is not a redis:// URL",
        ),
        (
            "backend = \"redis\"\nredis_url = \"${NOT_SET}\"",
            "cache.redis_url",
            "NOT_SET",
        ),
        (
            "backend = \"redis\"\nredis_url = \"redis://h:1\"\nredis_timeout_ms = 0",
            "cache.redis_timeout_ms",
            "must be greater than 0",
        ),
        (
            "backend = \"redis\"\nredis_url = \"redis://h:1\"\nkey_prefix = \"\"",
            "cache.key_prefix",
            "is not a prefix",
        ),
        (
            "backend = \"redis\"\nredis_url = \"redis://h:1\"\nredis_pool_size = 4",
            "cache.redis_pool_size",
            "unknown",
        ),
    ];
    for (body, want_key, want_problem) in cases {
        let (key, problem) = toml_err(&format!("[cache]\n{body}\n"));
        assert_eq!(key, want_key, "{body}: {problem}");
        assert!(problem.contains(want_problem), "{body}: {problem}");
        assert!(!problem.contains("hunter2"), "{body}: {problem}");
    }
}

#[test]
fn an_unknown_era_or_a_stateless_sse_upstream_is_refused() {
    let (key, problem) = upstream_err("era = \"modern\"");
    assert_eq!(key, "upstreams.up.era");
    assert!(
        problem.contains("\"auto\"") && problem.contains("\"stateless\""),
        "{problem}"
    );
    let (key, problem) = toml_err(
        "[upstreams.up]\nurl = \"http://127.0.0.1:1/sse\"\ntransport = \"sse\"\nera = \"stateless\"\n",
    );
    assert_eq!(key, "upstreams.up.era");
    assert!(problem.contains("session era only"), "{problem}");
}

#[test]
fn the_session_store_is_memory_or_redis_with_a_url() {
    let config = super::toml("").unwrap();
    assert!(matches!(config.sessions, crate::SessionStore::Memory));
    let config =
        super::toml("[sessions]\nstore = \"redis\"\nredis_url = \"redis://127.0.0.1:6379\"\n")
            .unwrap();
    match config.sessions {
        crate::SessionStore::Redis(redis) => {
            assert_eq!(redis.url, "redis://127.0.0.1:6379");
            assert_eq!(redis.key_prefix, "manifold");
        }
        crate::SessionStore::Memory => panic!("the Redis store was asked for"),
    }
    let (key, problem) = toml_err("[sessions]\nstore = \"redis\"\n");
    assert_eq!(key, "sessions.redis_url");
    assert!(problem.contains("required"), "{problem}");
    let (key, problem) = toml_err("[sessions]\nstore = \"disk\"\n");
    assert_eq!(key, "sessions.store");
    assert!(problem.contains("\"memory\" or \"redis\""), "{problem}");
    let (key, problem) = toml_err("[sessions]\nredis_url = \"redis://h:1\"\n");
    assert_eq!(key, "sessions.redis_url");
    assert!(problem.contains("not \"redis\""), "{problem}");
    let (key, problem) = toml_err(
        "[sessions]\nstore = \"redis\"\nredis_url = \"redis://:secret@h:1/x%\"\nbogus = 1\n",
    );
    assert!(key.starts_with("sessions"), "{key}: {problem}");
}
