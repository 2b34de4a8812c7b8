"""The one interface every registrar implements, and what they share.

A registrar publishes a view's table where a reader looks for it (Glue, a Hive Metastore, plain
paths). It only swaps a pointer: the table itself is written by the view's writer. Registering is
idempotent (registering the same metadata twice changes nothing) and never moves a pointer
backwards: if the entry already points at a newer Iceberg metadata file than ours, someone else
owns it and :class:`RegistrarConflictError` is raised instead of overwriting it.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import ClassVar

import pyarrow as pa

from lakeview.errors import RegistrarConflictError

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


class Registrar(ABC):
    """Publishes view tables in one place readers look."""

    name: ClassVar[str]

    @abstractmethod
    def register(self, table: PublishedTable) -> None:
        """Create the entry for ``table`` (and its database/namespace) or move it to ``table``'s
        current metadata. Raises RegistrarError (transient: retry) or RegistrarConflictError."""

    @abstractmethod
    def unregister(self, namespace: str, name: str) -> bool:
        """Remove the entry (never the table's files). Returns False when there was none."""

    @abstractmethod
    def registered(self, namespace: str, name: str) -> Registration | None:
        """The entry as the registrar holds it now, or None."""

    def close(self) -> None:
        """Release connections (default: nothing to release)."""


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
