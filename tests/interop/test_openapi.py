"""OpenAPI services as upstreams, through Manifold under the official Python SDK client (stdio):
the FastAPI service (openapi_service.py, its description read from its own `/openapi.json`) and
Prism mocking the Petstore 3 description (@readme/oas-examples, `base_url` at Prism). Prism
validates every request against the description, so each test also asserts that Prism found
nothing wrong with what Manifold sent.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import mcp_types as types
import pytest
from conftest import _toml_str, all_tools, manifold_stdio, upstreams_settled
from mcp import MCPError
from mcp.client.session import ClientSession
from openapi_peers import (  # petstore, service: fixtures the tests take by name
    PETSTORE_30,
    OpenApiService,
    Prism,
    petstore,
    service,
)

pytestmark = pytest.mark.anyio

INVALID_PARAMS = -32602
#: Values of the Petstore's security schemes (Prism checks only that they are sent): its
#: OAuth 2 scheme a static bearer token, its API key the `api_key` header.
SECURITY = '[upstreams.petstore.security]\npetstore_auth = "any-token"\napi_key = "any-key"\n'
#: The Petstore's pet and store operations, but none that deletes; one renamed.
PETSTORE_TOOLS = {
    "petstore__addPet",
    "petstore__updatePet",
    "petstore__pets_by_status",
    "petstore__findPetsByTags",
    "petstore__getPetById",
    "petstore__updatePetWithForm",
    "petstore__uploadFile",
    "petstore__getInventory",
    "petstore__placeOrder",
    "petstore__getOrderById",
}
INVENTORY_TOOLS = {
    "inventory__getItem",
    "inventory__listItems",
    "inventory__createItem",
    "inventory__getItemLabel",
    "inventory__getItemBlob",
    "inventory__getItemThumbnail",
}


def config(petstore: Prism, service: OpenApiService) -> str:
    return (
        "[upstreams.inventory]\n"
        f"openapi = {_toml_str(service.description_url)}\n"
        "\n"
        "[upstreams.petstore]\n"
        f"openapi = {_toml_str(PETSTORE_30)}\n"
        f"base_url = {_toml_str(petstore.url)}\n"
        'include = ["tag:pet", "tag:store"]\n'
        'exclude = ["method:DELETE"]\n'
        'renames = { findPetsByStatus = "pets_by_status" }\n'
        f"{SECURITY}"
        "\n"
        "[teams.narrow]\n"
        'upstreams = ["inventory"]\n'
    )


@asynccontextmanager
async def through_manifold(petstore: Prism, service: OpenApiService, *args: str) -> AsyncIterator[ClientSession]:
    async with manifold_stdio(config(petstore, service), args) as (session, _init, stderr):
        await upstreams_settled(stderr, "inventory", *([] if args else ["petstore"]))
        yield session


async def tools_by_name(session: ClientSession) -> dict[str, types.Tool]:
    return {t.name: t for t in await all_tools(session)}


def text(result: types.CallToolResult) -> str:
    return "\n".join(c.text for c in result.content if isinstance(c, types.TextContent))


def ok(result: types.CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result
    assert result.structured_content is not None, result
    return result.structured_content


async def test_operations_are_tools_with_schemas_and_annotations(petstore: Prism, service: OpenApiService) -> None:
    async with through_manifold(petstore, service) as s:
        tools = await tools_by_name(s)
    assert {n for n in tools if n.startswith("petstore__")} == PETSTORE_TOOLS
    assert {n for n in tools if n.startswith("inventory__")} == INVENTORY_TOOLS
    get_item = tools["inventory__getItem"]
    assert set(get_item.input_schema["properties"]) == {"item_id", "verbose"}
    assert get_item.input_schema["required"] == ["item_id"]
    assert "x-request-id" in tools["inventory__getItemLabel"].input_schema["properties"]
    create = tools["inventory__createItem"].input_schema
    assert "body" in create["properties"] and "body" in create["required"], create
    order = tools["petstore__getOrderById"].input_schema
    assert order["properties"]["orderId"]["type"] == "integer" and order["required"] == ["orderId"]
    for name in ("inventory__getItem", "petstore__getOrderById"):
        hints = tools[name].annotations
        assert hints is not None and hints.read_only_hint is True and hints.open_world_hint is True, hints
    put = tools["petstore__updatePet"].annotations
    assert put is not None and put.idempotent_hint is True and not put.read_only_hint, put
    post = tools["inventory__createItem"].annotations
    assert post is not None and not post.read_only_hint and not post.idempotent_hint, post
    assert petstore.violations() == [], petstore.logs_tail()


async def test_calls_send_path_query_and_body_and_map_answers(petstore: Prism, service: OpenApiService) -> None:
    async with through_manifold(petstore, service) as s:
        item = ok(await s.call_tool("inventory__getItem", {"item_id": 1, "verbose": True}))
        assert item == {"id": 1, "name": "hammer (#1)", "price": 12.5, "tags": ["tools"]}
        made = ok(await s.call_tool("inventory__createItem", {"body": {"name": "nail", "price": 0.1}}))
        assert made["name"] == "nail" and made["id"] >= 4
        # An array result is wrapped, in structuredContent as in the output schema.
        wood = ok(await s.call_tool("inventory__listItems", {"tag": "wood", "limit": 5}))
        assert [i["name"] for i in wood["result"]] == ["saw", "plank"]
        label = await s.call_tool("inventory__getItemLabel", {"item_id": 2, "x-request-id": "r-7"})
        assert not label.is_error and text(label) == "saw: 20.00 (request r-7)", label
        pets = ok(await s.call_tool("petstore__pets_by_status", {"status": ["available"]}))
        assert isinstance(pets["result"], list), pets
        order = ok(await s.call_tool("petstore__getOrderById", {"orderId": 5}))
        assert {"id", "petId", "quantity", "status"} <= set(order), order
        placed = ok(
            await s.call_tool("petstore__placeOrder", {"body": {"petId": 1, "quantity": 2, "status": "placed"}})
        )
        assert "id" in placed, placed
    seen = petstore.requests()
    assert ("GET", "/store/order/5") in seen and ("POST", "/store/order") in seen, seen
    # Prism logs paths without their query; its validation (status is required) saw no fault.
    assert ("GET", "/pet/findByStatus") in seen, seen
    assert petstore.violations() == [], petstore.logs_tail()


async def test_binary_answers_and_errors(petstore: Prism, service: OpenApiService) -> None:
    async with through_manifold(petstore, service) as s:
        blob = await s.call_tool("inventory__getItemBlob", {"item_id": 1})
        assert not blob.is_error, blob
        [resource] = blob.content
        assert isinstance(resource, types.EmbeddedResource), resource
        contents = resource.resource
        assert isinstance(contents, types.BlobResourceContents), contents
        assert contents.mime_type == "application/octet-stream"
        assert base64.b64decode(contents.blob).endswith(b"\x00\xff")
        thumb = await s.call_tool("inventory__getItemThumbnail", {"item_id": 1})
        [image] = thumb.content
        assert isinstance(image, types.ImageContent) and image.mime_type == "image/png", thumb
        assert base64.b64decode(image.data).startswith(b"\x89PNG")
        missing = await s.call_tool("inventory__getItem", {"item_id": 999})
        assert missing.is_error and "404" in text(missing) and "no item 999" in text(missing), missing
        before = petstore.requests()
        with pytest.raises(MCPError) as refused:
            await s.call_tool("petstore__getOrderById", {"orderId": "abc"})
        assert refused.value.code == INVALID_PARAMS and "orderId" in str(refused.value), refused.value
    assert petstore.requests() == before, "Prism saw the request a wrong argument made"
    assert petstore.violations() == [], petstore.logs_tail()


async def test_a_team_view_hides_the_openapi_upstream(petstore: Prism, service: OpenApiService) -> None:
    async with through_manifold(petstore, service, "--team", "narrow") as s:
        tools = await tools_by_name(s)
        assert INVENTORY_TOOLS <= set(tools) and not any(n.startswith("petstore__") for n in tools), sorted(tools)
        before = petstore.requests()
        with pytest.raises(MCPError):
            await s.call_tool("petstore__getOrderById", {"orderId": 5})
        assert petstore.requests() == before
        assert ok(await s.call_tool("inventory__getItem", {"item_id": 3}))["name"] == "plank"
