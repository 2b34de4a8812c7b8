"""The catalog store's metadata files: written once each, serialized once, read through a cache, and deleted again
when the commit that wrote one lost its race.

A commit writes its new metadata file *before* it swaps the table's pointer (the pointer must never name a file
that is not there yet). When the swap then finds the pointer moved (a concurrent commit won, a stale guess of
this process's last pointer, a name created meanwhile), nothing references the new file and nothing ever will: it
is deleted at once, best effort. When the database's answer is unknown (a 5xx: the COMMIT may have landed) the
file is kept.
"""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Hashable, Iterable, Iterator
from typing import Any

from pyiceberg.io import FileIO, load_file_io
from pyiceberg.serializers import Compressor, FromInputFile
from pyiceberg.table import TableProperties
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.typedef import Properties

from catalog_api.store import format_v3
from lakeview import errors

log = logging.getLogger("lakeview.catalog")

SNAPSHOT_JSON_ENTRIES = 20000
# what a lost race raises: the pointer did not change, so the commit's new files are referenced by nothing
LOST_RACE = (errors.CommitConflictError, errors.AlreadyExistsError)


class MetadataCache:
    """A small thread-safe LRU: parsed metadata files keyed by location (a metadata file never
    changes once written), and serialized JSON."""

    def __init__(self, size: int = 512) -> None:
        self._size = size
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any | None:
        with self._lock:
            value = self._items.get(key)
            if value is not None:
                self._items.move_to_end(key)
            return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self._size:
                self._items.popitem(last=False)


class MetadataFiles:
    """Reads, writes and (after a lost race) deletes the metadata files of one store's warehouse."""

    def __init__(self, properties: Properties, remote: bool) -> None:
        """``properties``: the catalog's FileIO properties; ``remote``: the warehouse is object storage."""
        self.properties, self.remote = properties, remote
        self.cache = MetadataCache(size=1024)  # parsed metadata and its JSON, keyed by (immutable) location
        self._snapshot_json: dict[int, tuple[Any, bytes]] = {}  # a plain dict: one lookup per snapshot per commit
        self._ios: dict[str, Any] = {}

    def read_table(self, location: str) -> TableMetadata:
        """Parse a table metadata file (cached: metadata files are immutable)."""
        metadata = self.cache.get(location)
        if metadata is None:
            metadata = FromInputFile.table_metadata(self.io(location).new_input(location))
            self.cache.put(location, metadata)
        return metadata

    def write_table(self, metadata: TableMetadata, location: str) -> None:
        """Write a metadata file, serializing once: the same JSON serves loadTable and commit responses.
        Raises CommitConflictError when the file exists."""
        self.write(
            location, Compressor.get_compressor(location).bytes_compressor()(self.table_json(location, metadata))
        )
        self.cache.put(location, metadata)

    def write(self, location: str, payload: bytes) -> None:
        """Write a new file (never over an existing one). Raises CommitConflictError when it exists."""
        if self.remote:
            with self.io(location).new_output(location).create(overwrite=False) as stream:
                stream.write(payload)
        else:  # a local file: plain os calls cost a fraction of pyarrow's filesystem layer per commit
            _write_new_file(location, payload)

    @contextlib.contextmanager
    def discarded_on_lost_race(self, locations: Iterable[str]) -> Iterator[None]:
        """Around a pointer change that would make ``locations`` (just written) referenced: when it raises a lost
        race (:data:`LOST_RACE`, nothing changed), delete them, best effort, and re-raise."""
        try:
            yield
        except LOST_RACE:
            self.discard(locations)
            raise

    def discard(self, locations: Iterable[str]) -> None:
        """Delete metadata files no pointer references (best effort: a failure is logged, never raised)."""
        for location in locations:
            try:
                if self.remote:
                    self.io(location).delete(location)
                else:
                    os.unlink(location.removeprefix("file://"))
            except FileNotFoundError:
                pass
            except Exception as exc:
                log.warning("could not delete the unreferenced metadata file %s: %s", location, exc)

    def io(self, location: str) -> FileIO:
        """The FileIO for a location's scheme, built once (building one per commit cost ~5% of a commit)."""
        scheme = location.split("://", 1)[0] if "://" in location else "file"
        io = self._ios.get(scheme)
        if io is None:
            io = self._ios[scheme] = load_file_io(self.properties, location)
        return io

    def table_json(self, location: str, metadata: TableMetadata) -> bytes:
        """The metadata's JSON (as in its file), serialized once per metadata location."""
        key = "json:" + location
        payload = self.cache.get(key)
        if payload is None:
            payload = self._serialize(metadata)
            self.cache.put(key, payload)
        return payload

    def _serialize(self, metadata: TableMetadata) -> bytes:
        """Metadata JSON with each snapshot's JSON reused from the previous version of the table:
        pyiceberg serializes snapshots in Python, the bulk of a commit's CPU at 100 snapshots.
        Reuse is keyed by object identity (commits share unchanged snapshot objects), never by id."""
        if not metadata.snapshots:
            return format_v3.metadata_json(metadata)
        parts = []
        for snapshot in metadata.snapshots:
            cached = self._snapshot_json.get(id(snapshot))
            if cached is None or cached[0] is not snapshot:
                cached = (snapshot, snapshot.model_dump_json().encode())
                if len(self._snapshot_json) >= SNAPSHOT_JSON_ENTRIES:
                    self._snapshot_json = {}  # start over rather than track recency on every lookup
                self._snapshot_json[id(snapshot)] = cached  # holds the object: its id is not reused
            parts.append(cached[1])
        head = format_v3.metadata_json(metadata, exclude={"snapshots"})
        return head[:-1] + b',"snapshots":[' + b",".join(parts) + b"]}"


def metadata_file_location(location: str, properties: Properties, version: int) -> str:
    """Where a table's next metadata file goes (pyiceberg's layout, computed here: the catalog never asks a
    table-chosen location provider)."""
    base = (properties.get(TableProperties.WRITE_METADATA_PATH) or f"{location.rstrip('/')}/metadata").rstrip("/")
    return f"{base}/{version:05d}-{uuid.uuid4()}.metadata.json"


def _write_new_file(location: str, payload: bytes) -> None:
    """Write a local file that must not exist yet (its directory made on first use), with plain os calls: a
    Python file object around the descriptor and a makedirs per commit cost more than the write itself.
    Raises CommitConflictError when the file exists."""
    path = location.removeprefix("file://")
    try:
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileNotFoundError:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise errors.CommitConflictError(f"metadata file {location} exists already; reload and retry") from None
    try:
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
