"""Iceberg views in the catalog store: metadata files in pyiceberg's ``ViewMetadata`` model,
pointers as ``iceberg_type = 'VIEW'`` rows swapped with the same compare-and-swap as tables.

pyiceberg models view metadata but has no view update logic, so the spec's view updates
(``add-view-version``, ``set-current-view-version`` …) are applied here.
"""

from __future__ import annotations

import time
import uuid
from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field, ValidationError
from pyiceberg.schema import Schema
from pyiceberg.typedef import Identifier, Properties
from pyiceberg.view.metadata import ViewHistoryEntry, ViewMetadata, ViewVersion

from catalog_api.store import metadata_checks
from catalog_api.store.catalog import VIEW_TYPE, CatalogStore, check_name
from catalog_api.store.inert_properties import refuse_implementations
from lakeview import errors


class AssignUUID(BaseModel):
    action: Literal["assign-uuid"]
    uuid: str


class UpgradeFormatVersion(BaseModel):
    action: Literal["upgrade-format-version"]
    format_version: int = Field(alias="format-version")


class AddSchema(BaseModel):
    action: Literal["add-schema"]
    schema_: Schema = Field(alias="schema")
    last_column_id: int | None = Field(None, alias="last-column-id")


class SetLocation(BaseModel):
    action: Literal["set-location"]
    location: str


class SetProperties(BaseModel):
    action: Literal["set-properties"]
    updates: dict[str, str]


class RemoveProperties(BaseModel):
    action: Literal["remove-properties"]
    removals: list[str]


class AddViewVersion(BaseModel):
    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersion(BaseModel):
    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignUUID
    | UpgradeFormatVersion
    | AddSchema
    | SetLocation
    | SetProperties
    | RemoveProperties
    | AddViewVersion
    | SetCurrentViewVersion,
    Field(discriminator="action"),
]


class AssertViewUUID(BaseModel):
    type: Literal["assert-view-uuid"]
    uuid: str


ViewRequirement = Annotated[AssertViewUUID, Field(discriminator="type")]


class CommitViewRequest(BaseModel):
    identifier: dict[str, Any] | None = None
    requirements: list[ViewRequirement] = Field(default_factory=list)
    updates: list[ViewUpdate] = Field(default_factory=list)


