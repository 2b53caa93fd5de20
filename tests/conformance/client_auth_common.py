"""What the two clients of the conformance suite's `auth/*` client scenarios share.

The suite runs a client command with the mock MCP server's URL as its last argument and the
scenario in the environment:

    MCP_CONFORMANCE_SCENARIO          the scenario's name (auth/metadata-default, ...)
    MCP_CONFORMANCE_CONTEXT           JSON, for scenarios that hand the client credentials
    MCP_CONFORMANCE_PROTOCOL_VERSION  the revision the mock server speaks (2025-11-25, 2026-07-28)

A client passes a scenario when it exits 0 and the suite's checks hold no failure. Both clients
here exit with UNSUPPORTED, after printing UNSUPPORTED_MARK and the reason on stderr, when the
scenario asks for something they have no way to do; the suite keeps the client's stderr beside
its checks, where the harness finds the mark and prints the result as "n/a", not as a failure.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlsplit

import anyio
import httpx2

from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

# The exit status of a client that has no way to play the scenario, and the start of the line
# it prints on stderr then.
UNSUPPORTED = 3
UNSUPPORTED_MARK = "conformance client: unsupported scenario:"

# The revisions at which a client talks the stateless era (server/discover, no session).
MODERN_REVISIONS = ("2026-07-28",)

# The one tool every mock MCP server of the auth scenarios lists.
EXPECTED_TOOL = "test-tool"

# The client id the suite expects when a server supports Client ID Metadata Documents
# (auth/basic-cimd): the suite compares the authorization request's client_id with this URL.
CONFORMANCE_CLIENT_METADATA_URL = "https://conformance-test.local/client-metadata.json"

# Scenarios of the extensions and what they need, by name. Everything else under auth/ is an
# authorization code scenario.
CLIENT_CREDENTIALS_SECRET = ("auth/client-credentials-basic",)
CLIENT_CREDENTIALS_KEY = ("auth/client-credentials-jwt",)
ENTERPRISE = ("auth/enterprise-managed-authorization", "auth/cross-app-access-complete-flow")
# Neither the SDK nor Manifold has a way to do these: DPoP-bound tokens, and a workload's own
# JWT presented with the JWT-bearer grant (workload identity federation).
WITHOUT_A_CLIENT = ("auth/dpop", "auth/dpop-nonce", "auth/wif-jwt-bearer")

# Every bound of the clients, in seconds: one HTTP request, and a whole MCP exchange.
HTTP_TIMEOUT = 10.0
EXCHANGE_TIMEOUT = 25.0
# How often a host that waits for the expected tool lists the tools again.
LIST_AGAIN = 0.1


@dataclass
class Invocation:
    """How the suite ran the client."""

    url: str
    scenario: str
    context: dict[str, Any]
    revision: str

    @property
    def modern(self) -> bool:
        return self.revision in MODERN_REVISIONS


def invocation() -> Invocation:
    """Reads the suite's arguments and environment; exits 2 with a message when they are wrong."""
    if len(sys.argv) < 2:
        fail_usage("the mock server's URL must be the last argument")
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    if not scenario:
        fail_usage("MCP_CONFORMANCE_SCENARIO is not set")
    context: dict[str, Any] = {}
    raw = os.environ.get("MCP_CONFORMANCE_CONTEXT")
    if raw:
        try:
            context = json.loads(raw)
        except json.JSONDecodeError as error:
            fail_usage(f"MCP_CONFORMANCE_CONTEXT is not JSON: {error}")
        if not isinstance(context, dict):
            fail_usage("MCP_CONFORMANCE_CONTEXT is not a JSON object")
    revision = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2025-11-25")
    return Invocation(url=sys.argv[-1], scenario=scenario, context=context, revision=revision)


def unsupported(scenario: str, why: str) -> int:
    print(f"{UNSUPPORTED_MARK} {scenario}: {why}", file=sys.stderr)
    return UNSUPPORTED


def reason(error: BaseException) -> str:
    """What went wrong, with the task groups of the SDK's transports unwrapped."""
    while isinstance(error, BaseExceptionGroup) and len(error.exceptions) == 1:
        error = error.exceptions[0]
    if isinstance(error, BaseExceptionGroup):
        return "; ".join(reason(inner) for inner in error.exceptions)
    return f"{type(error).__name__}: {error}"


