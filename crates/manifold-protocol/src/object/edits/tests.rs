//! One test per rule of the module, on hand-written params.

use super::*;
use crate::version::meta;
use crate::write;

/// The params of the line `request_edited` writes, or the error; a failed write must leave
/// the line as it was.
fn params_after(
    params: Option<&str>,
    edits: &Edits<'_>,
) -> Result<(String, Option<String>), EditError> {
    let mut line = b"before\n".to_vec();
    match write::request_edited(&mut line, 9, "tools/call", params, edits) {
        Ok(edited) => {
            let line = String::from_utf8(line).unwrap();
            let head = "before\n{\"jsonrpc\":\"2.0\",\"id\":9,\"method\":\"tools/call\"";
            let rest = line
                .strip_prefix(head)
                .unwrap()
                .strip_suffix("}\n")
                .unwrap();
            let params = rest.strip_prefix(",\"params\":").unwrap_or(rest);
            Ok((params.to_owned(), edited.captured.map(str::to_owned)))
        }
        Err(e) => {
            assert_eq!(
                line, b"before\n",
                "a refused edit leaves the line as it was"
            );
            Err(e)
        }
    }
}

fn edited(params: Option<&str>, edits: &Edits<'_>) -> String {
    params_after(params, edits).unwrap().0
}

fn naming(name: &'static str) -> Edits<'static> {
    let mut edits = Edits::default();
    edits.set_str("name", name);
    edits
}

#[test]
fn members_not_edited_are_copied_byte_for_byte_in_order() {
    let params = r#"{ "name" : "alpha__echo", "arguments":{"deep":[1, 2.50e3,"\u00e9"]},
        "k\"ey":"say \"hi\"", "task" :{} }"#;
    assert_eq!(
        edited(Some(params), &naming("echo")),
        r#"{"name":"echo","arguments":{"deep":[1, 2.50e3,"\u00e9"]},"k\"ey":"say \"hi\"","task":{}}"#
    );
}

