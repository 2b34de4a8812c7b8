"""Table health, format-neutral parts: the policy a maintenance pass follows and what it did.

Each format implements the pass in its own module (``iceberg_maintenance``, ``delta_maintenance``):
expire snapshots past retention and delete the files only they referenced, compact small data
files into one new snapshot when there are enough of them, and remove orphan files (under the
table location, referenced by no live snapshot, older than a safety age).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow.fs as pafs

from lakeview.ops.retrying import retry_transient

log = logging.getLogger("lakeview.writers.maintenance")

MAINTENANCE = "lakeview.maintenance"  # commit-info / summary key marking Lakeview's own maintenance commits
Progress = Callable[[str], None]


@dataclass(frozen=True)
class MaintenancePolicy:
    """Retention and thresholds for one table (built from a view's config)."""

    keep_snapshots: int | None = 100
    max_age_ms: int | None = None
    small_file_bytes: int = 8 * 1024 * 1024
    compact_min_files: int = 10
    delete_files_max: int = 20  # Iceberg merge-on-read: fold deletes into the data files at this many delete files
    orphan_min_age_ms: int = 3_600_000

    def expired(self, snapshots: list[tuple[int, int]], now_ms: int | None = None) -> set[int]:
        """Ids of the snapshots to expire from ``(id, timestamp_ms)`` pairs, oldest first.

        Kept: the newest ``keep_snapshots`` OR younger than ``max_age_ms`` (and always the newest).
        Neither limit set: nothing expires.
        """
        if self.keep_snapshots is None and self.max_age_ms is None:
            return set()
        now_ms = int(time.time() * 1000) if now_ms is None else now_ms
        newest_first = list(reversed(snapshots))
        expired = set()
        for index, (snapshot_id, timestamp_ms) in enumerate(newest_first):
            if index == 0:
                continue
            within_count = self.keep_snapshots is not None and index < self.keep_snapshots
            within_age = self.max_age_ms is not None and now_ms - timestamp_ms < self.max_age_ms
            if not (within_count or within_age):
                expired.add(snapshot_id)
        return expired


@dataclass
class MaintenanceReport:
    """What one pass did."""

    snapshots_expired: int = 0
    files_compacted: int = 0
    files_written: int = 0
    delete_files_folded: int = 0
    files_deleted: int = 0
    orphans_deleted: int = 0
    attempts: int = 1
    notes: list[str] = field(default_factory=list)

    def describe(self) -> str:
        parts = [
            f"{self.snapshots_expired} snapshot(s) expired",
            f"{self.files_compacted} file(s) compacted into {self.files_written}",
            f"{self.delete_files_folded} delete file(s) folded in",
            f"{self.files_deleted} expired file(s) deleted",
            f"{self.orphans_deleted} orphan(s) deleted",
        ]
        return ", ".join(parts) + (f" ({'; '.join(self.notes)})" if self.notes else "")


def filesystem_for(location: str, s3: dict[str, str] | None) -> tuple[pafs.FileSystem, str]:
    """A pyarrow filesystem and the path inside it for a local or ``s3://`` location.

    ``s3``: pyiceberg-style properties (``s3.endpoint``, ``s3.access-key-id`` ...).
    """
    location = location.removeprefix("file://")
    if not location.startswith("s3://"):
        return pafs.LocalFileSystem(), location
    s3 = s3 or {}
    endpoint = s3.get("s3.endpoint")
    fs = pafs.S3FileSystem(
        access_key=s3.get("s3.access-key-id"),
        secret_key=s3.get("s3.secret-access-key"),
        session_token=s3.get("s3.session-token"),
        region=s3.get("s3.region", "us-east-1"),
        endpoint_override=endpoint.split("://", 1)[-1] if endpoint else None,
        scheme="http" if endpoint and endpoint.startswith("http://") else "https",
        force_virtual_addressing=s3.get("s3.force-virtual-addressing") == "true",
    )
    return fs, location.removeprefix("s3://")


def list_files(fs: pafs.FileSystem, root: str) -> list[pafs.FileInfo]:
    """Every file under ``root`` (recursive); empty when it does not exist."""
    selector = pafs.FileSelector(root.rstrip("/"), recursive=True, allow_not_found=True)
    return [info for info in fs.get_file_info(selector) if info.type == pafs.FileType.File]


def mtime_ms(info: pafs.FileInfo) -> int:
    return int(info.mtime.timestamp() * 1000) if info.mtime is not None else 0


PASS_ATTEMPTS = 5  # lost commit races before a maintenance step gives up until the next pass


def retrying_pass(
    report: MaintenanceReport, step: Callable[[], None], lost_race: tuple[type[BaseException], ...]
) -> None:
    """Run one maintenance step, redoing it on the new table state when its commit loses a race
    (``lost_race``: the format's conflict errors); after PASS_ATTEMPTS the report says so and
    the next pass retries. Other errors propagate."""

    def note(exc: BaseException, attempt: int) -> None:
        report.attempts += 1
        log.info("maintenance lost a commit race (attempt %s): %s; redoing on the new state", attempt, exc)

    try:
        retry_transient(
            step, what="maintenance", attempts=PASS_ATTEMPTS, transient=lost_race, max_s=2.0, before_retry=note
        )
    except lost_race:
        report.attempts += 1
        report.notes.append(f"gave up after {PASS_ATTEMPTS} lost commit races; next pass retries")
