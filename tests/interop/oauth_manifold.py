"""Manifold as the OAuth client of the protected upstream, for the upstream credential tests:
its config (team `eng`, two named API keys, the upstream `forge`), the process with its admin
address, a caller's session of the official client, and a person's consent in a browser.
"""

from __future__ import annotations

import base64
import os
import re
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import AsyncExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession, MCPError
from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from conftest import REPO, REQUEST_TIMEOUT_S, START_TIMEOUT_S, Inbox, _stop, _toml_str, _wait_for_line, manifold_bin
from oauth_peers import AuthorizationServer, Browser, ProtectedServer

ALICE_KEY = "oauth-interop-alice-key-0001"
BOB_KEY = "oauth-interop-bob-key-0002"
ADMIN_TOKEN = "oauth-interop-admin-token"
#: base64 of 32 bytes: the key tokens are sealed with in Redis.
SEAL_KEY = base64.b64encode(bytes(range(32))).decode()
#: The exposed name of the protected upstream's tools (upstream key "forge").
WHOAMI = "forge__whoami"
#: A consent link in a message meant for a person.
CONSENT_LINK = re.compile(r"https?://[^\s\"'<>()\[\]]+/oauth/connect/[^\s\"'<>()\[\]]+")


def manifold_config(upstream: ProtectedServer, *, identity: str = "per_user", credentials: str = "") -> str:
    """Manifold in front of the protected upstream as `forge`, for team `eng` with two named
    API keys (principals key:alice and key:bob), with an admin address."""
    return (
        "[server]\n"
        'admin = "127.0.0.1:0"\n'
        f'metrics_token = "{ADMIN_TOKEN}"\n\n'
        "[credentials]\n"
        'refresh_before = "1s"\n'
        f"{credentials}\n"
        "[teams.eng]\n"
        f'api_keys = [{{ name = "alice", key = "{ALICE_KEY}" }}, {{ name = "bob", key = "{BOB_KEY}" }}]\n\n'
        "[upstreams.forge]\n"
        f"url = {_toml_str(upstream.url)}\n"
        "[upstreams.forge.auth]\n"
        'mode = "oauth"\n'
        f'identity = "{identity}"\n'
        "dynamic_registration = true\n"
    )


