"""Server-side scan planning: which data files (and their delete files) a scan of a snapshot reads.

Planning is pyiceberg's (partition, metrics and manifest evaluators, the delete-file index); this
module splits a snapshot's data manifests into plan tasks and renders file scan tasks in the REST
shape. Plan ids and plan-task tokens are stateless: they encode the snapshot, the filter and the
manifests' positions in the snapshot's manifest list, so any catalog process (any worker) answers
them, and a forged token can only name manifests of a snapshot of the table it is sent for.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import decimal
import json
import uuid
from dataclasses import dataclass
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pyiceberg.catalog.rest.scan_planning import PlanTableScanRequest
from pyiceberg.exceptions import ResolveError
from pyiceberg.expressions import (
    AlwaysTrue,
    BooleanExpression,
    SerializableBooleanExpression,
)
from pyiceberg.manifest import DataFile, DataFileContent, ManifestContent, ManifestFile
from pyiceberg.table import FileScanTask, ManifestGroupPlanner, Table

from lakeview import errors

_FILTER = TypeAdapter(SerializableBooleanExpression)
_CONTENT = {
    DataFileContent.DATA: "data",
    DataFileContent.POSITION_DELETES: "position-deletes",
    DataFileContent.EQUALITY_DELETES: "equality-deletes",
}


@dataclass(frozen=True)
class ScanSpec:
    """What a plan id and its plan tasks encode: a snapshot, a filter and case sensitivity."""

    snapshot_id: int | None
    filter: Any  # the filter's JSON as the client sent it (None: all rows)
    case_sensitive: bool

    def expression(self) -> BooleanExpression:
        if self.filter is None:
            return AlwaysTrue()
        try:
            return _FILTER.validate_python(self.filter)
        except ValidationError as exc:
            raise errors.BadRequestError(f"invalid filter: {exc.errors()[0]['msg']}") from None

    def encode(self, manifests: list[int] | None = None) -> str:
        body = {"s": self.snapshot_id, "f": self.filter, "c": self.case_sensitive}
        if manifests is not None:
            body["m"] = manifests
        return base64.urlsafe_b64encode(json.dumps(body, separators=(",", ":")).encode()).decode().rstrip("=")


def spec_of(request: PlanTableScanRequest, raw: dict[str, Any]) -> ScanSpec:
    """The scan a plan request asks for. Raises UnsupportedOperationError for incremental scans."""
    if request.start_snapshot_id is not None or request.end_snapshot_id is not None:
        raise errors.UnsupportedOperationError(
            "incremental scan planning (start-snapshot-id / end-snapshot-id) is not supported; plan one snapshot"
        )
    return ScanSpec(request.snapshot_id, raw.get("filter"), request.case_sensitive)


def decode(token: str, kind: type[errors.NotFoundError]) -> tuple[ScanSpec, list[int] | None]:
    """A plan id or plan-task token back to its scan. Raises ``kind`` (404) for anything else."""
    try:
        body = json.loads(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)))
        spec = ScanSpec(body["s"], body["f"], bool(body["c"]))
        manifests = body.get("m")
        if manifests is not None and not all(isinstance(i, int) for i in manifests):
            raise ValueError("manifest positions")
        if spec.snapshot_id is not None and not isinstance(spec.snapshot_id, int):
            raise ValueError("snapshot id")
        return spec, manifests
    except (ValueError, KeyError, TypeError, binascii.Error):
        raise kind(f"{token[:40]!r} is not a plan this catalog issued") from None


class ScanPlanner:
    """Plans scans of one table's metadata, ``manifests_per_task`` data manifests per plan task."""

    def __init__(self, table: Table, manifests_per_task: int) -> None:
        self.table = table
        self.manifests_per_task = manifests_per_task

    def plan(self, spec: ScanSpec) -> dict[str, Any]:
        """A completed planning result: the tasks inline for a small scan, else one plan task per group."""
        data, deletes = self._manifests(spec)
        if len(data) <= self.manifests_per_task:
            return {"status": "completed", **self._scan_tasks(spec, data, deletes)}
        positions = [p for p, _ in data]
        size = self.manifests_per_task
        tokens = [spec.encode(positions[i : i + size]) for i in range(0, len(positions), size)]
        return {"status": "completed", "plan-tasks": tokens}

    def tasks(self, spec: ScanSpec, positions: list[int]) -> dict[str, Any]:
        """The file scan tasks of one plan task. Raises NoSuchPlanTaskError for positions not in the snapshot."""
        data, deletes = self._manifests(spec)
        by_position = dict(data)
        if not positions or any(p not in by_position for p in positions):
            raise errors.NoSuchPlanTaskError(
                "the plan task names manifests that are not data manifests of the snapshot"
            )
        return self._scan_tasks(spec, [(p, by_position[p]) for p in positions], deletes)

    def _manifests(self, spec: ScanSpec) -> tuple[list[tuple[int, ManifestFile]], list[ManifestFile]]:
        metadata = self.table.metadata
        if spec.snapshot_id is not None:
            snapshot = metadata.snapshot_by_id(spec.snapshot_id)
            if snapshot is None:
                name = ".".join(self.table.name())
                raise errors.BadRequestError(f"snapshot {spec.snapshot_id} does not exist in {name}")
        else:
            snapshot = metadata.current_snapshot()
        if snapshot is None:
            return [], []
        manifests = snapshot.manifests(self.table.io)
        data = [(i, m) for i, m in enumerate(manifests) if m.content == ManifestContent.DATA]
        deletes = [m for m in manifests if m.content == ManifestContent.DELETES]
        return data, deletes

    def _scan_tasks(
        self, spec: ScanSpec, data: list[tuple[int, ManifestFile]], deletes: list[ManifestFile]
    ) -> dict[str, Any]:
        if not data:
            return {"file-scan-tasks": []}
        planner = ManifestGroupPlanner(self.table.metadata, self.table.io, spec.expression(), spec.case_sensitive)
        try:
            tasks: list[FileScanTask] = list(planner.plan_files([m for _, m in data] + deletes))
        except (ResolveError, ValueError) as exc:  # a filter naming an unknown column, a wrong literal type
            raise errors.BadRequestError(f"cannot plan this scan: {exc}") from None
        delete_files: list[dict[str, Any]] = []
        index: dict[str, int] = {}
        rendered = []
        for task in tasks:
            references = []
            for delete in sorted(task.delete_files, key=lambda f: f.file_path):
                if delete.file_path not in index:
                    index[delete.file_path] = len(delete_files)
                    delete_files.append(content_file(delete))
                references.append(index[delete.file_path])
            item: dict[str, Any] = {"data-file": content_file(task.file)}
            if references:
                item["delete-file-references"] = references
            rendered.append(item)
        result: dict[str, Any] = {"file-scan-tasks": rendered}
        if delete_files:
            result["delete-files"] = delete_files
        return result


