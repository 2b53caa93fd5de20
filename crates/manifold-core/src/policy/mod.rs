//! Teams as the router sees them: who a request runs as ([`Caller`]), what its team may see
//! (a [`View`] of the catalog, with list pages serialized once per view), and the limits its
//! tool calls are counted against ([`LimitLayer`]).

mod caller;
mod limits;
mod team;

pub use caller::Caller;
pub use limits::LimitLayer;
pub use team::{Team, Teams, View};