class Manifold:
    """`manifold serve --listen 127.0.0.1:0` on a config, with its admin address: its MCP URL,
    base URL (where browsers reach it) and admin URL."""

    def __init__(self, tmp: Path, config: str):
        bin_ = manifold_bin()
        if not os.access(bin_, os.X_OK):
            pytest.fail(f"Manifold binary {bin_} not found (cargo build -p manifold --bins)", pytrace=False)
        run = time.monotonic_ns()
        path = tmp / f"manifold-{run}.toml"
        path.write_text(config)
        self.log = tmp / f"manifold-{run}.stderr"
        self.proc = subprocess.Popen(
            [str(bin_), "serve", "--config", str(path), "--listen", "127.0.0.1:0"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.log.open("w"),
            cwd=str(REPO),
            env={**os.environ, "MANIFOLD_LOG": "info"},
        )
        try:
            # Both lines say "listening on": the host listener's names its Streamable HTTP URL.
            host = _wait_for_line(self.proc, r"listening on 127\.0\.0\.1:(\d+): Streamable", self.log, "manifold")
            admin = _wait_for_line(self.proc, r"admin listening on 127\.0\.0\.1:(\d+)", self.log, "manifold admin")
        except BaseException:
            self.stop()
            raise
        self.base = f"http://127.0.0.1:{host.group(1)}"
        self.url = f"{self.base}/mcp"
        self.admin = f"http://127.0.0.1:{admin.group(1)}"

    async def admin_request(self, method: str, path: str, body: Any = None) -> httpx2.Response:
        async with httpx2.AsyncClient(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
            return await http.request(
                method, f"{self.admin}{path}", json=body, headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}
            )

    def stop(self) -> None:
        _stop(self.proc)
        print(f"--- manifold stderr ---\n{self.log.read_text(errors='replace')[-6000:]}", file=sys.stderr)


@contextmanager
def manifold_serving(tmp: Path, config: str) -> Iterator[Manifold]:
    manifold = Manifold(tmp, config)
    try:
        yield manifold
    finally:
        manifold.stop()


async def caller_session(
    stack: AsyncExitStack, url: str, key: str, *, url_elicitation: bool = False, inbox: Inbox | None = None
) -> ClientSession:
    """An initialized session of the official client as the caller of `key`, open until
    `stack` closes, handing `inbox` what is not an answer. With `url_elicitation`, the host
    declares elicitation (form and URL modes)."""

    async def decline(_ctx: Any, _params: Any) -> types.ElicitResult:
        return types.ElicitResult(action="decline")

    http = await stack.enter_async_context(
        httpx2.AsyncClient(headers={"x-api-key": key}, timeout=httpx2.Timeout(30, read=120))
    )
    streams = await stack.enter_async_context(streamable_http_client(url, http_client=http))
    s = await stack.enter_async_context(
        ClientSession(
            streams[0],
            streams[1],
            read_timeout_seconds=REQUEST_TIMEOUT_S,
            elicitation_callback=decline if url_elicitation else None,
            message_handler=inbox,
        )
    )
    with anyio.fail_after(START_TIMEOUT_S):
        await s.initialize()
    return s


async def whoami_on(s: ClientSession) -> Any:
    """whoami's result, or the MCPError it was refused with."""
    try:
        return await s.call_tool(WHOAMI, {})
    except MCPError as e:
        return e


async def call_whoami(url: str, key: str, *, url_elicitation: bool = False) -> Any:
    """whoami in a session of its own as the caller of `key`."""
    async with AsyncExitStack() as stack:
        return await whoami_on(await caller_session(stack, url, key, url_elicitation=url_elicitation))


def subject_of(result: Any) -> str:
    assert not isinstance(result, MCPError), f"refused: {result.code} {result.message} {result.data}"
    assert not result.is_error, f"tool error: {result.content}"
    return result.content[0].text


def link_in_tool_error(result: Any) -> str:
    """The consent link of a host that declares no URL elicitation: a tool error's text."""
    assert not isinstance(result, MCPError), f"expected a tool error, got {result.code} {result.message}"
    assert result.is_error, f"expected a tool error holding the consent link, got {result.content}"
    text = " ".join(c.text for c in result.content if getattr(c, "text", None))
    m = CONSENT_LINK.search(text)
    assert m, f"no consent link in the tool error: {text!r}"
    return m.group(0).rstrip(".,;:")


def elicitation_of(result: Any) -> dict[str, Any]:
    """The URL elicitation of a host that declares it: error -32042's data."""
    assert isinstance(result, MCPError), f"expected error -32042, got a result: {result}"
    assert result.code == -32042, f"expected -32042, got {result.code} {result.message}"
    elicitations = result.data["elicitations"]
    assert len(elicitations) == 1 and elicitations[0]["mode"] == "url", elicitations
    assert CONSENT_LINK.fullmatch(elicitations[0]["url"]), elicitations[0]
    return elicitations[0]


async def consent(link: str, manifold: Manifold, auth: AuthorizationServer, key: str, user: str) -> Any:
    """A person opens the consent link in a fresh browser, proves who they are to Manifold with
    `key` (the API key form) and logs in at the authorization server as `user`; the last page."""
    answers = {manifold.base: key, auth.issuer: user}
    with anyio.fail_after(REQUEST_TIMEOUT_S * 2):
        return await anyio.to_thread.run_sync(lambda: Browser().visit(link, answers))


def assert_connected(page: Any, manifold: Manifold) -> None:
    assert page.status_code == 200, f"{page.status_code} at {page.url}: {page.text[:1000]}"
    assert page.url.startswith(f"{manifold.base}/oauth/callback"), page.url


# --- the other kinds of host ----------------------------------------------------------------


@asynccontextmanager
async def stateless_client(url: str, key: str) -> AsyncIterator[Client]:
    """The official client's high-level `Client` as a 2026-07-28 host (no handshake: every
    request carries its own `_meta`), as the caller of `key`."""
    async with httpx2.AsyncClient(headers={"x-api-key": key}, timeout=httpx2.Timeout(30, read=120)) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode="2026-07-28", read_timeout_seconds=REQUEST_TIMEOUT_S, cache=None) as c:
            yield c


