"""Operators from a qualified query tree: FROM and joins (inner runs reordered), WHERE with IN / EXISTS as
semi/anti joins, GROUP BY, top-k windows, the select list, DISTINCT, UNION and ORDER BY … LIMIT.

Columns are renamed to names unique in the graph, so every operator's SQL refers to them unqualified.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field

import pyarrow as pa
from sqlglot import exp

from lakeview.graph.aggregate import SUPPORTED, Aggregate, AggSpec
from lakeview.graph.derived import derived_side
from lakeview.graph.expand import Expand
from lakeview.graph.join import Join, SemiJoin
from lakeview.graph.operators import Distinct, Filter, Operator, Project, Source, UnionAll
from lakeview.graph.passes import conjuncts, int_literal, refused
from lakeview.graph.topk import RANKERS, TopK
from lakeview.graph.zset import q

Scope = dict[tuple[str, str], str]


@dataclass
class Rel:
    """A relation being built: its top operator and the (table alias, column) → internal column map."""

    op: Operator
    scope: Scope
    inputs: frozenset[str] = frozenset()  # the view's inputs read below (for size hints)


@dataclass
class Render:
    """Turns a qualified expression into DuckDB SQL over internal columns (after grouping, via ``replace``)."""

    scope: Scope
    replace: Callable[[exp.Expr], str | None] | None = None

    def node(self, expr: exp.Expr) -> exp.Expr:
        def fn(n: exp.Expr) -> exp.Expr:
            if self.replace is not None:
                hit = self.replace(n)
                if hit is not None:
                    return exp.column(hit, quoted=True)
            if isinstance(n, exp.Column):
                key = (n.table, n.name)
                if key in self.scope:
                    return exp.column(self.scope[key], quoted=True)
                what = "neither grouped nor aggregated" if self.replace else "not found"
                raise refused(f"column {n.sql(dialect='duckdb')}", what)
            if isinstance(n, (exp.Subquery, exp.Exists)) or (isinstance(n, exp.In) and n.args.get("query")):
                raise refused(
                    n.sql(dialect="duckdb")[:80],
                    "a subquery is maintained only as a top-level AND-ed [NOT] IN / [NOT] EXISTS of WHERE or in FROM",
                )
            if isinstance(n, exp.Window):
                raise refused(
                    n.sql(dialect="duckdb"),
                    "window functions are maintained only as a top-k (ROW_NUMBER/RANK/DENSE_RANK filtered to <= k)",
                )
            return n

        return expr.transform(fn)

    def sql(self, expr: exp.Expr) -> str:
        return self.node(expr).sql(dialect="duckdb")


def window_function(node: exp.Expr) -> bool:
    return isinstance(node.parent, exp.Window) and node.arg_key == "this"


def aggregate_units(exprs: list[exp.Expr]) -> list[exp.Expr]:
    """Each distinct aggregate call (with its FILTER) in the expressions, outside window functions' heads."""
    units: dict[str, exp.Expr] = {}
    for root in exprs:
        for node in root.walk():
            if isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc):
                units.setdefault(node.sql(), node)
            elif (
                isinstance(node, exp.AggFunc) and not window_function(node) and not isinstance(node.parent, exp.Filter)
            ):
                if isinstance(node, (exp.RowNumber, exp.Rank, exp.DenseRank)):
                    continue
                units.setdefault(node.sql(), node)
    return list(units.values())


