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
from pathlib import Path
from typing import TYPE_CHECKING

from lakeview.config import ProjectConfig
from lakeview.schema import parse_ddl

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

CORRUPT = "__lv_corrupt"  # the raw text of a row Spark could not parse into the schema
FILE = "__lv_file"  # the input file of each row (Spark's _metadata.file_path)
REASON = "__lv_reason"


def quarantine_dir(project: ProjectConfig, source: str) -> Path:
    return project.warehouse_path / "_lakeview" / "quarantine" / source


def quarantined_rows(project: ProjectConfig, source: str, view: str | None = None) -> list[dict]:
    """Every quarantined row of a source (of one view's reading of it, if given)."""
    root = quarantine_dir(project, source)
    files = sorted((root / view).glob("epoch-*.jsonl") if view else root.glob("*/epoch-*.jsonl"))
    return [json.loads(line) for f in files for line in f.read_text().splitlines() if line.strip()]


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
        cases = [f"WHEN {CORRUPT} IS NOT NULL THEN 'malformed row: does not parse into the schema'"] if self.parses_text else []
        names = {c.name.lower(): c.name for c in parse_ddl(self.config.schema_)}
        images = self.config.images
        for column in self.config.required:
            name = f"`{names.get(column.lower(), column)}`"
            value = f"COALESCE(`{images.after}`.{name}, `{images.before}`.{name})" if images else name
            cases.append(f"WHEN {value} IS NULL THEN 'missing required column {column}'")
        if operation is not None and self.config.changes is not None:
            op = self.config.changes.operation
            cases.append(f"WHEN {operation} IS NULL THEN concat('unknown operation ', coalesce(CAST(`{op}` AS STRING), 'NULL'))")
        return f"CASE {' '.join(cases)} END" if cases else "CAST(NULL AS STRING)"

    def split(self, batch: DataFrame, epoch: int, operation: str | None = None) -> tuple[DataFrame, int]:
        """The batch's good rows and the number of rows set aside (written to the quarantine)."""
        from pyspark.sql import functions as F

        tagged = batch.selectExpr("*", f"{self.reason_sql(operation)} AS {REASON}")
        bad = tagged.where(F.col(REASON).isNotNull())
        payload = [c for c in batch.columns if c not in (CORRUPT, FILE, operation)]
        record = F.coalesce(F.col(CORRUPT), F.to_json(F.struct(*payload))) if self.parses_text else F.to_json(F.struct(*payload))
        rows = bad.select(F.col(FILE).alias("file"), F.col(REASON).alias("reason"), record.alias("record")).collect()
        if rows:
            self._write(epoch, [r.asDict() for r in rows])
        return tagged.where(F.col(REASON).isNull()).drop(REASON), len(rows)

    def _write(self, epoch: int, rows: list[dict]) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        target = self.directory / f"epoch-{epoch}.jsonl"
        tmp = self.directory / f".epoch-{epoch}.jsonl.tmp"
        tmp.write_text("".join(json.dumps({**r, "epoch": epoch}) + "\n" for r in rows))
        os.replace(tmp, target)  # a replayed epoch rewrites the same file: each bad row once
