"""Value multisets: what a group needs for MIN/MAX over an input that retracts, and for any DISTINCT aggregate.

Per argument (and FILTER) of such aggregates, one state table holds each group's distinct non-NULL values
with their count as the row's weight: (group columns, ``__lv_value``, ``__lv_w``). An epoch adds the delta's
(group, value) counts; a touched group's aggregates before and after are read from its value rows alone (not
from its input rows): MIN/MAX of the values with a positive count, COUNT/SUM/AVG of them for DISTINCT.
Aggregates over the same argument and FILTER share one table.
"""

from __future__ import annotations

from dataclasses import dataclass

from lakeview.graph.state import StateTable
from lakeview.graph.zset import WEIGHT, cols_sql, q

VALUE = "__lv_value"
OLD_COUNT, NEW_COUNT = "__lv_n_old", "__lv_n_new"  # a value's count before and after the epoch
OLD_OF, NEW_OF = "__lv_mo", "__lv_mn"  # per aggregate i read from a multiset: its value before and after


@dataclass(frozen=True)
class ValueSet:
    """One multiset state table: the input column and FILTER column it counts and the aggregates it serves."""

    table: StateTable
    arg: str
    filter: str | None
    aggs: tuple[tuple[int, str], ...]  # (aggregate index, function: min, max, count, sum, avg)

    def condition(self, quote=q) -> str:  # type: ignore[no-untyped-def]
        """The rows a value of this set comes from: a non-NULL argument, FILTER true (``quote``: the dialect's)."""
        cond = f"{quote(self.arg)} IS NOT NULL"
        return f"{cond} AND {quote(self.filter)}" if self.filter else cond

    def delta_sql(self, group: list[str], table: str = "d") -> str:
        """The Z-set ``table``'s (group, value) counts, rows netting to 0 left out (what the state applies)."""
        lead = f"{cols_sql(group)}, " if group else ""
        return (
            f"SELECT {lead}{q(self.arg)} AS {VALUE}, CAST(SUM({WEIGHT}) AS BIGINT) AS {WEIGHT} FROM {table} "
            f"WHERE {self.condition()} GROUP BY ALL HAVING SUM({WEIGHT}) <> 0"
        )

    def values_sql(self, group: list[str], old: str, delta: str) -> str:
        """Per group with value rows before or after the epoch (one row for a global aggregate): each served
        aggregate's value before (``__lv_mo{i}``) and after (``__lv_mn{i}``), from the group's stored value rows
        ``old`` and the epoch's counts ``delta`` (both as ``delta_sql`` gives them)."""
        lead = f"{cols_sql(group)}, " if group else ""
        counted = (
            f"SELECT {lead}{VALUE}, SUM({WEIGHT} * (1 - __lv_src)) AS {OLD_COUNT}, SUM({WEIGHT}) AS {NEW_COUNT} FROM "
            f"(SELECT {lead}{VALUE}, {WEIGHT}, 0 AS __lv_src FROM {old} "
            f"UNION ALL SELECT {lead}{VALUE}, {WEIGHT}, 1 FROM {delta}) GROUP BY ALL"
        )
        items = ", ".join(
            f"{aggregate_sql(func, OLD_COUNT)} AS {OLD_OF}{i}, {aggregate_sql(func, NEW_COUNT)} AS {NEW_OF}{i}"
            for i, func in self.aggs
        )
        by = f" GROUP BY {cols_sql(group)}" if group else ""
        return f"SELECT {lead}{items} FROM ({counted}){by}"


def aggregate_sql(func: str, count: str) -> str:
    """``func`` over the distinct values whose count (column ``count``) is positive."""
    return f"{func.upper()}({VALUE}) FILTER (WHERE {count} > 0)"


def finished_sql(func: str, value: str) -> str:
    """A multiset aggregate's value where its group has no value rows (``value`` NULL): COUNT is 0."""
    return f"CAST(COALESCE({value}, 0) AS BIGINT)" if func == "count" else value
