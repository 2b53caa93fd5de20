"""Skills (extension `io.modelcontextprotocol/skills`, SEP-2640) through the merge: two servers
built on the official TypeScript SDK's `ext/skills` (skills_server.mjs, configurations "alpha"
and "beta", which share the skill name `pdf-processing`), fronted by Manifold over stdio and
over Streamable HTTP, under the official Python SDK client in the session era ("legacy":
initialize and a session) and in the stateless one ("auto": server/discover, 2026-07-28).

Manifold runs alpha as a stdio child (spoken to in the era it probes for: the SDK answers
server/discover) and reaches beta over Streamable HTTP in the session era (`era = "session"`),
so both of Manifold's upstream paths carry skills. The reference is each server itself: the
same checks run against alpha and beta directly ("direct-*" targets), with URIs unchanged,
which is what shows that what a check asserts holds of the SDK's own server.

The Python SDK has no typed skills methods: skills/list, skills/get and
resources/directory/read go through its session's `send_request` with a generic request and
result, which still carries the stateless era's per-request envelope.
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import mcp_types as types
import pytest
from conftest import (
    STATELESS,
    StatelessHttp,
    _check_prerequisites,
    _serving_http,
    _stop,
    _toml_str,
    _wait_for_line,
    manifold_stdio_client,
    node,
    sdk_client,
    upstreams_settled,
)
from mcp import MCPError
from pydantic import TypeAdapter

pytestmark = pytest.mark.anyio

HERE = Path(__file__).resolve().parent
SERVER = HERE / "skills_server.mjs"
SDK = HERE / "node_modules" / "@modelcontextprotocol" / "server" / "package.json"
SKILLS = "io.modelcontextprotocol/skills"
DIRECTORY = "inode/directory"
INVALID_PARAMS = -32602
ANY = TypeAdapter(dict[str, Any])
#: Every configuration of skills_server.mjs; Manifold fronts them under these keys.
PEERS = ("alpha", "beta")
#: Who the host talks to: a server itself, or Manifold (over stdio or Streamable HTTP).
TARGETS = ["direct-alpha", "direct-beta", "stdio", "http"]
#: "legacy" initializes (the session era); "auto" starts with server/discover (stateless).
MODES = ["legacy", "auto"]


@contextmanager
def skills_http(config: str, log: Path) -> Iterator[str]:
    """skills_server.mjs CONFIG over Streamable HTTP on a free loopback port: yields its URL."""
    proc = subprocess.Popen(
        [node(), str(SERVER), config, "http", "0"],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=log.open("w"),
        cwd=str(HERE),
    )
    try:
        m = _wait_for_line(proc, r"listening on 127\.0\.0\.1:(\d+)", log, f"skills server {config}")
        yield f"http://127.0.0.1:{m.group(1)}/mcp"
    finally:
        _stop(proc)


async def raw_catalog(url: str) -> list[dict[str, Any]]:
    """Every skills/list entry a server serves, read page by page over raw stateless HTTP."""
    entries: list[dict[str, Any]] = []
    async with httpx2.AsyncClient() as http:
        raw = StatelessHttp(url, http)
        cursor: str | None = None
        for _ in range(100):
            page = await raw.result("skills/list", {"cursor": cursor} if cursor else {})
            entries.extend(page["skills"])
            cursor = page.get("nextCursor")
            if not cursor:
                return entries
    raise AssertionError(f"{url}: skills/list never ended")


@dataclass
class Peers:
    urls: dict[str, str]
    #: Each server's own entries, as it lists them.
    catalogs: dict[str, list[dict[str, Any]]]


@pytest.fixture(scope="module")
async def peers(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Peers]:
    """Both configurations over Streamable HTTP, shared by this module's tests, with the
    catalog each serves itself."""
    if not SDK.exists():
        pytest.fail(f"{SDK} missing: run `bash tests/interop/install.sh`", pytrace=False)
    tmp = tmp_path_factory.mktemp("skills-peers")
    with skills_http("alpha", tmp / "alpha.stderr") as alpha, skills_http("beta", tmp / "beta.stderr") as beta:
        urls = {"alpha": alpha, "beta": beta}
        catalogs = {key: await raw_catalog(url) for key, url in urls.items()}
        yield Peers(urls, catalogs)


def config(peers: Peers, team: str = "") -> str:
    """Manifold in front of alpha (a stdio child) and beta (over HTTP, in the session era);
    with `team`, the host is that team, which sees alpha only."""
    teams = f'[server]\nteam = "{team}"\n\n[teams.{team}]\nupstreams = ["alpha"]\n\n' if team else ""
    return (
        f"{teams}[upstreams.alpha]\ncommand = {_toml_str(node())}\n"
        f'args = [{_toml_str(SERVER)}, "alpha", "stdio"]\n\n'
        f'[upstreams.beta]\nurl = {_toml_str(peers.urls["beta"])}\nera = "session"\n'
    )


@dataclass
class Expect:
    """What a host should see: the skills of `keys`, their URIs exposed under `prefixed`."""

    peers: Peers
    keys: tuple[str, ...]
    prefixed: bool

    def expose(self, key: str, uri: str) -> str:
        assert uri.startswith("skill://"), uri
        return f"skill://{key}/{uri.removeprefix('skill://')}" if self.prefixed else uri

    def entries(self) -> list[dict[str, Any]]:
        """Each server's entries with every URI exposed; nothing else changed."""
        out = []
        for key in self.keys:
            for entry in self.peers.catalogs[key]:
                exposed = {**entry, "uri": self.expose(key, entry["uri"])}
                exposed["resources"] = [{**r, "uri": self.expose(key, r["uri"])} for r in entry["resources"]]
                out.append(exposed)
        return sorted(out, key=lambda e: e["uri"])

    def unknown(self) -> list[str]:
        """skill:// URIs that name no skill served to this host."""
        missing = [self.expose(self.keys[0], "skill://no-such-skill/SKILL.md")]
        if self.prefixed:
            missing.append("skill://gamma/pdf-processing/SKILL.md")
        return missing


