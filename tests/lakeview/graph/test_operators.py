"""Each operator's incremental rule, epoch by epoch, on changes small enough to state the expected delta."""

from __future__ import annotations

import pyarrow as pa
import pytest

from lakeview.graph import WEIGHT, compile_view, step

T = pa.schema([("id", pa.int64()), ("k", pa.int64()), ("g", pa.string()), ("v", pa.int64())])
SCHEMAS = {"a": T, "b": T}


def z(*rows: tuple) -> pa.Table:
    """A Z-set of ``a``/``b`` rows: (id, k, g, v, weight)."""
    names = T.names + [WEIGHT]
    schema = T.append(pa.field(WEIGHT, pa.int64()))
    return pa.Table.from_pylist([dict(zip(names, r, strict=True)) for r in rows], schema=schema)


class Bag(list):
    """A delta's rows compared as a multiset (operators emit rows in no particular order)."""

    def __eq__(self, other: object) -> bool:
        return sorted(self, key=repr) == sorted(other, key=repr)


def rows(delta: pa.Table) -> Bag:
    return Bag(tuple(r.values()) for r in delta.to_pylist())


class View:
    def __init__(self, sql: str) -> None:
        self.graph = compile_view(sql, SCHEMAS)

    def __call__(self, **deltas: pa.Table) -> list[tuple]:
        return rows(step(self.graph, deltas))


def test_filter_and_project_map_each_change_and_keep_its_weight():
    view = View(
        "SELECT id, v * 2 AS dv, CASE WHEN v > 3 THEN 'big' ELSE g END AS c, COALESCE(g, '-') AS h, "
        "CAST(v AS VARCHAR) AS s FROM a WHERE v > 1"
    )
    assert view(a=z((1, 1, "x", 2, 1), (2, 1, None, 5, 1), (3, 1, "y", 0, 1))) == sorted(
        [(1, 4, "x", "x", "2", 1), (2, 10, "big", "-", "5", 1)], key=repr
    )
    # an update is -old +new; one that leaves the filter is a delete only
    assert view(a=z((1, 1, "x", 2, -1), (1, 1, "x", 4, 1), (2, 1, None, 5, -1), (2, 1, None, 0, 1))) == sorted(
        [(1, 4, "x", "x", "2", -1), (1, 8, "big", "x", "4", 1), (2, 10, "big", "-", "5", -1)], key=repr
    )


def test_inner_join_sums_the_three_terms():
    view = View("SELECT a.id, b.id AS bid FROM a JOIN b ON a.k = b.k")
    # both sides arrive in one epoch: ΔA⋈ΔB
    assert view(a=z((1, 7, "x", 0, 1)), b=z((10, 7, "y", 0, 1))) == [(1, 10, 1)]
    # ΔA⋈B and A⋈ΔB
    assert view(a=z((2, 7, "x", 0, 1)), b=z((11, 7, "y", 0, 1))) == [(1, 11, 1), (2, 10, 1), (2, 11, 1)]
    # a key change on the right moves its matches away
    assert view(b=z((10, 7, "y", 0, -1), (10, 8, "y", 0, 1))) == [(1, 10, -1), (2, 10, -1)]


def test_join_residual_predicate_applies_to_matches():
    view = View("SELECT a.id, b.id AS bid FROM a JOIN b ON a.k = b.k AND a.v < b.v")
    assert view(a=z((1, 1, "x", 5, 1)), b=z((10, 1, "y", 3, 1), (11, 1, "y", 9, 1))) == [(1, 11, 1)]
    assert view(b=z((10, 1, "y", 3, -1), (10, 1, "y", 6, 1))) == [(1, 10, 1)]


