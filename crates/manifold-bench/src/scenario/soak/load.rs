//! The paced load of the soak: one thread per host session, each sending its share of one
//! fixed schedule. Request `k` of the run is due `k / rate` seconds after the start, and
//! session `j` sends every `k` with `k mod sessions = j`. The schedule is open-loop: each
//! request goes out when it is due, whatever became of the one before, or at once when the
//! session is late (a session has one request in flight, as an HTTP/1.1 host does); how late
//! it went out is its lag, which shows whether the load generator kept up.
//!
//! Every answer is counted against the id it names, so that an answer lost, duplicated, or
//! given to an id this session never sent shows up in the counts instead of ending the run.
//! At the end each session sends a `ping` and reads up to its answer, so that an answer
//! still waiting in a response is counted too.

use std::time::{Duration, Instant};

use serde_json::json;

use super::mix::{Kind, Mix, Request, KINDS};
use crate::mcp::{self, RequestLine};
use crate::session::Session;

/// Most answers read while waiting for one: a response holds the one awaited, and a few
/// more only if something is wrong.
const MAX_ANSWERS: usize = 1_000;

/// When each request of the run is due.
pub struct Schedule {
    pub start: Instant,
    /// Requests per second, over all sessions.
    pub rate: f64,
    /// Requests in the whole run, warm-up included.
    pub total: u64,
    pub sessions: usize,
    /// The warm-up: requests due before it are checked and counted, but not timed.
    pub warmup_s: f64,
    /// Nothing is sent past this moment, so that a run that cannot keep up still ends.
    pub deadline: Instant,
}

impl Schedule {
    fn due(&self, k: u64) -> Instant {
        self.start + Duration::from_secs_f64(k as f64 / self.rate)
    }

    /// The minute of the measured part that request `k` is due in; `None` in the warm-up.
    fn minute(&self, k: u64) -> Option<usize> {
        let t = k as f64 / self.rate - self.warmup_s;
        (t >= 0.0).then_some((t / 60.0) as usize)
    }
}

/// What the sessions saw: counts by kind (in the order of `KINDS`), timings by minute.
#[derive(Debug, Default)]
pub struct Seen {
    pub sent: [u64; 4],
    /// Answered with the answer the kind must get.
    pub good: [u64; 4],
    /// Answered with something else (an unexpected error, a wrong result).
    pub unexpected: [u64; 4],
    /// Not answered before the response ended, or not sent at all (a failed connection).
    pub unanswered: [u64; 4],
    /// Requests that no answer named, after the final drain.
    pub lost: u64,
    /// Requests that more than one answer named.
    pub duplicated: u64,
    /// Answers naming an id their session never sent.
    pub strays: u64,
    /// Requests not sent before the deadline.
    pub unsent: u64,
    /// The first thing that went wrong, with its answer or error.
    pub first_problem: Option<String>,
    /// Calls sent to each upstream (what the fixtures must have counted).
    pub calls_to: Vec<u64>,
    /// Nanoseconds from send to answer of each well answered measured request, by minute
    /// and kind.
    pub latency: Vec<[Vec<u64>; 4]>,
    /// Nanoseconds each measured request went out after it was due, by minute.
    pub lag: Vec<Vec<u64>>,
}

impl Seen {
    fn problem(&mut self, what: String) {
        self.first_problem.get_or_insert(what);
    }

    /// Adds what another session saw.
    pub fn absorb(&mut self, other: Seen) {
        for i in 0..KINDS.len() {
            self.sent[i] += other.sent[i];
            self.good[i] += other.good[i];
            self.unexpected[i] += other.unexpected[i];
            self.unanswered[i] += other.unanswered[i];
        }
        self.lost += other.lost;
        self.duplicated += other.duplicated;
        self.strays += other.strays;
        self.unsent += other.unsent;
        if self.first_problem.is_none() {
            self.first_problem = other.first_problem;
        }
        grow(&mut self.calls_to, other.calls_to.len());
        for (mine, theirs) in self.calls_to.iter_mut().zip(other.calls_to) {
            *mine += theirs;
        }
        grow(&mut self.latency, other.latency.len());
        for (mine, theirs) in self.latency.iter_mut().zip(other.latency) {
            for (a, b) in mine.iter_mut().zip(theirs) {
                a.extend(b);
            }
        }
        grow(&mut self.lag, other.lag.len());
        for (mine, theirs) in self.lag.iter_mut().zip(other.lag) {
            mine.extend(theirs);
        }
    }