class ViewCatalog:
    """Create, load, commit, rename and drop views of one :class:`CatalogStore`."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store

    def list_views(self, namespace: Identifier) -> list[Identifier]:
        return self.store.names(namespace, VIEW_TYPE)

    def view_exists(self, identifier: Identifier) -> bool:
        return self.store.pointer(identifier, VIEW_TYPE) is not None

    def read(self, location: str) -> ViewMetadata:
        metadata = self.store.cache.get(location)
        if metadata is None:
            io = self.store.file_io(location)
            with io.new_input(location).open() as stream:
                metadata = ViewMetadata.model_validate_json(stream.read())
            self.store.cache.put(location, metadata)
        return metadata

    def load_view(self, identifier: Identifier) -> tuple[str, ViewMetadata]:
        """Current metadata location and metadata. Raises NoSuchViewError."""
        location = self.store.pointer(identifier, VIEW_TYPE)
        if location is None:
            raise errors.NoSuchViewError(f"View does not exist: {'.'.join(identifier)}")
        return location, self.read(location)

    def create_view(
        self, identifier: Identifier, schema: Schema, version: ViewVersion, location: str | None, properties: Properties
    ) -> tuple[str, ViewMetadata]:
        check_name("view", identifier[-1])
        if not self.store.namespace_exists(identifier[:-1]):
            raise errors.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(identifier[:-1])}")
        refuse_implementations(properties, "view")
        base = self.store.check_location(location) if location else self.store.default_location(identifier)
        base = self.store.confinement.check(identifier[:-1], base, "view location")
        version = version.model_copy(update={"version_id": 1, "schema_id": schema.schema_id})
        metadata = ViewMetadata(
            view_uuid=str(uuid.uuid4()),
            format_version=1,
            location=base,
            schemas=[schema],
            current_version_id=1,
            versions=[version],
            version_log=[ViewHistoryEntry(timestamp_ms=version.timestamp_ms, version_id=1)],
            properties=properties,
        )
        _checked(metadata)
        if self.store.table_exists(identifier) or self.view_exists(identifier):
            raise errors.AlreadyExistsError(f"Table or view already exists: {'.'.join(identifier)}")
        metadata_location = self._write(metadata, 0)
        with self.store.files.discarded_on_lost_race([metadata_location]):
            self.store.insert_pointer(identifier, metadata_location, VIEW_TYPE)
        return metadata_location, metadata

    def register_view(self, identifier: Identifier, metadata_location: str) -> tuple[str, ViewMetadata]:
        check_name("view", identifier[-1])
        self.store.check_location(metadata_location)
        if not self.store.namespace_exists(identifier[:-1]):
            raise errors.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(identifier[:-1])}")
        self.store.confinement.check(identifier[:-1], metadata_location, "metadata-location")
        try:
            metadata = self.read(metadata_location)
        except (OSError, ValidationError, ValueError) as exc:
            raise errors.BadRequestError(f"{metadata_location!r} is not a readable view metadata file: {exc}") from None
        self.store.confinement.check(identifier[:-1], metadata.location, "view location")
        refuse_implementations(metadata.properties, "view")
        _checked(metadata)
        if self.store.table_exists(identifier):
            raise errors.AlreadyExistsError(f"Table or view already exists: {'.'.join(identifier)}")
        self.store.insert_pointer(identifier, metadata_location, VIEW_TYPE)
        return metadata_location, metadata

    def commit_view(
        self, identifier: Identifier, requirements: list[AssertViewUUID], updates: list[Any]
    ) -> tuple[str, ViewMetadata]:
        """Apply requirements and updates; swap the pointer. Raises CommitConflictError, NoSuchViewError."""
        location, current = self.load_view(identifier)
        for requirement in requirements:
            if requirement.uuid != current.view_uuid:
                raise errors.CommitConflictError(f"view UUID is {current.view_uuid}, not {requirement.uuid}")
        metadata = apply_view_updates(current, updates)
        _checked(metadata, current)
        refuse_implementations(metadata.properties, "view", current.properties)
        self.store.check_location(metadata.location)
        if metadata.location != current.location:
            self.store.confinement.check(identifier[:-1], metadata.location, "view location")
        if metadata == current:
            return location, current
        version = int(location.rsplit("/", 1)[-1].split("-", 1)[0]) + 1 if "/metadata/" in location else 1
        new_location = self._write(metadata, version)
        with self.store.files.discarded_on_lost_race([new_location]):
            self.store.swap_pointer(identifier, location, new_location, VIEW_TYPE)
        return new_location, metadata

    def rename_view(self, source: Identifier, target: Identifier) -> None:
        self.store.rename_pointer(source, target, VIEW_TYPE)

    def drop_view(self, identifier: Identifier) -> None:
        self.store.drop_pointer(identifier, VIEW_TYPE)

    def _write(self, metadata: ViewMetadata, version: int) -> str:
        location = self.store.new_metadata_location(metadata.location, version)
        self.store.files.write(location, metadata.model_dump_json(by_alias=True, exclude_none=True).encode())
        self.store.cache.put(location, metadata)
        return location


def _checked(metadata: ViewMetadata, before: ViewMetadata | None = None) -> None:
    """metadata_checks.check_view, its ValueError as the 400 it is."""
    try:
        metadata_checks.check_view(metadata, before)
    except ValueError as exc:
        raise errors.BadRequestError(str(exc)) from None


def apply_view_updates(base: ViewMetadata, updates: list[Any]) -> ViewMetadata:
    """The spec's view updates applied in order. Raises BadRequestError for an invalid one."""
    schemas, versions = list(base.schemas), list(base.versions)
    version_log, properties = list(base.version_log), dict(base.properties)
    location, current_version_id = base.location, base.current_version_id
    last_schema_id: int | None = None
    last_version_id: int | None = None
    for u in updates:
        if isinstance(u, AssignUUID):
            if u.uuid != base.view_uuid:
                raise errors.BadRequestError("cannot change a view's UUID")
        elif isinstance(u, UpgradeFormatVersion):
            if u.format_version != 1:
                raise errors.BadRequestError(f"view format version {u.format_version} is not supported (only 1)")
        elif isinstance(u, AddSchema):
            existing = next((s for s in schemas if s.fields == u.schema_.fields), None)
            if existing is not None:
                last_schema_id = existing.schema_id
            else:
                last_schema_id = max((s.schema_id for s in schemas), default=-1) + 1
                schemas.append(u.schema_.model_copy(update={"schema_id": last_schema_id}))
        elif isinstance(u, SetLocation):
            location = u.location.rstrip("/")
        elif isinstance(u, SetProperties):
            properties.update(u.updates)
        elif isinstance(u, RemoveProperties):
            properties = {k: v for k, v in properties.items() if k not in set(u.removals)}
        elif isinstance(u, AddViewVersion):
            version = u.view_version
            schema_id = last_schema_id if version.schema_id == -1 else version.schema_id
            if schema_id is None or all(s.schema_id != schema_id for s in schemas):
                raise errors.BadRequestError(f"add-view-version refers to unknown schema {version.schema_id}")
            same = next(
                (
                    v
                    for v in versions
                    if v.representations == version.representations
                    and v.schema_id == schema_id
                    and v.default_namespace == version.default_namespace
                ),
                None,
            )
            if same is not None:
                last_version_id = same.version_id
                continue
            last_version_id = max(v.version_id for v in versions) + 1
            versions.append(version.model_copy(update={"version_id": last_version_id, "schema_id": schema_id}))
        elif isinstance(u, SetCurrentViewVersion):
            target = last_version_id if u.view_version_id == -1 else u.view_version_id
            if target is None or all(v.version_id != target for v in versions):
                raise errors.BadRequestError(f"set-current-view-version: unknown version {u.view_version_id}")
            if target != current_version_id:
                current_version_id = target
                version_log.append(ViewHistoryEntry(timestamp_ms=int(time.time() * 1000), version_id=target))
        else:  # the request model only admits the types above
            raise errors.BadRequestError(f"unknown view update {u!r}")
    updated = base.model_copy(
        update={
            "schemas": schemas,
            "versions": versions,
            "version_log": version_log,
            "properties": properties,
            "location": location,
            "current_version_id": current_version_id,
        }
    )
    return ViewMetadata.model_validate(updated.model_dump(by_alias=True))
