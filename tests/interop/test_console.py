"""The web console in a real browser: headless Chromium through WebDriver against the real
`manifold` binary's admin address (fixtures in console.py).

A user logs in with the form, sees every upstream of the config with its state, sees one go
down after its process is killed, is sent to the login page without a login, and cannot
post a form without its CSRF token while the same form posted from the page works.
"""

from __future__ import annotations

import requests
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from console import PAGE_TIMEOUT_S, browser, console, log_in  # noqa: F401

#: Longest the overview may take to show an upstream in a new state (over refreshes).
STATE_TIMEOUT_S = 30.0


def state_of(driver, upstream: str) -> str:
    row = driver.find_element(By.CSS_SELECTOR, f'tr[data-upstream="{upstream}"]')
    return row.find_element(By.CSS_SELECTOR, ".state").text


def refreshed_until(driver, upstream: str, state: str) -> None:
    """Follows the page's refresh link until `upstream` shows `state` (bounded)."""

    def shows(d) -> bool:
        d.find_element(By.ID, "refresh").click()
        return state_of(d, upstream) == state

    WebDriverWait(driver, STATE_TIMEOUT_S, poll_frequency=0.5).until(shows)


def test_a_page_without_a_login_goes_to_the_login_page(browser, console):
    browser.get(console.url("/console/"))
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.url_to_be(console.url("/console/login")))
    assert browser.find_element(By.ID, "token").get_attribute("type") == "password"


def test_the_overview_lists_the_upstreams_and_shows_a_killed_one_down(browser, console):
    log_in(browser, console)
    refreshed_until(browser, "alpha", "up")
    refreshed_until(browser, "victim", "up")
    rows = browser.find_elements(By.CSS_SELECTOR, "#upstreams tbody tr")
    assert sorted(r.get_attribute("data-upstream") for r in rows) == ["alpha", "broken", "victim"]
    assert state_of(browser, "broken") == "down"
    alpha = browser.find_element(By.CSS_SELECTOR, 'tr[data-upstream="alpha"]').text
    assert "session" in alpha and "2025-11-25" in alpha and "stdio" in alpha, alpha

    console.kill_victim()
    refreshed_until(browser, "victim", "down")
    assert state_of(browser, "alpha") == "up"
    # The session cookie is out of reach of scripts.
    cookie = browser.get_cookie("manifold_console")
    assert cookie is not None and cookie["httpOnly"] and cookie["sameSite"] == "Strict"


def test_a_post_without_the_csrf_token_is_refused_and_the_page_s_form_works(browser, console):
    log_in(browser, console)
    cookie = browser.get_cookie("manifold_console")
    # The logout form's POST as another site would send it: the login's cookie, no token.
    forged = requests.post(
        console.url("/console/logout"),
        cookies={"manifold_console": cookie["value"]},
        data={},
        allow_redirects=False,
        timeout=PAGE_TIMEOUT_S,
    )
    assert forged.status_code == 403, forged.text
    # Still logged in: the overview is served.
    browser.get(console.url("/console/"))
    assert browser.find_elements(By.ID, "upstreams")
    # The same form submitted from the page carries its token and logs out.
    browser.find_element(By.ID, "logout").click()
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.url_to_be(console.url("/console/login")))
    browser.get(console.url("/console/"))
    WebDriverWait(browser, PAGE_TIMEOUT_S).until(EC.url_to_be(console.url("/console/login")))
