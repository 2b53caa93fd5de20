"""Shared setup of the interoperability tests: where Manifold and the real upstream servers are,
the config that fronts them, and a helper that opens an official-SDK client session on Manifold.

The peers are installed by tests/interop/install.sh (pinned in requirements.txt and
package-lock.json); Manifold is `$MANIFOLD_BIN`, or else `<repo>/target/debug/manifold`.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent

#: server-everything's stdio entry point (`node <it> stdio`), from tests/interop/package-lock.json.
EVERYTHING_JS = HERE / "node_modules" / "@modelcontextprotocol" / "server-everything" / "dist" / "index.js"

#: Longest any one request may take before the test fails instead of hanging.
REQUEST_TIMEOUT_S = 20.0
#: Longest opening a session (spawning Manifold and both upstreams, initialize) may take.
START_TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def anyio_backend() -> str:
    # Module scope, so that a test module may share one Manifold process between its tests.
    return "asyncio"


#: stderr files of the Manifold processes currently running.
_LIVE_STDERR: list[Path] = []


@pytest.fixture(autouse=True)
def _print_manifold_stderr_after_each_test():
    """Copies the tail of every running Manifold's stderr to the test's stderr, which pytest
    shows next to a failure (also for a process shared by several tests)."""
    yield
    for path in list(_LIVE_STDERR):
        text = path.read_text(errors="replace") if path.exists() else ""
        print(f"--- manifold stderr (so far) ---\n{text[-8000:] or '<empty>'}", file=sys.stderr)


def manifold_bin() -> Path:
    env = os.environ.get("MANIFOLD_BIN")
    return Path(env) if env else REPO / "target" / "debug" / "manifold"


def time_server_bin() -> Path:
    """`mcp-server-time` from <repo>/.venv, or else from the venv running the tests."""
    in_repo = REPO / ".venv" / "bin" / "mcp-server-time"
    if in_repo.exists():
        return in_repo
    return Path(sysconfig.get_path("scripts")) / "mcp-server-time"


def _toml_str(s: str | Path) -> str:
    # A JSON string is a valid TOML basic string (same escapes for anything a path holds).
    return json.dumps(str(s))


def config_text() -> str:
    return (
        "[upstreams.everything]\n"
        'command = "node"\n'
        f'args = [{_toml_str(EVERYTHING_JS)}, "stdio"]\n'
        "\n"
        "[upstreams.time]\n"
        f"command = {_toml_str(time_server_bin())}\n"
        'args = ["--local-timezone", "UTC"]\n'
    )


def _wait_for_line(proc: subprocess.Popen, pattern: str, log: Path, what: str) -> re.Match:
    """Reads the process's stderr log until a line matches (bounded)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    regex = re.compile(pattern)
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace") if log.exists() else ""
        m = regex.search(text)
        if m:
            return m
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"{what} did not start:\n{log.read_text(errors='replace')[-4000:]}")


def _stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@asynccontextmanager
async def _initialized(client: Any) -> AsyncIterator[ClientSession]:
    """An initialized session of the official client over `client`, one of the SDK's HTTP
    transport clients (Streamable HTTP or HTTP+SSE)."""
    async with client as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT_S) as session:
            with anyio.fail_after(START_TIMEOUT_S):
                await session.initialize()
            yield session


