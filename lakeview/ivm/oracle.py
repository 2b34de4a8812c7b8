"""The correctness oracle: recompute a view from scratch in DuckDB and compare.

The recompute reads exactly the source files the view's last commit reached (Spark's file
source log in the view's checkpoint, up to the committed offset), so it is comparable with
the snapshot even while more files keep landing.
"""

from __future__ import annotations

import atexit
import os
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
import sqlglot

from lakeview.config.evolution import with_evolved_sources
from lakeview.config.models import ProjectConfig, SourceFormat
from lakeview.config.schema import duckdb_columns
from lakeview.ivm.changefeed import operation_sql
from lakeview.ops.source_log import logged_files
from lakeview.sql.duck import connect
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.graph_watermark import event_time
from lakeview.sql.planner import view_plan
from lakeview.sql.stars import evolving_stars
from lakeview.sql.watermark import (
    Watermark,
    applied_changes,
    applied_images,
    delay_us,
    on_time_relation,
)

if TYPE_CHECKING:
    from lakeview.sql.watermark import Watermark


def landed_files(directory: Path) -> list[Path]:
    """Data files in a landing directory, as Spark sees them (hidden and _-prefixed skipped)."""
    if not directory.exists():
        return []
    return sorted(p for p in directory.rglob("*") if p.is_file() and not p.name.startswith((".", "_")))


def recompute(project: ProjectConfig, view: str, files: list[Path] | dict[str, list[Path]] | None = None) -> pa.Table:
    """The view's full result over ``files`` (default: every landed file of its sources; a
    view over several sources takes a list per source).

    Rows the pipeline quarantines are left out the same way (JSON lines that do not parse or
    whose values do not fit the schema, rows missing a required column, change rows with an
    unknown operation); a change feed is first reduced to its current rows (the newest change
    per key by the sequence column; deleted keys dropped).
    """

    plan = view_plan(project, view)
    # new_columns = "evolve": the schema the pipeline reads (a graph view: of the sources its * selects only)
    project = with_evolved_sources(project, evolving_stars(project, plan))
    config = project.views[view]
    plan = view_plan(project, view)
    if not isinstance(files, dict):
        files = {plan.sources[0]: files} if files is not None else {}
    con = connect()
    judged = event_time(project, view, plan.sources).source if config.watermark else None
    try:
        for source_name in plan.sources:
            found = files.get(source_name)
            chosen = landed_files(project.source_path(source_name)) if found is None else found
            relation = _source_relation(project, source_name, chosen)
            # only the event-time source's late rows are left out, as the pipeline does (lakeview.sql.graph_watermark)
            if source_name == judged and project.sources[judged].changes is not None:
                relation = _graph_applied_changes(con, project, view, plan, chosen)
            elif source_name == judged and project.sources[judged].images is not None:  # no WHERE: every
                wm = Watermark(delay_us(config.watermark or ""), event_time(project, view, plan.sources).column)
                index = plan.sources.index(judged)  # new on-time image moves the watermark
                relation = _applied_images(con, project, view, chosen, judged, wm, f'"{judged}"', None, index)
            elif source_name == judged:
                relation = _graph_on_time(con, project, view, plan, chosen)
            con.execute(f'CREATE TEMP VIEW "{source_name}" AS {relation}')
        return con.execute(plan.duckdb_sql()).to_arrow_table()
    finally:
        con.close()


def _graph_on_time(con, project: ProjectConfig, view: str, plan: GraphPlan, files: list[Path]) -> str:
    """A graph view's event-time source without its late rows: the rule replayed over the source's own
    batches (its file log in the view's checkpoint), every row with an event time moving the watermark."""
    found = event_time(project, view, plan.sources)
    wm = Watermark(delay_us(project.views[view].watermark or ""), found.column)
    return on_time_relation(
        con,
        project.checkpoint_path(view),
        files,
        lambda fs: _source_relation(project, found.source, fs),
        wm,
        f'"{found.source}"',
        None,
        plan.sources.index(found.source),
    )


def _graph_applied_changes(con, project: ProjectConfig, view: str, plan: GraphPlan, files: list[Path]) -> str:
    """A graph view's event-time change feed as its pipeline holds it: the rule replayed image by image over the
    feed's own batches, every new image with an event time moving the watermark (no WHERE)."""
    found = event_time(project, view, plan.sources)
    feed = project.sources[found.source].changes
    assert feed is not None
    return applied_changes(
        con,
        project.checkpoint_path(view),
        files,
        lambda fs: _latest_changes(project, found.source, fs),
        Watermark(delay_us(project.views[view].watermark or ""), found.column),
        list(feed.key),
        f'"{found.source}"',
        None,
        plan.sources.index(found.source),
    )


