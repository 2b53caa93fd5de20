"""Several Manifold replicas behind a real HAProxy (deploy/haproxy/haproxy.cfg, as shipped),
sharing a real redis-server, in front of one HTTP fixture upstream: what the replica tests
drive with the official Python SDK client. Every process listens on a loopback port picked
here and is stopped by its own process id.

HAProxy and redis-server are Debian's, unpacked under tests/.cache by tests/replicas/install.sh
and tests/redis/install.sh (the test command runs both).
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

from conftest import REPO, START_TIMEOUT_S, _stop, _toml_str, _wait_for_line, manifold_bin

HAPROXY_CFG = REPO / "deploy" / "haproxy" / "haproxy.cfg"
CACHE = REPO / "tests" / ".cache"


def _unpacked(tool: str, package_dir: str, sub: str) -> tuple[str, dict[str, str]]:
    """The command for `tool` and the environment it runs with: on PATH, or unpacked."""
    on_path = subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True, text=True)
    if on_path.returncode == 0 and on_path.stdout.strip():
        return on_path.stdout.strip(), dict(os.environ)
    root = CACHE / package_dir
    libs = sorted((root / "usr" / "lib").glob("*-linux-gnu"))
    binary = root / sub / tool
    if not binary.exists():
        raise AssertionError(f"{tool} is not installed: run bash tests/{package_dir if package_dir == 'redis' else 'replicas'}/install.sh")
    env = dict(os.environ)
    if libs:
        env["LD_LIBRARY_PATH"] = str(libs[0])
    return str(binary), env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def fixture_bin() -> Path:
    return manifold_bin().parent / "manifold-fixture"


class Redis:
    """A redis-server of the test's own, with the few commands the tests read it with."""

    def __init__(self, tmp: Path):
        binary, env = _unpacked("redis-server", "redis", "usr/bin")
        self.port = free_port()
        self.log = tmp / "redis.log"
        self.proc = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
            stdout=self.log.open("w"),
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(tmp),
        )
        _wait_for_line(self.proc, r"Ready to accept connections", self.log, "redis-server")
        self.url = f"redis://127.0.0.1:{self.port}"

    def command(self, *args: str | bytes) -> object:
        """One command in RESP; the reply decoded (bulk strings as bytes)."""
        with socket.create_connection(("127.0.0.1", self.port), timeout=5) as s:
            out = b"*%d\r\n" % len(args)
            for a in args:
                b = a if isinstance(a, bytes) else str(a).encode()
                out += b"$%d\r\n%s\r\n" % (len(b), b)
            s.sendall(out)
            reader = s.makefile("rb")
            return _read_reply(reader)

    def stop(self) -> None:
        _stop(self.proc)


def _read_reply(r) -> object:
    line = r.readline().rstrip(b"\r\n")
    kind, rest = line[:1], line[1:]
    if kind == b"+":
        return rest.decode()
    if kind == b"-":
        raise AssertionError(f"redis error: {rest.decode()}")
    if kind == b":":
        return int(rest)
    if kind == b"$":
        n = int(rest)
        if n < 0:
            return None
        data = r.read(n + 2)
        return data[:-2]
    if kind == b"*":
        n = int(rest)
        if n < 0:
            return None
        return [_read_reply(r) for _ in range(n)]
    raise AssertionError(f"unexpected redis reply {line!r}")


