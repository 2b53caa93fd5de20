//! A server that hosts reach over HTTP: started as a child process, found listening on a
//! loopback port, and always ended, whatever path (success, error, panic) drops the last
//! handle: SIGTERM (how both Manifold and the peer are asked to stop), then SIGKILL after a
//! bounded grace. Blocking reads and writes on its connections are bounded by socket
//! timeouts; the watchdog bounds the server's whole life.

use std::collections::HashSet;
use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::watchdog::{Marker, Watchdog};
use super::Limits;

/// How much of the server's stderr an error message quotes.
const POLL: Duration = Duration::from_millis(5);
/// `st` of a listening socket in /proc/net/tcp.
const LISTEN: &str = "0A";

/// How to start a server that listens on 127.0.0.1 with a port of the OS's choosing.
#[derive(Debug, Clone)]
pub struct ServerSpec {
    pub label: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The MCP endpoint's path: `/mcp` for Manifold, `/` for the peer.
    pub path: String,
    /// Variables set in the environment it inherits (HAProxy reads its addresses there).
    pub env: Vec<(String, String)>,
    /// The child's stderr goes here, so a failure can quote what the server said.
    pub log: PathBuf,
}

pub struct HttpServer {
    spec: ServerSpec,
    limits: Limits,
    child: Arc<Mutex<Child>>,
    pid: u32,
    addr: SocketAddr,
    watchdog: Watchdog,
    /// Never marked: socket timeouts bound each call, the watchdog only the lifetime.
    _marker: Marker,
}

impl HttpServer {
    /// Starts the server and waits (at most `limits.stall`) until it listens.
    pub fn launch(spec: &ServerSpec, limits: Limits) -> Result<Arc<Self>> {
        let log = File::create(&spec.log)
            .with_context(|| format!("cannot create {}", spec.log.display()))?;
        let child = Command::new(&spec.program)
            .args(&spec.args)
            .envs(spec.env.iter().map(|(k, v)| (k, v)))
            // No server started here reads stdin; a closed one keeps a stray read harmless.
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", spec.program.display()))?;
        let pid = child.id();
        let child = Arc::new(Mutex::new(child));
        let (watchdog, marker) =
            match Watchdog::spawn(Arc::clone(&child), limits.stall, limits.lifetime) {
                Ok(pair) => pair,
                Err(e) => {
                    end(&child, pid, limits.exit_grace);
                    bail!("{}: cannot watch the server: {e}", spec.label);
                }
            };
        let mut server = Self {
            spec: spec.clone(),
            limits,
            child,
            pid,
            addr: SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)),
            watchdog,
            _marker: marker,
        };
        // From here on, dropping `server` ends the child.
        server.addr = server.await_listening()?;
        Ok(Arc::new(server))
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn path(&self) -> &str {
        &self.spec.path
    }

    pub fn limits(&self) -> Limits {
        self.limits
    }

    /// Where the server's stderr goes.
    pub fn log(&self) -> &std::path::Path {
        &self.spec.log
    }

    /// Polls /proc until the process has a listening TCP socket; it must be on 127.0.0.1.
    fn await_listening(&self) -> Result<SocketAddr> {
        let began = Instant::now();
        let polls = self.limits.stall.as_millis() / POLL.as_millis() + 1;
        for _ in 0..polls {
            let mut addrs = listening(self.pid)?;
            if addrs.len() > 1 {
                // Manifold serving its admin address too (`--console`): that one is named in
                // its log, and the other is where hosts go.
                let admin = admin_in_log(&self.spec.log);
                addrs.retain(|a| Some(*a) != admin);
            }
            if addrs.len() > 1 {
                bail!("{} listens on {addrs:?}: which one?", self.spec.label);
            }
            if let Some(&addr) = addrs.first() {
                if !addr.ip().is_loopback() {
                    bail!(
                        "{} listens on {addr}, not on loopback only",
                        self.spec.label
                    );
                }
                return Ok(addr);
            }
            let exited = self
                .child
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .try_wait()
                .map(|s| s.is_some())
                .unwrap_or(true);
            if exited {
                return Err(self.failed("exited before listening"));
            }
            if began.elapsed() >= self.limits.stall {
                break;
            }
            std::thread::sleep(POLL);
        }
        Err(self.failed(&format!("did not listen within {:?}", self.limits.stall)))
    }

    /// An error naming the server, why it failed, and the end of its stderr.
    pub fn failed(&self, what: &str) -> anyhow::Error {
        let killed = self
            .watchdog
            .fired()
            .then(|| "it lived longer than the run's limit".to_owned());
        super::failure(&self.spec.label, &self.spec.log, self.pid, what, killed)
    }
}

