"""Random view queries from the graph's grammar, random typed inputs and random change sequences.

Used by the property test (a fixed-seed slice) and by ``bench/graph_fuzz.py`` (any number of seeds). A run
compiles the query, applies every epoch's changes through ``step`` and, after each epoch, compares the
maintained view with DuckDB's recompute of the same SQL over the same current inputs, as multisets.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from dataclasses import dataclass
from decimal import Decimal

import duckdb
import pyarrow as pa

from lakeview.graph import WEIGHT, compile_view, step

TABLES = ["t1", "t2", "t3", "t4"]
SCHEMA = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("g", pa.string()), ("v", pa.int64()), ("x", pa.float64())])


def random_row(r: random.Random, rid: int) -> dict:
    return {
        "id": rid,
        "k": None if r.random() < 0.1 else r.randint(0, 3),
        "g": None if r.random() < 0.1 else r.choice("abc"),
        "v": None if r.random() < 0.15 else r.randint(-2, 5),
        "x": None if r.random() < 0.15 else r.randint(-8, 20) / 4,
    }


class Inputs:
    """The current rows of every input and the next epoch's changes as Z-sets."""

    def __init__(self, r: random.Random, insert_only: frozenset[str] = frozenset()) -> None:
        self.r = r
        self.insert_only = insert_only  # inputs that only ever get inserts (append streams)
        self.next_id = 1
        self.rows: dict[str, dict[int, dict]] = {t: {} for t in TABLES}
        self.log: dict[str, list[tuple[str, dict]]] = {}  # the last epoch's changes per input, in order

    def epoch(self) -> dict[str, pa.Table]:
        """The next epoch's changes as Z-sets (``log``: the same as operations, insert / update / delete)."""
        deltas = {}
        self.log = {t: [] for t in TABLES}
        for t in TABLES:
            rows, out, log = self.rows[t], [], self.log[t]
            first = not rows and self.next_id < 100
            for _ in range(self.r.randint(5, 9) if first else self.r.randint(0, 5)):
                kind = self.r.choice(["insert", "insert", "delete", "update"]) if rows else "insert"
                kind = "insert" if t in self.insert_only else kind
                if kind == "insert":
                    row = random_row(self.r, self.next_id)
                    self.next_id += 1
                    rows[row["id"]] = row
                    out.append({**row, WEIGHT: 1})
                    log.append(("insert", row))
                else:
                    rid = self.r.choice(sorted(rows))
                    old = rows.pop(rid)
                    out.append({**old, WEIGHT: -1})
                    if kind == "delete":
                        log.append(("delete", old))
                    if kind == "update":
                        new = {**random_row(self.r, rid)}
                        if self.r.random() < 0.5:
                            new["k"] = old["k"]
                        rows[rid] = new
                        out.append({**new, WEIGHT: 1})
                        log.append(("update", new))
            deltas[t] = pa.Table.from_pylist(out, schema=SCHEMA.append(pa.field(WEIGHT, pa.int64())))
        return deltas

    def table(self, t: str) -> pa.Table:
        return pa.Table.from_pylist(list(self.rows[t].values()), schema=SCHEMA)


