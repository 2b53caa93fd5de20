//! The fixture server in its HTTP mode, started by the test as an HTTP upstream.

use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::spawn_listening;
use crate::process::{fixture_bin, WAIT};

/// The fixture server in its HTTP mode, as an HTTP upstream.
pub struct FixtureHttp {
    pub child: Child,
    pub port: u16,
    pub stderr: Arc<Mutex<String>>,
    args: Vec<String>,
}

impl FixtureHttp {
    /// Starts `manifold-fixture --http 127.0.0.1:PORT ARGS` (port 0: a free one).
    pub fn start(port: u16, args: &[&str]) -> FixtureHttp {
        let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
        let mut cmd = Command::new(fixture_bin());
        cmd.arg("--http")
            .arg(format!("127.0.0.1:{port}"))
            .args(&args);
        let (child, port, stderr) = spawn_listening(cmd, "the fixture", "127.0.0.1");
        FixtureHttp {
            child,
            port,
            stderr,
            args,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://127.0.0.1:{}{path}", self.port)
    }

    pub fn stderr(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Kills the server (an upstream that becomes unreachable).
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// A new server on the same port, which knows none of the old one's sessions.
    pub fn restart(&mut self) {
        self.kill();
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let until = Instant::now() + WAIT;
        loop {
            // The port may take a moment to be free again.
            let attempt = std::panic::catch_unwind(|| FixtureHttp::start(self.port, &args));
            match attempt {
                Ok(new) => {
                    *self = new;
                    return;
                }
                Err(_) if Instant::now() < until => std::thread::sleep(Duration::from_millis(100)),
                Err(e) => std::panic::resume_unwind(e),
            }
        }
    }
}

impl Drop for FixtureHttp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
