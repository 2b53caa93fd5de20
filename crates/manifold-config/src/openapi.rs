//! `[upstreams.NAME] openapi = "..."`: an HTTP service described by OpenAPI, served as tools.
//! Its keys are checked here; the description itself is read when the upstream starts, so a
//! description that fails to load fails that upstream alone.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::child;
use crate::schema::RawUpstream;
use crate::validate::{duration, resolve_path, Ctx};
use crate::{ConfigError, Secret, UpstreamAuth};

/// The default time a call's HTTP request may take, answer included.
pub const DEFAULT_OPENAPI_TIMEOUT: Duration = Duration::from_secs(30);
/// The default cap on an answer's body.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// An upstream made from an OpenAPI description.
#[derive(Clone, PartialEq)]
pub struct OpenApiConfig {
    pub source: OpenApiSource,
    /// Overrides the description's `servers`.
    pub base_url: Option<String>,
    /// When not empty, only the operations one of these picks become tools.
    pub include: Vec<OperationFilter>,
    /// Operations one of these picks are skipped, even when included.
    pub exclude: Vec<OperationFilter>,
    /// New tool names, by `operationId` or by the name the tool would have had.
    pub renames: BTreeMap<String, String>,
    /// How long a call's HTTP request may take, and the description's fetch too.
    pub timeout: Duration,
    /// Largest answer body kept; a longer one is cut with a note saying so.
    pub max_response_bytes: usize,
    /// Sent with every request to the service, after interpolation. Values may be secrets: the
    /// Debug impl redacts them.
    pub headers: BTreeMap<String, String>,
    /// The value of each security scheme of the description, by scheme name
    /// (`[upstreams.NAME.security]`): an API key, a bearer token, or `user:password` for basic.
    pub security: BTreeMap<String, Secret>,
    /// Where the bearer token of the description's OAuth 2 and OpenID Connect schemes comes
    /// from (`[upstreams.NAME.auth]`, the modes of HTTP upstreams); `None`: from `security`.
    pub auth: Option<UpstreamAuth>,
}

/// Where the description is read from.
#[derive(Clone, Debug, PartialEq)]
pub enum OpenApiSource {
    /// A file; a relative path is resolved against the config file's directory.
    File(PathBuf),
    /// An `http://` or `https://` URL.
    Url(String),
}

/// One way to pick operations, written `"operationId:listPets"`, `"tag:pets"`,
/// `"method:GET"` or `"path:/pets/*"` (`*` within a segment, `**` across segments).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OperationFilter {
    OperationId(String),
    Tag(String),
    Method(String),
    Path(String),
}

/// Keys of HTTP and process upstreams that an OpenAPI upstream does not take.
const NOT_FOR_OPENAPI: [&str; 6] = [
    "transport",
    "connect_timeout_ms",
    "args",
    "env",
    "cwd",
    "era",
];

/// Keys of an OpenAPI upstream that other upstreams do not take.
pub(crate) fn stray_key(raw: &RawUpstream) -> Option<&'static str> {
    [
        ("base_url", raw.base_url.is_some()),
        ("include", !raw.include.is_empty()),
        ("exclude", !raw.exclude.is_empty()),
        ("renames", !raw.renames.is_empty()),
        ("timeout", raw.timeout.is_some()),
        ("max_response_bytes", raw.max_response_bytes.is_some()),
        ("security", !raw.security.is_empty()),
    ]
    .into_iter()
    .find_map(|(key, set)| set.then_some(key))
}

