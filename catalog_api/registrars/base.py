"""The one interface every registrar implements, and the register loop they share.

A registrar publishes a view's table where a reader looks for it (Glue, a Hive Metastore, plain
paths). It only swaps a pointer: the table itself is written by the view's writer. Registering is
idempotent (registering the same metadata twice changes nothing) and never moves a pointer
backwards: if the entry already points at a newer Iceberg metadata file than ours, someone else
owns it and :class:`RegistrarConflictError` is raised instead of overwriting it.

As pyiceberg's ``MetastoreCatalog`` owns the commit path and leaves each backend its pointer swap,
:meth:`Registrar.register` owns the loop (read the entry → create it, or decide whether it must
move and swap it → re-read and decide again when a concurrent writer won) and a backend only
implements :meth:`~Registrar.get`, :meth:`~Registrar.create`, :meth:`~Registrar.swap` and
:meth:`~Registrar.delete` for its service, declaring what the service offers as
:class:`RegistrarCapabilities`.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import re
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, ClassVar

import pyarrow as pa

from lakeview.errors import RegistrarConflictError, RegistrarError
from lakeview.ops.retrying import retry_transient

log = logging.getLogger("lakeview.registrars")
MAX_ATTEMPTS = 5  # swaps lost to concurrent writers before register gives up (a transient RegistrarError)
CONFLICT_PAUSE_S = 0.05  # times the attempt: let the concurrent writer finish before re-reading

ICEBERG = "iceberg"
DELTA = "delta"

# Table parameters readers look for (Glue, HMS; Trino, Spark, Athena, pyiceberg).
TABLE_TYPE = "table_type"
METADATA_LOCATION = "metadata_location"
PREVIOUS_METADATA_LOCATION = "previous_metadata_location"
SPARK_PROVIDER = "spark.sql.sources.provider"
EXTERNAL = "EXTERNAL"
EXTERNAL_TABLE = "EXTERNAL_TABLE"
OWNER = "lakeview.view"  # marks entries Lakeview created; entries without it are never overwritten

_METADATA_FILE = re.compile(r"(?:^|/)(?:v(\d+)|(\d+)-[0-9a-fA-F-]+)(?:\.gz)?\.metadata\.json$")


@dataclass(frozen=True)
class PublishedTable:
    """Everything a registrar needs to know about one view's table at one commit."""

    namespace: str
    name: str
    format: str  # ICEBERG | DELTA
    location: str  # the table's root directory (absolute path or URI)
    schema: pa.Schema
    metadata_location: str | None = None  # Iceberg only: the current metadata file
    properties: dict[str, str] = field(default_factory=dict)  # extra parameters (e.g. the view's SQL per dialect)

    def __post_init__(self) -> None:
        if self.format not in (ICEBERG, DELTA):
            raise ValueError(f"format must be {ICEBERG!r} or {DELTA!r}, not {self.format!r}")
        if self.format == ICEBERG and not self.metadata_location:
            raise ValueError(f"{self.namespace}.{self.name}: an Iceberg table needs its metadata_location")

    @property
    def qualified_name(self) -> str:
        return f"{self.namespace}.{self.name}"

    def parameters(self) -> dict[str, str]:
        """The table parameters shared by Glue and HMS for this format."""
        params = {EXTERNAL: "TRUE", **self.properties, OWNER: self.qualified_name}
        if self.format == ICEBERG:
            params.update({TABLE_TYPE: "ICEBERG", METADATA_LOCATION: self.metadata_location or ""})
        else:
            params.update({TABLE_TYPE: "DELTA", SPARK_PROVIDER: "delta"})
        return params


@dataclass(frozen=True)
class Registration:
    """What a registrar currently holds for a view (read back from it)."""

    format: str | None
    location: str | None
    metadata_location: str | None = None
    previous_metadata_location: str | None = None
    parameters: dict[str, str] = field(default_factory=dict)
    columns: tuple[tuple[str, str], ...] = ()  # (name, Hive type) where the service lists columns
    entry: Any = field(default=None, compare=False, repr=False)  # the service's own entry, which swap() builds on


@dataclass(frozen=True)
class RegistrarCapabilities:
    """What a registrar's service offers, declared by its class; the shared loop reads it."""

    supports_delta: bool = True  # Delta tables can be published (else only Iceberg)
    supports_views: bool = False  # Iceberg views (SQL); inline views live only in the REST catalog so far
    optimistic_locking: bool = False  # the service refuses a swap made from a stale read (Glue's VersionId);
    # without it the loop re-reads after each swap and starts over when someone else moved the entry
    namespaces: bool = True  # entries sit in databases the registrar creates first
    ownership: bool = True  # entries carry OWNER: one Lakeview did not create is never overwritten
    columns: bool = True  # the entry lists the columns: a schema change moves it too


