//! `check`'s skills: per upstream, every skill a host is offered under its exposed URI, with
//! the upstream's own URI, and every skill that is held by its pin, marked so.

use std::fmt::Write as _;

use manifold_catalog::{Catalog, Kind, Mark};

/// The skills section of `check`'s report.
pub(super) fn render(catalog: &Catalog) -> String {
    let listed = catalog.listing(Kind::Skills).items();
    let held: Vec<_> = catalog
        .drift()
        .iter()
        .filter(|d| d.kind == Kind::Skills && d.held)
        .collect();
    let mut out = String::new();
    let _ = writeln!(out, "skills ({}):", listed.len());
    for (i, def) in catalog.defs().iter().enumerate() {
        let declares = catalog.slice(i).is_some_and(|s| s.declares_skills());
        if !declares {
            continue;
        }
        let directories = match catalog
            .slice(i)
            .is_some_and(|s| s.reads_skill_directories())
        {
            true => ", directoryRead",
            false => "",
        };
        let _ = writeln!(out, "  {}{directories}:", def.key);
        for item in listed.iter().filter(|item| item.upstream == i) {
            let _ = writeln!(out, "    {} -> {}", item.exposed, item.original);
        }
        for d in held.iter().filter(|d| d.upstream == i) {
            let _ = writeln!(
                out,
                "    {} -> {}  [{}: {}]",
                d.exposed,
                d.original,
                Mark::Held.label(),
                d.reason()
            );
        }
    }
    out
}
