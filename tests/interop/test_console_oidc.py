"""Signing in to the web console at a real OpenID Connect issuer, in a real browser:
oidc-provider (tests/interop/oauth/authorization_server.mjs) with the console's public client
registered, Manifold with `[server.console]` naming its `roles` claim, and headless Chromium
following the redirects and filling the issuer's login form.

An administrator (a user whose ID token's `roles` holds `manifold-admin`) lands on the overview;
anyone else is refused at the callback and has no console login.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from selenium.webdriver.common.by import By

from conftest import _toml_str
from console import PAGE_TIMEOUT_S, browser, fixture_bin, launch, wait_until  # noqa: F401
from oauth_peers import AuthorizationServer
from replicas import free_port

CLIENT = "manifold-console"


@pytest.fixture
def signed_in_console(tmp_path: Path) -> Iterator[tuple[object, str]]:
    """The issuer with the console's client, and Manifold signing operators in there: the
    running console and the issuer's URL."""
    admin_port = free_port()
    redirect = f"http://127.0.0.1:{admin_port}/console/login/oidc/callback"
    issuer = AuthorizationServer(tmp_path, login_clients=(f"{CLIENT}={redirect}",))
    try:
        config = (
            "[server.console]\n"
            f'login_client_id = "{CLIENT}"\n'
            'admin_claim = "roles"\n'
            'admin_value = "manifold-admin"\n\n'
            "[auth.jwt]\n"
            f'issuer = "{issuer.issuer}"\n'
            'audience = "https://manifold.example/mcp"\n'
            f'jwks_url = "{issuer.issuer.rstrip("/")}/jwks"\n\n'
            "[teams.eng]\n\n"
            "[upstreams.alpha]\n"
            f"command = {_toml_str(fixture_bin())}\n"
            'args = ["--name", "alpha"]\n'
        )
        with tempfile.TemporaryDirectory(prefix="manifold-console-oidc-") as tmp:
            with launch(config, Path(tmp), admin=f"127.0.0.1:{admin_port}") as console:
                yield console, issuer.issuer
    finally:
        print(issuer.logs_tail())
        issuer.stop()


def sign_in_as(driver, console, user: str) -> None:
    """From the console's login page to the issuer's login form, as `user`, and back."""
    driver.get(console.url("/console/login"))
    driver.find_element(By.ID, "oidc-login").click()
    field = wait_until(driver, lambda d: d.find_elements(By.NAME, "login"))[0]
    field.send_keys(user)
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait_until(driver, lambda d: d.current_url.startswith(console.url("/console/")))


def test_an_administrator_signs_in_at_the_issuer_and_anyone_else_is_refused(browser, signed_in_console):
    console, issuer = signed_in_console
    # Without the admin token there is no form to type one into: only the issuer's sign-in.
    browser.get(console.url("/console/login"))
    assert browser.find_element(By.ID, "oidc-login").get_attribute("href").endswith("/console/login/oidc")

    sign_in_as(browser, console, "viewer-1")
    wait_until(browser, lambda d: "console administrator" in d.page_source)
    assert browser.get_cookie("manifold_console") is None
    browser.get(console.url("/console/"))
    wait_until(browser, lambda d: d.current_url == console.url("/console/login"))

    # The issuer remembers viewer-1 for the browser's session: a new one for the next user
    # (cookies are per host, not per port: this clears the issuer's session on 127.0.0.1).
    browser.delete_all_cookies()
    sign_in_as(browser, console, "admin-ops")
    rows = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#upstreams tbody tr"))
    assert [r.get_attribute("data-upstream") for r in rows] == ["alpha"]
    cookie = browser.get_cookie("manifold_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"
    assert issuer.startswith("http://127.0.0.1:")
