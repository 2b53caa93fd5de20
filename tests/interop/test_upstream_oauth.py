"""Upstream credentials per caller, against real OAuth peers: oidc-provider as the authorization
server (oauth/authorization_server.mjs) and an MCP server on the official Python SDK that only
takes its tokens (oauth/protected_server.py); logins are done by a scripted browser
(oauth_peers.Browser).

- The peers themselves, with the official SDK's OAuth client: two users, two subjects.
- Through Manifold: each API key's caller is asked to connect (a tool error holding the link,
  or -32042 for a host that declares URL elicitation, or an `input_required` result with the
  URL elicitation for a 2026-07-28 host, whose retry with the `requestState` goes through),
  logs in, and then sees their own subject; a revoked connection asks again; an expired access
  token is refreshed unseen; three replicas sharing tokens through Redis refresh once; a shared
  login is every caller's; a stdio Manifold's local user connects through its loopback
  callback listener without an API key; a callback with a wrong state, or used twice, connects
  nothing; consents are counted per upstream with no caller or token in a label; the
  `manifold connections` and `manifold revoke` commands at the admin address.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import anyio
import httpx2
import mcp_types as types
import pytest
from mcp import ClientSession, MCPError

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
    cli,
    cli_args,
    consent,
    elicitation_of,
    link_in_tool_error,
    manifold_config,
    manifold_serving,
    metrics_of,
    stateless_client,
    stdio_config,
    stdio_manifold,
    subject_of,
    whoami_on,
)
from oauth_peers import (  # noqa: F401 (fixtures)
    AuthorizationServer,
    Browser,
    ProtectedServer,
    auth_server,
    query_of,
    sdk_oauth,
    tmp,
    upstream,
    whoami_as,
    whoami_with,
)

pytestmark = pytest.mark.anyio

#: Access token lifetime at the short-lived authorization server (refresh tests), seconds.
SHORT_TTL_S = 5


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


# --- the other kinds of host, and what an operator sees -------------------------------------


async def test_a_2026_host_is_asked_with_input_required_and_its_retry_returns_the_subject(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        async with stateless_client(manifold.url, ALICE_KEY) as c:
            first = await c.session.call_tool(WHOAMI, {}, allow_input_required=True)
            assert isinstance(first, types.InputRequiredResult), first
            assert first.request_state, "a retry needs the requestState"
            ((key, request),) = first.input_requests.items()
            assert request.method == "elicitation/create", request
            assert request.params.mode == "url", request.params
            assert CONSENT_LINK.fullmatch(request.params.url), request.params.url
            assert request.params.url.startswith(f"{manifold.base}/oauth/connect/"), request.params.url
            assert request.params.url in request.params.message, request.params.message

            assert_connected(await consent(request.params.url, manifold, auth_server, ALICE_KEY, "alice"), manifold)
            again = await c.session.call_tool(
                WHOAMI,
                {},
                input_responses={key: types.ElicitResult(action="accept")},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert subject_of(again) == "alice"


async def test_a_stdio_manifolds_local_user_connects_through_its_loopback_callback_listener(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    async with stdio_manifold(tmp, stdio_config(upstream)) as (s, callbacks):
        link = link_in_tool_error(await whoami_on(s))
        # The link is on the callback listener (the stdio Manifold has no other), and the
        # browser goes straight to the authorization server: no API key is asked for (the
        # scripted browser fails on a form at Manifold, where nothing is to be typed).
        assert link.startswith(f"{callbacks}/oauth/connect/"), (link, callbacks)
        page = await anyio.to_thread.run_sync(lambda: Browser().visit(link, {auth_server.issuer: "alice"}))
        assert page.status_code == 200, f"{page.status_code} at {page.url}: {page.text[:1000]}"
        assert page.url.startswith(f"{callbacks}/oauth/callback"), page.url
        assert subject_of(await whoami_on(s)) == "alice"


async def test_a_callback_with_a_wrong_state_or_used_twice_is_refused_and_connects_nothing(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        link = link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        browser = Browser()
        answers = {manifold.base: ALICE_KEY, auth_server.issuer: "alice"}
        callback = await anyio.to_thread.run_sync(
            lambda: browser.visit(link, answers, stop_at=lambda u: u.startswith(f"{manifold.base}/oauth/callback"))
        )
        assert isinstance(callback, str), f"no redirect to the callback: {callback.status_code} {callback.text[:500]}"
        state = query_of(callback)["state"]

        async def opened(url: str) -> Any:
            return await anyio.to_thread.run_sync(lambda: browser.session.get(url, allow_redirects=False, timeout=20))

        # A state Manifold never gave.
        wrong = await opened(callback.replace(f"state={state}", f"state={state[::-1]}x"))
        assert wrong.status_code == 400, f"{wrong.status_code}: {wrong.text[:500]}"
        assert "text/html" in wrong.headers.get("content-type", ""), wrong.headers
        assert not await connections_of(manifold, "key:alice")
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))

        # The right one connects; the same callback again is refused, also after the
        # connection was revoked (a replayed callback does not connect again).
        assert (await opened(callback)).status_code == 200
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
        revoked = await manifold.admin_request(
            "POST", "/connections/revoke", {"team": "eng", "principal": "key:alice", "upstream": "forge"}
        )
        assert revoked.status_code == 200, revoked.text
        reused = await opened(callback)
        assert reused.status_code == 400, f"{reused.status_code}: {reused.text[:500]}"
        assert "text/html" in reused.headers.get("content-type", ""), reused.headers
        assert not await connections_of(manifold, "key:alice")
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))


async def connections_of(manifold: Any, principal: str) -> list[dict[str, Any]]:
    listed = await manifold.admin_request("GET", f"/connections?team=eng&principal={principal}")
    assert listed.status_code == 200, listed.text
    return listed.json()["connections"]


async def test_consents_are_counted_per_upstream_without_a_token_or_caller_in_any_label(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        link = link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert_connected(await consent(link, manifold, auth_server, ALICE_KEY, "alice"), manifold)
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"

        series = await metrics_of(manifold)
        consents = {
            labels["outcome"]: value
            for name, labels, value in series
            if name == "manifold_credential_consents_total" and labels.get("upstream") == "forge"
        }
        assert consents.get("asked", 0) >= 1 and consents.get("completed", 0) >= 1, consents
        # No label names a caller (key name, API key, principal, owner) or holds a token.
        for name, labels, _ in series:
            for label, value in labels.items():
                shown = f"{name}{{{label}={value!r}}}"
                assert not re.search(r"alice|bob|key:|oauth-interop|eyJ", value), shown
                assert not re.fullmatch(r"[0-9a-f]{32,}|[A-Za-z0-9_-]{40,}", value), shown


async def test_the_cli_lists_and_revokes_connections_at_the_admin_address(
    tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        for key, user in ((ALICE_KEY, "alice"), (BOB_KEY, "bob")):
            link = link_in_tool_error(await call_whoami(manifold.url, key))
            assert_connected(await consent(link, manifold, auth_server, key, user), manifold)

        listed = await anyio.to_thread.run_sync(lambda: cli(manifold, "connections", "--team", "eng"))
        assert listed.returncode == 0, listed.stderr
        lines = sorted(listed.stdout.splitlines())
        assert [line.split("\t")[:2] for line in lines] == [["forge", "eng/key:alice"], ["forge", "eng/key:bob"]], lines
        # Each line is upstream, principal, owner, scopes, expiry, refreshability: no token.
        for line in lines:
            _, _, owner, scopes, expires, refresh = line.split("\t")
            assert re.fullmatch(r"owner=[0-9a-f]{12}", owner), line
            assert re.fullmatch(r"scopes=[\w: ]*", scopes), line
            assert re.fullmatch(r"expires_at_ms=\d+|no expiry", expires), line
            assert refresh == "refreshable", line
        assert "eyJ" not in listed.stdout + listed.stderr

        revoked = await anyio.to_thread.run_sync(
            lambda: cli(manifold, "revoke", "--team", "eng", "--principal", "key:alice", "--upstream", "forge")
        )
        assert revoked.returncode == 0, revoked.stderr
        assert revoked.stdout.strip() == "revoked 1 connection(s)", revoked.stdout
        after = await anyio.to_thread.run_sync(lambda: cli(manifold, "connections"))
        assert after.returncode == 0, after.stderr
        assert [line.split("\t")[1] for line in after.stdout.splitlines()] == ["eng/key:bob"], after.stdout
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"

        # A wrong admin token is refused with a message, and revokes nothing.
        refused = await anyio.to_thread.run_sync(
            lambda: subprocess.run(
                [*cli_args(manifold, "revoke", "--team", "eng", "--principal", "key:bob"), "--token", "wrong"],
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=REQUEST_TIMEOUT_S,
            )
        )
        assert refused.returncode != 0 and "401" in refused.stderr, (refused.returncode, refused.stderr)
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
