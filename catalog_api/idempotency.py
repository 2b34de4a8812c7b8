"""``Idempotency-Key`` on mutating requests, as the REST spec describes it.

The first request with a key runs and its final response (2xx and deterministic 4xx; never
5xx) is stored in the catalog store's database, so a retry with the same key within the
advertised lifetime gets that response back and changes nothing twice, on any catalog process
sharing the store. A key seen while its first request is still running waits for it; the
running request's process renews a lease on its row, so a row whose owner died (killed
mid-request: its pid is gone on this host, or its lease ran out) is taken over by the retry,
which runs the request again instead of waiting for the sweep.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import socket
import time
from typing import Any

from sqlalchemy import (
    Column,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    delete,
    insert,
    inspect,
    select,
    text,
    update,
)
from sqlalchemy.exc import IntegrityError
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from catalog_api.auth.access import PRINCIPAL_KEY
from catalog_api.responses import error_response
from catalog_api.store.catalog import CatalogStore

LIFETIME_SECONDS = 30 * 60  # advertised as idempotency-key-lifetime PT30M in /v1/config
GRACE_SECONDS = 5 * 60
PENDING = 0
LEASE_SECONDS = 10  # a running request renews its lease every LEASE_SECONDS / 4
HOST = os.environ.get("LAKEVIEW_HOST_ID") or socket.gethostname()
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
    Column("owner", String(300), nullable=True),  # host:pid of the process running a pending request
    Column("lease_until", Integer, nullable=True),  # epoch seconds; renewed while the request runs
)


class IdempotencyMiddleware:
    def __init__(self, app: ASGIApp, store: CatalogStore) -> None:
        self.app = app
        self.engine = store.engine
        _metadata.create_all(self.engine)
        _add_lease_columns(self.engine)
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
            await error_response(400, "BadRequestException", "Idempotency-Key must be a UUID (36 characters)")(
                scope, receive, send
            )
            return
        principal = scope.get(PRINCIPAL_KEY)
        request_id = f"{getattr(principal, 'client_id', '-')} {scope['method']} {scope['path']}"[:1200]
        stored = await run_in_threadpool(self._claim, key, request_id)
        while stored is not None and stored[0] == PENDING:  # the first request is still running, or its owner died
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

        heartbeat = asyncio.create_task(self._renew(key))
        try:
            await self.app(scope, receive, capture)
        finally:
            heartbeat.cancel()
            await run_in_threadpool(self._finalize, key, captured)

    async def _renew(self, key: str) -> None:
        """Keep this process's lease on a running request's key."""
        while True:
            await asyncio.sleep(LEASE_SECONDS / 4)
            with contextlib.suppress(Exception):  # a missed renewal only shortens the lease
                await run_in_threadpool(self._extend, key)

    def _extend(self, key: str) -> None:
        with self.engine.begin() as conn:
            conn.execute(
                update(idempotency_keys)
                .where(idempotency_keys.c.idempotency_key == key, idempotency_keys.c.owner == _OWNER)
                .values(lease_until=int(time.time()) + LEASE_SECONDS)
            )

    def _claim(self, key: str, request_id: str) -> tuple[int, bytes, str | None, str] | None:
        """Insert a pending row for a new key (→ None) or return the stored row."""
        now = int(time.time())
        with self.engine.begin() as conn:
            if now - self._last_sweep > 60:
                self._last_sweep = now
                conn.execute(
                    delete(idempotency_keys).where(
                        idempotency_keys.c.created_at < now - LIFETIME_SECONDS - GRACE_SECONDS
                    )
                )
            row = conn.execute(
                select(
                    idempotency_keys.c.status,
                    idempotency_keys.c.body,
                    idempotency_keys.c.content_type,
                    idempotency_keys.c.request,
                    idempotency_keys.c.owner,
                    idempotency_keys.c.lease_until,
                ).where(idempotency_keys.c.idempotency_key == key)
            ).first()
            if row is not None and row[0] == PENDING and row[3] == request_id and _owner_gone(row[4], row[5], now):
                taken = conn.execute(  # compare-and-swap on the dead owner: one retry takes over
                    update(idempotency_keys)
                    .where(
                        idempotency_keys.c.idempotency_key == key,
                        idempotency_keys.c.status == PENDING,
                        idempotency_keys.c.owner == row[4],
                    )
                    .values(owner=_OWNER, lease_until=now + LEASE_SECONDS, created_at=now)
                )
                if taken.rowcount == 1:
                    return None  # this request runs it again
            if row is not None:
                return row[0], row[1] or b"", row[2], row[3]
        try:
            with self.engine.begin() as conn:
                conn.execute(
                    insert(idempotency_keys).values(
                        idempotency_key=key,
                        request=request_id,
                        status=PENDING,
                        body=None,
                        content_type=None,
                        created_at=now,
                        owner=_OWNER,
                        lease_until=now + LEASE_SECONDS,
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


_OWNER = f"{HOST}:{os.getpid()}"


def _owner_gone(owner: str | None, lease_until: int | None, now: int) -> bool:
    """The process that claimed a pending key is dead (same host, pid gone) or stopped renewing its lease."""
    if owner is None or lease_until is None:  # a row from before leases: no owner renews it
        return True
    host, _, pid = owner.rpartition(":")
    if host == HOST and pid.isdigit() and owner != _OWNER and not _alive(int(pid)):
        return True
    return lease_until < now


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def _add_lease_columns(engine: Any) -> None:
    """Stores created before leases lack the owner/lease columns: add them (nullable, so old rows stay valid)."""
    existing = {column["name"] for column in inspect(engine).get_columns(idempotency_keys.name)}
    for name, kind in (("owner", "VARCHAR(300)"), ("lease_until", "INTEGER")):
        if name not in existing:
            with contextlib.suppress(Exception), engine.begin() as conn:  # another process may add it concurrently
                conn.execute(text(f"ALTER TABLE {idempotency_keys.name} ADD COLUMN {name} {kind}"))


async def _replay(send: Send, status: int, body: bytes, content_type: str | None) -> None:
    headers = [(b"content-length", str(len(body)).encode()), (b"idempotent-replay", b"true")]
    if content_type:
        headers.append((b"content-type", content_type.encode("latin-1")))
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})
