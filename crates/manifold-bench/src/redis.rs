//! A `redis-server` of the load generator's own, for the Redis limit backend: on a free
//! 127.0.0.1 port, with no persistence (`--save "" --appendonly no`), its files in the scratch
//! directory, and always killed when dropped (success, error or panic). Also the little of
//! the Redis protocol needed to ask it what it was asked to do (`INFO commandstats`).
//!
//! The binary is `$MANIFOLD_REDIS_SERVER`, else `redis-server` on `PATH`, else the one that
//! `bash tests/redis/install.sh` unpacks under `tests/.cache/redis` of the repository (run
//! with its own libraries), as for the Redis tests.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

/// How long a server may take to answer `PING` after it is started.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// Ports tried: a free port can be taken by someone else before the server binds it.
const PORT_TRIES: usize = 5;
/// Bounds every read and write of the `INFO` client.
const IO_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest `INFO` answer read.
const MAX_INFO: usize = 1 << 20;

/// A `redis-server` binary, and how it was found.
#[derive(Debug, Clone)]
pub struct Binary {
    pub path: PathBuf,
    /// `LD_LIBRARY_PATH` for the binary unpacked from Debian's packages.
    pub library_path: Option<PathBuf>,
    pub found_by: &'static str,
}

impl Binary {
    /// The binary, or why there is none (a sentence for the report).
    pub fn find() -> std::result::Result<Self, String> {
        if let Some(path) = std::env::var_os("MANIFOLD_REDIS_SERVER") {
            let path = PathBuf::from(path);
            if !path.is_file() {
                return Err(format!(
                    "MANIFOLD_REDIS_SERVER is {}, which is not a file",
                    path.display()
                ));
            }
            return Ok(Self {
                path,
                library_path: None,
                found_by: "MANIFOLD_REDIS_SERVER",
            });
        }
        if let Some(paths) = std::env::var_os("PATH") {
            for dir in std::env::split_paths(&paths) {
                let candidate = dir.join("redis-server");
                if candidate.is_file() {
                    return Ok(Self {
                        path: candidate,
                        library_path: None,
                        found_by: "PATH",
                    });
                }
            }
        }
        let missing = "redis-server not found: not in MANIFOLD_REDIS_SERVER, not on PATH, and \
                       not unpacked by `bash tests/redis/install.sh` (run it from the \
                       repository root)";
        let Some(unpacked) = repository_roots()
            .map(|root| root.join("tests/.cache/redis"))
            .find(|dir| dir.join("usr/bin/redis-server").is_file())
        else {
            return Err(missing.to_owned());
        };
        // usr/lib/<arch>-linux-gnu, whatever the architecture.
        let library_path = std::fs::read_dir(unpacked.join("usr/lib"))
            .ok()
            .and_then(|entries| {
                entries
                    .filter_map(std::result::Result::ok)
                    .map(|e| e.path())
                    .find(|p| p.is_dir() && p.to_string_lossy().ends_with("-linux-gnu"))
            });
        Ok(Self {
            path: unpacked.join("usr/bin/redis-server"),
            library_path,
            found_by: "tests/.cache/redis (tests/redis/install.sh)",
        })
    }
}

/// Directories that may be the repository's root (holding `tests/redis/install.sh`): above
/// the working directory (`bench/run.sh` runs from the root), above this executable (under
/// `target/`), and above the crate this was built from.
fn repository_roots() -> impl Iterator<Item = PathBuf> {
    let starts = [
        std::env::current_dir().ok(),
        std::env::current_exe().ok(),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
    ];
    starts
        .into_iter()
        .flatten()
        .flat_map(|start| start.ancestors().map(Path::to_path_buf).collect::<Vec<_>>())
        .filter(|dir| dir.join("tests/redis/install.sh").is_file())
}

/// A running `redis-server`, killed when dropped.
pub struct RedisServer {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl RedisServer {
    /// Starts `binary` on a free 127.0.0.1 port with its files in `dir`, and waits until it
    /// answers `PING`.
    pub fn start(binary: &Binary, dir: &Path) -> Result<Self> {
        std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
        let mut last = None;
        for _ in 0..PORT_TRIES {
            match Self::spawn(binary, dir, free_port()?) {
                Ok(server) => return Ok(server),
                Err(e) => last = Some(e),
            }
        }
        Err(last.unwrap_or_else(|| anyhow::anyhow!("no port tried")))
            .with_context(|| format!("{} did not start", binary.path.display()))
    }