    /// The lost and duplicated requests from how many answers named each id.
    fn settle(&mut self, answers: &[u8]) {
        self.lost += answers.iter().filter(|n| **n == 0).count() as u64;
        self.duplicated += answers.iter().filter(|n| **n > 1).count() as u64;
    }
}

fn grow<T: Default>(v: &mut Vec<T>, len: usize) {
    if v.len() < len {
        v.resize_with(len, T::default);
    }
}

/// Session `j`'s share of the schedule, then the drain. Never fails: what goes wrong is
/// counted in the result.
pub fn run(session: &mut Session, j: usize, mix: &Mix, schedule: &Schedule, ups: usize) -> Seen {
    let mut seen = Seen {
        calls_to: vec![0; ups],
        ..Seen::default()
    };
    let first = session.next_id();
    // How many answers named each id sent, from `first` on.
    let mut answers: Vec<u8> = Vec::new();
    let mut counters = [0usize; 4];
    let step = schedule.sessions.max(1) as u64;
    let (mut k, mut n) = (j as u64, 0u64);
    // Bounded by the schedule's count, and in time by its deadline.
    while k < schedule.total {
        let (due, now) = (schedule.due(k), Instant::now());
        if now >= schedule.deadline {
            seen.unsent += (schedule.total - k).div_ceil(step);
            break;
        }
        if due > now {
            std::thread::sleep(due - now);
        }
        let request = mix.pick(j, n, &mut counters);
        let sent_at = Instant::now();
        answers.push(0);
        let outcome = exchange(session, request, first, &mut answers, &mut seen);
        tally(
            &mut seen,
            request,
            outcome,
            schedule.minute(k),
            due,
            sent_at,
        );
        k += step;
        n += 1;
    }
    drain(session, first, &mut answers, &mut seen);
    seen.settle(&answers);
    seen
}

/// How one request ended: its answer, good or not, and when it came; or none.
type Outcome = Option<(bool, Instant)>;

