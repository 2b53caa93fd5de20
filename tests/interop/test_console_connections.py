"""The console's connections page and the users' page in a real browser, against the real
OAuth peers of the upstream credential tests (oidc-provider and a protected MCP server): a
connection revoked from either page makes the caller's next call ask for consent again, and
a user's page shows their own connection alone.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from console import PAGE_TIMEOUT_S, browser  # noqa: F401
from oauth_manifold import (
    ADMIN_TOKEN,
    ALICE_KEY,
    BOB_KEY,
    Manifold,
    assert_connected,
    call_whoami,
    consent,
    link_in_tool_error,
    manifold_config,
    manifold_serving,
    subject_of,
)
from oauth_peers import AuthorizationServer, ProtectedServer, auth_server, tmp, upstream  # noqa: F401

pytestmark = pytest.mark.anyio

ALICE_ROW = 'tr[data-upstream="forge"][data-principal="eng/key:alice"]'


async def connect(manifold: Manifold, auth_server: AuthorizationServer, key: str, user: str) -> None:
    """The caller of `key` is asked to connect, does, and then calls as `user`."""
    link = link_in_tool_error(await call_whoami(manifold.url, key))
    assert_connected(await consent(link, manifold, auth_server, key, user), manifold)
    assert subject_of(await call_whoami(manifold.url, key)) == user


async def test_revoking_from_the_console_makes_the_next_call_ask_for_consent(
    browser, tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        await connect(manifold, auth_server, ALICE_KEY, "alice")
        await connect(manifold, auth_server, BOB_KEY, "bob")

        browser.get(f"{manifold.admin}/console/login")
        browser.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
        browser.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "upstreams")))
        browser.find_element(By.LINK_TEXT, "Connections").click()
        alice = WebDriverWait(browser, PAGE_TIMEOUT_S).until(
            EC.presence_of_element_located((By.CSS_SELECTOR, f"#connections {ALICE_ROW}"))
        )
        assert "eyJ" not in browser.page_source, "no token is shown"
        alice.find_element(By.CSS_SELECTOR, "button.revoke").click()
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "done")))
        assert "Revoked 1 connection(s) to forge" in browser.find_element(By.ID, "done").text
        assert not browser.find_elements(By.CSS_SELECTOR, ALICE_ROW)
        assert browser.find_elements(By.CSS_SELECTOR, 'tr[data-principal="eng/key:bob"]')

        # Alice is asked to connect again; Bob's connection stays.
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
        assert subject_of(await call_whoami(manifold.url, BOB_KEY)) == "bob"


async def test_a_user_sees_and_revokes_their_own_connection_on_their_page(
    browser, tmp: Path, auth_server: AuthorizationServer, upstream: ProtectedServer
) -> None:
    with manifold_serving(tmp, manifold_config(upstream)) as manifold:
        await connect(manifold, auth_server, ALICE_KEY, "alice")

        # Bob signs in: forge is not connected for him, and nothing of Alice's shows.
        browser.get(f"{manifold.base}/oauth/account")
        browser.find_element(By.ID, "key").send_keys(BOB_KEY)
        browser.find_element(By.ID, "sign-in").click()
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "who")))
        assert browser.find_element(By.ID, "who").text == "eng/key:bob"
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-upstream="forge"]')
        assert row.find_element(By.CSS_SELECTOR, ".state").text == "not connected"
        assert "alice" not in browser.page_source
        browser.find_element(By.ID, "sign-out").click()

        # Alice signs in, sees her connection, and revokes it (once the sign-out's page is in).
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "key")))
        browser.find_element(By.ID, "key").send_keys(ALICE_KEY)
        browser.find_element(By.ID, "sign-in").click()
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "who")))
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-upstream="forge"]')
        assert row.find_element(By.CSS_SELECTOR, ".state").text.startswith("connected")
        row.find_element(By.CSS_SELECTOR, "button.revoke").click()
        WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.presence_of_element_located((By.ID, "done")))
        row = browser.find_element(By.CSS_SELECTOR, 'tr[data-upstream="forge"]')
        assert row.find_element(By.CSS_SELECTOR, ".state").text == "not connected"
        link_in_tool_error(await call_whoami(manifold.url, ALICE_KEY))
