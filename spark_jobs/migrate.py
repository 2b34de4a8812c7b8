"""A view an older Lakeview kept in tables this version never reads is rebuilt from its sources when it starts.

Every view now runs as an operator graph (:mod:`spark_jobs.graph_pipeline`). Older versions kept some views in
other layouts, found by the tables (and their columns) they left beside the view's table:

==========================================================  =====================================================
older layout                                                tables it left
==========================================================  =====================================================
one-source stack: a keyed aggregate with state              ``__lv_state_<view>_<i>`` (group state, then one
                                                            value multiset per MIN/MAX/COUNT(DISTINCT) argument)
one-source stack: a view over a change feed                 ``__lv_state_<view>_src`` (its mirror, one row per key)
one-source stack: an aggregate whose table is its own       none: the view's table has commits, the graph's
state (SUM/COUNT/MIN/MAX over an append-only source)        state tables none
per-shape joins and unions                                  ``__lv_state_<view>_join_<alias>``, the top aggregate's
                                                            ``__lv_state_<view>_<i>``, a change feed's mirror
                                                            ``__lv_state_<view>_src_<source>`` without ``__lv_w``
Delta, before value multisets                               ``__lv_state_<view>_g_<op>_rows`` (each group's rows)
a join side kept beside the aggregate under it (before      Delta: ``__lv_state_<view>_g_<join>_<side>``; Iceberg:
join sides were read from the aggregate's records)          the state log, whose layout lists the side
==========================================================  =====================================================

Such a view is REBUILT: one WARNING names it, why, and what is dropped; its older tables and Spark's checkpoint
are dropped, and the first batch recomputes the view from its sources' full history (on the executors past
``[spark] driver_rows_max`` rows, as for a new view). The view's own table is KEPT for its readers: one commit that
changes no row marks its rows as a baseline (:meth:`writers.base.SnapshotWriter.baseline`: the table then reads as
holding no epoch), and the first batch's commit replaces every row it holds with the rebuilt view's (Iceberg: one
overwrite snapshot, in the same catalog transaction as the view's state tables; Delta: one commit removing every
file and adding the new), so a reader sees the old view or the rebuilt one, never an empty or a half-written view.
(A table whose columns are no longer the view's is dropped instead: readers find the view empty until that batch
commits.) A crash part way is safe: the tables to drop are written to a marker file beside the checkpoint *before*
anything is dropped, and a start that finds the marker finishes the drops and the baseline; the marker goes once
the view is a new view (no state, no checkpoint, a table holding no epoch), whose first batch then runs (and
replays after a crash) as any new view's, replacing the baseline rows when it commits.

Adopted as it is: a one-source stack projection over an append-only source (the view's table alone, rows
appended): the graph keeps no state for it and appends the same rows to the same table, from the same checkpoint.

Not rebuilt alone, refused at start naming what to drop: a member of a view group (its checkpoint is the group's,
the group's other members stand at its epochs), a view over views (the change files it read are pruned once read)
or read by views (they hold the rows it published; its rebuild would publish its whole history again).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pyarrow as pa
from sqlglot import exp

from lakeview.errors import WriterError
from lakeview.graph import WEIGHT
from lakeview.graph.aggregate import Aggregate
from lakeview.graph.join import Join
from lakeview.ivm.changefeed import source_mirror_name
from lakeview.sql.plan import parse_statement
from spark_jobs import faults
from writers.graph_log import LAYOUT, log_table_name
from writers.graph_state import state_table_name

if TYPE_CHECKING:
    from spark_jobs.graph_pipeline import GraphPipeline
    from writers.base import SnapshotWriter

log = logging.getLogger("lakeview.pipeline")


def stored_schema(writer: SnapshotWriter) -> pa.Schema:
    """A table's columns as stored (an IcebergWriter's or a DeltaWriter's table), as an arrow schema."""
    table = writer.table()  # type: ignore[attr-defined]
    if writer.capabilities.format == "delta":
        return pa.schema(table.schema().to_arrow())
    return table.schema().as_arrow()


def stored_columns(writer: SnapshotWriter) -> set[str]:
    """The column names of a table as stored (an IcebergWriter's or a DeltaWriter's table)."""
    return set(stored_schema(writer).names)


def created_ms(writer: SnapshotWriter) -> int | None:
    """When ``writer``'s table (an IcebergWriter's or a DeltaWriter's) was made, in ms; None when it does not exist.
    Iceberg: its oldest metadata kept (the table's first unless over ``write.metadata.previous-versions-max``
    changes old); Delta: version 0's commit."""
    try:
        table = writer.table()  # type: ignore[attr-defined]
    except WriterError:
        return None
    if writer.capabilities.format == "delta":
        return min(int(entry["timestamp"]) for entry in table.history())
    logged = table.metadata.metadata_log
    return logged[0].timestamp_ms if logged else table.metadata.last_updated_ms


