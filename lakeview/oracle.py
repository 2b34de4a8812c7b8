"""The correctness oracle: recompute a view from scratch in DuckDB and compare.

The recompute reads exactly the source files the view's last commit reached (Spark's file
source log in the view's checkpoint, up to the committed offset), so it is comparable with
the snapshot even while more files keep landing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pyarrow as pa
import sqlglot

from lakeview.config import ProjectConfig, SourceFormat
from lakeview.duck import connect
from lakeview.plan import plan_view
from lakeview.schema import duckdb_columns


def landed_files(directory: Path) -> list[Path]:
    """Data files in a landing directory, as Spark sees them (hidden and _-prefixed skipped)."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))


def recompute(project: ProjectConfig, view: str, files: list[Path] | None = None) -> pa.Table:
    """The view's full result over ``files`` (default: every landed file of its source)."""
    plan = plan_view(view, project.views[view].sql)
    source_name = plan.sources[0]
    source = project.sources[source_name]
    files = landed_files(project.source_path(source_name)) if files is None else files
    con = connect()
    try:
        columns = duckdb_columns(source.schema_)
        if not files:
            cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in columns.items())
            relation = f"SELECT {cols} WHERE FALSE"
        else:
            paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
            spec = "{" + ", ".join(f"'{n}': '{t}'" for n, t in columns.items()) + "}"
            relation = {
                SourceFormat.JSON: f"SELECT * FROM read_json({paths}, columns={spec}, format='newline_delimited')",
                SourceFormat.CSV: f"SELECT * FROM read_csv({paths}, columns={spec}, header=true)",
                SourceFormat.PARQUET: f"SELECT {', '.join(chr(34) + n + chr(34) for n in columns)} FROM read_parquet({paths})",
            }[SourceFormat(source.format.reader_format)]
        con.execute(f'CREATE TEMP VIEW "{source_name}" AS {relation}')
        return con.execute(sqlglot.transpile(plan.sql, read="spark", write="duckdb")[0]).to_arrow_table()
    finally:
        con.close()


@dataclass(frozen=True)
class Comparison:
    equal: bool
    missing: list[dict]  # in the recompute, not in the snapshot
    unexpected: list[dict]  # in the snapshot, not in the recompute

    def describe(self, limit: int = 10) -> str:
        if self.equal:
            return "equal"
        lines = [f"{len(self.missing)} row(s) missing from the snapshot, {len(self.unexpected)} unexpected"]
        lines += [f"  missing:    {r}" for r in self.missing[:limit]]
        lines += [f"  unexpected: {r}" for r in self.unexpected[:limit]]
        return "\n".join(lines)


def compare(snapshot: pa.Table, expected: pa.Table) -> Comparison:
    """Multiset comparison of two results (column order by name, values normalised)."""
    names = expected.column_names
    got = _multiset(snapshot.select(names))
    want = _multiset(expected)
    missing = [dict(k) for k, n in want.items() for _ in range(n - got.get(k, 0))]
    unexpected = [dict(k) for k, n in got.items() for _ in range(n - want.get(k, 0))]
    return Comparison(not missing and not unexpected, missing, unexpected)


def _multiset(table: pa.Table) -> dict[tuple, int]:
    counts: dict[tuple, int] = {}
    for row in table.to_pylist():
        key = tuple(sorted((k, _normal(v)) for k, v in row.items()))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _normal(value: object) -> object:
    if isinstance(value, float):
        return round(value, 9)
    return value
