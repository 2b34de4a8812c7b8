"""Grouped views: several Iceberg views' changes for one epoch committed in ONE multi-table
catalog transaction (``POST /v1/{prefix}/transactions/commit``), every snapshot stamped with the
same epoch and frontier, so a reader can pick snapshots of one point in time across the group.

Every member gets a snapshot every epoch (an empty append when its change is empty), so the
member tables' epochs never diverge. Exactly once works as for one view: the epoch is read back
from the members' snapshot summaries and a replayed epoch is skipped. Iceberg only: Delta has no
multi-table transaction.
"""

from __future__ import annotations

import logging
from dataclasses import replace

from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.table import CommitTableRequest, Table, TableIdentifier
from pyiceberg.table.update import AddSnapshotUpdate, TableUpdate

from lakeview.errors import CommitConflictError, WriterError
from lakeview.ivm.commits import Change, CommitRecord, Epoch
from lakeview.ops.retrying import retry_transient
from writers.base import WriterCapabilities
from writers.graph_state import Replacement
from writers.iceberg.metadata_memo import arrow_schema
from writers.iceberg.replacement import Replaced, stage_replacement, start_writing
from writers.iceberg.writer import IcebergWriter, last_commit_of
from writers.staged_files import ReplacingFiles, WrittenFile, stage_iceberg_files

log = logging.getLogger("lakeview.writers.group")
MAX_ATTEMPTS = 8
GROUP = "lakeview.group"


class IcebergGroupWriter:
    """Commits the member views of ``group`` together through the REST catalog ``catalog``."""

    # Commits through the catalog only; executor-written files reach it through its members' commit_files.
    capabilities = WriterCapabilities(format="iceberg", catalog_commits=True, multi_table_transactions=True)

    def __init__(
        self, catalog: RestCatalog, group: str, members: dict[str, IcebergWriter], owners: dict[str, str] | None = None
    ) -> None:
        """``members``: table name -> writer; ``owners``: table name -> the view its snapshots name
        (a view's state tables and change-feed mirror commit with it; default: the table's name)."""
        if not members:
            raise WriterError(f"group {group!r} has no member views")
        alone = sorted(name for name, writer in members.items() if not writer.capabilities.multi_table_transactions)
        if alone:
            raise WriterError(f"group {group!r}: {', '.join(alone)} cannot join a multi-table transaction")
        self.catalog = catalog
        self.group = group
        self.members = members
        self.owners = owners or {}
        # Each member as this writer's last transaction left it: the catalog applied exactly the staged updates
        # to exactly these tables (their requirements held), so the next epoch stages on them without loading
        # every member again; a failed or refused attempt forgets them (a retry loads the tables).
        self._after_commit: dict[str, Table] = {}
        # What each member's last replacement left (its live files), so its next replacement reads no manifest
        # (used only while that replacement's snapshot is the member's current one: writers.iceberg.replacement).
        self._replaced: dict[str, Replaced] = {}

    def last_epoch(self) -> int | None:
        """The newest epoch every member has committed (members move together, so they agree)."""
        return _last_epoch([w.table() for w in self.members.values()])

    def commit(
        self, epoch: Epoch, changes: dict[str, Change | list[WrittenFile]], epochs: dict[str, Epoch] | None = None
    ) -> dict[str, CommitRecord] | None:
        """Commit every member's change for ``epoch`` atomically: all members move, or none.

        A change is a :class:`Change` or the data files Spark's executors wrote for an append
        (:mod:`writers.staged_files`). Returns None when the epoch is already committed or every
        change is empty. ``epoch.view`` is ignored (each member's snapshot names its own view);
        ``epochs`` may give a member its own stamp of the same epoch (its rows in, watermark).
        """
        unknown = set(changes) - set(self.members)
        if unknown:
            raise WriterError(f"group {self.group!r}: {sorted(unknown)} are not members")
        if all(_is_empty(change) for change in changes.values()):
            return None
        attempts = iter(range(1, MAX_ATTEMPTS + 1))

        def attempt() -> dict[str, CommitRecord] | None:
            number = next(attempts)
            known, self._after_commit = self._after_commit, {}
            tables = {view: known.get(view) or writer.table() for view, writer in self.members.items()}
            done = _last_epoch(list(tables.values()))
            if done is not None and epoch.number <= done:
                log.info("group %s: epoch %s already committed; skipping", self.group, epoch.number)
                return None
            # the replacements' rows are written first, in pyiceberg's writer threads, while the members are staged
            writing = {
                view: start_writing(tables[view], change)
                for view, change in changes.items()
                if isinstance(change, Replacement)
            }
            staged: list[CommitTableRequest] = []
            records: dict[str, CommitRecord] = {}
            after: dict[str, Table] = {}
            replaced: dict[str, Replaced] = {}
            for view, writer in self.members.items():
                table = tables[view]
                member_epoch = (epochs or {}).get(view) or replace(epoch, view=self.owners.get(view, view))
                if member_epoch.number != epoch.number or member_epoch.frontier != epoch.frontier:
                    raise WriterError(
                        f"group {self.group!r}: {view} stamps epoch {member_epoch.number}, not {epoch.number} and its frontier"
                    )
                change = changes.get(view)
                if isinstance(change, list) and change and not isinstance(change, ReplacingFiles):
                    txn, properties = stage_iceberg_files(table, member_epoch, change)
                elif view in writing or isinstance(change, ReplacingFiles):
                    txn, properties, left = stage_replacement(
                        table, member_epoch, writing.get(view, change), self._replaced.get(view)
                    )
                    if left is not None:
                        replaced[view] = left
                else:
                    empty = Change(arrow_schema(table).empty_table())
                    txn, properties = writer.stage(table, member_epoch, change if isinstance(change, Change) else empty)
                if table.properties.get(GROUP) != self.group:
                    txn.set_properties({GROUP: self.group})
                namespace, name = writer.identifier
                staged.append(
                    CommitTableRequest(
                        identifier=TableIdentifier(namespace=[namespace], name=name),
                        requirements=txn._requirements,  # pyiceberg stages these; its client has no multi-table commit
                        updates=txn._updates,
                    )
                )
                records[view] = CommitRecord.from_properties(properties, _new_snapshot_id(txn._updates))  # type: ignore[assignment]
                after[view] = Table(table.name(), txn.table_metadata, table.metadata_location, table.io, table.catalog)
            status = self._post(staged)
            if status == 204:
                self._after_commit, self._replaced = after, replaced
                return records
            log.warning(
                "group %s: transaction for epoch %s answered %s (attempt %s)", self.group, epoch.number, status, number
            )
            if status == 409:  # per view too, as a single view's writer says it (runtime heartbeats count these)
                for view in sorted(set(self.owners.get(m, m) for m in self.members)):
                    log.warning("%s: commit of epoch %s lost a race (group %s)", view, epoch.number, self.group)
            raise CommitConflictError(
                f"group {self.group}: epoch {epoch.number}: the transaction answered {status} ({number} attempts)"
            )

        return retry_transient(attempt, what=f"group {self.group}: epoch {epoch.number}", attempts=MAX_ATTEMPTS)

    def _post(self, staged: list[CommitTableRequest]) -> int:
        body = '{"table-changes": [' + ", ".join(request.model_dump_json() for request in staged) + "]}"
        try:
            response = self.catalog._session.post(  # the RestCatalog's session carries its auth
                self.catalog.url("transactions/commit", prefixed=True), data=body,
                headers={"Content-Type": "application/json"},
            )  # fmt: skip
        except OSError as exc:  # connection lost: the state is unknown, the epoch check decides
            log.warning("group %s: transaction request failed: %s", self.group, exc)
            return 503
        if response.status_code not in (204, 409) and response.status_code < 500:
            raise WriterError(
                f"group {self.group}: transaction refused ({response.status_code}): {response.text[:500]}"
            )
        return response.status_code


