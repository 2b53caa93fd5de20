//! What the kernel says about a server process: resident memory, CPU time, context
//! switches, open descriptors, threads and children. Read from /proc, so it costs the
//! measured process nothing.

use anyhow::{Context, Result};
use serde_json::{json, Value};

/// CPU time and context switches of a process, all threads, at one moment.
#[derive(Debug, Clone, Copy, Default)]
pub struct Usage {
    pub user_s: f64,
    pub sys_s: f64,
    /// Voluntary plus involuntary, summed over the live threads: each blocking read that
    /// sleeps is one, so this counts wake-ups.
    pub switches: u64,
}

impl Usage {
    pub fn of(pid: u32) -> Result<Self> {
        let path = format!("/proc/{pid}/stat");
        let stat = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let rest = stat.rsplit_once(')').map_or("", |(_, r)| r);
        let fields: Vec<&str> = rest.split_whitespace().collect();
        let ticks = |i: usize| {
            fields
                .get(i)
                .and_then(|f| f.parse::<f64>().ok())
                .unwrap_or(0.0)
        };
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        // utime and stime are fields 14 and 15 of stat(5), i.e. 11 and 12 after the name.
        let (user_s, sys_s) = (ticks(11) / hz, ticks(12) / hz);
        Ok(Self {
            user_s,
            sys_s,
            switches: switches(pid),
        })
    }

    /// Per call between `before` and `self`, in microseconds and switches. CPU times are
    /// null when too few clock ticks passed to tell (quick runs): /proc counts in ticks.
    pub fn per_call(self, before: Self, calls: usize) -> Value {
        let n = calls.max(1) as f64;
        let hz = rustix::param::clock_ticks_per_second().max(1) as f64;
        let (user, sys) = (self.user_s - before.user_s, self.sys_s - before.sys_s);
        let us = |s: f64| (user + sys >= MIN_TICKS / hz).then(|| crate::stats::round(s * 1e6 / n));
        json!({
            "user_us": us(user),
            "sys_us": us(sys),
            "cpu_us": us(user + sys),
            "switches": crate::stats::round2(self.switches.saturating_sub(before.switches) as f64 / n),
        })
    }
}

/// CPU time of the calling thread so far, to the nanosecond: what the load generator itself
/// spends on a loop, unlike /proc's figures, which count in clock ticks.
pub fn thread_cpu() -> std::time::Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    let secs = u64::try_from(t.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(t.tv_nsec).unwrap_or(0);
    std::time::Duration::new(secs, nanos)
}

/// Fewer ticks than this make a per-call CPU figure mostly rounding error.
const MIN_TICKS: f64 = 20.0;

fn switches(pid: u32) -> u64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0;
    };
    // Bounded by the thread count of one process.
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("status")).ok())
        .flat_map(|s| {
            s.lines()
                .filter(|l| l.contains("ctxt_switches:"))
                .filter_map(|l| l.split_whitespace().nth(1)?.parse::<u64>().ok())
                .collect::<Vec<_>>()
        })
        .sum()
}

/// A `kB` field of /proc/PID/status (VmRSS, VmHWM), in MB (MiB).
pub fn status_mb(pid: u32, field: &str) -> Result<f64> {
    let kb = status_kb(pid, field)? as f64;
    Ok(crate::stats::round(kb / 1024.0))
}

/// A `kB` field of /proc/PID/status, in KiB: the kernel's own unit, for figures (a slope of
/// a few KiB a minute) that rounding to a tenth of a MiB would hide.
pub fn status_kb(pid: u32, field: &str) -> Result<u64> {
    let path = format!("/proc/{pid}/status");
    let status = std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .with_context(|| format!("no {field} in {path}"))
}

/// How many entries a folder of /proc/PID has: `fd` gives the open file descriptors, `task`
/// the threads.
pub fn entries(pid: u32, folder: &str) -> Result<usize> {
    let path = format!("/proc/{pid}/{folder}");
    let dir = std::fs::read_dir(&path).with_context(|| format!("cannot read {path}"))?;
    // Bounded by the process's descriptor or thread count.
    Ok(dir.flatten().count())
}

/// The children of `pid` and their state letters (`Z` for a zombie), from /proc.
pub use manifold_testkit::process::children;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_this_process() {
        let me = std::process::id();
        let u = Usage::of(me).unwrap();
        assert!(u.user_s >= 0.0 && u.sys_s >= 0.0);
        assert!(u.switches > 0);
        assert!(status_mb(me, "VmRSS:").unwrap() > 0.0);
        assert!(status_kb(me, "VmRSS:").unwrap() > 100);
        assert!(entries(me, "fd").unwrap() >= 3, "stdin, stdout, stderr");
        assert!(entries(me, "task").unwrap() >= 1);
        assert!(entries(me, "no-such-folder").is_err());
        let v = u.per_call(u, 10);
        assert!(v["cpu_us"].is_null(), "no ticks passed: {v}");
        assert_eq!(v["switches"], 0.0);
    }

    #[test]
    fn finds_a_child() {
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let found = children(std::process::id());
        let _ = child.kill();
        let _ = child.wait();
        // Other tests of this process may have children too.
        assert!(found.iter().any(|(pid, _)| *pid == child.id()), "{found:?}");
    }
}
