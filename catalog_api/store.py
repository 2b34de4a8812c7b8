"""The catalog store: where each table's current metadata pointer lives.

It is pyiceberg's ``SqlCatalog`` (the same schema as Iceberg's JDBC catalog) on SQLite by
default and PostgreSQL in production: it owns the commit path (check requirements →
``update_table_metadata`` → write a new metadata file → compare-and-swap the pointer).
This module only adds Lakeview's naming rules and turns pyiceberg's exceptions into
Lakeview's error hierarchy, so the HTTP layer maps one set of errors to status codes.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator
from pathlib import Path

from pyiceberg import exceptions as iceberg_errors
from pyiceberg.catalog.sql import SqlCatalog
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table import CommitTableResponse, Table
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.typedef import Identifier, Properties

from lakeview import errors

MAX_NAME = 255
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def check_name(kind: str, name: str) -> str:
    """Reject names that could escape the warehouse or confuse a path. Raises BadRequestError."""
    if not name:
        raise errors.BadRequestError(f"{kind} name is empty")
    if len(name) > MAX_NAME:
        raise errors.BadRequestError(f"{kind} name is longer than {MAX_NAME} characters")
    if name in (".", "..") or "/" in name or "\\" in name or _CONTROL.search(name):
        raise errors.BadRequestError(f"{kind} name {name!r} contains a path separator, '..' or a control character")
    return name


@contextlib.contextmanager
def _mapped() -> Iterator[None]:
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
    except iceberg_errors.ValidationError as exc:
        raise errors.BadRequestError(str(exc)) from exc


class CatalogStore:
    """Namespaces and tables of one warehouse, with atomic pointer swaps."""

    def __init__(
        self, url: str, warehouse: str | Path, name: str = "lakeview", properties: dict[str, str] | None = None
    ) -> None:
        """``properties``: extra catalog properties, e.g. pyiceberg FileIO settings (``s3.endpoint``) for an
        ``s3://`` warehouse, where the store writes metadata files."""
        self.warehouse = str(warehouse).rstrip("/")
        self.name = name
        if url.startswith("sqlite:///"):
            Path(url.removeprefix("sqlite:///")).parent.mkdir(parents=True, exist_ok=True)
        if "://" not in self.warehouse.removeprefix("file://"):
            Path(self.warehouse).mkdir(parents=True, exist_ok=True)
        self._catalog = SqlCatalog(name, uri=url, warehouse=self.warehouse, **(properties or {}))

    # namespaces
    def list_namespaces(self, parent: Identifier = ()) -> list[Identifier]:
        with _mapped():
            if parent and not self._catalog._namespace_exists(parent):
                raise errors.NoSuchNamespaceError(f"Namespace does not exist: {'.'.join(parent)}")
            return [tuple(ns) for ns in self._catalog.list_namespaces(parent)]

    def create_namespace(self, namespace: Identifier, properties: Properties) -> None:
        for part in namespace:
            check_name("namespace", part)
        if "location" in properties:
            self.check_location(properties["location"])
        with _mapped():
            self._catalog.create_namespace(namespace, properties)

    def load_namespace(self, namespace: Identifier) -> Properties:
        with _mapped():
            return self._catalog.load_namespace_properties(namespace)

    def drop_namespace(self, namespace: Identifier) -> None:
        with _mapped():
            self._catalog.drop_namespace(namespace)

    def update_namespace(self, namespace: Identifier, removals: set[str], updates: Properties) -> dict[str, list[str]]:
        overlap = removals & set(updates)
        if overlap:
            raise errors.BadRequestError(f"properties both removed and updated: {', '.join(sorted(overlap))}")
        with _mapped():
            summary = self._catalog.update_namespace_properties(namespace, removals, updates)
        return {"updated": summary.updated, "removed": summary.removed, "missing": summary.missing}

    # tables
    def list_tables(self, namespace: Identifier) -> list[Identifier]:
        with _mapped():
            return [tuple(t) for t in self._catalog.list_tables(namespace)]

    def load_table(self, identifier: Identifier) -> Table:
        with _mapped():
            return self._catalog.load_table(identifier)

    def table_exists(self, identifier: Identifier) -> bool:
        return self._catalog.table_exists(identifier)

    def create_table(
        self,
        identifier: Identifier,
        schema: Schema,
        location: str | None,
        partition_spec: PartitionSpec | None,
        sort_order: SortOrder | None,
        properties: Properties,
    ) -> Table:
        check_name("table", identifier[-1])
        if location:
            self.check_location(location)
        kwargs = {"partition_spec": partition_spec, "sort_order": sort_order}
        with _mapped():
            return self._catalog.create_table(
                identifier,
                schema=schema,
                location=location,
                properties=properties,
                **{k: v for k, v in kwargs.items() if v is not None},
            )

    def commit_table(
        self, identifier: Identifier, requirements: tuple[TableRequirement, ...], updates: tuple[TableUpdate, ...]
    ) -> CommitTableResponse:
        with _mapped():
            table = self._catalog.load_table(identifier)
            return self._catalog.commit_table(table, requirements, updates)

    def drop_table(self, identifier: Identifier) -> None:
        with _mapped():
            self._catalog.drop_table(identifier)

    def check_location(self, location: str) -> str:
        """Table and namespace locations must stay inside the warehouse."""
        normalized = str(Path(location.removeprefix("file://")).resolve()) if "://" not in location.removeprefix(
            "file://"
        ) else location
        if "://" in normalized or not (normalized + "/").startswith(self.warehouse + "/"):
            raise errors.BadRequestError(f"location {location!r} is outside the warehouse {self.warehouse!r}")
        return normalized
