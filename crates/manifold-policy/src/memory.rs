//! Limits counted in this process: rates with `governor` (GCRA, lock-free), quotas with exact
//! counters over fixed windows. Counts are per process: replicas each count their own (the
//! Redis backend shares them).

use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use governor::clock::{Clock, DefaultClock};
use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};
use parking_lot::Mutex;

use crate::limits::{LimitDef, Refusal, RefusalKind, WindowUse};

/// One limit's state in this process.
pub struct Counter {
    pub def: Arc<LimitDef>,
    rate: Option<DefaultDirectRateLimiter>,
    /// Per quota: the window it counts and the calls counted in it.
    windows: Mutex<Vec<(u64, u64)>>,
}

impl Counter {
    pub fn new(def: Arc<LimitDef>) -> Self {
        let rate = def.rate.map(|r| {
            let burst = NonZeroU32::new(r.burst).unwrap_or(NonZeroU32::MIN);
            let interval = r.emission_interval().max(Duration::from_nanos(1));
            let quota = Quota::with_period(interval)
                .unwrap_or_else(|| Quota::per_second(NonZeroU32::MIN))
                .allow_burst(burst);
            RateLimiter::direct(quota)
        });
        let windows = Mutex::new(vec![(0, 0); def.quotas.len()]);
        Self { def, rate, windows }
    }
}

impl Counter {
    /// How much of each of its quotas' current windows is used, read without counting
    /// anything: a window that ended since the last call reads as unused.
    pub fn usage(&self) -> Vec<WindowUse> {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default();
        let windows = self.windows.lock();
        self.def
            .quotas
            .iter()
            .zip(windows.iter())
            .map(|(quota, &(window, count))| {
                let secs = quota.window.as_secs().max(1);
                let current = now.as_secs() / secs;
                let end = Duration::from_secs((current + 1) * secs);
                WindowUse {
                    limit: Arc::clone(&self.def.id),
                    used: if window == current { count } else { 0 },
                    count: quota.count,
                    window: quota.window,
                    resets_in: end.saturating_sub(now),
                }
            })
            .collect()
    }
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Counter").field("def", &self.def).finish()
    }
}

/// Checks one call against every counter in `counters`: `None` if all admit it (and it is
/// counted by each), else the refusal. Quotas are all-or-nothing: they are checked, under
/// their locks, before anything is counted. A rate that admits the call consumes its token
/// even when a rate checked after it refuses (governor cannot give one back), so a refused
/// call can cost an earlier rate one token; quotas never count a refused call.
pub fn check(counters: &[&Counter]) -> Option<Refusal> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    // Locks in the order given; callers pass counters in a fixed order (global, team,
    // team+upstream, team+tool), so two calls never wait on each other in reverse.
    let mut guards: Vec<_> = counters
        .iter()
        .filter(|c| !c.def.quotas.is_empty())
        .map(|c| (c, c.windows.lock()))
        .collect();
    for (counter, windows) in &mut guards {
        for (quota, (window, count)) in counter.def.quotas.iter().zip(windows.iter_mut()) {
            let secs = quota.window.as_secs().max(1);
            let current = now.as_secs() / secs;
            if *window != current {
                *window = current;
                *count = 0;
            }
            if *count >= quota.count {
                let end = Duration::from_secs((current + 1) * secs);
                return Some(Refusal {
                    kind: RefusalKind::QuotaExceeded,
                    limit: Arc::clone(&counter.def.id),
                    retry_after: end.saturating_sub(now),
                });
            }
        }
    }
    for counter in counters {
        if let Some(rate) = &counter.rate {
            if let Err(not_until) = rate.check() {
                return Some(Refusal {
                    kind: RefusalKind::RateLimited,
                    limit: Arc::clone(&counter.def.id),
                    retry_after: not_until.wait_time_from(DefaultClock::default().now()),
                });
            }
        }
    }
    for (_, windows) in &mut guards {
        for (_, count) in windows.iter_mut() {
            *count += 1;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use manifold_config::{QuotaConfig, RateConfig};

    fn def(id: &str, rate: Option<(u32, u64, u32)>, quotas: &[(u64, u64)]) -> Arc<LimitDef> {
        Arc::new(LimitDef {
            id: id.into(),
            rate: rate.map(|(count, secs, burst)| RateConfig {
                count,
                period: Duration::from_secs(secs),
                burst,
            }),
            quotas: quotas
                .iter()
                .map(|&(count, secs)| QuotaConfig {
                    count,
                    window: Duration::from_secs(secs),
                })
                .collect(),
        })
    }

    #[test]
    fn exactly_k_of_n_concurrent_calls_pass() {
        for limit in [
            def("q", None, &[(50, 86_400)]),
            def("r", Some((50, 3600, 50)), &[]),
        ] {
            let counter = Arc::new(Counter::new(limit));
            let passed = std::sync::atomic::AtomicUsize::new(0);
            std::thread::scope(|s| {
                for _ in 0..8 {
                    s.spawn(|| {
                        for _ in 0..25 {
                            if check(&[&counter]).is_none() {
                                passed.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                        }
                    });
                }
            });
            assert_eq!(passed.into_inner(), 50, "{:?}", counter.def.id);
        }
    }

    #[test]
    fn a_quota_refusal_counts_nothing_and_says_when() {
        let team = Counter::new(def("team", None, &[(1, 86_400)]));
        let tool = Counter::new(def("tool", None, &[(5, 3600)]));
        assert_eq!(check(&[&team, &tool]), None);
        let refusal = check(&[&team, &tool]).unwrap();
        assert_eq!(refusal.kind, RefusalKind::QuotaExceeded);
        assert_eq!(&*refusal.limit, "team");
        assert!(refusal.retry_after <= Duration::from_secs(86_400));
        // The tool's quota counted only the admitted call: four more pass on it alone.
        for _ in 0..4 {
            assert_eq!(check(&[&tool]), None);
        }
        assert!(check(&[&tool]).is_some());
    }

    #[test]
    fn usage_reads_each_window_without_counting() {
        let counter = Counter::new(def("team:eng", None, &[(3, 86_400), (10, 3600)]));
        assert_eq!(check(&[&counter]), None);
        assert_eq!(check(&[&counter]), None);
        let usage = counter.usage();
        let used: Vec<(u64, u64)> = usage.iter().map(|u| (u.used, u.count)).collect();
        assert_eq!(used, vec![(2, 3), (2, 10)]);
        assert_eq!(&*usage[0].limit, "team:eng");
        assert!(usage[1].resets_in <= Duration::from_secs(3600));
        // Reading counted nothing: one call is left of the first quota.
        assert_eq!(counter.usage()[0].used, 2);
        assert_eq!(check(&[&counter]), None);
        assert!(check(&[&counter]).is_some());
    }

    #[test]
    fn a_rate_refusal_says_when_and_leaves_quotas_alone() {
        let rate = Counter::new(def("rate", Some((1, 60, 1)), &[]));
        let quota = Counter::new(def("quota", None, &[(10, 86_400)]));
        assert_eq!(check(&[&quota, &rate]), None);
        let refusal = check(&[&quota, &rate]).unwrap();
        assert_eq!(refusal.kind, RefusalKind::RateLimited);
        assert!(refusal.retry_after > Duration::from_secs(50));
        assert!(refusal.retry_after <= Duration::from_secs(60));
        for _ in 0..9 {
            assert_eq!(check(&[&quota]), None);
        }
        assert!(
            check(&[&quota]).is_some(),
            "the refused call was not counted"
        );
    }
}
