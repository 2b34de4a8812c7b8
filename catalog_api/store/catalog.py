"""The catalog store: where each table's and view's current metadata pointer lives.

The schema is Iceberg's JDBC catalog schema as pyiceberg's ``SqlCatalog`` creates it
(``iceberg_tables`` + ``iceberg_namespace_properties``), on SQLite by default and PostgreSQL
in production; views are rows of ``iceberg_tables`` with ``iceberg_type = 'VIEW'`` as in
iceberg-java's JDBC catalog, so a table and a view can never share a name.

The commit path is pyiceberg's (requirements ``validate`` → ``update_table_metadata`` → a new
metadata file); this module adds the one thing pyiceberg lacks: a multi-table commit that
swaps every pointer in ONE database transaction with a compare-and-swap per row
(:meth:`CatalogStore.commit_transaction`), so either all tables change or none.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pyiceberg import exceptions as iceberg_errors
from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables, SqlCatalog
from pyiceberg.io import FileIO, load_file_io
from pyiceberg.partitioning import UNPARTITIONED_PARTITION_SPEC, PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table, TableProperties
from pyiceberg.table.metadata import (
    TableMetadata,
    TableMetadataUtil,
    new_table_metadata,
)
from pyiceberg.table.sorting import UNSORTED_SORT_ORDER, SortOrder
from pyiceberg.table.update import (
    AssertCreate,
    SetPropertiesUpdate,
    TableRequirement,
    TableUpdate,
    _apply_table_update,
    _TableMetadataUpdateContext,
)
from pyiceberg.typedef import Identifier, Properties
from sqlalchemy import bindparam, delete, event, insert, or_, select, update
from sqlalchemy.exc import IntegrityError, OperationalError

from catalog_api.store import format_v3, kept_connections, metadata_checks, namespace_keys
from catalog_api.store.confinement import Confinement
from catalog_api.store.inert_properties import refuse_implementations
from catalog_api.store.metadata_files import MetadataFiles, metadata_file_location
from catalog_api.store.pointer_cache import Domains, PointerCache, Stamps, stamp_file
from catalog_api.store.pointer_swaps import PointerSwaps, SwapConflict
from lakeview import errors
from lakeview.config.models import ProjectConfig, file_io_properties
from writers.iceberg.metadata_memo import applied

log = logging.getLogger("lakeview.catalog")

MAX_NAME = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")
TABLE_TYPE = "TABLE"
READ_TIMEOUT_MS = 2000  # a pointer read on PostgreSQL, which may run on the event loop
VIEW_TYPE = "VIEW"


def check_name(kind: str, name: str) -> str:
    """Reject names that could escape the warehouse or confuse a path. Raises BadRequestError."""
    if not name:
        raise errors.BadRequestError(f"{kind} name is empty")
    limit = MAX_NAME - len(".db") if kind == "namespace" else MAX_NAME  # a namespace's directory is <name>.db
    if len(name.encode("utf-8", "surrogatepass")) > limit:  # file systems count bytes, not characters
        raise errors.BadRequestError(f"{kind} name is longer than {limit} bytes in UTF-8")
    if name in (".", "..") or "/" in name or "\\" in name or _CONTROL.search(name):
        raise errors.BadRequestError(f"{kind} name {name!r} contains a path separator, '..' or a control character")
    return name


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
    """pyiceberg's and the database's exceptions → Lakeview's catalog errors."""
    try:
        yield
    except iceberg_errors.NoSuchNamespaceError as exc:
        raise errors.NoSuchNamespaceError(str(exc)) from exc
    except iceberg_errors.NoSuchTableError as exc:
        raise errors.NoSuchTableError(str(exc)) from exc
    except (iceberg_errors.NamespaceAlreadyExistsError, iceberg_errors.TableAlreadyExistsError) as exc:
        raise errors.AlreadyExistsError(str(exc)) from exc
    except iceberg_errors.NamespaceNotEmptyError as exc:
        raise errors.NamespaceNotEmptyError(str(exc)) from exc
    except iceberg_errors.CommitFailedException as exc:
        raise errors.CommitConflictError(str(exc)) from exc
    except (iceberg_errors.ValidationError, ValueError) as exc:
        raise errors.BadRequestError(str(exc)) from exc
    except OperationalError as exc:
        # e.g. SQLite "database is locked" after the busy timeout: nothing was written.
        raise errors.CatalogUnavailableError(f"the catalog store is busy, retry: {exc.orig}") from exc


class _NoRawReads(Exception):
    """This store reads pointers through SQLAlchemy only."""


@dataclass(frozen=True)
class TableChange:
    """One table's part of a (multi-table) commit: the same data as a REST ``CommitTableRequest``."""

    identifier: Identifier
    requirements: tuple[TableRequirement, ...]
    updates: tuple[TableUpdate, ...]


@dataclass(frozen=True)
class _Staged:
    identifier: Identifier
    previous_location: str | None  # None: the commit creates the table (assert-create)
    metadata_location: str
    metadata: TableMetadata
    changed: bool
    guessed: bool  # staged on this process's last commit's pointer, not one read from the database


