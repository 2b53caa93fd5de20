"""The official Python SDK's own OAuth client as a client of the conformance suite's `auth/*`
scenarios: the baseline that tests/conformance/client_auth.sh compares Manifold with.

    conformance client --command ".venv/bin/python tests/conformance/auth_reference_client.py" \
        --scenario auth/metadata-default

Authorization code scenarios use the SDK's OAuthClientProvider: its redirect handler opens the
authorization URL without following it (the suite's mock authorization server answers at once
with a redirect that carries the code), and its callback handler hands that code back. A
pre-registered client comes from the scenario's context. The extension scenarios use the SDK's
client credentials providers (a secret, or a signed JWT) and its identity assertion provider
(the ID token of the context exchanged at the identity provider for an ID-JAG first, which the
SDK leaves to its caller). The client then lists the tools and calls one, and exits 0.

Exits 3 (UNSUPPORTED) for the scenarios the SDK has no provider for, 2 for a bad invocation,
1 when the flow fails. Every request is bounded.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import anyio
import httpx2
from pydantic import AnyUrl

sys.path.insert(0, str(Path(__file__).resolve().parent))

from client_auth_common import (  # noqa: E402
    CLIENT_CREDENTIALS_KEY,
    CLIENT_CREDENTIALS_SECRET,
    CONFORMANCE_CLIENT_METADATA_URL,
    ENTERPRISE,
    EXCHANGE_TIMEOUT,
    HTTP_TIMEOUT,
    WITHOUT_A_CLIENT,
    act_as_host,
    Invocation,
    invocation,
    needs,
    reason,
    unsupported,
    redirect_target,
)
from mcp.client.auth import OAuthClientProvider, TokenStorage  # noqa: E402
from mcp.client.auth.extensions.client_credentials import (  # noqa: E402
    ClientCredentialsOAuthProvider,
    PrivateKeyJWTOAuthProvider,
    SignedJWTParameters,
)
from mcp.client.auth.extensions.identity_assertion import IdentityAssertionOAuthProvider  # noqa: E402
from mcp.shared.auth import (  # noqa: E402
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)

# Where the SDK client says the browser comes back to; the mock server redirects there, and
# the redirect is read rather than followed, so nothing needs to listen on it.
REDIRECT_URI = "http://localhost:3000/callback"

TOKEN_EXCHANGE = "urn:ietf:params:oauth:grant-type:token-exchange"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
ID_JAG = "urn:ietf:params:oauth:token-type:id-jag"


class MemoryStorage(TokenStorage):
    """Tokens and the registered client, for this one run."""

    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client = client_info


class Browser:
    """Plays the user's browser: opens the authorization URL and keeps what the redirect says."""

    def __init__(self) -> None:
        self.answer: dict[str, str] = {}

    async def open(self, authorization_url: str) -> None:
        async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT, follow_redirects=False) as http:
            self.answer = redirect_target(await http.get(authorization_url))
        if "code" not in self.answer:
            raise RuntimeError(f"the authorization server sent no code: {sorted(self.answer)}")

    async def come_back(self) -> AuthorizationCodeResult:
        answer, self.answer = self.answer, {}
        return AuthorizationCodeResult(code=answer["code"], state=answer.get("state"), iss=answer.get("iss"))


def authorization_code(run: Invocation) -> httpx2.Auth:
    storage = MemoryStorage()
    client_id = run.context.get("client_id")
    if client_id:
        # auth/pre-registration: the authorization server does no registration; the client it
        # knows comes in the context.
        secret = run.context.get("client_secret")
        storage.client = OAuthClientInformationFull(
            client_id=client_id,
            client_secret=secret,
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            token_endpoint_auth_method="client_secret_basic" if secret else "none",
        )
    browser = Browser()
    return OAuthClientProvider(
        server_url=run.url,
        client_metadata=OAuthClientMetadata(
            client_name="conformance reference client",
            redirect_uris=[AnyUrl(REDIRECT_URI)],
            grant_types=["authorization_code", "refresh_token"],
            response_types=["code"],
        ),
        storage=storage,
        redirect_handler=browser.open,
        callback_handler=browser.come_back,
        client_metadata_url=CONFORMANCE_CLIENT_METADATA_URL,
    )


