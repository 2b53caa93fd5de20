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
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import MCPError
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import REQUEST_TIMEOUT_S, START_TIMEOUT_S, Inbox, _toml_str
from oauth_manifold import (
    ALICE_KEY,
    BOB_KEY,
    CONSENT_LINK,
    SEAL_KEY,
    WHOAMI,
    assert_connected,
    call_whoami,
    caller_session,
    consent,
    elicitation_of,
    link_in_tool_error,
    manifold_config,
    manifold_serving,
    subject_of,
    whoami_on,
)
from oauth_peers import AuthorizationServer, Browser, ProtectedServer, query_of
from replicas import free_port

pytestmark = pytest.mark.anyio

#: Access token lifetime at the short-lived authorization server (refresh tests), seconds.
SHORT_TTL_S = 5


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


@pytest.fixture(scope="module")
def short_auth_server(tmp: Path) -> Iterator[AuthorizationServer]:
    server = AuthorizationServer(tmp, access_token_ttl=SHORT_TTL_S)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def short_upstream(tmp: Path, short_auth_server: AuthorizationServer) -> Iterator[ProtectedServer]:
    server = ProtectedServer(tmp, short_auth_server.issuer)
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


def sdk_oauth(server_url: str, issuer: str, user: str) -> tuple[OAuthClientProvider, MemoryTokens]:
    """The SDK's OAuth client for `user`: its browser step is a scripted browser that logs in
    as `user` and stops at the redirect URI (where nothing listens), reading the code there."""
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    landed: dict[str, str] = {}

    def log_in(authorization_url: str) -> None:
        url = Browser().visit(authorization_url, {issuer: user}, stop_at=lambda u: u.startswith(redirect_uri))
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


async def whoami_with(server_url: str, auth: OAuthClientProvider) -> str:
    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
        async with streamable_http_client(server_url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], read_timeout_seconds=REQUEST_TIMEOUT_S) as s:
                with anyio.fail_after(START_TIMEOUT_S):
                    await s.initialize()
                result = await s.call_tool("whoami", {})
    assert not result.is_error, result
    return result.content[0].text


async def whoami_as(server_url: str, issuer: str, user: str) -> tuple[str, MemoryTokens]:
    auth, storage = sdk_oauth(server_url, issuer, user)
    return await whoami_with(server_url, auth), storage


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

    alice, alice_tokens = await whoami_as(upstream.url, auth_server.issuer, "alice")
    bob, bob_tokens = await whoami_as(upstream.url, auth_server.issuer, "bob")
    assert (alice, bob) == ("alice", "bob")
    # Each login registered a client of its own and got a refresh token with its access token.
    assert alice_tokens.client and bob_tokens.client
    assert alice_tokens.client.client_id != bob_tokens.client.client_id
    assert alice_tokens.tokens and alice_tokens.tokens.refresh_token
    assert [g["account"] for g in auth_server.grants("authorization_code")][-2:] == ["alice", "bob"]


