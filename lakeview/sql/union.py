"""UNION ALL of projections over one or more sources, alone or under an aggregate.

UNION ALL is linear: the union's Z-set per epoch is the concatenation of each branch's
projection over its source's Z-set (weights carried along), renamed by position to the first
branch's column names. No state of its own: a top operator (``SELECT ... FROM (... UNION ALL
...) AS u GROUP BY ...``) keeps whatever state it needs, over the relation ``__lv_union``.
"""

from __future__ import annotations

from typing import Literal

from sqlglot import exp

from lakeview.errors import UnsupportedSQLError
from lakeview.sql.plan import AppendPlan, CombinedPlan, _at, _keyword_line, plan_sql

UNIONED = "__lv_union"  # the union relation a top operator reads
BRANCH = "SELECT columns FROM <source> [WHERE ...] UNION ALL SELECT columns FROM <source> [WHERE ...]"


class UnionPlan(CombinedPlan):
    """``SELECT ... UNION ALL SELECT ...`` (sources distinct, in order of appearance), then
    the top operator over UNIONED, if any (None: the union is the view)."""

    kind: Literal["union"] = "union"
    branches: tuple[AppendPlan, ...]
    columns: tuple[str, ...]  # the union's column names (the first branch's)

    @property
    def output_columns(self) -> tuple[str, ...]:
        return self.columns if self.top is None else self.top.columns  # type: ignore[union-attr]

    def retracts(self, feeds: set[str]) -> bool:
        return any(s in feeds for s in self.sources)

    def union_sql(self, relations: dict[str, str], dialect: str = "duckdb") -> str:
        """The union's Z-set: each branch over its source's weighted relation, by position
        (the first branch names the columns: ``columns`` then the weight)."""
        return " UNION ALL ".join(
            f"SELECT * FROM ({b.weighted_sql(relations[b.sources[0]], dialect)})" for b in self.branches
        )


def union_branches(sql: str, node: exp.Expression) -> list[exp.Select]:
    """The SELECTs of a UNION ALL tree, left to right; UNION (distinct) is refused."""
    if isinstance(node, exp.SetOperation) and not isinstance(node, exp.Union):
        raise UnsupportedSQLError(
            f"{node.key.upper()} is not supported (line {_keyword_line(sql, node.key)}); "
            f"nearest supported form: {BRANCH}"
        )
    if isinstance(node, exp.Union):
        if node.args.get("distinct"):
            raise UnsupportedSQLError(
                f"UNION (without ALL) is not supported yet (line {_keyword_line(sql, 'union')}); "
                "nearest supported form: UNION ALL, or SELECT DISTINCT ... FROM (... UNION ALL ...) AS u"
            )
        for arg, name in (("order", "ORDER BY"), ("limit", "LIMIT"), ("offset", "OFFSET")):
            if node.args.get(arg):
                raise UnsupportedSQLError(
                    f"{name} on a UNION ALL is not supported (line {_keyword_line(sql, name.split()[0])}); "
                    "nearest supported form: no ORDER BY/LIMIT (a view is a set)"
                )
        return union_branches(sql, node.this) + union_branches(sql, node.expression)
    if isinstance(node, exp.Subquery):
        return union_branches(sql, node.this)
    if not isinstance(node, exp.Select):
        raise UnsupportedSQLError(
            _at(sql, node, f"a UNION ALL branch must be a SELECT, not {node.sql('spark')[:60]!r}", BRANCH)
        )
    return [node]


def plan_union(
    view: str, sql: str, union: exp.Expression, spark_sql: str, outer: exp.Select | None = None
) -> UnionPlan:
    """Plan ``union`` (a UNION ALL tree) as the view, or as the FROM subquery of ``outer``."""
    branches: list[AppendPlan] = []
    for select in union_branches(sql, union):
        try:
            branch = plan_sql(view, select.sql("spark"))
        except UnsupportedSQLError as exc:
            raise UnsupportedSQLError(
                f"{exc} (in a UNION ALL branch, line {_keyword_line(sql, select.sql('spark').split()[1])})"
            ) from None
        if not isinstance(branch, AppendPlan):
            raise UnsupportedSQLError(
                _at(
                    sql,
                    select,
                    f"a UNION ALL branch with {branch.kind.replace('_', ' ')} is not supported",
                    f"{BRANCH}, with GROUP BY over the union: SELECT k, SUM(x) FROM (... UNION ALL ...) AS u GROUP BY k",
                )
            )
        if not branches and any(not isinstance(e, (exp.Alias, exp.Column)) for e in select.expressions):
            raise UnsupportedSQLError(
                _at(sql, select, "name every column of the first UNION ALL branch", "expression AS name")
            )
        if branch.star:
            raise UnsupportedSQLError(
                _at(sql, select, "SELECT * in a UNION ALL branch is not supported", "name the columns")
            )
        branches.append(branch)
    widths = {len(b.columns) for b in branches}
    if len(widths) != 1:
        raise UnsupportedSQLError(
            _at(
                sql,
                union,
                f"UNION ALL branches select different numbers of columns ({sorted(widths)})",
                "the same number of columns in every branch",
            )
        )
    sources = tuple(dict.fromkeys(b.sources[0] for b in branches))
    top = None
    if outer is not None:
        tree = outer.copy()
        from_ = tree.args.get("from_") or tree.args.get("from")
        alias = from_.this.alias_or_name or UNIONED
        from_.set("this", exp.to_table(UNIONED).as_(alias))
        try:
            top = plan_sql(view, tree.sql("spark"))
        except UnsupportedSQLError as exc:
            raise UnsupportedSQLError(f"{exc} (in the SELECT over the UNION ALL)") from None
        if top.kind not in ("append", "keyed_aggregate"):
            raise UnsupportedSQLError(
                _at(sql, outer, f"{top.kind} over a UNION ALL is not supported", "a projection or GROUP BY")
            )
        if isinstance(top, AppendPlan) and top.star:
            raise UnsupportedSQLError(_at(sql, outer, "SELECT * over a UNION ALL subquery", "name the columns"))
    return UnionPlan(
        view=view, sql=spark_sql, sources=sources, branches=tuple(branches), columns=branches[0].columns, top=top
    )


def is_union_subquery(tree: exp.Select) -> exp.Expression | None:
    """The UNION ALL tree a SELECT reads FROM (``FROM (... UNION ALL ...) AS u``), if any."""
    from_ = tree.args.get("from_") or tree.args.get("from")
    if from_ is not None and isinstance(from_.this, exp.Subquery) and isinstance(from_.this.this, exp.Union):
        return from_.this.this
    return None
