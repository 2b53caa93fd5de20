//! The real `manifold serve` over pipes, as one stdio host speaks to it.

use std::collections::{HashMap, VecDeque};
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::process::{admin_port_in, exit_within, manifold_bin, TempDir, WAIT};
use crate::requests::Requests;

/// A running `manifold serve` with its stdio.
pub struct Manifold {
    pub child: Child,
    stdin: Option<ChildStdin>,
    rx: Receiver<String>,
    /// Messages read while waiting for something else.
    backlog: VecDeque<Value>,
    /// The text of each response as it arrived, by id JSON, once `keep_raw_responses` asked.
    raw_responses: Option<HashMap<String, String>>,
    pub stderr: Arc<Mutex<String>>,
    stderr_reader: Option<std::thread::JoinHandle<()>>,
    next_id: u64,
    pub dir: TempDir,
}

impl Manifold {
    /// Starts `manifold serve` on `config` (TOML text).
    pub fn start(config: &str) -> Self {
        Self::start_args(config, &[])
    }

    /// Starts `manifold serve --config FILE EXTRA...`, where FILE holds `config` (TOML text) in
    /// a folder of its own.
    pub fn start_args(config: &str, extra: &[&str]) -> Self {
        let dir = TempDir::new("serve");
        let path = dir.write("manifold.toml", config);
        let mut args = vec!["serve", "--config", path.to_str().unwrap()];
        args.extend_from_slice(extra);
        Self::start_with(&args, dir)
    }

    pub fn start_with(args: &[&str], dir: TempDir) -> Self {
        Self::start_logging(args, dir, "info,manifold_upstream=debug")
    }

