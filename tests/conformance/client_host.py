"""What a host does in each of the conformance suite's client scenarios other than `auth/*`:
the steps both clients of tests/conformance/client_scenarios.sh take, the reference at the
suite's mock server and Manifold's driver at Manifold (which has that server as its one
upstream), so that the only difference between the two runs is who is the MCP client of the
mock server.

    initialize                           list the tools
    tools_call, request-metadata,        list the tools, call add_numbers(a=5, b=3) (a refusal
      http-standard-headers              is tolerated when add_numbers was not listed)
    sse-retry                            list the tools, call test_reconnection
    elicitation-sep1034-client-defaults  list the tools, call test_client_elicitation_defaults,
                                         accept the elicitation with the schema's defaults
    sep-2322-client-request-state        call the four test_mrtr_* tools in order; elicitations
                                         are confirmed
    http-custom-headers                  replay the context's toolCalls (tools listed only)
    http-invalid-tool-headers            call every tool listed, with stub arguments
    json-schema-ref-no-deref             list the tools (no $ref is ever fetched)
    json-schema-2020-12-preservation     echo json_schema_2020_12_tool's inputSchema back with
                                         json_schema_echo, verbatim
    sep-2640-client-no-prefetch          list the skills, load none
    sep-2640-client-verify-*             list the skills and load the first: read its SKILL.md,
                                         check its size, SHA-256 and frontmatter against the
                                         entry, and read its other files only when it passes

A step that fails raises, so the client exits non-zero; the scenarios that tolerate a refused
call (the header scenarios) log it and go on.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from typing import Any

import httpx2
import mcp_types as types
import yaml
from pydantic import TypeAdapter

from client_auth_common import HTTP_TIMEOUT, Invocation, reason
from mcp import Client
from mcp.client.context import ClientRequestContext
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

SKILLS = "io.modelcontextprotocol/skills"
# The mock of json-schema-ref-no-deref speaks only the session era whatever revision the
# harness names, so both clients talk to it (or to Manifold) with the initialize handshake.
SESSION_ONLY = ("json-schema-ref-no-deref",)
# Stub arguments by JSON Schema type, for the tools a scenario asks to call without saying how.
STUBS: dict[str, Any] = {"string": "x", "integer": 0, "number": 0, "boolean": False, "object": {}, "array": []}
ANY_RESULT: TypeAdapter[dict[str, Any]] = TypeAdapter(dict[str, Any])


class VerificationFailed(Exception):
    """A skill file that does not match its entry: the skill is not loaded."""


def mode_of(run: Invocation) -> str:
    """How the host connects: the stateless era's discovery at 2026-07-28, else initialize."""
    return "auto" if run.modern and run.scenario not in SESSION_ONLY else "legacy"


async def elicitation_defaults(
    _context: ClientRequestContext, params: types.ElicitRequestParams
) -> types.ElicitResult | types.ErrorData:
    """Accepts a form with the defaults its schema gives (SEP-1034), and confirms a yes/no
    question that has none (SEP-2322's mock asks `confirmed`)."""
    content: dict[str, Any] = {}
    if isinstance(params, types.ElicitRequestFormParams):
        for name, schema in (params.requested_schema.get("properties") or {}).items():
            if "default" in schema:
                content[name] = schema["default"]
            elif schema.get("type") == "boolean":
                content[name] = True
    print(f"elicitation answered: {content}")
    return types.ElicitResult(action="accept", content=content)


async def sampling_stub(
    _context: ClientRequestContext, _params: types.CreateMessageRequestParams
) -> types.CreateMessageResult | types.ErrorData:
    return types.CreateMessageResult(
        role="assistant", content=types.TextContent(type="text", text=""), model="conformance-host"
    )


async def roots_stub(_context: ClientRequestContext) -> types.ListRootsResult | types.ErrorData:
    return types.ListRootsResult(roots=[])


async def act_as_host(run: Invocation, url: str) -> None:
    """Plays RUN's scenario as a host at URL (the mock server, or Manifold in front of it)."""
    print(f"{run.scenario} at {run.revision}: {'discovery' if mode_of(run) == 'auto' else 'initialize'} at {url}")
    http = create_mcp_http_client(timeout=httpx2.Timeout(HTTP_TIMEOUT))
    transport = streamable_http_client(url, http_client=http)
    async with http, Client(
        transport,
        mode=mode_of(run),
        read_timeout_seconds=HTTP_TIMEOUT,
        cache=None,
        elicitation_callback=elicitation_defaults,
        sampling_callback=sampling_stub,
        list_roots_callback=roots_stub,
    ) as client:
        if run.scenario.startswith("sep-2640-"):
            await skills(client, load=run.scenario != "sep-2640-client-no-prefetch")
        else:
            await tools(client, run)


