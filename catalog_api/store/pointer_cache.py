"""Serve a table's current metadata location without asking the database, and stay read-your-writes.

loadTable is the catalog's hot path; its only database work is reading one pointer. On PostgreSQL that
read is a network round trip on the event loop (and CPU in the database server) for an answer that
changes only on commits. So every catalog process keeps the pointers it read, and every pointer change
on this host writes a fresh random *stamp* into a slot of a small memory-mapped file every process of
the store maps (beside a SQLite database; in ``/dev/shm`` for PostgreSQL), one slot per table (by a
stable hash of its name; a collision only costs a re-read):

- a reader reads the table's slot stamp *before* it reads the pointer from the database, and keeps both;
- a writer changes the pointer in the database, *then* writes a new stamp, *then* answers its client;
- a cached pointer is served only while its slot still holds the stamp read with it.

A pointer cached before a commit was read before that commit's stamp was written, so once the commit
has answered its client, no process on the host serves the older pointer: a client never reads a
metadata location older than one its own commit returned, whichever worker it reaches.

Processes on *other* hosts (sharing a PostgreSQL store) do not share the memory. Every process records
its memory domain (a random id kept in the shared file) in ``lakeview_catalog_domains`` with a heartbeat;
the cache is used only while no other domain has been alive in the last :data:`ALIVE_SECONDS`, as found by
a check that *started* less than :data:`CHECK_SECONDS` before the cached answer. A process that finds
another domain alive when it starts waits ``2 × CHECK_SECONDS`` before serving, so every other domain has
re-checked (and stopped caching) before this one can commit anything. The checks run on the heartbeat's
thread every :data:`CHECK_EVERY_SECONDS`, never on the event loop (a database round trip there held every
request of the worker); a check that comes late (a starved thread, a slow database) only turns the cache off
until the next one.
"""

from __future__ import annotations

import hashlib
import mmap
import os
import secrets
import struct
import tempfile
import threading
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pyiceberg.typedef import Identifier
from sqlalchemy import Column, DateTime, MetaData, String, Table, func, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.engine import Engine

SLOTS = 8192  # 64 KiB of stamps: collisions between tables only cost an extra pointer read
DOMAIN_BYTES = 16
CHECK_SECONDS = 0.5
CHECK_EVERY_SECONDS = CHECK_SECONDS / 4  # a check may come up to 3/8 s late before the cache turns off
HEARTBEAT_SECONDS = 5.0
ALIVE_SECONDS = 30.0
_STAMP = struct.Struct("=Q")
STAMPS_DIR_ENV = "LAKEVIEW_POINTER_STAMPS_DIR"  # where the stamp files live (default /dev/shm): one per host

_meta = MetaData()
domains = Table(
    "lakeview_catalog_domains",
    _meta,
    Column("catalog_name", String(255), primary_key=True),
    Column("domain", String(64), primary_key=True),
    Column("seen_at", DateTime(timezone=True), nullable=False),
)


class Stamps:
    """The shared array of per-table stamps (or a private one, for a store no other process can open)."""

    def __init__(self, path: Path | None) -> None:
        """``path``: the store's stamp file (see :func:`stamp_file`); None for a process-private store."""
        size = DOMAIN_BYTES + SLOTS * _STAMP.size
        if path is None:
            self._memory: Any = bytearray(size)
            self._memory[:DOMAIN_BYTES] = secrets.token_bytes(DOMAIN_BYTES)
        else:
            self._memory = _shared_memory(path, size)
        self.domain = bytes(self._memory[:DOMAIN_BYTES]).hex()

    def slot(self, identifier: Identifier) -> int:
        digest = hashlib.blake2b("\x1f".join(identifier).encode("utf-8", "surrogatepass"), digest_size=8).digest()
        return DOMAIN_BYTES + (int.from_bytes(digest, "little") % SLOTS) * _STAMP.size

    def read(self, slot: int) -> int:
        return _STAMP.unpack_from(self._memory, slot)[0]

    def renew(self, identifier: Identifier) -> None:
        """A new random stamp for the table's slot: every pointer cached for it before now is stale."""
        _STAMP.pack_into(self._memory, self.slot(identifier), secrets.randbits(64) | 1)


def stamp_file(key: str) -> Path:
    """A PostgreSQL store's stamp file in /dev/shm (the temp directory elsewhere), named by the store's identity."""
    directory = Path(os.environ.get(STAMPS_DIR_ENV) or "/dev/shm")
    if not os.access(directory, os.W_OK):
        directory = Path(tempfile.gettempdir())
    return directory / f"lakeview-pointers-{hashlib.sha256(key.encode()).hexdigest()[:24]}"