/// Counts one request by its kind, and times it if it was answered well in a measured minute.
fn tally(
    seen: &mut Seen,
    r: &Request,
    outcome: Outcome,
    minute: Option<usize>,
    due: Instant,
    sent: Instant,
) {
    let kind = r.kind.index();
    seen.sent[kind] += 1;
    if let (Kind::Call, Some(u)) = (r.kind, r.upstream) {
        seen.calls_to[u] += 1;
    }
    match outcome {
        Some((true, _)) => seen.good[kind] += 1,
        Some((false, _)) => seen.unexpected[kind] += 1,
        None => seen.unanswered[kind] += 1,
    }
    let Some(m) = minute else {
        return;
    };
    grow(&mut seen.latency, m + 1);
    grow(&mut seen.lag, m + 1);
    seen.lag[m].push(nanos(sent.saturating_duration_since(due)));
    if let Some((true, at)) = outcome {
        seen.latency[m][kind].push(nanos(at - sent));
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// Sends `request` and reads answers up to its own, each counted against the id it names.
fn exchange(
    session: &mut Session,
    request: &Request,
    first: u64,
    answers: &mut [u8],
    seen: &mut Seen,
) -> Outcome {
    let accept = |id: u64, ok: bool, text: &[u8]| request.accepts(id, ok, text);
    let got = await_own(session, &request.line, &accept, first, answers, seen)?;
    if !got.0 {
        seen.problem(format!("a {} answered with {}", request.kind.name(), got.2));
    }
    Some((got.0, got.1))
}

/// Sends `line` and reads answers until the one to its id: whether `accept` took it, when it
/// came, and its excerpt if it was not taken. `None` if none came: every failure is noted.
fn await_own(
    session: &mut Session,
    line: &RequestLine,
    accept: &dyn Fn(u64, bool, &[u8]) -> bool,
    first: u64,
    answers: &mut [u8],
    seen: &mut Seen,
) -> Option<(bool, Instant, String)> {
    let id = session.next_id();
    if let Err(e) = session.send(line) {
        seen.problem(format!("request {id} could not be sent: {e:#}"));
        return None;
    }
    for _ in 0..MAX_ANSWERS {
        let read = session.next_answer(|got, ok, text| {
            let taken = got == id && accept(got, ok, text);
            // Only an answer that was not taken is ever quoted.
            (got, taken, (!taken).then(|| mcp::excerpt(text)))
        });
        match read {
            Ok((got, taken, excerpt)) if got == id => {
                count(answers, first, got, seen);
                return Some((taken, Instant::now(), excerpt.unwrap_or_default()));
            }
            Ok((got, _, excerpt)) => {
                count(answers, first, got, seen);
                let excerpt = excerpt.unwrap_or_default();
                seen.problem(format!(
                    "while awaiting {id}, an answer to {got}: {excerpt}"
                ));
            }
            Err(e) => {
                seen.problem(format!("request {id} got no answer: {e:#}"));
                return None;
            }
        }
    }
    seen.problem(format!("request {id}: more than {MAX_ANSWERS} answers"));
    None
}

/// Counts an answer against the id it names: one of this session's requests, or a stray.
fn count(answers: &mut [u8], first: u64, id: u64, seen: &mut Seen) {
    let slot = id
        .checked_sub(first)
        .and_then(|i| usize::try_from(i).ok())
        .and_then(|i| answers.get_mut(i));
    match slot {
        Some(n) => *n = n.saturating_add(1),
        None => seen.strays += 1,
    }
}

/// A `ping` after the last request: reading up to its answer counts any answer still
/// waiting in the session's responses.
fn drain(session: &mut Session, first: u64, answers: &mut [u8], seen: &mut Seen) {
    let ping = RequestLine::new("ping", &json!({}));
    let accept = |_: u64, ok: bool, _: &[u8]| ok;
    let id = session.next_id();
    // The ping's own answer names an id past `answers`: counted as a stray, then taken back.
    match await_own(session, &ping, &accept, first, answers, seen) {
        Some((true, ..)) => seen.strays -= 1,
        Some((false, _, excerpt)) => {
            seen.strays -= 1;
            seen.problem(format!("the final ping {id} was answered with {excerpt}"));
        }
        None => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_due_on_a_fixed_schedule() {
        let start = Instant::now();
        let s = Schedule {
            start,
            rate: 1000.0,
            total: 200_000,
            sessions: 16,
            warmup_s: 10.0,
            deadline: start,
        };
        assert_eq!(s.due(2500) - start, Duration::from_millis(2500));
        assert_eq!(s.minute(9_999), None);
        assert_eq!(s.minute(10_000), Some(0));
        assert_eq!(s.minute(69_999), Some(0));
        assert_eq!(s.minute(70_000), Some(1));
    }

    #[test]
    fn answers_are_counted_against_their_ids() {
        let mut seen = Seen::default();
        let mut answers = vec![0u8; 3];
        for id in [10, 11, 11, 13, 9] {
            count(&mut answers, 10, id, &mut seen);
        }
        assert_eq!(answers, [1, 2, 0]);
        assert_eq!(seen.strays, 2);
        seen.settle(&answers);
        assert_eq!((seen.lost, seen.duplicated), (1, 1));
    }

    #[test]
    fn sessions_add_up() {
        let mut a = Seen {
            sent: [1, 2, 3, 4],
            calls_to: vec![1, 0],
            latency: vec![[vec![5], vec![], vec![], vec![]]],
            lag: vec![vec![1]],
            ..Seen::default()
        };
        let b = Seen {
            sent: [1, 1, 1, 1],
            lost: 2,
            calls_to: vec![2, 3],
            latency: vec![
                [vec![], vec![], vec![], vec![]],
                [vec![7], vec![], vec![], vec![]],
            ],
            lag: vec![vec![2], vec![3]],
            first_problem: Some("x".into()),
            ..Seen::default()
        };
        a.absorb(b);
        assert_eq!(a.sent, [2, 3, 4, 5]);
        assert_eq!((a.lost, a.first_problem.as_deref()), (2, Some("x")));
        assert_eq!(a.calls_to, [3, 3]);
        assert_eq!(a.latency.len(), 2);
        assert_eq!(a.latency[1][0], [7]);
        assert_eq!(a.lag, [vec![1, 2], vec![3]]);
    }
}
