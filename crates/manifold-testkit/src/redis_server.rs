//! A real `redis-server` for tests, on a free loopback port, with no persistence.
//!
//! Standard library only, so that the benchmark tool can use it without the test-only
//! dependencies. Tests use the panicking methods; the load generator (`manifold-load policy`)
//! the `try_` ones.
//!
//! The binary is `$MANIFOLD_REDIS_SERVER`, else `redis-server` on `PATH`, else the one that
//! `bash tests/redis/install.sh` unpacks under `tests/.cache/redis` (run with its own
//! libraries).

use std::fs::{self, File};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// How long a server may take to accept connections after it is started.
const READY_WITHIN: Duration = Duration::from_secs(10);
/// The largest bulk reply read (an `INFO` answer is a few kB).
const MAX_BULK: usize = 1 << 20;

/// A running `redis-server`, killed when dropped.
#[derive(Debug)]
pub struct RedisServer {
    binary: PathBuf,
    /// `LD_LIBRARY_PATH` for a binary unpacked from Debian's packages.
    library_path: Option<PathBuf>,
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
}

impl RedisServer {
    /// Starts a server on a free 127.0.0.1 port and waits until it answers `PING`.
    pub fn start() -> RedisServer {
        Self::try_start().unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::start`], or why there is no server (no binary, or it would not start).
    pub fn try_start() -> Result<RedisServer, String> {
        let (binary, library_path) = find_binary()?;
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "manifold-redis-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let mut server = RedisServer {
            binary,
            library_path,
            port: 0,
            dir,
            child: None,
        };
        // The port is free when chosen but could be taken before the server binds it: try
        // another one then.
        let mut last_error = String::new();
        for _ in 0..5 {
            server.port = free_port()?;
            match server.spawn() {
                Ok(()) => return Ok(server),
                Err(e) => last_error = e,
            }
        }
        Err(format!("redis-server did not start: {last_error}"))
    }

    /// The binary that runs.
    pub fn binary(&self) -> &Path {
        &self.binary
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server and waits for it to exit (a paused one too). The port is kept for [`Self::restart`].
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts the server again on the same port (empty: nothing is persisted).
    pub fn restart(&mut self) {
        self.stop();
        // The port was just released; give it a moment if something still holds it.
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            match self.spawn() {
                Ok(()) => return,
                Err(e) if Instant::now() > deadline => {
                    panic!("redis-server did not restart on port {}: {e}", self.port)
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Freezes the server (SIGSTOP): connections stay open but nothing is answered.
    pub fn pause(&self) {
        self.signal("-STOP");
    }

    /// Lets a paused server go on (SIGCONT).
    pub fn resume(&self) {
        self.signal("-CONT");
    }

    fn signal(&self, signal: &str) {
        let Some(child) = &self.child else {
            panic!("redis-server is not running")
        };
        let status = Command::new("kill")
            .arg(signal)
            .arg(child.id().to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill {signal} failed: {status}");
    }

    /// Sends one command and returns its reply as text: a simple string, an error (`-ERR ..`),
    /// an integer, or a bulk string (`(nil)` for none). Arrays are not supported.
    pub fn command(&self, args: &[&str]) -> String {
        self.try_command(args).unwrap_or_else(|e| panic!("{e}"))
    }

    /// [`Self::command`], or why it failed. Every read and write is bounded.
    pub fn try_command(&self, args: &[&str]) -> Result<String, String> {
        let io = |e: std::io::Error| format!("redis-server on port {}: {e}", self.port);
        let mut stream = TcpStream::connect(("127.0.0.1", self.port)).map_err(io)?;
        stream.set_read_timeout(Some(READY_WITHIN)).map_err(io)?;
        stream.set_write_timeout(Some(READY_WITHIN)).map_err(io)?;
        let mut request = format!("*{}\r\n", args.len());
        for arg in args {
            request.push_str(&format!("${}\r\n{arg}\r\n", arg.len()));
        }
        stream.write_all(request.as_bytes()).map_err(io)?;
        let mut reader = BufReader::new(stream);
        let mut line = String::new();
        reader.read_line(&mut line).map_err(io)?;
        let line = line.trim_end();
        match line.split_at(line.len().min(1)) {
            ("+", rest) | (":", rest) => Ok(rest.to_owned()),
            ("-", _) => Ok(line.to_owned()),
            ("$", len) => match len.parse::<usize>() {
                Ok(len) if len <= MAX_BULK => {
                    let mut bulk = vec![0; len + 2];
                    reader.read_exact(&mut bulk).map_err(io)?;
                    bulk.truncate(len);
                    Ok(String::from_utf8_lossy(&bulk).into_owned())
                }
                Ok(len) => Err(format!("a reply of {len} bytes from redis-server")),
                Err(_) => Ok("(nil)".to_owned()),
            },
            _ => Err(format!("unsupported reply from redis-server: {line:?}")),
        }
    }

    /// Starts the server on `self.port` and waits until it answers, or says why not.
    fn spawn(&mut self) -> Result<(), String> {
        let log_path = self.dir.join("redis.log");
        let log = File::create(&log_path).map_err(|e| format!("{}: {e}", log_path.display()))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let mut command = Command::new(&self.binary);
        command
            .arg("--port")
            .arg(self.port.to_string())
            .args(["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err);
        if let Some(lib) = &self.library_path {
            command.env("LD_LIBRARY_PATH", lib);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot run {}: {e}", self.binary.display()))?;
        let deadline = Instant::now() + READY_WITHIN;
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                let log = fs::read_to_string(&log_path).unwrap_or_default();
                return Err(format!(
                    "exited with {status} on port {}:\n{log}",
                    self.port
                ));
            }
            if ping(self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!(
                    "no answer on port {} within {READY_WITHIN:?}",
                    self.port
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.stop();
        let _ = fs::remove_dir_all(&self.dir);
    }
}

fn ping(port: u16) -> bool {
    let Ok(mut stream) =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
    else {
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

/// A port free on 127.0.0.1 a moment ago.
pub(crate) fn free_port() -> Result<u16, String> {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| format!("no free port on 127.0.0.1: {e}"))
}

/// A key prefix no other test (nor another run of this one) uses: `test`, this process's id
/// and the clock's nanoseconds, so that tests sharing a server share no keys.
pub fn unique_prefix(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    format!("{test}-{}-{nanos}", std::process::id())
}

/// The binary, and the library directory it needs when it is the unpacked one.
fn find_binary() -> Result<(PathBuf, Option<PathBuf>), String> {
    if let Some(path) = std::env::var_os("MANIFOLD_REDIS_SERVER") {
        let path = PathBuf::from(path);
        if !path.is_file() {
            return Err(format!(
                "MANIFOLD_REDIS_SERVER is {}, which is not a file",
                path.display()
            ));
        }
        return Ok((path, None));
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let candidate = dir.join("redis-server");
            if candidate.is_file() {
                return Ok((candidate, None));
            }
        }
    }
    let missing = "redis-server not found: run `bash tests/redis/install.sh` from the repository \
                   root (or set MANIFOLD_REDIS_SERVER to a redis-server binary)";
    let root = workspace_root().ok_or(missing)?;
    let unpacked = root.join("tests/.cache/redis");
    let binary = unpacked.join("usr/bin/redis-server");
    if !binary.exists() {
        return Err(missing.to_owned());
    }
    // usr/lib/<arch>-linux-gnu, whatever the architecture.
    let library_path = fs::read_dir(unpacked.join("usr/lib"))
        .ok()
        .and_then(|entries| {
            entries
                .filter_map(Result::ok)
                .map(|e| e.path())
                .find(|p| p.is_dir() && p.to_string_lossy().ends_with("-linux-gnu"))
        });
    Ok((binary, library_path))
}

/// The directory holding `tests/redis/install.sh`: above the crate being tested (cargo names it
/// to the processes it runs), else above this crate, which lives in the same workspace.
fn workspace_root() -> Option<PathBuf> {
    let start = std::env::var_os("CARGO_MANIFEST_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")));
    start
        .ancestors()
        .find(|dir| dir.join("tests/redis/install.sh").is_file())
        .map(Path::to_path_buf)
}
