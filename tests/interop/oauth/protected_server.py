"""An OAuth-protected MCP server built on the official Python SDK (mcp 2.3, `MCPServer`), over
Streamable HTTP on a loopback port, for Manifold's upstream credential tests.

It is a resource server only, with the SDK's own support for that: `AuthSettings` (the
authorization server it trusts, its own resource URL, the scope it requires), its protected
resource metadata (RFC 9728) and the 401 with `WWW-Authenticate` the SDK answers a request
without a valid token with. Tokens are the JWT access tokens of authorization_server.mjs,
verified here against the authorization server's JWKS: signature, issuer, expiry, and the
audience, which must be this server's resource URL (the SDK checks it again).

  whoami   the subject of the caller's access token, as the SDK's access-token context gives it
  echo     returns its text

Run: python protected_server.py --issuer URL [--scope mcp] [--port 0]
stdout: the server's MCP URL (http://127.0.0.1:PORT/mcp) once it accepts connections.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import urllib.request
from typing import Any

import anyio
import jwt
import uvicorn
from mcp.server.auth.middleware.auth_context import get_access_token
from mcp.server.auth.provider import AccessToken, TokenVerifier
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

#: How long a request to the authorization server may take.
FETCH_TIMEOUT_S = 10


def authorization_server_metadata(issuer: str) -> dict[str, Any]:
    with urllib.request.urlopen(f"{issuer}/.well-known/oauth-authorization-server", timeout=FETCH_TIMEOUT_S) as r:
        return json.load(r)


class JwksTokenVerifier(TokenVerifier):
    """Accepts the authorization server's JWT access tokens issued for `resource`."""

    def __init__(self, issuer: str, jwks_uri: str, resource: str):
        self.issuer = issuer
        self.resource = resource
        self.keys = jwt.PyJWKClient(jwks_uri, timeout=FETCH_TIMEOUT_S)

    def _decode(self, token: str) -> dict[str, Any]:
        key = self.keys.get_signing_key_from_jwt(token)
        return jwt.decode(
            token,
            key.key,
            algorithms=["RS256"],
            issuer=self.issuer,
            audience=self.resource,
            options={"require": ["exp", "sub", "aud", "iss"]},
        )

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            # The key set is fetched once (a blocking request), then cached.
            claims = await anyio.to_thread.run_sync(self._decode, token)
        except (jwt.PyJWTError, OSError) as e:
            print(f"token refused: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            return None
        aud = claims["aud"]
        return AccessToken(
            token=token,
            client_id=str(claims.get("client_id", "")),
            scopes=str(claims.get("scope", "")).split(),
            expires_at=int(claims["exp"]),
            resource=aud if isinstance(aud, str) else aud[0],
            subject=str(claims["sub"]),
            claims={"iss": claims["iss"]},
        )


def build(issuer: str, resource: str, scope: str) -> MCPServer:
    metadata = authorization_server_metadata(issuer)
    server = MCPServer(
        "interop-protected",
        version="1.0.0",
        token_verifier=JwksTokenVerifier(metadata["issuer"], metadata["jwks_uri"], resource),
        auth=AuthSettings(
            issuer_url=metadata["issuer"],
            resource_server_url=resource,
            required_scopes=scope.split(),
            validate_token_resource=True,
        ),
    )

    @server.tool()
    def whoami() -> str:
        """The subject the caller's access token was issued to."""
        token = get_access_token()
        return token.subject if token and token.subject else "<anonymous>"

    @server.tool()
    def echo(text: str) -> str:
        """Returns the text."""
        return text

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--issuer", required=True, help="the authorization server's issuer URL")
    parser.add_argument("--scope", default="mcp", help="space-separated scopes every request needs")
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()

    # The socket is bound first, so that the resource URL (which names the port) is known
    # before the app that advertises it is built, with no window for another process to take it.
    sock = socket.socket()
    sock.bind(("127.0.0.1", args.port))
    resource = f"http://127.0.0.1:{sock.getsockname()[1]}/mcp"
    app = build(args.issuer, resource, args.scope).streamable_http_app(host="127.0.0.1")
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    server = uvicorn.Server(config)

    async def serve() -> None:
        async with anyio.create_task_group() as tg:
            tg.start_soon(server.serve, [sock])
            while not server.started:
                await anyio.sleep(0.02)
            print(resource, flush=True)

    anyio.run(serve)


if __name__ == "__main__":
    main()
