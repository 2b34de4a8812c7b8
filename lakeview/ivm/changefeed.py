"""Change-feed sources: rows carrying an operation (insert/update/delete) become a Z-set.

A change row is the new image of the row with its key (a delete needs only the key). To
retract the old image of an update or a delete, each view over a change feed keeps a
*mirror*: the current row per key (``<namespace>.__lv_state_<view>_src_<source>``), looked up by the
keys a batch touches only. Per batch and key the newest change (by the ``sequence`` column)
wins; the Z-set is the mirror's old row with weight −1 plus the new image with weight +1
(none for a delete). The mirror is committed last in an epoch, so a replayed epoch finds
the old images it needs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from lakeview.ivm.commits import Change
from lakeview.sql.plan import WEIGHT

if TYPE_CHECKING:
    from lakeview.config.models import ChangeFeedConfig, ImagesConfig

OP = "__lv_op"  # the normalised operation: 'insert', 'update' or 'delete' (NULL: unknown)
INSERT, UPDATE, DELETE = "insert", "update", "delete"


def source_mirror_name(view: str, source: str) -> str:
    """A view's mirror of its change-feed source ``source``."""
    return f"__lv_state_{view}_src_{source}"


def images_sql(images: ImagesConfig, columns: list[str], relation: str, quote: str = "`") -> str:
    """Spark SQL (``quote='"'``: DuckDB's): a before/after-image batch as a Z-set (before −1, after +1)."""

    def side(name: str, weight: int) -> str:
        n = f"{quote}{name}{quote}"
        cols = ", ".join(f"{n}.{quote}{c}{quote} AS {quote}{c}{quote}" for c in columns)
        return f"SELECT {cols}, {weight} AS {WEIGHT} FROM {relation} WHERE {n} IS NOT NULL"

    return f"{side(images.before, -1)} UNION ALL {side(images.after, 1)}"


def operation_sql(feed: ChangeFeedConfig) -> str:
    """Spark SQL mapping the feed's operation column to 'insert' / 'update' / 'delete' (else NULL)."""

    def values(items: list[str]) -> str:
        return ", ".join("'" + v.replace("'", "''") + "'" for v in items)

    op = f"`{feed.operation}`"
    return (
        f"CASE WHEN {op} IN ({values(feed.insert)}) THEN '{INSERT}' WHEN {op} IN ({values(feed.update)}) THEN '{UPDATE}' "
        f"WHEN {op} IN ({values(feed.delete)}) THEN '{DELETE}' END"
    )


def latest_sql(feed: ChangeFeedConfig, relation: str, quote: str = "`") -> str:
    """Spark SQL (``quote='"'``: DuckDB's): the newest change per key of a batch (rows with a known operation)."""
    keys = ", ".join(f"{quote}{k}{quote}" for k in feed.key)
    sequence = f"{quote}{feed.sequence}{quote}"
    return (
        f"SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY {keys} ORDER BY {sequence} DESC) AS __lv_rn "
        f"FROM {relation} WHERE {OP} IS NOT NULL) WHERE __lv_rn = 1"
    )


def normalize(latest: pa.Table, old: pa.Table, feed: ChangeFeedConfig, columns: list[str]) -> tuple[pa.Table, Change]:
    """The batch's Z-set over the source's ``columns`` (plus the weight) and the mirror's change.

    ``latest``: the newest change per key (source columns + ``__lv_op``); ``old``: the mirror's
    rows for those keys.
    """
    key = tuple(feed.key)
    ops = latest.column(OP)
    images = latest.filter(pc.not_equal(ops, DELETE)).select(columns)
    deleted = latest.filter(pc.equal(ops, DELETE)).select(list(key))
    old = old.select(columns).cast(images.schema) if old.num_rows else images.schema.empty_table()
    zset = pa.concat_tables(
        [
            old.append_column(WEIGHT, pa.array([-1] * old.num_rows, pa.int32())),
            images.append_column(WEIGHT, pa.array([1] * images.num_rows, pa.int32())),
        ]
    )
    return zset, Change(rows=images, key=key, deletes=deleted if deleted.num_rows else None)
