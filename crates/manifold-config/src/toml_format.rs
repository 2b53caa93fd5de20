//! Manifold's native TOML format. The text is parsed into a generic table first (so syntax
//! errors carry the line and column), then each upstream is deserialized on its own so that
//! errors inside it can be given a key path that quotes the user's upstream key.

use std::collections::BTreeMap;

use serde::Deserialize;

use crate::cache::{self, RawCacheSettings};
use crate::discovery::{self, RawDiscovery};
use crate::error::{self, child};
use crate::pinning::{self, RawPinning};
use crate::policy::{self, RawAuth, RawLimits};
use crate::schema::{RawNames, RawServer, RawTelemetry, RawUpstream};
use crate::sessions::{self, RawSessions};
use crate::validate::{self, Ctx};
use crate::{Config, ConfigError};

#[derive(Deserialize)]
#[serde(deny_unknown_fields, expecting = "a table")]
struct RawFile {
    #[serde(default)]
    server: RawServer,
    #[serde(default)]
    names: RawNames,
    #[serde(default)]
    telemetry: RawTelemetry,
    #[serde(default)]
    auth: RawAuth,
    /// Kept generic, like upstreams, for key paths in errors.
    #[serde(default)]
    teams: BTreeMap<String, toml::Value>,
    #[serde(default)]
    limits: RawLimits,
    #[serde(default)]
    cache: RawCacheSettings,
    #[serde(default)]
    sessions: RawSessions,
    #[serde(default)]
    credentials: crate::credentials::RawCredentials,
    pinning: Option<RawPinning>,
    discovery: Option<RawDiscovery>,
    /// Kept generic here; see the module comment.
    #[serde(default)]
    upstreams: BTreeMap<String, toml::Value>,
}

pub(crate) fn parse(ctx: &Ctx<'_>, text: &str) -> Result<Config, ConfigError> {
    let table: toml::Table = text.parse().map_err(|e| syntax_error(ctx, text, &e))?;
    let raw =
        RawFile::deserialize(toml::Value::Table(table)).map_err(|e| value_error(ctx, "", &e))?;
    let server = validate::server(ctx, raw.server)?;
    let names = validate::names(ctx, raw.names)?;
    let telemetry = validate::telemetry(ctx, raw.telemetry)?;
    let mut upstreams = Vec::new();
    let mut skipped = Vec::new();
    // A BTreeMap iterates in key order, which gives the sorted `upstreams` the contract wants.
    for (key, value) in raw.upstreams {
        let path = child("upstreams", &key);
        let upstream = RawUpstream::deserialize(value).map_err(|e| value_error(ctx, &path, &e))?;
        if upstream.enabled == Some(false) {
            // Not validated further: a disabled server may well reference variables that are
            // not set on this machine.
            skipped.push((key, validate::DISABLED.to_owned()));
        } else {
            upstreams.push(validate::upstream(ctx, &path, &key, upstream)?);
        }
    }
    let auth = policy::auth(ctx, raw.auth)?;
    let discovery = discovery::settings(
        ctx,
        "discovery",
        raw.discovery.as_ref(),
        &Default::default(),
    )?;
    let teams = policy::teams(ctx, raw.teams, &upstreams, &discovery)?;
    let limits = policy::limits(ctx, raw.limits)?;
    validate::check_listen(ctx, &server.http, policy::auth_required(&auth, &teams))?;
    validate::check_team(ctx, &server, &teams)?;
    validate::check_console(ctx, &server, &auth)?;
    let cache = cache::settings(ctx, raw.cache)?;
    cache::check(ctx, &cache, &upstreams)?;
    let pinning = pinning::settings(ctx, raw.pinning)?;
    let sessions = sessions::store(ctx, raw.sessions)?;
    Ok(Config {
        source: ctx.file.to_path_buf(),
        server,
        names,
        telemetry,
        auth,
        teams,
        limits,
        cache,
        sessions,
        discovery,
        pinning,
        credentials: crate::credentials::credentials(ctx, raw.credentials)?,
        upstreams,
        skipped,
    })
}

fn syntax_error(ctx: &Ctx<'_>, text: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim_end();
    let problem = match e.span() {
        Some(span) => {
            let (line, column) = error::line_col(text, span.start);
            format!("TOML syntax error at line {line}, column {column}: {message}")
        }
        None => format!("TOML syntax error: {message}"),
    };
    ctx.err(error::FILE_KEY, problem)
}

/// An error from deserializing a `toml::Value` at `base`. The toml crate records the keys it
/// descended through but exposes them only in the Display form (as a final "in `a.b`" line
/// after the message), so they are recovered from there.
pub(crate) fn value_error(ctx: &Ctx<'_>, base: &str, e: &toml::de::Error) -> ConfigError {
    let message = e.message().trim_end();
    let shown = e.to_string();
    let keys = shown
        .trim_end()
        .strip_prefix(message)
        .and_then(|rest| rest.trim_start().strip_prefix("in `"))
        .and_then(|rest| rest.strip_suffix('`'))
        .unwrap_or_default();
    // `join` of two empty parts means the whole file; here it must stay empty so that
    // `from_serde` can still append the field it finds in the message.
    let path = if keys.is_empty() {
        base.to_owned()
    } else {
        error::join(base, keys)
    };
    let (key, problem) = error::from_serde(&path, message);
    ctx.err(key, problem)
}