def _last_epoch(tables: list[Table]) -> int | None:
    epochs = [last_commit_of(table) for table in tables]
    return None if any(e is None for e in epochs) else min(e.epoch for e in epochs)  # type: ignore[union-attr]


def _new_snapshot_id(updates: tuple[TableUpdate, ...]) -> int | None:
    """The id of the snapshot a staged transaction adds (what the table's current snapshot is once the
    catalog accepted it, with no load to ask)."""
    added = [u.snapshot.snapshot_id for u in updates if isinstance(u, AddSnapshotUpdate)]
    return added[-1] if added else None


def _is_empty(change: Change | list[WrittenFile]) -> bool:
    if isinstance(change, ReplacingFiles):
        return False  # no files: every row of the table goes
    return not change if isinstance(change, list) else change.is_empty


class StagedWriter(IcebergWriter):
    """One table of a group as its view's maintainer sees it: reads go to the table, a commit
    (rows, or data files Spark's executors wrote) is held until the group commits every table's
    change of the epoch in one transaction (:meth:`take`). The maintainer never reads back what
    it committed within an epoch, so holding the commit changes nothing it computes."""

    def __init__(self, catalog: RestCatalog, namespace: str, name: str) -> None:
        super().__init__(catalog, namespace, name)
        self.pending: tuple[Epoch, Change | list[WrittenFile]] | None = None

    def commit(self, epoch: Epoch, change: Change) -> CommitRecord | None:
        """Hold ``change`` for the group's transaction; returns None (nothing is committed yet)."""
        self._hold(epoch, change)
        return None

    def commit_files(self, epoch: Epoch, files: list[WrittenFile]) -> CommitRecord | None:
        """Hold executor-written ``files`` for the group's transaction (see :meth:`commit`)."""
        self._hold(epoch, files)
        return None

    def _hold(self, epoch: Epoch, change: Change | list[WrittenFile]) -> None:
        if self.pending is not None:
            raise WriterError(
                f"{'.'.join(self.identifier)}: a second commit in epoch {epoch.number}; a group stages one per table"
            )
        self.pending = (epoch, change)

    def take(self) -> tuple[Epoch, Change | list[WrittenFile]] | None:
        """The held commit (cleared)."""
        pending, self.pending = self.pending, None
        return pending