#[test]
fn a_set_replaces_in_place_and_a_new_member_is_appended_last_value_winning() {
    let mut edits = naming("first");
    edits.set_raw("task", "{}");
    edits.set_str("name", "echo");
    assert_eq!(
        edited(Some(r#"{"arguments":{},"name":"a__echo","x":1}"#), &edits),
        r#"{"arguments":{},"name":"echo","x":1,"task":{}}"#
    );
}

#[test]
fn a_created_meta_comes_first_with_or_without_a_scan() {
    let mut edits = naming("echo");
    edits.meta_set_str("traceparent", "00-t");
    edits.meta_set_raw(meta::PROTOCOL_VERSION, "\"2026-07-28\"");
    let want = r#"{"_meta":{"traceparent":"00-t","io.modelcontextprotocol/protocolVersion":"2026-07-28"},"name":"echo","arguments":{"_meta":1}}"#;
    assert_eq!(
        edited(
            Some(r#"{"name":"a__echo","arguments":{"_meta":1}}"#),
            &edits
        ),
        want
    );
    // No top-level edit and no "_meta" in the text: put in front of params left unscanned.
    let mut meta_only = Edits::default();
    meta_only.meta_set_str("traceparent", "00-t");
    assert_eq!(
        edited(Some(r#"{"cursor":"c"}"#), &meta_only),
        r#"{"_meta":{"traceparent":"00-t"},"cursor":"c"}"#
    );
    assert_eq!(
        edited(Some("{ }"), &meta_only),
        r#"{"_meta":{"traceparent":"00-t"} }"#
    );
}

#[test]
fn sets_in_meta_replace_in_place_and_append() {
    let mut edits = naming("echo");
    edits.meta_set_str("traceparent", "00-new");
    edits.meta_set_raw("k", "[1]");
    assert_eq!(
        edited(
            Some(r#"{"_meta":{"a":1,"traceparent":"00-old","z":{ }},"name":"x"}"#),
            &edits
        ),
        r#"{"_meta":{"a":1,"traceparent":"00-new","z":{ },"k":[1]},"name":"echo"}"#
    );
}

#[test]
fn a_meta_emptied_by_removals_is_dropped_and_an_empty_one_kept() {
    let mut edits = naming("echo");
    edits.meta_remove(&[meta::CLIENT_INFO, meta::LOG_LEVEL]);
    let params = r#"{"name":"x","_meta":{"io.modelcontextprotocol/clientInfo":{}},"arguments":{}}"#;
    assert_eq!(
        edited(Some(params), &edits),
        r#"{"name":"echo","arguments":{}}"#
    );
    let params = r#"{"_meta":{"io.modelcontextprotocol/clientInfo":{}},"name":"x"}"#;
    assert_eq!(edited(Some(params), &edits), r#"{"name":"echo"}"#);
    assert_eq!(
        edited(Some(r#"{"_meta":{},"name":"x"}"#), &edits),
        r#"{"_meta":{},"name":"echo"}"#
    );
}

#[test]
fn a_key_removed_and_set_is_appended_with_the_set_value() {
    let mut edits = Edits::default();
    edits.meta_remove(&[meta::PROTOCOL_VERSION]);
    edits.meta_set_raw(meta::PROTOCOL_VERSION, "\"2026-07-28\"");
    let params = r#"{"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-11-25","a":1}}"#;
    assert_eq!(
        edited(Some(params), &edits),
        r#"{"_meta":{"a":1,"io.modelcontextprotocol/protocolVersion":"2026-07-28"}}"#
    );
}

#[test]
fn the_capture_reports_the_hosts_token_and_replaces_it_in_place() {
    let mut edits = naming("echo");
    edits.meta_replace_capture_id("progressToken", 17);
    let params = r#"{"_meta":{"progressToken":"tok \"1\"","b":2},"name":"x"}"#;
    assert_eq!(
        params_after(Some(params), &edits).unwrap(),
        (
            r#"{"_meta":{"progressToken":17,"b":2},"name":"echo"}"#.to_owned(),
            Some(r#""tok \"1\"""#.to_owned())
        )
    );
    // No token: nothing captured, nothing added.
    assert_eq!(
        params_after(Some(r#"{"name":"x","_meta":{"b":2}}"#), &edits).unwrap(),
        (r#"{"name":"echo","_meta":{"b":2}}"#.to_owned(), None)
    );
    let mut raw = Edits::default();
    raw.meta_replace_capture("progressToken", "\"up-1\"");
    assert_eq!(
        params_after(Some(r#"{"_meta":{"progressToken":5}}"#), &raw).unwrap(),
        (
            r#"{"_meta":{"progressToken":"up-1"}}"#.to_owned(),
            Some("5".to_owned())
        )
    );
}

#[test]
fn absent_or_null_params_become_an_object_when_something_is_set() {
    let mut edits = naming("echo");
    edits.meta_set_raw("k", "true");
    let want = r#"{"_meta":{"k":true},"name":"echo"}"#;
    assert_eq!(edited(None, &edits), want);
    assert_eq!(edited(Some("null"), &edits), want);
    // A `_meta` of null counts as absent.
    assert_eq!(
        edited(Some(r#"{"_meta":null,"name":"x"}"#), &edits),
        r#"{"_meta":{"k":true},"name":"echo"}"#
    );
    // Removals and the capture alone have nothing to act on.
    let mut removals = Edits::default();
    removals.meta_remove(&[meta::CLIENT_INFO]);
    removals.meta_replace_capture_id("progressToken", 1);
    assert_eq!(edited(None, &removals), "");
    assert_eq!(edited(Some("null"), &removals), "null");
    assert_eq!(
        edited(Some(r#"{"_meta":null}"#), &removals),
        r#"{"_meta":null}"#
    );
}

#[test]
fn params_that_are_not_an_object_are_refused() {
    for params in ["[1]", "\"s\"", "5", "true", " [{\"name\":1}]"] {
        assert_eq!(
            params_after(Some(params), &naming("echo")),
            Err(EditError::NotAnObject),
            "{params}"
        );
        assert_eq!(
            params_after(Some(params), &Edits::default()),
            Err(EditError::NotAnObject),
            "{params}"
        );
    }
    let mut meta_edit = naming("echo");
    meta_edit.meta_set_str("traceparent", "00-t");
    for params in [r#"{"_meta":5}"#, r#"{"_meta":[],"name":"x"}"#] {
        assert_eq!(
            params_after(Some(params), &meta_edit),
            Err(EditError::MetaNotAnObject)
        );
        // Not edited, it is not looked at.
        assert!(params_after(Some(params), &naming("echo")).is_ok());
    }
    assert!(matches!(
        params_after(Some(r#"{"name":}"#), &naming("echo")),
        Err(EditError::Syntax(_))
    ));
    assert!(matches!(
        params_after(Some(r#"{"\ud800":1}"#), &naming("echo")),
        Err(EditError::Syntax(_))
    ));
}

#[test]
fn without_edits_params_are_written_as_they_are() {
    let params = r#"{ "name" : "x", "_meta" : { "progressToken" : 1 } }"#;
    assert_eq!(edited(Some(params), &Edits::default()), params);
    assert_eq!(edited(None, &Edits::default()), "");
    assert_eq!(edited(Some("null"), &Edits::default()), "null");
    assert!(Edits::default().is_empty());
    assert!(!naming("x").is_empty());
}

#[test]
fn escaped_keys_are_matched_by_what_they_say() {
    let mut edits = naming("echo");
    edits.meta_replace_capture_id("progressToken", 3);
    let params = r#"{"n\u0061me":"x","\u005fmeta":{"progress\u0054oken":1}}"#;
    assert_eq!(
        params_after(Some(params), &edits).unwrap(),
        (
            r#"{"n\u0061me":"echo","\u005fmeta":{"progress\u0054oken":3}}"#.to_owned(),
            Some("1".to_owned())
        )
    );
}