@asynccontextmanager
async def host(target: str, mode: str, peers: Peers, tmp: Path, team: str = "") -> AsyncIterator[Any]:
    """The SDK's `Client` in `mode` on `target`, once every upstream is ready."""
    if target.startswith("direct-"):
        async with sdk_client(peers.urls[target.removeprefix("direct-")], mode) as client:
            yield client
        return
    bin_ = _check_prerequisites()
    log = tmp / "manifold.stderr"
    if target == "stdio":
        async with manifold_stdio_client(config(peers, team), mode, log, *PEERS) as client:
            yield client
        return
    path = tmp / "manifold.toml"
    path.write_text(config(peers, team))
    with _serving_http(bin_, path, log) as port:
        await upstreams_settled(log, *PEERS)
        async with sdk_client(f"http://127.0.0.1:{port}/mcp", mode) as client:
            yield client


def expect_for(target: str, peers: Peers) -> Expect:
    if target.startswith("direct-"):
        return Expect(peers, (target.removeprefix("direct-"),), prefixed=False)
    return Expect(peers, PEERS, prefixed=True)


async def call(client: Any, method: str, params: dict[str, Any]) -> dict[str, Any]:
    """A request the SDK has no typed method for, answered with its raw result."""
    request = types.Request[dict[str, Any] | None, str](method=method, params=params)
    return await client.session.send_request(request, ANY)


def stateless(client: Any) -> bool:
    return client.protocol_version == STATELESS


def assert_cacheable(client: Any, result: dict[str, Any], what: str) -> None:
    """From 2026-07-28 on, skills results carry the caching hints (required fields)."""
    if stateless(client):
        assert isinstance(result.get("ttlMs"), int) and result["ttlMs"] >= 0, (what, result)
        assert result.get("cacheScope") in ("public", "private"), (what, result)


