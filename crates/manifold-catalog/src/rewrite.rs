//! Rewriting names and URIs inside payloads: inbound params get the upstream's original
//! name or URI, outbound results and notifications get exposed URIs. Only the members that
//! change are re-encoded; everything else is copied byte for byte.

use manifold_protocol::{scan, RawObject};

use crate::uri;

/// What stands for the method of a request Manifold does not know and forwards to the upstream
/// of an extension that passes through: its result's URIs are mapped by
/// [`result_uris`] as [`extension_uris`] says.
pub const EXTENSION_METHOD: &str = "extension";

/// `params` (an object's JSON text) with the string member `key` set to `value`.
pub fn set_param(params: &str, key: &'static str, value: &str) -> Option<String> {
    let mut obj = RawObject::parse(params).ok()?;
    obj.set_str(key, value);
    Some(obj.to_text())
}

/// `params` with `ref.{key}` set to `value` (completion/complete).
pub fn set_ref_member(params: &str, key: &'static str, value: &str) -> Option<String> {
    map_member(params, "ref", |r| set_param(r, key, value))
}

/// Whether a result may name a URI [`result_uris`] maps: a cheap scan before parsing.
pub fn may_name_uris(result: &str) -> bool {
    manifold_protocol::needle::URI_MEMBER
        .find(result.as_bytes())
        .is_some()
        || manifold_protocol::needle::UI_SCHEME
            .find(result.as_bytes())
            .is_some()
}

/// Rewrites the URIs an upstream put in a result of `method` to exposed URIs. `None` when
/// nothing needed rewriting, so the caller forwards the original bytes.
/// A tool result's `_meta` naming an app resource (see [`ui_meta`]) is mapped too.
pub fn result_uris(method: &str, result: &str, uri_prefix: &str) -> Option<String> {
    if uri_prefix.is_empty() {
        return None;
    }
    let linked = linked_uris(method, result, uri_prefix);
    if method != "tools/call" {
        return linked;
    }
    let text = linked.as_deref().unwrap_or(result);
    map_member(text, "_meta", |meta| ui_meta(meta, uri_prefix)).or(linked)
}

/// `_meta` members that name one of the upstream's `ui://` resources (MCP Apps): `ui.resourceUri`,
/// the older flat `ui/resourceUri`, and `openai/outputTemplate` (ChatGPT Apps SDK), exposed
/// with `uri_prefix`. The rest of `_meta.ui` (visibility, csp, ...) is copied unchanged; so
/// is a value that is not a `ui://` URI. `None` when nothing changed.
pub fn ui_meta(meta: &str, uri_prefix: &str) -> Option<String> {
    if uri_prefix.is_empty() || !meta.contains(uri::UI_SCHEME) {
        return None;
    }
    let mut m = RawObject::parse(meta).ok()?;
    let mut changed = false;
    for key in ["openai/outputTemplate", "ui/resourceUri"] {
        if let Some(exposed) = ui_uri(&m, key, uri_prefix) {
            m.set_str(key, &exposed);
            changed = true;
        }
    }
    let ui = m.get("ui").and_then(|ui| {
        let mut o = RawObject::parse(ui).ok()?;
        let exposed = ui_uri(&o, "resourceUri", uri_prefix)?;
        o.set_str("resourceUri", &exposed);
        Some(o.to_text())
    });
    if let Some(ui) = ui {
        m.set_raw("ui", ui);
        changed = true;
    }
    changed.then(|| m.to_text())
}

/// Member `key` exposed, if it is a `ui://` URI.
fn ui_uri(o: &RawObject<'_>, key: &str, uri_prefix: &str) -> Option<String> {
    let original = o.get_str(key)?;
    original
        .starts_with(uri::UI_SCHEME)
        .then(|| uri::expose(uri_prefix, &original))
}

