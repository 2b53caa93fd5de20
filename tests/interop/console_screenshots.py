"""Takes the README's screenshots of the web console: Manifold on a small config of fixture
upstreams (one renamed tool, one upstream that never starts, two teams, one with a quota), two
minutes of calls from the teams' hosts so the pages have something to show, then each page in
headless Chromium at 1280x860.

    cargo build --workspace
    MANIFOLD_BIN=$PWD/target/debug/manifold .venv/bin/python tests/interop/console_screenshots.py docs/console

Not a test: the browser tests check the pages; this only pictures them.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from pathlib import Path

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

sys.path.insert(0, str(Path(__file__).resolve().parent))

from console import ADMIN_TOKEN, CHROMEDRIVER, _chromium_options, fixture_bin, launch, log_in, wait_until  # noqa: E402
from conftest import _toml_str  # noqa: E402
from test_console_teams import Host  # noqa: E402

ENG_KEY = "console-screenshots-eng-key-0123456789"
OPS_KEY = "console-screenshots-ops-key-0123456789"


def config() -> str:
    fixture = _toml_str(fixture_bin())
    return (
        "[server]\n"
        f'metrics_token = "{ADMIN_TOKEN}"\n\n'
        "[upstreams.alpha]\n"
        f"command = {fixture}\n"
        'args = ["--name", "alpha"]\n\n'
        "[upstreams.alpha.tools]\n"
        'rename = { echo = "say" }\n\n'
        "[upstreams.beta]\n"
        f"command = {fixture}\n"
        'args = ["--name", "beta"]\n\n'
        "[upstreams.broken]\n"
        f"command = {fixture}\n"
        'args = ["--exit-on-start", "3"]\n\n'
        "[teams.eng]\n"
        f'api_keys = ["{ENG_KEY}"]\n'
        'tool_limits = { say = { quota = "500/hour" } }\n\n'
        "[teams.ops]\n"
        f'api_keys = ["{OPS_KEY}"]\n'
        'upstreams = ["beta"]\n'
    )


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    profile = tempfile.mkdtemp(prefix="manifold-screenshots-")
    service = Service(executable_path=CHROMEDRIVER, service_args=["--allowed-ips=127.0.0.1"])
    driver = webdriver.Chrome(service=service, options=_chromium_options(profile))
    driver.set_window_size(1280, 860)
    try:
        with tempfile.TemporaryDirectory(prefix="manifold-screenshots-") as tmp, launch(config(), Path(tmp)) as console:
            url = f"http://127.0.0.1:{console.listen}/mcp"
            eng, ops = Host(url, ENG_KEY), Host(url, OPS_KEY)
            # Two minutes of calls, some slower than others, so that the latency chart has a
            # point every ten seconds.
            deadline = time.monotonic() + 125
            i = 0
            while time.monotonic() < deadline:
                i += 1
                eng.request("tools/call", {"name": "say", "arguments": {"text": f"hello {i}"}})
                ops.request("tools/call", {"name": "beta__echo", "arguments": {"text": f"status {i}"}})
                eng.request("tools/call", {"name": "alpha__sleep", "arguments": {"ms": (i * 7) % 40}})
                time.sleep(1.0)
            log_in(driver, console)
            pages = [
                ("overview", "/console/"),
                ("catalog", "/console/catalog"),
                ("teams", "/console/teams"),
                ("calls", "/console/calls"),
                ("config", "/console/config"),
            ]
            for name, path in pages:
                driver.get(console.url(path))
                time.sleep(0.3)
                driver.save_screenshot(str(out / f"{name}.png"))
            driver.get(console.url("/console/try?team=eng&tool=say"))
            wait_until(driver, lambda d: d.find_elements(By.ID, "try-form"))
            driver.find_element(By.NAME, "arg:text").send_keys("from the console")
            driver.find_element(By.ID, "call").click()
            wait_until(driver, lambda d: d.find_elements(By.ID, "trace-id"))
            driver.save_screenshot(str(out / "try.png"))
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
    print(f"screenshots in {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/console"))
