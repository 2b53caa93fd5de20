//! OpenAPI descriptions as MCP tools.
//!
//! A description (OpenAPI 3.0 or 3.1, or Swagger 2.0 brought to the 3.x model; JSON or YAML)
//! is loaded with [`load`], its external `$ref`s fetched once through the caller's [`Fetch`].
//! [`convert`] turns each operation into an [`Operation`]: the tool definition as JSON text and
//! what a call needs. [`Operation::request`] checks a call's arguments and builds the HTTP
//! request; [`Operation::map_response`] turns the answer into a `CallToolResult`. The crate does
//! no I/O of its own, so the upstream that serves these tools owns timeouts, redirects and
//! credentials.

mod check;
mod convert;
mod error;
mod filter;
mod load;
mod naming;
mod operation;
mod request;
mod response;
mod schema;
mod security;
mod swagger;
mod yaml;

#[cfg(test)]
mod testutil;

pub use convert::{convert, Body, Conversion, Operation, Param, Skipped};
pub use error::{ArgError, ConvertError, LoadError};
pub use filter::{Filter, Options};
pub use load::{load, Document, Fetch, Version};
pub use request::HttpRequest;
pub use response::DEFAULT_RESPONSE_CAP;
pub use security::{ApiKeyLocation, OAuthFlow, SecurityNeed};

/// Where a parameter goes in the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Location {
    Path,
    Query,
    Header,
    Cookie,
}

impl Location {
    /// The name OpenAPI gives the location (`in`).
    pub fn as_str(self) -> &'static str {
        match self {
            Location::Path => "path",
            Location::Query => "query",
            Location::Header => "header",
            Location::Cookie => "cookie",
        }
    }

    pub(crate) fn parse(text: &str) -> Option<Location> {
        match text {
            "path" => Some(Location::Path),
            "query" => Some(Location::Query),
            "header" => Some(Location::Header),
            "cookie" => Some(Location::Cookie),
            _ => None,
        }
    }
}
