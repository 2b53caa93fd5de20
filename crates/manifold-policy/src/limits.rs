//! What the limit backends count: each configured limit under a stable id, and why a call
//! was refused.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use manifold_config::{LimitConfig, LimitsConfig, QuotaConfig, RateConfig, TeamConfig};

use crate::memory::Counter;

/// One configured limit, as the backends count it.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitDef {
    /// Stable across restarts and replicas, e.g. `team:alpha:tool:fs__read`; part of the keys
    /// the Redis backend writes.
    pub id: Arc<str>,
    pub rate: Option<RateConfig>,
    pub quotas: Vec<QuotaConfig>,
}

impl LimitDef {
    pub fn new(id: impl Into<Arc<str>>, config: &LimitConfig) -> Self {
        Self {
            id: id.into(),
            rate: config.rate,
            quotas: config.quotas.clone(),
        }
    }
}

/// Which kind of limit refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusalKind {
    /// A rate (GCRA): capacity comes back continuously.
    RateLimited,
    /// A quota over a fixed window: capacity comes back when the window ends.
    QuotaExceeded,
}

impl RefusalKind {
    /// As the `kind` of the error's data, and the outcome label.
    pub fn label(self) -> &'static str {
        match self {
            RefusalKind::RateLimited => "rate_limited",
            RefusalKind::QuotaExceeded => "quota_exceeded",
        }
    }
}

/// Why a call was refused, and when it may succeed.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub kind: RefusalKind,
    /// The id of the limit that refused it.
    pub limit: Arc<str>,
    pub retry_after: Duration,
}

/// How much of one quota's current window is used (the console's view of a limit).
#[derive(Debug, Clone, PartialEq)]
pub struct WindowUse {
    /// The id of the limit the quota belongs to.
    pub limit: Arc<str>,
    /// Calls counted in the current window.
    pub used: u64,
    /// Calls the quota admits per window.
    pub count: u64,
    pub window: Duration,
    /// When the current window ends.
    pub resets_in: Duration,
}

/// Every configured limit, and which of them a tool call is counted against.
pub struct Limits {
    /// Per tool, for every caller together.
    tools: HashMap<Box<str>, Arc<Counter>>,
    teams: HashMap<Box<str>, TeamCounters>,
}

#[derive(Default)]
struct TeamCounters {
    all: Option<Arc<Counter>>,
    tools: HashMap<Box<str>, Arc<Counter>>,
    upstreams: HashMap<Box<str>, Arc<Counter>>,
}

impl Limits {
    /// `None` when no limit is configured anywhere: no step is added to the path at all.
    pub fn new(config: &LimitsConfig, teams: &[TeamConfig]) -> Option<Self> {
        let counter =
            |id: String, c: &LimitConfig| Arc::new(Counter::new(Arc::new(LimitDef::new(id, c))));
        let tools: HashMap<Box<str>, Arc<Counter>> = config
            .tools
            .iter()
            .map(|(tool, c)| (tool.as_str().into(), counter(format!("tool:{tool}"), c)))
            .collect();
        let teams: HashMap<Box<str>, TeamCounters> = teams
            .iter()
            .map(|t| {
                let name = &t.name;
                let counters = TeamCounters {
                    all: t
                        .limits
                        .as_ref()
                        .map(|c| counter(format!("team:{name}"), c)),
                    tools: t
                        .tool_limits
                        .iter()
                        .map(|(tool, c)| {
                            (
                                tool.as_str().into(),
                                counter(format!("team:{name}:tool:{tool}"), c),
                            )
                        })
                        .collect(),
                    upstreams: t
                        .upstream_limits
                        .iter()
                        .map(|(up, c)| {
                            (
                                up.as_str().into(),
                                counter(format!("team:{name}:upstream:{up}"), c),
                            )
                        })
                        .collect(),
                };
                (name.as_str().into(), counters)
            })
            .filter(|(_, c)| c.all.is_some() || !c.tools.is_empty() || !c.upstreams.is_empty())
            .collect();
        (!tools.is_empty() || !teams.is_empty()).then_some(Self { tools, teams })
    }

    /// Takes over `previous`'s counters of the limits that did not change (same id, same
    /// rates and quotas), with what they counted: a reload of the configuration does not give
    /// a team its quota again. Changed and new limits start from zero.
    pub fn carry_over(&mut self, previous: &Limits) {
        let old: HashMap<&str, &Arc<Counter>> =
            previous.counters().map(|c| (&*c.def.id, c)).collect();
        let take = |c: &mut Arc<Counter>| {
            if let Some(old) = old.get(&*c.def.id).filter(|o| o.def == c.def) {
                *c = Arc::clone(old);
            }
        };
        self.tools.values_mut().for_each(take);
        for t in self.teams.values_mut() {
            t.all.iter_mut().for_each(take);
            t.tools.values_mut().for_each(take);
            t.upstreams.values_mut().for_each(take);
        }
    }

