"""A view's per-epoch changes, published as Z-set files for the views that read it.

After each commit, an upstream view writes the epoch's change — rows removed weighted −1, rows
added +1 — to ``<warehouse>/_lakeview/changes/<view>/<reader>/epoch-<E>-snapshot-<S>.parquet``,
one directory per reading view (a hidden temp file, then an atomic rename; Spark and the oracle
skip names starting with ``.``/``_``). The change is derived from the committed snapshot itself
(:mod:`writers.snapshot_diff`), and each reader's ``_published.json`` records the newest epoch
published to it, so:

- a crash between the commit and the publication is repaired on restart: the replay skips the
  committed epoch, and :meth:`ChangePublisher.publish` derives every committed epoch newer than
  the mark from the table, oldest first — each change is published exactly once;
- the first publication to a reader (no mark yet) is the whole table at its last commit, each row
  +1: a downstream declared after its upstream has run starts from the upstream's state, even
  when other readers' files were already consumed and deleted.

Retention: a change file is deleted once its reader's Spark checkpoint has committed the batch
that read it (:meth:`ChangePublisher.prune`, after each publication and in the maintenance
pass). A declared reader that never runs keeps every file of its directory.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote

import pyarrow as pa
import pyarrow.parquet as pq

from lakeview.ops.source_log import logged_files
from lakeview.sql.dag import downstreams_of
from lakeview.sql.planner import view_plan
from writers.snapshot_diff import WEIGHT, commits_after, snapshot_batches, snapshot_change

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig
    from lakeview.ivm.commits import CommitRecord
    from writers.base import SnapshotWriter

log = logging.getLogger("lakeview.view_changes")
PUBLISHED = "_published.json"
_FILE = re.compile(r"^epoch-(\d+)-snapshot-(-?\d+)\.parquet$")


def change_file_name(epoch: int, snapshot_id: int | None) -> str:
    return f"epoch-{epoch:012d}-snapshot-{snapshot_id}.parquet"


def parse_change_file(path: str | Path) -> tuple[int, int] | None:
    """(upstream epoch, upstream snapshot id) of a change file's name; None for other files."""
    match = _FILE.match(Path(unquote(str(path))).name)
    return (int(match.group(1)), int(match.group(2))) if match else None


def upstream_position(paths: list) -> dict[str, int]:
    """The newest upstream epoch and snapshot among change files (for a downstream's frontier)."""
    parsed = [p for p in (parse_change_file(str(getattr(f, "path", f))) for f in paths) if p is not None]
    if not parsed:
        return {}
    epoch, snapshot = max(parsed)
    return {"upstream_epoch": epoch, "upstream_snapshot": snapshot}


def reader_path(project: ProjectConfig, upstream: str, reader: str) -> Path:
    """The directory of ``upstream``'s change files that ``reader`` streams from."""
    return project.changes_path(upstream) / reader