/// The URIs of resources a result links, embeds or holds, exposed.
fn linked_uris(method: &str, result: &str, uri_prefix: &str) -> Option<String> {
    // Most results hold no URI at all: skip parsing them.
    manifold_protocol::needle::URI_MEMBER.find(result.as_bytes())?;
    match method {
        "resources/read" => map_member(result, "contents", |list| {
            map_array(list, |c| expose_member(c, "uri", uri_prefix))
        }),
        "tools/call" => map_member(result, "content", |list| {
            map_array(list, |c| content_block(c, uri_prefix))
        }),
        "prompts/get" => map_member(result, "messages", |list| {
            map_array(list, |m| {
                map_member(m, "content", |c| content_block(c, uri_prefix))
            })
        }),
        EXTENSION_METHOD => extension_uris(result, uri_prefix),
        "skills/get" => map_member(result, "skill", |s| skill_entry(s, uri_prefix)),
        "resources/directory/read" => map_member(result, "resources", |list| {
            map_array(list, |r| expose_member(r, "uri", uri_prefix))
        }),
        _ => None,
    }
}

/// The URIs a result of an extension's method names, as far as Manifold can tell without
/// knowing the extension: its own `uri` member, and the `uri` member of each object in an
/// array that is one of its members (a list of resources, contents or items). Each is exposed
/// with `uri_prefix`; nothing deeper is touched. `None` when nothing changed.
pub fn extension_uris(result: &str, uri_prefix: &str) -> Option<String> {
    let mut o = RawObject::parse(result).ok()?;
    let mut changed = false;
    if let Some(original) = o.get_str("uri").map(|u| u.into_owned()) {
        o.set_str("uri", &uri::expose(uri_prefix, &original));
        changed = true;
    }
    // Members with escaped keys are left as they are: no extension names its lists so.
    let mut arrays: Vec<(&str, &str)> = Vec::new();
    scan::for_each_member(result, |m| {
        if !m.key_escaped && m.value.starts_with('[') {
            arrays.push((m.key, m.value));
        }
    })
    .ok()?;
    for (key, list) in arrays {
        if let Some(mapped) = map_array(list, |item| expose_member(item, "uri", uri_prefix)) {
            o.set_raw(key, mapped);
            changed = true;
        }
    }
    changed.then(|| o.to_text())
}

/// A skill entry (skills extension) with its `uri` and the `uri` of each file its
/// `resources` array lists exposed with `uri_prefix`; `resources: "dynamic"` is kept.
pub fn skill_entry(entry: &str, uri_prefix: &str) -> Option<String> {
    if uri_prefix.is_empty() {
        return None;
    }
    let mut o = RawObject::parse(entry).ok()?;
    let original = o.get_str("uri")?.into_owned();
    o.set_str("uri", &uri::expose(uri_prefix, &original));
    let files = o
        .get("resources")
        .and_then(|list| map_array(list, |r| expose_member(r, "uri", uri_prefix)));
    if let Some(files) = files {
        o.set_raw("resources", files);
    }
    Some(o.to_text())
}

/// An upstream's error object with what its `data` names made the host's: `data.uri` exposed
/// with `uri_prefix`, `data.name` replaced by `exposed(original)`. `None` when nothing
/// changed, so the caller forwards the original bytes.
pub fn error_data(
    error: &str,
    uri_prefix: &str,
    exposed: impl Fn(&str) -> Option<String>,
) -> Option<String> {
    manifold_protocol::needle::DATA_MEMBER.find(error.as_bytes())?;
    map_member(error, "data", |data| {
        let mut o = RawObject::parse(data).ok()?;
        let mut changed = false;
        let uri = o.get_str("uri").filter(|_| !uri_prefix.is_empty());
        if let Some(original) = uri.map(|u| u.into_owned()) {
            o.set_str("uri", &uri::expose(uri_prefix, &original));
            changed = true;
        }
        if let Some(name) = o.get_str("name").and_then(|n| exposed(&n)) {
            o.set_str("name", &name);
            changed = true;
        }
        changed.then(|| o.to_text())
    })
}

