//! The methods Manifold answers itself, one file each (the handshake, ping, lists, logging,
//! subscriptions, completion, tasks, and the stateless era's `server/discover` and
//! `subscriptions/listen`). Completion and tasks are answered by an upstream, but
//! what they are routed by is particular to each.

mod completion;
mod discover;
mod find;
mod initialize;
mod listen;
mod lists;
mod logging;
mod ping;
mod subscribe;
mod tasks;

pub(in crate::router) use initialize::for_caller;
pub(super) use ping::ping;
