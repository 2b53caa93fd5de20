"""The result cache of an upstream whose tokens are per caller, against the real OAuth peers of
test_upstream_oauth.py: even a rule with `scope = "shared"` keeps each caller's answers to that
caller, and a revoked caller is asked for consent again rather than served what was kept."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from oauth_manifold import (
    ALICE_KEY,
    BOB_KEY,
    assert_connected,
    call_whoami,
    consent,
    link_in_tool_error,
    manifold_config,
    manifold_serving,
    subject_of,
)
from oauth_peers import AuthorizationServer, ProtectedServer

pytestmark = pytest.mark.anyio

# whoami's answers kept for a minute, for every caller that may see the tool.
SHARED_RULE = 'tool_cache.whoami = { ttl = "60s", scope = "shared" }\n'


@pytest.fixture(scope="module")
def peers() -> Iterator[tuple[Path, AuthorizationServer, ProtectedServer]]:
    with tempfile.TemporaryDirectory(prefix="manifold-oauth-cache-") as d:
        tmp = Path(d)
        auth = AuthorizationServer(tmp)
        try:
            upstream = ProtectedServer(tmp, auth.issuer)
            try:
                yield tmp, auth, upstream
            finally:
                upstream.stop()
        finally:
            auth.stop()


async def test_a_per_caller_upstreams_answers_are_kept_for_their_caller_alone(
    peers: tuple[Path, AuthorizationServer, ProtectedServer],
) -> None:
    tmp, auth, upstream = peers
    config = manifold_config(upstream).replace("[upstreams.forge.auth]\n", SHARED_RULE + "[upstreams.forge.auth]\n")
    with manifold_serving(tmp, config) as manifold:
        for key, user in ((ALICE_KEY, "alice"), (BOB_KEY, "bob")):
            link = link_in_tool_error(await call_whoami(manifold.url, key))
            assert_connected(await consent(link, manifold, auth, key, user), manifold)
        # Alice's answer is kept; Bob, of the same team, gets his own, twice over.
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
        assert subject_of(await call_whoami(manifold.url, ALICE_KEY)) == "alice"
        # Revoked: asked again, not answered from what was kept for her.
        revoked = await manifold.admin_request(
            "POST", "/connections/revoke", {"team": "eng", "principal": "key:alice", "upstream": "forge"}
        )
        assert revoked.status_code == 200, revoked.text
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"