class _StaleGuess(Exception):
    """A commit staged on this process's last pointer lost the compare-and-swap: stage it on the database's."""


class CatalogStore:
    """Namespaces, tables and views of one warehouse, with atomic (multi-)pointer swaps."""

    def __init__(
        self, url: str, warehouse: str | Path, name: str = "lakeview", properties: dict[str, str] | None = None
    ) -> None:
        """``properties``: extra catalog properties, e.g. pyiceberg FileIO settings (``s3.endpoint``) for an
        ``s3://`` warehouse, where the store writes metadata files."""
        self.warehouse = str(warehouse).rstrip("/")
        self.name = name
        self.url = url
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        self.remote = "://" in self.warehouse.removeprefix("file://")
        if not self.remote:
            Path(self.warehouse).mkdir(parents=True, exist_ok=True)
        self._catalog = SqlCatalog(name, uri=url, warehouse=self.warehouse, schema_version="v1", **(properties or {}))
        self.engine = self._catalog.engine
        # A pooled connection cut by a restart of the server is replaced before use (kept_connections.py).
        kept_connections.watch_pool(self.engine)
        namespace_keys.migrate(self.engine, name)  # once per store: keys with a literal '%' get escaped
        if self.engine.dialect.name == "sqlite":
            event.listen(self.engine, "connect", _sqlite_pragmas)
            self.engine.dispose()  # reconnect so the pragmas apply to every pooled connection
        self.files = MetadataFiles(self._catalog.properties, self.remote)
        self.cache = self.files.cache  # parsed metadata and its JSON, keyed by (immutable) location
        # the pointer this process's last commit of a table set, with the table's stamp just after (pointer_cache.py)
        self._committed: dict[Identifier, tuple[int, str]] = {}
        # SQLite in WAL mode: a pointer read never waits for a lock, so the HTTP layer may run it inline,
        # on a plain sqlite3 connection per thread (SQLAlchemy's per-statement overhead is ~10x the query).
        # PostgreSQL too: one indexed lookup on a kept connection (~0.1-0.3 ms) costs less than the thread pool's
        # hop, whose queueing made the p99 at 32 clients; the reader has a statement timeout so a stuck server
        # cannot hold the event loop for long.
        self.inline_reads = (self.engine.dialect.name == "sqlite" and bool(self.engine.url.database)) or (
            self.engine.dialect.name == "postgresql"
        )
        self._readers = threading.local()
        self._write_lock = threading.Lock() if self.engine.dialect.name == "sqlite" else contextlib.nullcontext()
        self._raw_reads = self.engine.dialect.name == "postgresql" or self.inline_reads  # not in-memory SQLite
        marker = "?" if self.engine.dialect.paramstyle == "qmark" else "%s"
        self._reader_sql = {kind: sql.replace("?", marker) for kind, sql in _RAW_POINTER.items()}
        self.confinement = Confinement(self)  # which prefixes each namespace owns (see confinement.py)
        self.pointers = self._pointer_cache()
        self._swaps = PointerSwaps(self.engine, name) if self._raw_reads else None  # not for in-memory SQLite

    def _pointer_cache(self) -> PointerCache:
        """loadTable's pointers, shared-memory stamped (pointer_cache.py); a PostgreSQL store also checks that no
        other host serves it."""
        if self.engine.dialect.name == "sqlite":
            database = self.engine.url.database
            if not database or database == ":memory:":
                return PointerCache(Stamps(None))  # no other process can open this store
            # beside the database file (one host: the file's), so it goes when the store's directory does
            return PointerCache(Stamps(Path(f"{os.path.realpath(database)}-pointers-{self.name}")))
        stamps = Stamps(stamp_file(f"{self.engine.url.render_as_string(hide_password=True)}#{self.name}"))
        return PointerCache(stamps, Domains(self.engine, self.name, stamps.domain))

    def _table_pointer(self, identifier: Identifier) -> str | None:
        """The table's current metadata location: from the pointer cache while it is valid, else the database."""
        location = self.pointers.get(identifier)
        if location is None:
            location = self.pointers.read_through(identifier, lambda: self._pointer(identifier, TABLE_TYPE))
        return location

    @contextlib.contextmanager
    def _changing(self, *identifiers: Identifier) -> Iterator[None]:
        """Around a pointer change: afterwards (committed or not) cached pointers of these names are stale."""
        try:
            yield
        finally:
            for identifier in identifiers:
                self.pointers.changed(identifier)
                self._committed.pop(identifier, None)

    @contextlib.contextmanager
    def _write(self) -> Iterator[Any]:
        """A write transaction. On SQLite one writer at a time per process: waiting on this lock is
        immediate, while SQLite's busy handler sleeps up to 100 ms between retries."""
        with self._write_lock, self.engine.begin() as conn:
            yield conn

    def close(self) -> None:
        self.pointers.close()
        if self._swaps is not None:
            self._swaps.close()
        self.engine.dispose()

    # ---------------------------------------------------------------- namespaces
    def list_namespaces(self, parent: Identifier = ()) -> list[Identifier]:
        with _mapped():
            if parent and not self._catalog.namespace_exists(namespace_keys.encode(parent)):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {namespace_keys.display(parent)}")
            children = self._catalog.list_namespaces(namespace_keys.encode(parent) if parent else ())
            return sorted(namespace_keys.decode(".".join(ns)) for ns in children)

    def namespace_exists(self, namespace: Identifier) -> bool:
        with _mapped():
            return self._catalog.namespace_exists(namespace_keys.encode(namespace))

    def create_namespace(self, namespace: Identifier, properties: Properties) -> None:
        for part in namespace:
            check_name("namespace", part)
        refuse_implementations(properties, "namespace")
        if "location" in properties:
            self.check_location(properties["location"])
        with _mapped():
            self._catalog.create_namespace(namespace_keys.encode(namespace), properties)

    def load_namespace(self, namespace: Identifier) -> Properties:
        with _mapped():
            return self._catalog.load_namespace_properties(namespace_keys.encode(namespace))

    def drop_namespace(self, namespace: Identifier) -> None:
        """Drop an empty namespace. Raises NoSuchNamespaceError, NamespaceNotEmptyError."""
        ns = namespace_keys.encode(namespace)
        with _mapped():
            if not self._catalog.namespace_exists(ns):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {namespace_keys.display(namespace)}")
            children = self._catalog.list_namespaces(ns)
            with self.engine.connect() as conn:
                rows = conn.execute(
                    select(IcebergTables.table_name)
                    .where(IcebergTables.catalog_name == self.name, IcebergTables.table_namespace == ns)
                    .limit(1)
                ).first()
            if rows or children:
                shown = namespace_keys.display(namespace)
                raise errors.NamespaceNotEmptyError(
                    f"Namespace {shown} is not empty: it holds tables, views or namespaces"
                )
            with self._write() as conn:
                conn.execute(
                    delete(IcebergNamespaceProperties).where(
                        IcebergNamespaceProperties.catalog_name == self.name, IcebergNamespaceProperties.namespace == ns
                    )
                )

    def update_namespace(self, namespace: Identifier, removals: set[str], updates: Properties) -> dict[str, list[str]]:
        overlap = removals & set(updates)
        if overlap:
            raise errors.UnprocessableEntityError(f"properties both removed and updated: {', '.join(sorted(overlap))}")
        refuse_implementations(updates, "namespace")
        if "location" in updates:
            self.check_location(updates["location"])
        with _mapped():
            summary = self._catalog.update_namespace_properties(namespace_keys.encode(namespace), removals, updates)
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    # ---------------------------------------------------------------- pointers
    def _names(self, namespace: Identifier, kind: str) -> list[Identifier]:
        ns = namespace_keys.encode(namespace)
        with _mapped():
            if not self._catalog.namespace_exists(ns):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {namespace_keys.display(namespace)}")
            with self.engine.connect() as conn:
                rows = conn.execute(
                    select(IcebergTables.table_name).where(
                        IcebergTables.catalog_name == self.name,
                        IcebergTables.table_namespace == ns,
                        _type_is(kind),
                    )
                ).scalars()
                return sorted((*namespace, name) for name in rows)

    def _pointer(self, identifier: Identifier, kind: str) -> str | None:
        """The current metadata location of a table or view, or None (the hot path of loadTable).

        Runs on a plain DBAPI connection per thread in autocommit mode (SQLite or PostgreSQL):
        SQLAlchemy's per-statement overhead is several times the query itself.
        """
        reader = getattr(self._readers, "connection", None)
        try:
            if not self._raw_reads:
                raise _NoRawReads
            if reader is not None and kept_connections.dropped(reader):
                kept_connections.close_quietly(reader)
                reader = None
            if reader is None:
                reader = self._readers.connection = self._new_reader()
            cursor = reader.cursor()
            cursor.execute(self._reader_sql[kind], (self.name, namespace_keys.encode(identifier[:-1]), identifier[-1]))
            row = cursor.fetchone()
            cursor.close()
            return row[0] if row else None
        except _NoRawReads:
            pass
        except self.engine.dialect.loaded_dbapi.Error as exc:
            self._readers.connection = None  # failed: a new connection next time
            if reader is not None:
                kept_connections.close_quietly(reader)
            raise errors.CatalogUnavailableError(f"the catalog store failed a read, retry: {exc}") from None
        with _mapped(), self.engine.connect() as conn:
            return conn.execute(
                _POINTER_QUERIES[kind],
                {"catalog": self.name, "namespace": namespace_keys.encode(identifier[:-1]), "name": identifier[-1]},
            ).scalar_one_or_none()

    def _new_reader(self) -> Any:
        if self.engine.dialect.name == "sqlite":
            return kept_connections.connect(self.engine)
        # a statement timeout: a pointer read may run on the event loop, which a stuck server must not hold
        return kept_connections.connect(self.engine, options=f"-c statement_timeout={READ_TIMEOUT_MS}")

    def _insert_pointer(self, conn: Any, identifier: Identifier, location: str, kind: str) -> None:
        """Insert a new pointer inside the caller's transaction (a duplicate raises IntegrityError)."""
        conn.execute(
            insert(IcebergTables).values(
                catalog_name=self.name,
                table_namespace=namespace_keys.encode(identifier[:-1]),
                table_name=identifier[-1],
                metadata_location=location,
                previous_metadata_location=None,
                iceberg_type=kind,
            )
        )

    def _swap_pointer(self, conn: Any, identifier: Identifier, expected: str, new: str, kind: str) -> None:
        """Compare-and-swap one pointer inside the caller's transaction; a miss raises CommitConflictError."""
        result = conn.execute(
            _SWAP_STATEMENTS[kind],
            {
                "catalog": self.name,
                "namespace": namespace_keys.encode(identifier[:-1]),
                "name": identifier[-1],
                "expected": expected,
                "new": new,
            },
        )
        if result.rowcount != 1:
            raise errors.CommitConflictError(
                f"{'.'.join(identifier)} was changed by a concurrent commit; reload and retry"
            )

    def _rename(self, source: Identifier, target: Identifier, kind: str) -> None:
        check_name(kind.lower(), target[-1])
        with _mapped():
            if not self._catalog.namespace_exists(namespace_keys.encode(target[:-1])):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(target[:-1])}")
            try:
                with self._changing(source, target), self._write() as conn:
                    result = conn.execute(
                        update(IcebergTables)
                        .where(
                            IcebergTables.catalog_name == self.name,
                            IcebergTables.table_namespace == namespace_keys.encode(source[:-1]),
                            IcebergTables.table_name == source[-1],
                            _type_is(kind),
                        )
                        .values(table_namespace=namespace_keys.encode(target[:-1]), table_name=target[-1])
                    )
                    if result.rowcount != 1:
                        raise _missing(kind, source)
            except IntegrityError:
                raise errors.AlreadyExistsError(f"Table or view already exists: {'.'.join(target)}") from None

    def _drop(self, identifier: Identifier, kind: str) -> str:
        with _mapped(), self._changing(identifier), self._write() as conn:
            location = conn.execute(
                delete(IcebergTables)
                .where(
                    IcebergTables.catalog_name == self.name,
                    IcebergTables.table_namespace == namespace_keys.encode(identifier[:-1]),
                    IcebergTables.table_name == identifier[-1],
                    _type_is(kind),
                )
                .returning(IcebergTables.metadata_location)
            ).scalar_one_or_none()
        if location is None:
            raise _missing(kind, identifier)
        return location

    # ---------------------------------------------------------------- tables
    def list_tables(self, namespace: Identifier) -> list[Identifier]:
        return self._names(namespace, TABLE_TYPE)

    def table_exists(self, identifier: Identifier) -> bool:
        return self._table_pointer(identifier) is not None

    def read_metadata(self, location: str) -> TableMetadata:
        """Parse a table metadata file (cached: metadata files are immutable)."""
        return self.files.read_table(location)

    def load_metadata(self, identifier: Identifier) -> tuple[str, TableMetadata]:
        """The table's current metadata location and parsed metadata. Raises NoSuchTableError."""
        location = self._table_pointer(identifier)
        if location is None:
            raise _missing(TABLE_TYPE, identifier)
        return location, self.read_metadata(location)

    def load_cached_metadata(self, identifier: Identifier) -> tuple[str, TableMetadata] | None:
        """Like :meth:`load_metadata` when the current metadata file is parsed in the cache already, else None
        (no file I/O: the HTTP layer runs this on its event loop). Raises NoSuchTableError."""
        location = self._table_pointer(identifier)
        if location is None:
            raise _missing(TABLE_TYPE, identifier)
        metadata = self.cache.get(location)
        return None if metadata is None else (location, metadata)

    def load_table(self, identifier: Identifier) -> Table:
        """A pyiceberg ``Table`` (used by the CLI and status; the HTTP path uses :meth:`load_metadata`)."""
        location, metadata = self.load_metadata(identifier)
        return Table(
            identifier=identifier,
            metadata=metadata,
            metadata_location=location,
            io=load_file_io(self._catalog.properties, location),  # never the table's properties: they are data
            catalog=self._catalog,
        )

    def create_table(
        self,
        identifier: Identifier,
        schema: Schema,
        location: str | None,
        partition_spec: PartitionSpec | None,
        sort_order: SortOrder | None,
        properties: Properties,
        stage: bool = False,
    ) -> tuple[str, TableMetadata]:
        """Create a table (or, with ``stage``, only its metadata: nothing is written or registered)."""
        check_name("table", identifier[-1])
        namespace = identifier[:-1]
        refuse_implementations(properties, "table")
        with _mapped():
            if not self._catalog.namespace_exists(namespace_keys.encode(namespace)):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {namespace_keys.display(namespace)}")
            if not location:
                key = namespace_keys.encode(namespace)
                location = self._catalog._get_default_warehouse_location(key, identifier[-1])
            location = self.confinement.check(namespace, location, "table location")
            self.confinement.check_paths(namespace, properties)
            format_version = int(properties.get(TableProperties.FORMAT_VERSION, TableProperties.DEFAULT_FORMAT_VERSION))
            format_v3.check_format_version(format_version)
            format_v3.check_schema_defaults(schema, format_version)
            schema = self._catalog._convert_schema_if_needed(schema, format_version)
            metadata = new_table_metadata(
                location=location,
                schema=schema,
                partition_spec=partition_spec or UNPARTITIONED_PARTITION_SPEC,
                sort_order=sort_order or UNSORTED_SORT_ORDER,
                properties=properties,
            )
            metadata = format_v3.with_row_lineage(metadata)
            fresh = format_v3.carry_defaults(schema, metadata.schema())  # pyiceberg's fresh ids drop defaults
            if fresh is not metadata.schema():
                metadata = metadata.model_copy(update={"schemas": [fresh]})
            metadata_checks.check_new_table(metadata)
            metadata_location = metadata_file_location(location, properties, 0)
            self.check_location(metadata_location)
            if stage:
                return metadata_location, metadata
            if self._pointer(identifier, TABLE_TYPE) or self._pointer(identifier, VIEW_TYPE):
                raise errors.AlreadyExistsError(f"Table or view already exists: {'.'.join(identifier)}")
            self.files.write_table(metadata, metadata_location)
            lost_race = self.files.discarded_on_lost_race([metadata_location])
            with lost_race, _exists_guard(identifier), self._changing(identifier), self._write() as conn:
                self._insert_pointer(conn, identifier, metadata_location, TABLE_TYPE)
        return metadata_location, metadata

    def register_table(
        self, identifier: Identifier, metadata_location: str, overwrite: bool = False
    ) -> tuple[str, TableMetadata]:
        """Register an existing metadata file as a table (``overwrite`` replaces a table's pointer)."""
        check_name("table", identifier[-1])
        namespace = identifier[:-1]
        self.check_location(metadata_location)
        with _mapped():
            if not self._catalog.namespace_exists(namespace_keys.encode(namespace)):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {namespace_keys.display(namespace)}")
            self.confinement.check(namespace, metadata_location, "metadata-location")
            try:
                if self._is_view_metadata(metadata_location):
                    raise errors.BadRequestError(
                        f"{metadata_location!r} is a view metadata file; register it as a view"
                    )
                metadata = self.read_metadata(metadata_location)
            except errors.BadRequestError:
                raise
            except FileNotFoundError:
                raise errors.BadRequestError(f"metadata file {metadata_location!r} does not exist") from None
            except Exception as exc:  # any parse failure is the caller's bad file
                raise errors.BadRequestError(f"{metadata_location!r} is not a table metadata file: {exc}") from None
            self.confinement.check(namespace, metadata.location, "table location")
            self.confinement.check_paths(namespace, metadata.properties)
            refuse_implementations(metadata.properties, "table")
            current = self._pointer(identifier, TABLE_TYPE)
            with _exists_guard(identifier), self._changing(identifier), self._write() as conn:
                if current is not None and overwrite:
                    self._swap_pointer(conn, identifier, current, metadata_location, TABLE_TYPE)
                else:
                    self._insert_pointer(conn, identifier, metadata_location, TABLE_TYPE)
        return metadata_location, metadata

    def rename_table(self, source: Identifier, target: Identifier) -> None:
        self._rename(source, target, TABLE_TYPE)

    def drop_table(self, identifier: Identifier, purge: bool = False) -> None:
        """Unregister a table; with ``purge`` also delete its data and metadata files."""
        location = self._drop(identifier, TABLE_TYPE)
        if purge:
            self._purge(identifier[:-1], location)

    def _purge(self, namespace: Identifier, metadata_location: str) -> None:
        """Delete the files the table's own metadata lists, and only those under its namespace's prefixes:
        a table's metadata is client-written, so it may list another namespace's files."""
        rule = self.confinement.rule(namespace)

        def allowed(path: str) -> bool:
            return self.confinement.allows(namespace, path, rule)

        if not allowed(metadata_location):
            log.warning("purge: %s is outside namespace %s's storage; deleting nothing", metadata_location, namespace)
            return
        try:
            metadata = self.read_metadata(metadata_location)
        except Exception:  # the pointer is gone already; a missing file leaves nothing to delete
            log.warning("purge: cannot read %s", metadata_location)
            return
        io = load_file_io(self._catalog.properties, metadata_location)
        files = {metadata_location} | {entry.metadata_file for entry in metadata.metadata_log}
        files |= {s.statistics_path for s in getattr(metadata, "statistics", [])}
        files |= {s.statistics_path for s in getattr(metadata, "partition_statistics", [])}
        for snapshot in metadata.snapshots:
            if not allowed(snapshot.manifest_list):
                continue
            files.add(snapshot.manifest_list)
            try:
                manifests = snapshot.manifests(io)
            except OSError:
                continue
            for manifest in manifests:
                if not allowed(manifest.manifest_path):
                    continue
                files.add(manifest.manifest_path)
                with contextlib.suppress(OSError):
                    files |= {e.data_file.file_path for e in manifest.fetch_manifest_entry(io, discard_deleted=False)}
        for path in sorted(f for f in files if allowed(f)):
            with contextlib.suppress(OSError):
                io.delete(path)
        if not self.remote and allowed(metadata.location):
            _remove_empty_directories(Path(self.check_location(metadata.location)))

    def _is_view_metadata(self, location: str) -> bool:
        """True for a view metadata file (pyiceberg would parse one as v1 table metadata)."""
        io = load_file_io(self._catalog.properties, location)
        with io.new_input(location).open() as stream:
            raw = stream.read(64 * 1024 * 1024)
        if location.endswith(".gz") or raw[:2] == b"\x1f\x8b":
            raw = gzip.decompress(raw)
        try:
            data = json.loads(raw)
        except ValueError:
            return False  # the table parser names the problem
        return isinstance(data, dict) and ("view-uuid" in data or "current-version-id" in data)

    # ---------------------------------------------------------------- pointers of any kind (views.py uses these)
    def names(self, namespace: Identifier, kind: str) -> list[Identifier]:
        """The identifiers of one kind (TABLE_TYPE, VIEW_TYPE) in ``namespace``. Raises NoSuchNamespaceError."""
        return self._names(namespace, kind)

    def pointer(self, identifier: Identifier, kind: str) -> str | None:
        """The current metadata location of a table or view, or None when there is none."""
        return self._pointer(identifier, kind)

    def insert_pointer(self, identifier: Identifier, location: str, kind: str) -> None:
        """Add a new pointer in its own transaction. Raises AlreadyExistsError when the name is taken."""
        with _mapped(), _exists_guard(identifier), self._changing(identifier), self._write() as conn:
            self._insert_pointer(conn, identifier, location, kind)

    def swap_pointer(self, identifier: Identifier, expected: str, new: str, kind: str) -> None:
        """Compare-and-swap one pointer in its own transaction. Raises CommitConflictError on a miss."""
        with _mapped(), self._changing(identifier), self._write() as conn:
            self._swap_pointer(conn, identifier, expected, new, kind)

    def rename_pointer(self, source: Identifier, target: Identifier, kind: str) -> None:
        """Rename a table or view. Raises NotFoundError, AlreadyExistsError."""
        self._rename(source, target, kind)

    def drop_pointer(self, identifier: Identifier, kind: str) -> str:
        """Remove a pointer (never its files); returns its metadata location. Raises NotFoundError."""
        return self._drop(identifier, kind)

    def file_io(self, location: str) -> FileIO:
        """The FileIO that reads and writes ``location`` with the store's properties (e.g. S3 settings)."""
        return load_file_io(self._catalog.properties, location)

    def commit_table(
        self, identifier: Identifier, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        """Commit one table's requirements and updates (see :meth:`commit_transaction`)."""
        return self.commit_transaction([TableChange(identifier, tuple(requirements), tuple(updates))])[0]

    def commit_transaction(self, changes: Sequence[TableChange | tuple[Any, Any, Any]]) -> list[CommitTableResponse]:
        """Commit several tables atomically: every table changes, or none does.

        Each table is staged (requirements validated against its current metadata, updates
        applied with pyiceberg, a new metadata file written); then every pointer is swapped in
        one database transaction with a compare-and-swap on its row. Raises CommitConflictError
        (a failed requirement or a concurrent commit; nothing changed), NoSuchTableError,
        BadRequestError (an invalid update, a table named twice).
        """
        items = [
            c if isinstance(c, TableChange) else TableChange(tuple(c[0]), tuple(c[1]), tuple(c[2])) for c in changes
        ]
        names = [item.identifier for item in items]
        if len(set(names)) != len(names):
            raise errors.BadRequestError("a transaction names the same table more than once")
        if not items:
            raise errors.BadRequestError("a transaction needs at least one table change")
        try:
            return self._commit(items, guess=True)
        except _StaleGuess:  # another process committed since this one's last commit: stage on the database's pointer
            return self._commit(items, guess=False)

    def _commit(self, items: list[TableChange], guess: bool) -> list[CommitTableResponse]:
        staged = [self._stage(item, guess) for item in items]
        written = [s for s in staged if s.changed]
        done: list[str] = []  # the files this commit wrote: deleted again when it loses the race
        with _mapped():
            try:
                with self.files.discarded_on_lost_race(done):
                    for s in written:
                        self.files.write_table(s.metadata, s.metadata_location)
                        done.append(s.metadata_location)
                    if written and self._swaps is not None and all(s.previous_location for s in written):
                        self._swap_all(written)  # the common case (no table created): plain DBAPI, pointer_swaps.py
                    else:
                        self._swap_or_insert(written)
            except errors.CommitConflictError:
                if any(s.guessed for s in written):
                    raise _StaleGuess from None
                raise
        for s in written:  # after _changing forgot them: the next commit of these tables stages on these
            if len(self._committed) > 100_000:
                self._committed.clear()
            self._committed[s.identifier] = (
                self.pointers.stamps.read(self.pointers.stamps.slot(s.identifier)),
                s.metadata_location,
            )
        return [CommitTableResponse(metadata=s.metadata, metadata_location=s.metadata_location) for s in staged]

    def _swap_or_insert(self, written: list[_Staged]) -> None:
        """Swap (or, for a created table, insert) the pointers through SQLAlchemy in one transaction."""
        if not written:
            return
        try:
            changing = self._changing(*(s.identifier for s in written))
            with _exists_guard(written[0].identifier), changing, self._write() as conn:
                for s in written:
                    if s.previous_location is None:
                        self._insert_pointer(conn, s.identifier, s.metadata_location, TABLE_TYPE)
                    else:
                        self._swap_pointer(conn, s.identifier, s.previous_location, s.metadata_location, TABLE_TYPE)
        except (errors.CommitConflictError, errors.AlreadyExistsError) as exc:
            raise errors.CommitConflictError(str(exc)) from None

    def _swap_all(self, written: list[_Staged]) -> None:
        """Compare-and-swap the written tables' pointers in one transaction. Raises CommitConflictError."""
        swaps = [
            (namespace_keys.encode(s.identifier[:-1]), s.identifier[-1], s.previous_location, s.metadata_location)
            for s in written
        ]
        try:
            with self._changing(*(s.identifier for s in written)), self._write_lock:
                self._swaps.swap(swaps)  # type: ignore[union-attr, arg-type]
        except SwapConflict as conflict:
            identifier = written[conflict.index].identifier
            raise errors.CommitConflictError(
                f"{'.'.join(identifier)} was changed by a concurrent commit; reload and retry"
            ) from None

    def _stage(self, change: TableChange, guess: bool = False) -> _Staged:
        """The change applied to the table's current metadata. With ``guess``, "current" is the pointer this
        process's last commit of the table set, without a database read; a stale guess is caught by the swap's
        compare-and-swap (see commit_transaction), and a failed requirement or a no-op is staged again on the
        database's pointer. Raises CommitConflictError, NoSuchTableError, BadRequestError."""
        memo = self._committed.get(change.identifier) if guess else None
        # a renewed stamp: a process on this host changed the table (or a colliding one) since: do not guess
        stamps = self.pointers.stamps
        guessed = memo[1] if memo is not None and stamps.read(stamps.slot(change.identifier)) == memo[0] else None
        if guessed is None:
            return self._stage_on(change, self._pointer(change.identifier, TABLE_TYPE), guessed=False)
        try:
            staged = self._stage_on(change, guessed, guessed=True)
        except errors.CommitConflictError:
            staged = None
        if staged is None or not staged.changed:
            self._committed.pop(change.identifier, None)
            return self._stage_on(change, self._pointer(change.identifier, TABLE_TYPE), guessed=False)
        return staged

    def _stage_on(self, change: TableChange, location: str | None, guessed: bool) -> _Staged:
        identifier = change.identifier
        check_name("table", identifier[-1])
        creating = any(isinstance(r, AssertCreate) for r in change.requirements)
        current = self.read_metadata(location) if location else None
        if current is None and not creating:
            raise _missing(TABLE_TYPE, identifier)
        if creating and not self._catalog.namespace_exists(namespace_keys.encode(identifier[:-1])):
            raise errors.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(identifier[:-1])}")
        for table_update in change.updates:  # refused before pyiceberg sees them, whatever else the commit holds
            if isinstance(table_update, SetPropertiesUpdate):
                refuse_implementations(table_update.updates, "table", current.properties if current else None)
        with _mapped():
            for requirement in change.requirements:
                requirement.validate(current)
            try:
                metadata = _updated_metadata(
                    current if current is not None else self._catalog._empty_table_metadata(),
                    change.updates,
                    enforce_validation=current is None,
                    metadata_location=location,
                )
            except (iceberg_errors.CommitFailedException, iceberg_errors.ValidationError, ValueError):
                raise
            except Exception as exc:  # pyiceberg raises KeyError/StopIteration/... for inconsistent updates
                raise errors.BadRequestError(
                    f"updates for {'.'.join(identifier)} are inconsistent with its metadata: {type(exc).__name__}: {exc}"
                ) from None
        if current is not None and metadata == current:
            return _Staged(identifier, location, location, current, changed=False, guessed=guessed)  # type: ignore[arg-type]
        with _mapped():
            metadata_checks.check_commit(metadata, change.updates)
        before = current.properties if current is not None else {}
        refuse_implementations(metadata.properties, "table", before)
        self.check_location(metadata.location)
        if current is None or metadata.location != current.location:
            self.confinement.check(identifier[:-1], metadata.location, "table location")
        self.confinement.check_paths(identifier[:-1], metadata.properties, before)
        version = SqlCatalog._parse_metadata_version(location) + 1 if location else 0
        new_location = metadata_file_location(metadata.location, metadata.properties, version)
        self.check_location(new_location)  # write.metadata.path must not point the catalog's writes elsewhere
        return _Staged(identifier, location, new_location, metadata, changed=True, guessed=guessed)

    # ---------------------------------------------------------------- locations
    def check_location(self, location: str) -> str:
        """Table and namespace locations must stay inside the warehouse. Raises BadRequestError."""
        if self.remote:  # object storage: a prefix check on the normalized key, no '..' segments
            if (
                ".." in location.split("/")
                or _CONTROL.search(location)
                or not location.startswith(self.warehouse + "/")
            ):
                raise errors.BadRequestError(f"location {location!r} is outside the warehouse {self.warehouse!r}")
            return location.rstrip("/")
        raw = location.removeprefix("file://")
        if "://" in raw or _CONTROL.search(raw):
            raise errors.BadRequestError(f"location {location!r} is outside the warehouse {self.warehouse!r}")
        normalized = os.path.abspath(raw)  # '..' collapsed without touching the filesystem
        if not (normalized + "/").startswith(self.warehouse + "/"):
            raise errors.BadRequestError(f"location {location!r} is outside the warehouse {self.warehouse!r}")
        return normalized

    def new_metadata_location(self, base: str, version: int) -> str:
        """``<base>/metadata/<version>-<uuid>.metadata.json`` (views use it; tables use pyiceberg's provider)."""
        return f"{base.rstrip('/')}/metadata/{version:05d}-{uuid.uuid4()}.metadata.json"

    def default_location(self, identifier: Identifier) -> str:
        with _mapped():
            return self._catalog._get_default_warehouse_location(namespace_keys.encode(identifier[:-1]), identifier[-1])


