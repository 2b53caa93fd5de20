"""The console's live calls in a real browser: with the page open, calls a host makes over
Streamable HTTP (plain JSON-RPC POSTs) appear in the table without the page being reloaded,
and their arguments never do.
"""

from __future__ import annotations

import requests
from selenium.webdriver.common.by import By

from console import PAGE_TIMEOUT_S, browser, console, log_in, wait_until  # noqa: F401

HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def host_session(console) -> tuple[requests.Session, str]:
    """A host's session on the listener: initialize, then initialized."""
    http = requests.Session()
    url = f"http://127.0.0.1:{console.listen}/mcp"
    r = http.post(
        url,
        headers=HEADERS,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}},
        },
        timeout=PAGE_TIMEOUT_S,
    )
    r.raise_for_status()
    http.headers.update({**HEADERS, "Mcp-Session-Id": r.headers["Mcp-Session-Id"], "MCP-Protocol-Version": "2025-11-25"})
    http.post(url, json={"jsonrpc": "2.0", "method": "notifications/initialized"}, timeout=PAGE_TIMEOUT_S)
    return http, url


def call(http: requests.Session, url: str, id_: int, tool: str, arguments: dict) -> None:
    r = http.post(
        url,
        json={"jsonrpc": "2.0", "id": id_, "method": "tools/call", "params": {"name": tool, "arguments": arguments}},
        timeout=PAGE_TIMEOUT_S,
    )
    r.raise_for_status()


def test_calls_made_by_a_host_appear_without_reloading_the_page(browser, console):
    log_in(browser, console)
    http, url = host_session(console)
    browser.find_element(By.LINK_TEXT, "Live calls").click()
    wait_until(browser, lambda d: d.find_elements(By.ID, "calls"))
    # A marker that survives only as long as the page is not reloaded.
    browser.execute_script("document.body.setAttribute('data-not-reloaded', 'yes')")
    before = len(browser.find_elements(By.CSS_SELECTOR, 'tr[data-tool="alpha__echo"]'))

    call(http, url, 2, "alpha__echo", {"text": "secret-argument-7"})
    call(http, url, 3, "alpha__fail", {})
    wait_until(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, 'tr[data-tool="alpha__echo"]')) > before)
    failed = wait_until(browser, lambda d: d.find_elements(By.CSS_SELECTOR, 'tr[data-tool="alpha__fail"]'))[0]
    assert "tool_error" in failed.text and "alpha" in failed.text, failed.text
    # Newest first.
    first = browser.find_element(By.CSS_SELECTOR, "#calls tbody tr")
    assert first.get_attribute("data-tool") == "alpha__fail"
    assert browser.find_element(By.TAG_NAME, "body").get_attribute("data-not-reloaded") == "yes"
    assert "secret-argument-7" not in browser.page_source
    assert browser.find_element(By.ID, "live-status").text.startswith("live")
