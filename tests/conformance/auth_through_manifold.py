"""Manifold as the client of the conformance suite's `auth/*` scenarios: the mock protected MCP
server becomes Manifold's one upstream, and this driver plays the operator and the host.

    conformance client --command ".venv/bin/python tests/conformance/auth_through_manifold.py" \
        --scenario auth/metadata-default

1. Writes a configuration whose one upstream, `x`, is the scenario's URL (names and URIs exposed
   unchanged), with `[upstreams.x.auth]` as the scenario needs:
     authorization code scenarios   mode = "oauth", identity = "shared", and the client id the
                                    suite expects of a Client ID Metadata Document as
                                    client_metadata_url (used only where the authorization
                                    server supports them, as the reference client does);
                                    auth/pre-registration: the context's client_id and secret
     auth/client-credentials-*      mode = "client_credentials" with the context's secret, or its
                                    private key (a file) and algorithm
     auth/enterprise-managed-...    mode = "identity_assertion" at the context's identity
                                    provider; the host authenticates to Manifold with the
                                    context's ID token ([auth.jwt] trusts that provider)
   The upstream's era is the scenario's (session, or stateless at 2026-07-28).
2. Starts `manifold serve --listen 127.0.0.1:0 --admin 127.0.0.1:0` and reads both addresses
   from its log.
3. For the authorization code scenarios, asks the admin address for the shared login link
   (`POST /login/x`, with the admin token) and opens it as a browser would, following the
   redirects: Manifold's consent page sends it to the authorization server, whose mock answers
   at once with a redirect back to Manifold's callback.
4. Acts as the host through Manifold (the Python SDK client over Streamable HTTP, in the
   scenario's era): waits for the upstream's tool to be listed (no longer once the mock server
   has ended the scenario), and calls it. When the call is refused for want of a login (a
   scope step-up), logs in once more and calls again. While waiting, plays the operator who
   watches `GET /connections`: when Manifold dropped the shared login (the upstream moved to
   another authorization server), logs in again.

Every step is bounded; Manifold is stopped at the end, whatever happened. Its log goes to
$CLIENT_MANIFOLD_LOG when set (the harness keeps it beside the scenario's results), else
to a temporary file copied to stderr.

Exits 3 (UNSUPPORTED) for the scenarios Manifold has no mode for, 2 for a bad invocation, 1
when a step fails (the reason on stderr).

CLIENT_AUTH_OMIT_AUTH_TABLE=1 leaves `[upstreams.x.auth]` out of the configuration: a check of
the driver itself against a Manifold that does not read that table.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_auth_common import (  # noqa: E402
    CLIENT_CREDENTIALS_KEY,
    CLIENT_CREDENTIALS_SECRET,
    CONFORMANCE_CLIENT_METADATA_URL,
    ENTERPRISE,
    HTTP_TIMEOUT,
    WITHOUT_A_CLIENT,
    Invocation,
    act_as_host,
    invocation,
    needs,
    reason,
    unsupported,
)

REPO = Path(__file__).resolve().parents[2]
UPSTREAM = "x"
# Manifold must print its addresses within this many seconds, and stop within this many.
START_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# How long the host waits for the upstream's tool to be listed once Manifold may connect to it.
TOOL_PATIENCE = 30.0
# How many times the operator logs in again after Manifold dropped the shared login.
RELOGINS = 2
# The whole drive, within the suite's own timeout for the client (the harness gives it 90 s).
DRIVE_TIMEOUT = 80.0
# Secrets reach Manifold through its environment (`${VAR}` in the file), never the file.
SECRET_ENV = "MANIFOLD_CONFORMANCE_CLIENT_SECRET"
ADMIN_TOKEN_ENV = "MANIFOLD_CONFORMANCE_ADMIN_TOKEN"


def toml_string(text: str) -> str:
    """A TOML basic string: JSON's escapes are TOML's."""
    return json.dumps(text)


def auth_table(run: Invocation, folder: Path, env: dict[str, str]) -> list[str]:
    """`[upstreams.x.auth]` for the scenario, adding the secrets it names to ENV."""
    lines = [f"[upstreams.{UPSTREAM}.auth]"]
    if run.scenario in CLIENT_CREDENTIALS_SECRET:
        client_id, secret = needs(run.context, "client_id", "client_secret")
        env[SECRET_ENV] = secret
        lines += ['mode = "client_credentials"', f"client_id = {toml_string(client_id)}"]
        lines.append(f'client_secret = "${{{SECRET_ENV}}}"')
    elif run.scenario in CLIENT_CREDENTIALS_KEY:
        client_id, pem = needs(run.context, "client_id", "private_key_pem")
        key = folder / "client-key.pem"
        key.write_text(pem)
        key.chmod(0o600)
        lines += ['mode = "client_credentials"', f"client_id = {toml_string(client_id)}"]
        lines.append(f"private_key_file = {toml_string(str(key))}")
        lines.append(f"algorithm = {toml_string(run.context.get('signing_algorithm') or 'RS256')}")
    elif run.scenario in ENTERPRISE:
        client_id, secret, idp_token = needs(run.context, "client_id", "client_secret", "idp_token_endpoint")
        env[SECRET_ENV] = secret
        lines += ['mode = "identity_assertion"', f"idp_token_endpoint = {toml_string(idp_token)}"]
        if run.context.get("idp_client_id"):
            lines.append(f"idp_client_id = {toml_string(run.context['idp_client_id'])}")
        lines += [f"client_id = {toml_string(client_id)}", f'client_secret = "${{{SECRET_ENV}}}"']
    else:
        lines += ['mode = "oauth"', 'identity = "shared"']
        lines.append(f"client_metadata_url = {toml_string(CONFORMANCE_CLIENT_METADATA_URL)}")
        if run.context.get("client_id"):
            # auth/pre-registration: the authorization server registers no one; its client is
            # the one the context names.
            lines.append(f"client_id = {toml_string(run.context['client_id'])}")
            if run.context.get("client_secret"):
                env[SECRET_ENV] = run.context["client_secret"]
                lines.append(f'client_secret = "${{{SECRET_ENV}}}"')
    return lines


def host_auth_table(run: Invocation) -> list[str]:
    """For identity assertion, the host's own token is the context's ID token: Manifold trusts
    the identity provider that issued it, and exchanges it for the upstream."""
    if run.scenario not in ENTERPRISE:
        return []
    issuer, audience = needs(run.context, "idp_issuer", "idp_client_id")
    return [
        "[auth.jwt]",
        f"issuer = {toml_string(issuer)}",
        f"audience = {toml_string(audience)}",
        f"jwks_url = {toml_string(issuer.rstrip('/') + '/.well-known/jwks.json')}",
    ]


def write_config(run: Invocation, folder: Path, env: dict[str, str]) -> Path:
    env[ADMIN_TOKEN_ENV] = secrets.token_urlsafe(32)
    lines = [
        "# Manifold with the conformance scenario's mock server as its one upstream.",
        "[server]",
        f'metrics_token = "${{{ADMIN_TOKEN_ENV}}}"',
        "",
        "[credentials]",
        'store = "memory"',
        "",
        f"[upstreams.{UPSTREAM}]",
        f"url = {toml_string(run.url)}",
        'prefix = ""',
        'uri_prefix = ""',
        f'era = "{"stateless" if run.modern else "session"}"',
    ]
    if os.environ.get("CLIENT_AUTH_OMIT_AUTH_TABLE") != "1":
        lines += [""] + auth_table(run, folder, env)
        host = host_auth_table(run)
        if host:
            lines += [""] + host
    else:
        # [credentials] belongs with the auth table: a Manifold that reads neither is checked.
        lines = [line for line in lines if line not in ("[credentials]", 'store = "memory"')]
    config = folder / "manifold.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


class Manifold:
    """`manifold serve` on loopback ports, stopped (TERM, then KILL) when the block ends."""

    def __init__(self, config: Path, env: dict[str, str], log: Path) -> None:
        binary = os.environ.get("MANIFOLD_BIN") or str(REPO / "target" / "debug" / "manifold")
        if not os.access(binary, os.X_OK):
            raise RuntimeError(f"{binary} not found (cargo build -p manifold, or set MANIFOLD_BIN)")
        self.log = log
        self.command = [binary, "serve", "--config", str(config), "--listen", "127.0.0.1:0", "--admin", "127.0.0.1:0"]
        self.env = {**os.environ, **env}
        self.process: subprocess.Popen[bytes] | None = None
        self.base = ""
        self.admin = ""

    def __enter__(self) -> Manifold:
        with self.log.open("ab") as sink:
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=sink, env=self.env
            )
        try:
            self._wait_for_addresses()
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def _wait_for_addresses(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while time.monotonic() < deadline:
            text = self.log.read_text(errors="replace")
            admin = re.search(r"admin listening on (127\.0\.0\.1:\d+)", text)
            host = re.search(r"(?<!admin )listening on (127\.0\.0\.1:\d+)", text)
            if admin and host:
                self.admin, self.base = f"http://{admin.group(1)}", f"http://{host.group(1)}"
                return
            assert self.process is not None
            if self.process.poll() is not None:
                raise RuntimeError(f"manifold exited ({self.process.returncode}) before listening: {tail(self.log)}")
            time.sleep(0.02)
        raise RuntimeError(f"manifold did not print its addresses within {START_TIMEOUT:.0f} s")

    def __exit__(self, *_exc: object) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"


def scenario_over(log: Path) -> str | None:
    """What the mock server said when it ended the scenario (HTTP 410 `test_complete`, e.g. once
    a client asked for authorization too often), as Manifold logged it: from then on it
    answers every request so, and no tool of it can be listed any more."""
    for line in log.read_text(errors="replace").splitlines():
        if '"error":"test_complete"' in line:
            return "the mock server ended the scenario: " + line.split("refused the request", 1)[-1].strip()[:200]
    return None


def tail(log: Path, lines: int = 20) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


async def log_in(manifold: Manifold, token: str, refusal: str = "") -> None:
    """The operator's `manifold login x`: the shared login link from the admin address, opened
    in a browser that follows every redirect back to Manifold's callback page. A consent link
    Manifold gave in a refusal (REFUSAL) is opened instead of asking for a new one."""
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=True) as browser:
        given = re.search(re.escape(manifold.base) + r"/oauth/connect/[^\s\"'<>)\]]+", refusal)
        link = given.group(0) if given else await login_link(browser, manifold, token)
        print(f"login link: {link}")
        page = await browser.get(link)
        trail = " -> ".join(str(step.url) for step in [*page.history, page])
        print(f"browser: {trail} ({page.status_code})")
        if page.status_code != 200:
            raise RuntimeError(f"the login ended with {page.status_code} at {page.url}: {page.text[:300]}")


async def login_link(browser: httpx2.AsyncClient, manifold: Manifold, token: str) -> str:
    asked = await browser.post(f"{manifold.admin}/login/{UPSTREAM}", headers={"Authorization": f"Bearer {token}"})
    if asked.status_code != 200:
        raise RuntimeError(f"POST /login/{UPSTREAM} on the admin address: {asked.status_code} {asked.text[:300]}")
    try:
        link = asked.json().get("url")
    except ValueError:
        link = None
    if not isinstance(link, str) or not link:
        raise RuntimeError(f"POST /login/{UPSTREAM} answered without a url: {asked.text[:300]}")
    return link


async def shared_login_kept(manifold: Manifold, token: str) -> bool:
    """Whether the admin address lists a connection to the upstream (the shared login)."""
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as admin:
        listed = await admin.get(f"{manifold.admin}/connections", headers={"Authorization": f"Bearer {token}"})
    if listed.status_code != 200:
        raise RuntimeError(f"GET /connections on the admin address: {listed.status_code} {listed.text[:300]}")
    connections = listed.json().get("connections") or []
    return any(c.get("upstream") == UPSTREAM for c in connections if isinstance(c, dict))


async def drive(run: Invocation, folder: Path, log: Path) -> None:
    env: dict[str, str] = {}
    config = write_config(run, folder, env)
    print(f"configuration: {config}")
    oauth = run.scenario not in CLIENT_CREDENTIALS_SECRET + CLIENT_CREDENTIALS_KEY + ENTERPRISE
    with Manifold(config, env, log) as manifold:
        print(f"manifold: host {manifold.base}, admin {manifold.admin}")

        async def log_in_again(refusal: str) -> None:
            await log_in(manifold, env[ADMIN_TOKEN_ENV], refusal)

        relogins = 0

        async def log_in_when_dropped() -> None:
            nonlocal relogins
            if relogins < RELOGINS and not await shared_login_kept(manifold, env[ADMIN_TOKEN_ENV]):
                relogins += 1
                print("the shared login was dropped; logging in again", file=sys.stderr)
                await log_in(manifold, env[ADMIN_TOKEN_ENV])

        if oauth:
            await log_in(manifold, env[ADMIN_TOKEN_ENV])
        caller = None
        if run.scenario in ENTERPRISE:
            caller = {"Authorization": f"Bearer {needs(run.context, 'idp_id_token')[0]}"}
        await act_as_host(
            manifold.mcp_url,
            run.modern,
            headers=caller,
            patience=TOOL_PATIENCE,
            log_in_again=log_in_again if oauth else None,
            while_waiting=log_in_when_dropped if oauth else None,
            hopeless=lambda: scenario_over(log),
        )


async def run_driver(
    drive_one: Callable[[Invocation, Path, Path], Awaitable[None]], run: Invocation, prefix: str
) -> int:
    """Runs `drive_one` for `run` in a temporary folder, bounded by DRIVE_TIMEOUT: 0 when it
    played the scenario, 1 (with why, and Manifold's log unless CLIENT_MANIFOLD_LOG keeps it)
    when it did not. Shared by the drivers that put Manifold between a host and the suite."""
    with tempfile.TemporaryDirectory(prefix=prefix) as folder:
        chosen = os.environ.get("CLIENT_MANIFOLD_LOG")
        log = Path(chosen) if chosen else Path(folder) / "manifold.log"
        log.write_bytes(b"")
        try:
            with anyio.fail_after(DRIVE_TIMEOUT):
                await drive_one(run, Path(folder), log)
        except Exception as error:
            print(f"through Manifold: {reason(error)}", file=sys.stderr)
            if not chosen:
                print(f"--- manifold's log ---\n{tail(log, 60)}", file=sys.stderr)
            return 1
    return 0


async def main() -> int:
    run = invocation()
    if run.scenario in WITHOUT_A_CLIENT:
        return unsupported(run.scenario, "Manifold has no upstream auth mode for it")
    return await run_driver(drive, run, "manifold-client-auth-")

if __name__ == "__main__":
    sys.exit(anyio.run(main))
