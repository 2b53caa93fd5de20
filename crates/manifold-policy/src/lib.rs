//! Who a host is and how much it may do: authentication of HTTP hosts (API keys, JWTs) and
//! the rate limits and quotas of tool calls, counted in this process or in a store shared by
//! replicas ([`SharedCounts`]).
#![forbid(unsafe_code)]

pub mod auth;
pub mod limits;
pub mod memory;
pub mod shared;

pub use auth::{AuthError, Authenticator, Principal};
pub use limits::{LimitDef, Limits, Refusal, RefusalKind, WindowUse};
pub use memory::Counter;
pub use shared::{SharedCounts, StoreError};
