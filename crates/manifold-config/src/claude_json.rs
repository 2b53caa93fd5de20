//! Claude Desktop style JSON: `{"mcpServers": {"name": {"command": ..., "args": [...],
//! "env": {...}, "cwd": ...}}}`, or for a remote server `{"url": ..., "type": "http" |
//! "streamable-http" | "sse", "headers": {...}}`; either may name Manifold's `"era"` ("auto",
//! the default, "session" or "stateless", as in TOML). Such files are shared with other tools, so
//! unknown top-level and entry keys are ignored rather than rejected, and disabled entries are
//! skipped with a reason instead of failing the whole file.

use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use crate::error::{self, child};
use crate::schema::{RawNames, RawServer, RawUpstream};
use crate::validate::{self, Ctx};
use crate::{Config, ConfigError};

const SERVERS_KEY: &str = "mcpServers";

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Config, ConfigError> {
    let root: Value = serde_json::from_str(text).map_err(|e| syntax_error(ctx, &e))?;
    let Value::Object(mut root) = root else {
        return Err(ctx.err(
            error::FILE_KEY,
            "expected a JSON object with an \"mcpServers\" key",
        ));
    };
    let servers = match root.remove(SERVERS_KEY) {
        Some(Value::Object(servers)) => servers,
        Some(_) => return Err(ctx.err(SERVERS_KEY, "expected an object of servers")),
        None => {
            return Err(ctx.err(
                SERVERS_KEY,
                "required key is missing; a Claude Desktop style file looks like \
                 {\"mcpServers\": {\"name\": {\"command\": ...}}}",
            ))
        }
    };
    let mut upstreams = Vec::new();
    let mut skipped = Vec::new();
    for (key, entry) in servers {
        let path = child(SERVERS_KEY, &key);
        match entry_to_raw(ctx, &path, entry)? {
            Ok(raw) => upstreams.push(validate::upstream(ctx, &path, &key, raw)?),
            Err(reason) => skipped.push((key, reason.to_owned())),
        }
    }
    // serde_json's map is ordered by key unless its `preserve_order` feature is on (another
    // crate in the build could enable it), so sort explicitly.
    upstreams.sort_by(|a, b| a.key.cmp(&b.key));
    skipped.sort();
    Ok(Config {
        source: ctx.file.to_path_buf(),
        server: validate::server(ctx, RawServer::default())?,
        names: validate::names(ctx, RawNames::default())?,
        telemetry: validate::telemetry(ctx, Default::default())?,
        auth: Default::default(),
        teams: Vec::new(),
        limits: Default::default(),
        cache: Default::default(),
        sessions: Default::default(),
        discovery: Default::default(),
        pinning: None,
        credentials: Default::default(),
        upstreams,
        skipped,
    })
}

/// The entry as the shared schema, or the reason it is skipped.
fn entry_to_raw(
    ctx: &Ctx<'_>,
    path: &str,
    entry: Value,
) -> Result<Result<RawUpstream, &'static str>, ConfigError> {
    let Value::Object(obj) = entry else {
        return Err(ctx.err(path, "expected an object with a \"command\" key"));
    };
    if field::<bool>(ctx, &obj, path, "disabled")? == Some(true) {
        return Ok(Err(validate::DISABLED));
    }
    let kind = field::<String>(ctx, &obj, path, "type")?;
    // Manifold's own key (other tools ignore it); validated like the TOML key.
    let era = field::<String>(ctx, &obj, path, "era")?;
    let command = field::<String>(ctx, &obj, path, "command")?;
    let url = field::<String>(ctx, &obj, path, "url")?;
    let remote = match kind.as_deref() {
        Some("stdio") => false,
        Some("http" | "streamable-http" | "sse") => true,
        Some(other) => {
            return Err(ctx.err(
                child(path, "type"),
                format!("{other:?} is not a server type; use \"stdio\", \"http\", \"streamable-http\" or \"sse\""),
            ))
        }
        None => command.is_none() && url.is_some(),
    };
    if remote {
        let Some(url) = url else {
            return Err(ctx.err(child(path, "url"), "required key is missing"));
        };
        return Ok(Ok(RawUpstream {
            url: Some(url),
            // "http" is what Claude Desktop and others write for Streamable HTTP.
            transport: kind.map(|k| {
                if k == "sse" {
                    k
                } else {
                    "streamable-http".into()
                }
            }),
            headers: field(ctx, &obj, path, "headers")?.unwrap_or_default(),
            era,
            ..RawUpstream::default()
        }));
    }
    let Some(command) = command else {
        return Err(ctx.err(child(path, "command"), "required key is missing"));
    };
    Ok(Ok(RawUpstream {
        command: Some(command),
        args: field(ctx, &obj, path, "args")?.unwrap_or_default(),
        env: field(ctx, &obj, path, "env")?.unwrap_or_default(),
        cwd: field(ctx, &obj, path, "cwd")?,
        era,
        ..RawUpstream::default()
    }))
}

/// One known entry key, deserialized on its own so that a wrong type names that key; `null`
/// counts as absent.
fn field<T: DeserializeOwned>(
    ctx: &Ctx<'_>,
    obj: &Map<String, Value>,
    path: &str,
    name: &str,
) -> Result<Option<T>, ConfigError> {
    match obj.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(value) => T::deserialize(value)
            .map(Some)
            .map_err(|e| ctx.err(child(path, name), e.to_string())),
    }
}

fn syntax_error(ctx: &Ctx<'_>, e: &serde_json::Error) -> ConfigError {
    // serde_json appends " at line L column C" to its message; it is rebuilt in the same
    // shape as TOML syntax errors.
    let shown = e.to_string();
    let suffix = format!(" at line {} column {}", e.line(), e.column());
    let message = shown.strip_suffix(&suffix).unwrap_or(&shown);
    ctx.err(
        error::FILE_KEY,
        format!(
            "JSON syntax error at line {}, column {}: {message}",
            e.line(),
            e.column()
        ),
    )
}
