//! What the console reads of limits counted in Redis: each quota's use in its current
//! window, on Redis's clock (the one the check script counts with), without counting
//! anything.

use std::sync::Arc;
use std::time::Duration;

use manifold_policy::{LimitDef, StoreError, WindowUse};

use super::{classify, Limiter};
use crate::connection::Failure;

/// KEYS[i] is the base of a quota's key (`{prefix}:quota:{id}:{window_secs}`), ARGV[i] its
/// window in seconds. Returns, per key, the calls counted in the current window and the
/// microseconds until it ends.
const READ: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local out = {}
for i = 1, #KEYS do
  local window = tonumber(ARGV[i]) * 1000000
  local index = math.floor(now / window)
  local used = tonumber(redis.call('GET', KEYS[i] .. ':' .. string.format('%.0f', index))) or 0
  out[2 * i - 1] = used
  out[2 * i] = (index + 1) * window - now
end
return out
"#;

/// One quota to read.
struct Quota<'a> {
    limit: &'a Arc<str>,
    key: String,
    window: u64,
    count: u64,
}

impl Limiter {
    /// See [`manifold_policy::SharedCounts::usage`]: one `EVAL` of a read-only script.
    pub async fn usage(&self, limits: &[Arc<LimitDef>]) -> Result<Vec<WindowUse>, StoreError> {
        let quotas: Vec<Quota<'_>> = limits
            .iter()
            .flat_map(|def| {
                def.quotas.iter().map(|q| {
                    let window = q.window.as_secs().max(1);
                    Quota {
                        limit: &def.id,
                        key: format!("{}:quota:{}:{window}", self.prefix, def.id),
                        window,
                        count: q.count,
                    }
                })
            })
            .collect();
        if quotas.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(READ).arg(quotas.len());
        for q in &quotas {
            cmd.arg(&q.key);
        }
        for q in &quotas {
            cmd.arg(q.window);
        }
        let cmd = &cmd;
        let outcome = self
            .conn
            .run(self.timeout, |mut manager| async move {
                cmd.query_async::<Vec<i64>>(&mut manager).await
            })
            .await;
        let read = match outcome {
            Ok(read) => read,
            Err(Failure::Redis(e)) => return Err(classify(&e)),
            Err(timeout @ Failure::Timeout(_)) => {
                return Err(StoreError::Unreachable(timeout.to_string()))
            }
        };
        if read.len() != 2 * quotas.len() {
            return Err(StoreError::Protocol(format!(
                "the read script returned {} numbers for {} quotas",
                read.len(),
                quotas.len()
            )));
        }
        Ok(quotas
            .iter()
            .zip(read.chunks(2))
            .map(|(q, pair)| WindowUse {
                limit: Arc::clone(q.limit),
                used: u64::try_from(pair[0]).unwrap_or(0),
                count: q.count,
                window: Duration::from_secs(q.window),
                resets_in: Duration::from_micros(u64::try_from(pair[1]).unwrap_or(0)),
            })
            .collect())
    }
}
