//! Limits counted in Redis, so that every replica using the same Redis and key prefix shares
//! the counts.
//!
//! A call is checked against all the limits that apply to it in one round trip: one Lua script
//! (`EVALSHA`, or `EVAL` when Redis does not have it cached) reads every counter, and consumes
//! all of them only if every one admits the call. Time is Redis's own (`TIME` inside the
//! script), so replicas whose clocks disagree still agree on windows and rates.
//!
//! Keys written (`{prefix}` is `limits.key_prefix`, `{id}` a [`LimitDef`]'s id):
//! - `{prefix}:rate:{id}`: a rate's theoretical arrival time (GCRA), in microseconds of Redis's
//!   clock; it expires once it is in the past, where it would count as "now" anyway.
//! - `{prefix}:quota:{id}:{window_secs}:{window_index}`: the calls counted in one window of a
//!   quota, `window_index` being Redis's time divided by the window; it expires a minute after
//!   its window ends.
//!
//! Checks go over the URL's shared connection ([`Connection`]); a check never waits on Redis
//! longer than the configured timeout. An outage is logged by the URL's health, with what
//! calls get meanwhile (`limits.fail_open`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use manifold_config::RedisConfig;
use manifold_policy::shared::{Checking, Reading};
use manifold_policy::{LimitDef, Refusal, RefusalKind, SharedCounts, StoreError};
use redis::aio::ConnectionManager;
use redis::{ErrorKind, ServerErrorKind, Value};

use crate::connection::{Connection, Failure};
use crate::health::User;

/// Checks one call against several limits, atomically, on Redis's clock.
///
/// KEYS[i] is a rate's key (`{prefix}:rate:{id}`) or the base of a quota's key
/// (`{prefix}:quota:{id}:{window_secs}`, to which `:{window_index}` is appended here: the window
/// depends on Redis's time, which the caller does not know). Keys are distinct.
/// ARGV has three entries per key:
/// - `ARGV[3i-2]`: `r` for a rate (GCRA), `q` for a quota (fixed window);
/// - a rate: `ARGV[3i-1]` the emission interval T and `ARGV[3i]` the tolerance, burst × T, both
///   in microseconds (T may have a fraction);
/// - a quota: `ARGV[3i-1]` the window in seconds and `ARGV[3i]` the calls allowed per window.
///
/// GCRA: with `tat` the stored theoretical arrival time (or now, if absent or past), the call is
/// admitted iff `tat + T - now <= tolerance`, and then `tat + T` is stored, expiring when it is
/// reached. Otherwise it would be admitted after `tat + T - tolerance - now`. A quota admits
/// the call iff the window's counter is below its count; otherwise capacity returns when the
/// window ends.
///
/// Returns nil when every limit admits the call, after consuming all of them; otherwise
/// `{i, wait_us}` for the refusing key with the longest wait, and nothing is consumed.
/// Numbers are written with `%.0f` / `%.17g` so that microsecond timestamps (16 digits) are
/// kept exactly.
const SCRIPT: &str = r#"
if redis.replicate_commands then redis.replicate_commands() end
local time = redis.call('TIME')
local now = tonumber(time[1]) * 1000000 + tonumber(time[2])
local worst, worst_wait = 0, 0
local writes = {}
for i = 1, #KEYS do
  local kind = ARGV[3 * i - 2]
  local a = tonumber(ARGV[3 * i - 1])
  local b = tonumber(ARGV[3 * i])
  if kind == 'r' then
    local tat = tonumber(redis.call('GET', KEYS[i])) or now
    if tat < now then tat = now end
    local new_tat = tat + a
    local wait = new_tat - now - b
    if wait > 0 then
      if wait > worst_wait then worst, worst_wait = i, wait end
    else
      writes[i] = {KEYS[i], new_tat}
    end
  elseif kind == 'q' then
    local window = a * 1000000
    local index = math.floor(now / window)
    local key = KEYS[i] .. ':' .. string.format('%.0f', index)
    local used = tonumber(redis.call('GET', key)) or 0
    local wait = (index + 1) * window - now
    if used + 1 > b then
      if wait > worst_wait then worst, worst_wait = i, wait end
    else
      writes[i] = {key, wait}
    end
  else
    return redis.error_reply('unknown limit kind ' .. tostring(kind))
  end