def content_file(file: DataFile) -> dict[str, Any]:
    """A data or delete file in the REST spec's ContentFile shape (bounds omitted: optional)."""
    body: dict[str, Any] = {
        "spec-id": file.spec_id,
        "partition": [_json_value(v) for v in file.partition],
        "content": _CONTENT[file.content],
        "file-path": file.file_path,
        "file-format": file.file_format.value.lower(),
        "file-size-in-bytes": file.file_size_in_bytes,
        "record-count": file.record_count,
    }
    if file.split_offsets:
        body["split-offsets"] = list(file.split_offsets)
    if file.sort_order_id is not None:
        body["sort-order-id"] = file.sort_order_id
    if file.content == DataFileContent.EQUALITY_DELETES and file.equality_ids:
        body["equality-ids"] = list(file.equality_ids)
    if file.content == DataFileContent.DATA:
        for key, values in (
            ("column-sizes", file.column_sizes),
            ("value-counts", file.value_counts),
            ("null-value-counts", file.null_value_counts),
            ("nan-value-counts", file.nan_value_counts),
        ):
            if values:
                body[key] = {"keys": list(values), "values": list(values.values())}
    return body


def _json_value(value: Any) -> Any:
    """A partition value as JSON (Iceberg's single-value serialization for the common types)."""
    if isinstance(value, bytes):
        return value.hex()
    if isinstance(value, decimal.Decimal | uuid.UUID):
        return str(value)
    if isinstance(value, datetime.date | datetime.time | datetime.datetime):
        return value.isoformat()
    return value
