//! Who a host is and how much it may do: authentication of HTTP hosts (API keys, JWTs) and
//! the rate limits and quotas of tool calls, counted in this process or in Redis.
#![forbid(unsafe_code)]

pub mod limits;
pub mod memory;
pub mod redis_backend;

pub use limits::{LimitDef, Refusal, RefusalKind};
