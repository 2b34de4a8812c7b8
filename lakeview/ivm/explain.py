"""``lakeview explain VIEW``: a one-source view's incremental plan as text: one header, the shape's operators and how each is maintained, the
view's key and the state kept, then who reads its changes (no Spark, no catalog needed). A view kept as
an operator graph is explained from its compiled graph (``lakeview.project.explain_view``, which
explains any view: it needs the sources' schemas, which live above this layer)."""

from __future__ import annotations

from collections.abc import Iterator

from lakeview.config.models import ProjectConfig
from lakeview.errors import UnsupportedSQLError
from lakeview.ivm.changefeed import mirror_table_name
from lakeview.ivm.explain_lines import HOW_MAINTAINED, batch_lines, published_lines
from lakeview.sql.dag import upstream_of, view_key
from lakeview.sql.graph_plan import GraphPlan
from lakeview.sql.groups import group_lines
from lakeview.sql.plan import AppendPlan, KeyedAggregatePlan
from lakeview.sql.planner import view_plan
from lakeview.sql.watermark import event_column

Shape = tuple[list[str], str, list[str]]  # the lines so far, the view's key, the state tables


def state_table_names(view: str, plan: KeyedAggregatePlan) -> list[str]:
    """Names of a one-source aggregate's state tables: group state, then one per value multiset."""
    return [f"__lv_state_{view}_{i}" for i in range(1 + len(plan.multisets))]


def explain(project: ProjectConfig, view: str) -> str:
    """The plan of ``view`` as a human-readable text. Raises :class:`UnsupportedSQLError` (the per-shape
    planner's refusal) for a view kept as an operator graph."""
    config = project.views[view]
    plan = view_plan(project, view)
    if isinstance(plan, GraphPlan):
        raise UnsupportedSQLError(plan.refusal)
    lines = [f"view {view} ({plan.kind}) -> {config.namespace}.{view}, cadence {config.cadence}"]
    step = iter(range(1, 100))
    lines, key, state = _one_source(project, view, plan, lines, step)
    return "\n".join(
        lines
        + [f"key: {key}", f"state: {'; '.join(state) or 'none'}"]
        + published_lines(project, view)
        + group_lines(project, view)
    )


