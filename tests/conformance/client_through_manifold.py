"""Manifold as the client of the conformance suite's client scenarios other than `auth/*`: the
suite's mock server becomes Manifold's one upstream, and this driver plays the host.

    conformance client --command ".venv/bin/python tests/conformance/client_through_manifold.py" \
        --scenario tools_call

1. Writes a configuration whose one upstream, `x`, is the scenario's URL over Streamable HTTP
   (names and URIs exposed unchanged), in the scenario's era: stateless at 2026-07-28, else the
   session era (the mocks that speak only the session era whatever the revision included).
2. Starts `manifold serve --listen 127.0.0.1:0 --admin 127.0.0.1:0` and reads its addresses
   from its log.
3. Waits until Manifold's `/readyz` counts the upstream as up (a probe of Manifold, not of the
   mock server, which may count requests), then does through Manifold what client_host.py says
   a host does in the scenario, as the reference client does at the mock server directly.

Every step is bounded; Manifold is stopped at the end, whatever happened. Its log goes to
$CLIENT_MANIFOLD_LOG when set (the harness keeps it beside the scenario's results), else to a
temporary file copied to stderr. Exits 2 for a bad invocation, 1 when a step fails (the reason
on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
import httpx2

sys.path.insert(0, str(Path(__file__).resolve().parent))

from auth_through_manifold import Manifold, run_driver, tail, toml_string  # noqa: E402
from client_auth_common import HTTP_TIMEOUT, Invocation, invocation  # noqa: E402
from client_host import SESSION_ONLY, act_as_host  # noqa: E402

UPSTREAM = "x"
# How long the host waits for Manifold to have connected to the upstream (the whole drive is
# bounded by run_driver, within the suite's own timeout for the client of 90 s).
CONNECT_PATIENCE = 30.0
LOOK_AGAIN = 0.1


def write_config(run: Invocation, folder: Path) -> Path:
    era = "stateless" if run.modern and run.scenario not in SESSION_ONLY else "session"
    lines = [
        "# Manifold with the conformance scenario's mock server as its one upstream.",
        f"[upstreams.{UPSTREAM}]",
        f"url = {toml_string(run.url)}",
        'prefix = ""',
        'uri_prefix = ""',
        f'era = "{era}"',
    ]
    config = folder / "manifold.toml"
    config.write_text("\n".join(lines) + "\n")
    return config


async def connected(manifold: Manifold) -> None:
    """Waits until Manifold's host listener says its upstream is up (`/readyz`), so that the
    host's first list already holds what the upstream offers."""
    deadline = anyio.current_time() + CONNECT_PATIENCE
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as probe:
        while anyio.current_time() < deadline:
            answer = await probe.get(f"{manifold.base}/readyz")
            try:
                up = answer.json().get("up")
            except ValueError:
                up = None
            if isinstance(up, int) and up >= 1:
                return
            await anyio.sleep(LOOK_AGAIN)
    raise RuntimeError(f"Manifold did not connect to the upstream within {CONNECT_PATIENCE:.0f} s: {tail(manifold.log)}")


async def drive(run: Invocation, folder: Path, log: Path) -> None:
    config = write_config(run, folder)
    print(f"configuration: {config}")
    with Manifold(config, {}, log) as manifold:
        print(f"manifold: host {manifold.base}, admin {manifold.admin}")
        await connected(manifold)
        await act_as_host(run, manifold.mcp_url)


async def main() -> int:
    return await run_driver(drive, invocation(), "manifold-client-")

if __name__ == "__main__":
    sys.exit(anyio.run(main))
