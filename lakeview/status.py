"""Per-view status read from the catalog store and the tables' snapshot summaries.

Reads the store directly (SQLite/PostgreSQL), so it works whether or not ``up`` is running.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from datetime import datetime, timezone

from lakeview.config import ProjectConfig
from lakeview.errors import NoSuchTableError


@dataclass(frozen=True)
class ViewStatus:
    view: str
    table: str
    format: str
    cadence: str
    state: str
    snapshot_id: int | None = None
    epoch: int | None = None
    committed_at: str | None = None
    lag_ms: int | None = None
    rows_inserted: int | None = None
    rows_deleted: int | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def view_statuses(project: ProjectConfig) -> list[ViewStatus]:
    from lakeview.embedded import open_store
    from lakeview.tables import status_inputs

    store = open_store(project)
    statuses = []
    for name, view in project.views.items():
        base = dict(view=name, table=f"{view.namespace}.{name}", format=view.format.value, cadence=str(view.cadence))
        try:
            # Iceberg snapshots from the store, or the Delta log (lakeview/tables.py).
            record, _ = status_inputs(project, store, name)
        except NoSuchTableError:
            statuses.append(ViewStatus(**base, state="not created (run `lakeview up`)"))
            continue
        if record is None:
            statuses.append(ViewStatus(**base, state="created, no commit yet"))
            continue
        committed = datetime.fromtimestamp(record.committed_at_ms / 1000, tz=timezone.utc)
        statuses.append(
            ViewStatus(
                **base,
                state="committed",
                snapshot_id=record.snapshot_id,
                epoch=record.epoch,
                committed_at=committed.isoformat(timespec="seconds"),
                lag_ms=record.lag_ms,
                rows_inserted=record.rows_inserted,
                rows_deleted=record.rows_deleted,
            )
        )
    return statuses
