"""User columns and outputs named like the operator graph's own columns once were (``__w`` the weight,
``__cnt``/``__s0``/``__n0`` an aggregate's partials, ``__r___cnt``, ``__part``, ``__i``, ``__h``) are
ordinary columns: the graph's own names carry the reserved ``__lv_`` prefix. Each view, over random
inserts, updates and deletes, equals DuckDB's recompute after every epoch."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from lakeview.graph import WEIGHT, compile_view, step
from tests.lakeview.graph.view_grammar import multiset

NAMES = ["__w", "__cnt", "__s0", "__n0", "__r___cnt", "__part", "__i", "__h"]
SCHEMA = pa.schema([("id", pa.int64()), *[(n, pa.int64()) for n in NAMES]])
VIEWS = [
    'SELECT "__cnt", COUNT(*) AS "__cnt_", SUM("__w") AS "__s0", AVG("__s0") AS "__n0", COUNT("__n0") AS "__w" '
    'FROM t GROUP BY "__cnt"',
    'SELECT "__cnt" AS "__r___cnt", SUM("__part") AS "__cnt", MAX("__i") AS "__part" FROM t GROUP BY "__cnt" '
    "HAVING COUNT(*) > 1",
    'SELECT COUNT(*) AS "__cnt", SUM("__h") AS "__s0", COUNT(DISTINCT "__w") AS "__n0" FROM t',
    'SELECT DISTINCT "__w", "__cnt" FROM t',
    'SELECT a."__w", b."__cnt" AS "__i", a."__h" + b."__h" AS "__h" FROM t a JOIN u b ON a."__cnt" = b."__cnt"',
    'SELECT "__cnt", "__w", "__h" FROM (SELECT "__cnt", "__w", "__h", ROW_NUMBER() OVER (PARTITION BY "__cnt" '
    'ORDER BY "__w" DESC, id) AS "__i" FROM t) s WHERE "__i" <= 2',
    'SELECT "__cnt", SUM("__w") AS "__w" FROM t GROUP BY "__cnt" ORDER BY "__w" DESC, "__cnt" LIMIT 2',
]


def row(r: random.Random, rid: int) -> dict:
    return {"id": rid, **{n: None if r.random() < 0.1 else r.randint(0, 3) for n in NAMES}}


@pytest.mark.parametrize("sql", VIEWS)
def test_user_columns_named_like_the_graphs_old_internal_names_are_ordinary(sql: str) -> None:
    assert WEIGHT.startswith("__lv_")
    r = random.Random(17)
    graph = compile_view(sql, {"t": SCHEMA, "u": SCHEMA}, eager=True)
    current: dict[str, dict[int, dict]] = {"t": {}, "u": {}}
    view: dict = {}
    con = duckdb.connect()
    next_id = 1
    for epoch in range(6):
        deltas = {}
        for name, rows in current.items():
            out = []
            for _ in range(r.randint(4, 8)):
                if rows and r.random() < 0.4:  # a delete, or an update (delete + insert)
                    old = rows.pop(r.choice(sorted(rows)))
                    out.append({**old, WEIGHT: -1})
                    if r.random() < 0.5:
                        rows[old["id"]] = new = row(r, old["id"])
                        out.append({**new, WEIGHT: 1})
                    continue
                rows[next_id] = new = row(r, next_id)
                next_id += 1
                out.append({**new, WEIGHT: 1})
            deltas[name] = pa.Table.from_pylist(out, schema=SCHEMA.append(pa.field(WEIGHT, pa.int64())))
        delta = step(graph, {t: d for t, d in deltas.items() if t in graph.schemas})
        for key, weight in multiset(delta, weighted=True).items():
            view[key] = view.get(key, 0) + weight
        view = {k: w for k, w in view.items() if w}
        for name, rows in current.items():
            con.register(name, pa.Table.from_pylist(list(rows.values()), schema=SCHEMA))
        expected = dict(multiset(con.execute(sql).to_arrow_table(), weighted=False))
        assert view == expected, f"epoch {epoch}: {sql}"