def _remove_empty_directories(root: Path) -> None:
    """Remove ``root`` and the directories below it that a purge left empty (never a file)."""
    if not root.is_dir():
        return
    for directory, _dirs, _files in sorted(os.walk(root), key=lambda entry: -len(entry[0])):
        with contextlib.suppress(OSError):
            os.rmdir(directory)


@contextlib.contextmanager
def _exists_guard(identifier: Identifier) -> Iterator[None]:
    try:
        yield
    except IntegrityError:
        raise errors.AlreadyExistsError(f"Table or view already exists: {'.'.join(identifier)}") from None


def _type_is(kind: str) -> Any:
    if kind == VIEW_TYPE:
        return IcebergTables.iceberg_type == VIEW_TYPE
    return or_(IcebergTables.iceberg_type == TABLE_TYPE, IcebergTables.iceberg_type.is_(None))


_SWAP_STATEMENTS = {
    kind: update(IcebergTables)
    .where(
        IcebergTables.catalog_name == bindparam("catalog"),
        IcebergTables.table_namespace == bindparam("namespace"),
        IcebergTables.table_name == bindparam("name"),
        IcebergTables.metadata_location == bindparam("expected"),
        _type_is(kind),
    )
    .values(metadata_location=bindparam("new"), previous_metadata_location=bindparam("expected"))
    for kind in (TABLE_TYPE, VIEW_TYPE)
}

