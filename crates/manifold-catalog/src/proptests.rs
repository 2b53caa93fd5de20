//! Property tests of the two mappings every host-visible name goes through: tool names
//! (prefix, separator, sanitizing, shortening) over a whole configured catalog, and resource
//! URIs (`uri::expose` and `uri::split`, through `Catalog::resolve_uri`).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use manifold_config::{NameFilter, NameSettings};
use proptest::prelude::*;
use serde_json::value::RawValue;

use crate::naming::{exposed_name, is_host_safe, sanitize};
use crate::{uri, Catalog, Kind, UpstreamDef, UpstreamSlice, UpstreamState};

/// One configured upstream: its key, raw prefix, tools (original names) and renames.
#[derive(Debug, Clone)]
struct Upstream {
    key: String,
    prefix: String,
    tools: Vec<String>,
    renames: BTreeMap<String, String>,
}

fn settings() -> impl Strategy<Value = NameSettings> {
    (
        prop::sample::select(vec!["__", "_", "-", "x9", "--"]),
        // Short limits too, so that shortening (and its hash) is exercised often.
        prop_oneof![1usize..=16, 17usize..=40, 41usize..=128],
    )
        .prop_map(|(separator, max_length)| NameSettings {
            separator: separator.to_owned(),
            max_length,
        })
}

/// Tool names as upstreams write them: mostly host-safe, some with characters hosts
/// refuse, some long, some sharing a long head.
fn tool_name() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z_]{1,12}",
        "[a-zA-Z0-9_. /:é-]{0,20}",
        "(get|list)_[a-z]{40,80}_[ab]",
    ]
}

fn upstream() -> impl Strategy<Value = Upstream> {
    (
        "[a-z][a-z0-9_.-]{0,6}",
        prop_oneof!["", "[a-z]{1,4}", "[A-Za-z0-9 ._-]{1,8}"],
        prop::collection::vec(tool_name(), 0..8),
        prop::option::of(("[a-z_]{1,12}", tool_name())),
    )
        .prop_map(|(key, prefix, tools, rename)| {
            let renames = match (rename, tools.first()) {
                (Some((to, _)), Some(first)) => BTreeMap::from([(first.clone(), to)]),
                _ => BTreeMap::new(),
            };
            Upstream {
                key,
                prefix,
                tools,
                renames,
            }
        })
}

fn def(u: &Upstream) -> UpstreamDef {
    UpstreamDef {
        key: u.key.clone(),
        prefix: sanitize(&u.prefix),
        uri_prefix: uri::uri_prefix(if u.prefix.is_empty() {
            &u.key
        } else {
            &u.prefix
        }),
        tools: NameFilter {
            rename: u.renames.clone(),
            ..NameFilter::default()
        },
        prompts: NameFilter::default(),
        tool_timeouts: BTreeMap::new(),
        pinning: None,
        required: false,
        retired: false,
    }
}

fn slice(u: &Upstream) -> Option<Arc<UpstreamSlice>> {
    let tools = u
        .tools
        .iter()
        .map(|t| {
            let json = serde_json::json!({ "name": t, "inputSchema": {} }).to_string();
            RawValue::from_string(json).unwrap()
        })
        .collect();
    Some(Arc::new(UpstreamSlice {
        tools,
        ..UpstreamSlice::default()
    }))
}

