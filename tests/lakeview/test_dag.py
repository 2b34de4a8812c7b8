"""Views over views as a user declares them: a chain loads and starts upstream first; a cycle,
an unknown name and an inline upstream are refused with the problem named; any view (a projection dropping
the upstream's key, ``*``, a global aggregate's) may read a view, as an operator graph over its changes;
change files are named, read back and pruned once consumed."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from lakeview.errors import ConfigError
from lakeview.ivm.commits import Change, Epoch
from lakeview.project import explain_view, is_graph_view, load_project, table_key
from lakeview.sql.dag import chain_of, check_dag, downstreams_of, topological_order, upstream_of, view_key
from spark_jobs.sources.view_changes import (
    ChangePublisher,
    change_file_name,
    consumed_files,
    parse_change_file,
    upstream_position,
)
from writers.delta.writer import DeltaWriter

CHAIN = """
[sources.orders]
format = "json"
path = "landing/orders"
schema = "order_id BIGINT, product_id BIGINT, quantity INT, price DOUBLE, op STRING, seq BIGINT"
[sources.orders.changes]
operation = "op"
key = ["order_id"]
sequence = "seq"

[views.big_products]
sql = "SELECT product_id, revenue FROM product_sales WHERE revenue > 100"

[views.product_sales]
sql = "SELECT product_id, SUM(amount) AS revenue, COUNT(*) AS n FROM order_lines GROUP BY product_id"

[views.order_lines]
sql = "SELECT order_id, product_id, quantity * price AS amount FROM orders"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "lakeview.toml"
    path.write_text(text)
    return path


def error_for(tmp_path: Path, text: str) -> str:
    with pytest.raises(ConfigError) as info:
        load_project(write(tmp_path, text))
    return str(info.value)


def test_a_chain_of_views_loads_and_starts_upstream_first(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, CHAIN))
    assert upstream_of(project, "big_products") == "product_sales"
    assert upstream_of(project, "order_lines") is None
    assert chain_of(project, "big_products") == ["big_products", "product_sales", "order_lines"]
    assert downstreams_of(project, "order_lines") == ["product_sales"]
    assert topological_order(project, list(project.views)) == ["order_lines", "product_sales", "big_products"]
    assert topological_order(project, ["big_products", "order_lines"]) == ["order_lines", "big_products"]
    assert table_key(project, "order_lines") == ("order_id",)  # a projection over a change feed
    assert table_key(project, "product_sales") == ("product_id",)
    assert table_key(project, "big_products") is None  # over a view's changes: a multiset keyed by the whole row
    assert project.source_path("order_lines") == project.changes_path("order_lines")


def test_explain_shows_the_upstream(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, CHAIN))
    text = explain_view(project, "product_sales")
    assert "reads the view order_lines: its changes published in _lakeview/changes/order_lines/" in text
    assert "the view's table is keyed by product_id" in text
    assert "published for product_sales" in explain_view(project, "order_lines")


def test_a_cycle_is_refused_naming_it(tmp_path: Path) -> None:
    text = CHAIN.replace("FROM orders", "FROM big_products")
    message = error_for(tmp_path, text)
    assert "views read each other in a cycle:" in message
    assert "big_products -> product_sales -> order_lines -> big_products" in message


def test_a_view_reading_itself_is_a_cycle(tmp_path: Path) -> None:
    message = error_for(tmp_path, CHAIN.replace("FROM product_sales", "FROM big_products"))
    assert "views.big_products.sql" in message and "cycle: big_products -> big_products" in message


def test_an_unknown_name_lists_sources_and_views(tmp_path: Path) -> None:
    message = error_for(tmp_path, CHAIN.replace("FROM product_sales", "FROM product_sale"))
    assert "views.big_products.sql" in message
    assert (
        "'product_sale', which is not a declared source (declared: orders) nor a view (views: order_lines, product_sales)"
        in message
    )


def test_a_projection_dropping_the_upstream_key_is_a_multiset(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, CHAIN.replace("SELECT product_id, revenue FROM", "SELECT revenue FROM")))
    assert is_graph_view(project, "big_products") and table_key(project, "big_products") is None


def test_select_star_over_a_view_loads_and_inline_upstreams_are_refused(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, CHAIN.replace("SELECT product_id, revenue FROM", "SELECT * FROM")))
    assert "view: product_id, revenue, n" in explain_view(project, "big_products")  # the upstream's columns
    text = CHAIN + '\n[views.lines_inline]\nmaterialize = false\nsql = "SELECT order_id, amount FROM order_lines"\n'
    text += '\n[views.over_inline]\nsql = "SELECT order_id, amount FROM lines_inline"\n'
    message = error_for(tmp_path, text)
    assert "inline view 'lines_inline'" in message, message


def test_change_files_name_the_upstream_epoch_and_snapshot() -> None:
    name = change_file_name(7, 123456789)
    assert parse_change_file(name) == (7, 123456789)
    assert parse_change_file("_published.json") is None and parse_change_file(".epoch-1.tmp") is None
    assert upstream_position([f"/x/{change_file_name(3, 5)}", f"/x/{change_file_name(4, -9)}"]) == {
        "upstream_epoch": 4,
        "upstream_snapshot": -9,
    }


