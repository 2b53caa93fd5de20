"""A real HTTP service that publishes its own OpenAPI description: a small inventory of items on
FastAPI, served by uvicorn on a loopback port. The description at `/openapi.json` is the one
FastAPI derives from the typed endpoints below (OpenAPI 3.1), so no one here writes it by hand.

Endpoints (what the OpenAPI tests call through Manifold):
- `GET /items/{item_id}`: a path parameter (integer) and a query one (`verbose`); 404 when the
  item does not exist.
- `GET /items`: query parameters (`tag`, `limit`), an array result.
- `POST /items`: a JSON body, 201 with the created item.
- `GET /items/{item_id}/label`: a header parameter (`x-request-id`) echoed in a text answer.
- `GET /items/{item_id}/blob`: a binary answer (`application/octet-stream`).
- `GET /items/{item_id}/thumbnail`: an image answer (`image/png`).

Usage: openapi_service.py [--port N]  (0, the default, picks a free port). The first line on
stdout is the service's base URL, printed once the port is bound and listening.
"""

from __future__ import annotations

import argparse
import socket
import struct
import sys
import zlib
from typing import Annotated

import uvicorn
from fastapi import FastAPI, Header, HTTPException, Query, Response
from fastapi.responses import PlainTextResponse
from pydantic import BaseModel, Field


def _png_1x1() -> bytes:
    """A valid 1x1 transparent PNG, built from its chunks (signature, IHDR, IDAT, IEND)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 6, 0, 0, 0)  # 1x1, 8-bit RGBA
    pixels = zlib.compress(b"\x00" + b"\x00\x00\x00\x00")  # filter byte, one transparent pixel
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")


#: The thumbnail of every item.
PNG_1X1 = _png_1x1()

app = FastAPI(title="Inventory", version="1.0.0", description="Items with tags, for the OpenAPI tests.")


class ItemIn(BaseModel):
    """What a client sends to create an item."""

    name: str = Field(min_length=1, max_length=100)
    price: float = Field(ge=0)
    tags: list[str] = []


class Item(ItemIn):
    """An item as the service stores and returns it."""

    id: int


ITEMS: dict[int, Item] = {
    1: Item(id=1, name="hammer", price=12.5, tags=["tools"]),
    2: Item(id=2, name="saw", price=20.0, tags=["tools", "wood"]),
    3: Item(id=3, name="plank", price=4.25, tags=["wood"]),
}


def _item(item_id: int) -> Item:
    item = ITEMS.get(item_id)
    if item is None:
        raise HTTPException(status_code=404, detail=f"no item {item_id}")
    return item


@app.get(
    "/items/{item_id}",
    operation_id="getItem",
    tags=["items"],
    summary="One item by id",
    responses={404: {"description": "No such item"}},
)
def get_item(item_id: int, verbose: bool = False) -> Item:
    item = _item(item_id)
    if verbose:
        return item.model_copy(update={"name": f"{item.name} (#{item.id})"})
    return item


@app.get("/items", operation_id="listItems", tags=["items"], summary="Items, optionally by tag")
def list_items(tag: str | None = None, limit: Annotated[int, Query(ge=1, le=100)] = 10) -> list[Item]:
    found = [i for i in ITEMS.values() if tag is None or tag in i.tags]
    return found[:limit]


@app.post("/items", operation_id="createItem", tags=["items"], status_code=201, summary="Create an item")
def create_item(body: ItemIn) -> Item:
    item = Item(id=max(ITEMS, default=0) + 1, **body.model_dump())
    ITEMS[item.id] = item
    return item


@app.get(
    "/items/{item_id}/label",
    operation_id="getItemLabel",
    tags=["items"],
    summary="A printable label",
    response_class=PlainTextResponse,
)
def get_item_label(item_id: int, x_request_id: Annotated[str | None, Header()] = None) -> str:
    item = _item(item_id)
    return f"{item.name}: {item.price:.2f} (request {x_request_id or '-'})"


@app.get(
    "/items/{item_id}/blob",
    operation_id="getItemBlob",
    tags=["files"],
    summary="The item's raw record",
    responses={200: {"content": {"application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}},
)
def get_item_blob(item_id: int) -> Response:
    item = _item(item_id)
    return Response(content=item.model_dump_json().encode() + b"\x00\xff", media_type="application/octet-stream")


@app.get(
    "/items/{item_id}/thumbnail",
    operation_id="getItemThumbnail",
    tags=["files"],
    summary="The item's picture",
    responses={200: {"content": {"image/png": {"schema": {"type": "string", "format": "binary"}}}}},
)
def get_item_thumbnail(item_id: int) -> Response:
    _item(item_id)
    return Response(content=PNG_1X1, media_type="image/png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args()
    # The socket is bound and listening before the URL is printed, so a client that reads the
    # URL may connect at once (the connection waits in the backlog until uvicorn serves it).
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", args.port))
    sock.listen(128)
    host, port = sock.getsockname()
    print(f"http://{host}:{port}", flush=True)
    config = uvicorn.Config(app, log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


if __name__ == "__main__":
    sys.exit(main())