def test_left_join_null_extends_while_a_key_has_no_match():
    view = View("SELECT a.id, b.id AS bid FROM a LEFT JOIN b ON a.k = b.k")
    assert view(a=z((1, 1, "x", 0, 1), (2, None, "x", 0, 1))) == [(1, None, 1), (2, None, 1)]
    assert view(b=z((10, 1, "y", 0, 1), (11, None, "y", 0, 1))) == [(1, None, -1), (1, 10, 1)]
    assert view(b=z((10, 1, "y", 0, -1))) == [(1, None, 1), (1, 10, -1)]


def test_full_outer_join_null_extends_both_sides():
    view = View("SELECT a.id, b.id AS bid FROM a FULL JOIN b ON a.k = b.k AND b.g = 'y'")
    assert view(a=z((1, 1, "x", 0, 1)), b=z((10, 1, "n", 0, 1))) == [(1, None, 1), (None, 10, 1)]
    assert view(b=z((10, 1, "n", 0, -1), (10, 1, "y", 0, 1))) == [(1, None, -1), (1, 10, 1), (None, 10, -1)]
    assert view(a=z((1, 1, "x", 0, -1))) == [(1, 10, -1), (None, 10, 1)]


def test_right_join_keeps_unmatched_right_rows():
    view = View("SELECT a.id, b.id AS bid FROM a RIGHT JOIN b ON a.k = b.k")
    assert view(b=z((10, 1, "y", 0, 1))) == [(None, 10, 1)]
    assert view(a=z((1, 1, "x", 0, 1), (2, 1, "x", 0, 1))) == [(1, 10, 1), (2, 10, 1), (None, 10, -1)]


def test_exists_and_not_exists_with_equality_correlation():
    semi = View("SELECT id FROM a WHERE EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.v > 0)")
    anti = View("SELECT id FROM a WHERE NOT EXISTS (SELECT 1 FROM b WHERE b.k = a.k AND b.v > 0)")
    first = dict(a=z((1, 1, "x", 0, 1), (2, 2, "x", 0, 1)), b=z((10, 1, "y", 5, 1), (11, 2, "y", 0, 1)))
    assert semi(**first) == [(1, 1)]
    assert anti(**first) == [(2, 1)]
    second = dict(b=z((11, 2, "y", 0, -1), (11, 2, "y", 1, 1), (10, 1, "y", 5, -1)))
    assert semi(**second) == [(1, -1), (2, 1)]
    assert anti(**second) == [(1, 1), (2, -1)]


def test_not_in_follows_sql_null_rule():
    view = View("SELECT id FROM a WHERE k NOT IN (SELECT k FROM b)")
    assert view(a=z((1, 1, "x", 0, 1), (2, None, "x", 0, 1))) == [(1, 1), (2, 1)]  # empty subquery: all rows
    assert view(b=z((10, 3, "y", 0, 1))) == [(2, -1)]  # NULL NOT IN (3) is NULL
    assert view(b=z((11, None, "y", 0, 1))) == [(1, -1)]  # 1 NOT IN (3, NULL) is NULL
    assert view(b=z((10, 3, "y", 0, -1), (11, None, "y", 0, -1))) == [(1, 1), (2, 1)]


def test_in_subquery_with_aggregate():
    view = View("SELECT id FROM a WHERE k IN (SELECT k FROM b GROUP BY k HAVING COUNT(*) > 1)")
    assert view(a=z((1, 1, "x", 0, 1)), b=z((10, 1, "y", 0, 1))) == []
    assert view(b=z((11, 1, "y", 0, 1))) == [(1, 1)]


def test_linear_aggregate_integrates_and_a_group_leaves_with_its_last_row():
    view = View(
        "SELECT g, COUNT(*) AS n, COUNT(v) AS nv, SUM(v) AS s, AVG(v) AS m, "
        "COUNT(*) FILTER (WHERE v > 1) AS big FROM a GROUP BY g"
    )
    assert "[linear]" in view_explain(view)
    assert view(a=z((1, 0, "x", None, 1))) == [("x", 1, 0, None, None, 0, 1)]
    out = view(a=z((2, 0, "x", 4, 1), (3, 0, "x", 1, 1)))
    assert Bag((r[0], r[1], r[2], None if r[3] is None else float(r[3]), r[4], r[5], r[6]) for r in out) == sorted(
        [("x", 1, 0, None, None, 0, -1), ("x", 3, 2, 5.0, 2.5, 1, 1)], key=repr
    )
    view(a=z((2, 0, "x", 4, -1), (3, 0, "x", 1, -1)))
    assert view(a=z((1, 0, "x", None, -1))) == [("x", 1, 0, None, None, 0, -1)]