def test_consumed_files_are_those_of_committed_batches(tmp_path: Path) -> None:
    project = load_project(write(tmp_path, CHAIN))
    checkpoint = project.checkpoint_path("product_sales")
    changes = project.changes_path("order_lines") / "product_sales"
    changes.mkdir(parents=True)
    files = [changes / change_file_name(e, e) for e in range(3)]
    for f in files:
        f.write_text("")
    (checkpoint / "sources" / "0").mkdir(parents=True)
    for batch, f in enumerate(files):
        (checkpoint / "sources" / "0" / str(batch)).write_text(
            "v1\n" + json.dumps({"path": f"file://{f}", "timestamp": 0, "batchId": batch}) + "\n"
        )
    assert consumed_files(project, "product_sales") == set(), "no batch committed yet"
    (checkpoint / "offsets").mkdir()
    (checkpoint / "commits").mkdir()
    for batch in range(3):
        (checkpoint / "offsets" / str(batch)).write_text(f'v1\n{{}}\n{{"logOffset":{batch}}}\n')
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    (checkpoint / "commits" / "1").write_text("v1\n{}\n")
    assert consumed_files(project, "product_sales") == {str(files[0].resolve()), str(files[1].resolve())}


def test_check_dag_accepts_a_project_without_views_over_views(tmp_path: Path) -> None:
    text = CHAIN.split("[views.big_products]")[0] + '[views.plain]\nsql = "SELECT order_id FROM orders"\n'
    check_dag(load_project(write(tmp_path, text)))


def test_a_join_or_union_reading_views_loads_and_starts_after_every_upstream(tmp_path: Path) -> None:
    text = CHAIN + (
        '\n[views.joined]\nsql = "SELECT s.product_id, s.revenue, l.amount FROM product_sales s LEFT JOIN order_lines l '
        'ON s.product_id = l.product_id"\n'
        '\n[views.both]\nsql = "SELECT product_id, revenue FROM big_products UNION ALL SELECT product_id, amount FROM order_lines"\n'
    )
    project = load_project(write(tmp_path, text))
    assert "joined" in downstreams_of(project, "order_lines") and "joined" in downstreams_of(project, "product_sales")
    assert "both" in downstreams_of(project, "order_lines") and downstreams_of(project, "big_products") == ["both"]
    order = topological_order(project, ["both", "joined", "order_lines", "product_sales", "big_products"])
    for view, upstreams in {
        "joined": ("product_sales", "order_lines"),
        "both": ("big_products", "order_lines"),
    }.items():
        assert all(order.index(u) < order.index(view) for u in upstreams), order
    check_dag(project)


def test_a_join_mixing_a_view_and_a_source_loads(tmp_path: Path) -> None:
    text = CHAIN + (
        '\n[views.joined]\nsql = "SELECT o.order_id, o.quantity, l.amount FROM orders o JOIN order_lines l ON o.order_id = l.order_id"\n'
    )
    project = load_project(write(tmp_path, text))
    assert topological_order(project, ["joined", "order_lines"]) == ["order_lines", "joined"]


def test_a_join_of_views_and_a_projection_of_a_join_view_are_graph_views(tmp_path: Path) -> None:
    three = CHAIN + (
        '\n[views.joined]\nsql = "SELECT s.product_id, l.amount, b.revenue FROM product_sales s JOIN order_lines l '
        'ON s.product_id = l.product_id JOIN big_products b ON b.product_id = s.product_id"\n'
    )
    assert is_graph_view(load_project(write(tmp_path, three)), "joined")  # a 3-way join over views: a graph view
    over_join = CHAIN + (
        '\n[views.joined]\nsql = "SELECT s.product_id, l.amount FROM product_sales s JOIN order_lines l ON s.product_id = l.product_id"\n'
        '\n[views.top]\nsql = "SELECT product_id, amount FROM joined WHERE amount > 1"\n'
    )
    project = load_project(write(tmp_path, over_join))
    assert is_graph_view(project, "joined") and is_graph_view(project, "top"), "its input has no key but the whole row"


def test_a_view_over_a_join_view_loads_keyed_by_the_join_views_key(tmp_path: Path) -> None:
    text = CHAIN + (
        '\n[views.joined]\nsql = "SELECT s.product_id, l.amount FROM product_sales s JOIN order_lines l ON s.product_id = l.product_id"\n'
        '\n[views.top]\nsql = "SELECT product_id, SUM(amount) AS total FROM joined GROUP BY product_id"\n'
        '\n[views.per_product]\nsql = "SELECT l.product_id, COUNT(*) AS n FROM order_lines l JOIN orders o ON l.order_id = o.order_id '
        'GROUP BY l.product_id"\n'
        '\n[views.busy]\nsql = "SELECT product_id, n FROM per_product WHERE n > 2"\n'
    )
    project = load_project(write(tmp_path, text))
    assert table_key(project, "joined") is None, "a retracting join without a key: the whole row"
    assert view_key(project, "joined") == ("product_id", "amount")
    assert table_key(project, "per_product") == ("product_id",), "an aggregate over a join: its GROUP BY"
    assert view_key(project, "per_product") == ("product_id", "n"), "as its readers read it: a multiset"
    order = topological_order(project, ["top", "busy", "joined", "per_product", "order_lines", "product_sales"])
    assert order.index("joined") < order.index("top") and order.index("per_product") < order.index("busy")
    assert downstreams_of(project, "joined") == ["top"]


