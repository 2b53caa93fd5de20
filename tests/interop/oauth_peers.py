"""The real OAuth peers of the upstream credential tests, and the scripted browser that logs in
through them:

- `AuthorizationServer`: oidc-provider (npm, pinned in package-lock.json) run by
  oauth/authorization_server.mjs on a loopback port; it logs every token it issues, so that a
  test counts refresh-token grants.
- `ProtectedServer`: oauth/protected_server.py, an MCP server on the official Python SDK that
  accepts only that authorization server's tokens for its own URL (`whoami`, `echo`).
- `Browser`: a person's browser without JavaScript (requests, following redirects), which
  submits the one form a page shows (the authorization server's login, Manifold's API key
  form) and stops where a test says.
- `whoami_as`, `whoami_with`: the official SDK's own OAuth client calling the protected server
  directly, logging in with the scripted browser.

Every process listens on 127.0.0.1 only and is stopped by its own process id.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
import sys
import time
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any, Callable
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import pytest
import httpx2
import requests
from mcp import ClientSession
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

from conftest import HERE, REPO, REQUEST_TIMEOUT_S, START_TIMEOUT_S, _stop
from replicas import free_port

OAUTH = HERE / "oauth"
OIDC_PROVIDER = HERE / "node_modules" / "oidc-provider" / "package.json"
#: Longest one page of the scripted browser may take.
PAGE_TIMEOUT_S = 20
#: Most redirects and forms one login may pass through.
MAX_HOPS = 20


def _first_line(proc: subprocess.Popen, out: Path, err: Path, what: str) -> str:
    """The first line `proc` printed on stdout (bounded wait)."""
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        text = out.read_text(errors="replace") if out.exists() else ""
        if "\n" in text:
            return text.split("\n", 1)[0].strip()
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    raise AssertionError(f"{what} did not start:\n{err.read_text(errors='replace')[-4000:]}")


class AuthorizationServer:
    """oidc-provider on a loopback port; `access_token_ttl` in seconds; `clients` confidential
    clients (`ID:SECRET`) for the client credentials grant, `login_clients` public clients
    signing users in (`ID=REDIRECT_URI`, ID tokens with a `roles` claim)."""

    def __init__(
        self,
        tmp: Path,
        *,
        access_token_ttl: int = 3600,
        clients: tuple[str, ...] = (),
        login_clients: tuple[str, ...] = (),
    ):
        if not OIDC_PROVIDER.exists():
            raise AssertionError("oidc-provider is not installed: run bash tests/interop/install.sh")
        run = time.monotonic_ns()
        self.out = tmp / f"authorization-server-{run}.stdout"
        self.err = tmp / f"authorization-server-{run}.stderr"
        args = ["node", str(OAUTH / "authorization_server.mjs"), "--access-token-ttl", str(access_token_ttl)]
        for client in clients:
            args += ["--client", client]
        for client in login_clients:
            args += ["--login-client", client]
        self.proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self.out.open("w"), stderr=self.err.open("w"), cwd=str(REPO)
        )
        try:
            self.issuer = _first_line(self.proc, self.out, self.err, "the authorization server")
        except BaseException:
            self.stop()
            raise

    def events(self, kind: str) -> list[dict[str, Any]]:
        """The events of `kind` it logged so far ("grant", "grant_error", "registration", ...)."""
        out = []
        for line in self.out.read_text(errors="replace").splitlines()[1:]:
            try:
                event = json.loads(line)
            except ValueError:
                continue  # a line still being written
            if event.get("event") == kind:
                out.append(event)
        return out

    def grants(self, grant_type: str) -> list[dict[str, Any]]:
        """The tokens it issued with `grant_type` (e.g. "refresh_token")."""
        return [e for e in self.events("grant") if e.get("grant_type") == grant_type]

    def stop(self) -> None:
        _stop(self.proc)

    def logs_tail(self) -> str:
        return (
            f"--- authorization server stdout ---\n{self.out.read_text(errors='replace')[-3000:]}\n"
            f"--- authorization server stderr ---\n{self.err.read_text(errors='replace')[-3000:]}"
        )


class ProtectedServer:
    """The OAuth-protected MCP upstream, trusting `issuer`; `url` is its MCP endpoint."""

    def __init__(self, tmp: Path, issuer: str):
        run = time.monotonic_ns()
        self.out = tmp / f"protected-server-{run}.stdout"
        self.err = tmp / f"protected-server-{run}.stderr"
        self.proc = subprocess.Popen(
            [sys.executable, str(OAUTH / "protected_server.py"), "--issuer", issuer],
            stdin=subprocess.DEVNULL,
            stdout=self.out.open("w"),
            stderr=self.err.open("w"),
            cwd=str(REPO),
        )
        try:
            self.url = _first_line(self.proc, self.out, self.err, "the protected MCP server")
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        _stop(self.proc)


class _Form(HTMLParser):
    """The first form of a page: its action, method and fields."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.method = "get"
        self.fields: list[dict[str, str]] = []
        self.found = False
        self._inside = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "form" and not self.found:
            self.found = self._inside = True
            self.action = a.get("action")
            self.method = a.get("method", "get").lower()
        elif tag == "input" and self._inside and a.get("name"):
            self.fields.append(a)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form":
            self._inside = False


