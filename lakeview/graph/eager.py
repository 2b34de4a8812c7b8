"""Eager aggregation: a pass that pushes a GROUP BY's aggregates below its inner joins onto one input.

``SELECT p.category, SUM(o.amount) FROM orders o JOIN products p ON o.product_id = p.product_id GROUP BY 1``
becomes the same query over ``(SELECT o.product_id, SUM(o.amount) AS lv_p0, ... FROM orders o GROUP BY
o.product_id) o``: the joins then keep one row per product instead of one per order, so a product's change
costs per product, not per order. It applies when every aggregate reads only that input and decomposes
(SUM, COUNT, COUNT(*), AVG, MIN, MAX, each with a FILTER; not DISTINCT), every join is INNER, and no subquery
predicate is involved; a window only as a ranking (ROW_NUMBER, RANK, DENSE_RANK) of the groups, as a top-k
per group has (its PARTITION BY and ORDER BY read the group keys and aggregates, which keep their meaning). The input's columns used anywhere else become the pre-aggregate's keys.
With more than one join, each further join but the last is folded into the pre-aggregate in turn (``_fold``,
largest dimension first), so a star's chain re-aggregates after every join: orders by (product, customer)
→ ⋈ customers by (product, region) → ⋈ products by (category, region) → ⋈ regions, then the view's GROUP BY.
"""

from __future__ import annotations

from sqlglot import exp

from lakeview.graph.passes import conjuncts

DECOMPOSABLE = (exp.Sum, exp.Count, exp.Avg, exp.Min, exp.Max)


def eager_aggregation(tree: exp.Expr, sizes: dict[str, int], mode: bool | None) -> exp.Expr:
    """Rewrite every eligible SELECT; ``mode`` None: only when ``sizes`` show the pushed-to input is the largest."""
    if mode is False:
        return tree
    for select in list(tree.find_all(exp.Select)):
        _rewrite(select, sizes, mode)
    return tree


def _units(select: exp.Select) -> list[exp.Expr]:
    found = []
    roots = select.expressions + [select.args[k] for k in ("having", "order", "qualify") if select.args.get(k)]
    for root in roots:
        for node in root.walk():
            if isinstance(node.parent, exp.Window) and node is node.parent.this:
                continue  # the window's own function (RANK() is an AggFunc to sqlglot), not the GROUP BY's
            unit = isinstance(node, exp.Filter) and isinstance(node.this, exp.AggFunc)
            if unit or (isinstance(node, exp.AggFunc) and not isinstance(node.parent, exp.Filter)):
                found.append(node)
    return found


def _ranks_groups(select: exp.Select) -> bool:
    """Whether every window of ``select`` ranks its groups (ROW_NUMBER / RANK / DENSE_RANK over a GROUP BY):
    computed after the aggregates, it reads the same group keys and aggregate values however they are
    computed. (An aggregate over a window, ``SUM(x) OVER (…)``, would be taken for the GROUP BY's.)"""
    windows = list(select.find_all(exp.Window))
    ranks = (exp.RowNumber, exp.Rank, exp.DenseRank)
    return not windows or (select.args.get("group") is not None and all(isinstance(w.this, ranks) for w in windows))


def _rewrite(select: exp.Select, sizes: dict[str, int], mode: bool | None) -> None:
    from_ = select.args.get("from_") or select.args.get("from")
    joins = select.args.get("joins") or []
    if (
        from_ is None
        or not joins
        or any((j.side or "") or (j.args.get("kind") or "").upper() not in ("", "INNER") for j in joins)
    ):
        return
    if select.args.get("limit") or not _ranks_groups(select):
        return
    if select.args.get("group") is None and not _units(select):
        return
    items = [from_.this] + [j.this for j in joins]
    if not all(isinstance(i, exp.Table) for i in items):
        return
    if any(isinstance(n, (exp.Subquery, exp.Exists)) for n in select.walk() if n is not select):
        return
    units = _units(select)
    if not units:
        return
    aliases: set[str] = set()
    for u in units:
        agg = u.this if isinstance(u, exp.Filter) else u
        if not isinstance(agg, DECOMPOSABLE) or isinstance(agg.this, exp.Distinct):
            return
        aliases |= {c.table for c in u.find_all(exp.Column)}
    by_alias = {i.alias_or_name: i for i in items}
    if len(aliases) > 1:  # e.g. SUM(o.qty * p.price): the fact is the largest by size hint, else the FROM input
        first = from_.this.alias_or_name
        fact_alias = max(sorted(aliases, key=lambda a: a != first), key=lambda a: sizes.get(by_alias[a].name, 0))
        if any(_split(u, {fact_alias}) is None for u in units):
            return
    elif aliases:
        fact_alias = aliases.pop()
    else:  # COUNT(*) alone: the largest input by size hint, else the first
        fact_alias = max(by_alias, key=lambda a: sizes.get(by_alias[a].name, 0))
    fact = by_alias[fact_alias]
    if mode is None and (fact.name not in sizes or any(sizes.get(i.name, 0) > sizes[fact.name] for i in items)):
        return
    # WHERE conjuncts on the fact input alone move into the pre-aggregate
    where = conjuncts(select.args.get("where"))
    inner_where = [c for c in where if {col.table for col in c.find_all(exp.Column)} == {fact_alias}]
    outer_where = [c for c in where if c not in inner_where]
    # the fact input's columns used outside its aggregates are the pre-aggregate's keys
    unit_ids = {id(n) for u in units for n in u.walk()}
    keys: dict[str, exp.Column] = {}
    rest = (
        [select.args.get("where") and exp.and_(*outer_where) if outer_where else None, select.args.get("group")]
        + select.expressions
        + [j.args.get("on") for j in joins]
        + [select.args.get("having"), select.args.get("order"), select.args.get("qualify")]
    )
    for root in rest:
        if root is None:
            continue
        for col in root.find_all(exp.Column):
            if col.table == fact_alias and id(col) not in unit_ids:
                keys.setdefault(col.name, col)
    if not keys:  # nothing joins on the fact: a global pre-aggregate would be one row even over no facts
        return
    partials, replacements = _decompose(units, fact_alias, split=True)
    pre = exp.select(*[exp.alias_(exp.column(k, table=fact_alias), k) for k in keys], *partials).from_(fact.copy())
    if inner_where:
        pre = pre.where(exp.and_(*inner_where))
    if keys:
        pre = pre.group_by(*[exp.column(k, table=fact_alias) for k in keys])
    for u in units:
        u.replace(replacements[id(u)])
    fact.replace(exp.Subquery(this=pre, alias=exp.TableAlias(this=exp.to_identifier(fact_alias))))
    select.set("where", exp.Where(this=exp.and_(*outer_where)) if outer_where else None)
    while _fold(select, fact_alias, sizes):
        pass