end
if worst > 0 then
  return {worst, math.ceil(worst_wait)}
end
for i = 1, #KEYS do
  local w = writes[i]
  if ARGV[3 * i - 2] == 'r' then
    local ttl_ms = math.ceil((w[2] - now) / 1000) + 1
    redis.call('SET', w[1], string.format('%.17g', w[2]), 'PX', string.format('%.0f', ttl_ms))
  else
    local ttl_ms = math.ceil(w[2] / 1000) + 60000
    redis.call('INCR', w[1])
    redis.call('PEXPIRE', w[1], string.format('%.0f', ttl_ms))
  end
end
return nil
"#;

/// Rate limits and quotas counted in Redis. Cheap to clone (clones share the connection).
#[derive(Clone)]
pub struct Limiter {
    conn: Arc<Connection>,
    timeout: Duration,
    prefix: String,
    /// SHA-1 of [`SCRIPT`], for `EVALSHA`.
    sha: String,
    /// What an outage means for calls, as the URL's health logs it.
    _user: Arc<User>,
}

impl Limiter {
    /// Does not connect yet (the connection is opened on first use and reopened after
    /// failures).
    pub fn new(conn: Arc<Connection>, config: &RedisConfig, fail_open: bool) -> Self {
        let down = if fail_open {
            "calls are allowed without counting (limits.fail_open)"
        } else {
            "calls are refused until it is back (limits.fail_open = false)"
        };
        let user = conn.health().user(User {
            name: "the limit store",
            down: down.into(),
            back: "limits are counted".into(),
        });
        Self {
            timeout: config.timeout,
            prefix: config.key_prefix.clone(),
            sha: redis::Script::new(SCRIPT).get_hash().to_owned(),
            conn,
            _user: user,
        }
    }

    /// See [`SharedCounts::check`]: one `EVALSHA` of the script (falling back to `EVAL` on
    /// `NOSCRIPT`). A timeout or connection error gives [`StoreError::Unreachable`]. A call
    /// that timed out after it was sent may still be counted, when Redis gets to it.
    pub async fn check(&self, limits: &[Arc<LimitDef>]) -> Result<Option<Refusal>, StoreError> {
        let plan = Plan::new(&self.prefix, limits);
        if plan.entries.is_empty() {
            return Ok(None);
        }
        let plan = &plan;
        let outcome = self
            .conn
            .run(self.timeout, |manager| self.eval(manager, plan))
            .await;
        match outcome {
            Ok(value) => plan.decode(value),
            Err(Failure::Redis(e)) => Err(classify(&e)),
            Err(timeout @ Failure::Timeout(_)) => Err(StoreError::Unreachable(timeout.to_string())),
        }
    }

    /// `EVALSHA`, then `EVAL` if Redis does not have the script.
    async fn eval(
        &self,
        mut manager: ConnectionManager,
        plan: &Plan<'_>,
    ) -> redis::RedisResult<Value> {
        let result = plan
            .command("EVALSHA", &self.sha)
            .query_async::<Value>(&mut manager)
            .await;
        match result {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                plan.command("EVAL", SCRIPT)
                    .query_async::<Value>(&mut manager)
                    .await
            }
            other => other,
        }
    }
}

impl SharedCounts for Limiter {
    fn check<'a>(&'a self, limits: &'a [Arc<LimitDef>]) -> Checking<'a> {
        Box::pin(Limiter::check(self, limits))
    }

    fn usage<'a>(&'a self, limits: &'a [Arc<LimitDef>]) -> Reading<'a> {
        Box::pin(Limiter::usage(self, limits))
    }
}

fn classify(e: &redis::RedisError) -> StoreError {
    match e.kind() {
        ErrorKind::Io
        | ErrorKind::Server(
            ServerErrorKind::BusyLoading
            | ServerErrorKind::TryAgain
            | ServerErrorKind::ClusterDown
            | ServerErrorKind::MasterDown
            | ServerErrorKind::ReadOnly,
        ) => StoreError::Unreachable(e.to_string()),
        _ => StoreError::Protocol(e.to_string()),
    }
}

/// The script's KEYS and ARGV for one call, and what each key stands for.
struct Plan<'a> {
    entries: Vec<Entry<'a>>,
}