def _one_source(
    project: ProjectConfig, view: str, plan: AppendPlan | KeyedAggregatePlan, lines: list[str], step: Iterator[int]
) -> Shape:
    """A view over one source (or one upstream view): read, quarantine, the feed's Z-set, the operators."""
    config = project.views[view]
    source_name = plan.sources[0]
    upstream = upstream_of(project, view)  # a view over a view reads the upstream's change files
    upstream_key = view_key(project, upstream) if upstream else None
    source = project.sources.get(source_name)
    feed = source.changes if source else None
    ns = config.namespace
    images = source.images if source else None
    kind = (
        f"change feed: operation {feed.operation}, key {', '.join(feed.key)}, sequence {feed.sequence}"
        if feed
        else "append-only"
    )
    if images is not None:
        kind = f"change feed of images: before {images.before}, after {images.after}, key {', '.join(images.key)}"
    if source is None:
        key = f"key {', '.join(upstream_key)}" if upstream_key else "append-only, all +1"
        lines.append(
            f"  {next(step)}. read the view {upstream}: its change per epoch, Z-set files (weights -1/+1, {key}) in "
            f"_lakeview/changes/{upstream}/, published after each of its commits; Spark file stream, only new files per trigger"
        )
    else:
        lines.append(
            f"  {next(step)}. read {source_name} ({source.format.value} files, {kind}): Spark file stream, only new files per trigger"
        )
    reasons = (
        ["rows that do not parse into the schema"] if source and source.format.reader_format in ("json", "csv") else []
    )
    reasons += [f"rows missing {c}" for c in (source.required if source else [])] + (
        ["unknown operations"] if feed else []
    )
    if reasons:
        lines.append(
            f"  {next(step)}. quarantine: {', '.join(reasons)} -> _lakeview/quarantine/{source_name}/{view}/ (stateless)"
        )
    if feed:
        lines.append(
            f"  {next(step)}. changes -> Z-set: newest change per key in the batch (Spark), old image from the mirror "
            f"{ns}.{mirror_table_name(view)} looked up by touched key: old row weight -1, new image +1"
        )
    if images is not None:
        lines.append(
            f"  {next(step)}. images -> Z-set (Spark): before image weight -1, after image +1; no mirror needed"
        )
    if config.watermark:
        lines.append(
            f"  {next(step)}. watermark {config.watermark} on {event_column(plan, config.event_time)}: a row older than the max event "
            "time consumed in committed epochs minus the delay is late -> quarantine (reason 'late: ...'), counted "
            "(lakeview.rows-late); recorded on each commit (lakeview.watermark-us, lakeview.max-event-time-us)"
        )
    if plan.where:
        lines.append(f"  {next(step)}. filter WHERE {plan.where}: stateless, per weighted row")
    window = getattr(plan, "window", None)
    if window is not None:
        lines.append(
            f"  {next(step)}. window: {window.describe()} (stateless expansion, weight carried; bounds are key columns)"
        )
    if isinstance(plan, AppendPlan):
        lines.append(f"  {next(step)}. project {', '.join(plan.columns) or '*'}: stateless")
        if upstream_key:
            fkey = ", ".join(upstream_key)
            lines.append(f"  {next(step)}. write: upsert/delete by {upstream}'s key ({fkey}), one snapshot per epoch")
            lines += batch_lines(project)
            key, state = fkey, []
        elif feed or images:
            fkey = ", ".join(feed.key if feed else images.key)  # type: ignore[union-attr]
            lines.append(f"  {next(step)}. write: upsert/delete by the feed key ({fkey}), one snapshot per epoch")
            lines += batch_lines(project)
            key, state = fkey, [f"{ns}.{mirror_table_name(view)} (current row per key)"] if feed else []
        else:
            lines.append(f"  {next(step)}. write: append, one snapshot per epoch")
            lines.append(
                f"       a batch of more than {project.spark.driver_rows_max} input rows ([spark] driver_rows_max): its data files "
                "are written by the Spark executors, the driver commits only their metadata"
            )
            key, state = "none (append-only)", []
        return lines, key, state
    assert isinstance(plan, KeyedAggregatePlan)
    append_only = feed is None and images is None and upstream_key is None
    in_view = plan.view_is_state(append_only=append_only)
    plan = plan.model_copy(update={"append_only": append_only})  # as the pipeline runs it (extremes_only)
    if plan.keys:
        group_by = ", ".join(
            dict(zip(plan.key_exprs, plan.keys)).get(e, e) if e.startswith("__lv_w") else e for e in plan.key_exprs
        )
        lines.append(
            f"  {next(step)}. aggregate GROUP BY {group_by}: keyed aggregate, state looked up by touched group only"
        )
    else:
        lines.append(
            f"  {next(step)}. global aggregate (no GROUP BY): one row, present also over no rows (COUNT 0, SUM NULL)"
        )
    if in_view:
        for agg in plan.aggregates:
            lines.append(
                f"       {agg.column} = {agg.function.value.upper()}: merged into the stored view row (append-only input)"
            )
        state = [f"{ns}.{view} itself (every output is mergeable)"]
    else:
        names = state_table_names(view, plan)
        if plan.keys:
            lines.append(f"       hidden row count __lv_rows: a group at 0 leaves the view ({ns}.{names[0]})")
        else:
            lines.append(f"       hidden row count __lv_rows: the one state row, kept at 0 ({ns}.{names[0]})")
        for slot in plan.slots:
            where = f"{ns}.{names[0]}" if slot.multiset is None else f"{ns}.{names[slot.multiset + 1]}"
            arg = slot.argument or "*"
            lines.append(f"       {slot.function.value.upper()}({arg}): {HOW_MAINTAINED[slot.function]} [{where}]")
        outputs = ", ".join(name for name, _ in plan.outputs)
        lines.append(f"  {next(step)}. finalize {outputs} from the touched groups' state (DuckDB)")
        if plan.having:
            lines.append(
                f"  {next(step)}. HAVING: re-evaluated per touched group; a group enters or leaves the view as it flips"
            )
        state = [f"{ns}.{names[0]} (group state: key, __lv_rows, sums and counts)"]
        state += [
            f"{ns}.{names[i + 1]} (value multiset of {arg}: key, __lv_v, __lv_n"
            + (
                "; only each group's lowest and highest value: append-only input, read by MIN/MAX only)"
                if plan.extremes_only(i)
                else ")"
            )
            for i, arg in enumerate(plan.multisets)
        ]
        if feed:
            state.append(f"{ns}.{mirror_table_name(view)} (current row per feed key)")
    if window is not None and config.watermark and not in_view:
        state.append(
            "state rows of windows ending at or before the watermark are deleted (bounded); their view rows stay"
        )
    if not plan.keys:
        lines.append(
            f"  {next(step)}. write: the one row replaced, one snapshot per epoch (state tables first, the view, then the mirror)"
        )
    else:
        lines.append(
            f"  {next(step)}. write: upsert/delete by key, one snapshot per epoch (state tables first, the view, then the mirror)"
        )
    lines += batch_lines(project)
    if config.format.value == "iceberg":
        lines.append(
            f"       stored rows of the touched keys: found by the driver's key index up to {project.spark.driver_keys_max} rows "
            "per table, past that read only by the Spark executors ([spark] driver_keys_max)"
        )
    return lines, ", ".join(plan.keys) or "none (one row)", state
