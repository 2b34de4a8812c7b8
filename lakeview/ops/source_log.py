"""Spark's file-source log in a view's checkpoint: which files each batch took in.

Each entry is ``{"path", "timestamp" (file mtime, ms), "batchId"}``; Spark compacts older
batches into ``N.compact`` files, so every file in the log directory is read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class LoggedFile:
    path: Path
    modified_ms: int
    batch: int


def logged_files(checkpoint: Path, source_index: int = 0) -> list[LoggedFile]:
    log_dir = checkpoint / "sources" / str(source_index)
    if not log_dir.exists():
        return []
    found: dict[str, LoggedFile] = {}
    for entry in sorted(log_dir.iterdir()):
        if entry.name.startswith(".") or not entry.is_file():
            continue
        found.update(_entries(entry))
    return sorted(found.values(), key=lambda f: (f.batch, str(f.path)))


def batch_logged_files(checkpoint: Path, source_index: int, batch: int) -> list[LoggedFile]:
    """Files taken in by exactly batch ``batch`` of one source: read from that batch's own log file
    (``<batch>``, or ``<batch>.compact`` at a compaction, which lists every file so far), not the whole log,
    whose compactions grow with every file ever taken in; the whole log only when neither exists."""
    log_dir = checkpoint / "sources" / str(source_index)
    for entry in (log_dir / str(batch), log_dir / f"{batch}.compact"):
        if entry.is_file():
            found = [f for f in _entries(entry).values() if f.batch == batch]
            return sorted(found, key=lambda f: str(f.path))
    return [f for f in logged_files(checkpoint, source_index) if f.batch == batch]


def _entries(entry: Path) -> dict[str, LoggedFile]:
    """One log file's entries by their logged path (its first line is the log's version)."""
    found: dict[str, LoggedFile] = {}
    for line in entry.read_text().splitlines()[1:]:
        if line.strip():
            record = json.loads(line)
            path = Path(record["path"].removeprefix("file://").removeprefix("file:"))
            found[record["path"]] = LoggedFile(path, int(record.get("timestamp", 0)), int(record.get("batchId", 0)))
    return found


def files_up_to(checkpoint: Path, log_offset: int | None) -> list[Path]:
    """Files taken in by batches ``<= log_offset`` (the committed frontier)."""
    if log_offset is None:
        return []
    return [f.path for f in logged_files(checkpoint) if f.batch <= log_offset]


def batch_files(checkpoint: Path, log_offset: int) -> list[LoggedFile]:
    """Files taken in by exactly one batch."""
    return batch_logged_files(checkpoint, 0, log_offset)