async def test_oauth_peers_refresh_direct(
    short_auth_server: AuthorizationServer, short_upstream: ProtectedServer
) -> None:
    auth, storage = sdk_oauth(short_upstream.url, short_auth_server.issuer, "carol")
    assert await whoami_with(short_upstream.url, auth) == "carol"
    assert storage.tokens and storage.tokens.refresh_token
    expired = storage.tokens.access_token
    await anyio.sleep(SHORT_TTL_S + 1)
    # The upstream refuses the expired token; the client refreshes it and goes on.
    async with httpx2.AsyncClient(timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
        r = await http.post(
            short_upstream.url,
            json={"jsonrpc": "2.0", "id": 1, "method": "ping"},
            headers={"Authorization": f"Bearer {expired}", "Accept": "application/json, text/event-stream"},
        )
    assert r.status_code == 401, r.text
    refreshed = len(short_auth_server.grants("refresh_token"))
    assert await whoami_with(short_upstream.url, auth) == "carol"
    assert len(short_auth_server.grants("refresh_token")) == refreshed + 1, short_auth_server.logs_tail()
    assert storage.tokens.access_token != expired


# --- through Manifold (the broker) -----------------------------------------------------------

@pytest.mark.needs_broker
async def test_each_caller_connects_their_own_account_and_a_revoked_connection_asks_again(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        # Alice's host declares no URL elicitation: the link is in the tool error.
        link = link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert link.startswith(f"{manifold.base}/oauth/connect/"), link
        assert_connected(await consent(link, manifold, auth_server, ALICE_KEY, "alice"), manifold)
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"

        # Bob's host declares it: error -32042.
        elicitation = elicitation_of(await call_whoami(manifold.url, BOB_KEY, url_elicitation=True))
        # Someone else's key does not complete Bob's consent.
        refused = await consent(elicitation["url"], manifold, auth_server, ALICE_KEY, "alice")
        assert refused.status_code == 403, f"{refused.status_code}: {refused.text[:500]}"
        assert_connected(await consent(elicitation["url"], manifold, auth_server, BOB_KEY, "bob"), manifold)
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"

        listed = await manifold.admin_request("GET", "/connections?team=eng")
        assert listed.status_code == 200, listed.text
        assert "key:alice" in listed.text and "key:bob" in listed.text, listed.text
        assert "eyJ" not in listed.text, "a connection listing shows no token"

        # A revoked connection asks again; the other caller's stays.
        revoked = await manifold.admin_request(
            "POST", "/connections/revoke", {"team": "eng", "principal": "key:alice", "upstream": "forge"}
        )
        assert revoked.status_code == 200, revoked.text
        again = link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert again != link, "a new consent, not the spent one"
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
        assert_connected(await consent(again, manifold, auth_server, ALICE_KEY, "alice"), manifold)
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
    # No token request failed at the authorization server.
    assert not auth_server.events("grant_error"), auth_server.logs_tail()


@pytest.mark.needs_broker
async def test_a_host_that_declares_url_elicitation_hears_the_consent_complete(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        async with AsyncExitStack() as stack:
            inbox = Inbox()
            s = await caller_session(stack, manifold.url, BOB_KEY, url_elicitation=True, inbox=inbox)
            refused = await whoami_on(s)
            elicitation = elicitation_of(refused)
            assert_connected(await consent(elicitation["url"], manifold, auth_server, BOB_KEY, "bob"), manifold)
            # The same session is told the consent is complete, then the call goes through.
            with anyio.fail_after(REQUEST_TIMEOUT_S):
                while not [
                    n
                    for n in inbox.of(types.ElicitCompleteNotification)
                    if n.params.elicitation_id == elicitation["elicitationId"]
                ]:
                    await anyio.sleep(0.05)
            assert subject_of(await s.call_tool(WHOAMI, {})) == "bob"


@pytest.mark.needs_broker
async def test_an_expired_access_token_is_refreshed_without_the_host_seeing_it(
    tmp: Path, short_auth_server: AuthorizationServer, short_upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(short_upstream)) as manifold:
        link = link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert_connected(await consent(link, manifold, short_auth_server, ALICE_KEY, "alice"), manifold)
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
        refreshed = len(short_auth_server.grants("refresh_token"))
        # Past the access token's lifetime (the upstream refuses it by now).
        await anyio.sleep(SHORT_TTL_S + 1)
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
        assert len(short_auth_server.grants("refresh_token")) == refreshed + 1, short_auth_server.logs_tail()
    assert not short_auth_server.events("grant_error"), short_auth_server.logs_tail()


@pytest.mark.needs_broker
async def test_replicas_sharing_tokens_in_redis_refresh_once(
    tmp: Path, short_auth_server: AuthorizationServer, short_upstream: ProtectedServer
) -> None:
    from replicas import Cluster, Redis

    redis = Redis(tmp)
    cluster: Cluster | None = None
    try:
        prefix = f"oauth-{time.monotonic_ns()}"
        store = (
            'store = "redis"\n'
            f"redis_url = {_toml_str(redis.url)}\n"
            f'key_prefix = "{prefix}-tokens"\n'
            f'key = "{SEAL_KEY}"\n'
        )
        # Each replica has an admin address of its own: the shared [server] table is left out.
        config = manifold_config(short_upstream, credentials=store).split("\n\n", 1)[1]
        cluster = Cluster(tmp, config, store="redis", sticky=False, redis=redis)
        # Connect through the load balancer; the link names the replica that made it.
        result = await call_whoami(cluster.url, ALICE_KEY)
        link = link_in_tool_error(result)
        base = link.split("/oauth/connect/", 1)[0]
        answers = {base: ALICE_KEY, short_auth_server.issuer: "alice"}
        page = await anyio.to_thread.run_sync(lambda: Browser().visit(link, answers))
        assert page.status_code == 200, f"{page.status_code}: {page.text[:1000]}"
        assert subject_of(await call_whoami(cluster.url, ALICE_KEY)) == "alice"

        # Nine sessions, opened first so that their calls come at once after the expiry,
        # each request balanced to the next replica.
        try:
            async with AsyncExitStack() as stack:
                sessions = [await caller_session(stack, cluster.url, ALICE_KEY) for _ in range(9)]
                await anyio.sleep(SHORT_TTL_S + 1)
                refreshed = len(short_auth_server.grants("refresh_token"))
                subjects: list[str] = []

                failures: list[str] = []

                async def call(s: ClientSession) -> None:
                    try:
                        subjects.append(subject_of(await whoami_on(s)))
                    except Exception as e:  # noqa: BLE001 - reported with the replicas' logs below
                        failures.append(repr(e))

                with anyio.fail_after(REQUEST_TIMEOUT_S * 2):
                    async with anyio.create_task_group() as tg:
                        for s in sessions:
                            tg.start_soon(call, s)
                assert not failures, "\n".join(failures) + "\n" + cluster.logs_tail()
        except BaseExceptionGroup as group:
            leaves = []
            pending = [group]
            while pending:
                e = pending.pop()
                if isinstance(e, BaseExceptionGroup):
                    pending.extend(e.exceptions)
                else:
                    leaves.append(repr(e))
            raise AssertionError("\n".join(leaves) + "\n" + cluster.logs_tail()) from None
        assert subjects == ["alice"] * 9
        grants = short_auth_server.grants("refresh_token")[refreshed:]
        print(f"refresh-token grants after expiry, 3 replicas, 9 concurrent callers: {len(grants)}")
        assert len(grants) == 1, short_auth_server.logs_tail() + "\n" + cluster.logs_tail()
        assert not short_auth_server.events("grant_error"), short_auth_server.logs_tail()
    finally:
        if cluster is not None:
            cluster.stop()
        redis.stop()


@pytest.mark.needs_broker
async def test_a_shared_login_is_every_callers_identity(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream, identity="shared")) as manifold:
        r = await manifold.admin_request("POST", "/login/forge")
        assert r.status_code == 200, r.text
        login = r.json()
        assert CONSENT_LINK.fullmatch(login["url"]) and login["expires_at_ms"] > time.time() * 1000, login
        # Shared identity: no API key form, straight to the authorization server's login.
        page = await anyio.to_thread.run_sync(
            lambda: Browser().visit(login["url"], {auth_server.issuer: "operator"})
        )
        assert_connected(page, manifold)
        # The upstream joins once logged in (bounded wait), and is the operator's for everyone.
        with anyio.fail_after(START_TIMEOUT_S):
            while True:
                result = await call_whoami(manifold.url, ALICE_KEY)
                if not isinstance(result, MCPError) and not result.is_error:
                    break
                await anyio.sleep(0.2)
        assert subject_of(result) == "operator"
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "operator"
