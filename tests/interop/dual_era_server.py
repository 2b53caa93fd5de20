"""A stateless-era (2026-07-28) MCP server over Streamable HTTP, built on the official Python
SDK, for the interop tests of Manifold's upstream side. The SDK's HTTP entry serves each
2026-07-28 POST on its own and checks the request metadata headers (`MCP-Protocol-Version`,
`Mcp-Method`, `Mcp-Name`, and `Mcp-Param-*` for parameters annotated with `x-mcp-header`)
against the body, refusing a request whose headers are missing or disagree; it serves
`subscriptions/listen` streams. It also serves the earlier revisions (`initialize`), like any
dual-era server.

Tools: `echo`, `where` (its `region` is mirrored into `Mcp-Param-Region`), `add_tool` (adds a
tool and announces the change), `bump` (changes `test://counter` and announces that), and
`http_log` (what reached the server: method, `Mcp-Method`, session id, per request).

Binds 127.0.0.1 on a free port and prints `LISTENING 127.0.0.1:PORT` on stderr once it
listens; with `--stdio`, serves the same over stdio instead (where the SDK serves the era the
client's first request opens with, and `subscriptions/listen` streams on the one channel).
"""

from __future__ import annotations

import json
import socket
import sys
from typing import Annotated, Any

import uvicorn
from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, MCPServer
from pydantic import Field

#: What reached the server over HTTP, oldest first.
SEEN: list[dict[str, Any]] = []

server = MCPServer(
    "stateless-fixture",
    version="1.0.0",
    instructions="A server of the stateless era.",
    cache_hints={"tools/list": CacheHint(ttl_ms=60_000, scope="public")},
)

counter = 0


@server.tool()
def echo(text: str) -> str:
    """Echoes `text`."""
    return text


@server.tool()
def where(region: Annotated[str, Field(json_schema_extra={"x-mcp-header": "Region"})]) -> str:
    """Names the region it was asked about (sent in a header too)."""
    return f"in {region}"


@server.tool()
async def add_tool(name: str, ctx: Context) -> str:
    """Adds a tool called `name`, and tells listeners the tool list changed."""

    def added() -> str:
        return f"{name} here"

    server.add_tool(added, name=name, description="Added at run time.")
    await ctx.notify_tools_changed()
    return "added"


@server.resource("test://counter", mime_type="text/plain")
def counter_resource() -> str:
    return str(counter)


@server.tool()
async def bump(ctx: Context) -> str:
    """Adds one to `test://counter`, and tells its subscribers."""
    global counter
    counter += 1
    await ctx.notify_resource_updated("test://counter")
    return str(counter)


@server.tool()
def http_log() -> str:
    """What reached the server, as JSON."""
    return json.dumps(SEEN)


def recording(app: Any) -> Any:
    """The app, noting each HTTP request's method and MCP headers first."""

    async def wrapped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            headers = {k.decode().lower(): v.decode() for k, v in scope["headers"]}
            SEEN.append(
                {
                    "http": scope["method"],
                    "mcp_method": headers.get("mcp-method"),
                    "version": headers.get("mcp-protocol-version"),
                    "session": headers.get("mcp-session-id"),
                }
            )
        await app(scope, receive, send)

    return wrapped


def main() -> None:
    if "--stdio" in sys.argv[1:]:
        server.run("stdio")
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    app = recording(server.streamable_http_app(host="127.0.0.1"))
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    print(f"LISTENING 127.0.0.1:{port}", file=sys.stderr, flush=True)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    main()
