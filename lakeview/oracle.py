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
from lakeview.changefeed import operation_sql
from lakeview.plan import plan_view
from lakeview.schema import duckdb_columns


def landed_files(directory: Path) -> list[Path]:
    """Data files in a landing directory, as Spark sees them (hidden and _-prefixed skipped)."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))


def recompute(project: ProjectConfig, view: str, files: list[Path] | None = None) -> pa.Table:
    """The view's full result over ``files`` (default: every landed file of its source).

    Rows the pipeline quarantines are left out the same way (JSON lines that do not parse or
    whose values do not fit the schema, rows missing a required column, change rows with an
    unknown operation); a change feed is first reduced to its current rows (the newest change
    per key by the sequence column; deleted keys dropped).
    """
    from lakeview.evolution import with_evolved_sources

    project = with_evolved_sources(project)  # new_columns = "evolve": the schema the pipeline reads
    config = project.views[view]
    plan = plan_view(view, config.sql, config.dialect)
    source_name = plan.sources[0]
    source = project.sources[source_name]
    files = landed_files(project.source_path(source_name)) if files is None else files
    con = connect()
    try:
        columns = duckdb_columns(source.schema_)
        if not files:
            cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in columns.items())
            relation = f"SELECT {cols} WHERE FALSE"
        elif source.images is not None:
            relation = _read_images(files, columns, source.images.before, source.images.after)
        else:
            relation = _read(SourceFormat(source.format.reader_format), files, columns)
        good = [f'"{c}" IS NOT NULL' for c in source.required]
        if source.changes is not None:
            feed = source.changes
            op = _duck(operation_sql(feed))
            good.append(f"({op}) IS NOT NULL")
            keys = ", ".join(f'"{k}"' for k in feed.key)
            names = ", ".join(f'"{n}"' for n in columns)
            relation = (
                f"SELECT {names} FROM (SELECT *, {op} AS __lv_op, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY "
                f'"{feed.sequence}" DESC) AS __lv_rn FROM ({relation}) WHERE {" AND ".join(good)}) '
                f"WHERE __lv_rn = 1 AND __lv_op <> 'delete'"
            )
        elif good:
            relation = f"SELECT * FROM ({relation}) WHERE {' AND '.join(good)}"
        con.execute(f'CREATE TEMP VIEW "{source_name}" AS {relation}')
        return con.execute(_duck(plan.sql)).to_arrow_table()
    finally:
        con.close()


def _duck(spark_sql: str) -> str:
    return sqlglot.transpile(spark_sql, read="spark", write="duckdb")[0]


def _json_objects(files: list[Path]) -> str:
    paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
    lines = f"SELECT unnest(string_split(content, chr(10))) AS line FROM read_text({paths})"
    return (
        f"SELECT CAST(line AS JSON) AS j FROM ({lines}) "
        "WHERE trim(line) <> '' AND json_valid(line) AND json_type(CAST(line AS JSON)) = 'OBJECT'"
    )


def _read_images(files: list[Path], columns: dict[str, str], before: str, after: str) -> str:
    """DuckDB SQL: the current rows of a before/after-image feed (the Z-set integrated:
    before −1, after +1, rows with a positive total, repeated by it)."""
    names = ", ".join(f'"{n}"' for n in columns)
    bad = " OR ".join(
        f"(j->'{side}'->>'{n}' IS NOT NULL AND TRY_CAST(j->'{side}'->>'{n}' AS {t}) IS NULL)"
        for side in (before, after) for n, t in columns.items()
    )
    good = f"SELECT j FROM ({_json_objects(files)}) WHERE NOT ({bad})"

    def side(name: str, weight: int) -> str:
        values = ", ".join(f"TRY_CAST(j->'{name}'->>'{n}' AS {t}) AS \"{n}\"" for n, t in columns.items())
        return f"SELECT {values}, {weight} AS w FROM ({good}) WHERE json_type(j->'{name}') = 'OBJECT'"

    total = f"SELECT {names}, SUM(w) AS w FROM ({side(before, -1)} UNION ALL {side(after, 1)}) GROUP BY ALL"
    repeated = f"SELECT {names}, unnest(range(CAST(w AS BIGINT))) AS copy FROM ({total}) WHERE w > 0"
    return f"SELECT {names} FROM ({repeated})"


def _read(fmt: SourceFormat, files: list[Path], columns: dict[str, str]) -> str:
    """DuckDB SQL reading the files as the pipeline does, without the rows it quarantines."""
    paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
    if fmt is SourceFormat.JSON:
        # Line by line, like Spark's PERMISSIVE reader: a line that is not JSON, or a present
        # value that does not cast to its column's type, makes the row malformed.
        values = ", ".join(f"TRY_CAST(j->>'{n}' AS {t}) AS \"{n}\"" for n, t in columns.items())
        bad = " OR ".join(f"(j->>'{n}' IS NOT NULL AND TRY_CAST(j->>'{n}' AS {t}) IS NULL)" for n, t in columns.items())
        lines = (
            f"SELECT unnest(string_split(content, chr(10))) AS line FROM read_text({paths})"
        )
        parsed = f"SELECT CAST(line AS JSON) AS j FROM ({lines}) WHERE trim(line) <> '' AND json_valid(line) AND json_type(CAST(line AS JSON)) = 'OBJECT'"
        return f"SELECT {values} FROM ({parsed}) WHERE NOT ({bad})"
    spec = "{" + ", ".join(f"'{n}': '{t}'" for n, t in columns.items()) + "}"
    if fmt is SourceFormat.CSV:
        return f"SELECT * FROM read_csv({paths}, columns={spec}, header=true, ignore_errors=true)"
    return f"SELECT {', '.join(chr(34) + n + chr(34) for n in columns)} FROM read_parquet({paths})"


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