def test_global_aggregate_has_its_row_over_no_rows():
    view = View("SELECT COUNT(*) AS n, SUM(v) AS s FROM a")
    assert view() == [(0, None, 1)]
    assert Bag((n, None if s is None else int(s), w) for n, s, w in view(a=z((1, 0, "x", 3, 1)))) == [
        (0, None, -1),
        (1, 3, 1),
    ]


def test_min_max_and_count_distinct_recompute_the_touched_group():
    view = View("SELECT k, MIN(v) AS lo, MAX(v) AS hi, COUNT(DISTINCT g) AS dg FROM a GROUP BY k")
    assert "[multiset]" in view_explain(view)
    assert view(a=z((1, 0, "x", 3, 1), (2, 0, "x", 9, 1), (3, 0, "y", 5, 1))) == [(0, 3, 9, 2, 1)]
    assert view(a=z((2, 0, "x", 9, -1))) == [(0, 3, 5, 2, 1), (0, 3, 9, 2, -1)]
    assert view(a=z((3, 0, "y", 5, -1))) == [(0, 3, 3, 1, 1), (0, 3, 5, 2, -1)]


def test_having_moves_a_group_in_and_out():
    view = View("SELECT k, SUM(v) AS s FROM a GROUP BY k HAVING SUM(v) > 5")
    assert view(a=z((1, 0, "x", 3, 1))) == []
    assert Bag((k, int(s), w) for k, s, w in view(a=z((2, 0, "x", 4, 1)))) == [(0, 7, 1)]
    assert Bag((k, int(s), w) for k, s, w in view(a=z((1, 0, "x", 3, -1)))) == [(0, 7, -1)]


def test_distinct_keeps_a_row_while_any_copy_remains():
    view = View("SELECT DISTINCT g FROM a")
    assert view(a=z((1, 0, "x", 0, 1), (2, 0, "x", 0, 1))) == [("x", 1)]
    assert view(a=z((1, 0, "x", 0, -1))) == []
    assert view(a=z((2, 0, "x", 0, -1))) == [("x", -1)]


def test_union_and_union_all():
    union_all = View("SELECT g FROM a UNION ALL SELECT g FROM b")
    union = View("SELECT g FROM a UNION SELECT g FROM b")
    first = dict(a=z((1, 0, "x", 0, 1)), b=z((10, 0, "x", 0, 1)))
    assert union_all(**first) == [("x", 2)]  # two copies: weight 2
    assert union(**first) == [("x", 1)]
    assert union(a=z((1, 0, "x", 0, -1))) == []
    assert union(b=z((10, 0, "x", 0, -1))) == [("x", -1)]


def test_rank_top_k_keeps_every_row_tied_at_k():
    view = View("SELECT id, g, RANK() OVER (PARTITION BY g ORDER BY v DESC) AS r FROM a QUALIFY r <= 2")
    assert view(a=z((1, 0, "x", 9, 1), (2, 0, "x", 5, 1), (3, 0, "x", 5, 1), (4, 0, "x", 1, 1))) == sorted(
        [(1, "x", 1, 1), (2, "x", 2, 1), (3, "x", 2, 1)], key=repr
    )
    # a new leader pushes both tied rows to rank 3, out of the top 2
    assert view(a=z((5, 0, "x", 10, 1))) == sorted(
        [(5, "x", 1, 1), (1, "x", 1, -1), (1, "x", 2, 1), (2, "x", 2, -1), (3, "x", 2, -1)], key=repr
    )


