"""The chaos soak's faults, each once, on small data (``bench/chaos.py`` runs them at random for
30 minutes): one PostgreSQL catalog store, one SeaweedFS warehouse and one ``lakeview up``
subprocess for the module, a generator landing known rows the whole time. After each fault every
view commits again, and equals DuckDB's recompute at its committed frontier; at the end every
landed event is in the append view exactly once, ``lakeview verify`` passes for every view and no
epoch was committed twice or skipped."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.chaos.faults import FaultRun, inject
from tests.chaos.lake import VIEWS, ChaosLake

TIMEOUT_S = 240.0


@pytest.fixture(scope="module")
def lake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ChaosLake]:
    with ChaosLake(tmp_path_factory.mktemp("chaos"), landing_mb=16) as started:
        started.generator.start(interval_s=1.0)
        yield started


def recovered(run: FaultRun, lake: ChaosLake) -> None:
    """The lake came back: every view committed again, none is FAILED, none lost or doubled a row."""
    assert run.error is None, f"{run.kind}: {run.error}\n(see {lake.up_log})"
    assert run.recover_s is not None
    assert lake.failed_views() == [], f"{run.kind}: views left FAILED"
    assert {c.view for c in run.checks} == set(VIEWS)
    for check in run.checks:
        assert (check.lost, check.duplicated) == (0, 0), (
            f"{run.kind}: {check.view} at epoch {check.epoch}: {check.describe}"
        )


def test_malformed_files_are_quarantined_and_the_views_go_on(lake: ChaosLake) -> None:
    run = inject(lake, "malformed_file", TIMEOUT_S)
    recovered(run, lake)
    # Every broken line is set aside (the JSON whose string is not UTF-8 too), none reaches a view.
    assert run.detail == "quarantined events_log 4, balances 3"


def test_a_terminal_error_parks_one_view_and_resume_catches_it_up(lake: ChaosLake) -> None:
    run = inject(lake, "terminal_error", TIMEOUT_S, view="enriched")
    recovered(run, lake)
    assert "enriched FAILED at epoch" in run.detail and "injected terminal error" in run.detail
    assert run.detail.endswith("resume → 202")


def test_a_postgresql_restart_is_ridden_out(lake: ChaosLake) -> None:
    run = inject(lake, "postgres_restart", TIMEOUT_S, down_s=2.0)
    recovered(run, lake)
    assert run.catalog_s is not None


def test_an_s3_outage_is_ridden_out(lake: ChaosLake) -> None:
    run = inject(lake, "s3_outage", TIMEOUT_S, down_s=4.0)  # some 4 epochs at a 1 s cadence hit it
    recovered(run, lake)


def test_a_full_landing_disk_loses_nothing(lake: ChaosLake) -> None:
    if not lake.landing_is_own_fs:
        pytest.skip(f"the landing directory is not its own file system: {lake.landing_mounted}")
    run = inject(lake, "full_disk", TIMEOUT_S, full_s=4.0)
    recovered(run, lake)
    assert not run.detail.startswith("0 "), "the generator's writes did fail while the disk was full"


def test_sigkill_of_lakeview_up_restarts_exactly_once(lake: ChaosLake) -> None:
    run = inject(lake, "sigkill", TIMEOUT_S)
    recovered(run, lake)
    assert run.catalog_s is not None


def test_after_every_fault_nothing_is_lost_doubled_or_skipped(lake: ChaosLake) -> None:
    lake.quiesce(TIMEOUT_S)
    lost, duplicated = lake.events_end_to_end()
    assert len(lake.generator.landed_ids) > 0 and (lost, duplicated) == (0, 0)
    for view, (code, line) in lake.verify_cli().items():
        assert code == 0 and line.endswith("equal"), f"lakeview verify {view}: {line}"
    lake.check()  # records the last commits too
    for view in VIEWS:
        assert lake.ledger.twice(view) == [], f"{view}: epochs committed twice"
        assert lake.unexplained_gaps(view) == [], f"{view}: epochs skipped"
    assert lake.stop_up() == 0, Path(lake.up_log).read_text()[-3000:]
