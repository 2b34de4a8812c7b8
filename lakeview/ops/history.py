"""The console's history: what each view's freshness and each source's backlog were over time.

A small SQLite file next to the warehouse's runtime state (``<warehouse>/_lakeview/history.db``;
for an s3:// warehouse the local ``.lakeview/`` state directory), written by the process that
runs the catalog (:mod:`lakeview.stack.history_sampler`) and read by the console's routes. Three
tables: ``view_samples`` (lag and state at a time), ``commits`` (one row per Lakeview epoch, kept
even after the snapshot expires) and ``source_samples`` (pending files and bytes, quarantined
rows), plus ``quarantine`` (the latest reasons and sample rows per source). Rows older than the
``[console] history_retention`` are deleted on every write batch, so the file stays bounded.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HISTORY_FILE = "history.db"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS view_samples (
    view TEXT NOT NULL, at_ms INTEGER NOT NULL, lag_ms INTEGER, target_lag_ms INTEGER,
    state TEXT NOT NULL, reason TEXT, PRIMARY KEY (view, at_ms));
CREATE TABLE IF NOT EXISTS commits (
    view TEXT NOT NULL, epoch INTEGER NOT NULL, committed_at_ms INTEGER NOT NULL,
    rows_in INTEGER NOT NULL, rows_out INTEGER NOT NULL, PRIMARY KEY (view, epoch));
CREATE TABLE IF NOT EXISTS source_samples (
    source TEXT NOT NULL, at_ms INTEGER NOT NULL, pending_files INTEGER NOT NULL,
    pending_bytes INTEGER NOT NULL, quarantined INTEGER NOT NULL, PRIMARY KEY (source, at_ms));
CREATE TABLE IF NOT EXISTS quarantine (
    source TEXT PRIMARY KEY, at_ms INTEGER NOT NULL, reasons TEXT NOT NULL, sample TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS commits_by_time ON commits (view, committed_at_ms);
"""


def history_path(warehouse_path: Path) -> Path:
    """Where a project's console history lives (``warehouse_path``: ``ProjectConfig.warehouse_path``)."""
    return warehouse_path / "_lakeview" / HISTORY_FILE


def console_state(status: dict[str, Any]) -> str:
    """What the console colours a view by: failed, stopped, late (lag above its target),
    degraded (another reason), fresh, or pending (no commit and no reason yet)."""
    reason = status.get("degraded_reason")
    if str(status.get("state", "")).upper() == "FAILED" or status.get("error") or reason in ("SOURCE_ERROR", "FAILED"):
        return "failed"
    if reason == "STOPPED":
        return "stopped"
    lag, target = status.get("freshness_lag_ms"), status.get("target_lag_ms")
    if lag is not None and target is not None and lag > target:
        return "late"
    if reason:
        return "degraded"
    return "fresh" if status.get("state") == "committed" else "pending"


@dataclass(frozen=True)
class ViewSample:
    view: str
    at_ms: int
    lag_ms: int | None
    target_lag_ms: int | None
    state: str
    reason: str | None = None


@dataclass(frozen=True)
class SourceSample:
    source: str
    at_ms: int
    pending_files: int
    pending_bytes: int
    quarantined: int


class ConsoleHistory:
    """Reads and writes the history file; safe from several threads (one connection per call)."""

    def __init__(self, path: Path, retention_ms: int) -> None:
        self.path = path
        self.retention_ms = retention_ms

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        con = sqlite3.connect(self.path, timeout=10)
        try:
            con.execute("PRAGMA journal_mode=WAL")  # the console reads while the sampler writes
            con.executescript(_SCHEMA)
            with con:
                yield con
        finally:
            con.close()

    def record(
        self,
        now_ms: int,
        views: Iterable[ViewSample] = (),
        commits: Iterable[tuple[str, int, int, int, int]] = (),
        sources: Iterable[SourceSample] = (),
        quarantine: dict[str, tuple[dict[str, int], list[dict[str, Any]]]] | None = None,
    ) -> None:
        """Add one round of samples (``commits``: view, epoch, committed_at_ms, rows_in, rows_out;
        an epoch already recorded is kept as it was) and drop what is past retention."""
        with self._connect() as con:
            con.executemany(
                "INSERT OR REPLACE INTO view_samples VALUES (?, ?, ?, ?, ?, ?)",
                [(v.view, v.at_ms, v.lag_ms, v.target_lag_ms, v.state, v.reason) for v in views],
            )
            con.executemany("INSERT OR IGNORE INTO commits VALUES (?, ?, ?, ?, ?)", list(commits))
            con.executemany(
                "INSERT OR REPLACE INTO source_samples VALUES (?, ?, ?, ?, ?)",
                [(s.source, s.at_ms, s.pending_files, s.pending_bytes, s.quarantined) for s in sources],
            )
            for source, (reasons, sample) in (quarantine or {}).items():
                con.execute(
                    "INSERT OR REPLACE INTO quarantine VALUES (?, ?, ?, ?)",
                    (source, now_ms, json.dumps(reasons), json.dumps(sample, default=str)),
                )
            cutoff = now_ms - self.retention_ms
            con.execute("DELETE FROM view_samples WHERE at_ms < ?", (cutoff,))
            con.execute("DELETE FROM commits WHERE committed_at_ms < ?", (cutoff,))
            con.execute("DELETE FROM source_samples WHERE at_ms < ?", (cutoff,))

    def view_samples(self, view: str, since_ms: int) -> list[ViewSample]:
        """The view's samples from ``since_ms`` on, oldest first."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT view, at_ms, lag_ms, target_lag_ms, state, reason FROM view_samples "
                "WHERE view = ? AND at_ms >= ? ORDER BY at_ms",
                (view, since_ms),
            ).fetchall()
        return [ViewSample(*row) for row in rows]

    def commit_rates(self, view: str, since_ms: int, bucket_ms: int = 60_000) -> list[dict[str, int]]:
        """Epochs committed and rows in/out per ``bucket_ms`` (a minute) from ``since_ms`` on."""
        with self._connect() as con:
            rows = con.execute(
                "SELECT (committed_at_ms / ?) * ? AS bucket, COUNT(*), SUM(rows_in), SUM(rows_out) FROM commits "
                "WHERE view = ? AND committed_at_ms >= ? GROUP BY bucket ORDER BY bucket",
                (bucket_ms, bucket_ms, view, since_ms),
            ).fetchall()
        return [{"at_ms": b, "epochs": n, "rows_in": i or 0, "rows_out": o or 0} for b, n, i, o in rows]

    def source_samples(self, source: str, since_ms: int) -> list[SourceSample]:
        with self._connect() as con:
            rows = con.execute(
                "SELECT source, at_ms, pending_files, pending_bytes, quarantined FROM source_samples "
                "WHERE source = ? AND at_ms >= ? ORDER BY at_ms",
                (source, since_ms),
            ).fetchall()
        return [SourceSample(*row) for row in rows]

    def quarantine(self, source: str) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """The latest quarantine summary of a source: (rows per reason, a few sample rows)."""
        with self._connect() as con:
            row = con.execute("SELECT reasons, sample FROM quarantine WHERE source = ?", (source,)).fetchone()
        return ({}, []) if row is None else (json.loads(row[0]), json.loads(row[1]))