def test_row_number_top_k_in_a_subquery():
    view = View(
        "SELECT s.id FROM (SELECT id, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v, id) AS rn FROM a) s WHERE s.rn <= 1"
    )
    assert "TopK ROW_NUMBER()" in view_explain(view)
    assert view(a=z((1, 0, "x", 5, 1), (2, 0, "y", 5, 1))) == [(1, 1), (2, 1)]
    assert view(a=z((3, 0, "x", 4, 1), (2, 0, "y", 5, -1))) == [(1, -1), (2, -1), (3, 1)]


def test_order_by_limit_offset_over_the_whole_view():
    view = View("SELECT id, v FROM a ORDER BY v DESC, id LIMIT 2 OFFSET 1")
    assert view(a=z((1, 0, "x", 9, 1), (2, 0, "x", 7, 1), (3, 0, "x", 5, 1), (4, 0, "x", 1, 1))) == [
        (2, 7, 1),
        (3, 5, 1),
    ]
    assert view(a=z((1, 0, "x", 9, -1))) == [(2, 7, -1), (4, 1, 1)]


def test_aggregate_then_top_k_per_partition():
    view = View(
        "SELECT g, k, SUM(v) AS s, RANK() OVER (PARTITION BY g ORDER BY SUM(v) DESC) AS r FROM a "
        "GROUP BY g, k QUALIFY r <= 1"
    )
    out = view(a=z((1, 1, "x", 5, 1), (2, 2, "x", 7, 1), (3, 1, "y", 1, 1)))
    assert Bag((g, k, int(s), r, w) for g, k, s, r, w in out) == [("x", 2, 7, 1, 1), ("y", 1, 1, 1, 1)]
    out = view(a=z((4, 1, "x", 3, 1)))
    assert Bag((g, k, int(s), r, w) for g, k, s, r, w in out) == [("x", 1, 8, 1, 1), ("x", 2, 7, 1, -1)]


def view_explain(view: View) -> str:
    from lakeview.graph import explain

    return explain(view.graph)


@pytest.mark.parametrize(
    "sql",
    [
        "SELECT id FROM a WHERE a.id IN (SELECT id FROM b) OR a.v > 1",
    ],
)
def test_subquery_under_or_is_refused(sql):
    from lakeview.errors import UnsupportedSQLError

    with pytest.raises(UnsupportedSQLError, match="subquery"):
        compile_view(sql, SCHEMAS)


def test_full_join_without_equality_reads_the_whole_other_side():
    view = View("SELECT a.id, b.id AS bid FROM a FULL JOIN b ON a.v < b.v")
    assert "key (none)" in view_explain(view)
    assert view(a=z((1, 0, "x", 5, 1)), b=z((10, 0, "y", 3, 1))) == [(1, None, 1), (None, 10, 1)]
    assert view(b=z((11, 0, "y", 9, 1))) == [(1, None, -1), (1, 11, 1)]
    assert view(a=z((1, 0, "x", 5, -1), (1, 0, "x", 1, 1))) == [(1, 10, 1), (None, 10, -1)]


def test_a_cte_read_twice_is_one_shared_subgraph():
    view = View(
        "WITH c AS (SELECT k, SUM(v) AS s FROM a GROUP BY k) SELECT x.k, y.s FROM c x JOIN c y ON x.k = y.k + 1"
    )
    assert "(shared, shown above)" in view_explain(view)
    assert view_explain(view).count("Aggregate GROUP BY") == 1
    out = view(a=z((1, 1, "x", 5, 1), (2, 2, "x", 7, 1), (3, 2, "x", 1, 1)))
    assert Bag((k, int(s), w) for k, s, w in out) == [(2, 5, 1)]
    out = view(a=z((4, 1, "x", 2, 1)))
    assert Bag((k, int(s), w) for k, s, w in out) == [(2, 5, -1), (2, 7, 1)]
