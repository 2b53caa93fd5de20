"""The official Python SDK client as a client of the conformance suite's client scenarios other
than `auth/*`: the baseline that tests/conformance/client_scenarios.sh compares Manifold with.

    conformance client --command ".venv/bin/python tests/conformance/client_reference.py" \
        --scenario tools_call

Connects to the suite's mock server and does what client_host.py says a host does in the
scenario. Exits 2 for a bad invocation, 1 when a step fails (the reason on stderr). Every
request is bounded.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_auth_common import EXCHANGE_TIMEOUT, invocation, reason  # noqa: E402
from client_host import act_as_host  # noqa: E402


async def main() -> int:
    run = invocation()
    try:
        with anyio.fail_after(EXCHANGE_TIMEOUT):
            await act_as_host(run, run.url)
    except Exception as error:
        print(f"reference client: {reason(error)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(anyio.run(main))