fn build(
    defs: Vec<UpstreamDef>,
    names: &NameSettings,
    slices: Vec<Option<Arc<UpstreamSlice>>>,
) -> Catalog {
    let n = defs.len();
    Catalog::build(defs.into(), names, 0, 1, vec![UpstreamState::Up; n], slices)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// No two distinct (upstream, original) pairs are listed under one exposed name; a name
    /// two of them want is reported as a collision naming both and listed for neither; every
    /// other tool is listed under the name the naming rules give it; every listed name is
    /// one hosts accept under the configured limit.
    #[test]
    fn tool_names_are_injective_over_a_catalog(
        names in settings(),
        upstreams in prop::collection::vec(upstream(), 1..5),
    ) {
        let defs: Vec<UpstreamDef> = upstreams.iter().map(def).collect();
        prop_assume!(UpstreamDef::validate_all(&defs).is_ok());
        let catalog = build(defs.clone(), &names, upstreams.iter().map(slice).collect());

        // Who wants which name, by the naming rules alone.
        let mut wanted: HashMap<String, Vec<(usize, String)>> = HashMap::new();
        for (i, (u, d)) in upstreams.iter().zip(&defs).enumerate() {
            for tool in &u.tools {
                let rename = u.renames.get(tool).map(String::as_str);
                let (name, _) = exposed_name(&names, &d.prefix, tool, rename);
                wanted.entry(name).or_default().push((i, tool.clone()));
            }
        }
        let listing = catalog.listing(Kind::Tools);
        for item in listing.items() {
            prop_assert!(is_host_safe(&item.exposed, names.max_length), "{:?}", item.exposed);
            prop_assert_eq!(listing.get(&item.exposed).map(|i| (i.upstream, &i.original)),
                Some((item.upstream, &item.original)));
        }
        for (name, claimants) in &wanted {
            let listed = listing.get(name);
            if claimants.len() == 1 {
                let (upstream, original) = &claimants[0];
                let item = listed.expect("a name wanted once is listed");
                prop_assert_eq!((item.upstream, &item.original), (*upstream, original));
            } else {
                prop_assert!(listed.is_none(), "{name:?} listed though {claimants:?} want it");
                let collision = catalog
                    .collisions()
                    .iter()
                    .find(|c| c.kind == Kind::Tools && &c.exposed == name)
                    .expect("a name wanted twice is reported");
                for (upstream, original) in claimants {
                    let owner = (upstreams[*upstream].key.clone(), original.clone());
                    prop_assert!(collision.owners.contains(&owner), "{owner:?} in {collision:?}");
                }
            }
        }
        prop_assert_eq!(listing.items().len(), wanted.values().filter(|c| c.len() == 1).count());
    }

    /// Exposing a URI and splitting it gives back the prefix and the original, for `ui://`
    /// URIs (which keep their scheme) and any other, whatever the prefix was made from.
    #[test]
    fn uris_round_trip(
        key in ".{0,12}",
        rest in ".{0,40}",
        ui in any::<bool>(),
    ) {
        let prefix = uri::uri_prefix(&key);
        let original = if ui { format!("{}{rest}", uri::UI_SCHEME) } else { rest };
        let exposed = uri::expose(&prefix, &original);
        prop_assert_eq!(ui, exposed.starts_with(uri::UI_SCHEME));
        prop_assert_eq!(uri::split(&exposed), Some((prefix.as_str(), original.as_str().into())));
    }

    /// In a catalog of upstreams with distinct URI prefixes (one of them possibly empty), an
    /// exposed URI resolves to the upstream that owns it and its original URI.
    #[test]
    fn exposed_uris_resolve_to_their_upstream(
        keys in prop::collection::btree_set("[a-z][a-z0-9.-]{0,5}", 1..5),
        unprefixed in any::<bool>(),
        originals in prop::collection::vec(("(ui://|file:///|test://|[a-z]+:)", ".{0,20}"), 1..6),
    ) {
        let mut defs: Vec<UpstreamDef> = keys
            .iter()
            .map(|k| def(&Upstream { key: k.clone(), prefix: String::new(), tools: vec![], renames: BTreeMap::new() }))
            .collect();
        if unprefixed {
            defs[0].uri_prefix.clear();
        }
        prop_assume!(UpstreamDef::validate_all(&defs).is_ok());
        let names = NameSettings { separator: "__".into(), max_length: 64 };
        let n = defs.len();
        let catalog = build(defs.clone(), &names, vec![None; n]);
        for (i, d) in defs.iter().enumerate() {
            for (scheme, rest) in &originals {
                let original = format!("{scheme}{rest}");
                let exposed = uri::expose(&d.uri_prefix, &original);
                let resolved = catalog.resolve_uri(&exposed);
                if d.uri_prefix.is_empty() && uri::split(&exposed).is_some_and(|(p, _)| defs.iter().any(|o| o.uri_prefix == p)) {
                    // Shadowed by a prefixed upstream: the catalog withholds such a URI.
                    continue;
                }
                prop_assert_eq!(resolved, Some((i, original.as_str().into())), "{:?}", exposed);
            }
        }
    }
}
