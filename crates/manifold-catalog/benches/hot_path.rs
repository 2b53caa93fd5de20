//! Criterion benches for the per-request work Manifold does between two pipe hops: decoding
//! the envelope, resolving the name, rewriting name and id, writing the answer back, and for
//! the catalog: merging 100 x 50 tools and serving the cached merged list; and a forwarded
//! call's params rebuilt for the upstream, by a chain of passes and by one.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use manifold_catalog::{rewrite, Catalog, Kind, UpstreamDef, UpstreamSlice, UpstreamState};
use manifold_config::NameSettings;
use manifold_protocol::object::{json_string, with_meta, Edits};
use manifold_protocol::version::meta;
use manifold_protocol::{needle, write, Envelope, RawObject, RawValue};
use serde::Deserialize;

const REQUEST: &str = r#"{"jsonrpc":"2.0","id":42,"method":"tools/call","params":{"name":"u7__tool_13","arguments":{"text":"hello from the benchmark, a small argument"},"_meta":{"trace":"x"}}}"#;
/// The envelope as a `serde_json` derive reads it: the reference the scanner is compared to.
#[derive(Deserialize)]
#[allow(dead_code)]
struct SerdeEnvelope<'a> {
    jsonrpc: Option<&'a str>,
    #[serde(borrow)]
    id: Option<&'a RawValue>,
    method: Option<&'a str>,
    #[serde(borrow)]
    params: Option<&'a RawValue>,
    #[serde(borrow)]
    result: Option<&'a RawValue>,
    #[serde(borrow)]
    error: Option<&'a RawValue>,
}

const RESPONSE: &str = r#"{"jsonrpc":"2.0","id":1234,"result":{"content":[{"type":"text","text":"hello from the benchmark, a small argument"}],"isError":false}}"#;

fn catalog(upstreams: usize, tools: usize) -> Catalog {
    let defs: Arc<[UpstreamDef]> = (0..upstreams)
        .map(|i| UpstreamDef::for_key(&format!("u{i}")))
        .collect();
    let slices = (0..upstreams)
        .map(|_| {
            let tools = (0..tools)
                .map(|t| {
                    let text = format!(
                        r#"{{"name":"tool_{t}","description":"{}","inputSchema":{{"type":"object","properties":{{"text":{{"type":"string"}}}},"required":["text"]}}}}"#,
                        "d".repeat(300)
                    );
                    RawValue::from_string(text).unwrap()
                })
                .collect();
            Some(Arc::new(UpstreamSlice { tools, ..UpstreamSlice::default() }))
        })
        .collect();
    let names = NameSettings {
        separator: "__".into(),
        max_length: 64,
    };
    Catalog::build(
        defs,
        &names,
        0,
        1,
        vec![UpstreamState::Up; upstreams],
        slices,
    )
}

