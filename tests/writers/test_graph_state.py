"""An operator graph with its state in Iceberg tables through the real REST catalog (TableStateStore)
gives, epoch after epoch, the same view delta as the same graph with its state in memory, for state
keyed by an operator key and for the empty key (a global aggregate, ORDER BY … LIMIT); each epoch's
tables commit in one catalog transaction, and a graph rebuilt from the tables (a restart) carries on."""

from __future__ import annotations

import random
import uuid

import pyarrow as pa
import pytest
from pyiceberg.catalog.rest import RestCatalog

from catalog_api.server import CatalogServer
from lakeview.graph import WEIGHT, compile_view, step
from lakeview.ivm.commits import Epoch
from lakeview.sql.duck import arrow_sql
from writers import graph_state
from writers.graph_log import StateLog, log_table_name
from writers.graph_state import TableStateStore, commit_key, state_table_name, warm_up
from writers.iceberg.group import IcebergGroupWriter
from writers.iceberg.writer import IcebergWriter

SCHEMAS = {
    "a": pa.schema([("k", pa.int64()), ("x", pa.int64())]),
    "b": pa.schema([("k", pa.int64()), ("tag", pa.string())]),
}
VIEWS = {
    "global": "SELECT COUNT(*) AS n, SUM(a.x) AS total FROM a JOIN b ON a.k = b.k",
    "grouped": "SELECT b.tag, COUNT(*) AS n, MAX(a.x) AS top FROM a LEFT JOIN b ON a.k = b.k GROUP BY b.tag",
    "limit": "SELECT k, x FROM a WHERE k IN (SELECT k FROM b) ORDER BY x DESC, k LIMIT 3",
}


def net(table: pa.Table) -> set[tuple]:
    cols = ", ".join(f'"{c}"' for c in table.column_names if c != WEIGHT)
    rows = arrow_sql(f"SELECT {cols}, SUM({WEIGHT}) AS w FROM t GROUP BY ALL HAVING SUM({WEIGHT}) <> 0", t=table)
    return {tuple(r.values()) for r in rows.to_pylist()}


def table_graph(sql: str, catalog: RestCatalog, view: str, tables: str):
    """The graph with its state in Iceberg tables (created if new) and the group committing them: ``keyed``
    one row per distinct row, ``log`` each table an append log of the epochs' deltas, ``one_log`` every state
    in one append-log table (see TableStateStore)."""
    graph = compile_view(sql, SCHEMAS)
    _, schemas = warm_up(graph)
    keys = {t.name: t.key for t in graph.state_tables()}
    owned = {"lakeview.state-of": view}
    if tables.startswith("one_log"):
        log = IcebergWriter(catalog, "graph_state_tests", log_table_name(view))
        log.ensure_table(StateLog(schemas).schema, None, owned)  # (the pipeline also records its layout)
        store = TableStateStore(keys, {name: log for name in keys}, schemas, log=log)
    else:
        writers = {}
        for table in graph.state_tables():
            writer = IcebergWriter(catalog, "graph_state_tests", state_table_name(view, table))
            writer.ensure_table(schemas[table.name], commit_key(table, schemas[table.name]), owned)
            writers[table.name] = writer
        store = TableStateStore(keys, writers, schemas, append_log=tables.startswith("log"))
    graph.use_store(store)
    group = IcebergGroupWriter(catalog, view, {w.table_name: w for w in store.writers.values()})
    return graph, store, group


def delta(rng: random.Random, rows: dict[str, list[tuple]], name: str) -> pa.Table:
    """A random insert/delete Z-set on input ``name`` (deletes retract rows that are there)."""
    changes: list[tuple] = []
    for _ in range(rng.randrange(1, 6)):
        if rows[name] and rng.random() < 0.35:
            row = rows[name].pop(rng.randrange(len(rows[name])))
            changes.append((*row, -1))
        else:
            row = (rng.randrange(4), rng.randrange(100)) if name == "a" else (rng.randrange(4), rng.choice("xyz"))
            rows[name].append(row)
            changes.append((*row, 1))
    names = [*SCHEMAS[name].names, WEIGHT]
    return pa.table({n: [c[i] for c in changes] for i, n in enumerate(names)})


@pytest.mark.parametrize("tables", ["keyed", "log", "log_folded", "one_log", "one_log_folded", "one_log_smaller"])
@pytest.mark.parametrize("shape", list(VIEWS))
def test_table_state_gives_the_memory_state_deltas_across_a_restart(
    catalog_server: CatalogServer, shape: str, tables: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every commit declared (``committed``), so lookups are served from the memory copy; epoch 2 is first
    computed and abandoned (a commit whose outcome is unknown), so its retry reads the tables again. The
    tables keyed (one row per distinct row), or append logs of the epochs' deltas (``log_folded``: folded
    into their netted rows whenever they outgrow them, so the restart reads folded and appended rows;
    ``one_log_smaller``: folded whenever the states hold no more rows than the epoch appends)."""
    if tables.endswith("log_folded"):
        monkeypatch.setattr(graph_state, "FOLD_SLACK", 2)
    elif not tables.endswith("smaller"):  # appended only (else these small states fold whenever they hold fewer
        monkeypatch.setattr(graph_state, "FOLD_WHEN_SMALLER", False)  # rows than an epoch appends)
    unique_name = f"graph_state_{shape}_{tables}_{uuid.uuid4().hex[:8]}"
    catalog = RestCatalog("t", uri=catalog_server.uri, warehouse="lakeview")
    sql = VIEWS[shape]
    memory = compile_view(sql, SCHEMAS)
    graph, store, group = table_graph(sql, catalog, unique_name, tables)
    rng = random.Random(17)
    rows: dict[str, list[tuple]] = {"a": [], "b": []}
    folds = 0
    for number in range(8):
        if number == 4:  # a restart: a new graph over the same tables, past its first epoch
            graph, store, group = table_graph(sql, catalog, unique_name, tables)
            graph.runtime.epoch = 1
        deltas = {name: delta(rng, rows, name) for name in SCHEMAS if rng.random() < 0.8}
        expected = step(memory, deltas)
        if number == 2:  # computed, never committed: the retry below must not see this epoch's changes
            store.begin()
            step(graph, deltas)
            store.table_changes()
        store.begin()
        got = step(graph, deltas)
        assert net(got) == net(expected), f"epoch {number}"
        epoch = Epoch(view=unique_name, number=number, frontier={})
        changes = store.table_changes()
        folds += sum(isinstance(c, graph_state.Replacement) for c in changes.values())
        group.commit(epoch, changes)  # type: ignore[arg-type]
        store.committed()
        assert group.last_epoch() in (None, number) or not changes
    assert len(group.members) == (1 if tables.startswith("one_log") else len(graph.state_tables()))
    if not tables.endswith("smaller"):  # (whether the states ever hold fewer rows than an epoch appends: the shape's)
        assert (folds > 0) == tables.endswith("log_folded")