def _applied_images(
    con,
    project: ProjectConfig,
    view: str,
    files: list[Path],
    source_name: str,
    wm: Watermark,
    alias: str,
    where: str | None,
    source_index: int = 0,
) -> str:
    source = project.sources[source_name]
    assert source.images is not None
    columns = duckdb_columns(source.schema_)

    def zset_of(batch: list[Path]) -> str:
        if not batch:
            cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in columns.items())
            return f"SELECT {cols}, 1 AS __lv_w WHERE FALSE"
        return _image_zset(batch, columns, source.images.before, source.images.after)

    checkpoint = project.checkpoint_path(view)
    held = applied_images(con, checkpoint, files, zset_of, wm, list(columns), alias, where, source_index)
    good = [f'"{c}" IS NOT NULL' for c in source.required]
    return f"SELECT * FROM ({held}) WHERE {' AND '.join(good)}" if good else held


def source_rows(project: ProjectConfig, source_name: str, files: list[Path]) -> pa.Table:
    """A declared source's current rows over ``files``, as the pipeline sees them."""
    con = connect()
    try:
        return con.execute(_source_relation(project, source_name, files)).to_arrow_table()
    finally:
        con.close()


def frontier_files(project: ProjectConfig, view: str, frontier: dict) -> dict[str, list[Path]]:
    """Per source, the files a commit's frontier reached (Spark's file log in the view's
    checkpoint: ``sources/<i>`` for the i-th source of the view's one query)."""

    checkpoint = project.checkpoint_path(view)
    found: dict[str, list[Path]] = {}
    for index, source in enumerate(view_plan(project, view).sources):
        position = frontier.get(source) or {}
        log_offset = position.get("log_offset")
        logged = logged_files(checkpoint, int(position.get("index", index))) if log_offset is not None else []
        found[source] = [f.path for f in logged if f.batch <= log_offset]
    return found


def _source_relation(project: ProjectConfig, source_name: str, files: list[Path]) -> str:
    """DuckDB SQL: a source's current rows over ``files``, as the pipeline sees them."""
    source = project.sources[source_name]
    if source.changes is not None:
        names = ", ".join(f'"{n}"' for n in duckdb_columns(source.schema_))
        return f"SELECT {names} FROM ({_latest_changes(project, source_name, files)}) WHERE __lv_op <> 'delete'"
    relation = _parsed(project, source_name, files)
    good = [f'"{c}" IS NOT NULL' for c in source.required]
    return f"SELECT * FROM ({relation}) WHERE {' AND '.join(good)}" if good else relation


def _latest_changes(project: ProjectConfig, source_name: str, files: list[Path]) -> str:
    """DuckDB SQL: a change feed's newest change per key over ``files`` (deletes included), its
    columns and ``__lv_op``, without the rows the pipeline quarantines."""
    source = project.sources[source_name]
    assert source.changes is not None
    names = ", ".join(f'"{n}"' for n in duckdb_columns(source.schema_))
    good = [f'"{c}" IS NOT NULL' for c in source.required]
    return _newest_change(source.changes, _parsed(project, source_name, files), names, good)


def _parsed(project: ProjectConfig, source_name: str, files: list[Path]) -> str:
    """DuckDB SQL: a source's rows over ``files`` that parse into its schema."""
    source = project.sources[source_name]
    columns = duckdb_columns(source.schema_)
    if not files:
        cols = ", ".join(f'NULL::{t} AS "{n}"' for n, t in columns.items())
        return f"SELECT {cols} WHERE FALSE"
    if source.images is not None:
        return _read_images(files, columns, source.images.before, source.images.after)
    return _read(SourceFormat(source.format.reader_format), files, columns)


def _newest_change(feed, relation: str, names: str, good: list[str]) -> str:
    """DuckDB SQL: per key the newest change of ``relation`` (by the sequence), with ``__lv_op``."""
    op = _duck(operation_sql(feed))
    keys = ", ".join(f'"{k}"' for k in feed.key)
    return (
        f"SELECT {names}, __lv_op FROM (SELECT *, {op} AS __lv_op, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY "
        f'"{feed.sequence}" DESC) AS __lv_rn FROM ({relation}) WHERE {" AND ".join([*good, f"({op}) IS NOT NULL"])}) '
        f"WHERE __lv_rn = 1"
    )


def _duck(spark_sql: str) -> str:
    return sqlglot.transpile(spark_sql, read="spark", write="duckdb")[0]


def _text_paths(files: list[Path]) -> str:
    """A DuckDB list of the files to read as text. DuckDB's ``read_text`` refuses a file that is not
    valid UTF-8, while Spark's JSON reader only makes its bad lines malformed (quarantined): such a
    file is read from a copy without the lines that do not decode, as the pipeline drops them."""
    return "[" + ", ".join(f"'{_utf8_lines_only(p)}'" for p in files) + "]"


_decoded_copies: dict[tuple[str, int, int], Path] = {}


def _utf8_lines_only(path: Path) -> Path:
    data = Path(path).read_bytes()
    try:
        data.decode("utf-8")
        return path
    except UnicodeDecodeError:
        pass
    stat = Path(path).stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _decoded_copies or not _decoded_copies[key].exists():
        kept = []
        for line in data.split(b"\n"):
            try:
                kept.append(line.decode("utf-8"))
            except UnicodeDecodeError:
                continue
        handle, name = tempfile.mkstemp(prefix="lakeview-oracle-", suffix=".json")
        with os.fdopen(handle, "w", encoding="utf-8") as copy:
            copy.write("\n".join(kept))
        atexit.register(Path(name).unlink, missing_ok=True)
        _decoded_copies[key] = Path(name)
    return _decoded_copies[key]