def client_credentials(run: Invocation) -> httpx2.Auth:
    if run.scenario in CLIENT_CREDENTIALS_SECRET:
        client_id, secret = needs(run.context, "client_id", "client_secret")
        return ClientCredentialsOAuthProvider(
            server_url=run.url,
            storage=MemoryStorage(),
            client_id=client_id,
            client_secret=secret,
            token_endpoint_auth_method="client_secret_basic",
        )
    client_id, pem = needs(run.context, "client_id", "private_key_pem")
    signer = SignedJWTParameters(
        issuer=client_id,
        subject=client_id,
        signing_key=pem,
        signing_algorithm=run.context.get("signing_algorithm") or "RS256",
    )
    return PrivateKeyJWTOAuthProvider(
        server_url=run.url,
        storage=MemoryStorage(),
        client_id=client_id,
        assertion_provider=signer.create_assertion_provider(),
    )


async def authorization_server_of(url: str) -> str:
    """The first authorization server the resource's metadata names (RFC 9728, path-based
    well-known first, then the root one)."""
    parts = httpx2.URL(url)
    origin = f"{parts.scheme}://{parts.netloc.decode()}"
    path = parts.path.rstrip("/")
    async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as http:
        for where in (f"{origin}/.well-known/oauth-protected-resource{path}", f"{origin}/.well-known/oauth-protected-resource"):
            response = await http.get(where)
            if response.status_code == 200:
                servers = response.json().get("authorization_servers") or []
                if servers:
                    return servers[0]
    raise RuntimeError(f"no protected resource metadata names an authorization server for {url}")


async def enterprise(run: Invocation) -> httpx2.Auth:
    id_token, idp_token_endpoint = needs(run.context, "idp_id_token", "idp_token_endpoint")
    client_id, secret = needs(run.context, "client_id", "client_secret")
    idp_client_id = run.context.get("idp_client_id")

    async def identity_assertion(audience: str, resource: str) -> str:
        # RFC 8693 at the identity provider: the user's ID token for an ID-JAG naming the MCP
        # server's authorization server (audience) and the server itself (resource).
        form = {
            "grant_type": TOKEN_EXCHANGE,
            "subject_token": id_token,
            "subject_token_type": ID_TOKEN,
            "requested_token_type": ID_JAG,
            "audience": audience,
            "resource": resource,
        }
        if idp_client_id:
            form["client_id"] = idp_client_id
        async with httpx2.AsyncClient(timeout=HTTP_TIMEOUT) as http:
            response = await http.post(idp_token_endpoint, data=form)
        if response.status_code != 200:
            raise RuntimeError(f"the identity provider refused the exchange ({response.status_code}): {response.text}")
        return response.json()["access_token"]

    return IdentityAssertionOAuthProvider(
        server_url=run.url,
        storage=MemoryStorage(),
        client_id=client_id,
        client_secret=secret,
        issuer=await authorization_server_of(run.url),
        assertion_provider=identity_assertion,
        token_endpoint_auth_method="client_secret_basic",
    )


async def main() -> int:
    run = invocation()
    if run.scenario in WITHOUT_A_CLIENT:
        return unsupported(run.scenario, "the SDK has no client for it")
    try:
        with anyio.fail_after(EXCHANGE_TIMEOUT):
            if run.scenario in CLIENT_CREDENTIALS_SECRET + CLIENT_CREDENTIALS_KEY:
                auth = client_credentials(run)
            elif run.scenario in ENTERPRISE:
                auth = await enterprise(run)
            else:
                auth = authorization_code(run)
            await act_as_host(run.url, run.modern, auth=auth)
    except Exception as error:
        print(f"reference client: {reason(error)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    # The SDK warns that a client credentials provider without a configured issuer is
    # deprecated; the scenarios name no issuer, so discovery decides, as the warning says.
    warnings.simplefilter("ignore", DeprecationWarning)
    sys.exit(anyio.run(main))