async def all_skills(client: Any) -> list[dict[str, Any]]:
    """Every skills/list entry, following nextCursor to the end."""
    entries: list[dict[str, Any]] = []
    cursor: str | None = None
    seen: set[str] = set()
    for _ in range(100):
        page = await call(client, "skills/list", {"cursor": cursor} if cursor else {})
        assert_cacheable(client, page, "skills/list")
        entries.extend(page["skills"])
        cursor = page.get("nextCursor")
        if not cursor:
            return entries
        assert cursor not in seen, f"skills/list: nextCursor {cursor!r} repeats"
        seen.add(cursor)
    raise AssertionError("skills/list: more than 100 pages")


async def directory(client: Any, uri: str) -> list[dict[str, Any]]:
    """Every child resources/directory/read lists for `uri`, following nextCursor."""
    children: list[dict[str, Any]] = []
    cursor: str | None = None
    for _ in range(100):
        page = await call(client, "resources/directory/read", {"uri": uri, **({"cursor": cursor} if cursor else {})})
        assert_cacheable(client, page, "resources/directory/read")
        children.extend(page["resources"])
        cursor = page.get("nextCursor")
        if not cursor:
            return children
    raise AssertionError(f"resources/directory/read {uri}: more than 100 pages")


async def refused(client: Any, method: str, params: dict[str, Any]) -> int:
    with pytest.raises(MCPError) as error:
        await call(client, method, params)
    return error.value.code


def skill_dir(entry: dict[str, Any]) -> str:
    return entry["uri"].removesuffix("/SKILL.md")


def last_segment(uri: str) -> str:
    return uri.removesuffix("/SKILL.md").rsplit("/", 1)[-1]


# --- every target: the servers themselves, and Manifold in front of both -----------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS)
async def test_skills_list_has_every_skill_of_every_server(target: str, mode: str, peers: Peers, tmp_path: Path):
    expect = expect_for(target, peers)
    async with host(target, mode, peers, tmp_path) as client:
        assert stateless(client) == (mode == "auto"), client.protocol_version
        extensions = client.server_capabilities.extensions or {}
        # Every server in view declares directoryRead, so the merged capability does too, and
        # resources (skill files are read with resources/read).
        assert extensions.get(SKILLS) == {"directoryRead": True}, client.server_capabilities
        assert client.server_capabilities.resources is not None, client.server_capabilities
        listed = await all_skills(client)
        uris = [e["uri"] for e in listed]
        assert len(uris) == len(set(uris)), f"an entry is listed twice: {uris}"
        assert sorted(listed, key=lambda e: e["uri"]) == expect.entries()
        for entry in listed:
            assert last_segment(entry["uri"]) == entry["frontmatter"]["name"], entry
            for resource in entry["resources"]:
                assert resource["uri"].startswith(skill_dir(entry) + "/"), (entry["uri"], resource)
        if expect.prefixed:
            # The name both servers use is listed twice, told apart by the URI's authority.
            pdf = {e["uri"]: e["frontmatter"] for e in listed if e["frontmatter"]["name"] == "pdf-processing"}
            assert set(pdf) == {"skill://alpha/pdf-processing/SKILL.md", "skill://beta/pdf-processing/SKILL.md"}, pdf
            assert pdf["skill://alpha/pdf-processing/SKILL.md"] != pdf["skill://beta/pdf-processing/SKILL.md"]
            assert "skill://alpha/acme/brand-voice/SKILL.md" in uris, uris


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS)
async def test_every_file_matches_the_digest_and_size_listed(target: str, mode: str, peers: Peers, tmp_path: Path):
    async with host(target, mode, peers, tmp_path) as client:
        listed = await all_skills(client)
        blobs = 0
        for entry in listed:
            for resource in entry["resources"]:
                read = await client.read_resource(resource["uri"])
                (content,) = read.contents
                assert str(content.uri) == resource["uri"], content
                if isinstance(content, types.BlobResourceContents):
                    data = base64.b64decode(content.blob)
                    assert data.startswith(b"\x89PNG\r\n\x1a\n"), resource
                    blobs += 1
                else:
                    data = content.text.encode()
                got = {"digest": "sha256:" + hashlib.sha256(data).hexdigest(), "size": len(data)}
                assert got == {"digest": resource["digest"], "size": resource["size"]}, resource["uri"]
        assert blobs >= 1, "no binary skill file was read"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS)