class Fixture:
    """The in-repo fixture server over Streamable HTTP: the upstream every replica shares."""

    def __init__(self, tmp: Path, *args: str):
        self.log = tmp / "fixture.stderr"
        self.proc = subprocess.Popen(
            [str(fixture_bin()), "--name", "fx", "--http", "127.0.0.1:0", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
        )
        m = _wait_for_line(self.proc, r"listening on 127\.0\.0\.1:(\d+)", self.log, "manifold-fixture")
        self.url = f"http://127.0.0.1:{m.group(1)}/mcp"

    def stop(self) -> None:
        _stop(self.proc)


class Cluster:
    """`n` Manifold replicas on `config` (TOML text without [sessions]) behind HAProxy.

    `store` is "redis" or "memory"; `sticky` keeps the shipped HAProxy configuration's session
    affinity, or removes it (every request balanced round robin).
    """

    def __init__(self, tmp: Path, config: str, *, store: str, sticky: bool, redis: Redis, n: int = 3):
        self.tmp = tmp
        self.redis = redis
        self.n = n
        self.ports = [free_port() for _ in range(n)]
        prefix = f"replicas-{os.getpid()}-{time.monotonic_ns()}"
        sessions = ""
        if store == "redis":
            sessions = f'[sessions]\nstore = "redis"\nredis_url = {_toml_str(redis.url)}\nkey_prefix = "{prefix}"\n\n'
        self.prefix = prefix
        self.config = tmp / f"manifold-{store}-{'sticky' if sticky else 'rr'}.toml"
        self.config.write_text(sessions + config)
        self.procs: list[subprocess.Popen | None] = [None] * n
        run = time.monotonic_ns()
        self.logs = [tmp / f"replica{i + 1}-{store}-{run}.stderr" for i in range(n)]
        for i in range(n):
            self.start(i)
        for i in range(n):
            self.wait_ready(i)
        self.lb_port = free_port()
        cfg = HAPROXY_CFG.read_text()
        if not sticky:
            cfg = "\n".join(line for line in cfg.splitlines() if not line.strip().startswith("stick"))
        if n < 3:
            cfg = "\n".join(
                line for line in cfg.splitlines() if not any(f"replica{k}" in line for k in range(n + 1, 4))
            )
        self.haproxy_cfg = tmp / f"haproxy-{run}.cfg"
        self.haproxy_cfg.write_text(cfg.rstrip("\n") + "\n")
        binary, env = _unpacked("haproxy", "haproxy", "usr/sbin")
        env["MANIFOLD_LB_BIND"] = f"127.0.0.1:{self.lb_port}"
        for i in range(3):
            env[f"MANIFOLD_REPLICA_{i + 1}"] = f"127.0.0.1:{self.ports[min(i, n - 1)]}"
        self.haproxy_log = tmp / f"haproxy-{run}.stderr"
        self.haproxy = subprocess.Popen(
            [binary, "-db", "-f", str(self.haproxy_cfg)],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.haproxy_log.open("w"),
            env=env,
        )
        self.url = f"http://127.0.0.1:{self.lb_port}/mcp"
        self._wait_lb()

    def start(self, i: int) -> None:
        self.procs[i] = subprocess.Popen(
            [
                str(manifold_bin()),
                "serve",
                "--config",
                str(self.config),
                "--listen",
                f"127.0.0.1:{self.ports[i]}",
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.logs[i].open("a"),
            cwd=str(REPO),
            env={**os.environ, "MANIFOLD_LOG": os.environ.get("MANIFOLD_LOG", "info")},
        )

    def wait_ready(self, i: int) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            proc = self.procs[i]
            if proc is not None and proc.poll() is not None:
                raise AssertionError(f"replica {i + 1} exited:\n{self.logs[i].read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[i]}/readyz", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"replica {i + 1} never became ready:\n{self.logs[i].read_text()[-4000:]}")

    def _wait_lb(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.haproxy.poll() is not None:
                raise AssertionError(f"haproxy exited:\n{self.haproxy_log.read_text()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{self.lb_port}/healthz", timeout=2) as r:
                    if r.status == 200:
                        # Every replica passed its first checks (rise 2, inter 500ms).
                        time.sleep(1.2)
                        return
            except OSError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"haproxy never answered:\n{self.haproxy_log.read_text()[-4000:]}")

    def kill(self, i: int, sig: int = signal.SIGKILL) -> None:
        proc = self.procs[i]
        assert proc is not None
        proc.send_signal(sig)

    def wait_exit(self, i: int, timeout: float = 60) -> int:
        proc = self.procs[i]
        assert proc is not None
        return proc.wait(timeout=timeout)

    def operations(self, i: int) -> int:
        """How many host requests replica `i` answered (its own /metrics)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ports[i]}/metrics", timeout=5) as r:
            text = r.read().decode()
        total = 0
        for m in re.finditer(r"^mcp_server_operation_duration_seconds_count\{[^}]*\} (\d+)", text, re.M):
            total += int(m.group(1))
        return total

    def replica_id(self, i: int) -> str:
        """The id replica `i` shares sessions under (from its log)."""
        ids = re.findall(r"sessions kept in Redis replica=\"?([0-9a-f]{16})", self.logs[i].read_text())
        assert ids, "the replica logs its id"
        return ids[-1]

    def stop(self) -> None:
        _stop(self.haproxy)
        for proc in self.procs:
            if proc is not None:
                _stop(proc)

    def logs_tail(self) -> str:
        parts = []
        for i, log in enumerate(self.logs):
            text = log.read_text(errors="replace") if log.exists() else ""
            parts.append(f"--- replica {i + 1} ---\n{text[-3000:]}")
        text = self.haproxy_log.read_text(errors="replace") if self.haproxy_log.exists() else ""
        parts.append(f"--- haproxy ---\n{text[-3000:]}")
        return "\n".join(parts)
