//! Reading the description (a file, or a bounded HTTP fetch), its external `$ref`s fetched
//! the same way, and the conversion into the tools the upstream serves.

use std::collections::{BTreeMap, HashMap};
use std::io::Read;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use manifold_config::{OpenApiConfig, OpenApiSource, OperationFilter};
use manifold_openapi::{Filter, Operation, Options, Skipped};
use tokio::runtime::Runtime;
use url::Url;

use super::security::Keys;
use crate::credential::Credential;

/// The largest description (or document a `$ref` reaches) read; GitHub's whole REST
/// description is about 12 MB.
const MAX_DESCRIPTION_BYTES: u64 = 64 * 1024 * 1024;
/// Redirects followed, within the same origin, by one request.
const MAX_REDIRECTS: usize = 10;

/// What an OpenAPI upstream serves: its tools and how to call the service.
pub(crate) struct Service {
    pub(crate) tools: Vec<Operation>,
    pub(crate) by_name: HashMap<String, usize>,
    /// The `tools/list` result, as JSON text.
    pub(crate) list: String,
    pub(crate) skipped: Vec<Skipped>,
    pub(crate) client: reqwest::Client,
    pub(crate) headers: Vec<(String, String)>,
    pub(crate) max_response_bytes: usize,
    pub(crate) keys: Keys,
}

/// Loads and converts the description `cfg` names; blocks the calling thread (not a task of
/// `runtime`) while documents are fetched. `credential` gives the OAuth 2 schemes' token.
pub(crate) fn service(
    runtime: &Runtime,
    cfg: &OpenApiConfig,
    credential: Option<Arc<dyn Credential>>,
) -> Result<Service, String> {
    let client = client(cfg.timeout)?;
    let (bytes, base) = match &cfg.source {
        OpenApiSource::File(path) => {
            let url = Url::from_file_path(absolute(path)?)
                .map_err(|()| format!("{} is not a usable path", path.display()))?;
            (read_file(path)?, url)
        }
        OpenApiSource::Url(text) => {
            let url = Url::parse(text).map_err(|e| format!("{text}: {e}"))?;
            (runtime.block_on(fetch(&client, &url))?, url)
        }
    };
    let fetcher = Fetcher {
        runtime,
        client: &client,
    };
    let document =
        manifold_openapi::load(&bytes, base.as_str(), &fetcher).map_err(|e| e.to_string())?;
    let conversion =
        manifold_openapi::convert(&document, &options(cfg)).map_err(|e| e.to_string())?;
    let by_name = conversion
        .tools
        .iter()
        .enumerate()
        .map(|(i, op)| (op.name.clone(), i))
        .collect();
    let tools: Vec<&str> = conversion.tools.iter().map(|op| op.tool.as_str()).collect();
    Ok(Service {
        list: format!(r#"{{"tools":[{}]}}"#, tools.join(",")),
        tools: conversion.tools,
        by_name,
        skipped: conversion.skipped,
        client,
        headers: cfg.headers.clone().into_iter().collect(),
        max_response_bytes: cfg.max_response_bytes,
        keys: Keys {
            values: cfg.security.clone(),
            credential,
        },
    })
}

fn options(cfg: &OpenApiConfig) -> Options {
    let filter = |f: &OperationFilter| match f {
        OperationFilter::OperationId(v) => Filter::OperationId(v.clone()),
        OperationFilter::Tag(v) => Filter::Tag(v.clone()),
        OperationFilter::Method(v) => Filter::Method(v.clone()),
        OperationFilter::Path(v) => Filter::Path(v.clone()),
    };
    Options {
        include: cfg.include.iter().map(filter).collect(),
        exclude: cfg.exclude.iter().map(filter).collect(),
        renames: cfg.renames.clone().into_iter().collect(),
        base_url: cfg.base_url.clone(),
        ..Options::default()
    }
}

/// The HTTP client of one upstream: its timeout for every request, and redirects followed
/// only within the origin of the request that was made (a service may not send Manifold, its
/// headers with it, elsewhere).
fn client(timeout: Duration) -> Result<reqwest::Client, String> {
    let policy = reqwest::redirect::Policy::custom(|attempt| {
        let same = attempt
            .previous()
            .first()
            .is_some_and(|first| first.origin() == attempt.url().origin());
        if !same {
            attempt.stop()
        } else if attempt.previous().len() > MAX_REDIRECTS {
            attempt.error("too many redirects")
        } else {
            attempt.follow()
        }
    });
    reqwest::Client::builder()
        .timeout(timeout)
        .redirect(policy)
        .build()
        .map_err(|e| format!("could not set up the HTTP client: {e}"))
}

fn absolute(path: &Path) -> Result<std::path::PathBuf, String> {
    std::path::absolute(path).map_err(|e| format!("{}: {e}", path.display()))
}

fn read_file(path: &Path) -> Result<Vec<u8>, String> {
    let file = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut bytes = Vec::new();
    file.take(MAX_DESCRIPTION_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if bytes.len() as u64 > MAX_DESCRIPTION_BYTES {
        return Err(format!(
            "{} is larger than {MAX_DESCRIPTION_BYTES} bytes",
            path.display()
        ));
    }
    Ok(bytes)
}

async fn fetch(client: &reqwest::Client, url: &Url) -> Result<Vec<u8>, String> {
    let mut response = client
        .get(url.clone())
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    let status = response.status();
    if !status.is_success() {
        return Err(format!("{url}: HTTP {status}"));
    }
    let mut bytes = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| format!("{url}: {e}"))? {
        bytes.extend_from_slice(&chunk);
        if bytes.len() as u64 > MAX_DESCRIPTION_BYTES {
            return Err(format!(
                "{url} is larger than {MAX_DESCRIPTION_BYTES} bytes"
            ));
        }
    }
    Ok(bytes)
}

/// External `$ref`s: files and URLs, each bounded like the description.
struct Fetcher<'a> {
    runtime: &'a Runtime,
    client: &'a reqwest::Client,
}