def _integrated(directory: Path) -> Counter:
    """The rows all published change files add up to (weights summed per row)."""
    total: Counter = Counter()
    for path in sorted(directory.glob("epoch-*.parquet")):
        for row in pq.read_table(path).to_pylist():
            weight = row.pop("__lv_w")
            total[tuple(sorted(row.items()))] += weight
    return +total


def test_publisher_starts_from_the_table_then_publishes_each_missed_epoch_once(tmp_path: Path) -> None:
    """A real Delta upstream: the first publication to a reader is the whole table, then every
    committed epoch not yet published, oldest first; a reader's files add up to the table; files
    its checkpoint committed are pruned; a reader added later starts from the whole table."""
    project = load_project(write(tmp_path, CHAIN))
    writer = DeltaWriter(str(tmp_path / "lake" / "order_lines"), "order_lines")
    writer.ensure_table(pa.schema([("order_id", pa.int64()), ("amount", pa.float64())]), ("order_id",), {})

    def commit(epoch: int, ids: list[int], amounts: list[float], deletes: list[int] = ()) -> None:
        gone = pa.table({"order_id": pa.array(list(deletes), pa.int64())}) if deletes else None
        writer.commit(
            Epoch("order_lines", epoch, {}), Change(pa.table({"order_id": ids, "amount": amounts}), ("order_id",), gone)
        )

    def table_rows() -> Counter:
        return Counter(tuple(sorted(r.items())) for r in writer.table().to_pyarrow_table().to_pylist())

    commit(0, [1, 2, 3], [1.0, 2.0, 3.0])
    commit(1, [2], [20.0], deletes=[3])
    publisher = ChangePublisher(project, "order_lines", writer)
    assert publisher.downstreams == ["product_sales"]
    directory = publisher.reader_dir("product_sales")
    assert publisher.publish() == [1], "no mark yet: the table as of its last commit, in one file"
    assert _integrated(directory) == table_rows()
    assert publisher.publish() == [], "nothing new: nothing published twice"
    commit(2, [4], [4.0])
    commit(3, [1], [10.0], deletes=[4])  # two epochs committed, neither published (a crash)
    assert publisher.publish() == [2, 3]
    assert _integrated(directory) == table_rows()
    names = sorted(p.name for p in directory.glob("epoch-*.parquet"))
    assert [parse_change_file(n)[0] for n in names] == [1, 2, 3]

    # The reader's checkpoint committed the batch that read the first two files: they go.
    checkpoint = project.checkpoint_path("product_sales")
    (checkpoint / "sources" / "0").mkdir(parents=True)
    (checkpoint / "offsets").mkdir()
    (checkpoint / "commits").mkdir()
    entries = [json.dumps({"path": f"file://{directory / n}", "timestamp": 0, "batchId": 0}) for n in names[:2]]
    (checkpoint / "sources" / "0" / "0").write_text("v1\n" + "\n".join(entries) + "\n")
    (checkpoint / "offsets" / "0").write_text('v1\n{}\n{"logOffset":0}\n')
    (checkpoint / "commits" / "0").write_text("v1\n{}\n")
    assert sorted(p.name for p in publisher.prune()) == names[:2]
    assert sorted(p.name for p in directory.glob("epoch-*.parquet")) == names[2:]

    # A second reader declared now: it starts from the whole table; the first gets nothing twice.
    later = load_project(
        write(
            tmp_path,
            CHAIN + '\n[views.counts]\nsql = "SELECT product_id, COUNT(*) AS c FROM order_lines GROUP BY product_id"\n',
        )
    )
    publisher = ChangePublisher(later, "order_lines", writer)
    assert publisher.downstreams == ["product_sales", "counts"]
    assert publisher.publish() == [3]
    assert _integrated(publisher.reader_dir("counts")) == table_rows()
    assert sorted(p.name for p in directory.glob("epoch-*.parquet")) == names[2:]


def test_reading_a_global_aggregate_view_loads(tmp_path: Path) -> None:
    text = CHAIN + '\n[views.everything]\nsql = "SELECT COUNT(*) AS n FROM order_lines"\n'
    text += '\n[views.over_everything]\nsql = "SELECT n FROM everything WHERE n > 5"\n'
    project = load_project(write(tmp_path, text))
    assert table_key(project, "everything") == () and is_graph_view(project, "over_everything")
