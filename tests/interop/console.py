"""Fixtures of the web console's browser tests: headless Chromium driven through WebDriver
(Debian's `chromium` and `chromium-driver`, with `selenium` from requirements.txt), and
`manifold serve --listen ... --admin ...` on free loopback ports in front of fixture upstreams.

Chromium gets a fresh profile in a temporary folder and resolves no name but loopback, so
nothing it loads comes from elsewhere; every wait is bounded.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import REPO, START_TIMEOUT_S, _stop, _toml_str, manifold_bin

#: The admin token of the console's Manifold (`server.metrics_token`).
ADMIN_TOKEN = "console-browser-test-token-0123456789"
#: Longest a page load or a wait for an element may take before the test fails.
PAGE_TIMEOUT_S = 30.0

CHROMIUM = os.environ.get("CHROMIUM_BIN", "/usr/bin/chromium")
CHROMEDRIVER = os.environ.get("CHROMEDRIVER_BIN", "/usr/bin/chromedriver")


def fixture_bin() -> Path:
    return manifold_bin().parent / "manifold-fixture"


@dataclass
class Console:
    """A running Manifold with its console: where it is and how to stop one upstream."""

    admin: str
    listen: str
    victim_pid_file: Path
    log: Path
    #: The configuration file it serves (a test may change it and reload).
    config: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.admin}{path}"

    def kill_victim(self) -> None:
        """Kills the `victim` upstream's process (its restart backoff keeps it down)."""
        pids = [int(p) for p in self.victim_pid_file.read_text().split()]
        os.kill(pids[-1], signal.SIGKILL)


def console_config(victim_pid_file: Path) -> str:
    """Three fixture upstreams: `alpha` stays up, `victim` is up until a test kills it (then
    waits ten minutes before it is started again), `broken` never starts."""
    fixture = _toml_str(fixture_bin())
    return (
        "[server]\n"
        f'metrics_token = "{ADMIN_TOKEN}"\n'
        "\n"
        "[upstreams.alpha]\n"
        f"command = {fixture}\n"
        'args = ["--name", "alpha"]\n'
        "\n"
        "[upstreams.victim]\n"
        f"command = {fixture}\n"
        f'args = ["--name", "victim", "--pid-file", {_toml_str(victim_pid_file)}]\n'
        "restart_initial_backoff_ms = 600000\n"
        "restart_max_backoff_ms = 600000\n"
        "\n"
        "[upstreams.broken]\n"
        f"command = {fixture}\n"
        'args = ["--exit-on-start", "3"]\n'
    )


def _wait_for(proc: subprocess.Popen, pattern: str, log: Path) -> str:
    deadline = time.monotonic() + START_TIMEOUT_S
    regex = re.compile(pattern, re.MULTILINE)
    while time.monotonic() < deadline:
        m = regex.search(log.read_text(errors="replace") if log.exists() else "")
        if m:
            return m.group(1)
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"manifold did not start:\n{log.read_text(errors='replace')[-4000:]}")


@contextmanager
def launch(
    config_text: str, tmp: Path, *, victim_pid_file: Path | None = None, admin: str = "127.0.0.1:0"
) -> Iterator[Console]:
    """`manifold serve` on free loopback ports (host listener and admin address) with
    `config_text` written to `tmp/manifold.toml`; stopped afterwards, its log printed (pytest
    shows it on a failure). Tests with a config of their own start it with this; `admin` is the
    admin address (a port known beforehand, for a redirect URI registered ahead)."""
    bin_ = manifold_bin()
    if not os.access(bin_, os.X_OK) or not os.access(fixture_bin(), os.X_OK):
        pytest.fail(f"{bin_} or {fixture_bin()} is missing (cargo build --workspace)", pytrace=False)
    config = tmp / "manifold.toml"
    config.write_text(config_text)
    log = tmp / "manifold.stderr"
    proc = subprocess.Popen(
        [str(bin_), "serve", "--config", str(config), "--listen", "127.0.0.1:0", "--admin", admin],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        cwd=str(REPO),
        env={**os.environ, "MANIFOLD_LOG": "info"},
    )
    try:
        admin = _wait_for(proc, r"admin listening on 127\.0\.0\.1:(\d+)", log)
        listen = _wait_for(proc, r"(?<!admin )listening on 127\.0\.0\.1:(\d+)", log)
        yield Console(
            admin=admin,
            listen=listen,
            victim_pid_file=victim_pid_file or tmp / "victim.pids",
            log=log,
            config=config,
        )
    finally:
        _stop(proc)
        print(f"--- manifold stderr ---\n{log.read_text(errors='replace')[-6000:]}", file=sys.stderr)


@pytest.fixture
def console() -> Iterator[Console]:
    """Manifold with the console's config (`console_config`)."""
    with tempfile.TemporaryDirectory(prefix="manifold-console-") as tmp:
        pid_file = Path(tmp) / "victim.pids"
        with launch(console_config(pid_file), Path(tmp), victim_pid_file=pid_file) as running:
            yield running


def log_in(driver, console: Console) -> None:
    """Logs the browser in through the login form with the admin token."""
    from selenium.webdriver.common.by import By

    driver.get(console.url("/console/login"))
    driver.find_element(By.ID, "token").send_keys(ADMIN_TOKEN)
    driver.find_element(By.CSS_SELECTOR, "form.login button[type=submit]").click()
    wait_until(driver, lambda d: d.find_elements(By.ID, "upstreams"))


def wait_until(driver, condition, timeout: float = PAGE_TIMEOUT_S):
    """Waits (bounded) until `condition(driver)` is truthy and returns it."""
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout, poll_frequency=0.1).until(condition)


def _chromium_options(profile: str):
    from selenium.webdriver.chrome.options import Options

    options = Options()
    options.binary_location = CHROMIUM
    for arg in (
        "--headless=new",
        # The tests run as root in a container: Chromium's sandbox needs user namespaces.
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--user-data-dir={profile}",
        "--no-first-run",
        "--no-default-browser-check",
        "--disable-extensions",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-proxy-server",
        # Every name but loopback fails to resolve: a page that fetched anything from
        # elsewhere would show it, and nothing leaves the machine.
        "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE localhost , EXCLUDE 127.0.0.1",
    ):
        options.add_argument(arg)
    return options


@pytest.fixture
def browser() -> Iterator[object]:
    """Headless Chromium through chromedriver on a loopback port, with a fresh profile."""
    for path in (CHROMIUM, CHROMEDRIVER):
        if not os.access(path, os.X_OK):
            pytest.fail(
                f"{path} is missing: install Debian's chromium and chromium-driver (tests/run.sh does)",
                pytrace=False,
            )
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    profile = tempfile.mkdtemp(prefix="manifold-chromium-")
    # An explicit driver path: selenium never looks for (or downloads) a driver of its own.
    service = Service(executable_path=CHROMEDRIVER, service_args=["--allowed-ips=127.0.0.1"])
    driver = webdriver.Chrome(service=service, options=_chromium_options(profile))
    try:
        driver.set_page_load_timeout(PAGE_TIMEOUT_S)
        driver.set_script_timeout(PAGE_TIMEOUT_S)
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)