def fail_usage(message: str) -> None:
    print(f"error: {message}", file=sys.stderr)
    sys.exit(2)


def needs(context: dict[str, Any], *keys: str) -> list[str]:
    """The values of KEYS in the scenario's context; exits 2 naming the first one missing."""
    values = []
    for key in keys:
        value = context.get(key)
        if not isinstance(value, str) or not value:
            fail_usage(f"MCP_CONFORMANCE_CONTEXT has no '{key}'")
        values.append(value)
    return values


def redirect_target(response: httpx2.Response) -> dict[str, str]:
    """The query of a redirect's Location (code, state, iss), or an error naming what came."""
    location = response.headers.get("location")
    if response.status_code not in (301, 302, 303, 307, 308) or not location:
        raise RuntimeError(f"expected a redirect from {response.request.url}, got {response.status_code}")
    query = parse_qs(urlsplit(location).query)
    return {key: values[0] for key, values in query.items() if values}


async def act_as_host(
    url: str,
    modern: bool,
    auth: httpx2.Auth | None = None,
    headers: dict[str, str] | None = None,
    patience: float = 0.0,
    log_in_again: Callable[[str], Awaitable[None]] | None = None,
    while_waiting: Callable[[], Awaitable[None]] | None = None,
    hopeless: Callable[[], str | None] | None = None,
) -> None:
    """Acts as a host at URL: lists the tools, waiting up to PATIENCE seconds for the expected
    one to be listed (an aggregator lists an upstream's tools once it has connected to it;
    WHILE_WAITING runs between two looks), and calls it (else the first one listed). The wait
    ends sooner when HOPELESS says why the tool can no longer come. A call refused for want of
    an authorization is made once more after LOG_IN_AGAIN, given what the refusal said. Raises
    when a step fails, so that the process exits non-zero."""
    http = create_mcp_http_client(headers=headers, auth=auth, timeout=httpx2.Timeout(HTTP_TIMEOUT))
    transport = streamable_http_client(url, http_client=http)
    # A 2026-07-28 server is stateless: the version is adopted without the initialize handshake.
    # No response cache: a list asked again must reach the server.
    mode = "2026-07-28" if modern else "legacy"
    async with http, Client(transport, mode=mode, read_timeout_seconds=HTTP_TIMEOUT, cache=None) as client:
        name = await expected_tool(client, patience, while_waiting, hopeless)
        refusal = await call(client, name)
        if refusal is not None and log_in_again is not None:
            print(f"{name} refused ({refusal}); logging in again", file=sys.stderr)
            await log_in_again(refusal)
            refusal = await call(client, name)
        if refusal is not None:
            raise RuntimeError(f"{name} failed: {refusal}")


async def expected_tool(
    client: Client,
    patience: float,
    while_waiting: Callable[[], Awaitable[None]] | None = None,
    hopeless: Callable[[], str | None] | None = None,
) -> str:
    deadline = time.monotonic() + patience
    seen = None
    while True:
        names = [tool.name for tool in (await client.list_tools()).tools]
        if names != seen:
            print(f"tools: {names}")
            seen = names
        if EXPECTED_TOOL in names:
            return EXPECTED_TOOL
        why = hopeless() if hopeless is not None and not names else None
        if why is not None or time.monotonic() >= deadline:
            if names:
                return names[0]
            if why is not None:
                raise RuntimeError(f"no tool was listed: {why}")
            raise RuntimeError("no tool was listed" + (f" within {patience:.0f} s" if patience else ""))
        if while_waiting is not None:
            await while_waiting()
        await anyio.sleep(LIST_AGAIN)


async def call(client: Client, name: str) -> str | None:
    """Calls NAME; None when it succeeded, else what the failure said."""
    try:
        result = await client.call_tool(name, {})
    except Exception as error:  # an MCP error answer, or the transport's
        return reason(error)
    texts = [getattr(block, "text", block.type) for block in result.content]
    if result.is_error:
        return f"error result: {texts}"
    print(f"called {name}: {texts}")
    return None
