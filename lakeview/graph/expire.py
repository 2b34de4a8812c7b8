"""Bounded state under a watermark: the state only closed event-time windows reach, dropped.

A graph view's watermark judges one append-only source (:mod:`lakeview.sql.graph_watermark`): once an epoch's
watermark is W, every row of that source it lets in has an event time ``ts >= W`` (older rows are late and
quarantined), so it falls only in windows ending after W (``start <= ts < end``). State that ONLY that source's
rows reach, and that is keyed by the event time itself (``< W``) or by a window's end (``<= W``), can get no
more changes: those rows are dropped in the epoch's commit. The operator's output is not changed: a closed
window's row stays in the view.

Bounded: the state of an aggregate or a DISTINCT whose input is the event source through linear operators only
(source, filter, projection, a hopping window's expansion, a union of that source with itself), and whose key
holds the event time or the end of a ``window()`` over it: a one-source windowed view's group records, and an
aggregate pushed below a join onto the event source (eager aggregation groups it by the event time). Not
bounded: anything a join or a union with another input feeds (another input can still change a closed window:
a dimension row's update re-groups the fact rows it joins, a row of a source the watermark does not judge may be
of any time), so a join's sides and the aggregate above a join keep every window; top-k.

The window's end is recognised in the projection that :func:`lakeview.sql.windows.inline` writes,
``ts + INTERVAL (size - (back)) MICROSECOND``, and proven after ``ts`` by ``back < size``: a tumbling window's
``back`` is ``ts``'s floor-modulo by the size, a hopping window's carries a filter ``(back < size)`` on the way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lakeview.graph.aggregate import Aggregate
from lakeview.graph.driver import Graph
from lakeview.graph.expand import Expand
from lakeview.graph.operators import Distinct, Filter, Operator, Project, Source, UnionAll
from lakeview.graph.zset import q

TIME, END = "time", "end"  # a column equal to the event time; a window's end over it (always after it)
_NAME = r'"((?:[^"]|"")+)"'
_SHIFTED = re.compile(_NAME + r" \+ INTERVAL \((\d+) - \((.+)\)\) MICROSECOND")  # ts + (size - back) µs
_FLOOR_MOD = re.compile(r"\(\(EPOCH_US\(" + _NAME + r"\) % (\d+)\) \+ (\d+)\) % (\d+)")  # in [0, slide)


@dataclass(frozen=True)
class Bound:
    """One state table's rows that only closed windows reach: those whose ``column`` (the event time, or a
    window's end: ``inclusive``) is before the watermark."""

    table: str
    column: str
    inclusive: bool

    def closed(self, watermark_us: int) -> str:
        """The DuckDB predicate selecting the rows no row at or after ``watermark_us`` can reach."""
        return f"epoch_us({q(self.column)}) {'<=' if self.inclusive else '<'} {watermark_us}"


@dataclass(frozen=True)
class _Reach:
    """What is known of an operator whose rows come from the event source alone: its columns bounding the event
    time (TIME or END), and the filters its rows passed (their DuckDB text, for a hopping window's proof)."""

    kinds: dict[str, str]
    guards: frozenset[str]


def bounds(graph: Graph, source: str, column: str) -> dict[str, list[Bound]]:
    """The state a watermark on ``source``'s event time ``column`` bounds in ``graph``, by operator id."""
    reach: dict[int, _Reach | None] = {}
    found: dict[str, list[Bound]] = {}
    for op in graph.operators:
        inputs = [reach.get(id(i)) for i in op.inputs]
        reach[id(op)] = _reach(graph, op, inputs, source, column)
        if isinstance(op, (Aggregate, Distinct)) and inputs[0] is not None:
            kinds = inputs[0].kinds
            mine = []
            for table in op.state_tables():
                keyed = [k for k in table.key if k in kinds]
                if keyed:  # one bounding key column suffices: the row's window (or time) is closed
                    mine.append(Bound(table.name, keyed[0], kinds[keyed[0]] == END))
            if mine:
                found[op.id] = mine
    return found


def expire(graph: Graph, found: dict[str, list[Bound]], watermark_us: int) -> None:
    """Drop, in the state of ``graph``'s operators, the rows ``found`` (:func:`bounds`) says only windows closed
    at ``watermark_us`` reach (staged in the store: the epoch's commit carries it)."""
    for op in graph.operators:
        if op.id in found:
            op.expire(graph.runtime, {b.table: b.closed(watermark_us) for b in found[op.id]})


def _reach(graph: Graph, op: Operator, inputs: list[_Reach | None], source: str, column: str) -> _Reach | None:
    if isinstance(op, Source):
        if op.name != source:
            return None
        names = graph.schemas[op.name].names
        return _Reach(
            {c: TIME for c, n in zip(op.columns, names, strict=True) if n.lower() == column.lower()}, frozenset()
        )
    if not inputs or any(i is None for i in inputs):
        return None
    first = inputs[0]
    assert first is not None
    if isinstance(op, Filter):
        return _Reach(first.kinds, first.guards | {op.predicate})
    if isinstance(op, Expand):
        return first
    if isinstance(op, Project):
        kinds = {}
        for name, expr in zip(op.columns, op.exprs, strict=True):
            kind = _kind(expr, first)
            if kind is not None:
                kinds[name] = kind
        return _Reach(kinds, frozenset())
    if isinstance(op, UnionAll):
        per_input = [
            {j for j, c in enumerate(i.columns) if r.kinds.get(c) == TIME}  # type: ignore[union-attr]
            for i, r in zip(op.inputs, inputs, strict=True)
        ]
        common = set.intersection(*per_input)
        return _Reach({op.columns[j]: TIME for j in common}, frozenset())
    return None


def _kind(expr: str, reach: _Reach) -> str | None:
    """Whether a projection's expression is the event time (a rename) or a window's end after it."""
    renamed = {q(c): kind for c, kind in reach.kinds.items()}
    if expr in renamed:
        return renamed[expr]
    shifted = _SHIFTED.fullmatch(expr)
    if shifted is None:
        return None
    ts, size, back = shifted.group(1).replace('""', '"'), int(shifted.group(2)), shifted.group(3)
    if reach.kinds.get(ts) != TIME:
        return None
    mod = _FLOOR_MOD.fullmatch(back)
    tumbling = mod is not None and len({int(mod.group(k)) for k in (2, 3, 4)} | {size}) == 1
    if tumbling or f"({back} < {size})" in reach.guards:  # back < size: the end is after the event time
        return END
    return None
