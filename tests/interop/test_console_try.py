"""The console's try page in a real browser: a team is picked, the tool's form is filled and
sent, and the page shows the tool's result with the call's trace id; a team that cannot see
the tool gets the unknown-name error its hosts get.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from conftest import _toml_str
from console import ADMIN_TOKEN, browser, fixture_bin, launch, log_in, wait_until  # noqa: F401


def teams_config() -> str:
    """`red` sees `alpha`'s tools, `blue` only `beta`'s."""
    fixture = _toml_str(fixture_bin())
    return (
        "[server]\n"
        f'metrics_token = "{ADMIN_TOKEN}"\n'
        "\n"
        "[teams.red]\n"
        'api_keys = ["red-key-0123456789abcdef0123456789"]\n'
        'upstreams = ["alpha"]\n'
        "\n"
        "[teams.blue]\n"
        'api_keys = ["blue-key-0123456789abcdef012345678"]\n'
        'upstreams = ["beta"]\n'
        "\n"
        "[upstreams.alpha]\n"
        f"command = {fixture}\n"
        'args = ["--name", "alpha"]\n'
        "\n"
        "[upstreams.beta]\n"
        f"command = {fixture}\n"
        'args = ["--name", "beta"]\n'
    )


def open_form(driver, team: str, tool: str) -> None:
    """Picks the team and the tool with the page's own form (no script needed)."""
    driver.find_element(By.LINK_TEXT, "Try a tool").click()
    wait_until(driver, lambda d: d.find_elements(By.ID, "pick"))
    Select(driver.find_element(By.ID, "team")).select_by_value(team)
    wait_until(
        driver,
        lambda d: any(o.get_attribute("value") == tool for o in d.find_elements(By.CSS_SELECTOR, "#tool option")),
    )
    Select(driver.find_element(By.ID, "tool")).select_by_value(tool)
    driver.find_element(By.ID, "open").click()
    wait_until(driver, lambda d: d.find_elements(By.ID, "try-form"))


def test_trying_a_tool_as_a_team_shows_its_result_and_as_a_team_that_cannot_see_it_the_error(browser):
    with tempfile.TemporaryDirectory(prefix="manifold-console-try-") as tmp:
        with launch(teams_config(), Path(tmp)) as console:
            log_in(browser, console)
            open_form(browser, "red", "alpha__echo")
            text = browser.find_element(By.NAME, "arg:text")
            assert text.get_attribute("required") is not None
            text.send_keys("hello from the console <b>")
            browser.find_element(By.ID, "call").click()
            outcome = wait_until(browser, lambda d: d.find_elements(By.ID, "outcome"))[0]
            assert outcome.get_attribute("data-outcome") == "ok", outcome.text
            content = browser.find_element(By.CSS_SELECTOR, "#content .content-text").text
            assert content == "hello from the console <b>"
            trace = browser.find_element(By.ID, "trace-id").text
            assert len(trace) == 32 and int(trace, 16) != 0, trace
            # The form is still there, filled with what was sent.
            assert browser.find_element(By.NAME, "arg:text").get_attribute("value") == "hello from the console <b>"

            open_form(browser, "blue", "alpha__echo")
            browser.find_element(By.NAME, "arg:text").send_keys("x")
            browser.find_element(By.ID, "call").click()
            outcome = wait_until(browser, lambda d: d.find_elements(By.ID, "outcome"))[0]
            assert outcome.get_attribute("data-outcome") == "error", outcome.text
            error = browser.find_element(By.ID, "call-error").text
            assert "unknown tool" in error.lower() and "alpha__echo" in error, error
