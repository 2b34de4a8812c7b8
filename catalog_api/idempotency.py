"""``Idempotency-Key`` on mutating requests, as the REST spec describes it.

The first request with a key runs and its final response (2xx and deterministic 4xx; never
5xx) is stored in the catalog store's database, so a retry with the same key within the
advertised lifetime gets that response back and changes nothing twice, on any catalog process
sharing the store. A key seen while its first request is still running waits for it.
"""

from __future__ import annotations

import asyncio
import re
import time
from typing import Any

from sqlalchemy import Column, Integer, LargeBinary, MetaData, String, Table, delete, insert, select, update
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog_api.access import PRINCIPAL_KEY
from catalog_api.responses import error_response
from catalog_api.store import CatalogStore

LIFETIME_SECONDS = 30 * 60  # advertised as idempotency-key-lifetime PT30M in /v1/config
GRACE_SECONDS = 5 * 60
PENDING = 0
_KEY = re.compile(r"^[0-9A-Fa-f]{8}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{4}-[0-9A-Fa-f]{12}$")
_MUTATING = frozenset({"POST", "DELETE", "PUT"})

_metadata = MetaData()
idempotency_keys = Table(
    "lakeview_idempotency_keys",
    _metadata,
    Column("idempotency_key", String(64), primary_key=True),
    Column("request", String(1200), nullable=False),  # client + method + path: a key is for one operation
    Column("status", Integer, nullable=False),
    Column("body", LargeBinary, nullable=True),
    Column("content_type", String(100), nullable=True),
    Column("created_at", Integer, nullable=False),
)


class IdempotencyMiddleware:
    def __init__(self, app: ASGIApp, store: CatalogStore) -> None:
        self.app = app
        self.engine = store.engine
        _metadata.create_all(self.engine)
        self._last_sweep = 0.0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] not in _MUTATING:
            await self.app(scope, receive, send)
            return
        key = dict(scope["headers"]).get(b"idempotency-key", b"").decode("latin-1").strip()
        if not key or not scope["path"].startswith("/iceberg/v1/"):
            await self.app(scope, receive, send)
            return
        if not _KEY.match(key):
            await error_response(400, "BadRequestException", "Idempotency-Key must be a UUID (36 characters)")(scope, receive, send)
            return
        principal = scope.get(PRINCIPAL_KEY)
        request_id = f"{getattr(principal, 'client_id', '-')} {scope['method']} {scope['path']}"[:1200]
        stored = await run_in_threadpool(self._claim, key, request_id)
        while stored is not None and stored[0] == PENDING:  # the first request is still running
            await asyncio.sleep(0.05)
            stored = await run_in_threadpool(self._claim, key, request_id)
        if stored is not None:
            status, body, content_type, original = stored
            if original != request_id:
                response = error_response(
                    422, "UnprocessableEntityException", "Idempotency-Key was already used for a different request"
                )
                await response(scope, receive, send)
                return
            await _replay(send, status, body, content_type)
            return
        captured: dict[str, Any] = {"status": 500, "body": b"", "content_type": None}

        async def capture(message: Message) -> None:
            if message["type"] == "http.response.start":
                captured["status"] = message["status"]
                headers = dict(message.get("headers", []))
                captured["content_type"] = headers.get(b"content-type", b"").decode("latin-1") or None
            elif message["type"] == "http.response.body":
                captured["body"] += message.get("body", b"")
            await send(message)

        try:
            await self.app(scope, receive, capture)
        finally:
            await run_in_threadpool(self._finalize, key, captured)

    def _claim(self, key: str, request_id: str) -> tuple[int, bytes, str | None, str] | None:
        """Insert a pending row for a new key (→ None) or return the stored row."""
        now = int(time.time())
        with self.engine.begin() as conn:
            if now - self._last_sweep > 60:
                self._last_sweep = now
                conn.execute(delete(idempotency_keys).where(idempotency_keys.c.created_at < now - LIFETIME_SECONDS - GRACE_SECONDS))
            row = conn.execute(
                select(idempotency_keys.c.status, idempotency_keys.c.body, idempotency_keys.c.content_type, idempotency_keys.c.request)
                .where(idempotency_keys.c.idempotency_key == key)
            ).first()
            if row is not None:
                return row[0], row[1] or b"", row[2], row[3]
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(idempotency_keys).values(
                        idempotency_key=key, request=request_id, status=PENDING, body=None, content_type=None, created_at=now
                    )
                )
            return None
        except IntegrityError:  # a concurrent first request claimed it: wait for its outcome
            return PENDING, b"", None, request_id

    def _finalize(self, key: str, captured: dict[str, Any]) -> None:
        with self.engine.begin() as conn:
            if captured["status"] >= 500:  # not final: the retry runs again
                conn.execute(delete(idempotency_keys).where(idempotency_keys.c.idempotency_key == key))
            else:
                conn.execute(
                    update(idempotency_keys)
                    .where(idempotency_keys.c.idempotency_key == key)
                    .values(status=captured["status"], body=captured["body"], content_type=captured["content_type"])
                )


async def _replay(send: Send, status: int, body: bytes, content_type: str | None) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"idempotent-replay", b"true")]
    if content_type:
        headers.append((b"content-type", content_type.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
