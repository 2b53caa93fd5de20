"""The console's teams page in a real browser: calls a team's host makes show in its counts and
its quota's use, and a call refused by the quota shows as a refusal (fixtures in console.py).
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import requests
from selenium.webdriver.common.by import By

from console import ADMIN_TOKEN, browser, fixture_bin, launch, log_in, wait_until  # noqa: F401
from conftest import _toml_str

ENG_KEY = "console-teams-browser-eng-key-0123456789"
OPS_KEY = "console-teams-browser-ops-key-0123456789"
PROTOCOL = "2025-11-25"


def teams_config() -> str:
    """`alpha` for two teams: `eng` may call alpha__echo twice an hour, `ops` has no limit."""
    return (
        "[server]\n"
        f'metrics_token = "{ADMIN_TOKEN}"\n\n'
        "[upstreams.alpha]\n"
        f"command = {_toml_str(fixture_bin())}\n"
        'args = ["--name", "alpha"]\n\n'
        "[teams.eng]\n"
        f'api_keys = ["{ENG_KEY}"]\n'
        'tool_limits = { alpha__echo = { quota = "2/hour" } }\n\n'
        "[teams.ops]\n"
        f'api_keys = ["{OPS_KEY}"]\n'
    )


class Host:
    """A Streamable HTTP host of one team, speaking plain JSON-RPC over `requests`."""

    def __init__(self, url: str, key: str):
        self.url = url
        self.http = requests.Session()
        self.http.headers.update({"x-api-key": key, "accept": "application/json, text/event-stream"})
        self.next_id = 0
        init = self.request("initialize", {
            "protocolVersion": PROTOCOL,
            "capabilities": {},
            "clientInfo": {"name": "console-teams-test", "version": "1"},
        })
        assert "result" in init, init
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, message: dict) -> requests.Response:
        r = self.http.post(self.url, json=message, timeout=30)
        if "mcp-session-id" in r.headers:
            self.http.headers["mcp-session-id"] = r.headers["mcp-session-id"]
            self.http.headers["mcp-protocol-version"] = PROTOCOL
        return r

    def request(self, method: str, params: dict) -> dict:
        self.next_id += 1
        r = self.post({"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params})
        assert r.status_code == 200, r.text
        if r.headers.get("content-type", "").startswith("text/event-stream"):
            data = [line[5:] for line in r.text.splitlines() if line.startswith("data:")]
            return json.loads(data[-1])
        return r.json()

    def echo(self, text: str) -> dict:
        return self.request("tools/call", {"name": "alpha__echo", "arguments": {"text": text}})


def cell(driver, team: str, column: str) -> str:
    row = driver.find_element(By.CSS_SELECTOR, f'#teams tr[data-team="{team}"]')
    return row.find_element(By.CSS_SELECTOR, f"td.{column}").text


def test_a_teams_calls_and_quota_use_show_and_a_refused_call_is_a_refusal(browser):
    with tempfile.TemporaryDirectory(prefix="manifold-console-teams-") as tmp:
        with launch(teams_config(), Path(tmp)) as console:
            eng = Host(f"http://127.0.0.1:{console.listen}/mcp", ENG_KEY)
            Host(f"http://127.0.0.1:{console.listen}/mcp", OPS_KEY)
            for text in ["a", "b"]:
                assert "result" in eng.echo(text)
            refused = eng.echo("c")
            assert refused.get("error", {}).get("code") == -32015, refused

            log_in(browser, console)
            browser.find_element(By.LINK_TEXT, "Teams").click()
            wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, '#teams tr[data-team="eng"]'))
            assert cell(browser, "eng", "calls") == "3"
            assert cell(browser, "eng", "quota-exceeded") == "1"
            assert cell(browser, "eng", "sessions") == "1"
            assert cell(browser, "ops", "calls") == "0"
            quota = browser.find_element(
                By.CSS_SELECTOR, '#quotas tr[data-limit="team:eng:tool:alpha__echo"][data-window="3600"]'
            )
            assert quota.find_element(By.CSS_SELECTOR, "td.used").text == "2"
            assert quota.find_element(By.CSS_SELECTOR, "td.count").text == "2"
            sessions = browser.find_element(By.CSS_SELECTOR, '#sessions tr[data-transport="streamable-http"]')
            assert sessions.find_element(By.CSS_SELECTOR, "td.num").text == "2"
