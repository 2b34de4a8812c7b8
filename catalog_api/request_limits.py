"""Limits on what a request may make the catalog do before any validation: body size, JSON
nesting depth, and JSON decoding of large bodies off the event loop (a 15 MB commit parsed
inline stalls every other request, health checks included)."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request

from lakeview import errors

MAX_BODY_BYTES = 64 * 1024 * 1024
MAX_JSON_DEPTH = 128  # a schema nests ~3 JSON levels per struct: 40 nested structs still fit
INLINE_DECODE_BYTES = 256 * 1024  # smaller bodies decode faster than a thread hop


class DecodeCounter:
    """Large bodies being decoded in the thread pool right now (what a health check sees past)."""

    def __init__(self) -> None:
        self.now = 0


decoding = DecodeCounter()


async def read_body(request: Request, limit: int = MAX_BODY_BYTES) -> bytes:
    """The request body, refused with PayloadTooLargeError past ``limit`` bytes (declared or streamed)."""
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise errors.PayloadTooLargeError(f"request body of {declared} bytes is over the limit of {limit} bytes")
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise errors.PayloadTooLargeError(f"request body is over the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    request._body = body  # later readers (request.body()) get the same bytes
    return body


def decode_json(raw: bytes) -> Any:
    """Parse JSON, refusing invalid UTF-8/JSON and nesting deeper than MAX_JSON_DEPTH. Raises BadRequestError."""
    try:
        data = json.loads(raw or b"null")
    except json.JSONDecodeError as exc:
        raise errors.BadRequestError(f"request body is not valid JSON: {exc}") from None
    except UnicodeDecodeError:
        raise errors.BadRequestError("request body is not valid JSON: not UTF-8") from None
    except RecursionError:
        raise errors.BadRequestError(f"request body nests deeper than {MAX_JSON_DEPTH} levels") from None
    if raw.count(b"[") + raw.count(b"{") > MAX_JSON_DEPTH:  # fewer openers cannot nest deeper: skip the walk
        check_depth(data)
    return data


def check_depth(data: Any, limit: int = MAX_JSON_DEPTH) -> None:
    """Raise BadRequestError when containers nest deeper than ``limit`` (iterative: no recursion)."""
    stack = [(data, 1)]
    while stack:
        value, depth = stack.pop()
        if isinstance(value, dict):
            children = value.values()
        elif isinstance(value, list):
            children = value
        else:
            continue
        if depth > limit:
            raise errors.BadRequestError(f"request body nests deeper than {limit} levels")
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list)))


async def json_body(request: Request) -> Any:
    """The request's JSON body within the limits; large bodies decode in the thread pool."""
    raw = await read_body(request)
    if len(raw) > INLINE_DECODE_BYTES:
        decoding.now += 1
        try:
            return await run_in_threadpool(decode_json, raw)
        finally:
            decoding.now -= 1
    return decode_json(raw)


__all__ = ["MAX_BODY_BYTES", "MAX_JSON_DEPTH", "check_depth", "decode_json", "decoding", "json_body", "read_body"]