    /// [`Self::start_with`] logging at `level` (a `MANIFOLD_LOG` directive).
    pub fn start_logging(args: &[&str], dir: TempDir, level: &str) -> Self {
        let mut child = Command::new(manifold_bin())
            .args(args)
            .env("MANIFOLD_LOG", level)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("manifold starts");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        let stderr_text = Arc::new(Mutex::new(String::new()));
        let sink = Arc::clone(&stderr_text);
        let stderr = child.stderr.take().unwrap();
        let stderr_reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines() {
                let Ok(line) = line else { return };
                let mut s = sink.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
        let stdin = child.stdin.take();
        Manifold {
            child,
            stdin,
            rx,
            backlog: VecDeque::new(),
            raw_responses: None,
            stderr: stderr_text,
            stderr_reader: Some(stderr_reader),
            next_id: 1,
            dir,
        }
    }

    /// Starts and completes the handshake.
    pub fn ready(config: &str) -> Self {
        Self::ready_args(config, &[])
    }

    /// [`Self::start_args`], then the handshake, which must succeed.
    pub fn ready_args(config: &str, extra: &[&str]) -> Self {
        let mut m = Self::start_args(config, extra);
        let init = m.initialize();
        assert!(
            init.get("result").is_some(),
            "initialize failed: {init}; stderr:\n{}",
            m.stderr()
        );
        m
    }

    pub fn initialize(&mut self) -> Value {
        let r = self.request(
            "initialize",
            json!({"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}),
        );
        self.notify("notifications/initialized", json!({}));
        r
    }

    pub fn send_raw(&mut self, line: &str) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line.as_bytes()).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    /// Sends bytes that need not be UTF-8, as one line.
    pub fn send_raw_bytes(&mut self, line: &[u8]) {
        let stdin = self.stdin.as_mut().expect("stdin open");
        stdin.write_all(line).unwrap();
        stdin.write_all(b"\n").unwrap();
        stdin.flush().unwrap();
    }

    pub fn send(&mut self, msg: &Value) {
        self.send_raw(&msg.to_string());
    }

    pub fn notify(&mut self, method: &str, params: Value) {
        self.send(&json!({"jsonrpc": "2.0", "method": method, "params": params}));
    }

    /// Sends a request and returns its id without waiting.
    pub fn send_request(&mut self, method: &str, params: Value) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"jsonrpc": "2.0", "id": id, "method": method, "params": params}));
        id
    }

    /// Sends a request and waits for its response (other messages are kept).
    pub fn request(&mut self, method: &str, params: Value) -> Value {
        let id = self.send_request(method, params);
        self.response(&json!(id))
    }

    /// Waits for the response with `id`.
    pub fn response(&mut self, id: &Value) -> Value {
        self.wait_for(|m| m.get("id") == Some(id) && m.get("method").is_none())
    }

    /// The next message from Manifold, in order.
    pub fn recv(&mut self) -> Value {
        if let Some(m) = self.backlog.pop_front() {
            return m;
        }
        self.read_line(WAIT)
            .unwrap_or_else(|| panic!("no message within {WAIT:?}; stderr:\n{}", self.stderr()))
    }

    /// From now on keeps the text of every response as Manifold wrote it, for `raw_response`.
    pub fn keep_raw_responses(&mut self) {
        self.raw_responses.get_or_insert_with(HashMap::new);
    }

    /// Waits for the response with `id` and returns its text exactly as Manifold wrote it
    /// (`keep_raw_responses` must have been called before it arrived).
    pub fn raw_response(&mut self, id: &Value) -> String {
        self.response(id);
        self.raw_responses
            .as_mut()
            .and_then(|raw| raw.remove(&id.to_string()))
            .expect("keep_raw_responses() before the response arrived")
    }

    fn read_line(&mut self, wait: Duration) -> Option<Value> {
        match self.rx.recv_timeout(wait) {
            Ok(line) => {
                let message: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("stdout line is not JSON ({e}): {line}"));
                if let (Some(raw), Some(id), None) = (
                    self.raw_responses.as_mut(),
                    message.get("id"),
                    message.get("method"),
                ) {
                    raw.insert(id.to_string(), line);
                }
                Some(message)
            }
            Err(RecvTimeoutError::Timeout) => None,
            Err(RecvTimeoutError::Disconnected) => {
                panic!("manifold closed stdout; stderr:\n{}", self.stderr())
            }
        }
    }

    /// Waits for the first message matching `pred`; the others stay queued in order.
    pub fn wait_for(&mut self, pred: impl Fn(&Value) -> bool) -> Value {
        if let Some(pos) = self.backlog.iter().position(&pred) {
            return self.backlog.remove(pos).unwrap();
        }
        let until = Instant::now() + WAIT;
        loop {
            let left = until.saturating_duration_since(Instant::now());
            let Some(m) = self.read_line(left) else {
                panic!(
                    "no matching message within {WAIT:?}; seen {:?}; stderr:\n{}",
                    self.backlog,
                    self.stderr()
                )
            };
            if pred(&m) {
                return m;
            }
            self.backlog.push_back(m);
        }
    }

    /// Whether a message matching `pred` arrives within `wait` (kept in the backlog if so).
    pub fn sees_within(&mut self, wait: Duration, pred: impl Fn(&Value) -> bool) -> bool {
        if self.backlog.iter().any(&pred) {
            return true;
        }
        let until = Instant::now() + wait;
        while let Some(m) = self.read_line(until.saturating_duration_since(Instant::now())) {
            let hit = pred(&m);
            self.backlog.push_back(m);
            if hit {
                return true;
            }
        }
        false
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Waits for `text` on stderr: it is read on a thread of its own, so a line logged
    /// just before an answer may arrive just after it.
    pub fn assert_logged(&self, text: &str) {
        let until = Instant::now() + WAIT;
        while !self.stderr().contains(text) {
            assert!(
                Instant::now() < until,
                "never logged {text:?}:\n{}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The first line logged that `matches`, waiting (bounded) for it: the log is read by a
    /// thread of its own, so a line written just before an answer may not be in yet.
    pub fn logged_line(&self, matches: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + WAIT;
        loop {
            let stderr = self.stderr();
            if let Some(line) = stderr.lines().find(|l| matches(l)) {
                return line.to_owned();
            }
            assert!(
                Instant::now() < until,
                "never logged such a line:\n{stderr}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// `n` calls of `tool` sent at once, the i-th with `args(i)`; then every answer, in the
    /// order sent.
    pub fn calls_at_once(
        &mut self,
        tool: &str,
        n: usize,
        args: impl Fn(usize) -> Value,
    ) -> Vec<Value> {
        let ids: Vec<u64> = (0..n)
            .map(|i| self.send_request("tools/call", json!({"name": tool, "arguments": args(i)})))
            .collect();
        ids.into_iter()
            .map(|id| self.response(&json!(id)))
            .collect()
    }

    /// Closes stdin and waits (bounded) for Manifold to exit; returns its exit code.
    pub fn close(&mut self) -> Option<i32> {
        drop(self.stdin.take());
        self.wait_exit()
    }

    /// Waits (bounded) for Manifold to exit; returns its exit code.
    pub fn wait_exit(&mut self) -> Option<i32> {
        let Some(status) = exit_within(&mut self.child, WAIT) else {
            panic!(
                "manifold did not exit within {WAIT:?}; stderr:\n{}",
                self.stderr()
            );
        };
        // Everything it wrote to stderr has been read once the pipe ends; wait for that
        // briefly, in case something else still holds the pipe.
        let until = Instant::now() + Duration::from_secs(2);
        while self
            .stderr_reader
            .as_ref()
            .is_some_and(|r| !r.is_finished())
            && Instant::now() < until
        {
            std::thread::sleep(Duration::from_millis(10));
        }
        status.code()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The port of the admin listener (`--admin 127.0.0.1:0`), as Manifold logged it.
    pub fn admin_port(&self) -> u16 {
        admin_port_in(|| self.stderr())
    }
}

impl Drop for Manifold {
    fn drop(&mut self) {
        drop(self.stdin.take());
        if self.child.try_wait().ok().flatten().is_none() {
            let until = Instant::now() + Duration::from_secs(10);
            while Instant::now() < until && self.child.try_wait().ok().flatten().is_none() {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

impl Requests for Manifold {
    fn request(&mut self, method: &str, params: Value) -> Value {
        Manifold::request(self, method, params)
    }
}