def _stored(writer: SnapshotWriter) -> set[str] | None:
    """The stored column names of ``writer``'s table, None when it does not exist."""
    try:
        return stored_columns(writer)
    except WriterError:
        return None


@dataclass(frozen=True)
class OlderLayout:
    """What an older Lakeview left of a view: the tables to drop (besides the view's) and why."""

    tables: tuple[str, ...]
    why: str


def older_layout(pipeline: GraphPipeline) -> OlderLayout | None:
    """The older layout ``pipeline``'s view was kept in (see the module's doc), or None."""
    view, present = pipeline.view, _tables_present(pipeline)

    def columns(name: str) -> set[str] | None:
        return _stored(pipeline._state_writer(name)) if present(name) else None

    tree = parse_statement(pipeline.plan.sql, pipeline.plan.dialect)
    aliases = dict.fromkeys(t.alias_or_name for t in tree.find_all(exp.Table))
    found = [name for alias in aliases if present(name := f"__lv_state_{view}_join_{alias}")]
    aggregate = 0  # the top aggregate's group state, then its value multisets, numbered from 0
    while present(f"__lv_state_{view}_{aggregate}"):
        found.append(f"__lv_state_{view}_{aggregate}")
        aggregate += 1
    if present(f"__lv_state_{view}_src"):  # the one-source stack's change-feed mirror
        found.append(f"__lv_state_{view}_src")
    for source in pipeline.feeds:
        mirror = columns(source_mirror_name(view, source))
        if mirror is not None and WEIGHT not in mirror:
            found.append(source_mirror_name(view, source))
    if pipeline.writer.capabilities.format == "delta":  # (Iceberg: the state log's layout property tells it)
        rows = [f"__lv_state_{view}_g_{op.id}_rows" for op in pipeline.graph.operators if isinstance(op, Aggregate)]
        found += [name for name in rows if present(name)]
    found += _derived_sides_kept(pipeline, present)
    if found:
        return OlderLayout(tuple(found), f"state tables {', '.join(found)} kept by an engine this version does not run")
    if _stateless_view_of_a_stateful_graph(pipeline, present):
        return OlderLayout((), "its table was kept as its own state (no state table of the view's operator graph)")
    return None


def _derived_sides_kept(pipeline: GraphPipeline, present: Callable[[str], bool]) -> list[str]:
    """The tables where an earlier version kept a join side that this version reads from an aggregate's records
    (:class:`lakeview.graph.derived.DerivedSide`): Delta, the side's own state table; Iceberg, the state log
    whose layout lists the side (the log's other states keep their columns, but its layout is this graph's)."""
    sides = [
        (op.left_state, op.right_state)[op.derived[0]]
        for op in pipeline.graph.operators
        if isinstance(op, Join) and op.derived is not None
    ]
    if not sides:
        return []
    view = pipeline.view
    if pipeline.writer.capabilities.format == "delta":
        kept = [name for side in sides if present(name := state_table_name(view, side))]
        graph = [state_table_name(view, t) for t in pipeline.graph.state_tables()]
    else:
        log_name = log_table_name(view)
        layout = pipeline._state_writer(log_name).table().properties.get(LAYOUT) if present(log_name) else None  # type: ignore[attr-defined]
        kept = [log_name] if any(side.name in json.loads(layout or "{}") for side in sides) else []
        graph = []
    if not kept:
        return []
    # the rest of the view's state is of the epochs the rebuild recomputes: dropped with it
    rest = [*graph, *(source_mirror_name(view, s) for s in pipeline.feeds)]
    return [*kept, *(name for name in rest if present(name) and name not in kept)]


def _tables_present(pipeline: GraphPipeline) -> Callable[[str], bool]:
    """Whether a table of the view's namespace (Iceberg: listed once) or beside its table (Delta) exists."""
    catalog = getattr(pipeline.writer, "catalog", None)
    if catalog is None:
        return lambda name: _stored(pipeline._state_writer(name)) is not None
    from pyiceberg.exceptions import NoSuchNamespaceError  # lazy: pyiceberg loads only for Iceberg views

    try:
        names = {identifier[-1] for identifier in catalog.list_tables(pipeline.writer.identifier[0])}  # type: ignore[attr-defined]
    except NoSuchNamespaceError:  # a new view in a new namespace
        names = set()
    return names.__contains__


