"""Joins of two sources: the plan (which side, which key, which columns) and the Z-set
algebra that maintains them (no Spark, no table format here).

A join view is planned as a *join operator* over two sources feeding a *top operator* (a
projection or a keyed aggregate, planned by :func:`lakeview.sql.plan.plan_sql` over the joined
relation ``__lv_join``, whose columns are ``<alias>__<column>``). Per epoch (DBSP):

    Δ(A ⋈ B) = ΔA ⋈ B_old + A_old ⋈ ΔB + ΔA ⋈ ΔB

Each side keeps its rows (only the columns the view needs) with a multiplicity in a state
table keyed by the whole stored row; an epoch looks up only the join keys it touches. A LEFT
join's NULL-extended rows of a key change only when the right side's match count of that key
goes 0 ↔ >0 (or rows of the left side arrive/leave while it is 0): see :func:`join_delta_sql`.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict
from sqlglot import exp

from lakeview.errors import UnsupportedSQLError
from lakeview.sql.plan import WEIGHT, CombinedPlan, ViewPlan, _at, _keyword_line, plan_sql
from lakeview.sql.plan import sql_over_sources as sql_over_sources

JOINED = "__lv_join"  # the joined relation the top operator reads
# A LEFT join's match counts per left row; internal columns carry the reserved ``__lv_`` prefix
# so that no user column (a source's schema refuses the prefix) can be named like them.
OLD_MATCHES = "__lv_old_n"
NEW_MATCHES = "__lv_new_n"
EQUI_JOIN = "FROM a JOIN b ON a.k = b.k [AND a.k2 = b.k2] (inner or LEFT)"


def joined_column(alias: str, column: str) -> str:
    return f"{alias}__{column}"


class JoinSide(BaseModel):
    """One input of the join: its source, how the SQL names it, the join key columns (aligned
    with the other side's) and every source column the view reads (key columns included)."""

    model_config = ConfigDict(frozen=True)
    source: str
    alias: str
    key: tuple[str, ...]
    columns: tuple[str, ...]

    def joined(self) -> list[str]:
        return [joined_column(self.alias, c) for c in self.columns]


class JoinPlan(CombinedPlan):
    """``left (INNER | LEFT) JOIN right ON equalities``, then the top operator."""

    kind: Literal["join"] = "join"
    how: Literal["inner", "left"]
    sides: tuple[JoinSide, JoinSide]
    top: ViewPlan  # over JOINED

    def retracts(self, feeds: set[str]) -> bool:
        """Whether the join's output can lose rows: a side has deletes, or NULL-extended rows
        of a LEFT join are replaced when a match arrives."""
        return self.how == "left" or any(s in feeds for s in self.sources)


def plan_join(view: str, sql: str, tree: exp.Select, spark_sql: str) -> JoinPlan:
    """Plan a two-source equi-join view; anything else raises :class:`UnsupportedSQLError`."""
    joins = tree.args.get("joins") or []
    if len(joins) > 1:
        lines = [n for n, text in enumerate(sql.splitlines(), start=1) for _ in range(text.lower().count("join"))]
        raise UnsupportedSQLError(
            f"a JOIN of more than two sources is not supported yet (line {lines[1] if len(lines) > 1 else None}); "
            f"nearest supported form: one JOIN per view, {EQUI_JOIN}"
        )
    join = joins[0]
    side, kind = (join.args.get("side") or "").upper(), (join.args.get("kind") or "").upper()
    construct = " ".join(p for p in (side, kind) if p) or "JOIN"
    if side in ("RIGHT", "FULL") or kind in ("CROSS", "SEMI", "ANTI", "NATURAL") or join.args.get("method"):
        nearest = "LEFT JOIN with the two sources swapped" if side == "RIGHT" else EQUI_JOIN
        raise UnsupportedSQLError(
            f"{construct} JOIN is not supported (line {_keyword_line(sql, side or kind or 'join')}); "
            f"nearest supported form: {nearest}"
        )
    if join.args.get("using"):
        raise UnsupportedSQLError(_at(sql, join, "JOIN ... USING is not supported", "JOIN ... ON a.k = b.k"))
    on = join.args.get("on")
    if on is None:
        raise UnsupportedSQLError(
            f"a JOIN without ON (a cross product) is not supported (line {_keyword_line(sql, 'join')}); "
            f"nearest supported form: {EQUI_JOIN}"
        )
    from_ = tree.args.get("from_") or tree.args.get("from")
    tables = [from_.this, join.this]
    for table in tables:
        if not isinstance(table, exp.Table) or not table.name or table.args.get("db"):
            raise UnsupportedSQLError(
                _at(sql, table, f"a JOIN must name two sources, not {table.sql('spark')!r}", EQUI_JOIN)
            )
    aliases = [t.alias_or_name for t in tables]
    if tables[0].name == tables[1].name:
        raise UnsupportedSQLError(
            _at(
                sql,
                join,
                f"a self-join of {tables[0].name!r} is not supported yet",
                "two different sources, or declare a second source over the same files",
            )
        )
    keys: list[list[str]] = [[], []]
    for conjunct in on.flatten() if isinstance(on, exp.And) else [on]:
        columns = [conjunct.this, conjunct.expression] if isinstance(conjunct, exp.EQ) else []
        sides = [aliases.index(c.table) if isinstance(c, exp.Column) and c.table in aliases else None for c in columns]
        if sorted(s for s in sides if s is not None) != [0, 1]:
            raise UnsupportedSQLError(
                _at(
                    sql,
                    conjunct,
                    f"join condition {conjunct.sql('spark')!r} is not an equality of a column of each side",
                    f"{EQUI_JOIN}; other conditions go in WHERE",
                )
            )
        for column, index in zip(columns, sides):
            keys[index].append(column.name)
    needed: list[list[str]] = [list(keys[0]), list(keys[1])]
    for column in tree.find_all(exp.Column):
        if isinstance(column.this, exp.Star):
            raise UnsupportedSQLError(
                _at(sql, column, "SELECT alias.* over a JOIN is not supported", "name the columns")
            )
        if column.table not in aliases:
            raise UnsupportedSQLError(
                _at(
                    sql,
                    column,
                    f"column {column.sql('spark')!r} must be qualified with its source in a JOIN view",
                    f"{aliases[0]}.{column.name} or {aliases[1]}.{column.name}",
                )
            )
        names = needed[aliases.index(column.table)]
        if column.name not in names:
            names.append(column.name)
    if any(isinstance(e, exp.Star) for e in tree.expressions):
        raise UnsupportedSQLError(_at(sql, tree, "SELECT * over a JOIN is not supported", "name the columns"))
    top_sql = _rewrite_over_joined(tree.copy())
    try:
        top = plan_sql(view, top_sql)
    except UnsupportedSQLError as exc:
        raise UnsupportedSQLError(f"{exc} (in the SELECT over the JOIN)") from None
    names = [n.lower() for n in getattr(top, "columns", ())]
    if len(set(names)) != len(names):
        twice = sorted({n for n in names if names.count(n) > 1})[0]
        raise UnsupportedSQLError(
            _at(
                sql,
                tree,
                f"two output columns are named {twice!r}",
                f"{aliases[1]}.{twice} AS {aliases[1]}_{twice} (a view's columns need distinct names)",
            )
        )
    if top.kind not in ("append", "keyed_aggregate"):
        raise UnsupportedSQLError(
            _at(sql, tree, f"{top.kind} over a JOIN is not supported", "a projection or GROUP BY over the JOIN")
        )
    sides = tuple(
        JoinSide(source=t.name, alias=a, key=tuple(k), columns=tuple(n))
        for t, a, k, n in zip(tables, aliases, keys, needed)
    )
    return JoinPlan(
        view=view,
        sql=spark_sql,
        sources=(tables[0].name, tables[1].name),
        how="left" if side == "LEFT" else "inner",
        sides=sides,
        top=top,
    )  # type: ignore[arg-type]


def _rewrite_over_joined(tree: exp.Select) -> str:
    """The view's SQL over the joined relation: ``a.c`` becomes ``a__c``; a bare selected
    column keeps its name as the output column."""
    tree.set("joins", None)
    tree.set("from_" if "from_" in tree.args else "from", exp.From(this=exp.to_table(JOINED)))
    items = []
    for item in tree.expressions:
        if isinstance(item, exp.Column):
            item = exp.alias_(item, item.name, quoted=True)
        items.append(item)
    tree.set("expressions", items)
    for column in list(tree.find_all(exp.Column)):
        column.replace(exp.column(joined_column(column.table, column.name), quoted=True))
    return tree.sql("spark")


# --- the Z-set algebra (DuckDB SQL over the epoch's per-side deltas and looked-up state) ---


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def side_delta_sql(side: JoinSide, zset: str) -> str:
    """A side's net change per stored row (``__lv_w``; rows whose weights cancel drop out)."""
    cols = ", ".join(_q(c) for c in side.columns)
    return (
        f"SELECT {cols}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM {zset} GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
    )


def touched_keys_sql(side: JoinSide, delta: str, as_side: JoinSide | None = None) -> str:
    """The non-NULL join keys of a side's delta (named as ``as_side``'s key columns)."""
    names = (as_side or side).key
    cols = ", ".join(f"{_q(k)} AS {_q(n)}" for k, n in zip(side.key, names))
    nonnull = " AND ".join(f"{_q(k)} IS NOT NULL" for k in side.key)
    return f"SELECT DISTINCT {cols} FROM {delta} WHERE {nonnull}"


def join_delta_sql(plan: JoinPlan, da: str, db: str, ao: str, bo: str) -> str:
    """DuckDB SQL: the epoch's change of the joined relation as a Z-set (``__lv_w``).

    ``da``/``db``: each side's net delta (side columns + ``__lv_w``); ``ao``: A's stored rows for
    the keys ``db`` touches, ``bo``: B's stored rows for the keys ``da`` and ``db`` touch (side
    columns + ``__lv_w``, the multiplicity). Join keys compare with ``=``: NULL never matches.
    """
    a, b = plan.sides

    def on(left: str, right: str) -> str:
        return " AND ".join(f"{left}.{_q(x)} = {right}.{_q(y)}" for x, y in zip(a.key, b.key))

    def select(left: str, right: str | None, weight: str) -> str:
        cols = [f"{left}.{_q(c)} AS {_q(n)}" for c, n in zip(a.columns, a.joined())]
        cols += [f"{right}.{_q(c)} AS {_q(n)}" if right else f"NULL AS {_q(n)}" for c, n in zip(b.columns, b.joined())]
        return f"SELECT {', '.join(cols)}, {weight} AS {WEIGHT}"

    lw, rw = f"l.{WEIGHT}", f"r.{WEIGHT}"
    parts = [
        f"{select('l', 'r', f'{lw} * {rw}')} FROM {da} AS l JOIN {bo} AS r ON {on('l', 'r')}",
        f"{select('l', 'r', f'{lw} * {rw}')} FROM {ao} AS l JOIN {db} AS r ON {on('l', 'r')}",
        f"{select('l', 'r', f'{lw} * {rw}')} FROM {da} AS l JOIN {db} AS r ON {on('l', 'r')}",
    ]
    if plan.how == "left":
        old_n, new_n = f"l.{OLD_MATCHES}", f"l.{NEW_MATCHES}"

        def counted(rel: str) -> str:
            old = f"COALESCE((SELECT SUM({rw}) FROM {bo} AS r WHERE {on('x', 'r')}), 0)"
            change = f"COALESCE((SELECT SUM({rw}) FROM {db} AS r WHERE {on('x', 'r')}), 0)"
            return f"(SELECT x.*, {old} AS {OLD_MATCHES}, {old} + {change} AS {NEW_MATCHES} FROM {rel} AS x)"

        # New left rows are NULL-extended while their key has no match after the epoch; stored
        # left rows flip in (+) or out (−) when their key's match count crosses 0.
        parts.append(f"{select('l', None, lw)} FROM {counted(da)} AS l WHERE {new_n} = 0")
        parts.append(
            f"{select('l', None, f'CASE WHEN {new_n} = 0 THEN {lw} ELSE -{lw} END')} FROM {counted(ao)} AS l "
            f"WHERE ({old_n} = 0) <> ({new_n} = 0)"
        )
    body = " UNION ALL ".join(f"({p})" for p in parts)
    names = ", ".join(_q(n) for n in [*a.joined(), *b.joined()])
    return f"SELECT {names}, CAST(SUM({WEIGHT}) AS INTEGER) AS {WEIGHT} FROM ({body}) GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
