use super::*;

fn raw(s: &str) -> Box<RawValue> {
    RawValue::from_string(s.to_owned()).unwrap()
}

fn def(key: &str) -> UpstreamDef {
    UpstreamDef::for_key(key)
}

fn slice(tools: &[&str]) -> Option<Arc<UpstreamSlice>> {
    Some(Arc::new(UpstreamSlice {
        tools: tools
            .iter()
            .map(|t| raw(&format!(r#"{{"name":"{t}","x-keep":[1]}}"#)))
            .collect(),
        resources: vec![raw(r#"{"uri":"file:///a.txt","name":"a"}"#)],
        templates: vec![raw(r#"{"uriTemplate":"file:///{path}","name":"t"}"#)],
        ..UpstreamSlice::default()
    }))
}

fn names() -> NameSettings {
    NameSettings {
        separator: "__".into(),
        max_length: 64,
    }
}

fn build(defs: Vec<UpstreamDef>, slices: Vec<Option<Arc<UpstreamSlice>>>) -> Catalog {
    let n = defs.len();
    Catalog::build(
        defs.into(),
        &names(),
        0,
        1,
        vec![UpstreamState::Up; n],
        slices,
    )
}

fn exposed(c: &Catalog, kind: Kind) -> Vec<String> {
    c.listing(kind)
        .items()
        .iter()
        .map(|i| i.exposed.clone())
        .collect()
}

#[test]
fn merges_and_namespaces_every_kind() {
    let c = build(
        vec![def("a"), def("b")],
        vec![slice(&["echo", "add"]), slice(&["echo"])],
    );
    assert_eq!(exposed(&c, Kind::Tools), ["a__echo", "a__add", "b__echo"]);
    assert_eq!(
        exposed(&c, Kind::Resources),
        ["a+file:///a.txt", "b+file:///a.txt"]
    );
    assert_eq!(
        exposed(&c, Kind::ResourceTemplates),
        ["a+file:///{path}", "b+file:///{path}"]
    );
    let item = c.listing(Kind::Tools).get("b__echo").unwrap();
    assert_eq!((item.upstream, item.original.as_str()), (1, "echo"));
    assert_eq!(&*item.raw, r#"{"name":"b__echo","x-keep":[1]}"#);
    assert_eq!(
        c.resolve_uri("b+file:///x/y"),
        Some((1, "file:///x/y".into()))
    );
    assert_eq!(c.resolve_uri("zz+file:///x"), None);
    assert_eq!(c.resolve_uri("file:///x"), None);
}

#[test]
fn names_do_not_depend_on_other_upstreams() {
    let alone = build(vec![def("b")], vec![slice(&["echo"])]);
    let with_other = build(
        vec![def("a"), def("b")],
        vec![slice(&["x"]), slice(&["echo"])],
    );
    let not_started = build(vec![def("a"), def("b")], vec![None, slice(&["echo"])]);
    assert_eq!(exposed(&alone, Kind::Tools), ["b__echo"]);
    assert_eq!(exposed(&with_other, Kind::Tools), ["a__x", "b__echo"]);
    assert_eq!(exposed(&not_started, Kind::Tools), ["b__echo"]);
}

#[test]
fn collisions_are_reported_and_withheld() {
    let mut a = def("a");
    a.tools.rename.insert("one".into(), "shared".into());
    let mut b = def("b");
    b.tools.rename.insert("two".into(), "shared".into());
    let c = build(vec![a, b], vec![slice(&["one", "keep"]), slice(&["two"])]);
    assert_eq!(exposed(&c, Kind::Tools), ["a__keep"]);
    assert_eq!(
        c.collisions(),
        [Collision {
            kind: Kind::Tools,
            exposed: "shared".into(),
            owners: vec![("a".into(), "one".into()), ("b".into(), "two".into())],
        }]
    );
    assert!(matches!(
        c.resolve_name(Kind::Tools, "shared"),
        Resolved::Ambiguous(_)
    ));
    assert!(matches!(
        c.resolve_name(Kind::Tools, "nope"),
        Resolved::Unknown
    ));
}

#[test]
fn filters_and_renames_apply_to_original_names() {
    let mut a = def("a");
    a.tools.include = vec!["get_*".into(), "echo".into()];
    a.tools.exclude = vec!["get_secret".into()];
    a.tools.rename.insert("echo".into(), "say".into());
    let c = build(
        vec![a],
        vec![slice(&["get_time", "get_secret", "echo", "other"])],
    );
    assert_eq!(exposed(&c, Kind::Tools), ["a__get_time", "say"]);
    assert_eq!(
        c.listing(Kind::Tools).get("say").unwrap().origin,
        NameOrigin::Renamed
    );
}

#[test]
fn malformed_entries_are_reported_not_exposed() {
    let bad = Some(Arc::new(UpstreamSlice {
        tools: vec![
            raw(r#"{"description":"no name"}"#),
            raw("[]"),
            raw(r#"{"name":"ok"}"#),
        ],
        ..UpstreamSlice::default()
    }));
    let c = build(vec![def("a")], vec![bad]);
    assert_eq!(exposed(&c, Kind::Tools), ["a__ok"]);
    assert_eq!(c.malformed().len(), 2);
}

#[test]
fn prefix_clashes_are_config_errors() {
    let mut b = def("b");
    b.prefix = "a".into();
    b.uri_prefix = "a".into();
    let problems = UpstreamDef::validate_all(&[def("a"), b]).unwrap_err();
    assert_eq!(problems.len(), 2);
    assert!(UpstreamDef::validate_all(&[def("a"), def("b")]).is_ok());
}

#[test]
fn capabilities_are_read_from_the_slice() {
    let s = UpstreamSlice {
        capabilities: Some(raw(r#"{"tools":{},"logging":{}}"#)),
        ..Default::default()
    };
    assert!(s.has_capability("logging"));
    assert!(!s.has_capability("completions"));
}

#[test]
fn one_upstream_may_expose_its_uris_unchanged() {
    let mut plain = def("plain");
    plain.uri_prefix = String::new();
    let c = build(
        vec![def("a"), plain.clone()],
        vec![slice(&["t"]), slice(&["u"])],
    );
    let uris = exposed(&c, Kind::Resources);
    assert_eq!(uris, ["a+file:///a.txt", "file:///a.txt"]);
    assert_eq!(
        exposed(&c, Kind::ResourceTemplates),
        ["a+file:///{path}", "file:///{path}"]
    );
    // A known prefix routes to its upstream; anything else to the one without a prefix.
    assert_eq!(
        c.resolve_uri("a+file:///a.txt"),
        Some((0, "file:///a.txt".into()))
    );
    assert_eq!(
        c.resolve_uri("file:///a.txt"),
        Some((1, "file:///a.txt".into()))
    );
    assert_eq!(c.resolve_uri("zz+x://y"), Some((1, "zz+x://y".into())));
    // Without such an upstream, an unknown prefix is unknown.
    let c = build(vec![def("a")], vec![slice(&["t"])]);
    assert_eq!(c.resolve_uri("file:///a.txt"), None);
    // Two upstreams without a URI prefix cannot both be.
    let mut other = def("other");
    other.uri_prefix = String::new();
    let problems = UpstreamDef::validate_all(&[plain, other]).unwrap_err();
    assert!(problems[0].contains("uri_prefix"), "{problems:?}");
}

#[test]
fn an_unchanged_uri_that_looks_prefixed_is_withheld() {
    let mut plain = def("plain");
    plain.uri_prefix = String::new();
    let tricky = Some(Arc::new(UpstreamSlice {
        resources: vec![raw(r#"{"uri":"a+file:///x","name":"x"}"#)],
        ..UpstreamSlice::default()
    }));
    let c = build(vec![def("a"), plain], vec![None, tricky]);
    assert!(exposed(&c, Kind::Resources).is_empty());
    assert!(
        c.malformed()[0].contains("uri_prefix"),
        "{:?}",
        c.malformed()
    );
}

#[test]
fn list_hints_combine_over_pages_and_say_how_long_a_list_is_fresh() {
    let page = |ttl_ms, private| CacheHint { ttl_ms, private };
    assert_eq!(CacheHint::combine([]), None);
    assert_eq!(
        CacheHint::combine([page(5000, false), page(800, false), page(9000, true)]),
        Some(page(800, true))
    );
    let at = Instant::now();
    let mut s = UpstreamSlice {
        protocol_version: "2026-07-28".into(),
        ..UpstreamSlice::default()
    };
    assert_eq!(s.era(), Some(manifold_protocol::version::Era::Stateless));
    s.hints[Kind::Tools.index()] = Some(page(1500, false));
    s.hints[Kind::Prompts.index()] = Some(page(0, true));
    s.fetched = [Some(at); crate::KINDS];
    assert_eq!(s.hint(Kind::Prompts), Some(page(0, true)));
    assert_eq!(
        s.fresh_until(Kind::Tools),
        Some(at + std::time::Duration::from_millis(1500))
    );
    // No time to live: only a list_changed fetches it again.
    assert_eq!(s.fresh_until(Kind::Prompts), None);
    assert_eq!(s.fresh_until(Kind::Resources), None);
    for (i, k) in Kind::ALL.into_iter().enumerate() {
        assert_eq!(k.index(), i);
    }
}

#[test]
fn same_lists_compares_items_and_hints() {
    let a = slice(&["x", "y"]).unwrap();
    let b = slice(&["x", "y"]).unwrap();
    assert!(a.same_lists(&b));
    assert!(!a.same_lists(&slice(&["x"]).unwrap()));
    let mut c = UpstreamSlice {
        tools: b.tools.clone(),
        resources: b.resources.clone(),
        templates: b.templates.clone(),
        ..UpstreamSlice::default()
    };
    assert!(a.same_lists(&c));
    c.hints[0] = Some(CacheHint {
        ttl_ms: 1,
        private: false,
    });
    assert!(!a.same_lists(&c));
}

#[test]
fn ui_resources_keep_their_scheme_and_route_back() {
    let apps = || {
        Some(Arc::new(UpstreamSlice {
            resources: vec![raw(
                r#"{"uri":"ui://clock/app.html","name":"clock","mimeType":"text/html;profile=mcp-app"}"#,
            )],
            templates: vec![raw(r#"{"uriTemplate":"ui://clock/{view}","name":"v"}"#)],
            ..UpstreamSlice::default()
        }))
    };
    let mut plain = def("plain");
    plain.uri_prefix = String::new();
    let c = build(
        vec![def("a"), def("b"), plain],
        vec![apps(), apps(), apps()],
    );
    assert_eq!(
        exposed(&c, Kind::Resources),
        [
            "ui://a/clock/app.html",
            "ui://b/clock/app.html",
            "ui://clock/app.html"
        ]
    );
    assert_eq!(
        exposed(&c, Kind::ResourceTemplates),
        [
            "ui://a/clock/{view}",
            "ui://b/clock/{view}",
            "ui://clock/{view}"
        ]
    );
    assert_eq!(
        c.resolve_uri("ui://a/clock/app.html"),
        Some((0, "ui://clock/app.html".into()))
    );
    assert_eq!(
        c.resolve_uri("ui://b/clock/day"),
        Some((1, "ui://clock/day".into()))
    );
    // Unknown hosts go to the upstream whose URIs are unchanged.
    assert_eq!(
        c.resolve_uri("ui://clock/app.html"),
        Some((2, "ui://clock/app.html".into()))
    );
    // An unchanged ui:// URI whose host is another upstream's prefix is withheld.
    let mut plain = def("plain");
    plain.uri_prefix = String::new();
    let tricky = Some(Arc::new(UpstreamSlice {
        resources: vec![raw(r#"{"uri":"ui://a/x.html","name":"x"}"#)],
        ..UpstreamSlice::default()
    }));
    let c = build(vec![def("a"), plain], vec![None, tricky]);
    assert!(exposed(&c, Kind::Resources).is_empty());
}

#[test]
fn app_tools_name_their_exposed_resource() {
    let tool = r#"{"name":"show_time","_meta":{"ui":{"resourceUri":"ui://clock/app.html","visibility":["app"],"prefersBorder":true},"openai/outputTemplate":"ui://clock/app.html"}}"#;
    let apps = || {
        Some(Arc::new(UpstreamSlice {
            tools: vec![raw(tool)],
            ..UpstreamSlice::default()
        }))
    };
    let mut plain = def("plain");
    plain.uri_prefix = String::new();
    let c = build(vec![def("a"), plain], vec![apps(), apps()]);
    let a = c.listing(Kind::Tools).get("a__show_time").unwrap();
    assert_eq!(
        &*a.raw,
        r#"{"name":"a__show_time","_meta":{"ui":{"resourceUri":"ui://a/clock/app.html","visibility":["app"],"prefersBorder":true},"openai/outputTemplate":"ui://a/clock/app.html"}}"#
    );
    // App-only tools stay listed; without a URI prefix the URI is unchanged.
    let plain = c.listing(Kind::Tools).get("plain__show_time").unwrap();
    assert!(plain.raw.contains(r#""resourceUri":"ui://clock/app.html""#));
}

#[test]
fn a_retired_upstream_lists_nothing_and_frees_its_prefixes() {
    let defs: Arc<[UpstreamDef]> = vec![def("a").retire(), def("a")].into();
    let catalog = Catalog::build(
        defs,
        &names(),
        0,
        1,
        vec![UpstreamState::Up; 2],
        vec![slice(&["x"]), slice(&["x"])],
    );
    let tools = catalog.listing(Kind::Tools).items();
    assert_eq!(tools.len(), 1, "no collision with the retired one");
    assert_eq!((tools[0].exposed.as_str(), tools[0].upstream), ("a__x", 1));
    let resources = catalog.listing(Kind::Resources).items();
    assert_eq!(resources.len(), 1);
    let (upstream, _) = catalog.resolve_uri(&resources[0].exposed).unwrap();
    assert_eq!(upstream, 1);
}