def _json_objects(files: list[Path]) -> str:
    lines = f"SELECT unnest(string_split(content, chr(10))) AS line FROM read_text({_text_paths(files)})"
    return (
        f"SELECT CAST(line AS JSON) AS j FROM ({lines}) "
        "WHERE trim(line) <> '' AND json_valid(line) AND json_type(CAST(line AS JSON)) = 'OBJECT'"
    )


def _read_images(files: list[Path], columns: dict[str, str], before: str, after: str) -> str:
    """DuckDB SQL: the current rows of a before/after-image feed (the Z-set integrated:
    before −1, after +1, rows with a positive total, repeated by it)."""
    names = ", ".join(f'"{n}"' for n in columns)
    total = f"SELECT {names}, SUM(__lv_w) AS __lv_w FROM ({_image_zset(files, columns, before, after)}) GROUP BY ALL"
    repeated = f"SELECT {names}, unnest(range(CAST(__lv_w AS BIGINT))) AS __lv_copy FROM ({total}) WHERE __lv_w > 0"
    return f"SELECT {names} FROM ({repeated})"


def _image_zset(files: list[Path], columns: dict[str, str], before: str, after: str) -> str:
    """DuckDB SQL: a before/after-image feed's images over ``files`` as a Z-set (``__lv_w``:
    before −1, after +1), without the rows the pipeline quarantines."""
    bad = " OR ".join(
        f"(j->'{side}'->>'{n}' IS NOT NULL AND TRY_CAST(j->'{side}'->>'{n}' AS {t}) IS NULL)"
        for side in (before, after)
        for n, t in columns.items()
    )
    good = f"SELECT j FROM ({_json_objects(files)}) WHERE NOT ({bad})"

    def side(name: str, weight: int) -> str:
        values = ", ".join(f"TRY_CAST(j->'{name}'->>'{n}' AS {t}) AS \"{n}\"" for n, t in columns.items())
        return f"SELECT {values}, {weight} AS __lv_w FROM ({good}) WHERE json_type(j->'{name}') = 'OBJECT'"

    return f"{side(before, -1)} UNION ALL {side(after, 1)}"


def _read(fmt: SourceFormat, files: list[Path], columns: dict[str, str]) -> str:
    """DuckDB SQL reading the files as the pipeline does, without the rows it quarantines."""
    paths = "[" + ", ".join(f"'{p}'" for p in files) + "]"
    if fmt is SourceFormat.JSON:
        # Line by line, like Spark's PERMISSIVE reader: a line that is not JSON, or a present
        # value that does not cast to its column's type, makes the row malformed.
        values = ", ".join(f"TRY_CAST(j->>'{n}' AS {t}) AS \"{n}\"" for n, t in columns.items())
        bad = " OR ".join(f"(j->>'{n}' IS NOT NULL AND TRY_CAST(j->>'{n}' AS {t}) IS NULL)" for n, t in columns.items())
        lines = f"SELECT unnest(string_split(content, chr(10))) AS line FROM read_text({_text_paths(files)})"
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
    want = _multiset(_as_stored(expected, snapshot))
    missing = [dict(k) for k, n in want.items() for _ in range(n - got.get(k, 0))]
    unexpected = [dict(k) for k, n in got.items() for _ in range(n - want.get(k, 0))]
    return Comparison(not missing and not unexpected, missing, unexpected)


def _as_stored(expected: pa.Table, snapshot: pa.Table) -> pa.Table:
    """The recompute's numeric columns cast to the view table's types (Spark's: an AVG of decimals is a decimal
    where DuckDB's recompute gives a DOUBLE, rounded to the decimal's scale like the view's value)."""
    numeric = (pa.types.is_integer, pa.types.is_floating, pa.types.is_decimal)
    columns = []
    for name, column in zip(expected.column_names, expected.columns, strict=True):
        stored = snapshot.schema.field(name).type
        if column.type != stored and any(n(column.type) for n in numeric) and any(n(stored) for n in numeric):
            try:
                column = column.cast(stored)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
                pass  # out of the stored type's range: compared as computed (unequal)
        columns.append(column)
    return pa.table(columns, names=expected.column_names)


def _multiset(table: pa.Table) -> dict[tuple, int]:
    counts: dict[tuple, int] = {}
    for row in table.to_pylist():
        key = tuple(sorted((k, _normal(v)) for k, v in row.items()))
        counts[key] = counts.get(key, 0) + 1
    return counts


def _normal(value: object) -> object:
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, datetime) and value.tzinfo is not None:
        # Spark's TIMESTAMP is an instant (stored as timestamptz; the session runs in UTC),
        # a recompute over naive source timestamps gives wall-clock UTC: compare as UTC.
        return value.astimezone(UTC).replace(tzinfo=None)
    return value
