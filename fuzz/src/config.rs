//! `manifold_config::parse_str`, TOML and Claude Desktop JSON, with `${VAR}` looked up in a
//! fake environment: no input panics, the result does not depend on anything but the text,
//! every error names the file, and the `Debug` form of an upstream's transport (what logs
//! and `manifold check` show) never depends on its env or header values.

use std::path::Path;

use manifold_config::{parse_str, Config, Transport};

pub fn check(data: &[u8]) {
    let Some((&format, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let path = Path::new(if format % 2 == 0 {
        "fuzz/manifold.toml"
    } else {
        "fuzz/claude_desktop_config.json"
    });
    let first = parse_str(path, text, &env);
    let again = parse_str(path, text, &env);
    assert_eq!(
        format!("{first:?}"),
        format!("{again:?}"),
        "the same text parsed twice"
    );
    match first {
        Err(e) => {
            assert_eq!(e.file, path, "{e}");
            assert!(!e.key.is_empty(), "{e}");
            assert!(e.to_string().contains(&*path.to_string_lossy()), "{e}");
        }
        Ok(config) => secrets_stay_out_of_debug(&config),
    }
}

/// Variables whose name starts with `UNSET` are unset; every other one has a value made from
/// its name.
fn env(name: &str) -> Option<String> {
    (!name.starts_with("UNSET")).then(|| format!("value of {name}"))
}

fn secrets_stay_out_of_debug(config: &Config) {
    for upstream in &config.upstreams {
        let shown = format!("{:?}", upstream.transport);
        let mut other = upstream.transport.clone();
        let values = match &mut other {
            Transport::Stdio(stdio) => stdio.env.values_mut(),
            Transport::Http(http) => http.headers.values_mut(),
            Transport::OpenApi(api) => api.headers.values_mut(),
        };
        for value in values {
            value.push_str("-changed");
        }
        assert_eq!(shown, format!("{other:?}"), "upstream {}", upstream.key);
    }
}
