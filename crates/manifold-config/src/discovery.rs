//! `[discovery]` and `[teams.NAME.discovery]`: how much of the catalog one session's
//! `tools/list` holds. In `search` mode a session lists its pinned tools, the tools it found
//! with `find_tools` (within a budget), and `find_tools` itself; every tool of its team's view
//! can still be called. A team's table overrides the top-level one key by key.

use serde::Deserialize;

use crate::error::child;
use crate::validate::Ctx;
use crate::ConfigError;

/// How a session's `tools/list` is made.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DiscoveryMode {
    /// Every tool of the session's view is listed.
    #[default]
    Off,
    /// The pinned tools, the tools found with `find_tools`, and `find_tools`.
    Search,
}

impl DiscoveryMode {
    /// The value as written in the config.
    pub fn name(self) -> &'static str {
        match self {
            DiscoveryMode::Off => "off",
            DiscoveryMode::Search => "search",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "off" => Some(Self::Off),
            "search" => Some(Self::Search),
            _ => None,
        }
    }
}

/// The discovery settings of a team (or of callers without one).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DiscoverySettings {
    pub mode: DiscoveryMode,
    /// Globs over exposed tool names that are always listed (never evicted).
    pub pinned: Vec<String>,
    /// The most tools a session's `tools/list` holds (pinned and found; `find_tools` aside).
    pub max_tools: usize,
    /// The most bytes of tool definitions it holds, if bounded.
    pub max_schema_bytes: Option<usize>,
}

/// The default budget: a few dozen tools, past which hosts' tool selection degrades.
pub const DEFAULT_MAX_TOOLS: usize = 40;
/// The largest budget a setting may ask for.
const MOST_TOOLS: usize = 10_000;
/// The smallest schema budget: one ordinary tool's definition.
const LEAST_SCHEMA_BYTES: u64 = 1024;

impl Default for DiscoverySettings {
    fn default() -> Self {
        Self {
            mode: DiscoveryMode::Off,
            pinned: Vec::new(),
            max_tools: DEFAULT_MAX_TOOLS,
            max_schema_bytes: None,
        }
    }
}

impl DiscoverySettings {
    /// Whether the glob list pins the exposed tool `name`.
    pub fn pins(&self, name: &str) -> bool {
        self.pinned.iter().any(|p| crate::glob_match(p, name))
    }
}

#[derive(Debug, Default, Deserialize, Clone)]
#[serde(deny_unknown_fields, expecting = "a table")]
pub(crate) struct RawDiscovery {
    mode: Option<String>,
    pinned: Option<Vec<String>>,
    max_tools: Option<u64>,
    max_schema_bytes: Option<u64>,
}

/// `raw` (at `path`) over `base`: each key it sets replaces `base`'s.
pub(crate) fn settings(
    ctx: &Ctx<'_>,
    path: &str,
    raw: Option<&RawDiscovery>,
    base: &DiscoverySettings,
) -> Result<DiscoverySettings, ConfigError> {
    let Some(raw) = raw else {
        return Ok(base.clone());
    };
    let mode = match raw.mode.as_deref() {
        None => base.mode,
        Some(text) => DiscoveryMode::parse(text).ok_or_else(|| {
            ctx.err(
                child(path, "mode"),
                format!("{text:?} is not \"off\" or \"search\""),
            )
        })?,
    };
    let pinned = raw.pinned.clone().unwrap_or_else(|| base.pinned.clone());
    if let Some(i) = pinned.iter().position(|p| p.trim().is_empty()) {
        return Err(ctx.err(
            format!("{}[{i}]", child(path, "pinned")),
            "an empty glob pins nothing",
        ));
    }
    let max_tools = match raw.max_tools {
        None => base.max_tools,
        Some(n) if (1..=MOST_TOOLS as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ctx.err(
                child(path, "max_tools"),
                format!("{n} is not between 1 and {MOST_TOOLS}"),
            ))
        }
    };
    let max_schema_bytes = match raw.max_schema_bytes {
        None => base.max_schema_bytes,
        Some(n) if n >= LEAST_SCHEMA_BYTES => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        Some(n) => {
            return Err(ctx.err(
                child(path, "max_schema_bytes"),
                format!("{n} is less than {LEAST_SCHEMA_BYTES} (one tool's definition)"),
            ))
        }
    };
    Ok(DiscoverySettings {
        mode,
        pinned,
        max_tools,
        max_schema_bytes,
    })
}

#[cfg(test)]
mod tests {
    use super::{DiscoveryMode, DEFAULT_MAX_TOOLS};
    use crate::tests::{toml, toml_err};

    #[test]
    fn off_by_default_and_a_team_overrides_key_by_key() {
        let config = toml("[teams.red]\n[teams.blue.discovery]\nmax_tools = 5\n").unwrap();
        assert_eq!(config.discovery.mode, DiscoveryMode::Off);
        let config = toml(
            "[discovery]\nmode = \"search\"\npinned = [\"fs__*\"]\nmax_tools = 20\n\n\
             [teams.red]\n\n[teams.blue.discovery]\nmax_tools = 5\nmax_schema_bytes = 4096\n\n\
             [teams.green.discovery]\nmode = \"off\"\n",
        )
        .unwrap();
        let team = |n: &str| config.teams.iter().find(|t| t.name == n).unwrap();
        assert_eq!(team("red").discovery, config.discovery, "inherited whole");
        let blue = &team("blue").discovery;
        assert_eq!((blue.mode, blue.max_tools), (DiscoveryMode::Search, 5));
        assert_eq!(blue.pinned, ["fs__*"]);
        assert_eq!(blue.max_schema_bytes, Some(4096));
        assert_eq!(team("green").discovery.mode, DiscoveryMode::Off);
        assert!(blue.pins("fs__read") && !blue.pins("gh__read"));
        assert_eq!(
            toml("[discovery]\nmode = \"search\"\n")
                .unwrap()
                .discovery
                .max_tools,
            DEFAULT_MAX_TOOLS
        );
    }

    #[test]
    fn bad_settings_name_their_key() {
        let (key, problem) = toml_err("[discovery]\nmode = \"auto\"\n");
        assert_eq!(key, "discovery.mode");
        assert!(problem.contains("\"off\" or \"search\""), "{problem}");
        let (key, _) = toml_err("[teams.red.discovery]\nmax_tools = 0\n");
        assert_eq!(key, "teams.red.discovery.max_tools");
        let (key, _) = toml_err("[discovery]\nmax_schema_bytes = 10\n");
        assert_eq!(key, "discovery.max_schema_bytes");
        let (key, _) = toml_err("[discovery]\npinned = [\"\"]\n");
        assert_eq!(key, "discovery.pinned[0]");
        let (key, _) = toml_err("[discovery]\nbudget = 3\n");
        assert!(key.starts_with("discovery"), "{key}");
    }
}