async def tools(client: Client, run: Invocation) -> None:
    listed = {tool.name: tool for tool in (await client.list_tools()).tools}
    print(f"tools: {sorted(listed)}")
    scenario = run.scenario
    if scenario in ("tools_call", "request-metadata", "http-standard-headers"):
        # The mocks of the last two list no tool but answer any call; an aggregator refuses a
        # tool its upstream did not list, which is no failure of the host (their checks judge
        # what reached the mock).
        await call(client, "add_numbers", {"a": 5, "b": 3}, tolerate="add_numbers" not in listed)
    elif scenario == "sse-retry":
        await call(client, "test_reconnection", {})
    elif scenario == "elicitation-sep1034-client-defaults":
        await call(client, "test_client_elicitation_defaults", {})
    elif scenario == "sep-2322-client-request-state":
        for name in ("test_mrtr_echo_state", "test_mrtr_unrelated", "test_mrtr_no_state", "test_mrtr_no_result_type"):
            await call(client, name, {})
    elif scenario == "http-custom-headers":
        for planned in run.context.get("toolCalls") or []:
            if planned.get("name") in listed:
                await call(client, planned["name"], planned.get("arguments") or {}, tolerate=True)
    elif scenario == "http-invalid-tool-headers":
        for tool in listed.values():
            await call(client, tool.name, stub_arguments(tool.input_schema), tolerate=True)
    elif scenario == "json-schema-2020-12-preservation":
        focal = listed.get("json_schema_2020_12_tool")
        if focal is None:
            raise RuntimeError("json_schema_2020_12_tool is not listed")
        await call(client, "json_schema_echo", {"schema": focal.input_schema})


def stub_arguments(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: STUBS.get((properties.get(name) or {}).get("type"), "x") for name in schema.get("required") or []}


async def call(client: Client, name: str, arguments: dict[str, Any], tolerate: bool = False) -> None:
    """Calls NAME; a failure raises unless TOLERATE, when it is only told."""
    try:
        result = await client.call_tool(name, arguments)
    except Exception as error:  # an MCP error answer, or the transport's
        if not tolerate:
            raise RuntimeError(f"{name} failed: {reason(error)}") from error
        print(f"{name} refused: {reason(error)}", file=sys.stderr)
        return
    texts = [getattr(block, "text", block.type) for block in result.content]
    print(f"called {name}: {'error ' if result.is_error else ''}{texts}")
    if result.is_error and not tolerate:
        raise RuntimeError(f"{name} answered an error: {texts}")


async def skills(client: Client, load: bool) -> None:
    """Lists every skill (all pages) and, when LOAD, loads the first one listed."""
    entries: list[dict[str, Any]] = []
    cursor = None
    while True:
        params = types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await client.session.send_request(
            types.PaginatedRequest[str](method="skills/list", params=params), ANY_RESULT
        )
        entries += page.get("skills") or []
        cursor = page.get("nextCursor")
        if not cursor:
            break
    print(f"skills: {[entry.get('uri') for entry in entries]}")
    if not load:
        return
    if not entries:
        raise RuntimeError("no skill was listed")
    try:
        await load_skill(client, entries[0])
    except VerificationFailed as refusal:
        # The host's duty is met: the tampered skill is not loaded and nothing more is read.
        print(f"skill not loaded: {refusal}")


async def load_skill(client: Client, entry: dict[str, Any]) -> None:
    """Reads the skill's SKILL.md and checks it against ENTRY; then its other files, each
    checked likewise. The reads are made only now that the skill is being loaded."""
    files = entry.get("resources")
    if not isinstance(files, list):
        raise RuntimeError(f"{entry.get('uri')}: its files are not listed ({files!r}); nothing to verify against")
    by_uri = {file.get("uri"): file for file in files if isinstance(file, dict)}
    main = entry.get("uri")
    if main not in by_uri:
        raise RuntimeError(f"{main}: its entry does not list the SKILL.md itself")
    text = (await verified_read(client, by_uri[main])).decode()
    frontmatter = parse_frontmatter(text)
    for field in sorted(set(frontmatter) | set(entry.get("frontmatter") or {})):
        if frontmatter.get(field) != (entry.get("frontmatter") or {}).get(field):
            raise VerificationFailed(f"{main}: frontmatter field '{field}' differs from the entry's")
    print(f"loaded {main}")
    for uri, file in by_uri.items():
        if uri != main:
            await verified_read(client, file)
            print(f"read {uri}")


async def verified_read(client: Client, file: dict[str, Any]) -> bytes:
    """The bytes of FILE, read with resources/read, once its size and digest match the entry."""
    uri = file.get("uri")
    try:
        result = await client.read_resource(uri)
    except Exception as error:  # an MCP error answer, or the transport's
        # A read refused (Manifold refuses one that fails its own verification) leaves the
        # skill unloaded, as a mismatch does; the scenario's checks tell whether the file was
        # asked of the server at all.
        raise VerificationFailed(f"{uri}: the read was refused: {reason(error)}") from error
    if len(result.contents) != 1:
        raise VerificationFailed(f"{uri}: {len(result.contents)} contents, not one")
    content = result.contents[0]
    if isinstance(content, types.TextResourceContents):
        data = content.text.encode()
    else:
        data = base64.b64decode(content.blob)
    if len(data) != file.get("size"):
        raise VerificationFailed(f"{uri}: {len(data)} bytes, the entry says {file.get('size')}")
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    if digest != file.get("digest"):
        raise VerificationFailed(f"{uri}: its SHA-256 is not the entry's digest")
    return data


def parse_frontmatter(text: str) -> dict[str, Any]:
    """The YAML between a SKILL.md's opening `---` line and the next one."""
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise VerificationFailed("the SKILL.md has no frontmatter")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise VerificationFailed("the SKILL.md's frontmatter is not closed") from None
    parsed = yaml.safe_load("\n".join(lines[1:end]))
    if not isinstance(parsed, dict):
        raise VerificationFailed("the SKILL.md's frontmatter is not a mapping")
    return parsed
