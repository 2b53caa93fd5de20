//! The legacy-era handshake with an upstream and fetching its catalog, every page of it.

use std::sync::Arc;

use manifold_catalog::{Kind, UpstreamSlice};
use manifold_protocol::{version, RawObject};
use serde::Deserialize;
use serde_json::value::RawValue;

use crate::connection::Connection;
use crate::pending::Answer;

/// A server that keeps returning cursors is cut off after this many pages.
const MAX_PAGES: usize = 10_000;

/// Runs `initialize` / `notifications/initialized`, then fetches every list the upstream
/// declared a capability for.
/// A session's own connection (`capabilities` given) fetches no lists: the catalog comes
/// from the shared connection.
pub(crate) async fn run(
    conn: Arc<Connection>,
    capabilities: Option<Arc<str>>,
) -> Result<UpstreamSlice, String> {
    let isolated = capabilities.is_some();
    // A shared connection: Manifold forwards these requests to the host that owns the request
    // in flight, which answers them if it can (a host that cannot gets the request refused on
    // its behalf). A session's own connection: that host's own capabilities.
    let capabilities = capabilities.as_deref().unwrap_or(
        r#"{"roots":{"listChanged":true},"sampling":{},"elicitation":{"form":{},"url":{}}}"#,
    );
    let params = format!(
        r#"{{"protocolVersion":"{}","capabilities":{capabilities},"clientInfo":{{"name":"manifold","version":"{}"}}}}"#,
        version::LATEST,
        env!("CARGO_PKG_VERSION")
    );
    let result = result_of(
        conn.request("initialize", Some(&params)).await,
        "initialize",
    )?;
    #[derive(Deserialize)]
    struct InitResult {
        #[serde(rename = "protocolVersion")]
        protocol_version: String,
        #[serde(default)]
        capabilities: Option<Box<RawValue>>,
        #[serde(default)]
        instructions: Option<String>,
    }
    let init: InitResult = serde_json::from_str(&result)
        .map_err(|e| format!("its initialize result is malformed: {e}"))?;
    if !version::is_supported(&init.protocol_version) {
        return Err(format!(
            "it answered protocol version {:?}, which Manifold does not speak (supported: {})",
            init.protocol_version,
            version::SUPPORTED.join(", ")
        ));
    }
    conn.notify("notifications/initialized", None)
        .map_err(|e| e.to_string())?;
    let mut slice = UpstreamSlice {
        capabilities: init.capabilities,
        protocol_version: init.protocol_version,
        instructions: init.instructions,
        ..UpstreamSlice::default()
    };
    for kind in Kind::ALL {
        if declares(&slice, kind) && !isolated {
            *slot(&mut slice, kind) = fetch_list(&conn, kind).await?;
        }
    }
    Ok(slice)
}

/// Re-fetches the given lists into a copy of `old`.
pub(crate) async fn refresh(
    conn: Arc<Connection>,
    old: Arc<UpstreamSlice>,
    kinds: Vec<Kind>,
) -> Result<UpstreamSlice, String> {
    let mut slice = UpstreamSlice {
        tools: old.tools.clone(),
        prompts: old.prompts.clone(),
        resources: old.resources.clone(),
        templates: old.templates.clone(),
        capabilities: old.capabilities.clone(),
        protocol_version: old.protocol_version.clone(),
        instructions: old.instructions.clone(),
    };
    for kind in kinds {
        if declares(&slice, kind) {
            *slot(&mut slice, kind) = fetch_list(&conn, kind).await?;
        }
    }
    Ok(slice)
}

fn declares(slice: &UpstreamSlice, kind: Kind) -> bool {
    let cap = match kind {
        Kind::Tools => "tools",
        Kind::Prompts => "prompts",
        Kind::Resources | Kind::ResourceTemplates => "resources",
    };
    slice.has_capability(cap)
}

fn slot(slice: &mut UpstreamSlice, kind: Kind) -> &mut Vec<Box<RawValue>> {
    match kind {
        Kind::Tools => &mut slice.tools,
        Kind::Prompts => &mut slice.prompts,
        Kind::Resources => &mut slice.resources,
        Kind::ResourceTemplates => &mut slice.templates,
    }
}

/// Fetches a whole list, following `nextCursor`.
async fn fetch_list(conn: &Connection, kind: Kind) -> Result<Vec<Box<RawValue>>, String> {
    let method = kind.list_method();
    let mut items = Vec::new();
    let mut cursor: Option<String> = None;
    for _ in 0..MAX_PAGES {
        let params = cursor.as_ref().map(|c| {
            let mut obj = RawObject::default();
            obj.set_str("cursor", c);
            obj.to_text()
        });
        let result = result_of(conn.request(method, params.as_deref()).await, method)?;
        let page = RawObject::parse(&result)
            .map_err(|e| format!("its {method} result is malformed: {e}"))?;
        let list = page
            .get(kind.result_key())
            .ok_or_else(|| format!("its {method} result has no {:?}", kind.result_key()))?;
        let page_items: Vec<Box<RawValue>> = serde_json::from_str(list)
            .map_err(|e| format!("its {method} result is malformed: {e}"))?;
        items.extend(page_items);
        match page.get_str("nextCursor") {
            Some(next) if !next.is_empty() => cursor = Some(next.into_owned()),
            _ => return Ok(items),
        }
    }
    Err(format!("its {method} did not end after {MAX_PAGES} pages"))
}

fn result_of(answer: Result<Answer, crate::UpstreamError>, method: &str) -> Result<String, String> {
    match answer.map_err(|e| format!("{method} failed: {e}"))? {
        Answer::Result(r) => Ok(r),
        Answer::Error(e) => Err(format!("{method} was refused: {e}")),
    }
}
