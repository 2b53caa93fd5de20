"""The real peers of the OpenAPI tests, and the descriptions they serve:

- Descriptions no one here wrote, from registry packages (pinned in package-lock.json):
  the Petstore (OpenAPI 3.0 and 3.1, Swagger 2.0, JSON and YAML) from @readme/oas-examples,
  and GitHub's REST description from @octokit/openapi (`GITHUB`, about 13 MB, over 1,000
  operations; `GITHUB_DEREF` is the same with every `$ref` expanded, about 73 MB).
- `Prism`: @stoplight/prism-cli mocking a description on a loopback port. It validates every
  request against the description: a valid one gets an example answer, an invalid one the
  description's 400/422 answer (or Prism's own 422) with its findings in the `sl-violations`
  header, and each finding is logged, so a test asserts that Prism saw no violation.
  Prism serves the description's paths at its root (the `servers` path, e.g. Petstore's
  `/v2`, is not part of them), so a client's base URL is `Prism.url` itself.
- `OpenApiService`: openapi_service.py, a FastAPI service that publishes its own description
  at `/openapi.json`.

Every process listens on 127.0.0.1 only, is waited for (bounded) until it serves, and is
stopped by its own process id.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager as ContextManager, contextmanager
from pathlib import Path
from typing import TypeVar

import pytest
import requests

from conftest import HERE, START_TIMEOUT_S, _stop, node
from replicas import free_port

NODE_MODULES = HERE / "node_modules"
PRISM_JS = NODE_MODULES / "@stoplight" / "prism-cli" / "dist" / "index.js"
OAS_EXAMPLES = NODE_MODULES / "@readme" / "oas-examples"
PETSTORE_30 = OAS_EXAMPLES / "3.0" / "json" / "petstore.json"
PETSTORE_30_YAML = OAS_EXAMPLES / "3.0" / "yaml" / "petstore.yaml"
PETSTORE_31 = OAS_EXAMPLES / "3.1" / "json" / "petstore.json"
PETSTORE_SWAGGER_20 = OAS_EXAMPLES / "2.0" / "json" / "petstore.json"
GITHUB = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.json"
GITHUB_DEREF = NODE_MODULES / "@octokit" / "openapi" / "generated" / "api.github.com.deref.json"
SERVICE = HERE / "openapi_service.py"

#: Longest Prism may take to serve a description. GitHub's takes tens of seconds on a busy
#: two-core machine (Prism reads and indexes every operation first), so the bound is generous.
PRISM_START_TIMEOUT_S = 240.0
#: Longest one request to a peer may take.
PEER_REQUEST_TIMEOUT_S = 20.0
#: How often a peer is started again when another process took its port first.
PORT_ATTEMPTS = 3

#: A peer started for a block: Prism or the service.
_Peer = TypeVar("_Peer", "Prism", "OpenApiService")

_LISTENING = re.compile(r"Prism is listening on (http://127\.0\.0\.1:\d+)")
_RECEIVED = re.compile(r"\[HTTP SERVER\] (\w+) (\S+) .*Request received")
_VALIDATOR_ERROR = re.compile(r"\[VALIDATOR\] \S+\s+error\s+(.*)")


def _installed(*paths: Path) -> None:
    for path in paths:
        if not path.exists():
            pytest.fail(f"{path} is not installed: run bash tests/interop/install.sh")


class Prism:
    """Prism mocking `description` on a free loopback port; `url` is where it serves the
    description's paths, `started_in` how many seconds it took to serve."""

    def __init__(self, description: Path, tmp: Path, *, timeout: float = PRISM_START_TIMEOUT_S):
        _installed(PRISM_JS, description)
        self.description = description
        for attempt in range(PORT_ATTEMPTS):
            self.log = tmp / f"prism-{description.stem}-{time.monotonic_ns()}.log"
            self._forgotten = 0
            started = time.monotonic()
            self.proc = self._spawn(free_port())
            try:
                self.url = self._wait_listening(timeout)
            except _PortTaken:
                if attempt + 1 == PORT_ATTEMPTS:
                    raise AssertionError(f"Prism found no free port in {PORT_ATTEMPTS} tries") from None
                continue
            except BaseException:
                self.stop()
                raise
            self.started_in = time.monotonic() - started
            return

    def _spawn(self, port: int) -> subprocess.Popen:
        # Without colours, so that the log reads as plain lines.
        env = dict(os.environ, NO_COLOR="1", FORCE_COLOR="0")
        args = [node(), str(PRISM_JS), "mock", "--host", "127.0.0.1", "--port", str(port), str(self.description)]
        return subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=self.log.open("w"), stderr=subprocess.STDOUT, cwd=str(HERE), env=env
        )

    def _wait_listening(self, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.text()
            found = _LISTENING.search(text)
            if found:
                return found.group(1)
            if self.proc.poll() is not None:
                if "EADDRINUSE" in text:
                    raise _PortTaken()
                break
            time.sleep(0.1)
        self.stop()
        raise AssertionError(f"Prism did not serve {self.description.name} within {timeout:.0f} s:\n{self.text()[-4000:]}")

    def text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def requests(self) -> list[tuple[str, str]]:
        """Every request Prism received so far, as (METHOD, path with query)."""
        return [(m.group(1).upper(), m.group(2)) for m in _RECEIVED.finditer(self.text())]

    def forget_violations(self) -> None:
        """Leaves the violations logged so far out of `violations` (a test that sent a
        forbidden request on purpose, before others that share this Prism)."""
        self._forgotten = len(self.text())

    def violations(self) -> list[str]:
        """Every request validation error Prism logged so far: a request that breaks the
        description, or lacks the credentials its security requirements ask for. Prism also
        checks its own example answers against the response schemas (GitHub's examples miss
        required members here and there); those findings are about the description, not about
        the client, and are left out."""
        found = (m.group(1).strip() for m in _VALIDATOR_ERROR.finditer(self.text()[self._forgotten :]))
        return [v for v in found if not v.startswith("Violation: response")]

    def stop(self) -> None:
        _stop(self.proc)

    def logs_tail(self) -> str:
        return f"--- prism ({self.description.name}) ---\n{self.text()[-4000:]}"


class _PortTaken(Exception):
    """The port picked for a peer was taken by another process before the peer bound it."""


def prism(description: Path, tmp: Path, *, timeout: float = PRISM_START_TIMEOUT_S) -> ContextManager[Prism]:
    """Prism mocking `description` for the duration of the block; its log is printed when the
    block fails."""
    return _running(Prism(description, tmp, timeout=timeout))


class OpenApiService:
    """openapi_service.py on a free loopback port: `url` is its base URL, `description_url`
    where it publishes its OpenAPI description."""

    def __init__(self, tmp: Path):
        _installed(SERVICE)
        run = time.monotonic_ns()
        self.out = tmp / f"openapi-service-{run}.stdout"
        self.err = tmp / f"openapi-service-{run}.stderr"
        self.proc = subprocess.Popen(
            [sys.executable, str(SERVICE)],
            stdin=subprocess.DEVNULL,
            stdout=self.out.open("w"),
            stderr=self.err.open("w"),
            cwd=str(HERE),
        )
        try:
            self.url = self._first_line()
            self.description_url = f"{self.url}/openapi.json"
            self._wait_serving()
        except BaseException:
            self.stop()
            raise

    def _first_line(self) -> str:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.out.read_text(errors="replace") if self.out.exists() else ""
            if "\n" in text:
                return text.split("\n", 1)[0].strip()
            if self.proc.poll() is not None:
                break
            time.sleep(0.05)
        raise AssertionError(f"the OpenAPI service did not start:\n{self.logs_tail()}")

    def _wait_serving(self) -> None:
        """Until the description is served: the port listens before the application is up."""
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if requests.get(self.description_url, timeout=PEER_REQUEST_TIMEOUT_S).ok:
                    return
            except requests.ConnectionError:
                pass
            time.sleep(0.05)
        raise AssertionError(f"the OpenAPI service does not serve {self.description_url}:\n{self.logs_tail()}")

    def stop(self) -> None:
        _stop(self.proc)

    def logs_tail(self) -> str:
        return f"--- openapi service stderr ---\n{self.err.read_text(errors='replace')[-4000:]}"


def openapi_service(tmp: Path) -> ContextManager[OpenApiService]:
    """The FastAPI service for the duration of the block; its log is printed when the block
    fails."""
    return _running(OpenApiService(tmp))


@contextmanager
def _running(peer: _Peer) -> Iterator[_Peer]:
    try:
        yield peer
    except BaseException:
        print(peer.logs_tail(), file=sys.stderr)
        raise
    finally:
        peer.stop()


@pytest.fixture(scope="module")
def petstore(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prism]:
    """Prism on the Petstore 3.0 description, for a test module."""
    with prism(PETSTORE_30, tmp_path_factory.mktemp("prism-petstore")) as mock:
        yield mock


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenApiService]:
    """The FastAPI service, for a test module."""
    with openapi_service(tmp_path_factory.mktemp("openapi-service")) as svc:
        yield svc