impl manifold_openapi::Fetch for Fetcher<'_> {
    fn fetch(&self, url: &Url) -> Result<Vec<u8>, String> {
        match url.scheme() {
            "file" => {
                let path = url
                    .to_file_path()
                    .map_err(|()| format!("{url} is not a usable path"))?;
                read_file(&path)
            }
            "http" | "https" => self.runtime.block_on(fetch(self.client, url)),
            other => Err(format!("{other}: URLs are not fetched")),
        }
    }
}

/// What `manifold check` says of an OpenAPI upstream beyond its tools, from the upstream's own
/// load of the description (so that `check` fetches it once).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenApiReport {
    /// The operation each tool makes (`GET /pets/{petId}`), by the tool's name.
    pub operations: BTreeMap<String, String>,
    /// The operations that did not become tools, each with why.
    pub skipped: Vec<(String, String)>,
    /// The security schemes the operations ask for that have no value in
    /// `[upstreams.NAME.security]` (nor, for OAuth 2, a token source in `auth`), sorted.
    pub unconfigured: Vec<String>,
}

impl Service {
    /// The report of this load; `token_source`: the upstream has `auth`, whose token the
    /// OAuth 2 schemes take (whether one can be had is the broker's to say).
    pub(crate) fn report(&self, token_source: bool) -> OpenApiReport {
        OpenApiReport {
            operations: self
                .tools
                .iter()
                .map(|op| (op.name.clone(), format!("{} {}", op.method, op.path)))
                .collect(),
            skipped: self
                .skipped
                .iter()
                .map(|s| (s.operation.clone(), s.reason.clone()))
                .collect(),
            unconfigured: self.keys.unconfigured(self.tools.iter(), token_source),
        }
    }
}