# -- the query grammar ---------------------------------------------------------------------------------------
class Query:
    def __init__(self, r: random.Random) -> None:
        self.r = r
        self.ctes: list[str] = []
        self.aliases: list[str] = []

    def item(self, alias: str) -> str:
        t = self.r.choice(TABLES)
        roll = self.r.random()
        if roll < 0.05:  # a subquery nested in a subquery
            return (
                f"(SELECT id, k, g, v, x FROM {t} WHERE k IN (SELECT k FROM {self.r.choice(TABLES)} "
                f"WHERE v > 0)) {alias}"
            )
        if roll < 0.15:
            cond = self.r.choice(["v > 0", "g <> 'b'", "x IS NOT NULL"])
            return f"(SELECT id, k, g, v, x FROM {t} WHERE {cond}) {alias}"
        if roll < 0.25:
            name = f"c{len(self.ctes)}"
            self.ctes.append(f"{name} AS (SELECT id, k + 0 AS k, COALESCE(g, 'z') AS g, v, x FROM {t})")
            return f"{name} {alias}"
        return f"{t} {alias}"

    def from_clause(self, n: int, inner_only: bool = False) -> str:
        self.aliases = [f"a{i}" for i in range(n)]
        sql = f"FROM {self.item('a0')}"
        for i in range(1, n):
            kind = self.r.choice(["JOIN", "JOIN", "LEFT JOIN", "RIGHT JOIN", "FULL JOIN", "CROSS JOIN"])
            if inner_only:
                kind = "JOIN"
            item = self.item(f"a{i}")
            if kind == "CROSS JOIN" and n <= 2:
                sql += f" CROSS JOIN {item}"
                continue
            kind = "JOIN" if kind == "CROSS JOIN" else kind
            j = self.r.randrange(i)
            on = f"a{j}.{self.r.choice(['k', 'k', 'g'])} = a{i}.{{col}}"
            on = on.replace("{col}", on.split(".")[1].split(" ")[0])
            if self.r.random() < 0.08:  # no equality at all: a theta join over the whole other side
                on = f"a{j}.v < a{i}.v"
            elif self.r.random() < 0.3:
                on += self.r.choice([f" AND a{j}.v < a{i}.v", f" AND a{i}.g <> 'a'", f" AND a{j}.x <= a{i}.x"])
            sql += f" {kind} {item} ON {on}"
        return sql

    def col(self, names: str = "kgvx") -> str:
        return f"{self.r.choice(self.aliases)}.{self.r.choice(names)}"

    def where(self) -> str:
        parts = []
        a = self.r.choice(self.aliases)
        t = self.r.choice(TABLES)
        options = [
            f"{a}.v > {self.r.randint(-1, 3)}",
            f"{a}.g IS NOT NULL",
            f"COALESCE({a}.v, 0) < 4",
            f"{a}.k IN (SELECT k FROM {t} WHERE v > 1)",
            f"{a}.k NOT IN (SELECT k FROM {t} WHERE x > 0)",
            f"EXISTS (SELECT 1 FROM {t} s WHERE s.k = {a}.k AND s.v > 2)",
            f"NOT EXISTS (SELECT 1 FROM {t} s WHERE s.g = {a}.g AND s.v < {a}.v)",
            f"{a}.g IN (SELECT g FROM {t} GROUP BY g HAVING COUNT(*) > 1)",
        ]
        for _ in range(self.r.randint(0, 2)):
            parts.append(self.r.choice(options))
        return f" WHERE {' AND '.join(parts)}" if parts else ""

    def scalar(self) -> str:
        a, b = self.r.choice(self.aliases), self.r.choice(self.aliases)
        return self.r.choice(
            [
                self.col(),
                f"{a}.id",
                f"{a}.v + {b}.v",
                f"CASE WHEN {a}.v > 2 THEN 'hi' ELSE {b}.g END",
                f"COALESCE({a}.x, -1)",
                f"CAST({a}.v AS VARCHAR)",
                f"{a}.x * 2",
            ]
        )

    def agg(self) -> str:
        return self.r.choice(
            [
                "COUNT(*)",
                f"COUNT({self.col('vx')})",
                f"SUM({self.col('v')})",
                f"AVG({self.col('x')})",
                f"MIN({self.col('g')})",
                f"MAX({self.col('vx')})",
                f"COUNT(DISTINCT {self.col('kg')})",
                f"SUM({self.col('x')})",
                f"COUNT(*) FILTER (WHERE {self.col('v')} > 1)",
            ]
        )

    def ids(self) -> str:
        return ", ".join(f"{a}.id" for a in self.aliases)

    def build(self) -> str:
        r = self.r
        shape = r.choice(
            [
                "project",
                "aggregate",
                "aggregate",
                "fact_aggregate",
                "topk",
                "topk_sub",
                "agg_topk",
                "limit",
                "union",
                "distinct",
            ]
        )
        n = r.choice([1, 2, 2, 3, 3, 4])
        if shape == "union":
            left = self.simple(r.randint(1, 2))
            right = self.simple(r.randint(1, 2))
            body = f"{left} {r.choice(['UNION', 'UNION ALL'])} {right}"
        else:
            eager_topk = shape == "agg_topk" and r.random() < 0.5  # inner joins, one input's SUM: eager applies
            frm = self.from_clause(max(n, 2), inner_only=True) if eager_topk else self.from_clause(n)
            where = self.where()
            if shape in ("project", "distinct"):
                cols = ", ".join(f"{self.scalar()} AS e{i}" for i in range(r.randint(1, 3)))
                body = f"SELECT {'DISTINCT ' if shape == 'distinct' else ''}{cols} {frm}{where}"
            elif shape == "aggregate":
                group = [self.col("kg") for _ in range(r.randint(0, 2))] if r.random() < 0.85 else []
                group = list(dict.fromkeys(group))
                aggs = ", ".join(f"{self.agg()} AS m{i}" for i in range(r.randint(1, 3)))
                sel = ", ".join([f"{g} AS g{i}" for i, g in enumerate(group)] + [aggs])
                body = f"SELECT {sel} {frm}{where}"
                if group:
                    body += f" GROUP BY {', '.join(group)}"
                    if r.random() < 0.3:
                        body += f" HAVING COUNT(*) > {r.randint(1, 2)}"
            elif shape == "fact_aggregate":  # aggregates of one input over inner joins: eager aggregation applies
                frm = self.from_clause(max(n, 2), inner_only=True)
                where = f" WHERE a0.v > {r.randint(-2, 2)}" if r.random() < 0.4 else ""
                aggs = [
                    "COUNT(*)",
                    "SUM(a0.v)",
                    "AVG(a0.x)",
                    "COUNT(a0.v)",
                    "MIN(a0.g)",
                    "MAX(a0.x)",
                    "COUNT(*) FILTER (WHERE a0.v > 1)",
                    "SUM(a0.x) FILTER (WHERE a0.g <> 'a')",
                ]
                picked = ", ".join(f"{r.choice(aggs)} AS m{i}" for i in range(r.randint(1, 3)))
                group = list(
                    dict.fromkeys(
                        f"{r.choice(self.aliases[1:] + ['a0'])}.{r.choice('kg')}" for _ in range(r.randint(0, 2))
                    )
                )
                sel = ", ".join([f"{g} AS g{i}" for i, g in enumerate(group)] + [picked])
                body = f"SELECT {sel} {frm}{where}" + (f" GROUP BY {', '.join(group)}" if group else "")
                if group and r.random() < 0.3:
                    body += " HAVING SUM(a0.v) > 1"
            elif shape in ("topk", "topk_sub"):
                part = self.col("kg")
                func = r.choice(["ROW_NUMBER", "RANK", "DENSE_RANK"])
                order = self.ids() if func == "ROW_NUMBER" else f"{self.col('vx')} DESC"
                k = r.randint(1, 3)
                cols = f"{self.scalar()} AS e0, {self.ids().split(', ')[0]} AS i0"
                win = f"{func}() OVER (PARTITION BY {part} ORDER BY {order}) AS rn"
                if shape == "topk":
                    body = f"SELECT {cols}, {win} {frm}{where} QUALIFY rn <= {k}"
                else:
                    body = f"SELECT s.e0, s.rn FROM (SELECT {cols}, {win} {frm}{where}) s WHERE s.rn <= {k}"
            elif shape == "agg_topk":
                g1, g2 = self.col("g"), self.col("k")
                func = r.choice(["ROW_NUMBER", "RANK"])
                order = f"SUM({'a0.v' if eager_topk else self.col('v')}) DESC" + (
                    f", {g2}" if func == "ROW_NUMBER" else ""
                )
                ranked = (
                    f"SELECT {g1} AS grp, {g2} AS kk, COUNT(*) AS c, {func}() OVER (PARTITION BY {g1} "
                    f"ORDER BY {order}) AS r {frm}{where} GROUP BY {g1}, {g2}"
                )
                k = r.randint(1, 2)
                body = f"SELECT s.grp, s.kk, s.c FROM ({ranked}) s WHERE s.r <= {k}" if eager_topk else ""
                body = body or f"{ranked} QUALIFY r <= {k}"
            elif r.random() < 0.4:  # ORDER BY an aggregate, LIMIT
                key = self.col("kg")
                body = (
                    f"SELECT {key} AS g0, COUNT(*) AS c, SUM({self.col('v')}) AS s {frm}{where} GROUP BY {key} "
                    f"ORDER BY c DESC, g0 LIMIT {r.randint(1, 3)}"
                )
            else:
                off = f" OFFSET {r.randint(1, 2)}" if r.random() < 0.3 else ""
                ids = ", ".join(f"{a}.id AS i{i}" for i, a in enumerate(self.aliases))  # a table's names are distinct
                body = (
                    f"SELECT {self.scalar()} AS e0, {ids} {frm}{where} ORDER BY {self.ids()} "
                    f"LIMIT {r.randint(1, 4)}{off}"
                )
        with_ = f"WITH {', '.join(self.ctes)} " if self.ctes else ""
        return with_ + body

    def simple(self, n: int) -> str:
        frm = self.from_clause(n)
        return f"SELECT {self.col('kg')} AS u0, {self.col('vx')} AS u1 {frm}{self.where()}"


