"""Upstream credentials per caller, against real OAuth peers: oidc-provider as the authorization
server (oauth/authorization_server.mjs) and an MCP server on the official Python SDK that only
takes its tokens (oauth/protected_server.py); logins are done by a scripted browser
(oauth_peers.Browser).

- The peers themselves, with the official SDK's OAuth client: two users, two subjects.
- Through Manifold (marked `needs_broker`, run with MANIFOLD_BROKER=1): each API key's caller
  is asked to connect (a tool error holding the link, or -32042 for a host that declares URL
  elicitation), logs in, and then sees their own subject; a revoked connection asks again; an
  expired access token is refreshed unseen; three replicas sharing tokens through Redis
  refresh once; a shared login is every caller's.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import REQUEST_TIMEOUT_S, START_TIMEOUT_S
from oauth_peers import AuthorizationServer, Browser, ProtectedServer, query_of
from replicas import free_port

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def tmp() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="manifold-oauth-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def auth_server(tmp: Path) -> Iterator[AuthorizationServer]:
    server = AuthorizationServer(tmp)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def upstream(tmp: Path, auth_server: AuthorizationServer) -> Iterator[ProtectedServer]:
    server = ProtectedServer(tmp, auth_server.issuer)
    try:
        yield server
    finally:
        server.stop()


# --- the peers directly, with the official SDK's OAuth client -------------------------------


class MemoryTokens:
    """The SDK client's token storage, in memory (one per user)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def sdk_oauth(server_url: str, user: str) -> tuple[OAuthClientProvider, MemoryTokens]:
    """The SDK's OAuth client for `user`: its browser step is a scripted browser that logs in
    as `user` and stops at the redirect URI (where nothing listens), reading the code there."""
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    landed: dict[str, str] = {}

    def log_in(authorization_url: str) -> None:
        url = Browser().visit(authorization_url, user, stop_at=lambda u: u.startswith(redirect_uri))
        assert isinstance(url, str), f"the login did not come back to the client: {url.status_code} {url.text[:500]}"
        landed.update(query_of(url))

    async def redirect(authorization_url: str) -> None:
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            await anyio.to_thread.run_sync(log_in, authorization_url)

    async def callback() -> AuthorizationCodeResult:
        assert "code" in landed, f"no code in the redirect: {landed}"
        return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"), iss=landed.get("iss"))

    storage = MemoryTokens()
    metadata = OAuthClientMetadata(
        client_name="interop-direct",
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(server_url, metadata, storage, redirect, callback), storage


async def whoami_as(server_url: str, user: str) -> tuple[str, MemoryTokens]:
    auth, storage = sdk_oauth(server_url, user)
    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
        async with streamable_http_client(server_url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], read_timeout_seconds=REQUEST_TIMEOUT_S) as s:
                with anyio.fail_after(START_TIMEOUT_S):
                    await s.initialize()
                result = await s.call_tool("whoami", {})
    assert not result.is_error, result
    return result.content[0].text, storage


async def test_oauth_peers_direct(auth_server: AuthorizationServer, upstream: ProtectedServer) -> None:
    # Without a token: the SDK's 401, pointing at the protected resource metadata, which names
    # the authorization server.
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
        r = await http.post(upstream.url, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert r.status_code == 401, r.text
        challenge = r.headers["www-authenticate"]
        assert challenge.startswith("Bearer") and "resource_metadata=" in challenge, challenge
        metadata_url = challenge.split('resource_metadata="', 1)[1].split('"', 1)[0]
        prm = (await http.get(metadata_url)).json()
    assert prm["resource"] == upstream.url, prm
    assert prm["authorization_servers"] == [auth_server.issuer], prm

    alice, alice_tokens = await whoami_as(upstream.url, "alice")
    bob, bob_tokens = await whoami_as(upstream.url, "bob")
    assert (alice, bob) == ("alice", "bob")
    # Each login registered a client of its own and got a refresh token with its access token.
    assert alice_tokens.client and bob_tokens.client
    assert alice_tokens.client.client_id != bob_tokens.client.client_id
    assert alice_tokens.tokens and alice_tokens.tokens.refresh_token
    assert [g["account"] for g in auth_server.grants("authorization_code")][-2:] == ["alice", "bob"]
