"""Malformed source rows go to a per-source quarantine instead of stopping the pipeline.

Spark reads JSON and CSV in PERMISSIVE mode with a corrupt-record column: a line that does
not parse, or whose values do not fit the declared types, keeps its raw text there. Such
rows, rows missing a ``required`` column, and change rows with an unknown operation are
written as JSON lines to ``<warehouse>/_lakeview/quarantine/<source>/<view>/epoch-<N>.jsonl``
(``file``, ``reason``, ``record``, ``epoch``); a replayed epoch rewrites the same file, so each
bad row is recorded once. The count is stamped on the epoch's snapshot
(``lakeview.rows-quarantined``) and shown by ``lakeview status``. Input columns not in the
schema are ignored (Spark projects the declared schema).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow.parquet as pq

from lakeview.config.models import ProjectConfig
from lakeview.config.schema import parse_ddl
from lakeview.sql.plan import WEIGHT

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CORRUPT = "__lv_corrupt"  # the raw text of a row Spark could not parse into the schema
FILE = "__lv_file"  # the input file of each row (Spark's _metadata.file_path)
REASON = "__lv_reason"
RECORD = "__lv_record"  # a bad row as the quarantine records it (Quarantine.tag)


def row_record(row: dict) -> str:
    """A set-aside row as its quarantine record, as Spark's ``to_json(struct(...))`` writes it for the rows Spark
    reads: JSON of its fields, a NULL field left out (Spark's ``spark.sql.jsonGenerator.ignoreNullFields``)."""
    return json.dumps({k: v for k, v in row.items() if v is not None}, default=str)


def quarantine_dir(project: ProjectConfig, source: str) -> Path:
    return project.warehouse_path / "_lakeview" / "quarantine" / source


def quarantined_rows(project: ProjectConfig, source: str, view: str | None = None) -> list[dict]:
    """Every quarantined row of a source (of one view's reading of it, if given)."""
    root = quarantine_dir(project, source)
    files = sorted((root / view).glob("epoch-*.jsonl") if view else root.glob("*/epoch-*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


@dataclass(frozen=True)
class Split:
    """A batch's good rows (lazy), their count and the count of rows set aside."""

    good: DataFrame
    rows_in: int
    quarantined: int


def _footer_rows(files: list[Path]) -> int | None:
    """Rows in these Parquet files by their footers (no Spark job); None if one is unreadable."""

    try:
        return sum(pq.read_metadata(f).num_rows for f in files)
    except (OSError, ValueError):
        return None


class Quarantine:
    def __init__(self, project: ProjectConfig, source: str, view: str) -> None:
        self.config = project.sources[source]
        self.directory = quarantine_dir(project, source) / view
        self.parses_text = self.config.format.reader_format in ("json", "csv")

    def read_schema(self) -> str:
        """The source schema as Spark reads it (plus the corrupt-record column for text formats)."""
        schema = self.config.schema_
        if self.config.images is not None:
            row = ", ".join(f"`{c.name}`: {c.type_sql('spark')}" for c in parse_ddl(schema))
            schema = f"`{self.config.images.before}` STRUCT<{row}>, `{self.config.images.after}` STRUCT<{row}>"
        return f"{schema}, {CORRUPT} STRING" if self.parses_text else schema

    def reason_sql(self, operation: str | None) -> str:
        cases = (
            [f"WHEN {CORRUPT} IS NOT NULL THEN 'malformed row: does not parse into the schema'"]
            if self.parses_text
            else []
        )
        names = {c.name.lower(): c.name for c in parse_ddl(self.config.schema_)}
        images = self.config.images
        for column in self.config.required:
            name = f"`{names.get(column.lower(), column)}`"
            value = f"COALESCE(`{images.after}`.{name}, `{images.before}`.{name})" if images else name
            cases.append(f"WHEN {value} IS NULL THEN 'missing required column {column}'")
        if operation is not None and self.config.changes is not None:
            op = self.config.changes.operation
            cases.append(
                f"WHEN {operation} IS NULL THEN concat('unknown operation ', coalesce(CAST(`{op}` AS STRING), 'NULL'))"
            )
        return f"CASE {' '.join(cases)} END" if cases else "CAST(NULL AS STRING)"

    def checks(self, operation: str | None) -> bool:
        """Whether a row of this source can be set aside at all (text formats, required
        columns, change operations); Parquet without required columns cannot."""
        return (
            self.parses_text
            or bool(self.config.required)
            or (operation is not None and self.config.changes is not None)
        )

    def split(
        self, batch: DataFrame, epoch: int, operation: str | None = None, files: list[Path] | None = None
    ) -> Split:
        """The batch's good rows, how many there are and how many were set aside (written to
        the quarantine).

        Spark jobs are per-epoch overhead (~0.05-0.1 s each), so: a source whose rows cannot be
        bad runs none here (Parquet: the count is the files' footer row counts); otherwise ONE
        aggregate counts good and bad rows, and only when there are bad rows a second job
        collects them.
        """
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run

        if not self.checks(operation):
            counted = self.footer_count(files)
            return Split(batch, counted if counted is not None else batch.count(), 0)
        tagged = batch.selectExpr("*", f"{self.reason_sql(operation)} AS {REASON}")
        payload = [c for c in batch.columns if c not in (CORRUPT, FILE, operation)]
        # One payload column read too: Spark refuses a raw JSON/CSV query that needs only the
        # corrupt-record column.
        counts = tagged.agg(
            F.count(F.lit(1)).alias("rows"),
            F.count(F.col(REASON)).alias("bad"),
            F.count(F.col(payload[0])).alias("_"),
        ).first()
        bad = int(counts["bad"]) if counts else 0
        if bad:
            rows = self.bad_rows(tagged, payload).collect()
            self._write(epoch, [r.asDict() for r in rows])
        return Split(
            tagged.where(F.col(REASON).isNull()).drop(REASON),
            (int(counts["rows"]) if counts else 0) - bad,
            bad,
        )

    def footer_count(self, files: list[Path] | None) -> int | None:
        """A Parquet source's rows in ``files`` by their footers (no Spark job); None for other formats."""
        return _footer_rows(files) if files and self.config.format.reader_format == "parquet" else None

    def tag_sql(self, columns: list[str], relation: str, operation: str | None = None) -> str:
        """Spark SQL over ``relation`` (this source's rows with these ``columns``): every row with its reason
        to set it aside (``__lv_reason``, NULL for a good row) and, for a bad row, its ``__lv_record`` (the raw
        text, else the row as JSON). Built as text so that a caller collecting every source at once
        (:func:`spark_jobs.source_frames.collect_sources`) makes one Spark call, not one per column; it
        records the bad rows with :meth:`record`."""
        payload = ", ".join(f"`{c}`" for c in columns if c not in (CORRUPT, FILE, operation))
        as_json = f"to_json(struct({payload}))"
        record = f"coalesce({CORRUPT}, {as_json})" if self.parses_text else as_json
        reasoned = f"SELECT *, {self.reason_sql(operation)} AS {REASON} FROM {relation}"
        return f"SELECT *, CASE WHEN {REASON} IS NOT NULL THEN {record} END AS {RECORD} FROM ({reasoned})"

    def bad_rows(self, tagged: DataFrame, payload: list[str]) -> DataFrame:
        """The rows of ``tagged`` (a batch with its reason column) that are set aside, as (``file``,
        ``reason``, ``record``: the raw text, else the row as JSON)."""
        from pyspark.sql import functions as F  # lazy: Spark loads only where views run

        as_json = F.to_json(F.struct(*payload))
        record = F.coalesce(F.col(CORRUPT), as_json) if self.parses_text else as_json
        return tagged.where(F.col(REASON).isNotNull()).select(
            F.col(FILE).alias("file"), F.col(REASON).alias("reason"), record.alias("record")
        )

    def record(self, epoch: int, rows: list[dict], suffix: str = "") -> None:
        """Write an epoch's bad rows (``file``, ``reason``, ``record``) to the quarantine (nothing when
        there are none; a replayed epoch rewrites the same file; ``suffix``: a file of its own, e.g. late rows)."""
        if rows:
            self._write(epoch, rows, suffix)

    def set_aside_late(self, epoch: int, images, reason: str) -> None:
        """A change feed's late images (decided in the driver, after the mirror lookup or from a
        row's before/after images: lakeview.watermark), in their own file so the epoch's
        malformed rows stay and a replay rewrites it."""

        rows = [
            {
                "file": None,
                "reason": f"{reason}; {'retracted old' if row.pop(WEIGHT) < 0 else 'new'} image left out",
                "record": json.dumps(row, default=str),
            }
            for row in images.to_pylist()
        ]
        self._write(epoch, rows, suffix="-late")

    def _write(self, epoch: int, rows: list[dict], suffix: str = "") -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"epoch-{epoch}{suffix}.jsonl"
        tmp = self.directory / f".epoch-{epoch}{suffix}.jsonl.tmp"
        tmp.write_text("".join(json.dumps({**r, "epoch": epoch}) + "\n" for r in rows))
        os.replace(tmp, target)  # a replayed epoch rewrites the same file: each bad row once