    /// The limits of `team` (on all its calls, on an upstream, on a tool), by id.
    pub fn of_team(&self, team: &str) -> Vec<&Counter> {
        let mut found: Vec<&Counter> = match self.teams.get(team) {
            Some(t) => t
                .all
                .iter()
                .chain(t.upstreams.values())
                .chain(t.tools.values())
                .map(|c| &**c)
                .collect(),
            None => Vec::new(),
        };
        found.sort_by(|a, b| a.def.id.cmp(&b.def.id));
        found
    }

    /// The per-tool limits that count every caller together, by id.
    pub fn of_tools(&self) -> Vec<&Counter> {
        let mut found: Vec<&Counter> = self.tools.values().map(|c| &**c).collect();
        found.sort_by(|a, b| a.def.id.cmp(&b.def.id));
        found
    }

    /// Every counter.
    fn counters(&self) -> impl Iterator<Item = &Arc<Counter>> {
        let teams = self.teams.values().flat_map(|t| {
            t.all
                .iter()
                .chain(t.tools.values())
                .chain(t.upstreams.values())
        });
        self.tools.values().chain(teams)
    }

    /// The limits a call of `tool` (its exposed name) on `upstream` by `team` counts against,
    /// in a fixed order: the tool's, the team's, the team's on the upstream, the team's on the
    /// tool.
    pub fn applicable(&self, team: Option<&str>, upstream: &str, tool: &str) -> Vec<&Counter> {
        let mut found: Vec<&Counter> = Vec::new();
        if let Some(c) = self.tools.get(tool) {
            found.push(c);
        }
        if let Some(t) = team.and_then(|t| self.teams.get(t)) {
            found.extend(t.all.as_deref());
            found.extend(t.upstreams.get(upstream).map(|c| &**c));
            found.extend(t.tools.get(tool).map(|c| &**c));
        }
        found
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use manifold_config::{LimitConfig, LimitsConfig, QuotaConfig, TeamConfig};

    use super::Limits;
    use crate::memory::check;

    fn quota(count: u64) -> LimitConfig {
        LimitConfig {
            rate: None,
            quotas: vec![QuotaConfig {
                count,
                window: Duration::from_secs(3600),
            }],
        }
    }

    fn limits(tools: &[(&str, u64)]) -> Limits {
        let config = LimitsConfig {
            tools: tools
                .iter()
                .map(|(t, n)| ((*t).to_owned(), quota(*n)))
                .collect::<BTreeMap<_, _>>(),
            ..LimitsConfig::default()
        };
        Limits::new(&config, &[]).unwrap()
    }

    fn calls_admitted(limits: &Limits, tool: &str, tries: usize) -> usize {
        (0..tries)
            .filter(|_| check(&limits.applicable(None, "up", tool)).is_none())
            .count()
    }

    #[test]
    fn a_teams_limits_are_listed_apart_from_every_callers() {
        let team = TeamConfig {
            name: "eng".into(),
            limits: Some(quota(5)),
            tool_limits: [("a".to_owned(), quota(2))].into_iter().collect(),
            ..TeamConfig::default()
        };
        let config = LimitsConfig {
            tools: [("b".to_owned(), quota(9))].into_iter().collect(),
            ..LimitsConfig::default()
        };
        let limits = Limits::new(&config, &[team]).unwrap();
        let ids =
            |cs: Vec<&crate::Counter>| cs.iter().map(|c| c.def.id.to_string()).collect::<Vec<_>>();
        assert_eq!(ids(limits.of_team("eng")), ["team:eng", "team:eng:tool:a"]);
        assert_eq!(ids(limits.of_team("ops")), Vec::<String>::new());
        assert_eq!(ids(limits.of_tools()), ["tool:b"]);
    }

    #[test]
    fn a_reload_keeps_what_unchanged_limits_counted_and_restarts_changed_ones() {
        let old = limits(&[("a", 3), ("b", 3)]);
        assert_eq!(calls_admitted(&old, "a", 2), 2);
        assert_eq!(calls_admitted(&old, "b", 2), 2);
        let mut new = limits(&[("a", 3), ("b", 5)]);
        new.carry_over(&old);
        assert_eq!(
            calls_admitted(&new, "a", 5),
            1,
            "a's quota was not given again"
        );
        assert_eq!(
            calls_admitted(&new, "b", 9),
            5,
            "b's quota changed: counted anew"
        );
    }
}