/// The string member `key` of an object, namespaced with `uri_prefix`.
pub fn expose_member(obj: &str, key: &'static str, uri_prefix: &str) -> Option<String> {
    if uri_prefix.is_empty() {
        return None;
    }
    let mut o = RawObject::parse(obj).ok()?;
    let original = o.get_str(key)?.into_owned();
    o.set_str(key, &uri::expose(uri_prefix, &original));
    Some(o.to_text())
}

/// A content block: resource links carry `uri`, embedded resources `resource.uri`.
fn content_block(block: &str, uri_prefix: &str) -> Option<String> {
    let o = RawObject::parse(block).ok()?;
    match o.get_str("type").as_deref() {
        Some("resource_link") => expose_member(block, "uri", uri_prefix),
        Some("resource") => map_member(block, "resource", |r| expose_member(r, "uri", uri_prefix)),
        _ => None,
    }
}

/// Replaces member `key` of an object with `f(value)`; `None` if `f` changed nothing.
fn map_member(
    obj: &str,
    key: &'static str,
    f: impl FnOnce(&str) -> Option<String>,
) -> Option<String> {
    let mut o = RawObject::parse(obj).ok()?;
    let new = f(o.get(key)?)?;
    o.set_raw(key, new);
    Some(o.to_text())
}