_RAW_POINTER = {
    TABLE_TYPE: "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? "
    "AND table_name = ? AND (iceberg_type = 'TABLE' OR iceberg_type IS NULL)",
    VIEW_TYPE: "SELECT metadata_location FROM iceberg_tables WHERE catalog_name = ? AND table_namespace = ? "
    "AND table_name = ? AND iceberg_type = 'VIEW'",
}

# Built once: constructing a SQLAlchemy statement per request costs more than running it.
_POINTER_QUERIES = {
    kind: select(IcebergTables.metadata_location).where(
        IcebergTables.catalog_name == bindparam("catalog"),
        IcebergTables.table_namespace == bindparam("namespace"),
        IcebergTables.table_name == bindparam("name"),
        _type_is(kind),
    )
    for kind in (TABLE_TYPE, VIEW_TYPE)
}


def _missing(kind: str, identifier: Identifier) -> errors.NotFoundError:
    if kind == VIEW_TYPE:
        return errors.NoSuchViewError(f"View does not exist: {'.'.join(identifier)}")
    return errors.NoSuchTableError(f"Table does not exist: {'.'.join(identifier)}")


def _updated_metadata(
    base: TableMetadata, updates: tuple[TableUpdate, ...], enforce_validation: bool, metadata_location: str | None
) -> TableMetadata:
    """pyiceberg's ``update_table_metadata`` without its final deep copy (10 ms at 50 snapshots):
    metadata models are frozen and never mutated here, so sharing unchanged parts is safe.
    Upgrades to format v3, which pyiceberg refuses, are applied by :mod:`catalog_api.store.format_v3`."""

    def apply(change: TableUpdate, metadata: TableMetadata, context: _TableMetadataUpdateContext) -> TableMetadata:
        if format_v3.is_upgrade_to_v3(change, metadata):
            return format_v3.upgrade_to_v3(change, metadata, context)
        return _apply_table_update(change, metadata, context)

    new = applied(base, updates, metadata_location, apply, start=format_v3.with_row_lineage(base))
    format_v3.check_defaults(new)
    if enforce_validation:  # built from an empty (unvalidated) base: validate the result as a whole
        return TableMetadataUtil.parse_obj(new.model_dump())
    return new


def _sqlite_pragmas(dbapi_connection: Any, _record: Any) -> None:
    # WAL: readers never block the writer; busy_timeout: writers queue instead of failing at once;
    # synchronous=NORMAL: no fsync per commit (a power loss may drop the last commits, like the
    # metadata files pyiceberg writes without fsync; an application crash loses nothing).
    cursor = dbapi_connection.cursor()
    for pragma in kept_connections.SQLITE_PRAGMAS:
        cursor.execute(f"PRAGMA {pragma}")
    cursor.close()


__all__ = ["CatalogStore", "TableChange", "check_name", "open_store"]


def open_store(project: ProjectConfig) -> CatalogStore:
    return CatalogStore(
        project.catalog_store_url, project.warehouse_uri, project.lake.name, properties=file_io_properties(project)
    )