class Browser:
    """A person's browser without JavaScript: one cookie jar (a fresh one per person)."""

    def __init__(self) -> None:
        self.session = requests.Session()
        self.pages: list[str] = []

    def visit(
        self, url: str, answers: dict[str, str], *, stop_at: Callable[[str], bool] = lambda _u: False
    ) -> Any:
        """Opens `url` and follows redirects; a page with a form is submitted with what the
        person types there in its one text or password field (hidden fields as they are):
        `answers` maps a URL prefix (a site) to that text. Ends on the first page without a
        form, or with an error status (its response is returned) or, without opening it, on a
        URL `stop_at` accepts (then the URL is returned as a string)."""
        method, data = "get", None
        for _ in range(MAX_HOPS):
            if stop_at(url):
                return url
            self.pages.append(url)
            if method == "post":
                r = self.session.post(url, data=data, allow_redirects=False, timeout=PAGE_TIMEOUT_S)
            else:
                r = self.session.get(url, allow_redirects=False, timeout=PAGE_TIMEOUT_S)
            if r.is_redirect:
                url, method, data = urljoin(url, r.headers["location"]), "get", None
                continue
            form = _Form()
            form.feed(r.text if "html" in r.headers.get("content-type", "") else "")
            if not form.found or r.status_code >= 400:
                return r
            typed = self._answer(url, answers)
            url = urljoin(url, form.action or url)
            method, data = form.method, self._fill(form, typed)
            if method == "get":
                url, data = f"{url}?{'&'.join(f'{k}={v}' for k, v in data.items())}", None
        raise AssertionError(f"more than {MAX_HOPS} pages: {self.pages}")

    @staticmethod
    def _answer(page: str, answers: dict[str, str]) -> str:
        sites = [site for site in answers if page.startswith(site)]
        assert sites, f"a form at {page}, where nothing is to be typed ({sorted(answers)})"
        return answers[max(sites, key=len)]

    @staticmethod
    def _fill(form: _Form, answer: str) -> dict[str, str]:
        data = {}
        typed = [f for f in form.fields if f.get("type", "text").lower() in ("text", "password", "")]
        assert len(typed) == 1, f"expected one field to type into, got {form.fields}"
        for f in form.fields:
            kind = f.get("type", "text").lower()
            if kind in ("submit", "button", "checkbox", "radio"):
                continue
            data[f["name"]] = answer if f is typed[0] else f.get("value", "")
        return data


def query_of(url: str) -> dict[str, str]:
    """The query parameters of `url`, one value each."""
    return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}


# --- the official SDK's own OAuth client, against the peers directly ------------------------


class MemoryTokens:
    """The SDK client's token storage, in memory (one per user)."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


def sdk_oauth(server_url: str, issuer: str, user: str) -> tuple[OAuthClientProvider, MemoryTokens]:
    """The SDK's OAuth client for `user`: its browser step is a scripted browser that logs in
    as `user` and stops at the redirect URI (where nothing listens), reading the code there."""
    redirect_uri = f"http://127.0.0.1:{free_port()}/callback"
    landed: dict[str, str] = {}

    def log_in(authorization_url: str) -> None:
        url = Browser().visit(authorization_url, {issuer: user}, stop_at=lambda u: u.startswith(redirect_uri))
        assert isinstance(url, str), f"the login did not come back to the client: {url.status_code} {url.text[:500]}"
        landed.update(query_of(url))

    async def redirect(authorization_url: str) -> None:
        with anyio.fail_after(REQUEST_TIMEOUT_S):
            await anyio.to_thread.run_sync(log_in, authorization_url)

    async def callback() -> AuthorizationCodeResult:
        assert "code" in landed, f"no code in the redirect: {landed}"
        return AuthorizationCodeResult(code=landed["code"], state=landed.get("state"), iss=landed.get("iss"))

    storage = MemoryTokens()
    metadata = OAuthClientMetadata(
        client_name="interop-direct",
        redirect_uris=[redirect_uri],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(server_url, metadata, storage, redirect, callback), storage


async def whoami_with(server_url: str, auth: OAuthClientProvider) -> str:
    async with httpx2.AsyncClient(auth=auth, timeout=httpx2.Timeout(REQUEST_TIMEOUT_S)) as http:
        async with streamable_http_client(server_url, http_client=http) as streams:
            async with ClientSession(streams[0], streams[1], read_timeout_seconds=REQUEST_TIMEOUT_S) as s:
                with anyio.fail_after(START_TIMEOUT_S):
                    await s.initialize()
                result = await s.call_tool("whoami", {})
    assert not result.is_error, result
    return result.content[0].text


async def whoami_as(server_url: str, issuer: str, user: str) -> tuple[str, MemoryTokens]:
    auth, storage = sdk_oauth(server_url, issuer, user)
    return await whoami_with(server_url, auth), storage


@pytest.fixture(scope="module")
def tmp() -> Iterator[Path]:
    """A folder for a test module's peers and Manifolds (logs, configs, token files)."""
    with tempfile.TemporaryDirectory(prefix="manifold-oauth-") as d:
        yield Path(d)


@pytest.fixture(scope="module")
def auth_server(tmp: Path) -> Iterator[AuthorizationServer]:
    """The authorization server of a test module."""
    server = AuthorizationServer(tmp)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def upstream(tmp: Path, auth_server: AuthorizationServer) -> Iterator[ProtectedServer]:
    """The protected MCP upstream of a test module, trusting `auth_server`."""
    server = ProtectedServer(tmp, auth_server.issuer)
    try:
        yield server
    finally:
        server.stop()
