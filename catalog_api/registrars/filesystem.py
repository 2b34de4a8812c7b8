"""Filesystem registrar: path-based readers find the newest snapshot with no catalog at all.

Iceberg: the Hadoop-table convention inside the table's own ``metadata/`` directory, which both
DuckDB's ``iceberg_scan('<table dir>')`` and Spark's ``type=hadoop`` catalog read:
``v<N>.metadata.json`` (a hard link to, or copy of, pyiceberg's ``<NNNNN>-<uuid>.metadata.json``,
with N = NNNNN + 1 because Hadoop tables count from v1) and ``version-hint.text`` holding N.
Both are written to a temporary name and renamed, so a reader never sees a partial file.
Delta tables are self-describing (``_delta_log``), so registering one only checks the log exists.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from catalog_api.registrars.base import (
    DELTA,
    ICEBERG,
    PublishedTable,
    Registrar,
    RegistrarCapabilities,
    Registration,
    check_not_ahead,
    metadata_version,
)
from lakeview.errors import RegistrarError

VERSION_HINT = "version-hint.text"


def local_path(location: str) -> Path:
    """A table location as a local path; other schemes are not supported by this registrar yet."""
    if location.startswith("file://"):
        location = location.removeprefix("file://")
    if "://" in location:
        raise RegistrarError(
            f"filesystem: {location!r} is not a local path; only local warehouses are supported so far"
        )
    return Path(location)


class FilesystemRegistrar(Registrar):
    name = "filesystem"
    # A rename replaces the hint whatever it held (no compare-and-swap); no databases, owners or columns.
    capabilities = RegistrarCapabilities(optimistic_locking=False, namespaces=False, ownership=False, columns=False)

    def __init__(self, locate: Callable[[str, str], str | None] | None = None) -> None:
        super().__init__()
        # (namespace, view) -> table location: remembered on register, else asked of ``locate``.
        self.locations: dict[tuple[str, str], str] = {}
        self.locate = locate

    def _location(self, namespace: str, name: str) -> str | None:
        known = self.locations.get((namespace, name))
        return known if known is not None or self.locate is None else self.locate(namespace, name)

    # -- what the shared loop needs from a directory -----------------------------------------------
    @contextlib.contextmanager
    def session(self, what: str) -> Iterator[None]:
        """Filesystem failures → RegistrarError (transient)."""
        try:
            yield
        except OSError as exc:
            raise RegistrarError(f"filesystem: {what}: {exc}") from exc

    def prepare(self, table: PublishedTable) -> None:
        """Remember where the table is (``unregister`` and ``registered`` ask by name)."""
        local_path(table.location)  # refuses object storage before anything is written
        self.locations[(table.namespace, table.name)] = table.location

    def get(self, namespace: str, name: str) -> Registration | None:
        location = self._location(namespace, name)
        if location is None:
            return None
        root = local_path(location)
        if (root / "_delta_log").is_dir():
            return Registration(format=DELTA, location=location)
        hint = root / "metadata" / VERSION_HINT
        try:
            version = int(hint.read_text().strip())
        except (OSError, ValueError):
            return None
        linked = root / "metadata" / f"v{version}.metadata.json"
        source = _source_of(linked)
        return Registration(
            format=ICEBERG,
            location=location,
            metadata_location=str(linked),
            parameters={"source": str(source)} if source else {},
        )

    def create(self, table: PublishedTable) -> bool:
        if table.format == DELTA:  # found by get() once its log exists: nothing to write
            root = local_path(table.location)
            raise RegistrarError(f"filesystem: {table.qualified_name}: no _delta_log under {root}")
        self._link(table)
        return True

    def swap(self, table: PublishedTable, current: Registration) -> bool:
        self._link(table)
        return True

    def needs_move(self, table: PublishedTable, current: Registration) -> bool:
        """Compared by the pyiceberg metadata file the linked one was made from."""
        if table.format == DELTA:
            return False  # self-describing: its log is the registration
        assert table.metadata_location is not None
        source = current.parameters.get("source")
        if source == str(local_path(table.metadata_location)):
            return False
        if source:
            check_not_ahead(table, source, f"filesystem {table.qualified_name}")
        return True

    def points_at(self, current: Registration, table: PublishedTable) -> bool:
        return current.metadata_location == str(self._target(table)[0])

    def delete(self, namespace: str, name: str) -> bool:
        location = self._location(namespace, name)
        if location is None:
            return False
        metadata = local_path(location) / "metadata"
        hint = metadata / VERSION_HINT
        if not hint.exists():
            return False
        hint.unlink()
        for linked in metadata.glob("v*.metadata.json"):
            linked.unlink()
        return True

    def _target(self, table: PublishedTable) -> tuple[Path, int]:
        """``metadata/v<N>.metadata.json`` for ``table``'s metadata file, and N."""
        assert table.metadata_location is not None
        source = local_path(table.metadata_location)
        version = metadata_version(source.name)
        if version is None:
            raise RegistrarError(f"filesystem: {source.name} does not follow the NNNNN-uuid.metadata.json convention")
        hadoop_version = version + 1 if not source.name.startswith("v") else version
        return local_path(table.location) / "metadata" / f"v{hadoop_version}.metadata.json", hadoop_version

    def _link(self, table: PublishedTable) -> None:
        target, hadoop_version = self._target(table)
        if not target.exists():
            _atomic_link(local_path(table.metadata_location or ""), target)
        _atomic_write(target.parent / VERSION_HINT, str(hadoop_version))


def _source_of(linked: Path) -> Path | None:
    """The pyiceberg metadata file ``linked`` was made from (same inode, or same content)."""
    try:
        stat = linked.stat()
    except OSError:
        return None
    for candidate in linked.parent.glob("*-*.metadata.json"):
        try:
            if os.path.samestat(candidate.stat(), stat):
                return candidate
        except OSError:
            continue
    version = metadata_version(linked.name)
    if version is not None:
        for candidate in linked.parent.glob(f"{version - 1:05d}-*.metadata.json"):
            return candidate
    return None


def _atomic_link(source: Path, target: Path) -> None:
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    try:
        os.link(source, temporary)  # metadata files are immutable: a hard link is a free copy
    except OSError:
        shutil.copyfile(source, temporary)
    os.replace(temporary, target)


def _atomic_write(target: Path, text: str) -> None:
    temporary = target.with_name(f".{target.name}.{uuid.uuid4().hex}")
    temporary.write_text(text)
    os.replace(temporary, target)
