//! The JSON-RPC 2.0 layer of MCP as Manifold needs it, and nothing more: decoding the envelope
//! of a message (`jsonrpc`, `id`, `method`, and the few `params` fields routing needs) while
//! every payload stays raw JSON, writing messages back with only the parts Manifold must
//! rewrite changed, error codes, protocol versions, and newline framing. This crate does no
//! I/O: callers read and write bytes, this crate tells them what the bytes mean.
#![forbid(unsafe_code)]

mod canonical;
pub mod envelope;
pub mod error;
pub mod framing;
pub mod needle;
pub mod object;
pub mod scan;
pub mod sse;
pub mod version;
pub mod write;

pub use canonical::canonical;
pub use envelope::{Envelope, Kind, MessageError, Params, ParamsError, Place};
pub use error::{codes, ErrorObject};
pub use framing::{Frame, LineBuffer};
pub use object::RawObject;
pub use serde_json::value::RawValue;

/// The log levels of `logging/setLevel`, least severe first (RFC 5424, as MCP names them).
pub const LOG_LEVELS: [&str; 8] = [
    "debug",
    "info",
    "notice",
    "warning",
    "error",
    "critical",
    "alert",
    "emergency",
];