    fn spawn(binary: &Binary, dir: &Path, port: u16) -> Result<Self> {
        let log = dir.join(format!("redis-{port}.log"));
        let out = File::create(&log).with_context(|| format!("cannot create {}", log.display()))?;
        let err = out.try_clone()?;
        let mut command = Command::new(&binary.path);
        command
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no", "--daemonize", "no"])
            .arg("--dir")
            .arg(dir)
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err);
        if let Some(lib) = &binary.library_path {
            command.env("LD_LIBRARY_PATH", lib);
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot run {}", binary.path.display()))?;
        // From here on, dropping `server` kills the child.
        let mut server = Self { child, port, log };
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = server.child.try_wait() {
                bail!("exited with {status} on port {port}: {}", server.log_tail());
            }
            if ping(port) {
                return Ok(server);
            }
            if Instant::now() >= deadline {
                bail!("no answer on port {port} within {READY_WITHIN:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Calls of each command since the server started (`INFO commandstats`), by name
    /// (`evalsha`, `eval`, ...).
    pub fn command_calls(&self) -> Result<BTreeMap<String, u64>> {
        let info = self.command(&["INFO", "commandstats"])?;
        let mut calls = BTreeMap::new();
        // cmdstat_evalsha:calls=12,usec=34,...
        for line in info.lines() {
            let Some((name, fields)) = line
                .strip_prefix("cmdstat_")
                .and_then(|rest| rest.split_once(':'))
            else {
                continue;
            };
            let count = fields
                .split(',')
                .find_map(|f| f.strip_prefix("calls="))
                .and_then(|n| n.trim().parse().ok());
            if let Some(count) = count {
                calls.insert(name.to_owned(), count);
            }
        }
        Ok(calls)
    }

    /// One command; its reply, which must be a bulk string or a simple string.
    fn command(&self, args: &[&str]) -> Result<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", self.port))
            .with_context(|| format!("cannot connect to redis-server on port {}", self.port))?;
        stream.set_read_timeout(Some(IO_TIMEOUT))?;
        stream.set_write_timeout(Some(IO_TIMEOUT))?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes())?;
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        reader.read_line(&mut head)?;
        let head = head.trim_end();
        if let Some(simple) = head.strip_prefix('+') {
            return Ok(simple.to_owned());
        }
        let Some(len) = head
            .strip_prefix('$')
            .and_then(|n| n.parse::<usize>().ok())
            .filter(|n| *n <= MAX_INFO)
        else {
            bail!("redis-server answered {:?} to {args:?}", head);
        };
        let mut body = vec![0; len + 2];
        reader.read_exact(&mut body)?;
        body.truncate(len);
        Ok(String::from_utf8_lossy(&body).into_owned())
    }

    /// The end of the server's log, for an error.
    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let start = text.len().saturating_sub(1000);
        let start = (start..text.len())
            .find(|&i| text.is_char_boundary(i))
            .unwrap_or(text.len());
        text[start..].to_owned()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        // Nothing is persisted: no reason to ask politely.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Whether a Redis server answers `PING` on `port` of 127.0.0.1.
fn ping(port: u16) -> bool {
    let addr = ([127, 0, 0, 1], port).into();
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(200)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0u8; 7];
    let ok = stream.read_exact(&mut reply).is_ok() && &reply == b"+PONG\r\n";
    let _ = stream.shutdown(Shutdown::Both);
    ok
}

fn free_port() -> Result<u16> {
    let listener = TcpListener::bind("127.0.0.1:0").context("no free port on 127.0.0.1")?;
    Ok(listener.local_addr()?.port())
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn a_server_that_is_found_starts_answers_and_is_killed() {
        let Ok(binary) = Binary::find() else {
            eprintln!("SKIPPED: no redis-server");
            return;
        };
        let dir = std::env::temp_dir().join(format!("manifold-load-redis-{}", std::process::id()));
        let server = RedisServer::start(&binary, &dir).unwrap();
        assert!(server.url().starts_with("redis://127.0.0.1:"));
        let calls = server.command_calls().unwrap();
        // INFO itself is counted once it has run.
        let again = server.command_calls().unwrap();
        assert!(
            again.get("info").copied().unwrap_or(0) >= 1,
            "{calls:?} {again:?}"
        );
        let pid = server.pid();
        drop(server);
        assert!(!Path::new(&format!("/proc/{pid}")).exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