def _split(unit: exp.Expr, inside: set[str]) -> tuple[exp.Expr | None, exp.Expr | None] | None:
    """An aggregate's argument as (the factor computed below, from the ``inside`` inputs; the factor left
    above, from the others): a SUM of a product whose factors each read one side only (``SUM(o.qty * p.price)``
    = ``SUM(SUM(o.qty) * p.price)`` over groups that share their join keys), or any aggregate reading the
    inside inputs only (nothing above). None when it cannot be split (a FILTER or another aggregate reading
    an outside input, a SUM of a sum of both, no factor from inside)."""
    agg, filt = (unit.this, unit.expression) if isinstance(unit, exp.Filter) else (unit, None)

    def reads(node: exp.Expr) -> set[str]:
        return {c.table for c in node.find_all(exp.Column)}

    if filt is not None and not reads(filt) <= inside:
        return None
    arg = agg.this
    if arg is None or reads(arg) <= inside:
        return (arg, None)
    if not isinstance(agg, exp.Sum):
        return None
    factors: list[exp.Expr] = []
    pending = [arg.unnest()]
    while pending:
        node = pending.pop()
        if isinstance(node, exp.Mul):
            pending += [node.this.unnest(), node.expression.unnest()]
        else:
            factors.append(node)
    below = [f for f in factors if reads(f) and reads(f) <= inside]
    above = [f for f in factors if f not in below]
    if not below or any(reads(f) & inside for f in above):
        return None

    def product(parts: list[exp.Expr]) -> exp.Expr:
        out = parts[0].copy()
        for part in parts[1:]:
            out = exp.Mul(this=out, expression=part.copy())
        return out

    return (product(below), product(above))


def _decompose(
    units: list[exp.Expr], fact_alias: str, split: bool = False
) -> tuple[list[exp.Expr], dict[int, exp.Expr]]:
    """Each aggregate as partial aggregates (computed below, named lv_*) and the outer aggregate over them;
    ``split``: a SUM's factors from other inputs than the fact stay above (:func:`_split`)."""
    partials: list[exp.Expr] = []
    replacements: dict[int, exp.Expr] = {}
    first: dict[str, exp.Expr] = {}  # equal aggregates (a window's ORDER BY SUM(x) repeated in QUALIFY) stay equal
    for i, u in enumerate(units):
        if u.sql() in first:
            replacements[id(u)] = replacements[id(first[u.sql()])].copy()
            continue
        first[u.sql()] = u
        above = _split(u, {fact_alias}) if split else None
        if above is not None and above[1] is not None:
            filt = u.expression if isinstance(u, exp.Filter) else None
            node = exp.Sum(this=above[0])
            partials.append(exp.alias_(exp.Filter(this=node, expression=filt.copy()) if filt else node, f"lv_s{i}"))
            replacements[id(u)] = exp.Sum(
                this=exp.Mul(this=exp.column(f"lv_s{i}", table=fact_alias), expression=above[1])
            )
            continue
        agg, filt = (u.this, u.expression) if isinstance(u, exp.Filter) else (u, None)

        def partial(func: exp.Expr, name: str, filt: exp.Expr | None = filt) -> exp.Column:
            node = exp.Filter(this=func, expression=filt.copy()) if filt is not None else func
            partials.append(exp.alias_(node, name))
            return exp.column(name, table=fact_alias)

        arg = agg.this
        if isinstance(agg, exp.Count):
            c = partial(exp.Count(this=arg.copy() if arg is not None else exp.Star()), f"lv_n{i}")
            new: exp.Expr = exp.cast(exp.func("COALESCE", exp.Sum(this=c), exp.Literal.number(0)), "BIGINT")
        elif isinstance(agg, exp.Sum):
            new = exp.Sum(this=partial(exp.Sum(this=arg.copy()), f"lv_s{i}"))
        elif isinstance(agg, (exp.Min, exp.Max)):
            new = type(agg)(this=partial(type(agg)(this=arg.copy()), f"lv_m{i}"))
        else:  # AVG = total / count over the partials
            s = partial(exp.Sum(this=arg.copy()), f"lv_s{i}")
            n = partial(exp.Count(this=arg.copy()), f"lv_n{i}")
            new = exp.Div(
                this=exp.cast(exp.Sum(this=s), "DOUBLE"),
                expression=exp.func("NULLIF", exp.Sum(this=n), exp.Literal.number(0)),
            )
        replacements[id(u)] = new
    return partials, replacements