class Outcome(str, enum.Enum):
    """What :meth:`Registrar.register` did."""

    CREATED = "created"
    MOVED = "moved"
    UNCHANGED = "unchanged"


class Registrar(ABC):
    """Publishes view tables in one place readers look.

    Every registrar shares :meth:`register`, :meth:`unregister` and :meth:`registered`; a backend
    implements :meth:`get`, :meth:`create`, :meth:`swap` and :meth:`delete` (plus
    :meth:`create_namespace` and :meth:`session` where its service needs them).
    """

    name: ClassVar[str]
    capabilities: ClassVar[RegistrarCapabilities] = RegistrarCapabilities()

    def __init__(self) -> None:
        self._namespaces: set[str] = set()  # known to exist: skip the create call on every publish

    # -- the shared register loop ---------------------------------------------------------------
    def register(self, table: PublishedTable) -> Outcome:
        """Create the entry for ``table`` (and its database/namespace) or move it to ``table``'s
        current metadata. Raises RegistrarError (transient: retry) or RegistrarConflictError."""
        try:
            with self.session(table.qualified_name):
                self.prepare(table)
                outcome = self._register(table)
        except Exception:
            self._namespaces.clear()  # maybe dropped behind our back: create it again next time
            raise
        log.debug("%s: %s %s", self.name, table.qualified_name, outcome.value)
        return outcome

    def _register(self, table: PublishedTable) -> Outcome:
        attempts = iter(range(1, MAX_ATTEMPTS + 1))

        def attempt() -> Outcome:
            number = next(attempts)
            current = self.get(table.namespace, table.name)
            if current is None:
                if self.create(table):
                    return Outcome.CREATED
                raise RegistrarError(f"{self.name}: {table.qualified_name}: created concurrently ({number} attempts)")
            if not self.needs_move(table, current):
                return Outcome.UNCHANGED
            if self.swap(table, current) and (self.capabilities.optimistic_locking or self._still_ours(table)):
                return Outcome.MOVED
            log.info("%s: %s changed under us (attempt %s); re-reading", self.name, table.qualified_name, number)
            raise RegistrarError(f"{self.name}: {table.qualified_name}: lost {number} concurrent updates in a row")

        # RegistrarError is transient: the one retry policy re-reads and decides again, a few times.
        what = f"{self.name}: register {table.qualified_name}"
        return retry_transient(attempt, what=what, attempts=MAX_ATTEMPTS, first_s=CONFLICT_PAUSE_S, max_s=1.0)

    def _still_ours(self, table: PublishedTable) -> bool:
        """Without optimistic locking: whether the entry, re-read after our swap, is what we wrote."""
        after = self.get(table.namespace, table.name)
        return after is not None and self.points_at(after, table)

    def prepare(self, table: PublishedTable) -> None:
        """Before the loop: the table's database exists (once per registrar, while publishes succeed)."""
        if self.capabilities.namespaces and table.namespace not in self._namespaces:
            self.create_namespace(table.namespace)
            self._namespaces.add(table.namespace)

    def needs_move(self, table: PublishedTable, current: Registration) -> bool:
        """Whether ``current`` must move to ``table``. Raises RegistrarConflictError for an entry
        Lakeview did not create, or one pointing at newer metadata than ``table``'s."""
        where = f"{self.name} {table.qualified_name}"
        if self.capabilities.ownership and current.parameters.get(OWNER) != table.qualified_name:
            raise RegistrarConflictError(
                f"{where}: an entry not created by Lakeview exists; drop it or rename the view"
            )
        if table.format == ICEBERG:
            check_not_ahead(table, current.metadata_location, where)
            same = current.metadata_location == table.metadata_location
        else:
            same = current.format == DELTA and same_location(current.location, table.location)
        if self.capabilities.columns:
            same = same and current.columns == tuple(hive_columns(table.schema))
        return not same

    def points_at(self, current: Registration, table: PublishedTable) -> bool:
        """Whether ``current`` points at ``table``'s metadata (Delta: carries no metadata file)."""
        return current.metadata_location == table.metadata_location

    def unregister(self, namespace: str, name: str) -> bool:
        """Remove the entry (never the table's files). Returns False when there was none."""
        with self.session(f"{namespace}.{name}"):
            return self.delete(namespace, name)

    def registered(self, namespace: str, name: str) -> Registration | None:
        """The entry as the registrar holds it now, or None."""
        with self.session(f"{namespace}.{name}"):
            return self.get(namespace, name)

    def close(self) -> None:
        """Release connections (default: nothing to release)."""
        return None

    # -- what a backend implements ----------------------------------------------------------------
    @contextlib.contextmanager
    def session(self, what: str) -> Iterator[None]:
        """Around each register / unregister / read: open what the calls need, and map the
        service's failures to RegistrarError (transient) naming ``what``. Default: nothing."""
        yield

    def create_namespace(self, namespace: str) -> None:
        """Create the database ``namespace`` unless it exists (for ``capabilities.namespaces``)."""
        return None

    @abstractmethod
    def get(self, namespace: str, name: str) -> Registration | None:
        """The entry as the service holds it now (with its own ``entry``), or None."""

    @abstractmethod
    def create(self, table: PublishedTable) -> bool:
        """Create the entry for ``table``. Returns False when one appeared concurrently."""

    @abstractmethod
    def swap(self, table: PublishedTable, current: Registration) -> bool:
        """Move ``current`` to ``table``, keeping what others added to it. Returns False when the
        service refused the swap because ``current`` is stale (optimistic locking)."""

    @abstractmethod
    def delete(self, namespace: str, name: str) -> bool:
        """Remove the entry (never the table's files). Returns False when there was none."""


