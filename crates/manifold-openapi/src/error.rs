//! The errors of loading, converting and calling.

/// A description that cannot be loaded.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum LoadError {
    #[error("{url}: not a JSON or YAML document: {detail}")]
    Parse { url: String, detail: String },
    #[error("{url}: neither `openapi` 3.0/3.1 nor `swagger` 2.0 (found {found})")]
    UnknownVersion { url: String, found: String },
    #[error("{url}: cannot fetch `$ref` target {target}: {detail}")]
    Fetch {
        url: String,
        target: String,
        detail: String,
    },
    #[error("{url}: `$ref` {reference} is not a valid reference: {detail}")]
    BadRef {
        url: String,
        reference: String,
        detail: String,
    },
    #[error("{url}: `$ref` {reference} points to nothing")]
    MissingRef { url: String, reference: String },
    #[error("`$ref` cycle with nothing but references: {chain}")]
    RefCycle { chain: String },
    #[error("{url}: {detail}")]
    Invalid { url: String, detail: String },
}

/// A description that loads but cannot become a catalog.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ConvertError {
    #[error("operations {first} and {second} both become the tool `{name}`")]
    DuplicateName {
        name: String,
        first: String,
        second: String,
    },
    #[error("rename of `{from}`: `{to}` is not a valid tool name ([A-Za-z0-9_-], at most 64)")]
    BadRename { from: String, to: String },
}

/// Arguments of a call that the operation's schema forbids; the service never sees them.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum ArgError {
    #[error("the arguments must be an object")]
    NotAnObject,
    #[error("missing required argument `{0}`")]
    Missing(String),
    #[error("argument `{0}` is not a parameter of this tool")]
    Unknown(String),
    #[error("argument `{name}` must be {expected}")]
    Type { name: String, expected: String },
    #[error("argument `{name}` must be one of {allowed}")]
    Enum { name: String, allowed: String },
    #[error("argument `{name}` cannot be sent: {detail}")]
    Unsendable { name: String, detail: String },
}

impl ArgError {
    /// The argument (dotted path into it) the error is about, if any.
    pub fn parameter(&self) -> Option<&str> {
        match self {
            ArgError::NotAnObject => None,
            ArgError::Missing(name) | ArgError::Unknown(name) => Some(name),
            ArgError::Type { name, .. }
            | ArgError::Enum { name, .. }
            | ArgError::Unsendable { name, .. } => Some(name),
        }
    }
}
