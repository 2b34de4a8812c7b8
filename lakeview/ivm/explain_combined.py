"""``lakeview explain`` for views over several sources: the join or UNION ALL operator, its
state and key, then the top operator (no Spark, no catalog needed)."""

from __future__ import annotations

from lakeview.config.models import ProjectConfig
from lakeview.ivm.combine import side_table_names, source_mirror_name
from lakeview.ivm.explain_lines import HOW_MAINTAINED, batch_lines, published_lines
from lakeview.ivm.zsets import state_table_names
from lakeview.sql.dag import output_key, view_key
from lakeview.sql.joins import JoinPlan
from lakeview.sql.plan import AppendPlan, KeyedAggregatePlan
from lakeview.sql.union import UnionPlan


def explain_combined(project: ProjectConfig, view: str, plan: JoinPlan | UnionPlan) -> str:

    config = project.views[view]
    ns = config.namespace
    step = iter(range(1, 100))
    lines = [f"view {view} ({plan.kind}) -> {ns}.{view}, cadence {config.cadence}"]
    reads = []
    feeds, deleting = set(), set()
    for source in plan.sources:
        cfg = project.sources.get(source)
        if cfg is None:  # an upstream view (lakeview.sql.dag): its published changes, rows weighted -1/+1
            key = view_key(project, source)
            reads.append(
                f"the view {source} (its change per epoch, Z-set files with weights -1/+1"
                f"{', key ' + ', '.join(key) if key else ''}, in _lakeview/changes/{source}/{view}/)"
            )
            deleting.add(source)
            continue
        kind = "append-only"
        if cfg.changes is not None:
            kind = f"change feed: operation {cfg.changes.operation}, key {', '.join(cfg.changes.key)}"
            feeds.add(source)
        elif cfg.images is not None:
            kind = f"change feed of images, key {', '.join(cfg.images.key)}"
        if cfg.changes is not None or cfg.images is not None:
            deleting.add(source)
        reads.append(f"{source} ({cfg.format.value} files, {kind})")
    lines.append(
        f"  {next(step)}. read {' and '.join(reads)}: ONE Spark query over the union of their file streams, "
        "only new files per trigger; the frontier records every source's position"
    )
    lines.append(f"  {next(step)}. quarantine per source -> _lakeview/quarantine/<source>/{view}/ (stateless)")
    state: list[str] = []
    for source in sorted(feeds):
        mirror = f"{ns}.{source_mirror_name(view, source)}"
        lines.append(
            f"  {next(step)}. {source} changes -> Z-set: newest change per key (Spark), old image from the mirror {mirror}"
        )
        state.append(f"{mirror} (current row per {source} key)")
    if isinstance(plan, JoinPlan):
        a, b = plan.sides
        on = " AND ".join(f"{a.alias}.{x} = {b.alias}.{y}" for x, y in zip(a.key, b.key))
        lines.append(
            f"  {next(step)}. join {a.source} ⋈ {b.source} ({plan.how}) ON {on}: join state per side, looked up by the "
            "join keys the epoch touches only; Δ(A⋈B) = ΔA⋈B_old + A_old⋈ΔB + ΔA⋈ΔB"
        )
        for side, table in zip(plan.sides, side_table_names(view, plan)):
            lines.append(
                f"       {side.alias}: {ns}.{table} (key {', '.join(side.key)}; columns {', '.join(side.columns)}; multiplicity __lv_n)"
            )
            state.append(f"{ns}.{table} (join state of {side.source}: rows by join key, with multiplicity)")
        if plan.how == "left":
            lines.append(
                "       LEFT: a left row is NULL-extended while its key has no match; those rows are retracted or "
                "re-emitted exactly when the key's match count crosses 0"
            )
    else:
        branches = "; ".join(f"{b.sources[0]}{' WHERE ' + b.where if b.where else ''}" for b in plan.branches)
        lines.append(
            f"  {next(step)}. UNION ALL of {len(plan.branches)} projections ({branches}): stateless, weights carried along"
        )
    top = plan.top
    if isinstance(top, KeyedAggregatePlan):
        if top.where:
            lines.append(f"  {next(step)}. filter WHERE {top.where}: stateless, per weighted row")
        names = state_table_names(view, top)
        lines.append(
            f"  {next(step)}. aggregate GROUP BY {', '.join(top.key_exprs)}: keyed aggregate, state looked up by touched group only"
        )
        for slot in top.slots:
            where = f"{ns}.{names[0]}" if slot.multiset is None else f"{ns}.{names[slot.multiset + 1]}"
            lines.append(
                f"       {slot.function.value.upper()}({slot.argument or '*'}): {HOW_MAINTAINED[slot.function]} [{where}]"
            )
        state = [f"{ns}.{names[0]} (group state)"] + [f"{ns}.{n} (value multiset)" for n in names[1:]] + state
    elif isinstance(top, AppendPlan):
        if top.where:
            lines.append(f"  {next(step)}. filter WHERE {top.where}: stateless, per weighted row")
        lines.append(f"  {next(step)}. project {', '.join(top.columns)}: stateless")
    key = output_key(plan, deleting)
    if isinstance(top, KeyedAggregatePlan):
        how = "upsert/delete by the group key"
    elif key is None:
        how = "append (inputs append-only and no LEFT join: rows are never retracted)"
    else:
        how = "multiset upsert/delete keyed by the whole row (rows can be retracted)"
    lines.append(
        f"  {next(step)}. write: {how}, one snapshot per epoch (the view and its state, then the join state, then mirrors)"
    )

    windowed = plan.top is not None and plan.top.window is not None
    lines += batch_lines(project, "an event-time window over a join or union" if windowed else None)
    lines = [_original(plan, line) for line in lines]

    return "\n".join(
        lines
        + [f"key: {', '.join(key) if key else 'none (append-only)'}", f"state: {'; '.join(state) or 'none'}"]
        + published_lines(project, view)
    )


def _original(plan: JoinPlan | UnionPlan, line: str) -> str:
    """Column names of the joined relation (``p__category``) as the SQL wrote them (``p.category``)."""
    if isinstance(plan, JoinPlan):
        for side in plan.sides:
            for column in side.columns:
                joined = f"{side.alias}__{column}"
                line = line.replace(f"`{joined}`", f"{side.alias}.{column}").replace(joined, f"{side.alias}.{column}")
    return line