def metadata_version(location: str | None) -> int | None:
    """The version number in an Iceberg metadata file name (``00003-<uuid>.metadata.json`` or
    ``v3.metadata.json``), or None when the name follows neither convention."""
    if not location:
        return None
    match = _METADATA_FILE.search(location)
    if not match:
        return None
    return int(match.group(1) or match.group(2))


def check_not_ahead(table: PublishedTable, current: str | None, where: str) -> None:
    """Refuse to move a pointer backwards: ``current`` (the registered metadata file) must not be
    newer than the one being published."""
    if not current or current == table.metadata_location:
        return
    theirs, ours = metadata_version(current), metadata_version(table.metadata_location)
    if theirs is not None and ours is not None and theirs > ours:
        raise RegistrarConflictError(
            f"{where}: {table.qualified_name} points at {current} (version {theirs}), newer than Lakeview's "
            f"{table.metadata_location} (version {ours}); not overwriting it"
        )


def same_location(stored: str | None, ours: str) -> bool:
    """Whether two table locations are the same (HMS normalizes ``/path`` to ``file:/path``)."""

    def plain(location: str) -> str:
        return location.removeprefix("file://").removeprefix("file:")

    return stored is not None and plain(stored) == plain(ours)


def hive_type(dtype: pa.DataType) -> str:
    """The Hive/Glue column type for an Arrow type (the types views produce)."""
    if pa.types.is_boolean(dtype):
        return "boolean"
    if pa.types.is_int8(dtype):
        return "tinyint"
    if pa.types.is_int16(dtype):
        return "smallint"
    if pa.types.is_int32(dtype) or pa.types.is_uint8(dtype) or pa.types.is_uint16(dtype):
        return "int"
    if pa.types.is_integer(dtype):
        return "bigint"
    if pa.types.is_float32(dtype):
        return "float"
    if pa.types.is_floating(dtype):
        return "double"
    if pa.types.is_decimal(dtype):
        return f"decimal({dtype.precision},{dtype.scale})"
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype) or pa.types.is_string_view(dtype):
        return "string"
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype) or pa.types.is_fixed_size_binary(dtype):
        return "binary"
    if pa.types.is_date(dtype):
        return "date"
    if pa.types.is_timestamp(dtype):
        return "timestamp"
    if pa.types.is_time(dtype):
        return "string"  # Hive has no TIME type (pyiceberg's Glue mapping does the same)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return f"array<{hive_type(dtype.value_type)}>"
    if pa.types.is_map(dtype):
        return f"map<{hive_type(dtype.key_type)},{hive_type(dtype.item_type)}>"
    if pa.types.is_struct(dtype):
        return "struct<" + ",".join(f"{f.name}:{hive_type(f.type)}" for f in dtype) + ">"
    raise ValueError(f"no Hive type for Arrow type {dtype}")


def hive_columns(schema: pa.Schema) -> list[tuple[str, str]]:
    """``(name, hive type)`` per column."""
    return [(f.name, hive_type(f.type)) for f in schema]
