"""A small MCP server built on the official Python SDK (mcp 2.3, `MCPServer`) that serves both
protocol eras over stdio, for Manifold's interop tests (test_stateless_server.py).

The connection's era is the one its client opens with: `initialize` (2024-11-05..2025-11-25)
or a request carrying the 2026-07-28 `_meta` envelope. Its tools ask the user for input through
the SDK's resolvers (`Resolve` + `Elicit`), which the SDK carries in the era's own way: a
standalone `elicitation/create` request mid-call in the session era, an `input_required`
answer (and the client's retry with `inputResponses` and `requestState`) in the stateless era.

  confirm_order   asks one question: "Ship {item}?" (approve: bool, note: str)
  book_trip       asks two, the second depending on the first answer, so two rounds:
                  "Where to?" (city) and then "When do you go to {city}?" (date)
  add             asks nothing

tools/list carries caching hints (ttlMs 12345, cacheScope "public") in the stateless era.

Run: python stateless_server.py   (stdio)
"""

from __future__ import annotations

from typing import Annotated

from mcp.server.caching import CacheHint
from mcp.server.mcpserver import Context, Elicit, MCPServer, Resolve
from pydantic import BaseModel

#: The caching hints of tools/list (what a stateless client sees from this server directly).
TOOLS_TTL_MS = 12345


class Confirmation(BaseModel):
    approve: bool
    note: str = ""


class Destination(BaseModel):
    city: str


class Dates(BaseModel):
    date: str


def ask_confirmation(item: str) -> Elicit[Confirmation]:
    return Elicit(f"Ship {item}?", Confirmation)


def ask_destination() -> Elicit[Destination]:
    return Elicit("Where to?", Destination)


def ask_dates(destination: Annotated[Destination, Resolve(ask_destination)]) -> Elicit[Dates]:
    return Elicit(f"When do you go to {destination.city}?", Dates)


mcp = MCPServer(
    "interop-dual-era",
    version="1.0.0",
    cache_hints={"tools/list": CacheHint(ttl_ms=TOOLS_TTL_MS, scope="public")},
)


@mcp.tool()
def confirm_order(item: str, answer: Annotated[Confirmation, Resolve(ask_confirmation)], ctx: Context) -> str:
    """Ships an item once the user confirms."""
    return f"{item}: approve={answer.approve} note={answer.note!r} (served at {ctx.protocol_version})"


@mcp.tool()
def book_trip(
    destination: Annotated[Destination, Resolve(ask_destination)],
    dates: Annotated[Dates, Resolve(ask_dates)],
) -> str:
    """Books a trip, asking where and then when."""
    return f"trip to {destination.city} on {dates.date}"


@mcp.tool()
def add(a: int, b: int) -> int:
    """Adds two integers."""
    return a + b


if __name__ == "__main__":
    mcp.run("stdio")
