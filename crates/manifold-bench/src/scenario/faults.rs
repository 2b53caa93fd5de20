//! Faults under load: Manifold serving 16 Streamable HTTP hosts, 8 calling `victim__sleep`
//! (300 ms, so that calls are always in flight) and 8 calling `steady__echo`, both stdio
//! fixtures. Then:
//!
//! - **kill -9** of the victim's process, 100 times (10 with `--quick`), each once it serves
//!   again and its calls are in flight: how long after its death each call in flight got its
//!   error (every one must get one), how long until it serves again (a call that passes), the
//!   steady upstream's errors (none), and processes left over (none: every killed pid gone,
//!   Manifold's children one per upstream, none a zombie);
//! - **SIGSTOP** of the victim: how long until its breaker opens (pings every 100 ms,
//!   answered within 200 ms, 3 failures; read from `/metrics`), how long a call refused by it
//!   takes (1,000 of them), and after SIGCONT how long until calls pass again. Calls in
//!   flight when it stopped end at its request timeout (2 s).
//!
//! The victim restarts with `restart_max_backoff_ms = 250`: with the default cap (30 s) a
//! process that crashes again and again is restarted ever more slowly, by design. Figures are
//! printed to stderr as well as written in the JSON document.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use rustix::process::{kill_process, Pid, Signal};
use serde_json::{json, Value};

use super::http_session;
use crate::mcp::RequestLine;
use crate::setup::{Plan, Setup};
use crate::target::{HttpServer, ServerSpec};

/// Hosts per upstream.
const HOSTS: usize = 8;
/// How long each victim call sleeps.
const SLEEP_MS: u64 = 300;
/// After the victim serves again, how long before it is killed (calls are in flight by then).
const SETTLE: Duration = Duration::from_millis(150);
/// No wait in this scenario may take longer than this.
const WAIT: Duration = Duration::from_secs(30);

/// One host's call and how it ended.
struct Call {
    victim: bool,
    start: Instant,
    end: Instant,
    /// The error answer, shortened, if it failed.
    error: Option<String>,
}

pub fn faults(setup: &Setup, plan: &Plan) -> Result<Value> {
    let kills = if plan.rounds <= 2 { 10 } else { 100 };
    let pids =
        std::env::temp_dir().join(format!("manifold-load-faults-{}.pids", std::process::id()));
    let _ = std::fs::remove_file(&pids);
    let spec = spec(setup, &pids)?;
    let server = HttpServer::launch(&spec, setup.limits)?;
    let result = run(&server, &pids, kills);
    let _ = std::fs::remove_file(&pids);
    result
}

/// Manifold with the two upstreams (the config's own, written here in full: the victim needs
/// a pid file and its health settings).
fn spec(setup: &Setup, pids: &std::path::Path) -> Result<ServerSpec> {
    let fixture = json!(setup.fixture.display().to_string());
    let pids = json!(pids.display().to_string());
    let tables = format!(
        "[upstreams.victim]\ncommand = {fixture}\nargs = [\"--name\", \"victim\", \"--pid-file\", {pids}]\n\
         restart_max_backoff_ms = 250\nrequest_timeout_ms = 2000\nhealth_interval = \"100ms\"\nhealth_timeout = \"200ms\"\n\
         breaker_failures = 3\nbreaker_cooldown = \"300ms\"\nrestart_after = \"0s\"\n\n\
         [upstreams.steady]\ncommand = {fixture}\nargs = [\"--name\", \"steady\"]\n"
    );
    setup.manifold_http_tuned("faults", &[], &tables)
}

