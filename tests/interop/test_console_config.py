"""The console's configuration page in a real browser: the file in force with its secrets
redacted; a changed file applied with the reload button (its report shown, the overview
showing the new upstream); a file with a syntax error refused while the old one keeps
serving."""

from __future__ import annotations

import tempfile
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC

from conftest import _toml_str
from console import ADMIN_TOKEN, browser, fixture_bin, launch, log_in, wait_until  # noqa: F401

ENV_SECRET = "sk-browser-env-secret"


def config(extra: str = "") -> str:
    fixture = _toml_str(fixture_bin())
    return (
        "[server]\n"
        f'metrics_token = "{ADMIN_TOKEN}"\n'
        "\n"
        "[upstreams.alpha]\n"
        f"command = {fixture}\n"
        'args = ["--name", "alpha"]\n'
        f'env = {{ API_TOKEN = "{ENV_SECRET}" }}\n'
        "\n" + extra
    )


def beta() -> str:
    return f'[upstreams.beta]\ncommand = {_toml_str(fixture_bin())}\nargs = ["--name", "beta"]\n'


def press_reload(driver) -> None:
    """Presses the reload button and waits for the page it leads back to."""
    button = driver.find_element(By.ID, "reload")
    button.click()
    wait_until(driver, EC.staleness_of(button))
    wait_until(driver, lambda d: d.find_elements(By.ID, "reload-outcome"))


def test_a_reload_from_the_console_applies_a_changed_file_and_a_broken_one_is_refused(browser):
    with tempfile.TemporaryDirectory(prefix="manifold-console-config-") as tmp:
        with launch(config(), Path(tmp)) as console:
            log_in(browser, console)
            browser.get(console.url("/console/config"))
            assert browser.find_element(By.ID, "config-path").text == str(console.config)
            shown = browser.find_element(By.ID, "config-text").text
            assert "API_TOKEN" in shown and "<redacted>" in shown, shown
            assert ENV_SECRET not in browser.page_source and ADMIN_TOKEN not in browser.page_source

            console.config.write_text(config(beta()))
            press_reload(browser)
            outcome = browser.find_element(By.ID, "reload-outcome")
            assert outcome.get_attribute("data-outcome") == "reloaded", outcome.text
            added = browser.find_element(By.CSS_SELECTOR, 'tr[data-report="added"]').text
            assert "beta" in added, added
            browser.get(console.url("/console/"))
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-upstream="beta"]'))

            console.config.write_text("[upstreams.gamma\ncommand = ")
            browser.get(console.url("/console/config"))
            press_reload(browser)
            outcome = browser.find_element(By.ID, "reload-outcome")
            assert outcome.get_attribute("data-outcome") == "refused", outcome.text
            assert browser.find_element(By.ID, "reload-refusal").text
            assert "[upstreams.beta]" in browser.find_element(By.ID, "config-text").text
            browser.get(console.url("/console/"))
            rows = browser.find_elements(By.CSS_SELECTOR, "#upstreams tbody tr")
            assert sorted(r.get_attribute("data-upstream") for r in rows) == ["alpha", "beta"]