def _stateless_view_of_a_stateful_graph(pipeline: GraphPipeline, present: Callable[[str], bool]) -> bool:
    """Whether the view's table has commits while its graph keeps state and none of its state tables or mirrors
    has any: the one-source stack kept SUM/COUNT/MIN/MAX over an append-only source in the view's table alone."""
    graph_tables = [state_table_name(pipeline.view, t) for t in pipeline.graph.state_tables()]
    graph_tables += [source_mirror_name(pipeline.view, s) for s in pipeline.feeds]
    if not graph_tables or not present(pipeline.writer.table_name) or _last_commit(pipeline.writer) is None:
        return False
    graph_tables.append(log_table_name(pipeline.view))
    return all(_last_commit(pipeline._state_writer(name)) is None for name in graph_tables if present(name))


def _last_commit(writer: SnapshotWriter) -> object | None:
    try:
        return writer.last_commit()
    except WriterError:  # no such table
        return None


def _refuse_alone(pipeline: GraphPipeline, why: str, tables: list[str]) -> None:
    """Refuse a view that cannot be rebuilt alone: a view group's member (its checkpoint is the group's, whose
    other members stand at its epochs), a view reading other views (the change files it read are pruned) or read
    by them (they hold what it published)."""
    group, view = pipeline.config.group, pipeline.view
    readers = pipeline.publisher.downstreams if pipeline.publisher is not None else []
    linked = sorted({*pipeline.upstreams, *readers})
    if group is None and not linked:
        return
    if group is not None:
        alone, together = f"a member of group {group}, whose members share one checkpoint", f"group {group}'s views"
    else:
        alone, together = f"it reads or is read by views {', '.join(linked)}", f"{view} and {', '.join(linked)}"
    older = f", and {', '.join(tables)}" if tables else ""
    raise WriterError(
        f"{view}: refused at start: an older Lakeview kept it ({why}), and it cannot be rebuilt alone ({alone}); "
        f"drop the tables of {together} with their __lv_state_ tables{older} to rebuild them from their sources"
    )


def marker_path(checkpoint: Path) -> Path:
    """The file naming a rebuild's tables to drop, beside Spark's checkpoint (which the rebuild removes)."""
    return checkpoint.with_name(f"{checkpoint.name}.rebuild.json")


def rebuild_older_layout(pipeline: GraphPipeline) -> None:
    """Rebuild ``pipeline``'s view when an older Lakeview kept it (see the module's doc): before its tables are
    made, drop its older tables and Spark's checkpoint, so its first batch reads every source's whole history, and
    mark its own table's rows as a baseline that batch replaces. Raises WriterError for a view that cannot be
    rebuilt alone (see ``_refuse_alone``)."""
    view, checkpoint = pipeline.view, pipeline.checkpoint
    marker = marker_path(checkpoint)
    pending = json.loads(marker.read_text()) if marker.exists() else None
    older = older_layout(pipeline)
    if pending is None and older is None:
        return
    tables = sorted({*(older.tables if older else ()), *(pending["tables"] if pending else ())})
    why = older.why if older is not None else pending["why"]
    _refuse_alone(pipeline, why, tables)
    if pending is None:
        hidden = marker.with_name(f".{marker.name}")
        hidden.parent.mkdir(parents=True, exist_ok=True)
        hidden.write_text(json.dumps({"view": view, "tables": tables, "why": why}))
        os.replace(hidden, marker)  # before any drop: a crash part way finds it on the next start
    kept = _keeps_rows(pipeline)
    dropped = ", ".join(tables if kept else [*tables, pipeline.writer.table_name])
    readers = (
        f"readers keep reading its old rows until that batch replaces them in one commit of {pipeline.writer.table_name}"
        if kept
        else "readers find it empty until that batch commits: its table's columns are not the view's now"
    )
    log.warning(
        "%s: rebuilding the view from its sources' full history: an older Lakeview kept it (%s), which this "
        "version does not read; dropping %s and Spark's checkpoint %s; its first batch recomputes it from every "
        "file of %s (%s)%s",
        view,
        why,
        dropped,
        checkpoint,
        ", ".join(pipeline.sources),
        readers,
        "; resuming a rebuild an earlier start began" if pending is not None else "",
    )
    for name in tables:
        pipeline._state_writer(name).drop()
    if kept:
        pipeline.writer.baseline()  # its rows stay readable; the first epoch replaces them (ViewRows.replaces)
    else:
        pipeline.writer.drop()
    faults.point("rebuild_dropped", 0)
    shutil.rmtree(checkpoint, ignore_errors=True)
    marker.unlink()


def _keeps_rows(pipeline: GraphPipeline) -> bool:
    """Whether a rebuilt view's table is kept for its readers until the first batch replaces its rows: it exists
    with the view's columns (Lakeview owns the state tables, which readers never query; the view's is theirs)."""
    stored = _stored(pipeline.writer)
    return stored is not None and stored == set(pipeline.output_schema().names)