def random_query(seed: int) -> str:
    """A random view query from the grammar, fixed by the seed."""
    return Query(random.Random(seed)).build()


# -- checking ------------------------------------------------------------------------------------------------
def norm(value):
    if isinstance(value, Decimal):
        value = float(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        return round(value, 6) + 0.0
    if isinstance(value, bool):
        return value
    if isinstance(value, int):
        return float(value)
    return value


def multiset(table: pa.Table, weighted: bool) -> Counter:
    out: Counter = Counter()
    names = [n for n in table.column_names if n != WEIGHT]
    for row in table.to_pylist():
        key = tuple(norm(row[n]) for n in names)
        out[key] += row[WEIGHT] if weighted else 1
    return out


def recompute_differs(
    con: duckdb.DuckDBPyConnection, inputs: Inputs, query: str, view: Counter, epoch: int
) -> str | None:
    """How ``view`` (a multiset of rows) differs from DuckDB's recompute of ``query`` over ``inputs``' current
    tables after ``epoch``; None when equal."""
    for t in TABLES:
        con.register(t, inputs.table(t))
    expected = multiset(con.execute(query).to_arrow_table(), weighted=False)
    if view != expected:
        return f"epoch {epoch}: {query}\nextra {dict(view - expected)}\nmissing {dict(expected - view)}"
    return None


@dataclass
class Failure:
    seed: int
    query: str
    epoch: int
    diff: str


def run_seed(
    seed: int, epochs: int = 6, eager: bool | None = None, insert_only: frozenset[str] = frozenset()
) -> Failure | None:
    """Run one random query over random changes; the first epoch where the graph and DuckDB disagree, if any.

    ``eager`` None: the seed decides whether aggregates are pushed below joins (eager aggregation).
    ``insert_only``: inputs that only get inserts, compiled as append streams.
    """
    query = random_query(seed)
    r = random.Random(seed * 7919 + 1)
    if eager is None:
        eager = r.random() < 0.5
    inputs = Inputs(r, insert_only)
    schemas = {t: SCHEMA for t in TABLES}
    try:
        graph = compile_view(query, schemas, eager=eager, insert_only=insert_only)
    except Exception as e:
        return Failure(seed, query, -1, f"compile: {type(e).__name__}: {e}")
    con = duckdb.connect()
    view: Counter = Counter()
    for epoch in range(epochs):
        deltas = inputs.epoch()
        try:
            delta = step(graph, {t: d for t, d in deltas.items() if t in graph.schemas})
        except Exception as e:
            return Failure(seed, query, epoch, f"step: {type(e).__name__}: {e}")
        view.update(multiset(delta, weighted=True))
        view = Counter({k: w for k, w in view.items() if w != 0})
        for t in TABLES:
            con.register(t, inputs.table(t))
        expected = multiset(con.execute(query).to_arrow_table(), weighted=False)
        if any(w < 0 for w in view.values()) or view != expected:
            extra = view - expected
            missing = expected - view
            negative = {k: w for k, w in view.items() if w < 0}
            return Failure(seed, query, epoch, f"extra {dict(extra)} missing {dict(missing)} negative {negative}")
    return None
