"""Interop: pinned tool definitions with a real upstream. `manifold pin` pins
@modelcontextprotocol/server-everything; served with `[pinning]` (changes and new tools held),
Manifold lists every tool and prompt it lists unpinned, so nothing the server says differs
from one start to the next. Driven by the official MCP Python SDK client over stdio.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from pathlib import Path

import pytest

from conftest import (
    EVERYTHING_JS,
    _check_prerequisites,
    _toml_str,
    all_prompts,
    all_tools,
    manifold_stdio,
)

pytestmark = pytest.mark.anyio

UPSTREAM = f'[upstreams.everything]\ncommand = "node"\nargs = [{_toml_str(EVERYTHING_JS)}, "stdio"]\n'


def pin(folder: Path) -> dict:
    """Runs `manifold pin` on a config in `folder`; the lock file it wrote, parsed."""
    config = folder / "manifold.toml"
    config.write_text(UPSTREAM)
    done = subprocess.run(
        [str(_check_prerequisites()), "pin", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((folder / "manifold.lock").read_text())


async def served(config: str) -> tuple[list[str], list[str], str]:
    """The tool and prompt names Manifold serves with `config`, and what it logged."""
    async with manifold_stdio(config) as (session, _init, stderr):
        tools = sorted(t.name for t in await all_tools(session))
        prompts = sorted(p.name for p in await all_prompts(session))
        return tools, prompts, stderr.read_text(errors="replace")


async def test_server_everything_pinned_is_served_unchanged() -> None:
    with tempfile.TemporaryDirectory(prefix="manifold-pin-") as tmp:
        folder = Path(tmp)
        lock = pin(folder)
        pinned_tools = lock["upstreams"]["everything"]["tools"]
        assert pinned_tools, lock
        # A second start lists exactly the same definitions (no description varies by run).
        again = pin(folder)
        assert again == lock

        unpinned_tools, unpinned_prompts, _ = await served(UPSTREAM)
        config = f"[pinning]\nlock = {_toml_str(folder / 'manifold.lock')}\n{UPSTREAM}"
        tools, prompts, log = await served(config)
        assert tools == unpinned_tools
        assert prompts == unpinned_prompts
        assert len(tools) == len(pinned_tools)
        assert "pinning:" not in log, log
