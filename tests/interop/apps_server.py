"""A small MCP Apps server (extension `io.modelcontextprotocol/ui`) built on the official Python
SDK's `mcp.server.apps`, for Manifold's interop tests (test_apps.py). Two of them, started under
different names, serve the same `ui://` path with different HTML, so a test can tell which one
answered.

  show_time   bound to ui://clock/app.html (visible to model and app); says whether the client
              that reached it declared MCP Apps support
  tick        bound to ui://clock/app.html, visible to the app only

Run: python apps_server.py NAME   (stdio)
"""

from __future__ import annotations

import sys

from mcp.server.apps import Apps, client_supports_apps
from mcp.server.mcpserver import Context, MCPServer

NAME = sys.argv[1] if len(sys.argv) > 1 else "clock"
APP_URI = "ui://clock/app.html"


def html(name: str) -> str:
    """The app's HTML as server `name` serves it."""
    return f"<!doctype html><title>{name}</title><p id=server>{name}</p>"


apps = Apps()


@apps.tool(resource_uri=APP_URI, description="The time, shown by the clock app.")
def show_time(ctx: Context) -> str:
    return f"{NAME}: 12:00 (apps={client_supports_apps(ctx)})"


@apps.tool(resource_uri=APP_URI, visibility=["app"], description="Called by the app to refresh.")
def tick() -> str:
    return f"{NAME}: tick"


apps.add_html_resource(APP_URI, html(NAME), prefers_border=True)

mcp = MCPServer(f"apps-{NAME}", version="1.0.0", extensions=[apps])


if __name__ == "__main__":
    mcp.run("stdio")