struct Entry<'a> {
    limit: &'a Arc<str>,
    key: String,
    params: Params,
}

/// What the script needs besides the key.
enum Params {
    /// GCRA, in microseconds (with a fraction when the interval is not a whole number).
    Rate { interval: f64, tolerance: f64 },
    /// A fixed window, in whole seconds, and the calls allowed in it.
    Quota { window: u64, count: u64 },
}

impl Entry<'_> {
    fn kind(&self) -> RefusalKind {
        match self.params {
            Params::Rate { .. } => RefusalKind::RateLimited,
            Params::Quota { .. } => RefusalKind::QuotaExceeded,
        }
    }
}

impl<'a> Plan<'a> {
    /// Keys are made distinct: a limit id given twice counts once, and two quotas of one limit
    /// over the same window share a counter, bounded by the smaller count.
    fn new(prefix: &str, limits: &'a [Arc<LimitDef>]) -> Self {
        let mut entries: Vec<Entry<'a>> = Vec::new();
        let mut seen: HashMap<String, usize> = HashMap::new();
        for def in limits {
            if let Some(rate) = &def.rate {
                let key = format!("{prefix}:rate:{}", def.id);
                if !seen.contains_key(&key) {
                    // period / count in µs, kept as a float: a rate of more than a million a
                    // second has an interval below a microsecond.
                    let t = rate.period.as_secs_f64() * 1e6 / f64::from(rate.count.max(1));
                    seen.insert(key.clone(), entries.len());
                    entries.push(Entry {
                        limit: &def.id,
                        key,
                        params: Params::Rate {
                            interval: t,
                            tolerance: t * f64::from(rate.burst),
                        },
                    });
                }
            }
            for quota in &def.quotas {
                // Windows are whole seconds (the configuration has s, min, hour, day).
                let window = quota.window.as_secs().max(1);
                let key = format!("{prefix}:quota:{}:{window}", def.id);
                match seen.get(&key) {
                    Some(&i) => {
                        if let Params::Quota { count, .. } = &mut entries[i].params {
                            *count = (*count).min(quota.count);
                        }
                    }
                    None => {
                        seen.insert(key.clone(), entries.len());
                        entries.push(Entry {
                            limit: &def.id,
                            key,
                            params: Params::Quota {
                                window,
                                count: quota.count,
                            },
                        });
                    }
                }
            }
        }
        Self { entries }
    }

    /// `EVALSHA sha n KEYS... ARGV...` or `EVAL script n KEYS... ARGV...`.
    fn command(&self, verb: &str, script: &str) -> redis::Cmd {
        let mut cmd = redis::cmd(verb);
        cmd.arg(script).arg(self.entries.len());
        for entry in &self.entries {
            cmd.arg(&entry.key);
        }
        for entry in &self.entries {
            match entry.params {
                Params::Rate {
                    interval,
                    tolerance,
                } => cmd
                    .arg("r")
                    .arg(interval.to_string())
                    .arg(tolerance.to_string()),
                Params::Quota { window, count } => cmd.arg("q").arg(window).arg(count),
            };
        }
        cmd
    }

    /// nil: admitted; `{i, wait_us}`: refused by entry i (1-based).
    fn decode(&self, value: Value) -> Result<Option<Refusal>, StoreError> {
        match value {
            Value::Nil => Ok(None),
            Value::Array(items) => match items.as_slice() {
                [Value::Int(i), Value::Int(wait)] => {
                    let entry = usize::try_from(*i)
                        .ok()
                        .and_then(|i| i.checked_sub(1))
                        .and_then(|i| self.entries.get(i))
                        .ok_or_else(|| {
                            StoreError::Protocol(format!(
                                "the script named limit {i} of {}",
                                self.entries.len()
                            ))
                        })?;
                    Ok(Some(Refusal {
                        kind: entry.kind(),
                        limit: entry.limit.clone(),
                        retry_after: Duration::from_micros(u64::try_from(*wait).unwrap_or(0)),
                    }))
                }
                _ => Err(StoreError::Protocol(format!(
                    "the script returned {items:?}"
                ))),
            },
            other => Err(StoreError::Protocol(format!(
                "the script returned {other:?}"
            ))),
        }
    }
}

mod usage;

#[cfg(test)]
mod live;
#[cfg(test)]
mod tests;