@contextmanager
def _serving_http(bin_: Path, config: Path, log: Path) -> Iterator[str]:
    """`manifold serve --listen` on a free loopback port: yields the port; stops it afterwards
    and prints the end of its log, which is what a failed test needs."""
    proc = subprocess.Popen(
        [str(bin_), "serve", "--config", str(config), "--listen", "127.0.0.1:0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        cwd=str(REPO),
        env={**os.environ, "MANIFOLD_LOG": "info"},
    )
    try:
        m = _wait_for_line(proc, r"listening on 127\.0\.0\.1:(\d+)", log, "manifold")
        yield m.group(1)
    finally:
        _stop(proc)
        print(f"--- manifold stderr ---\n{log.read_text(errors='replace')[-6000:]}", file=sys.stderr)


def _check_prerequisites() -> Path:
    missing = [str(p) for p in (EVERYTHING_JS, time_server_bin()) if not p.exists()]
    if missing:
        pytest.fail(
            "interop peers are not installed (run `bash tests/interop/install.sh`); missing: " + ", ".join(missing),
            pytrace=False,
        )
    bin_ = manifold_bin()
    if not os.access(bin_, os.X_OK):
        pytest.fail(
            f"Manifold binary {bin_} not found or not executable "
            "(build it with `cargo build -p manifold --bins`, or set MANIFOLD_BIN)",
            pytrace=False,
        )
    return bin_


@asynccontextmanager
async def manifold_session() -> AsyncIterator[tuple[ClientSession, types.InitializeResult]]:
    """`manifold serve --config <tmp.toml>` on `config_text()` under the official client,
    initialized.

    Manifold's stderr is printed when the test fails (pytest shows captured output then).
    """
    async with manifold_stdio(config_text()) as (session, init, _stderr):
        yield session, init


@asynccontextmanager
async def manifold_stdio(
    config_toml: str, args: Sequence[str] = ()
) -> AsyncIterator[tuple[ClientSession, types.InitializeResult, Path]]:
    """`manifold serve --config <tmp.toml> ARGS` on `config_toml` under the official client,
    initialized; also yields the file Manifold's stderr goes to (printed when the test fails).
    """
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-") as tmp:
        config = Path(tmp) / "manifold.toml"
        config.write_text(config_toml)
        stderr = Path(tmp) / "manifold.stderr"
        params = StdioServerParameters(
            command=str(bin_),
            args=["serve", "--config", str(config), *args],
            # The SDK passes only a safe subset of the environment (PATH and HOME included,
            # which Manifold needs to find `node`).
            cwd=str(REPO),
        )
        _LIVE_STDERR.append(stderr)
        try:
            with stderr.open("w") as errlog:
                async with stdio_client(params, errlog=errlog) as (read, write):
                    async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT_S) as session:
                        with anyio.fail_after(START_TIMEOUT_S):
                            init = await session.initialize()
                        yield session, init, stderr
        except BaseExceptionGroup as group:
            # The SDK's task groups wrap whatever the test raised: show the test's own failure
            # (assertion, MCPError, ...) when it is the only one.
            leaves = _leaves(group)
            if len(leaves) == 1:
                raise leaves[0] from None
            raise
        finally:
            _LIVE_STDERR.remove(stderr)
            text = stderr.read_text(errors="replace") if stderr.exists() else ""
            print(f"--- manifold stderr ---\n{text[-8000:] or '<empty>'}", file=sys.stderr)


def _leaves(group: BaseExceptionGroup) -> list[BaseException]:
    out: list[BaseException] = []
    for e in group.exceptions:
        out.extend(_leaves(e) if isinstance(e, BaseExceptionGroup) else [e])
    return out


async def _list_all(method: Callable[..., Awaitable[Any]], field: str) -> list[Any]:
    """Every item of a paginated list, following nextCursor until it is absent."""
    items: list[Any] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(1000):
        page = await method(params=types.PaginatedRequestParams(cursor=cursor) if cursor is not None else None)
        items.extend(getattr(page, field))
        cursor = page.next_cursor
        if cursor is None:
            return items
        assert cursor not in seen, f"{field}: nextCursor {cursor!r} repeats (pagination loops)"
        seen.add(cursor)
    raise AssertionError(f"{field}: more than 1000 pages")


async def all_tools(session: ClientSession) -> list[types.Tool]:
    return await _list_all(session.list_tools, "tools")


async def all_prompts(session: ClientSession) -> list[types.Prompt]:
    return await _list_all(session.list_prompts, "prompts")


async def all_resources(session: ClientSession) -> list[types.Resource]:
    return await _list_all(session.list_resources, "resources")


async def all_resource_templates(session: ClientSession) -> list[types.ResourceTemplate]:
    return await _list_all(session.list_resource_templates, "resource_templates")