impl Drop for HttpServer {
    fn drop(&mut self) {
        self.watchdog.stop();
        end(&self.child, self.pid, self.limits.exit_grace);
    }
}

/// SIGTERM, at most `grace` to exit, then SIGKILL; always reaped.
fn end(child: &Mutex<Child>, pid: u32, grace: Duration) {
    let mut child = child.lock().unwrap_or_else(PoisonError::into_inner);
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    let target = i32::try_from(pid)
        .ok()
        .and_then(rustix::process::Pid::from_raw);
    if let Some(target) = target {
        let _ = rustix::process::kill_process(target, rustix::process::Signal::TERM);
    }
    let start = Instant::now();
    let polls = grace.as_millis() / POLL.as_millis() + 1;
    for _ in 0..polls {
        match child.try_wait() {
            Ok(Some(_)) | Err(_) => return,
            Ok(None) if start.elapsed() >= grace => break,
            Ok(None) => std::thread::sleep(POLL),
        }
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The addresses of the TCP sockets that `pid` listens on, from /proc: its socket inodes,
/// then the LISTEN rows of its network namespace's tables.
fn listening(pid: u32) -> Result<Vec<SocketAddr>> {
    let mut found = Vec::new();
    let Ok(fds) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return Ok(found);
    };
    // Bounded by the process's descriptor count.
    let inodes: HashSet<String> = fds
        .flatten()
        .filter_map(|fd| std::fs::read_link(fd.path()).ok())
        .filter_map(|link| {
            let link = link.to_string_lossy();
            let inode = link.strip_prefix("socket:[")?.strip_suffix(']')?;
            Some(inode.to_owned())
        })
        .collect();
    for table in ["tcp", "tcp6"] {
        let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")) else {
            continue;
        };
        for row in text.lines().skip(1) {
            let f: Vec<&str> = row.split_whitespace().collect();
            let (Some(local), Some(state), Some(inode)) = (f.get(1), f.get(3), f.get(9)) else {
                continue;
            };
            if *state != LISTEN || !inodes.contains(*inode) {
                continue;
            }
            let addr = parse_proc_addr(local)
                .with_context(|| format!("cannot read {local:?} in /proc/{pid}/net/{table}"))?;
            if !found.contains(&addr) {
                found.push(addr);
            }
        }
    }
    Ok(found)
}

/// `0100007F:1F90` (127.0.0.1:8080 as a little-endian machine prints it) or the 32-digit
/// IPv6 form.
fn parse_proc_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let words: Vec<u32> = (0..ip.len() / 8)
        .map(|i| {
            ip.get(i * 8..i * 8 + 8)
                .and_then(|w| u32::from_str_radix(w, 16).ok())
        })
        .collect::<Option<_>>()?;
    // /proc prints each 32-bit word of the address as a number in the machine's byte order.
    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
    match bytes.len() {
        4 => Some(SocketAddr::from((
            <[u8; 4]>::try_from(bytes.as_slice()).ok()?,
            port,
        ))),
        16 => Some(SocketAddr::from((
            <[u8; 16]>::try_from(bytes.as_slice()).ok()?,
            port,
        ))),
        _ => None,
    }
}

/// The admin address a Manifold logged (`admin listening on ADDR: ...`), if any yet.
fn admin_in_log(log: &std::path::Path) -> Option<SocketAddr> {
    let text = std::fs::read_to_string(log).ok()?;
    let (_, after) = text.split_once("admin listening on ")?;
    let word = after.split_whitespace().next()?;
    word.trim_end_matches(':').parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_addresses() {
        let v4 = parse_proc_addr("0100007F:1F90").unwrap();
        assert_eq!(v4, "127.0.0.1:8080".parse().unwrap());
        let v6 = parse_proc_addr("00000000000000000000000001000000:0050").unwrap();
        assert_eq!(v6, "[::1]:80".parse().unwrap());
        assert!(parse_proc_addr("zz:1").is_none());
    }

    #[test]
    fn finds_this_process_listening() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let want = listener.local_addr().unwrap();
        // Other tests of this process may listen too.
        assert!(listening(std::process::id()).unwrap().contains(&want));
    }

    #[test]
    fn the_admin_address_is_the_one_its_log_names() {
        let dir = std::env::temp_dir().join(format!("manifold-load-admin-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let log = dir.join("manifold.stderr");
        std::fs::write(
            &log,
            "INFO listening on 127.0.0.1:41000\n\
             INFO admin listening on 127.0.0.1:41001: http://127.0.0.1:41001/metrics, /healthz\n",
        )
        .unwrap();
        assert_eq!(admin_in_log(&log), Some("127.0.0.1:41001".parse().unwrap()));
        std::fs::write(&log, "INFO listening on 127.0.0.1:41000\n").unwrap();
        assert_eq!(admin_in_log(&log), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