fn run(server: &Arc<HttpServer>, pids: &std::path::Path, kills: usize) -> Result<Value> {
    let victim_pid = || -> Result<u32> {
        let text = std::fs::read_to_string(pids).unwrap_or_default();
        text.lines()
            .rev()
            .find_map(|l| l.trim().parse().ok())
            .context("the victim wrote no pid")
    };
    let mut probe = http_session(server, "faults-probe")?;
    let echo = RequestLine::echo("victim__echo");
    // Serving: a call that passes (each failing one is answered at once while it is down).
    let serving = |probe: &mut crate::session::Session| -> Result<Duration> {
        let start = Instant::now();
        while start.elapsed() < WAIT {
            if probe.counted_calls(&echo, 1, WAIT)?.errors == 0 {
                return Ok(start.elapsed());
            }
            std::thread::sleep(Duration::from_millis(2));
        }
        bail!("the victim did not serve within {WAIT:?}")
    };
    serving(&mut probe)?;

    let stop = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(Mutex::new(Vec::new()));
    let mut threads = Vec::new();
    for (victim, line) in [
        (
            true,
            RequestLine::tools_call("victim__sleep", &json!({"ms": SLEEP_MS})),
        ),
        (false, RequestLine::echo("steady__echo")),
    ] {
        for i in 0..HOSTS {
            let mut session = http_session(server, &format!("faults-{victim}-{i}"))?;
            let (stop, calls, line) = (Arc::clone(&stop), Arc::clone(&calls), line.clone());
            threads.push(std::thread::spawn(move || -> Result<()> {
                while !stop.load(Ordering::Relaxed) {
                    let start = Instant::now();
                    let counted = session.counted_calls(&line, 1, WAIT)?;
                    let end = Instant::now();
                    let error = counted.first_error;
                    let call = Call {
                        victim,
                        start,
                        end,
                        error,
                    };
                    calls
                        .lock()
                        .map_err(|_| anyhow::anyhow!("poisoned"))?
                        .push(call);
                }
                Ok(())
            }));
        }
    }

    let mut deaths = Vec::with_capacity(kills);
    let mut killed = Vec::with_capacity(kills);
    let mut restarts = Vec::with_capacity(kills);
    for _ in 0..kills {
        std::thread::sleep(SETTLE);
        let pid = victim_pid()?;
        let at = Instant::now();
        signal(pid, Signal::KILL)?;
        deaths.push(at);
        killed.push(pid);
        // The first calls after the death fail at once; it serves again after the backoff.
        std::thread::sleep(Duration::from_millis(5));
        serving(&mut probe)?;
        restarts.push(at.elapsed());
    }

    // SIGSTOP: pings find it; its calls are refused at once until it continues.
    std::thread::sleep(SETTLE);
    let pid = victim_pid()?;
    signal(pid, Signal::STOP)?;
    let stopped = Instant::now();
    let mut detected = None;
    while stopped.elapsed() < WAIT {
        if breaker_state(server.addr(), "victim") == Some(2) {
            detected = Some(stopped.elapsed());
            break;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let mut refused = Vec::new();
    while detected.is_some() && stopped.elapsed() < WAIT && refused.len() < 1000 {
        let start = Instant::now();
        let counted = probe.counted_calls(&echo, 1, WAIT)?;
        let took = start.elapsed();
        if counted
            .first_error
            .as_deref()
            .is_some_and(|e| e.contains("-32017"))
        {
            refused.push(took);
        }
    }
    signal(pid, Signal::CONT)?;
    let continued = Instant::now();
    let recovered = serving(&mut probe)?;
    let stopped_for = continued - stopped;

    stop.store(true, Ordering::Relaxed);
    for t in threads {
        t.join()
            .map_err(|_| anyhow::anyhow!("a host thread panicked"))??;
    }
    let calls = std::mem::take(&mut *calls.lock().map_err(|_| anyhow::anyhow!("poisoned"))?);

    let mut after_death = Vec::new();
    let (mut in_flight_ok, mut unclear) = (0usize, 0usize);
    let (mut steady_ok, mut steady_errors, mut victim_calls, mut victim_errors) = (0, 0, 0, 0);
    let mut first_steady_error = None;
    for call in &calls {
        if !call.victim {
            match &call.error {
                None => steady_ok += 1,
                Some(e) => {
                    steady_errors += 1;
                    first_steady_error.get_or_insert(e.clone());
                }
            }
            continue;
        }
        victim_calls += 1;
        victim_errors += usize::from(call.error.is_some());
        let death = deaths.iter().rev().find(|d| **d <= call.end).copied();
        let Some(death) = death.filter(|d| call.start < *d) else {
            continue;
        };
        match &call.error {
            Some(e) => {
                if !(e.contains("-32010") && e.contains("victim")) {
                    unclear += 1;
                }
                after_death.push(call.end - death);
            }
            None => in_flight_ok += 1,
        }
    }
    let leaked: Vec<u32> = killed.iter().copied().filter(|p| alive(*p)).collect();
    let children = crate::procstat::children(server.pid());
    let zombies = children.iter().filter(|(_, s)| *s == 'Z').count();

    let doc = json!({
        "kills": kills,
        "hosts": 2 * HOSTS,
        "in_flight_at_death": {
            "calls": after_death.len(),
            "answered_after_death_ms": ms_summary(&mut after_death),
            "answered_before_death": in_flight_ok,
            "without_a_clear_error": unclear,
        },
        "restart_ms": ms_summary(&mut restarts),
        "other_upstream": { "ok": steady_ok, "errors": steady_errors },
        "killed_upstream": { "calls": victim_calls, "errors": victim_errors },
        "processes": {
            "leaked": leaked,
            "children": children.len(),
            "zombies": zombies,
        },
        "sigstop": {
            "refusing_after_ms": detected.map(ms),
            "refused_call_ms": ms_summary(&mut refused),
            "stopped_ms": ms(stopped_for),
            "serving_after_sigcont_ms": ms(recovered),
        },
    });
    eprintln!("manifold-load: faults: {doc}");
    if let Some(e) = first_steady_error {
        bail!("the other upstream failed {steady_errors} calls, the first: {e}");
    }
    if !leaked.is_empty() || zombies > 0 || children.len() != 2 {
        bail!("processes left over: {doc}");
    }
    if after_death.len() < kills || unclear > 0 {
        bail!("calls in flight at a death were not all answered with -32010: {doc}");
    }
    if detected.is_none() {
        bail!("the stopped upstream's calls were never refused at once: {doc}");
    }
    Ok(doc)
}

/// The victim's breaker state from `/metrics` on the host listener (open there: no admin
/// address, no authentication), read with a plain HTTP/1.0 GET.
fn breaker_state(addr: std::net::SocketAddr, upstream: &str) -> Option<u64> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(5))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let prefix = format!("manifold_upstream_breaker_state{{upstream=\"{upstream}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .and_then(|v| v.trim().parse().ok())
}

fn signal(pid: u32, signal: Signal) -> Result<()> {
    let raw = i32::try_from(pid).context("pid")?;
    let pid = Pid::from_raw(raw).context("pid 0")?;
    kill_process(pid, signal).with_context(|| format!("cannot signal {raw}"))
}

/// Whether `pid` exists and is not a zombie.
fn alive(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        let state = stat.rsplit(')').next().unwrap_or("").trim_start();
        !state.starts_with('Z')
    })
}

fn ms(d: Duration) -> f64 {
    crate::stats::round2(d.as_secs_f64() * 1e3)
}

/// Count, p50, p95 and maximum in milliseconds.
fn ms_summary(v: &mut [Duration]) -> Value {
    v.sort();
    let at = |q: f64| {
        let i = ((v.len() as f64 - 1.0) * q).round() as usize;
        v.get(i).map_or(0.0, |d| ms(*d))
    };
    json!({ "n": v.len(), "p50": at(0.5), "p95": at(0.95), "max": at(1.0) })
}