class ChangePublisher:
    """Publishes one view's committed epochs as change files, one directory per reader (each
    with its own mark, so a reader added later starts from the whole table), and prunes what
    each reader has consumed."""

    def __init__(self, project: ProjectConfig, view: str, writer: SnapshotWriter) -> None:
        self.project = project
        self.view = view
        self.writer = writer
        self.directory = project.changes_path(view)
        self.downstreams = downstreams_of(project, view)

    @classmethod
    def for_view(cls, project: ProjectConfig, view: str, writer: SnapshotWriter) -> ChangePublisher | None:
        """A publisher when other views read ``view``; None otherwise (nothing to publish)."""
        publisher = cls(project, view, writer)
        return publisher if publisher.downstreams else None

    def reader_dir(self, reader: str) -> Path:
        return reader_path(self.project, self.view, reader)

    def published_epoch(self, reader: str) -> int | None:
        mark = self.reader_dir(reader) / PUBLISHED
        return int(json.loads(mark.read_text())["epoch"]) if mark.exists() else None

    def publish(self) -> list[int]:
        """Publish, for every reader, each committed epoch newer than its mark, oldest first;
        the epochs published (to any reader)."""

        changes: dict[int | None, pa.Table] = {}  # snapshot -> its Z-set, derived once for all readers
        published: set[int] = set()
        marks = {reader: self.published_epoch(reader) for reader in self.downstreams}
        known = [done for done in marks.values() if done is not None]
        commits = (
            commits_after(self.writer, min(known)) if known else []
        )  # the table's history, walked once for all readers
        for reader, done in marks.items():
            directory = self.reader_dir(reader)
            directory.mkdir(parents=True, exist_ok=True)
            if done is None:
                last = self.writer.last_commit()
                if last is None or last.snapshot_id is None:
                    continue
                self._write_all(directory, last)  # a new reader: the whole table, +1 each
                published.add(last.epoch)
                continue
            for record in (r for r in commits if r.epoch > done):
                if record.snapshot_id not in changes:
                    changes[record.snapshot_id] = snapshot_change(self.writer, record.snapshot_id)  # type: ignore[arg-type]
                self._write(directory, record, changes[record.snapshot_id])
                published.add(record.epoch)
        if published:
            log.info(
                "%s: published the change of epoch(s) %s for %s",
                self.view,
                sorted(published),
                ", ".join(self.downstreams),
            )
        self.prune()
        return sorted(published)

    def _write_all(self, directory: Path, record: CommitRecord) -> None:
        """Every row of the table at ``record``'s snapshot at +1, streamed into one change file a
        batch at a time (the driver never holds the table). Rows stored twice stay two rows at
        +1 each: the same Z-set as one row at +2, and every reader sums weights."""

        rows = snapshot_batches(self.writer, record.snapshot_id)  # type: ignore[arg-type]
        schema = rows.schema.append(pa.field(WEIGHT, pa.int32()))
        name = change_file_name(record.epoch, record.snapshot_id)
        hidden = directory / f".{name}.tmp"
        written = 0
        with pq.ParquetWriter(hidden, schema) as out:
            for batch in rows:
                if batch.num_rows:
                    out.write_batch(
                        pa.RecordBatch.from_arrays(
                            [*batch.columns, pa.repeat(pa.scalar(1, pa.int32()), batch.num_rows)], schema=schema
                        )
                    )
                    written += batch.num_rows
        if written:
            os.replace(hidden, directory / name)
        else:
            hidden.unlink()
        self._write(directory, record, schema.empty_table())  # the reader's mark

    @staticmethod
    def _write(directory: Path, record: CommitRecord, zset: pa.Table) -> None:
        if zset.num_rows:
            name = change_file_name(record.epoch, record.snapshot_id)
            hidden = directory / f".{name}.tmp"
            pq.write_table(zset, hidden)
            os.replace(hidden, directory / name)
        mark = directory / f".{PUBLISHED}.tmp"
        mark.write_text(json.dumps({"epoch": record.epoch, "snapshot_id": record.snapshot_id}))
        os.replace(mark, directory / PUBLISHED)

    def prune(self) -> list[Path]:
        """Delete the change files each reader's Spark checkpoint has committed; those deleted."""
        gone: list[Path] = []
        for reader in self.downstreams:
            directory = self.reader_dir(reader)
            files = [p for p in directory.iterdir() if parse_change_file(p.name)] if directory.exists() else []
            if not files:
                continue
            consumed = consumed_files(self.project, reader, self.view)
            for path in files:
                if os.path.realpath(path) in consumed:
                    path.unlink(missing_ok=True)
                    gone.append(path)
        return gone


def consumed_files(project: ProjectConfig, view: str, upstream: str | None = None) -> set[str]:
    """Real paths of the input files ``view``'s query has read in batches Spark committed (of
    ``upstream``'s change files: a join or UNION ALL reads several sources, one offset-log line
    and one file log each, in the order its SQL names them)."""

    index = 0
    if upstream is not None:
        sources = list(view_plan(project, view).sources)
        index = sources.index(upstream) if upstream in sources else 0
    checkpoint = project.checkpoint_path(view)
    commits = (
        [int(p.name) for p in (checkpoint / "commits").glob("*") if p.name.isdigit()]
        if (checkpoint / "commits").exists()
        else []
    )
    if not commits:
        return set()
    offsets = checkpoint / "offsets" / str(max(commits))
    lines = offsets.read_text().splitlines() if offsets.exists() else []
    line = lines[2 + index].strip() if len(lines) > 2 + index else ""
    position = json.loads(line) if line not in ("", "-") else {}
    log_offset = position.get("logOffset") if isinstance(position, dict) else None
    if log_offset is None:
        return set()
    return {os.path.realpath(unquote(str(f.path))) for f in logged_files(checkpoint, index) if f.batch <= log_offset}
