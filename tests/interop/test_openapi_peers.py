"""The peers of the OpenAPI tests work on their own, so that the tests through Manifold stand on
them: the published descriptions are what they claim to be, Prism answers a request its
description allows and refuses one it forbids (with its validation error), and the FastAPI
service publishes a description that parses and answers calls as it says.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import yaml

from openapi_peers import (  # petstore, service: fixtures the tests take by name
    GITHUB,
    GITHUB_DEREF,
    PEER_REQUEST_TIMEOUT_S,
    PETSTORE_30,
    PETSTORE_30_YAML,
    PETSTORE_31,
    PETSTORE_SWAGGER_20,
    OpenApiService,
    Prism,
    petstore,
    prism,
    service,
)

METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}
JSON = {"accept": "application/json"}
#: Petstore's pet operations ask for its OAuth 2 scheme; Prism checks only that a token is sent.
PET_AUTH = {"accept": "application/json", "authorization": "Bearer any-token"}


def operations(description: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """(method, path, operationId) of every operation of a description."""
    return [
        (method, path, op.get("operationId"))
        for path, item in description["paths"].items()
        for method, op in item.items()
        if method in METHODS
    ]


def get(url: str, **kw: Any) -> requests.Response:
    return requests.get(url, timeout=PEER_REQUEST_TIMEOUT_S, **kw)


def violations_header(r: requests.Response) -> list[dict[str, Any]]:
    return json.loads(r.headers.get("sl-violations", "[]"))


def test_the_petstore_descriptions_are_published_in_every_version_and_format() -> None:
    seen = {}
    for path in (PETSTORE_30, PETSTORE_31, PETSTORE_SWAGGER_20):
        doc = json.loads(path.read_text())
        seen[doc.get("openapi") or doc.get("swagger")] = operations(doc)
    assert sorted(seen) == ["2.0", "3.0.0", "3.1.0"]
    ids = {op_id for _m, _p, op_id in seen["3.0.0"]}
    assert len(seen["3.0.0"]) == 20 and {"getPetById", "findPetsByStatus", "addPet", "uploadFile"} <= ids
    assert all({i for _m, _p, i in ops} == ids for ops in seen.values())
    assert operations(yaml.safe_load(PETSTORE_30_YAML.read_text())) == seen["3.0.0"]


def test_githubs_description_is_the_full_rest_api() -> None:
    doc = json.loads(GITHUB.read_text())
    ops = operations(doc)
    sizes = f"{GITHUB.stat().st_size} bytes ({GITHUB_DEREF.stat().st_size} dereferenced)"
    shared = len(doc["components"]["schemas"])
    print(f"GitHub: {sizes}, {len(doc['paths'])} paths, {len(ops)} operations, {shared} shared schemas", file=sys.stderr)
    assert doc["openapi"].startswith("3.0.") and doc["servers"][0]["url"] == "https://api.github.com"
    assert len(ops) > 1000 and all(op_id for _m, _p, op_id in ops)
    assert ("get", "/repos/{owner}/{repo}", "repos/get") in ops
    # Shared definitions are `$ref`s in the published file and expanded in the other one.
    assert '"$ref": "#/components/schemas/' in GITHUB.read_text()[:5_000_000]
    assert GITHUB_DEREF.stat().st_size > 3 * GITHUB.stat().st_size


def test_prism_answers_a_request_the_petstore_allows(petstore: Prism) -> None:
    r = get(f"{petstore.url}/store/order/5", headers=JSON)
    assert r.status_code == 200, r.text
    assert r.headers["content-type"].startswith("application/json")
    assert {"id", "petId", "quantity", "status"} <= set(r.json())
    r = get(f"{petstore.url}/pet/findByStatus", params={"status": "available"}, headers=PET_AUTH)
    assert r.status_code == 200 and isinstance(r.json(), list), r.text
    assert petstore.violations() == [], petstore.logs_tail()
    assert ("GET", "/store/order/5") in petstore.requests()


def test_prism_refuses_a_request_the_petstore_forbids_with_its_validation_error(petstore: Prism) -> None:
    before = len(petstore.violations())
    # A path parameter of the wrong type: the description's own 400 answer, findings in a header.
    r = get(f"{petstore.url}/store/order/abc", headers=JSON)
    assert r.status_code == 400
    assert [v["location"] for v in violations_header(r)] == [["request", "path", "orderid"]]
    # A JSON body without a required member: no 4xx in the description, so Prism's own 422.
    r = requests.post(f"{petstore.url}/pet", json={"name": "rex"}, headers=PET_AUTH, timeout=PEER_REQUEST_TIMEOUT_S)
    assert r.status_code == 422, r.text
    assert "photoUrls" in json.dumps(r.json()["validation"])
    # Credentials the security requirement asks for are missing.
    r = get(f"{petstore.url}/pet/findByStatus", params={"status": "available"}, headers=JSON)
    assert r.status_code == 401
    found = petstore.violations()[before:]
    assert any("orderid must be integer" in v for v in found), found
    assert any("photoUrls" in v for v in found), found
    assert any("security" in v for v in found), found


def test_the_service_publishes_a_description_that_parses(service: OpenApiService) -> None:
    r = get(service.description_url)
    assert r.status_code == 200 and r.headers["content-type"] == "application/json"
    doc = r.json()
    assert doc["openapi"].startswith("3.1.")
    ops = {op_id: (method, path) for method, path, op_id in operations(doc)}
    assert ops == {
        "getItem": ("get", "/items/{item_id}"),
        "listItems": ("get", "/items"),
        "createItem": ("post", "/items"),
        "getItemLabel": ("get", "/items/{item_id}/label"),
        "getItemBlob": ("get", "/items/{item_id}/blob"),
        "getItemThumbnail": ("get", "/items/{item_id}/thumbnail"),
    }
    get_item = doc["paths"]["/items/{item_id}"]["get"]
    assert {(p["name"], p["in"]) for p in get_item["parameters"]} == {("item_id", "path"), ("verbose", "query")}
    assert "404" in get_item["responses"]
    create = doc["paths"]["/items"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert create == {"$ref": "#/components/schemas/ItemIn"}
    assert doc["components"]["schemas"]["ItemIn"]["required"] == ["name", "price"]


def test_the_service_answers_calls_as_its_description_says(service: OpenApiService) -> None:
    url = service.url
    assert get(f"{url}/items/1").json() == {"id": 1, "name": "hammer", "price": 12.5, "tags": ["tools"]}
    assert get(f"{url}/items/1", params={"verbose": "true"}).json()["name"] == "hammer (#1)"
    r = get(f"{url}/items/999")
    assert (r.status_code, r.json()) == (404, {"detail": "no item 999"})
    assert get(f"{url}/items/abc").status_code == 422
    assert [i["name"] for i in get(f"{url}/items", params={"tag": "wood"}).json()] == ["saw", "plank"]
    r = requests.post(f"{url}/items", json={"name": "nail", "price": 0.1}, timeout=PEER_REQUEST_TIMEOUT_S)
    assert r.status_code == 201 and r.json()["name"] == "nail" and r.json()["id"] >= 4
    r = get(f"{url}/items/2/label", headers={"x-request-id": "r-42"})
    assert r.headers["content-type"].startswith("text/plain") and r.text == "saw: 20.00 (request r-42)"
    r = get(f"{url}/items/1/blob")
    assert r.headers["content-type"] == "application/octet-stream" and r.content.endswith(b"\x00\xff")
    r = get(f"{url}/items/1/thumbnail")
    assert r.headers["content-type"] == "image/png" and r.content.startswith(b"\x89PNG\r\n\x1a\n")
