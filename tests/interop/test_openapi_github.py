"""GitHub's REST description (@octokit/openapi, over 1,200 operations) as an OpenAPI upstream,
mocked by Prism, through Manifold under the official Python SDK client (stdio). Prism validates
every request against the description, so each test also asserts that Prism found nothing wrong
with what Manifold sent. Prism takes tens of seconds to index this description: it is started
once for the module.
"""

from __future__ import annotations

import json
import re
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
import requests
from conftest import _check_prerequisites, _toml_str, all_tools, manifold_stdio, upstreams_settled
from mcp import MCPError
from mcp.client.session import ClientSession
from openapi_peers import GITHUB, PEER_REQUEST_TIMEOUT_S, Prism, prism

pytestmark = pytest.mark.anyio

INVALID_PARAMS = -32602
JSON = {"Accept": "application/json"}
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
#: Longest `manifold check` may take on this description (a debug build reads 13 MB of JSON,
#: which takes tens of seconds on a busy two-core machine).
CHECK_TIMEOUT_S = 300.0
#: A tool line of `check`, with a note after it when the exposed name was shortened.
_TOOL_LINE = re.compile(r"^  (\S+) -> github:(\S+)(?:  \[.*\])?$", re.M)
_SKIPPED_LINE = re.compile(r"^    operation (.+): skipped \((.*)\)$", re.M)


@pytest.fixture(scope="module")
def github(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prism]:
    with prism(GITHUB, tmp_path_factory.mktemp("prism-github")) as mock:
        yield mock


@pytest.fixture(scope="module")
def description() -> dict[str, Any]:
    return json.loads(GITHUB.read_text())


def config(mock: Prism, *extra: str) -> str:
    # Reading 13 MB of JSON takes a debug build seconds on a busy machine: startup is given time.
    lines = ["[server]", "startup_timeout_ms = 120000", "", "[upstreams.github]", f"openapi = {_toml_str(GITHUB)}", f"base_url = {_toml_str(mock.url)}", *extra]
    return "\n".join(lines) + "\n"


def operations(description: dict[str, Any]) -> list[dict[str, Any]]:
    return [op for item in description["paths"].values() for method, op in item.items() if method in METHODS]


def tool_name(operation_id: str) -> str:
    """The tool name the design fixes for an operationId of at most 64 characters once
    sanitized: characters outside [A-Za-z0-9_-] become `_`, runs collapsed, none at the ends."""
    name = re.sub(r"_+", "_", re.sub(r"[^A-Za-z0-9-]", "_", operation_id)).strip("_")
    assert len(name) <= 64, name
    return name


async def raw_call(session: ClientSession, name: str, arguments: dict[str, Any]) -> types.CallToolResult:
    """A tools/call whose result is not checked against the tool's output schema."""
    params = types.CallToolRequestParams(name=name, arguments=arguments)
    return await session.send_request(types.CallToolRequest(params=params), types.CallToolResult)


def manifold_check(config_toml: str) -> str:
    with tempfile.TemporaryDirectory(prefix="manifold-interop-") as tmp:
        path = Path(tmp) / "manifold.toml"
        path.write_text(config_toml)
        done = subprocess.run(
            [str(_check_prerequisites()), "check", "--config", str(path)],
            capture_output=True,
            text=True,
            timeout=CHECK_TIMEOUT_S,
        )
    assert done.returncode == 0, f"manifold check failed:\n{done.stdout}\n{done.stderr[-4000:]}"
    return done.stdout


def test_prism_serves_the_description_and_refuses_what_it_forbids(github: Prism) -> None:
    """The peer on its own: what the description allows is answered, what it forbids refused,
    so a request Manifold builds wrong fails the tests below."""
    r = requests.get(f"{github.url}/repos/octocat/hello-world", headers=JSON, timeout=PEER_REQUEST_TIMEOUT_S)
    assert r.status_code == 200 and r.json()["full_name"] == "octocat/Hello-World", r.text
    r = requests.get(
        f"{github.url}/repos/octocat/hello-world/issues",
        params={"state": "weird"},
        headers=JSON,
        timeout=PEER_REQUEST_TIMEOUT_S,
    )
    assert r.status_code == 422, r.text
    assert any("state must be equal to one of the allowed values" in v for v in github.violations())
    github.forget_violations()


