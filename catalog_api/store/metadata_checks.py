"""Client mistakes pyiceberg's metadata builder lets through, refused before any metadata file is written.

Each of these was accepted (200) and then broke the table: a partition spec or sort order naming a
column the schema lacks, or a transform the column's type cannot take, made every later commit fail;
``write.metadata.previous-versions-max = abc`` made every later commit a 400 with no way to fix it
(the fixing commit fails too); a schema with two fields of one id, or a v3 default of the wrong type,
is metadata other clients cannot read; so is a snapshot naming a schema the table does not have, or a view
version naming a schema the view does not have or holding no representation (no SQL at all). Each check
raises ValueError naming the problem; the store maps it to 400.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from pyiceberg.expressions.literals import AboveMax, BelowMin, literal
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import (
    AddPartitionSpecUpdate,
    AddSchemaUpdate,
    AddSnapshotUpdate,
    AddSortOrderUpdate,
    SetPropertiesUpdate,
    TableUpdate,
)
from pyiceberg.types import (
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    NestedField,
    StringType,
    StructType,
    TimestampType,
    TimestamptzType,
    TimeType,
    UUIDType,
)
from pyiceberg.view.metadata import ViewMetadata

INTEGER_PROPERTIES = ("write.metadata.previous-versions-max",)  # read by the catalog on every commit
# Types whose JSON single-value form pyiceberg's literals convert; defaults of other types are left alone.
_CHECKED_DEFAULT_TYPES = (
    BooleanType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    FloatType,
    DoubleType,
    DecimalType,
    DateType,
    TimeType,
    TimestampType,
    TimestamptzType,
    StringType,
    UUIDType,
)


def check_new_table(metadata: TableMetadata) -> None:
    """Refuse a new table's metadata that a client mistake made unusable (see the module docstring)."""
    check_schema(metadata.schema())
    check_spec(metadata.spec(), metadata.schema())
    check_sort_order(metadata.sort_order(), metadata.schema())
    check_properties(metadata.properties)


def check_commit(metadata: TableMetadata, updates: Iterable[TableUpdate]) -> None:
    """Refuse what a commit adds that a client mistake made unusable: schemas, partition specs and sort orders
    it adds, table properties it sets. What an older table already holds is left as it is."""
    current = metadata.schema()
    for update in updates:
        if isinstance(update, AddSchemaUpdate):
            check_schema(update.schema_)
        elif isinstance(update, AddPartitionSpecUpdate):
            check_spec(update.spec, current)
        elif isinstance(update, AddSortOrderUpdate):
            check_sort_order(update.sort_order, current)
        elif isinstance(update, SetPropertiesUpdate):
            check_properties(update.updates)
        elif isinstance(update, AddSnapshotUpdate):
            check_snapshot_schema(update.snapshot.snapshot_id, update.snapshot.schema_id, metadata.schemas)


def check_snapshot_schema(snapshot_id: int, schema_id: int | None, schemas: Iterable[Schema]) -> None:
    """A snapshot's schema-id (optional) names one of the table's schemas, as they are after the commit."""
    known = sorted(schema.schema_id for schema in schemas)
    if schema_id is not None and schema_id not in known:
        raise ValueError(f"add-snapshot {snapshot_id}: schema-id {schema_id} is not one of the table's schemas {known}")


def check_view(metadata: ViewMetadata, before: ViewMetadata | None = None) -> None:
    """Every view version (those not already in ``before``) names one of the view's schemas and holds at least
    one representation; the current version exists."""
    known = sorted(schema.schema_id for schema in metadata.schemas)
    old = {version.version_id for version in before.versions} if before is not None else set()
    for version in metadata.versions:
        if version.version_id in old:
            continue
        if version.schema_id not in known:
            raise ValueError(
                f"view version {version.version_id}: schema-id {version.schema_id} is not one of the view's "
                f"schemas {known}"
            )
        if not version.representations:
            raise ValueError(f"view version {version.version_id} has no representations (a view needs its SQL)")
    if all(version.version_id != metadata.current_version_id for version in metadata.versions):
        raise ValueError(f"current-version-id {metadata.current_version_id} is not one of the view's versions")


def check_schema(schema: Schema) -> None:
    """Field ids unique across the whole schema; v3 defaults of the field's type."""
    seen: dict[int, str] = {}
    for path, field in _fields(schema.fields, ()):
        if field.field_id in seen:
            raise ValueError(f"schema field id {field.field_id} is used twice ({seen[field.field_id]!r} and {path!r})")
        seen[field.field_id] = path
        for kind in ("initial-default", "write-default"):
            value = field.initial_default if kind == "initial-default" else field.write_default
            if value is not None:
                _check_default(path, kind, value, field)


def check_spec(spec: PartitionSpec, schema: Schema) -> None:
    """Every partition field's source column exists and its transform can take the column's type."""
    for field in spec.fields:
        source = _source(schema, field.source_id, f"partition field {field.name!r}")
        if not field.transform.can_transform(source.field_type):
            raise ValueError(
                f"partition field {field.name!r}: transform {field.transform} cannot apply to column "
                f"{source.name!r} of type {source.field_type}"
            )


def check_sort_order(order: SortOrder, schema: Schema) -> None:
    """Every sort field's source column exists and its transform can take the column's type."""
    for field in order.fields:
        source = _source(schema, field.source_id, "sort field")
        if not field.transform.can_transform(source.field_type):
            raise ValueError(
                f"sort field on {source.name!r}: transform {field.transform} cannot apply to type {source.field_type}"
            )


def check_properties(properties: dict[str, str]) -> None:
    for key in INTEGER_PROPERTIES:
        if key in properties:
            try:
                value = int(properties[key])
            except ValueError:
                raise ValueError(f"table property {key} must be a positive integer, not {properties[key]!r}") from None
            if value < 1:
                raise ValueError(f"table property {key} must be a positive integer, not {value}")


def _source(schema: Schema, field_id: int, what: str) -> NestedField:
    try:
        return schema.find_field(field_id)
    except ValueError:
        raise ValueError(f"{what} refers to column id {field_id}, which the current schema does not have") from None


def _check_default(path: str, kind: str, value: Any, field: NestedField) -> None:
    if not isinstance(field.field_type, _CHECKED_DEFAULT_TYPES):
        return
    try:
        converted = literal(value).to(field.field_type)
    except (TypeError, ValueError, ArithmeticError):
        converted = None
    if converted is None or isinstance(converted, AboveMax | BelowMin):
        raise ValueError(f"column {path!r}: {kind} {value!r} is not a value of type {field.field_type}")


def _fields(fields: Iterable[NestedField], parents: tuple[str, ...]) -> Iterator[tuple[str, NestedField]]:
    for field in fields:
        path = (*parents, field.name)
        yield ".".join(path), field
        inner = field.field_type
        if isinstance(inner, StructType):
            yield from _fields(inner.fields, path)
        elif isinstance(inner, ListType):
            yield from _fields([inner.element_field], path)
        elif isinstance(inner, MapType):
            yield from _fields([inner.key_field, inner.value_field], path)
