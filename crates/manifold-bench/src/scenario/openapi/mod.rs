//! OpenAPI upstreams: what GitHub's REST description costs to load, convert and serve
//! (`description`), and what a converted call adds over a direct HTTP request to the same
//! service (`call`). Not part of `all`: it needs the description tests/interop/install.sh
//! installs.

mod call;
mod description;

use anyhow::{Context, Result};
use serde_json::{json, Value};

use crate::setup::{Plan, Setup};

pub fn openapi(setup: &Setup, plan: &Plan) -> Result<Value> {
    let github = description::measure(setup, plan).context("GitHub's description")?;
    let call = call::measure(setup, plan).context("a converted call")?;
    Ok(json!({ "github": github, "call": call }))
}