fn request_path(c: &mut Criterion) {
    let cat = catalog(100, 50);
    c.bench_function(
        "envelope decode (tools/call, 150 B) + params members",
        |b| {
            b.iter(|| {
                let env = Envelope::decode(black_box(REQUEST.as_bytes())).unwrap();
                let kind = env.kind().unwrap();
                let params = RawObject::parse(env.params.unwrap()).unwrap();
                black_box((kind, params.get_str("name").is_some()));
            })
        },
    );
    c.bench_function(
        "reference: serde_json derive of the same envelope + params",
        |b| {
            b.iter(|| {
                let env: SerdeEnvelope = serde_json::from_str(black_box(REQUEST)).unwrap();
                let params: std::collections::HashMap<&str, &RawValue> =
                    serde_json::from_str(env.params.unwrap().get()).unwrap();
                black_box(params.contains_key("name"));
            })
        },
    );
    c.bench_function("catalog lookup (5,000 tools)", |b| {
        b.iter(|| black_box(cat.resolve_name(Kind::Tools, black_box("u7__tool_13"))))
    });
    let env = Envelope::decode(REQUEST.as_bytes()).unwrap();
    let params = env.params.unwrap();
    c.bench_function(
        "name and id rewrite (RawObject parse, set name, write request)",
        |b| {
            let mut line = Vec::with_capacity(256);
            b.iter(|| {
                let mut obj = RawObject::parse(black_box(params)).unwrap();
                obj.set_str("name", "tool_13");
                line.clear();
                write::request(
                    &mut line,
                    black_box(9_000_001),
                    "tools/call",
                    Some(&obj.to_text()),
                );
                black_box(&line);
            })
        },
    );
    c.bench_function("answer: decode, restore host id, write", |b| {
        let mut line = Vec::with_capacity(256);
        b.iter(|| {
            let env = Envelope::decode(black_box(RESPONSE.as_bytes())).unwrap();
            let result = env.result.unwrap();
            let mapped = rewrite::result_uris("tools/call", result, "u7");
            line.clear();
            write::response(&mut line, "42", mapped.as_deref().unwrap_or(result));
            black_box(&line);
        })
    });
    let big = format!(
        r#"{{"jsonrpc":"2.0","id":7,"result":{{"content":[{{"type":"text","text":"{}"}}]}}}}"#,
        "x".repeat(1 << 20)
    );
    c.bench_function("answer decode, 1 MB text result", |b| {
        b.iter(|| black_box(Envelope::decode(black_box(big.as_bytes())).unwrap().result))
    });
    c.bench_function("reference: serde_json derive of the 1 MB answer", |b| {
        b.iter(|| {
            let env: SerdeEnvelope = serde_json::from_slice(black_box(big.as_bytes())).unwrap();
            black_box(env.result)
        })
    });
}

fn catalog_path(c: &mut Criterion) {
    let mut group = c.benchmark_group("catalog");
    group
        .sample_size(20)
        .measurement_time(Duration::from_secs(3));
    group.bench_function("merge 100 x 50 tools", |b| {
        b.iter(|| black_box(catalog(100, 50)))
    });
    let cat = catalog(100, 50);
    let _ = cat.listing(Kind::Tools).page(None);
    group.bench_function("serve cached tools/list 100 x 50", |b| {
        let mut line = Vec::new();
        b.iter(|| {
            let page = cat.listing(Kind::Tools).page(None).unwrap();
            line.clear();
            write::response(&mut line, "7", page);
            black_box(line.len());
        })
    });
    group.finish();
}

