//! What an exposed name's entry is marked with, where `manifold check` and the console show
//! the catalog: how its name was made (renamed, sanitized, shortened), and what keeps it from
//! hosts (a name collision, a hold by its pin). One place computes them, so both say the same.

use crate::build::{Catalog, Collision};
use crate::listing::{Item, Kind, NameOrigin};
use crate::pins::Drift;

/// One mark of an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mark {
    /// Its name comes from a rename in the configuration.
    Renamed,
    /// Characters outside `[A-Za-z0-9_-]` were replaced.
    Sanitized,
    /// Shortened with a stable hash past the length limit.
    Shortened,
    /// Another upstream wants the same exposed name: neither is served.
    Collision,
    /// Held back from every listing: it does not match its pin.
    Held,
}

impl Mark {
    /// The word `check` prints in brackets and the console shows.
    pub fn label(self) -> &'static str {
        match self {
            Mark::Renamed => "renamed",
            Mark::Sanitized => "sanitized",
            Mark::Shortened => "shortened",
            Mark::Collision => "collision",
            Mark::Held => "held",
        }
    }

    /// How a name was made, when it is not the plain prefixed one.
    pub fn of_origin(origin: NameOrigin) -> Option<Mark> {
        match origin {
            NameOrigin::Prefixed => None,
            NameOrigin::Sanitized => Some(Mark::Sanitized),
            NameOrigin::Shortened => Some(Mark::Shortened),
            NameOrigin::Renamed => Some(Mark::Renamed),
        }
    }
}

/// One entry of a kind as an operator reviews it: listed, held by its pin, or lost to a
/// collision.
#[derive(Debug, Clone, Copy)]
pub struct Entry<'c> {
    pub kind: Kind,
    /// The name or URI a host sees (or would see).
    pub exposed: &'c str,
    /// The upstream's index; `None` for a collision (its claimants are in `collision`).
    pub upstream: Option<usize>,
    /// The upstream's own name or URI (empty for a collision).
    pub original: &'c str,
    /// What is listed, when it is.
    pub item: Option<&'c Item>,
    /// Its drift from its pin, when it has one (held or served).
    pub drift: Option<&'c Drift>,
    /// The collision it is, for an entry no upstream gets.
    pub collision: Option<&'c Collision>,
    pub marks: Marks,
}

/// The marks of one entry, in the order they are printed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Marks {
    pub origin: Option<Mark>,
    pub collision: bool,
    pub held: bool,
}

impl Marks {
    /// Each mark, in print order.
    pub fn iter(&self) -> impl Iterator<Item = Mark> {
        let collision = self.collision.then_some(Mark::Collision);
        let held = self.held.then_some(Mark::Held);
        self.origin.into_iter().chain(collision).chain(held)
    }
}

/// Every entry of `kind`: each listed item with the marks of its name (and its drift when it
/// is served despite one), then each item its pin holds, then each collision.
pub fn entries(catalog: &Catalog, kind: Kind) -> Vec<Entry<'_>> {
    let drift = catalog.drift();
    let drift_of = |upstream: usize, original: &str| {
        drift
            .iter()
            .find(|d| d.kind == kind && d.upstream == upstream && d.original == original)
    };
    let listed = catalog.listing(kind).items().iter().map(|item| Entry {
        kind,
        exposed: &item.exposed,
        upstream: Some(item.upstream),
        original: &item.original,
        item: Some(item),
        drift: drift_of(item.upstream, &item.original),
        collision: None,
        marks: Marks {
            origin: Mark::of_origin(item.origin),
            ..Marks::default()
        },
    });
    let held = drift
        .iter()
        .filter(|d| d.kind == kind && d.held)
        .map(|d| Entry {
            kind,
            exposed: &d.exposed,
            upstream: Some(d.upstream),
            original: &d.original,
            item: None,
            drift: Some(d),
            collision: None,
            marks: Marks {
                held: true,
                ..Marks::default()
            },
        });
    let collisions = catalog
        .collisions()
        .iter()
        .filter(|c| c.kind == kind)
        .map(|c| Entry {
            kind,
            exposed: &c.exposed,
            upstream: None,
            original: "",
            item: None,
            drift: None,
            collision: Some(c),
            marks: Marks {
                collision: true,
                ..Marks::default()
            },
        });
    listed.chain(held).chain(collisions).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_print_in_the_order_check_prints_them() {
        let marks = Marks {
            origin: Some(Mark::Renamed),
            collision: true,
            held: true,
        };
        let labels: Vec<_> = marks.iter().map(Mark::label).collect();
        assert_eq!(labels, ["renamed", "collision", "held"]);
        assert_eq!(Mark::of_origin(NameOrigin::Prefixed), None);
        assert_eq!(
            Mark::of_origin(NameOrigin::Shortened),
            Some(Mark::Shortened)
        );
    }
}