/// Maps every element of an array; `None` if no element changed.
fn map_array(list: &str, f: impl Fn(&str) -> Option<String>) -> Option<String> {
    let elems = scan::elements(list).ok()?;
    let mapped: Vec<Option<String>> = elems.iter().map(|e| f(e)).collect();
    if mapped.iter().all(Option::is_none) {
        return None;
    }
    let mut out = String::with_capacity(list.len() + 64);
    out.push('[');
    for (i, (orig, new)) in elems.iter().zip(&mapped).enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(new.as_deref().unwrap_or(orig));
    }
    out.push(']');
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_results_get_exposed_uris() {
        let r = r#"{"contents":[{"uri":"file:///a","text":"x","x-extra":1},{"uri":"file:///b","blob":"AA=="}],"_meta":{}}"#;
        assert_eq!(
            result_uris("resources/read", r, "fs").unwrap(),
            r#"{"contents":[{"uri":"fs+file:///a","text":"x","x-extra":1},{"uri":"fs+file:///b","blob":"AA=="}],"_meta":{}}"#
        );
    }

    #[test]
    fn tool_results_map_links_and_embedded_resources_only() {
        let r = r#"{"content":[{"type":"text","text":"\"uri\""},{"type":"resource_link","uri":"x://1","name":"n"},{"type":"resource","resource":{"uri":"x://2","text":"t"}}],"isError":false}"#;
        assert_eq!(
            result_uris("tools/call", r, "p").unwrap(),
            r#"{"content":[{"type":"text","text":"\"uri\""},{"type":"resource_link","uri":"p+x://1","name":"n"},{"type":"resource","resource":{"uri":"p+x://2","text":"t"}}],"isError":false}"#
        );
    }

    #[test]
    fn prompt_messages_are_mapped() {
        let r = r#"{"messages":[{"role":"user","content":{"type":"resource","resource":{"uri":"x://r","text":"t"}}},{"role":"user","content":{"type":"text","text":"hi"}}]}"#;
        let out = result_uris("prompts/get", r, "p").unwrap();
        assert!(out.contains(r#""uri":"p+x://r""#));
        assert!(out.contains(r#"{"role":"user","content":{"type":"text","text":"hi"}}"#));
    }

    #[test]
    fn app_meta_names_the_exposed_ui_resource() {
        let r = r#"{"content":[{"type":"text","text":"12:00"}],"_meta":{"ui":{"resourceUri":"ui://clock/app.html","visibility":["app"],"csp":{"connectDomains":[]}},"openai/outputTemplate":"ui://clock/app.html","x":1}}"#;
        assert_eq!(
            result_uris("tools/call", r, "a").unwrap(),
            r#"{"content":[{"type":"text","text":"12:00"}],"_meta":{"ui":{"resourceUri":"ui://a/clock/app.html","visibility":["app"],"csp":{"connectDomains":[]}},"openai/outputTemplate":"ui://a/clock/app.html","x":1}}"#
        );
        // Links and _meta in one result; a ui:// link keeps its scheme.
        let r = r#"{"content":[{"type":"resource_link","uri":"ui://clock/app.html"}],"_meta":{"ui/resourceUri":"ui://clock/app.html"}}"#;
        assert_eq!(
            result_uris("tools/call", r, "a").unwrap(),
            r#"{"content":[{"type":"resource_link","uri":"ui://a/clock/app.html"}],"_meta":{"ui/resourceUri":"ui://a/clock/app.html"}}"#
        );
        // Not ui:// or no prefix: unchanged.
        assert!(ui_meta(r#"{"ui":{"resourceUri":"https://x/y"}}"#, "a").is_none());
        assert!(ui_meta(r#"{"ui":{"resourceUri":"ui://x/y"}}"#, "").is_none());
        assert!(result_uris(
            "resources/read",
            r#"{"contents":[],"_meta":{"ui":{"resourceUri":"ui://x"}}}"#,
            "a"
        )
        .is_none());
    }

    #[test]
    fn results_without_uris_are_left_alone() {
        let r = r#"{"content":[{"type":"text","text":"hello"}]}"#;
        assert!(result_uris("tools/call", r, "p").is_none());
        let r = r#"{"content":[{"type":"text","text":"has \"uri\" in it"}]}"#;
        assert!(result_uris("tools/call", r, "p").is_none());
        assert!(result_uris("tools/list", r#"{"uri":"x"}"#, "p").is_none());
    }

    #[test]
    fn error_data_names_what_the_host_used() {
        let e = r#"{"code":-32002,"message":"Resource not found","data":{"uri":"file:///x"}}"#;
        assert_eq!(
            error_data(e, "fs", |_| None).unwrap(),
            r#"{"code":-32002,"message":"Resource not found","data":{"uri":"fs+file:///x"}}"#
        );
        let e = r#"{"code":-32602,"message":"Unknown tool","data":{"name":"whoami","x":1}}"#;
        assert_eq!(
            error_data(e, "p", |n| (n == "whoami").then(|| "p__whoami".into())).unwrap(),
            r#"{"code":-32602,"message":"Unknown tool","data":{"name":"p__whoami","x":1}}"#
        );
        assert!(error_data(r#"{"code":1,"message":"m"}"#, "p", |_| None).is_none());
        assert!(error_data(r#"{"code":1,"message":"m","data":"text"}"#, "p", |_| None).is_none());
    }

    #[test]
    fn params_are_rewritten_in_place() {
        let p = r#"{"name":"a__echo","arguments":{"text":"hi"},"_meta":{"progressToken":1}}"#;
        assert_eq!(
            set_param(p, "name", "echo").unwrap(),
            r#"{"name":"echo","arguments":{"text":"hi"},"_meta":{"progressToken":1}}"#
        );
        let p = r#"{"ref":{"type":"ref/resource","uri":"a+x://{id}"},"argument":{"name":"id","value":"1"}}"#;
        assert_eq!(
            set_ref_member(p, "uri", "x://{id}").unwrap(),
            r#"{"ref":{"type":"ref/resource","uri":"x://{id}"},"argument":{"name":"id","value":"1"}}"#
        );
    }

    #[test]
    fn extension_results_get_their_own_and_their_lists_uris_exposed() {
        let r = r#"{"uri":"widget://w/1","items":[{"uri":"widget://w/2","n":1},{"n":2}],"deep":{"uri":"x://kept"},"n":[1]}"#;
        assert_eq!(
            result_uris(EXTENSION_METHOD, r, "alpha").as_deref(),
            Some(
                r#"{"uri":"alpha+widget://w/1","items":[{"uri":"alpha+widget://w/2","n":1},{"n":2}],"deep":{"uri":"x://kept"},"n":[1]}"#
            )
        );
        assert_eq!(result_uris(EXTENSION_METHOD, r#"{"uri":1}"#, "alpha"), None);
        assert_eq!(result_uris(EXTENSION_METHOD, r, ""), None);
    }
}
