//! A stdio MCP server driven as a host would drive it: spawn, handshake, request/response.
//! Other transports (HTTP) slot in as further implementations of the same calls.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use serde_json::Value;

/// A running server over stdio.
pub struct StdioTarget {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: BufReader<ChildStdout>,
    line: String,
    next_id: u64,
}

impl StdioTarget {
    /// Spawns `program args` and completes the initialize handshake.
    pub fn start(program: &str, args: &[String]) -> anyhow::Result<Self> {
        let mut child = Command::new(program)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .with_context(|| format!("cannot start {program}"))?;
        let stdin = child.stdin.take().context("no stdin")?;
        let stdout = BufReader::new(child.stdout.take().context("no stdout")?);
        let mut t = Self {
            child,
            stdin: Some(stdin),
            stdout,
            line: String::new(),
            next_id: 1,
        };
        let init = r#"{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"manifold-load","version":"0"}}"#;
        t.call_raw("initialize", init)?;
        t.send_line(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#)?;
        Ok(t)
    }

    fn send_line(&mut self, line: &str) -> anyhow::Result<()> {
        let stdin = self.stdin.as_mut().context("stdin closed")?;
        stdin.write_all(line.as_bytes())?;
        stdin.write_all(b"\n")?;
        stdin.flush()?;
        Ok(())
    }

    /// Sends a request without waiting; returns its id.
    pub fn send(&mut self, method: &str, params: &str) -> anyhow::Result<u64> {
        let id = self.next_id;
        self.next_id += 1;
        let line =
            format!(r#"{{"jsonrpc":"2.0","id":{id},"method":"{method}","params":{params}}}"#);
        self.send_line(&line)?;
        Ok(id)
    }

    /// Reads until a response arrives (notifications are skipped); returns its length.
    pub fn read_response(&mut self) -> anyhow::Result<usize> {
        loop {
            self.line.clear();
            if self.stdout.read_line(&mut self.line)? == 0 {
                bail!("the server closed its output");
            }
            // Responses carry "result" or "error" and no "method"; a cheap check suffices here.
            if !self.line.contains("\"method\"") {
                if self.line.contains("\"error\"") {
                    bail!("error response: {}", self.line.trim_end());
                }
                return Ok(self.line.len());
            }
        }
    }

    /// One request, waiting for its response; returns the round trip.
    pub fn call_raw(&mut self, method: &str, params: &str) -> anyhow::Result<Duration> {
        let start = Instant::now();
        self.send(method, params)?;
        self.read_response()?;
        Ok(start.elapsed())
    }

    /// The response text of one request (for checks, not timing).
    pub fn call_value(&mut self, method: &str, params: &str) -> anyhow::Result<Value> {
        self.send(method, params)?;
        self.read_response()?;
        Ok(serde_json::from_str(&self.line)?)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for StdioTarget {
    /// Closes stdin (the polite stop), then kills after a bound: never leaves a process behind.
    fn drop(&mut self) {
        drop(self.stdin.take());
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
