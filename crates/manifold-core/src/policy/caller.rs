//! Who a request runs as: its team, if any, and an id finer than the team, which owns
//! sessions.

use std::sync::Arc;

use manifold_config::ANONYMOUS;

use super::team::Team;

/// Who a request runs as.
pub struct Caller {
    /// `None`: no team (anonymous), which sees everything and is counted only against the
    /// global per-tool limits.
    pub team: Option<Arc<Team>>,
    /// Who exactly (an API key's label, a JWT's issuer and subject): a session answers only
    /// to the caller that created it.
    pub id: Arc<str>,
    /// The JWT the caller authenticated with, for an upstream whose `auth` exchanges it for a
    /// token of its own (never sent upstream as it is, never logged).
    pub token: Option<Arc<str>>,
}

impl Caller {
    /// The caller of every request no team was given for (one, shared).
    pub fn anonymous() -> Arc<Self> {
        static ANON: std::sync::OnceLock<Arc<Caller>> = std::sync::OnceLock::new();
        Arc::clone(ANON.get_or_init(|| {
            Arc::new(Self {
                team: None,
                id: Arc::clone(anonymous_label()),
                token: None,
            })
        }))
    }

    pub fn of_team(team: Arc<Team>, id: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            team: Some(team),
            id,
            token: None,
        })
    }

    /// A caller of `team` who authenticated with the JWT `token`.
    pub fn with_token(team: Arc<Team>, id: Arc<str>, token: Arc<str>) -> Arc<Self> {
        Arc::new(Self {
            team: Some(team),
            id,
            token: Some(token),
        })
    }

    /// The team's name, or "anonymous": the `team` of metrics, spans and logs.
    pub fn label(&self) -> &Arc<str> {
        match &self.team {
            Some(team) => &team.name,
            None => anonymous_label(),
        }
    }

    /// Whether `other` is the same caller: the same credentials' owner running as the same
    /// team (a token of the same subject for another team is someone else's session).
    pub fn same_as(&self, other: &Caller) -> bool {
        self.id == other.id && self.label() == other.label()
    }

    /// The team, if its view hides anything.
    pub fn restricted(&self) -> Option<&Arc<Team>> {
        self.team.as_ref().filter(|t| t.config().restricts())
    }
}

/// "anonymous", shared rather than allocated per request.
fn anonymous_label() -> &'static Arc<str> {
    static LABEL: std::sync::OnceLock<Arc<str>> = std::sync::OnceLock::new();
    LABEL.get_or_init(|| ANONYMOUS.into())
}