@dataclass
class Builder:
    """Builds the operators of one graph; ``ops`` stays in topological order."""

    schemas: dict[str, pa.Schema]
    sizes: dict[str, int] = field(default_factory=dict)
    insert_only: frozenset[str] = frozenset()  # inputs whose changes never retract a row
    ops: list[Operator] = field(default_factory=list)
    sources: dict[str, list[Source]] = field(default_factory=dict)
    ctes: dict[str, exp.Expr] = field(default_factory=dict)
    built_ctes: dict[tuple, tuple[Operator, list[str]]] = field(default_factory=dict)
    taken: set[str] = field(default_factory=set)
    counter: int = 0

    def add(self, cls: type, inputs: list[Operator], columns: list[str], **kw) -> Operator:
        self.counter += 1
        op = cls(id=f"{cls.__name__.lower()}{self.counter}", inputs=inputs, columns=columns, **kw)
        self.ops.append(op)
        return op

    def fresh(self, name: str) -> str:
        base = re.sub(r"[^a-z0-9_]", "_", name.lower())[:40] or "c"
        out, n = base, 1
        while out in self.taken:
            n += 1
            out = f"{base}_{n}"
        self.taken.add(out)
        return out

    # -- queries ------------------------------------------------------------------------------------------
    def query(self, node: exp.Expr, hints: dict[str, int] | None = None) -> tuple[Operator, list[str]]:
        """A query's operator and its output column names."""
        with_ = node.args.get("with_") or node.args.get("with")
        if with_ is not None:
            for cte in with_.expressions:
                self.ctes[cte.alias_or_name] = cte.this
        if isinstance(node, exp.Subquery):
            return self.query(node.this, hints)
        if isinstance(node, exp.Union):
            return self.union(node)
        if isinstance(node, exp.Select):
            return self.select(node, hints or {})
        raise refused(node.key.upper(), "not a query the graph maintains")

    def union(self, node: exp.Union) -> tuple[Operator, list[str]]:
        branches = []
        for side in (node.left, node.right):
            branches.append(self.query(side))
        arity = {len(n) for _, n in branches}
        if len(arity) != 1:
            raise refused("UNION", "its branches have different numbers of columns")
        names = branches[0][1]
        op = self.add(UnionAll, [b[0] for b in branches], [self.fresh(n) for n in names])
        if node.args.get("distinct"):
            op = self.add(Distinct, [op], op.columns)
        if node.args.get("order") is not None and node.args.get("limit") is not None:
            scope = {("", n): c for n, c in zip(names, op.columns, strict=True)}
            op = self.limit(op, node, Render(scope), {n: c for n, c in zip(names, op.columns, strict=True)}, hidden=0)
        elif node.args.get("limit") is not None:
            raise refused("LIMIT without ORDER BY", "which rows it keeps is unspecified")
        return op, names

    # -- FROM ---------------------------------------------------------------------------------------------
    def table(self, node: exp.Expr, hints: dict[str, dict[str, int]]) -> Rel:
        if isinstance(node, exp.Subquery):
            alias = node.alias_or_name
            op, names = self.query(node.this, hints.get(alias))
            return self.renamed(op, names, alias)
        if not isinstance(node, exp.Table) or not isinstance(node.this, exp.Identifier):
            raise refused(node.sql(dialect="duckdb")[:80], "only tables, CTEs and subqueries may appear in FROM")
        name, alias = node.name, node.alias_or_name
        if name in self.ctes:
            hint = hints.get(alias) or {}
            key = (name, tuple(sorted(hint.items())))
            if key not in self.built_ctes:
                self.built_ctes[key] = self.query(self.ctes[name], hint)
            op, names = self.built_ctes[key]
            return self.renamed(op, names, alias)
        if name not in self.schemas:
            raise refused(f"table {name}", "not an input of this view")
        if name not in self.sources:
            cols = [f.name for f in self.schemas[name]]
            src = self.add(
                Source, [], [self.fresh(f"{name}_{c}") for c in cols], name=name, insert_only=name in self.insert_only
            )
            self.sources[name] = [src]
        src = self.sources[name][0]
        rel = self.renamed(src, [f.name for f in self.schemas[name]], alias)
        return Rel(rel.op, rel.scope, frozenset([name]))

    def renamed(self, op: Operator, names: list[str], alias: str) -> Rel:
        cols = [self.fresh(f"{alias}_{n}") for n in names]
        proj = self.add(Project, [op], cols, exprs=[q(c) for c in op.columns])
        return Rel(proj, {(alias, n): c for n, c in zip(names, cols, strict=True)})

    def from_where(self, sel: exp.Select, hints: dict[str, dict[str, int]]) -> Rel:
        from_ = sel.args.get("from_") or sel.args.get("from")
        if from_ is None:
            raise refused("SELECT without FROM", "a view reads at least one input")
        joins = sel.args.get("joins") or []
        constant = joins[-1] if joins and isinstance(joins[-1].this, exp.Values) else None
        if constant is not None:  # rows times constant rows (a hopping window's offsets): an Expand after the joins
            joins = joins[:-1]
        pushed, plain, subs = self.split_where(sel, from_, joins)
        if constant is not None:
            plain = pushed.pop(constant.this.alias_or_name, []) + plain
        rel: Rel | None = self.pushed(self.table(from_.this, hints), from_.this, pushed)
        run: list[tuple[Rel, list[exp.Expr]]] = []
        if self.sizes and not any((j.side or "") for j in joins):  # all inner: any input may start the chain
            run.append((rel, []))
            rel = None
        for j in joins:
            if j.args.get("kind") and j.args["kind"].upper() not in ("INNER", "CROSS", "OUTER"):
                raise refused(f"{j.args['kind'].upper()} JOIN", "not a join the graph maintains")
            if j.args.get("using"):
                raise refused("JOIN ... USING", "could not be rewritten to ON")
            right = self.pushed(self.table(j.this, hints), j.this, pushed)
            side = (j.side or "").lower()
            if side in ("left", "right", "full"):
                rel = self.inner_run(rel, run)
                run = []
                rel = self.join(rel, right, side, conjuncts(j.args.get("on")))
            else:
                run.append((right, conjuncts(j.args.get("on"))))
        rel = self.inner_run(rel, run)
        if constant is not None:
            rel = self.expand(rel, constant)
        if plain:
            render = Render(rel.scope)
            pred = " AND ".join(f"({render.sql(c)})" for c in plain)
            rel = Rel(self.add(Filter, [rel.op], rel.op.columns, predicate=pred), rel.scope)
        for c in subs:
            rel = self.semi(rel, c)
        return rel

    def expand(self, rel: Rel, join: exp.Join) -> Rel:
        """``rel`` CROSS JOIN (VALUES ...) AS alias(columns): an Expand (each row once per constant row)."""
        values = join.this
        what = values.sql(dialect="duckdb")[:80]
        if join.side or (join.args.get("kind") or "CROSS").upper() != "CROSS" or join.args.get("on"):
            raise refused(what, "constant rows (VALUES) are maintained only as the last CROSS JOIN of a FROM")
        alias = values.args.get("alias")
        names = [c.name for c in alias.columns] if alias is not None else []
        rows = [list(t.expressions) if isinstance(t, exp.Tuple) else [t] for t in values.expressions]
        if not names or any(len(r) != len(names) for r in rows):
            raise refused(what, "constant rows need an alias naming each of their columns: AS t(a, b)")
        literal = (exp.Literal, exp.Null, exp.Boolean)
        if any(not isinstance(v.this if isinstance(v, exp.Neg) else v, literal) for r in rows for v in r):
            raise refused(what, "constant rows (VALUES) hold literals only")
        table = values.alias_or_name
        cols = [self.fresh(f"{table}_{n}") for n in names]
        op = self.add(
            Expand, [rel.op], rel.op.columns + cols, rows=[[v.sql(dialect="duckdb") for v in r] for r in rows]
        )
        return Rel(op, {**rel.scope, **{(table, n): c for n, c in zip(names, cols, strict=True)}}, rel.inputs)

    def split_where(
        self, sel: exp.Select, from_: exp.Expr, joins: list[exp.Expr]
    ) -> tuple[dict[str, list[exp.Expr]], list[exp.Expr], list[exp.Expr]]:
        """WHERE's conjuncts: those on one input that no outer join NULL-extends (filtered before the joins, so
        the joins keep less state), the other plain ones, and the IN / EXISTS ones."""
        items = [from_.this] + [j.this for j in joins]
        nullable: set[str] = set()
        for i, j in enumerate(joins, start=1):
            side = (j.side or "").upper()
            if side in ("LEFT", "FULL"):
                nullable.add(items[i].alias_or_name)
            if side in ("RIGHT", "FULL"):
                nullable |= {x.alias_or_name for x in items[:i]}
        pushed: dict[str, list[exp.Expr]] = {}
        plain, subs = [], []
        for c in conjuncts(sel.args.get("where")):
            if self.is_subquery_predicate(c):
                subs.append(c)
                continue
            tables = {col.table for col in c.find_all(exp.Column)}
            if len(tables) == 1 and not tables & nullable and not any(c.find_all(exp.AggFunc, exp.Window)):
                pushed.setdefault(tables.pop(), []).append(c)
            else:
                plain.append(c)
        return pushed, plain, subs

    def pushed(self, rel: Rel, node: exp.Expr, pushed: dict[str, list[exp.Expr]]) -> Rel:
        conds = pushed.get(node.alias_or_name)
        if not conds:
            return rel
        render = Render(rel.scope)
        pred = " AND ".join(f"({render.sql(c)})" for c in conds)
        return Rel(self.add(Filter, [rel.op], rel.op.columns, predicate=pred), rel.scope, rel.inputs)

    def inner_run(self, rel: Rel | None, run: list[tuple[Rel, list[exp.Expr]]]) -> Rel:
        """Join a run of inner joins, next always an input connected by an equality, smallest (by size hint) first.

        With no ``rel`` the chain starts at the smallest input, so that the large (fact) input joins late and
        fewer joins keep a fact-sized state.
        """
        pool = list(run)
        conds = [c for _, cs in run for c in cs]
        if rel is None:
            start = min(pool, key=lambda p: self.size_of(p[0]))
            pool.remove(start)
            rel = start[0]
        while pool:
            linked = [p for p in pool if any(self.equality(c, rel.scope, p[0].scope) for c in conds)] or pool
            pick = min(linked, key=lambda p: self.size_of(p[0]))
            pool.remove(pick)
            scope = {**rel.scope, **pick[0].scope}
            usable = [c for c in conds if self.columns_of(c) <= set(scope)]
            conds = [c for c in conds if c not in usable]
            rel = self.join(rel, pick[0], "inner", usable)
        if conds:
            raise refused(conds[0].sql(dialect="duckdb"), "a join condition refers to a table not joined yet")
        return rel

    def size_of(self, rel: Rel) -> int:
        return max((self.sizes.get(t, 1 << 62) for t in rel.inputs), default=1 << 62)

    @staticmethod
    def columns_of(node: exp.Expr) -> set[tuple[str, str]]:
        return {(c.table, c.name) for c in node.find_all(exp.Column)}

    @staticmethod
    def equality(c: exp.Expr, left: Scope, right: Scope) -> tuple[str, str] | None:
        """(left column, right column) when ``c`` is ``l = r`` across the two sides."""
        if not isinstance(c, exp.EQ) or not isinstance(c.this, exp.Column) or not isinstance(c.expression, exp.Column):
            return None
        a, b = (c.this.table, c.this.name), (c.expression.table, c.expression.name)
        if a in left and b in right and a not in right and b not in left:
            return left[a], right[b]
        if b in left and a in right and b not in right and a not in left:
            return left[b], right[a]
        return None

    def join(self, left: Rel, right: Rel, kind: str, conds: list[exp.Expr]) -> Rel:
        scope = {**left.scope, **right.scope}
        render = Render(scope)
        lk, rk = [], []
        for c in conds:
            pair = self.equality(c, left.scope, right.scope)
            if pair:
                lk.append(pair[0])
                rk.append(pair[1])
        condition = " AND ".join(f"({render.sql(c)})" for c in conds) or "TRUE"
        op = self.add(
            Join,
            [left.op, right.op],
            left.op.columns + right.op.columns,
            kind=kind,
            left_key=lk,
            right_key=rk,
            condition=condition,
        )
        if kind == "inner":  # a side that is a GROUP BY's output is read from its records, not kept twice
            for side, key in ((0, lk), (1, rk)):
                derived = derived_side(op.inputs[side], key)
                if derived is not None:
                    op.read_from(side, derived)
                    break
        return Rel(op, scope, left.inputs | right.inputs)

    # -- IN / EXISTS ----------------------------------------------------------------------------------------
    @staticmethod
    def is_subquery_predicate(c: exp.Expr) -> bool:
        return any(
            isinstance(n, (exp.Exists, exp.Subquery)) or (isinstance(n, exp.In) and n.args.get("query"))
            for n in c.walk()
        )

    def semi(self, rel: Rel, c: exp.Expr) -> Rel:
        """A top-level [NOT] IN (subquery) or [NOT] EXISTS conjunct as a semi or anti join."""
        anti = isinstance(c, exp.Not)
        inner = c.this if anti else c
        if isinstance(inner, exp.Paren):
            inner = inner.this
        if isinstance(inner, exp.Exists):
            sub, lhs = inner.this, None
        elif isinstance(inner, exp.In) and inner.args.get("query") is not None:
            sub, lhs = inner.args["query"], inner.this
        else:
            raise refused(
                c.sql(dialect="duckdb")[:80],
                "a subquery is maintained only as a top-level AND-ed [NOT] IN / [NOT] EXISTS",
            )
        while isinstance(sub, exp.Subquery):
            sub = sub.this
        local = self.local_aliases(sub)
        where = conjuncts(sub.args.get("where")) if isinstance(sub, exp.Select) else []
        correlated = [w for w in where if any(col.table not in local for col in w.find_all(exp.Column))]
        outer = Render(rel.scope)
        if not correlated:
            right_op, _ = self.query(sub)
            right_scope: Scope = {}
            rhs = q(right_op.columns[0]) if lhs is not None else None
        else:
            if any(sub.args.get(k) for k in ("group", "having", "limit", "distinct", "qualify")) or aggregate_units(
                sub.expressions
            ):
                raise refused(
                    c.sql(dialect="duckdb")[:80],
                    "a correlated subquery with grouping, DISTINCT or LIMIT is not maintained",
                )
            stripped = sub.copy()
            kept = [w for w in where if w not in correlated]
            stripped.set("where", exp.Where(this=exp.and_(*kept)) if kept else None)
            r = self.from_where(stripped, {})
            right_op, right_scope = r.op, r.scope
            rhs = None
            if lhs is not None:
                if len(sub.expressions) != 1:
                    raise refused("IN (subquery)", "the subquery must return one column")
                rhs = Render(r.scope).sql(sub.expressions[0].unalias())
        if lhs is not None and len(right_op.columns) < 1:
            raise refused("IN (subquery)", "the subquery must return one column")
        both = Render({**rel.scope, **right_scope})
        parts = [f"({both.sql(w)})" for w in correlated]
        lk, rk = [], []
        for w in correlated:
            pair = self.equality(w, rel.scope, right_scope)
            if pair:
                lk.append(pair[0])
                rk.append(pair[1])
        if lhs is not None:
            left_sql = outer.sql(lhs)
            if anti:  # x NOT IN S is not TRUE when S holds a NULL or x is NULL (and S is not empty)
                parts.append(f"({rhs} IS NULL OR {left_sql} IS NULL OR {left_sql} = {rhs})")
            else:
                parts.append(f"({left_sql} = {rhs})")
                if isinstance(lhs, exp.Column) and not correlated and rhs.startswith('"'):
                    lk.append(rel.scope[(lhs.table, lhs.name)])
                    rk.append(right_op.columns[0])
        condition = " AND ".join(parts) or "TRUE"
        op = self.add(
            SemiJoin, [rel.op, right_op], rel.op.columns, anti=anti, left_key=lk, right_key=rk, condition=condition
        )
        return Rel(op, rel.scope)

    @staticmethod
    def local_aliases(sub: exp.Expr) -> set[str]:
        if not isinstance(sub, exp.Select):
            return set()
        from_ = sub.args.get("from_") or sub.args.get("from")
        items = ([from_.this] if from_ else []) + [j.this for j in sub.args.get("joins") or []]
        return {i.alias_or_name for i in items}

    # -- SELECT ---------------------------------------------------------------------------------------------
    def select(self, sel: exp.Select, hints: dict[str, int]) -> tuple[Operator, list[str]]:
        for part in sel.expressions + [sel.args.get(k) for k in ("group", "having", "qualify", "order")]:
            if part is not None and self.is_subquery_predicate(part):
                raise refused(
                    part.sql(dialect="duckdb")[:80],
                    "a subquery is maintained only in FROM or as a top-level AND-ed [NOT] IN / [NOT] EXISTS of WHERE",
                )
        from_hints = self.rank_hints(sel)
        rel = self.from_where(sel, from_hints)
        op, render = rel.op, Render(rel.scope)
        order = sel.args.get("order")
        order_exprs = [o.this for o in order.expressions] if order is not None else []
        windows = [
            w
            for e in sel.expressions + ([sel.args["qualify"]] if sel.args.get("qualify") else [])
            for w in e.find_all(exp.Window)
        ]
        window_parts = [
            x
            for w in windows
            for x in (w.args.get("partition_by") or [])
            + ([o.this for o in w.args["order"].expressions] if w.args.get("order") else [])
        ]
        group = sel.args.get("group")
        units = aggregate_units(
            sel.expressions + ([sel.args["having"]] if sel.args.get("having") else []) + window_parts + order_exprs
        )
        if group is not None or units:
            op, render = self.aggregate(rel, group.expressions if group is not None else [], units)
            if sel.args.get("having"):
                op = self.add(Filter, [op], op.columns, predicate=render.sql(sel.args["having"].this))
        elif sel.args.get("having"):
            raise refused("HAVING without aggregation", "not supported")
        if windows:
            op, render = self.top_k(op, render, sel, windows, hints)
        names = [e.alias_or_name for e in sel.expressions]
        exprs = [render.sql(e.unalias()) for e in sel.expressions]
        cols = [self.fresh(n) for n in names]
        limit = sel.args.get("limit")
        hidden: list[str] = []
        by_name = dict(zip(names, cols, strict=True))
        if limit is not None:
            for o in order_exprs:
                if not (isinstance(o, exp.Column) and not o.table and o.name in by_name):
                    col = self.fresh("order_key")
                    hidden.append(col)
                    cols.append(col)
                    exprs.append(render.sql(o))
        distinct = sel.args.get("distinct") is not None
        if distinct and hidden:
            raise refused("SELECT DISTINCT ... ORDER BY", "ORDER BY terms must be in the select list")
        op = self.add(Project, [op], cols, exprs=exprs)
        if distinct:
            op = self.add(Distinct, [op], op.columns)
        if limit is not None:
            keys = iter(hidden)
            order_scope = {("", n): c for n, c in by_name.items()}
            mapped = {}
            for o in order_exprs:
                if not (isinstance(o, exp.Column) and not o.table and o.name in by_name):
                    mapped[o.sql()] = next(keys)
            op = self.limit(op, sel, Render(order_scope, lambda n: mapped.get(n.sql())), by_name, hidden=len(hidden))
        return op, names

    def rank_hints(self, sel: exp.Select) -> dict[str, dict[str, int]]:
        """``alias.col <= k`` (or < k, = 1) conjuncts of WHERE: a bound on a subquery's rank column."""
        hints: dict[str, dict[str, int]] = {}
        for c in conjuncts(sel.args.get("where")):
            bound = self.rank_bound(c, lambda n: isinstance(n, exp.Column) and bool(n.table))
            if bound:
                node, k = bound
                hints.setdefault(node.table, {})[node.name] = k
        return hints

    @staticmethod
    def rank_bound(c: exp.Expr, is_rank: Callable[[exp.Expr], bool]) -> tuple[exp.Expr, int] | None:
        """(rank expression, k) when ``c`` bounds a rank to 1..k."""
        if not isinstance(c, (exp.LTE, exp.LT, exp.EQ, exp.GTE, exp.GT)):
            return None
        a, b = c.this, c.expression
        flip = {exp.GTE: exp.LTE, exp.GT: exp.LT}
        kind = type(c)
        if is_rank(b) and isinstance(a, exp.Literal):
            a, b = b, a
            kind = flip.get(kind, kind) if kind in flip else {exp.LTE: exp.GTE, exp.LT: exp.GT}.get(kind, kind)
        if not is_rank(a) or not isinstance(b, exp.Literal) or b.is_string or not str(b.this).isdigit():
            return None
        k = int(b.this)
        if kind is exp.LTE:
            return a, k
        if kind is exp.LT:
            return a, k - 1
        if kind is exp.EQ and k == 1:
            return a, 1
        return None

    def aggregate(self, rel: Rel, group: list[exp.Expr], units: list[exp.Expr]) -> tuple[Operator, Render]:
        render = Render(rel.scope)
        pre_cols, pre_exprs = [], []
        group_cols = []
        for g in group:
            col = self.fresh("g_" + (g.name if isinstance(g, exp.Column) else "expr"))
            group_cols.append(col)
            pre_cols.append(col)
            pre_exprs.append(render.sql(g))
        specs: list[AggSpec] = []
        by_unit: dict[str, str] = {}
        for u in units:
            agg, filt = (u.this, u.expression) if isinstance(u, exp.Filter) else (u, None)
            name = type(agg).__name__.lower()
            if name not in SUPPORTED:
                raise refused(
                    agg.sql(dialect="duckdb"),
                    "aggregate not maintained (SUM, COUNT, COUNT(*), AVG, MIN, MAX, with DISTINCT or FILTER)",
                )
            arg_node = agg.this
            distinct = isinstance(arg_node, exp.Distinct)
            if distinct:
                if len(arg_node.expressions) != 1:
                    raise refused(agg.sql(dialect="duckdb"), "DISTINCT over several columns")
                arg_node = arg_node.expressions[0]
            arg = None
            if not isinstance(arg_node, exp.Star) and arg_node is not None:
                arg = self.fresh("a_" + name)
                pre_cols.append(arg)
                pre_exprs.append(render.sql(arg_node))
            fcol = None
            if filt is not None:
                fcol = self.fresh("f_" + name)
                pre_cols.append(fcol)
                pre_exprs.append(render.sql(filt.this if isinstance(filt, exp.Where) else filt))
            out = self.fresh(name)
            specs.append(AggSpec(name, arg, distinct, fcol, out))
            by_unit[u.sql()] = out
        if not pre_cols:  # COUNT(*) alone: keep one constant column so the Z-set has a row shape
            pre_cols.append(self.fresh("one"))
            pre_exprs.append("1")
        pre = self.add(Project, [rel.op], pre_cols, exprs=pre_exprs)
        agg_op = self.add(Aggregate, [pre], group_cols + [s.out for s in specs], group=group_cols, aggs=specs)
        by_group = {g.sql(): c for g, c in zip(group, group_cols, strict=True)}

        def replace(n: exp.Expr) -> str | None:
            return by_unit.get(n.sql()) or by_group.get(n.sql())

        return agg_op, Render({}, replace)

    def top_k(
        self, op: Operator, render: Render, sel: exp.Select, windows: list[exp.Window], hints: dict[str, int]
    ) -> tuple[Operator, Render]:
        specs = {w.sql() for w in windows}
        if len(specs) != 1:
            raise refused(windows[0].sql(dialect="duckdb"), "one top-k window per SELECT is maintained")
        w = windows[0]
        if not isinstance(w.this, (exp.RowNumber, exp.Rank, exp.DenseRank)):
            raise refused(
                w.sql(dialect="duckdb"),
                "window functions are maintained only as a top-k (ROW_NUMBER/RANK/DENSE_RANK filtered to <= k)",
            )
        func = {exp.RowNumber: "row_number", exp.Rank: "rank", exp.DenseRank: "dense_rank"}[type(w.this)]
        assert func in RANKERS
        k = None
        for c in conjuncts(sel.args.get("qualify")):
            bound = self.rank_bound(c, lambda n: n.sql() == w.sql())
            if bound:
                k = bound[1] if k is None else min(k, bound[1])
        for e in sel.expressions:
            if isinstance(e, exp.Alias) and e.this.sql() == w.sql() and e.alias in hints:
                k = hints[e.alias] if k is None else min(k, hints[e.alias])
        if k is None:
            raise refused(
                w.sql(dialect="duckdb"),
                "a window function is maintained only when filtered to rank "
                "<= k (QUALIFY, or WHERE on the subquery's rank column)",
            )
        parts = w.args.get("partition_by") or []
        extra_cols, extra_exprs, part_cols = [], [], []
        for p in parts:
            sql = render.sql(p)
            if re.fullmatch(r'"[^"]+"', sql) and sql[1:-1] in op.columns:
                part_cols.append(sql[1:-1])
            else:
                col = self.fresh("p_expr")
                extra_cols.append(col)
                extra_exprs.append(sql)
                part_cols.append(col)
        if extra_cols:
            op = self.add(Project, [op], op.columns + extra_cols, exprs=[q(c) for c in op.columns] + extra_exprs)
        order = (
            [render.node(o).sql(dialect="duckdb") for o in w.args["order"].expressions] if w.args.get("order") else []
        )
        rank = self.fresh("rank")
        topk = self.add(TopK, [op], op.columns + [rank], partition=part_cols, order=order, func=func, limit=k)
        sig = w.sql()
        inner = render

        def replace(n: exp.Expr) -> str | None:
            if n.sql() == sig:
                return rank
            return inner.replace(n) if inner.replace else None

        after = Render(inner.scope, replace)
        if sel.args.get("qualify"):
            topk = self.add(Filter, [topk], topk.columns, predicate=after.sql(sel.args["qualify"].this))
        return topk, after

    def limit(self, op: Operator, node: exp.Expr, render: Render, by_name: dict[str, str], hidden: int) -> Operator:
        """ORDER BY … LIMIT k [OFFSET m] over a whole query: a top-k with no partition, rank dropped."""
        k = int_literal(node.args.get("limit"), "LIMIT")
        offset = int_literal(node.args["offset"], "OFFSET") if node.args.get("offset") else 0
        order = [render.node(o).sql(dialect="duckdb") for o in node.args["order"].expressions]
        rank = self.fresh("rank")
        topk = self.add(
            TopK, [op], op.columns + [rank], partition=[], order=order, func="row_number", limit=k, offset=offset
        )
        keep = op.columns[: len(op.columns) - hidden]
        return self.add(Project, [topk], [self.fresh(c) for c in keep], exprs=[q(c) for c in keep])