pub(crate) fn openapi(
    ctx: &Ctx<'_>,
    path: &str,
    source: &str,
    raw: &RawUpstream,
) -> Result<OpenApiConfig, ConfigError> {
    if raw.command.is_some() || raw.url.is_some() {
        return Err(ctx.err(
            path,
            "has `openapi` and `command` or `url`; an upstream is one of a process, an MCP \
             server over HTTP, or an OpenAPI description",
        ));
    }
    for key in NOT_FOR_OPENAPI {
        let set = match key {
            "transport" => raw.transport.is_some(),
            "connect_timeout_ms" => raw.connect_timeout_ms.is_some(),
            "args" => !raw.args.is_empty(),
            "env" => !raw.env.is_empty(),
            "cwd" => raw.cwd.is_some(),
            _ => raw.era.is_some(),
        };
        if set {
            return Err(ctx.err(child(path, key), "does not apply to OpenAPI upstreams"));
        }
    }
    let key = child(path, "openapi");
    let source = ctx.interpolate(&key, source)?;
    let source = if source.starts_with("http://") || source.starts_with("https://") {
        OpenApiSource::Url(source)
    } else if source.is_empty() {
        return Err(ctx.err(key, "must not be empty"));
    } else {
        OpenApiSource::File(resolve_path(ctx.file, &source))
    };
    let base_url = match &raw.base_url {
        None => None,
        Some(url) => Some(http_url(ctx, &child(path, "base_url"), url)?),
    };
    let max_response_bytes = raw
        .max_response_bytes
        .unwrap_or(DEFAULT_MAX_RESPONSE_BYTES as u64);
    if max_response_bytes == 0 {
        return Err(ctx.err(child(path, "max_response_bytes"), "must be greater than 0"));
    }
    let timeout = duration(ctx, &child(path, "timeout"), raw.timeout.as_deref())?
        .unwrap_or(DEFAULT_OPENAPI_TIMEOUT);
    if timeout.is_zero() {
        return Err(ctx.err(child(path, "timeout"), "must be greater than 0"));
    }
    Ok(OpenApiConfig {
        source,
        base_url,
        include: filters(ctx, &child(path, "include"), &raw.include)?,
        exclude: filters(ctx, &child(path, "exclude"), &raw.exclude)?,
        renames: raw.renames.clone(),
        timeout,
        max_response_bytes: usize::try_from(max_response_bytes)
            .map_err(|_| ctx.err(child(path, "max_response_bytes"), "is too large"))?,
        headers: crate::validate::headers(ctx, path, &raw.headers)?,
        security: security(ctx, &child(path, "security"), &raw.security)?,
        auth: raw
            .auth
            .as_ref()
            .map(|auth| crate::credentials::upstream_auth(ctx, &child(path, "auth"), auth))
            .transpose()?,
    })
}

/// The scheme values, interpolated (`${ENV}`); an empty one is a mistake, not "no value".
fn security(
    ctx: &Ctx<'_>,
    key: &str,
    raw: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, Secret>, ConfigError> {
    raw.iter()
        .map(|(scheme, value)| {
            let at = child(key, scheme);
            let value = ctx.interpolate(&at, value)?;
            if value.is_empty() {
                return Err(ctx.err(at, "must not be empty"));
            }
            Ok((scheme.clone(), Secret::new(value)))
        })
        .collect()
}

fn http_url(ctx: &Ctx<'_>, key: &str, url: &str) -> Result<String, ConfigError> {
    let url = ctx.interpolate(key, url)?;
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"));
    if !rest.is_some_and(|r| !r.is_empty() && !r.starts_with('/')) {
        return Err(ctx.err(key, format!("{url:?} is not an http:// or https:// URL")));
    }
    Ok(url)
}

fn filters(ctx: &Ctx<'_>, key: &str, raw: &[String]) -> Result<Vec<OperationFilter>, ConfigError> {
    raw.iter()
        .map(|text| {
            let (kind, value) = text.split_once(':').unwrap_or(("", ""));
            let value = value.to_owned();
            match kind {
                _ if value.is_empty() => None,
                "operationId" => Some(OperationFilter::OperationId(value)),
                "tag" => Some(OperationFilter::Tag(value)),
                "method" => Some(OperationFilter::Method(value)),
                "path" => Some(OperationFilter::Path(value)),
                _ => None,
            }
            .ok_or_else(|| {
                ctx.err(
                    key,
                    format!(
                        "{text:?} is not a filter; write \"operationId:ID\", \"tag:TAG\", \
                         \"method:GET\" or \"path:/glob/*\""
                    ),
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
