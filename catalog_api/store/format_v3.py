"""Format version 3 on the server: upgrading to v3, row lineage's ``next-row-id``, and writing v3 metadata.

pyiceberg 0.12 models v3 metadata (``TableMetadataV3``) but refuses to serialize it
(``model_dump_json`` raises ``NotImplementedError``) and refuses ``upgrade-format-version`` to 3
(its supported version is 2). The catalog only stores metadata that pyiceberg has validated, so
it serializes v3 with the base model's serializer and applies the upgrade itself.
"""

from __future__ import annotations

from typing import Any

from pyiceberg.schema import Schema
from pyiceberg.table.metadata import TableMetadata, TableMetadataV3
from pyiceberg.table.update import (
    UpgradeFormatVersionUpdate,
    _TableMetadataUpdateContext,
)
from pyiceberg.typedef import IcebergBaseModel
from pyiceberg.types import NestedField, StructType

FORMAT_VERSION_MAX = 3
INITIAL_ROW_ID = 0


def metadata_json(metadata: TableMetadata, exclude: set[str] | None = None) -> bytes:
    """The metadata file's JSON for any format version (v3 through the base model's serializer)."""
    if isinstance(metadata, TableMetadataV3):
        metadata = with_row_lineage(metadata)
        return IcebergBaseModel.model_dump_json(metadata, exclude=exclude).encode()
    return metadata.model_dump_json(exclude=exclude).encode()


def with_row_lineage(metadata: TableMetadata) -> TableMetadata:
    """v3 metadata always carries ``next-row-id`` (the spec requires it; 0 for a new or upgraded table)."""
    if metadata.format_version >= 3 and getattr(metadata, "next_row_id", None) is None:
        return metadata.model_copy(update={"next_row_id": INITIAL_ROW_ID})
    return metadata


def is_upgrade_to_v3(update: Any, base: TableMetadata) -> bool:
    """True for an ``upgrade-format-version`` to 3 that pyiceberg's own handler would refuse."""
    return isinstance(update, UpgradeFormatVersionUpdate) and update.format_version == 3 and base.format_version < 3


def upgrade_to_v3(
    update: UpgradeFormatVersionUpdate, base: TableMetadata, context: _TableMetadataUpdateContext
) -> TableMetadata:
    """Apply ``upgrade-format-version`` 3 (v1/v2 → v3): fields carry over, ``next-row-id`` starts at 0."""
    context.add_update(update)
    data = dict(base)
    data["format_version"] = 3
    data.setdefault("last_sequence_number", 0)
    data["next_row_id"] = INITIAL_ROW_ID
    return TableMetadataV3.model_construct(**data)


def check_defaults(metadata: TableMetadata) -> None:
    """Raise ValueError when a v1/v2 table's schema has default values (Iceberg allows them from v3 on)."""
    if metadata.format_version >= 3:
        return
    for schema in metadata.schemas:
        for field in _all_fields(schema.fields):
            if field.initial_default is not None or field.write_default is not None:
                raise ValueError(
                    f"column {field.name!r} has an initial-default or write-default, which needs format-version 3 "
                    f"(this table is v{metadata.format_version}; upgrade it or create it with format-version 3)"
                )


def check_schema_defaults(schema: Schema, format_version: int) -> None:
    """Raise ValueError when a schema for a v1/v2 table has default values."""
    if format_version >= 3:
        return
    for field in _all_fields(schema.fields):
        if field.initial_default is not None or field.write_default is not None:
            raise ValueError(
                f"column {field.name!r} has an initial-default or write-default, which needs format-version 3 "
                f"(set the table property format-version = 3)"
            )


def carry_defaults(source: Schema, fresh: Schema) -> Schema:
    """``fresh`` (pyiceberg's copy with new field ids, which drops default values) with ``source``'s
    initial and write defaults put back; both schemas have the same shape, field for field."""
    if not any(f.initial_default is not None or f.write_default is not None for f in _all_fields(source.fields)):
        return fresh
    fields = _with_defaults(source.fields, fresh.fields)
    return Schema(*fields, schema_id=fresh.schema_id, identifier_field_ids=fresh.identifier_field_ids)


def _with_defaults(source: Any, fresh: Any) -> list[NestedField]:
    result = []
    for old, new in zip(source, fresh, strict=True):
        field_type = new.field_type
        if field_type.is_struct:
            field_type = StructType(*_with_defaults(old.field_type.fields, field_type.fields))
        result.append(
            NestedField(
                field_id=new.field_id,
                name=new.name,
                field_type=field_type,
                required=new.required,
                doc=new.doc,
                initial_default=old.initial_default,
                write_default=old.write_default,
            )
        )
    return result


def _all_fields(fields: Any) -> Any:
    for field in fields:
        yield field
        inner = field.field_type
        if inner.is_struct:
            yield from _all_fields(inner.fields)


def check_format_version(version: int) -> None:
    """Raise ValueError for a format version this catalog cannot write (the store maps it to 400)."""
    if version < 1 or version > FORMAT_VERSION_MAX:
        raise ValueError(f"format-version {version} is not supported; use 1, 2 or {FORMAT_VERSION_MAX}")
