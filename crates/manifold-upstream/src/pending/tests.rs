//! The pending table through a connection over an in-memory wire: nothing is written to a host
//! while the table is locked, an answer never overtakes progress being delivered, and a host's
//! cancellation finds its request by the index.

// Test code: a failed unwrap is a failed test, with its message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use super::guard::guards_held;
use super::{Exchange, Finish, Forward, RequestKey, ServerRequest};
use crate::connection::{Connection, Events, Timing, Wire};
use crate::pipe::WriteError;

/// Keeps what the connection sends.
#[derive(Default)]
struct Sent(Mutex<Vec<String>>);

struct TestWire(Arc<Sent>);

impl Wire for TestWire {
    fn send(&self, msg: crate::outbound::Outbound) -> Result<(), WriteError> {
        let text = String::from_utf8_lossy(&msg.line).trim_end().to_owned();
        self.0 .0.lock().unwrap().push(text);
        Ok(())
    }

    fn close(&self, _reason: &str) {}
}

struct NoEvents;

impl Events for NoEvents {
    fn notification(&self, _method: &str, _params: Option<&str>) {}
}

fn connection() -> (Arc<Connection>, Arc<Sent>) {
    let sent = Arc::new(Sent::default());
    let timing = Timing {
        request: Duration::from_secs(60),
        max: Duration::from_secs(60),
    };
    let wire = Box::new(TestWire(Arc::clone(&sent)));
    let conn = Connection::new("up", wire, Box::new(NoEvents), timing);
    (Arc::new(conn), sent)
}

/// What the host side of every request heard, and how many table locks were held each time.
#[derive(Default)]
struct Heard {
    events: Mutex<Vec<String>>,
    held: Mutex<Vec<usize>>,
    is_asked: AtomicUsize,
}

impl Heard {
    fn push(&self, event: String) {
        self.held.lock().unwrap().push(guards_held());
        self.events.lock().unwrap().push(event);
    }

    fn events(&self) -> Vec<String> {
        self.events.lock().unwrap().clone()
    }
}

/// A host request: `keyed` says whether it names its key (see `Exchange::key`).
struct Host {
    session: u64,
    id: String,
    keyed: bool,
    heard: Arc<Heard>,
    finished: bool,
    /// When set, progress tells the test it began, then waits to be let go.
    gate: Option<(mpsc::Sender<()>, Mutex<mpsc::Receiver<()>>)>,
}

impl Host {
    fn new(session: u64, id: &str, keyed: bool, heard: &Arc<Heard>) -> Self {
        Self {
            session,
            id: id.to_owned(),
            keyed,
            heard: Arc::clone(heard),
            finished: false,
            gate: None,
        }
    }

    fn forward(self) -> Forward {
        Forward {
            exchange: Box::new(self),
            progress_token: Some("\"host-token\"".into()),
            timeout: None,
        }
    }
}

impl Exchange for Host {
    fn progress(&self, params: &str) {
        if let Some((began, release)) = &self.gate {
            began.send(()).unwrap();
            release.lock().unwrap().recv().unwrap();
        }
        self.heard.push(format!("{} progress {params}", self.id));
    }

    fn finish(mut self: Box<Self>, outcome: Finish<'_>) {
        self.finished = true;
        let text = match outcome {
            Finish::Result(r) => r.to_owned(),
            Finish::Error(e) => format!("error {e}"),
            Finish::Failed(e) => format!("failed {e}"),
        };
        self.heard.push(format!("{} finish {text}", self.id));
    }

    fn session(&self) -> u64 {
        self.session
    }

    fn is(&self, session: u64, host_id: &str) -> bool {
        self.heard.is_asked.fetch_add(1, Ordering::Relaxed);
        session == self.session && host_id == self.id
    }

    fn key(&self) -> Option<RequestKey> {
        self.keyed.then(|| RequestKey::new(self.session, &self.id))
    }

    fn server_request(&self, request: ServerRequest) {
        self.heard
            .push(format!("{} asked {}", self.id, request.method));
    }

    fn related(&self, line: &[u8]) {
        let text = String::from_utf8_lossy(line).trim_end().to_owned();
        self.heard.push(format!("{} related {text}", self.id));
    }
}

impl Drop for Host {
    fn drop(&mut self) {
        if !self.finished {
            self.heard.push(format!("{} dropped", self.id));
        }
    }
}

fn request_line(id: u64) -> String {
    format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"method\":\"tools/call\",\"params\":{{}}}}\n")
}

fn send(conn: &Arc<Connection>, host: Host) -> u64 {
    let id = conn.next_id();
    let msg = crate::outbound::Outbound::request(id, "tools/call", request_line(id));
    conn.forward(msg, host.forward());
    id
}

