//! The merged catalog: every upstream's tools, prompts, resources, resource templates and skills under
//! namespaced names and URIs, with the reverse mapping for routing and pre-serialized pages for
//! serving lists. A catalog is immutable: each change to any upstream's slice builds a new one,
//! which readers pick up by swapping an `Arc`. This crate does no I/O.
//!
//! Names follow one rule: `{prefix}{separator}{name}`, sanitized to
//! `[A-Za-z0-9_-]` and shortened with a stable hash past the length limit, so a name depends
//! only on its own upstream's configuration, never on which other upstreams exist or started
//! first. URIs become `{scheme-safe prefix}+{original URI}`, which is reversible.
#![forbid(unsafe_code)]

mod build;
mod listing;
pub mod marks;
pub mod naming;
pub mod pins;
pub mod rewrite;
pub mod search;
pub mod skills;
pub mod uri;

#[cfg(test)]
mod proptests;

pub use build::{
    CacheHint, Catalog, Collision, Resolved, UpstreamDef, UpstreamSlice, UpstreamState,
};
pub use listing::{Cursor, Item, Kind, Listing, NameOrigin, PageError, KINDS};
pub use marks::{Entry, Mark, Marks};
pub use pins::{Drift, Lock, Pin, Pinning, UpstreamPins};
pub use search::{Admission, Hit, SearchIndex};
