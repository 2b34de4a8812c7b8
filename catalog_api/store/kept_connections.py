"""The catalog store's one policy for kept database connections: check before use, replace what the server dropped.

Every path that keeps a connection open between requests — SQLAlchemy's pool (namespaces, idempotency keys,
the pointer cache's domains), the commit's pointer swaps (pointer_swaps.py) and the per-thread pointer readers
(catalog.py) — checks it the same way before using it, without a round trip to the server: a PostgreSQL server
that restarts (or ends an idle session) sends a final error and closes the socket, so an idle connection whose
socket is readable, or that its driver marked closed, was dropped and is replaced by a new one. A connection
that passes the check and still fails (the server went away a moment ago) fails that request with a 503
(retryable; for a commit whose COMMIT was sent, the outcome is unknown, as the spec says of any 5xx).

This replaced two policies: SQLAlchemy's ``pool_pre_ping`` (a ``SELECT 1`` round trip per checkout) and the
swaps' retry on a fresh connection after a failure.
"""

from __future__ import annotations

import select
import sqlite3
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Engine
from sqlalchemy.exc import DisconnectionError

CONNECT_TIMEOUT_SECONDS = 3
SQLITE_PRAGMAS = ("journal_mode=WAL", "synchronous=NORMAL", "busy_timeout=30000")


def dropped(connection: Any) -> bool:
    """True when the server has closed this idle connection (or its driver marked it closed). SQLite: never."""
    if isinstance(connection, sqlite3.Connection):
        return False
    if getattr(connection, "closed", 0):
        return True
    try:
        poller = select.poll()  # not select.select: it fails for descriptors past 1024, common in a busy server
        poller.register(connection.fileno(), select.POLLIN)
        return bool(poller.poll(0))  # an idle session has nothing to read unless the server said goodbye
    except (OSError, ValueError):
        return True


def connect(engine: Engine, **options: Any) -> Any:
    """A new plain DBAPI connection to the engine's database, in autocommit mode (statements commit on their
    own; a transaction is an explicit BEGIN … COMMIT). ``options``: extra driver options (PostgreSQL)."""
    cargs, cparams = engine.dialect.create_connect_args(engine.url)
    if engine.dialect.name == "sqlite":
        connection = sqlite3.connect(*cargs, **{**cparams, "isolation_level": None, "check_same_thread": False})
        for pragma in SQLITE_PRAGMAS:  # as the store's pool (catalog.py's _sqlite_pragmas)
            connection.execute(f"PRAGMA {pragma}")
        return connection
    connection = engine.dialect.loaded_dbapi.connect(
        *cargs, **{"connect_timeout": CONNECT_TIMEOUT_SECONDS, **options, **cparams}
    )
    connection.autocommit = True
    return connection


def watch_pool(engine: Engine) -> None:
    """Apply the policy to the engine's pool: a dropped connection is replaced at checkout."""

    @event.listens_for(engine, "checkout")
    def _replace_dropped(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if dropped(dbapi_connection):
            raise DisconnectionError("the database closed this pooled connection")  # the pool connects anew


def close_quietly(connection: Any) -> None:
    """Close a connection that failed or was dropped; errors closing it do not matter."""
    try:
        connection.close()
    except Exception:
        pass


__all__ = ["close_quietly", "connect", "dropped", "watch_pool"]