/// A stateless host's `tools/call` as it reaches the forwarding path: a name, 2 KB of
/// arguments, and a `_meta` with a progress token, a trace context and what the host declares
/// about itself.
fn call_params() -> String {
    let rows: Vec<String> = (0..38)
        .map(|i| format!(r#"{{"id":{i},"label":"row {i} of the table","done":false}}"#))
        .collect();
    let arguments = format!(
        r#"{{"query":"select the open rows","rows":[{}]}}"#,
        rows.join(",")
    );
    assert!(
        (1900..2200).contains(&arguments.len()),
        "{}",
        arguments.len()
    );
    format!(
        r#"{{"name":"u7__tool_13","arguments":{arguments},"_meta":{{"progressToken":"host-token-1","traceparent":"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01","io.modelcontextprotocol/protocolVersion":"2026-07-28","io.modelcontextprotocol/clientCapabilities":{{"sampling":{{}}}},"io.modelcontextprotocol/clientInfo":{{"name":"host","version":"1.0"}}}}}}"#
    )
}

const HOST_KEYS: [&str; 4] = [
    meta::PROTOCOL_VERSION,
    meta::CLIENT_CAPABILITIES,
    meta::CLIENT_INFO,
    meta::LOG_LEVEL,
];
const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-00f067aa0ba902b7-01";
const UPSTREAM_CAPS: &str = r#"{"elicitation":{}}"#;
const CLIENT_INFO: &str = r#"{"name":"manifold","version":"1.0.0"}"#;
const HOST_CAPS: &str = r#"{"sampling":{}}"#;

/// The chain the router runs today, step by step as it does (each a parse and a write): the
/// name, the progress token, the host's own keys, the trace context, the stateless upstream's
/// request metadata, the host's capabilities, the request line. Every step has work to do on
/// these params, so the needle searches by which a step is skipped are left out.
fn chain_of_passes(line: &mut Vec<u8>, params: &str, id: u64) -> Option<Box<str>> {
    let mut obj = RawObject::parse(params).unwrap();
    obj.set_str("name", "tool_13");
    let params = obj.to_text();
    let (params, token) = match needle::PROGRESS_TOKEN.find(params.as_bytes()) {
        Some(_) => {
            let mut obj = RawObject::parse(&params).unwrap();
            let mut m = RawObject::parse(obj.get("_meta").unwrap()).unwrap();
            let token = Box::from(m.get("progressToken").unwrap());
            m.set_raw("progressToken", id.to_string());
            let m = m.to_text();
            obj.set_raw("_meta", m);
            (obj.to_text(), Some(token))
        }
        None => (params, None),
    };
    let params = {
        let mut obj = RawObject::parse(&params).unwrap();
        let mut m = RawObject::parse(obj.get("_meta").unwrap()).unwrap();
        for key in HOST_KEYS {
            m.remove(key);
        }
        let m = m.to_text();
        obj.set_raw("_meta", m);
        obj.to_text()
    };
    let params = {
        let mut obj = RawObject::parse(&params).unwrap();
        let mut m = RawObject::parse(obj.get("_meta").unwrap()).unwrap();
        m.set_str("traceparent", TRACEPARENT);
        let m = m.to_text();
        obj.set_raw("_meta", m);
        obj.to_text()
    };
    let members = format!(
        "{}:{},{}:{},{}:{}",
        json_string(meta::PROTOCOL_VERSION),
        json_string("2026-07-28"),
        json_string(meta::CLIENT_CAPABILITIES),
        UPSTREAM_CAPS,
        json_string(meta::CLIENT_INFO),
        CLIENT_INFO
    );
    let params = with_meta(Some(&params), &members);
    let caps = format!("\"{}\":{}", meta::CLIENT_CAPABILITIES, HOST_CAPS);
    let params = with_meta(Some(&params), &caps);
    write::request(line, id, "tools/call", Some(&params));
    token
}

fn one_pass<'p>(line: &mut Vec<u8>, params: &'p str, id: u64) -> Option<&'p str> {
    let mut edits = Edits::default();
    edits.set_str("name", "tool_13");
    edits.meta_replace_capture_id("progressToken", id);
    edits.meta_remove(&HOST_KEYS);
    edits.meta_set_str("traceparent", TRACEPARENT);
    edits.meta_set_raw(meta::PROTOCOL_VERSION, "\"2026-07-28\"");
    edits.meta_set_raw(meta::CLIENT_CAPABILITIES, UPSTREAM_CAPS);
    edits.meta_set_raw(meta::CLIENT_INFO, CLIENT_INFO);
    edits.meta_set_raw(meta::CLIENT_CAPABILITIES, HOST_CAPS);
    write::request_edited(line, id, "tools/call", Some(params), &edits)
        .unwrap()
        .captured
}

fn params_path(c: &mut Criterion) {
    let params = call_params();
    let (mut chain, mut once) = (Vec::new(), Vec::new());
    chain_of_passes(&mut chain, &params, 9_000_001);
    one_pass(&mut once, &params, 9_000_001);
    let value = |line: &[u8]| serde_json::from_slice::<serde_json::Value>(line).unwrap();
    assert_eq!(value(&chain), value(&once), "both write the same request");
    c.bench_function("tools/call params: chain of seven passes", |b| {
        let mut line = Vec::with_capacity(4096);
        b.iter(|| {
            line.clear();
            let token = chain_of_passes(&mut line, black_box(&params), black_box(9_000_001));
            black_box((&line, token));
        })
    });
    c.bench_function("tools/call params: one pass", |b| {
        let mut line = Vec::with_capacity(4096);
        b.iter(|| {
            line.clear();
            let token = one_pass(&mut line, black_box(&params), black_box(9_000_001));
            black_box((&line, token));
        })
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = request_path, params_path, catalog_path
}
criterion_main!(benches);