async def test_every_operation_is_a_tool_or_skipped_with_why_and_calls_reach_prism(
    github: Prism, description: dict[str, Any]
) -> None:
    # With `cache`, check also marks each GET operation cached (and no other), a rule decided
    # per listed tool from its own definition.
    checked = manifold_check(config(github, 'cache = { ttl = "1m" }'))
    assert "github (prefix" in checked and ": up" in checked, checked[:2000]
    marks = {m[0]: m[1] for m in re.findall(r"^  (github__\S+) -> github:\S+(.*)$", checked, re.M)}
    assert "[cached 60s" in marks["github__repos_get"], marks["github__repos_get"]
    assert "[cached" not in marks["github__issues_create"], marks["github__issues_create"]
    check_tools = dict(_TOOL_LINE.findall(checked))
    skipped = _SKIPPED_LINE.findall(checked)
    assert all(why.strip() for _op, why in skipped), skipped
    assert len(check_tools) + len(skipped) == len(operations(description)), (len(check_tools), skipped)
    async with manifold_stdio(config(github)) as (session, _init, stderr):
        await upstreams_settled(stderr, "github")
        tools = {t.name: t for t in await all_tools(session)}
        assert set(tools) == set(check_tools)
        repo = tools["github__repos_get"].input_schema
        assert set(repo["properties"]) == {"owner", "repo"} and sorted(repo["required"]) == ["owner", "repo"]
        issues = tools["github__issues_list-for-repo"].input_schema
        assert {"owner", "repo", "state", "per_page", "page", "labels"} <= set(issues["properties"]), issues
        assert issues["properties"]["per_page"]["type"] == "integer"
        assert issues["properties"]["state"]["enum"] == ["open", "closed", "all"]
        pull = tools["github__pulls_get"].input_schema
        assert pull["properties"]["pull_number"]["type"] == "integer" and "pull_number" in pull["required"]
        assert tools["github__repos_get"].annotations.read_only_hint is True

        # Prism answers with the description's own example, which lacks members its schema
        # requires (`language`), so the SDK's checking call_tool would refuse it: the raw
        # result is read instead. Real answers carry them.
        got = await raw_call(session, "github__repos_get", {"owner": "octocat", "repo": "hello-world"})
        assert not got.is_error, got
        assert {"id", "full_name", "owner"} <= set(got.structured_content or {}), got
        listed = await session.call_tool(
            "github__issues_list-for-repo", {"owner": "octocat", "repo": "hello-world", "state": "open", "per_page": 5}
        )
        assert not listed.is_error, listed
        assert isinstance((listed.structured_content or {}).get("result"), list), listed

        before = github.requests()
        with pytest.raises(MCPError) as refused:
            await session.call_tool(
                "github__issues_list-for-repo", {"owner": "octocat", "repo": "hello-world", "per_page": "five"}
            )
        assert refused.value.code == INVALID_PARAMS and "per_page" in str(refused.value), refused.value
        assert github.requests() == before, "Prism saw the request a wrong argument made"
    seen = github.requests()
    assert ("GET", "/repos/octocat/hello-world") in seen and ("GET", "/repos/octocat/hello-world/issues") in seen, seen
    assert github.violations() == [], github.logs_tail()


async def test_a_tag_filter_lists_only_that_tags_operations(github: Prism, description: dict[str, Any]) -> None:
    wanted = {f"github__{tool_name(op['operationId'])}" for op in operations(description) if "issues" in op.get("tags", [])}
    assert len(wanted) > 40
    async with manifold_stdio(config(github, 'include = ["tag:issues"]')) as (session, _init, stderr):
        await upstreams_settled(stderr, "github")
        assert {t.name for t in await all_tools(session)} == wanted
        got = await session.call_tool("github__issues_get-label", {"owner": "octocat", "repo": "hello-world", "name": "bug"})
        assert not got.is_error and {"id", "name", "color"} <= set(got.structured_content or {}), got
    assert ("GET", "/repos/octocat/hello-world/labels/bug") in github.requests()
    assert github.violations() == [], github.logs_tail()
