//! Cursor pagination shared by every list method.

use std::ops::Range;

use serde_json::{Map, Value};

use crate::rpc::RpcError;

/// Prefix that makes cursors look opaque and lets us reject cursors we never issued.
const CURSOR_PREFIX: &str = "fxc-";

pub fn encode_cursor(start: usize) -> String {
    format!("{CURSOR_PREFIX}{start:x}")
}

/// Decodes a cursor we issued; it always points strictly inside the list.
fn decode_cursor(cursor: &Value, len: usize) -> Result<usize, RpcError> {
    let bad = || RpcError::invalid_params(format!("Invalid cursor: {cursor}"));
    let text = cursor.as_str().ok_or_else(bad)?;
    let hex = text.strip_prefix(CURSOR_PREFIX).ok_or_else(bad)?;
    let start = usize::from_str_radix(hex, 16).map_err(|_| bad())?;
    if start == 0 || start >= len {
        return Err(bad());
    }
    Ok(start)
}

/// The slice of a `len`-item list to return for `params.cursor`, and the next cursor.
/// `page_size` 0 means everything in one page.
pub fn page_range(
    len: usize,
    params: &Value,
    page_size: usize,
) -> Result<(Range<usize>, Option<String>), RpcError> {
    let start = match params.get("cursor") {
        None | Some(Value::Null) => 0,
        Some(cursor) => decode_cursor(cursor, len)?,
    };
    if page_size == 0 {
        return Ok((start..len, None));
    }
    let end = start.saturating_add(page_size).min(len);
    let next = (end < len).then(|| encode_cursor(end));
    Ok((start..end, next))
}

/// Builds `{key: [items...], nextCursor?}` from an iterator over the whole list.
pub fn paged<'a>(
    items: impl Iterator<Item = &'a Value>,
    len: usize,
    key: &str,
    params: &Value,
    page_size: usize,
) -> Result<Value, RpcError> {
    let (range, next) = page_range(len, params, page_size)?;
    let page: Vec<Value> = items.skip(range.start).take(range.len()).cloned().collect();
    let mut result = Map::with_capacity(2);
    result.insert(key.to_owned(), Value::Array(page));
    if let Some(cursor) = next {
        result.insert("nextCursor".to_owned(), Value::String(cursor));
    }
    Ok(Value::Object(result))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_pagination_returns_everything() {
        let (range, next) = page_range(5, &json!({}), 0).unwrap();
        assert_eq!(range, 0..5);
        assert_eq!(next, None);
    }

    #[test]
    fn pages_walk_to_the_end() {
        let (r1, c1) = page_range(5, &json!({}), 2).unwrap();
        assert_eq!(r1, 0..2);
        let (r2, c2) = page_range(5, &json!({ "cursor": c1.unwrap() }), 2).unwrap();
        assert_eq!(r2, 2..4);
        let (r3, c3) = page_range(5, &json!({ "cursor": c2.unwrap() }), 2).unwrap();
        assert_eq!(r3, 4..5);
        assert_eq!(c3, None);
    }

    #[test]
    fn exact_multiple_has_no_trailing_cursor() {
        let (_, c1) = page_range(4, &json!({}), 2).unwrap();
        let (r2, c2) = page_range(4, &json!({ "cursor": c1.unwrap() }), 2).unwrap();
        assert_eq!(r2, 2..4);
        assert_eq!(c2, None);
    }

    #[test]
    fn bad_cursors_are_invalid_params() {
        for cursor in [
            json!("nope"),
            json!(3),
            json!("fxc-zz"),
            json!("fxc-0"),
            json!("fxc-9"),
        ] {
            let err = page_range(5, &json!({ "cursor": cursor }), 2).unwrap_err();
            assert_eq!(err.code, -32602);
        }
    }

    #[test]
    fn paged_builds_result_object() {
        let items = [json!(1), json!(2), json!(3)];
        let v = paged(items.iter(), 3, "tools", &json!({}), 2).unwrap();
        assert_eq!(v["tools"], json!([1, 2]));
        assert_eq!(v["nextCursor"], json!(encode_cursor(2)));
    }
}