async def test_skills_get_echoes_each_listed_uri_and_refuses_unknown_ones(
    target: str, mode: str, peers: Peers, tmp_path: Path
):
    expect = expect_for(target, peers)
    async with host(target, mode, peers, tmp_path) as client:
        for entry in await all_skills(client):
            got = await call(client, "skills/get", {"uri": entry["uri"]})
            assert got["skill"] == entry, entry["uri"]
            assert "nextCursor" not in got, got
            assert_cacheable(client, got, "skills/get")
        for uri in expect.unknown():
            assert await refused(client, "skills/get", {"uri": uri}) == INVALID_PARAMS, uri


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", TARGETS)
async def test_directory_reads_list_direct_children(target: str, mode: str, peers: Peers, tmp_path: Path):
    async with host(target, mode, peers, tmp_path) as client:
        subdirectories = 0
        for entry in await all_skills(client):
            root = skill_dir(entry)
            # What the listing says lies directly in the skill's directory: files, and the
            # first level of every deeper path as a directory.
            want: dict[str, bool] = {}
            for resource in entry["resources"]:
                rest = resource["uri"].removeprefix(root + "/")
                head, _, tail = rest.partition("/")
                want[f"{root}/{head}"] = bool(tail) or want.get(f"{root}/{head}", False)
            children = await directory(client, root)
            got = {c["uri"]: c.get("mimeType") == DIRECTORY for c in children}
            assert got == want, root
            for uri, is_dir in got.items():
                if is_dir:
                    subdirectories += 1
                    # A subdirectory reads too, and what it lists lies under it.
                    inner = await directory(client, uri)
                    assert inner and all(c["uri"].startswith(uri + "/") for c in inner), (uri, inner)
            # A file is no directory.
            assert await refused(client, "resources/directory/read", {"uri": entry["uri"]}) == INVALID_PARAMS
        assert subdirectories >= 1


# --- Manifold only ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("target", ["stdio", "http"])
async def test_skill_resources_and_templates_are_exposed(target: str, mode: str, peers: Peers, tmp_path: Path):
    async with host(target, mode, peers, tmp_path) as client:
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert {"skill://alpha/{+path}", "skill://beta/{+path}"} <= set(templates), templates
        listed = {e["uri"] for e in await all_skills(client)}
        resources = [str(r.uri) for r in (await client.list_resources()).resources if str(r.uri).startswith("skill://")]
        # What the servers list in resources/list (their SKILL.md files) comes under the same URIs.
        assert resources and set(resources) <= listed, (resources, listed)
        assert {r.split("/")[2] for r in resources} == {"alpha", "beta"}, resources


@pytest.mark.parametrize("mode", MODES)
async def test_a_team_that_does_not_see_a_server_sees_none_of_its_skills(mode: str, peers: Peers, tmp_path: Path):
    expect = Expect(peers, ("alpha",), prefixed=True)
    beta = Expect(peers, ("beta",), prefixed=True).entries()
    async with host("stdio", mode, peers, tmp_path, team="only-alpha") as client:
        assert (client.server_capabilities.extensions or {}).get(SKILLS) == {"directoryRead": True}
        listed = await all_skills(client)
        assert sorted(listed, key=lambda e: e["uri"]) == expect.entries()
        for entry in beta:
            assert await refused(client, "skills/get", {"uri": entry["uri"]}) == INVALID_PARAMS, entry["uri"]
            assert await refused(client, "resources/directory/read", {"uri": skill_dir(entry)}) == INVALID_PARAMS
        resources = [str(r.uri) for r in (await client.list_resources()).resources]
        templates = [t.uri_template for t in (await client.list_resource_templates()).resource_templates]
        assert not [u for u in resources + templates if u.startswith("skill://beta")], (resources, templates)
        assert "skill://alpha/{+path}" in templates, templates
        # A file of beta's reads as unknown too (resource not found: -32002 in the session era,
        # -32602 in the stateless one).
        with pytest.raises(MCPError) as error:
            await client.read_resource(beta[0]["resources"][0]["uri"])
        assert error.value.code == (INVALID_PARAMS if mode == "auto" else -32002), error.value
