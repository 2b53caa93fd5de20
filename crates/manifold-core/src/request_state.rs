//! The `requestState` Manifold hands a stateless host with an `input_required` result, and
//! reads back from the host's retry. To the host it is opaque; to Manifold it says who it was
//! minted for (the caller, the method, the tool or prompt name or URI), until when, and what
//! it stands for: a request of a session-era upstream waiting on this replica for the host's
//! answers, or a stateless upstream's own `requestState`.
//!
//! It is authenticated with HMAC-SHA256 under `server.request_state_key` (replicas that serve
//! the same hosts share the key), so a host can neither forge one nor alter one, and is bound
//! to the caller and the request, so one caller's state is refused to another. A state that
//! stands for a waiting request is good for one retry (each round has its number).

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use manifold_config::StateKey;
use ring::hmac;
use serde::{Deserialize, Serialize};

/// What a `requestState` says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct State {
    /// The caller's id (`Caller::id`).
    #[serde(rename = "c")]
    pub caller: String,
    /// The method of the request it belongs to.
    #[serde(rename = "m")]
    pub method: String,
    /// The tool or prompt name, or the URI, as the host named it.
    #[serde(rename = "n")]
    pub name: String,
    /// A request of a session-era upstream waiting for the host's answers: the replica that
    /// holds it, its number there, and the round this state is good for.
    #[serde(rename = "p", default, skip_serializing_if = "Option::is_none")]
    pub park: Option<(u64, u64, u32)>,
    /// A stateless upstream's own `requestState`, handed back to it with the retry.
    #[serde(rename = "u", default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// Milliseconds since the Unix epoch after which it is refused.
    #[serde(rename = "e")]
    pub expires: u64,
}

/// Seals and opens states with one key.
pub struct Sealer {
    key: hmac::Key,
}

/// What every sealed state starts with (a format version).
const PREFIX: &str = "m1.";

impl Sealer {
    /// With the configured key, or else a random one of this process's own (states then do
    /// not survive a restart, and only this process can read them).
    pub fn new(configured: Option<&StateKey>) -> Self {
        let key = match configured {
            Some(k) => hmac::Key::new(hmac::HMAC_SHA256, &k.0),
            None => {
                let rng = ring::rand::SystemRandom::new();
                match hmac::Key::generate(hmac::HMAC_SHA256, &rng) {
                    Ok(key) => key,
                    Err(_) => {
                        // No random source: a key from the clock and the process id is
                        // still unknown to hosts, if weaker; say so.
                        tracing::error!("no random source for the requestState key");
                        let seed =
                            format!("{:?}{}", std::time::SystemTime::now(), std::process::id());
                        hmac::Key::new(hmac::HMAC_SHA256, seed.as_bytes())
                    }
                }
            }
        };
        Self { key }
    }

    /// The state as a host gets it.
    pub fn seal(&self, state: &State) -> String {
        let body = serde_json::to_vec(state).unwrap_or_default();
        let body = URL_SAFE_NO_PAD.encode(body);
        let tag = hmac::sign(&self.key, body.as_bytes());
        format!("{PREFIX}{body}.{}", URL_SAFE_NO_PAD.encode(tag.as_ref()))
    }

    /// The state a host sent back, if Manifold sealed it and it has not expired at `now_ms`.
    pub fn open(&self, sealed: &str, now_ms: u64) -> Result<State, &'static str> {
        let rest = sealed
            .strip_prefix(PREFIX)
            .ok_or("it is not one Manifold made")?;
        let (body, tag) = rest.split_once('.').ok_or("it is not one Manifold made")?;
        let tag = URL_SAFE_NO_PAD
            .decode(tag)
            .map_err(|_| "it is not one Manifold made")?;
        hmac::verify(&self.key, body.as_bytes(), &tag)
            .map_err(|_| "it was altered, or made with another key")?;
        let body = URL_SAFE_NO_PAD
            .decode(body)
            .map_err(|_| "it is not one Manifold made")?;
        let state: State =
            serde_json::from_slice(&body).map_err(|_| "it is not one Manifold made")?;
        if state.expires < now_ms {
            return Err("it expired");
        }
        Ok(state)
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> State {
        State {
            caller: "team:a".into(),
            method: "tools/call".into(),
            name: "x__confirm".into(),
            park: Some((7, 42, 1)),
            upstream: None,
            expires: 2_000,
        }
    }

    #[test]
    fn a_sealed_state_opens_to_what_was_sealed_and_only_with_its_key() {
        let key = StateKey(vec![7u8; 32].into());
        let sealer = Sealer::new(Some(&key));
        let sealed = sealer.seal(&state());
        assert_eq!(sealer.open(&sealed, 1_000), Ok(state()));
        assert_eq!(sealer.open(&sealed, 3_000), Err("it expired"));
        let other = Sealer::new(Some(&StateKey(vec![8u8; 32].into())));
        assert!(other.open(&sealed, 1_000).is_err());
        assert!(Sealer::new(None).open(&sealed, 1_000).is_err());
        // The same key in another replica opens it.
        assert_eq!(Sealer::new(Some(&key)).open(&sealed, 1_000), Ok(state()));
    }

    #[test]
    fn an_altered_or_forged_state_is_refused() {
        let sealer = Sealer::new(Some(&StateKey(vec![1u8; 32].into())));
        let sealed = sealer.seal(&state());
        // Another caller's name in the body, the tag kept.
        let (body, tag) = sealed
            .strip_prefix(PREFIX)
            .unwrap()
            .split_once('.')
            .unwrap();
        let mut forged = state();
        forged.caller = "team:b".into();
        let forged_body = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&forged).unwrap());
        assert_ne!(forged_body, body);
        for bad in [
            format!("{PREFIX}{forged_body}.{tag}"),
            format!("{PREFIX}{body}.{}", URL_SAFE_NO_PAD.encode([0u8; 32])),
            format!("{PREFIX}{body}"),
            "not-a-state".to_owned(),
            String::new(),
        ] {
            assert!(sealer.open(&bad, 1_000).is_err(), "{bad}");
        }
    }
}