def stdio_config(upstream: ProtectedServer) -> str:
    """A stdio Manifold (one local user, no API keys) in front of the protected upstream as
    `forge`; consent callbacks on a free loopback port."""
    return (
        "[credentials]\n"
        'callback_listen = "127.0.0.1:0"\n\n'
        "[upstreams.forge]\n"
        f"url = {_toml_str(upstream.url)}\n"
        "[upstreams.forge.auth]\n"
        'mode = "oauth"\n'
        'identity = "per_user"\n'
        "dynamic_registration = true\n"
    )


@asynccontextmanager
async def stdio_manifold(tmp: Path, config: str) -> AsyncIterator[tuple[ClientSession, str]]:
    """`manifold serve --config ...` over stdio (no `--listen`), started by the official SDK's
    stdio client: an initialized session, and the base URL of its consent callback listener
    (read from its log)."""
    bin_ = manifold_bin()
    if not os.access(bin_, os.X_OK):
        pytest.fail(f"Manifold binary {bin_} not found (cargo build -p manifold --bins)", pytrace=False)
    run = time.monotonic_ns()
    path = tmp / f"manifold-stdio-{run}.toml"
    path.write_text(config)
    log = tmp / f"manifold-stdio-{run}.stderr"
    params = StdioServerParameters(
        command=str(bin_), args=["serve", "--config", str(path)], env={**os.environ, "MANIFOLD_LOG": "info"}
    )
    with log.open("w") as errlog:
        try:
            async with stdio_client(params, errlog=errlog) as (read, write):
                async with ClientSession(read, write, read_timeout_seconds=REQUEST_TIMEOUT_S) as s:
                    with anyio.fail_after(START_TIMEOUT_S):
                        await s.initialize()
                        callbacks = await _logged(log, r"consent callbacks on (http://127\.0\.0\.1:\d+)/oauth/callback")
                    yield s, callbacks
        finally:
            print(f"--- stdio manifold stderr ---\n{log.read_text(errors='replace')[-6000:]}", file=sys.stderr)


async def _logged(log: Path, pattern: str) -> str:
    """The first group of the first line of `log` matching `pattern` (waits; the caller bounds it)."""
    regex = re.compile(pattern)
    while True:
        m = regex.search(log.read_text(errors="replace"))
        if m:
            return m.group(1)
        await anyio.sleep(0.05)


# --- what an operator sees ------------------------------------------------------------------

#: One series of the Prometheus text format: name, labels, value.
SERIES = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)$")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_series(text: str) -> list[tuple[str, dict[str, str], float]]:
    """Every series of a /metrics page."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SERIES.match(line)
        assert m, f"not a Prometheus series: {line!r}"
        out.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))
    return out


async def metrics_of(manifold: Manifold) -> list[tuple[str, dict[str, str], float]]:
    r = await manifold.admin_request("GET", "/metrics")
    assert r.status_code == 200, r.text
    return metric_series(r.text)


def cli_args(manifold: Manifold, *args: str) -> list[str]:
    """`manifold ARGS... --admin ADDR`, for the running Manifold's admin address."""
    return [str(manifold_bin()), *args, "--admin", manifold.admin.removeprefix("http://")]


def cli(manifold: Manifold, *args: str) -> subprocess.CompletedProcess[str]:
    """`manifold ARGS... --admin ADDR --token T`, run to its end (bounded)."""
    return subprocess.run(
        [*cli_args(manifold, *args), "--token", ADMIN_TOKEN],
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=REQUEST_TIMEOUT_S,
        cwd=str(REPO),
    )
