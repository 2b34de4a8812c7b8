"""A graph view past the in-memory size (writers.graph_view.multiset_change): its table is a multiset keyed by
the whole row, changed per distinct row touched. Through the real REST catalog, after every epoch of random
weighted changes (new rows, more copies of a row, fewer, none left), the table read back with pyiceberg holds
exactly the expected copies of every row."""

from __future__ import annotations

import random
import uuid
from collections import Counter

import pyarrow as pa
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from lakeview.graph import WEIGHT
from lakeview.ivm.commits import Epoch
from writers.graph_view import multiset_change
from writers.iceberg.writer import IcebergWriter

SCHEMA = pa.schema([("category", pa.string()), ("n", pa.int64())])
KEY = ("category", "n")


def test_a_multiset_view_changed_by_key_holds_every_row_as_often_as_its_weight(catalog_server: CatalogServer) -> None:
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    writer = IcebergWriter(catalog, "graph_view_tests", f"multiset_{uuid.uuid4().hex[:8]}")
    writer.ensure_table(SCHEMA, KEY, {})
    rng = random.Random(3)
    expected: Counter[tuple] = Counter()
    for number in range(8):
        weighted = []
        for row in rng.sample([(c, n) for c in ("a", "b", None) for n in range(4)], 6):
            held = expected[row]
            weight = rng.choice([w for w in (-2, -1, 1, 2, 3) if held + w >= 0])
            expected[row] += weight
            weighted.append((*row, weight))
        delta = pa.table(
            {"category": [r[0] for r in weighted], "n": [r[1] for r in weighted], WEIGHT: [r[2] for r in weighted]},
            schema=SCHEMA.append(pa.field(WEIGHT, pa.int64())),
        )
        writer.commit(Epoch(view=writer.table_name, number=number, frontier={}), multiset_change(writer, delta, KEY))
        stored = writer.table().scan().to_arrow()
        assert Counter(zip(stored.column("category").to_pylist(), stored.column("n").to_pylist())) == +expected, (
            f"epoch {number}"
        )
