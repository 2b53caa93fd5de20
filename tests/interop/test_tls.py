"""Interop over HTTPS: the official MCP Python SDK client reaches Manifold serving TLS
(`[server.tls]`) with a certificate made here (a test CA and a leaf for 127.0.0.1), lists and
calls a tool of mcp-server-time over Streamable HTTP and over HTTP+SSE; a client that trusts
another CA is refused during the TLS handshake.
"""

from __future__ import annotations

import datetime
import ssl
import tempfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from ipaddress import IPv4Address
from pathlib import Path

import anyio
import httpx2
import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
from mcp import ClientSession, types
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from conftest import (
    REQUEST_TIMEOUT_S,
    START_TIMEOUT_S,
    _check_prerequisites,
    _initialized,
    _serving_http,
    _stop,
    _toml_str,
    time_server_bin,
)

pytestmark = pytest.mark.anyio


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@dataclass
class Pki:
    """A test CA and the leaf it signed for 127.0.0.1 and localhost, as PEM files in `dir`."""

    dir: Path

    @property
    def ca(self) -> Path:
        return self.dir / "ca.pem"

    @property
    def cert(self) -> Path:
        return self.dir / "cert.pem"

    @property
    def key(self) -> Path:
        return self.dir / "key.pem"

    @classmethod
    def make(cls, dir: Path) -> Pki:
        dir.mkdir(parents=True, exist_ok=True)
        now = datetime.datetime.now(datetime.timezone.utc)
        ca_key = ec.generate_private_key(ec.SECP256R1())
        ca = (
            x509.CertificateBuilder()
            .subject_name(_name("Manifold interop test CA"))
            .issuer_name(_name("Manifold interop test CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(_usage(cert_sign=True), critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256())
        )
        key = ec.generate_private_key(ec.SECP256R1())
        leaf = (
            x509.CertificateBuilder()
            .subject_name(_name("localhost"))
            .issuer_name(ca.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(_usage(cert_sign=False), critical=True)
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
            .add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1")), x509.DNSName("localhost")]),
                critical=False,
            )
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
                critical=False,
            )
            .sign(ca_key, hashes.SHA256())
        )
        pki = cls(dir)
        pki.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        pki.cert.write_bytes(leaf.public_bytes(serialization.Encoding.PEM))
        pki.key.write_bytes(_pem_key(key))
        return pki

    def ssl_context(self) -> ssl.SSLContext:
        """A client context trusting this CA only."""
        return ssl.create_default_context(cafile=str(self.ca))


def _usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


@dataclass
class Https:
    url: str
    pki: Pki
    other: Pki


@pytest.fixture(scope="module")
def manifold_https() -> Iterator[Https]:
    """Manifold serving HTTPS on a loopback port in front of mcp-server-time over stdio."""
    bin_ = _check_prerequisites()
    with tempfile.TemporaryDirectory(prefix="manifold-interop-tls-") as tmp_name:
        tmp = Path(tmp_name)
        pki = Pki.make(tmp / "pki")
        other = Pki.make(tmp / "other")
        config = tmp / "manifold.toml"
        config.write_text(
            "[server.tls]\n"
            f"cert = {_toml_str(pki.cert)}\n"
            f"key = {_toml_str(pki.key)}\n"
            "\n[upstreams.time]\n"
            f"command = {_toml_str(time_server_bin())}\n"
            'args = ["--local-timezone", "UTC"]\n'
        )
        with _serving_http(bin_, config, tmp / "manifold.stderr") as port:
            yield Https(f"https://127.0.0.1:{port}", pki, other)


def _client_trusting(pki: Pki) -> httpx2.AsyncClient:
    return httpx2.AsyncClient(verify=pki.ssl_context(), timeout=httpx2.Timeout(REQUEST_TIMEOUT_S, read=300))


@asynccontextmanager
async def session_over(transport: str, base: str, pki: Pki) -> AsyncIterator[ClientSession]:
    if transport == "streamable-http":
        client = streamable_http_client(f"{base}/mcp", http_client=_client_trusting(pki))
    else:

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(verify=pki.ssl_context(), headers=headers, timeout=timeout, auth=auth)

        client = sse_client(f"{base}/sse", httpx_client_factory=factory)
    async with _initialized(client) as session:
        yield session


@pytest.mark.parametrize("transport", ["streamable-http", "sse"])
async def test_the_sdk_client_lists_and_calls_a_tool_over_https(manifold_https: Https, transport: str):
    async with session_over(transport, manifold_https.url, manifold_https.pki) as s:
        names = {t.name for t in (await s.list_tools()).tools}
        assert "time__get_current_time" in names, sorted(names)
        r = await s.call_tool("time__get_current_time", {"timezone": "UTC"})
        text = "".join(c.text for c in r.content if isinstance(c, types.TextContent))
        assert "UTC" in text, r


async def test_a_client_trusting_another_ca_is_refused(manifold_https: Https):
    with pytest.raises(BaseException) as caught:
        with anyio.fail_after(START_TIMEOUT_S):
            async with session_over("streamable-http", manifold_https.url, manifold_https.other):
                pass
    assert _ssl_error_in(caught.value), repr(caught.value)


def _ssl_error_in(e: BaseException) -> bool:
    """Whether a certificate verification error is `e` or among its causes and group members."""
    seen: list[BaseException] = [e]
    while seen:
        e = seen.pop()
        if isinstance(e, ssl.SSLCertVerificationError):
            return True
        if isinstance(e, BaseExceptionGroup):
            seen.extend(e.exceptions)
        seen.extend(x for x in (e.__cause__, e.__context__) if x is not None)
    return False