def _fold(select: exp.Select, fact_alias: str, sizes: dict[str, int]) -> bool:
    """Fold one more inner join into the pre-aggregated fact: ``(pre) f JOIN d ON …`` becomes
    ``(SELECT keys, partials FROM (pre) f JOIN d ON … GROUP BY keys) f``, keys being the columns of f and d
    used anywhere else. Each fold re-aggregates, so the next join (and its state) sees one row per group of
    what is still needed (later join keys, GROUP BY columns), not one per fact group: a dimension row's
    change then costs per the groups under its key. The largest dimension (by ``sizes``) folds first, the
    one whose key splits the facts finest. False when no join qualifies (its ON reads only f and d); the
    last join stays in the outer query, which groups as the view does."""
    from_ = select.args.get("from_") or select.args.get("from")
    joins = select.args.get("joins") or []
    if len(joins) < 2 or from_ is None or from_.this.alias_or_name != fact_alias:
        return False
    candidates = []
    for join in joins:
        on, alias = join.args.get("on"), join.this.alias_or_name
        refs = {c.table for c in on.find_all(exp.Column)} if on is not None else set()
        if isinstance(join.this, exp.Table) and fact_alias in refs and refs <= {fact_alias, alias}:
            candidates.append(join)
    units = _units(select)
    # an aggregate reading a dimension (SUM(f.lv_s0 * p.price)) folds only with that dimension's join
    others = {c.table for u in units for c in u.find_all(exp.Column)} - {fact_alias}
    candidates = [j for j in candidates if others <= {j.this.alias_or_name}]
    if not candidates or not units:
        return False
    dim = max(candidates, key=lambda j: sizes.get(j.this.name, 0))
    pair = {fact_alias, dim.this.alias_or_name}
    where = conjuncts(select.args.get("where"))
    inner_where = [c for c in where if {col.table for col in c.find_all(exp.Column)} <= pair]
    outer_where = [c for c in where if c not in inner_where]
    unit_ids = {id(n) for u in units for n in u.walk()}
    outer = exp.and_(*outer_where) if outer_where else None
    rest = (
        [outer, select.args.get("group")]
        + select.expressions
        + [j.args.get("on") for j in joins if j is not dim]
        + [select.args.get("having"), select.args.get("order"), select.args.get("qualify")]
    )
    used: dict[tuple[str, str], exp.Column] = {}
    for root in rest:
        for col in root.find_all(exp.Column) if root is not None else []:
            if col.table in pair and id(col) not in unit_ids:
                used.setdefault((col.table, col.name), col)
    if not used:  # as above: an ungrouped pre-aggregate has a row even when the join is empty
        return False
    names = [n for _, n in used]
    key_names = {k: k[1] if names.count(k[1]) == 1 else f"{k[0]}_{k[1]}" for k in used}
    partials, replacements = _decompose(units, fact_alias)
    pre = exp.select(*[exp.alias_(exp.column(c, table=t), key_names[(t, c)]) for t, c in used], *partials).from_(
        from_.this.copy()
    )
    pre = pre.join(dim.this.copy(), on=dim.args["on"].copy())
    if inner_where:
        pre = pre.where(exp.and_(*inner_where))
    if used:
        pre = pre.group_by(*[exp.column(c, table=t) for t, c in used])
    for u in units:
        u.replace(replacements[id(u)])
    for root in rest:
        for col in list(root.find_all(exp.Column)) if root is not None else []:
            if (col.table, col.name) in key_names:
                col.replace(exp.column(key_names[(col.table, col.name)], table=fact_alias))
    from_.this.replace(exp.Subquery(this=pre, alias=exp.TableAlias(this=exp.to_identifier(fact_alias))))
    joins.remove(dim)
    select.set("joins", joins)
    select.set("where", exp.Where(this=outer) if outer is not None else None)
    return True