def _shared_memory(path: Path, size: int) -> mmap.mmap:
    """The stamp file mapped into memory, created once with a random domain id (every process mapping the
    same file shares its pages: one memory domain)."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, secrets.token_bytes(DOMAIN_BYTES) + bytes(size - DOMAIN_BYTES))
    except FileExistsError:
        fd = os.open(path, os.O_RDWR)
        for _ in range(100):  # its creator may still be writing the domain id
            if os.fstat(fd).st_size >= size:
                break
            time.sleep(0.01)
    try:
        return mmap.mmap(fd, size)
    finally:
        os.close(fd)


class PointerCache:
    """Current metadata locations by table, valid while their stamps hold (see the module docstring)."""

    def __init__(self, stamps: Stamps, domains: Domains | None = None) -> None:
        """``domains``: the other hosts' check for a PostgreSQL store; None when no other host can open the store."""
        self.stamps = stamps
        self.domains = domains
        self._pointers: dict[Identifier, tuple[int, int, str]] = {}  # identifier → (slot, stamp, location)

    def get(self, identifier: Identifier) -> str | None:
        """The cached location, if no pointer change since it was read can have answered a client."""
        entry = self._pointers.get(identifier)
        if entry is None or self.stamps.read(entry[0]) != entry[1]:
            return None
        if self.domains is not None and time.monotonic() >= self.domains.alone_until:
            return None
        return entry[2]

    def read_through(self, identifier: Identifier, read: Callable[[], str | None]) -> str | None:
        """Read the pointer from the database (``read``), stamped with the slot's value from before the read."""
        slot = self.stamps.slot(identifier)
        stamp = self.stamps.read(slot)
        location = read()
        if location is None:
            self._pointers.pop(identifier, None)
        else:
            if len(self._pointers) > 100_000:
                self._pointers.clear()
            self._pointers[identifier] = (slot, stamp, location)
        return location

    def changed(self, identifier: Identifier) -> None:
        """Call after a pointer change is committed and before its client is answered."""
        self._pointers.pop(identifier, None)
        self.stamps.renew(identifier)

    def close(self) -> None:
        if self.domains is not None:
            self.domains.close()


class Domains:
    """Which memory domains (hosts) serve a PostgreSQL store: the cache is safe only while this one is alone."""

    def __init__(self, engine: Engine, catalog_name: str, domain: str) -> None:
        self.engine, self.catalog_name, self.domain = engine, catalog_name, domain
        _meta.create_all(engine, checkfirst=True)
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self.alone_until = 0.0  # monotonic time until which the last check vouches that no other domain serves
        started = time.monotonic()
        if self._beat():  # let every other domain see this one (and stop caching) before it serves anything
            time.sleep(2 * CHECK_SECONDS)
        else:
            self.alone_until = started + CHECK_SECONDS
        # The thread holds the domain weakly: a store dropped without close() (open_store per call) is collected,
        # its heartbeat ends and its pooled connections close, instead of piling up until PostgreSQL refuses clients.
        thread = threading.Thread(
            target=_heartbeat, args=(weakref.ref(self), self._stopped), name="lakeview-domain-heartbeat", daemon=True
        )
        thread.start()

    def _beat(self) -> int:
        """Record this domain as alive; the number of other domains alive. The record commits before the count:
        of two processes starting together, at least one then sees the other."""
        with self._lock:
            with self.engine.begin() as conn:
                row = pg_insert(domains).values(catalog_name=self.catalog_name, domain=self.domain, seen_at=func.now())
                conn.execute(
                    row.on_conflict_do_update(index_elements=["catalog_name", "domain"], set_={"seen_at": func.now()})
                )
            with self.engine.connect() as conn:
                return self._others(conn)

    def _others(self, conn: Any) -> int:
        return conn.execute(
            select(func.count())
            .select_from(domains)
            .where(
                domains.c.catalog_name == self.catalog_name,
                domains.c.domain != self.domain,
                domains.c.seen_at > func.now() - func.make_interval(0, 0, 0, 0, 0, 0, ALIVE_SECONDS),
            )
        ).scalar_one()

    def close(self) -> None:
        """Stop the heartbeat. The row is left to age out in ALIVE_SECONDS rather than deleted: another process
        of this domain may still be serving, and other hosts must keep seeing it until its next beat."""
        self._stopped.set()

    def check(self, beat: bool = False) -> None:
        """Check (with ``beat``: and record this domain alive) that no other domain serves the store; while none
        does, the cache may serve until CHECK_SECONDS after the check started. A failed check vouches nothing."""
        started = time.monotonic()
        try:
            if beat:
                others = self._beat()
            else:
                with self.engine.connect() as conn:
                    others = self._others(conn)
        except Exception:  # the store is unreachable: no cached answers until a check succeeds
            others = 1
        self.alone_until = max(self.alone_until, started + CHECK_SECONDS) if others == 0 else 0.0


def _heartbeat(domain: weakref.ref[Domains], stopped: threading.Event) -> None:
    next_beat = time.monotonic() + HEARTBEAT_SECONDS
    while not stopped.wait(CHECK_EVERY_SECONDS):
        domains = domain()
        if domains is None:  # its store was collected
            return
        beat = time.monotonic() >= next_beat
        if beat:
            next_beat = time.monotonic() + HEARTBEAT_SECONDS
        domains.check(beat)
        del domains
