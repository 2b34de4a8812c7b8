"""Recording a source's new columns: several views of one source finding new columns at the
same moment (threads of one process) all land, each column once, and nothing fails."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lakeview.project import parse_project
from lakeview.config.evolution import added_columns, effective_ddl, record_added


def test_concurrent_views_record_every_new_column_once(tmp_path: Path) -> None:
    data = {
        "lake": {"warehouse": "lake"},
        "sources": {"events": {"format": "json", "path": "landing", "schema": "id BIGINT", "new_columns": "evolve"}},
        "views": {f"v{i}": {"sql": "SELECT * FROM events"} for i in range(8)},
    }
    project = parse_project(data, file=str(tmp_path / "lakeview.toml"), root=tmp_path)

    def record(i: int) -> list[str]:
        return record_added(project, "events", [("shared", "string"), (f"c{i}", "bigint")], epoch=1, view=f"v{i}")

    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(record, range(8)))
    assert sum(r.count("shared") for r in results) == 1, "exactly one view records a column found by all"
    names = [c["name"] for c in added_columns(project, "events")]
    assert sorted(names) == sorted(["shared", *(f"c{i}" for i in range(8))])
    assert effective_ddl(project, "events").startswith("id BIGINT, ")
