"""A view's event-time watermark: which rows are late, and which window state can go.

``watermark = "10 minutes"`` on a view: the watermark applied to an epoch is the greatest
event time of the rows the view consumed in the *committed* epochs before it, minus the
delay. A row older than it is late: quarantined (reason names the watermark), counted
(``lakeview.rows-late``), left out of the view. Consumed rows are those well-formed, on time,
with an event time and passing the view's WHERE: exactly the rows that reach the view, so an
epoch that commits nothing never moves the watermark (and a restart recovers it exactly).

Each commit of the view and of its state tables carries ``lakeview.watermark-us`` (the
watermark applied to that epoch) and ``lakeview.max-event-time-us`` (after it), so a restart
resumes the rule, a replayed epoch applies the same watermark as its first run, and
``lakeview verify`` replays it batch by batch over the same files. A window whose end is at
or before the watermark can get no more rows: its state rows are deleted from the state
tables in the next epoch's commit (bounded state); its view row stays.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from lakeview.windows import END, START, parse_interval

APPLIED = "lakeview.watermark-us"
MAX_EVENT = "lakeview.max-event-time-us"
LATE = "lakeview.rows-late"


def delay_us(text: str) -> int:
    """Microseconds of a watermark delay ('10 minutes', '30 seconds', '1 hour')."""
    return parse_interval(text)


def event_column(plan, declared: str | None) -> str | None:
    """The view's event-time column (unqualified): declared, else its window's time column."""
    if declared:
        return declared
    window = getattr(plan, "window", None)
    return window.time_column.split(".")[-1].strip("`") if window is not None else None


def check(plan, watermark: str | None, event_time: str | None, append_only: bool) -> str | None:
    """What is wrong with a view's watermark settings, or None."""
    if watermark is None:
        return "event_time is set without a watermark; add watermark = \"10 minutes\"" if event_time else None
    try:
        delay_us(watermark)
    except ValueError as exc:
        return str(exc)
    if event_column(plan, event_time) is None:
        return "a watermark needs an event-time column: GROUP BY window(ts, ...) or event_time = \"ts\""
    if not append_only:
        return "a watermark needs an append-only source (a change feed may retract rows of windows already closed)"
    if not getattr(plan, "is_keyed_aggregate", False) and not getattr(plan, "is_append", False):
        return "a watermark applies to a view over one source"
    return None


@dataclass
class Watermark:
    """The rule's progress for one view, recovered from its tables' last commits."""

    delay_us: int
    column: str
    last_epoch: int | None = None
    applied_us: int | None = None  # watermark applied to ``last_epoch``
    max_event_us: int | None = None  # after ``last_epoch``

    @classmethod
    def recover(cls, delay: int, column: str, records: list) -> Watermark:
        stamped = [r for r in records if r is not None and MAX_EVENT in r.extra]
        state = cls(delay, column)
        if stamped:
            last = max(stamped, key=lambda r: r.epoch)
            state.last_epoch = last.epoch
            state.applied_us = int(last.extra[APPLIED]) if last.extra.get(APPLIED) not in (None, "") else None
            state.max_event_us = int(last.extra[MAX_EVENT]) if last.extra[MAX_EVENT] != "" else None
        return state

    def for_epoch(self, epoch: int) -> int | None:
        """The watermark (µs since the epoch) applied to ``epoch``: a replay of the last
        committed epoch gets the one it had, a new epoch the one after it."""
        if self.last_epoch is not None and epoch <= self.last_epoch:
            return self.applied_us
        return None if self.max_event_us is None else self.max_event_us - self.delay_us

    def advance(self, epoch: int, applied: int | None, batch_max: int | None) -> dict[str, str]:
        """Record an epoch's outcome; the summary keys its commits carry."""
        if batch_max is not None:
            self.max_event_us = batch_max if self.max_event_us is None else max(self.max_event_us, batch_max)
        self.last_epoch, self.applied_us = epoch, applied
        return {APPLIED: "" if applied is None else str(applied), MAX_EVENT: "" if self.max_event_us is None else str(self.max_event_us)}

    def late_sql(self, applied: int | None, dialect: str = "spark") -> str | None:
        """A condition true for a late row (None: no watermark yet)."""
        if applied is None:
            return None
        micros = "unix_micros" if dialect == "spark" else "epoch_us"
        return f"{micros}(`{self.column}`) < {applied}" if dialect == "spark" else f'{micros}("{self.column}") < {applied}'

    def reason(self, applied: int) -> str:
        return f"late: {self.column} older than the watermark {_iso(applied)} (max event time - {self.delay_us // 1_000_000}s)"


def closed_windows(plan, bound_us: int | None) -> Callable | None:
    """For :func:`lakeview.ivm.apply_epoch`: a state table's rows whose window ended at or
    before ``bound_us`` (None when there is nothing to drop)."""
    window = getattr(plan, "window", None)
    if window is None or bound_us is None:
        return None
    names = dict(zip(plan.key_exprs, plan.keys))
    if END in names:
        column, bound = names[END], bound_us
    elif START in names:
        column, bound = names[START], bound_us - window.size_us
    else:
        return None

    def rows(writer) -> pa.Table:
        return writer.rows_ending_by(column, bound)

    return rows


def _iso(micros: int) -> str:
    import datetime as dt

    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)).isoformat(sep=" ") + " UTC"


def on_time_relation(con, checkpoint, files: list, relation_of: Callable[[list], str], wm: Watermark, alias: str, where: str | None) -> str:
    """DuckDB SQL: the rows of ``files`` that were on time, for the oracle. The rule is replayed
    batch by batch in the order Spark took the files in (its file-source log in the view's
    checkpoint): independent of what the pipeline quarantined, so a wrong late decision shows
    up as a difference. ``relation_of(files)`` reads files as the pipeline does; ``where`` is
    the view's WHERE in DuckDB SQL."""
    from lakeview.source_log import logged_files

    batch_of = {str(f.path): f.batch for f in logged_files(checkpoint)}
    batches: dict[int, list] = {}
    for path in files:
        batches.setdefault(batch_of.get(str(path), 1 << 62), []).append(path)  # unlogged files: after every batch
    column = f'"{wm.column}"'
    high: int | None = None
    parts = []
    for number in sorted(batches):
        relation = relation_of(batches[number])
        if high is not None:
            relation = f"SELECT * FROM ({relation}) WHERE NOT coalesce(epoch_us({column}) < {high - wm.delay_us}, false)"
        consumed = con.execute(f"SELECT max(epoch_us({column})) FROM ({relation}) AS {alias} WHERE {where or 'TRUE'}").fetchone()[0]
        if consumed is not None:
            high = consumed if high is None else max(high, consumed)
        parts.append(relation)
    return " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts) if parts else relation_of([])