#[test]
fn hosts_are_written_to_with_no_table_lock_held() {
    let (conn, _) = connection();
    let heard = Arc::new(Heard::default());
    let id = send(&conn, Host::new(1, "\"h1\"", true, &heard));
    let lines = [
        format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{id},\"progress\":1}}}}"),
        r#"{"jsonrpc":"2.0","id":"s1","method":"sampling/createMessage","params":{}}"#.to_owned(),
        r#"{"jsonrpc":"2.0","method":"notifications/elicitation/complete","params":{}}"#.to_owned(),
        format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{\"ok\":true}}}}"),
    ];
    for line in &lines {
        conn.receive(line.as_bytes(), None).unwrap();
    }
    let events = heard.events();
    assert_eq!(events.len(), 4, "{events:?}");
    assert_eq!(
        events[0],
        r#""h1" progress {"progressToken":"host-token","progress":1}"#
    );
    assert_eq!(events[1], r#""h1" asked sampling/createMessage"#);
    assert!(events[2].starts_with(r#""h1" related "#), "{events:?}");
    assert_eq!(events[3], r#""h1" finish {"ok":true}"#);
    assert_eq!(*heard.held.lock().unwrap(), [0, 0, 0, 0]);
    assert_eq!(conn.in_flight(), 0);
}

#[test]
fn an_answer_that_comes_while_progress_is_delivered_follows_it() {
    let (conn, _) = connection();
    let heard = Arc::new(Heard::default());
    let (began_tx, began) = mpsc::channel();
    let (release, release_rx) = mpsc::channel();
    let mut host = Host::new(1, "\"h1\"", true, &heard);
    host.gate = Some((began_tx, Mutex::new(release_rx)));
    let id = send(&conn, host);
    let reader = Arc::clone(&conn);
    let progress = std::thread::spawn(move || {
        let line = format!("{{\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{{\"progressToken\":{id},\"progress\":1}}}}");
        reader.receive(line.as_bytes(), None).unwrap();
    });
    began.recv_timeout(Duration::from_secs(10)).unwrap();
    // The answer comes on another thread while progress is still being delivered: the
    // table lets it in at once (nothing waits on a host), and the host hears it after.
    let answer = format!("{{\"jsonrpc\":\"2.0\",\"id\":{id},\"result\":{{}}}}");
    conn.receive(answer.as_bytes(), None).unwrap();
    assert_eq!(conn.in_flight(), 0);
    assert!(heard.events().is_empty(), "{:?}", heard.events());
    release.send(()).unwrap();
    progress.join().unwrap();
    let events = heard.events();
    assert_eq!(events.len(), 2, "{events:?}");
    assert!(events[0].contains("progress"), "{events:?}");
    assert_eq!(events[1], r#""h1" finish {}"#);
}

#[test]
fn a_cancel_finds_exactly_its_request_among_many() {
    let (conn, sent) = connection();
    let heard = Arc::new(Heard::default());
    let mut ids = Vec::new();
    for n in 0..60u64 {
        let session = n % 3 + 1;
        // Every fourth one's host request may change, so it names no key.
        let host = Host::new(session, &format!("\"h{n}\""), n % 4 != 0, &heard);
        ids.push(send(&conn, host));
    }
    sent.0.lock().unwrap().clear();

    // A keyed request is found by its key: the one request asked is the one cancelled.
    assert!(conn.cancel_for(2, "\"h7\"", Some("gone")));
    assert_eq!(heard.is_asked.load(Ordering::Relaxed), 1);
    assert_eq!(heard.events(), [r#""h7" dropped"#]);
    assert_eq!(conn.in_flight(), 59);
    let cancelled = format!(
        r#"{{"jsonrpc":"2.0","method":"notifications/cancelled","params":{{"requestId":{},"reason":"gone"}}}}"#,
        ids[7]
    );
    assert_eq!(*sent.0.lock().unwrap(), [cancelled]);

    // One without a key is found too; a wrong session or an unknown id finds nothing.
    assert!(conn.cancel_for(1, "\"h12\"", None));
    assert!(!conn.cancel_for(1, "\"h7\"", None));
    assert!(!conn.cancel_for(3, "\"h1\"", None));
    assert!(!conn.cancel_for(2, "\"h7\"", None));
    assert_eq!(conn.in_flight(), 58);
    assert_eq!(heard.events(), [r#""h7" dropped"#, r#""h12" dropped"#]);

    // A session's end cancels its requests, keyed or not, and no other.
    let ended = conn.cancel_session(3, "session ended");
    assert_eq!(ended, 20);
    assert_eq!(conn.in_flight(), 38);
    let events = heard.events();
    assert_eq!(events.len(), 22, "{events:?}");
    for event in &events[2..] {
        let n: u64 = event[2..].split('"').next().unwrap().parse().unwrap();
        assert_eq!(n % 3 + 1, 3, "{event}");
        assert!(event.contains("finish failed"), "{event}");
    }
    assert!(
        conn.cancel_for(1, "\"h0\"", None),
        "session 1 keeps its requests"
    );
}
