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

Over a change feed (an operation column) the rule applies to a change's *images*, after the
mirror lookup (:mod:`spark_jobs.graph_watermark`): the new image of an
insert or update and the old image an update or delete retracts. An image older than the
watermark is late: left out of the Z-set (never applied to a closed window's state), set
aside and counted like a late append row; the others are applied exactly. The mirror still
follows the source, so a later change of that key retracts what the source holds. Only new
images consumed move the watermark: an old image applied was consumed as a new image when it
arrived, so a delete can never move it.

A before/after-image feed ([images]) carries the old image in the row (no mirror): its batch's
Z-set (before -1, after +1) is first consolidated, so an image that a later change of the same
batch retracts again cancels, as only the newest change per key counts over an operation
column; then each image is judged by the same rule.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from lakeview.ops.source_log import logged_files
from lakeview.sql.duck import arrow_sql
from lakeview.sql.plan import WEIGHT
from lakeview.sql.windows import parse_interval

APPLIED = "lakeview.watermark-us"
MAX_EVENT = "lakeview.max-event-time-us"
LATE = "lakeview.rows-late"


def delay_us(text: str) -> int:
    """Microseconds of a watermark delay ('10 minutes', '30 seconds', '1 hour')."""
    return parse_interval(text)


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
        return {
            APPLIED: "" if applied is None else str(applied),
            MAX_EVENT: "" if self.max_event_us is None else str(self.max_event_us),
        }

    def late_sql(self, applied: int | None, dialect: str = "spark") -> str | None:
        """A condition true for a late row (None: no watermark yet)."""
        if applied is None:
            return None
        micros = "unix_micros" if dialect == "spark" else "epoch_us"
        return (
            f"{micros}(`{self.column}`) < {applied}" if dialect == "spark" else f'{micros}("{self.column}") < {applied}'
        )

    def reason(self, applied: int) -> str:
        return f"late: {self.column} older than the watermark {_iso(applied)} (max event time - {self.delay_us // 1_000_000}s)"


def _iso(micros: int) -> str:
    return (dt.datetime(1970, 1, 1) + dt.timedelta(microseconds=micros)).isoformat(sep=" ") + " UTC"


def split_late(zset: pa.Table, column: str, applied: int | None) -> tuple[pa.Table, pa.Table]:
    """A change feed's Z-set (old images -1, new images +1) as (on time, late): an image whose
    event time is older than the watermark ``applied`` is late, whichever its weight."""
    if applied is None or zset.num_rows == 0:
        return zset, zset.slice(0, 0)
    late = f'coalesce(epoch_us("{column}") < {applied}, false)'
    return (
        arrow_sql(f"SELECT * FROM z WHERE NOT {late}", z=zset).cast(zset.schema),
        arrow_sql(f"SELECT * FROM z WHERE {late}", z=zset).cast(zset.schema),
    )


def _batches(checkpoint, files: list, source_index: int = 0) -> list[list]:
    """``files`` grouped by the Spark batch that took them (its file-source log in the view's
    checkpoint: ``source_index``, the source's place in the view's one query), in batch order; files
    not logged come after every batch."""

    batch_of = {str(f.path): f.batch for f in logged_files(checkpoint, source_index)}
    batches: dict[int, list] = {}
    for path in files:
        batches.setdefault(batch_of.get(str(path), 1 << 62), []).append(path)
    return [batches[number] for number in sorted(batches)]


def applied_changes(
    con,
    checkpoint,
    files: list,
    changes_of: Callable[[list], str],
    wm: Watermark,
    key: list[str],
    alias: str,
    where: str | None,
    source_index: int = 0,
) -> str:
    """DuckDB SQL: the rows a watermarked view over a change feed holds, for the oracle. The rule
    is replayed batch by batch in the order Spark took the files in, on each key's newest change
    per batch (``changes_of(files)``: DuckDB SQL of those, with ``__lv_op``): a new image older
    than the watermark is never held; a held row whose retraction (update or delete) is late
    stays held although the source no longer has it."""
    column = f'"{wm.column}"'
    current: dict[tuple, tuple[dict, bool]] = {}  # per key: the source's row, whether the view holds it
    kept: list[dict] = []  # rows whose retraction was late
    high: int | None = None
    empty = con.execute(
        f"SELECT * EXCLUDE (__lv_op), epoch_us({column}) AS __lv_t FROM ({changes_of([])}) LIMIT 0"
    ).to_arrow_table()
    for batch in _batches(checkpoint, files, source_index):
        mark = None if high is None else high - wm.delay_us

        def late(row: dict, mark: int | None = mark) -> bool:
            return mark is not None and row["__lv_t"] is not None and row["__lv_t"] < mark

        consumed = []
        for row in (
            con.execute(f"SELECT *, epoch_us({column}) AS __lv_t FROM ({changes_of(batch)})")
            .to_arrow_table()
            .to_pylist()
        ):
            op = row.pop("__lv_op")
            old = current.pop(tuple(row[k] for k in key), None)
            if old is not None and old[1] and late(old[0]):
                kept.append(old[0])
            if op != "delete":
                current[tuple(row[k] for k in key)] = (row, not late(row))
                if not late(row):
                    consumed.append(row)
        con.register("__lv_consumed", pa.Table.from_pylist(consumed, schema=empty.schema))
        newest = con.execute(f"SELECT max(__lv_t) FROM __lv_consumed AS {alias} WHERE {where or 'TRUE'}").fetchone()[0]
        con.unregister("__lv_consumed")
        if newest is not None:
            high = newest if high is None else max(high, newest)
    held = pa.Table.from_pylist(kept + [row for row, in_view in current.values() if in_view], schema=empty.schema)
    name = f"__lv_held_{abs(hash(str(checkpoint)))}"
    con.register(name, held.drop(["__lv_t"]))
    return f"SELECT * FROM {name}"


def applied_images(
    con,
    checkpoint,
    files: list,
    zset_of: Callable[[list], str],
    wm: Watermark,
    names: list[str],
    alias: str,
    where: str | None,
    source_index: int = 0,
) -> str:
    """DuckDB SQL: the rows a watermarked view over a before/after-image feed holds, for the
    oracle. The rule is replayed batch by batch in the order Spark took the files in (the source's
    file log: ``source_index``), on each batch's consolidated Z-set (``zset_of(files)``: DuckDB SQL of
    the images, ``names`` and the weight ``__lv_w``): an image older than the watermark is left out,
    the on-time ones are summed; a row is held as often as its total is positive."""
    cols = ", ".join(f'"{n}"' for n in names)

    def consolidated(batch: list) -> str:
        return (
            f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM ({zset_of(batch)}) GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
        )

    consumed = f"{WEIGHT} > 0 AND ({where or 'TRUE'})"
    parts = _replay(con, checkpoint, files, consolidated, wm, alias, consumed, source_index)
    if not parts:
        parts.append(f"SELECT * FROM ({zset_of([])}) WHERE FALSE")
    union = " UNION ALL ".join(f"SELECT {cols}, {WEIGHT} FROM ({p})" for p in parts)
    total = f"SELECT {cols}, SUM({WEIGHT}) AS {WEIGHT} FROM ({union}) GROUP BY ALL"
    return f"SELECT {cols} FROM (SELECT {cols}, unnest(range(CAST({WEIGHT} AS BIGINT))) AS __lv_copy FROM ({total}) WHERE {WEIGHT} > 0)"


def on_time_relation(
    con,
    checkpoint,
    files: list,
    relation_of: Callable[[list], str],
    wm: Watermark,
    alias: str,
    where: str | None,
    source_index: int = 0,
) -> str:
    """DuckDB SQL: the rows of ``files`` that were on time, for the oracle. The rule is replayed
    batch by batch in the order Spark took the files in (its file-source log in the view's
    checkpoint): independent of what the pipeline quarantined, so a wrong late decision shows
    up as a difference. ``relation_of(files)`` reads files as the pipeline does; ``where`` is
    the view's WHERE in DuckDB SQL (a graph view's watermark: None, every row of the event source moves it)."""
    parts = _replay(con, checkpoint, files, relation_of, wm, alias, where or "TRUE", source_index)
    return " UNION ALL ".join(f"SELECT * FROM ({p})" for p in parts) if parts else relation_of([])


def _replay(
    con,
    checkpoint,
    files: list,
    relation_of: Callable[[list], str],
    wm: Watermark,
    alias: str,
    consumed_where: str,
    source_index: int = 0,
) -> list[str]:
    """Per Spark batch (in the order its file-source log took the files), DuckDB SQL of the
    batch's rows that were on time: ``relation_of(batch)`` without the rows older than the
    watermark the earlier batches reached; the newest event time among the rows passing
    ``consumed_where`` moves it."""
    column = f'"{wm.column}"'
    high: int | None = None
    parts = []
    for batch in _batches(checkpoint, files, source_index):
        relation = relation_of(batch)
        if high is not None:
            relation = (
                f"SELECT * FROM ({relation}) WHERE NOT coalesce(epoch_us({column}) < {high - wm.delay_us}, false)"
            )
        consumed = con.execute(
            f"SELECT max(epoch_us({column})) FROM ({relation}) AS {alias} WHERE {consumed_where}"
        ).fetchone()[0]
        if consumed is not None:
            high = consumed if high is None else max(high, consumed)
        parts.append(relation)
    return parts
