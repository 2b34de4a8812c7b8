"""Freshness math on hand-built commit histories: lag curve, SLO compliance, degraded reasons."""

from __future__ import annotations

import pytest

from lakeview.errors import ConfigError
from lakeview.ops.freshness import (
    CommitPoint,
    DegradedReason,
    RuntimeSignals,
    achieved_cadence_ms,
    compliance,
    degraded_reason,
    lag_at,
)
from lakeview.project import parse_project

S = 1000  # ms
H = 3600 * S


def commits(*pairs: tuple[int, int]) -> list[CommitPoint]:
    """(committed at, lag at commit) in seconds."""
    return [CommitPoint(committed_at_ms=t * S, lag_ms=lag * S) for t, lag in pairs]


def test_lag_grows_linearly_between_commits() -> None:
    history = commits((100, 4), (110, 3))
    assert lag_at(history, 50 * S) is None  # before the first snapshot there is no view
    assert lag_at(history, 100 * S) == 4 * S
    assert lag_at(history, 105 * S) == 9 * S  # 4 s at the commit, +5 s since
    assert lag_at(history, 110 * S) == 3 * S
    assert lag_at(history, 200 * S) == 93 * S


def test_newest_input_reflected_never_goes_back() -> None:
    # The second commit's newest input arrived before the first's (an old file landed late):
    # the snapshot still reflects the first commit's newer input.
    history = commits((100, 1), (120, 30))
    assert lag_at(history, 120 * S) == 21 * S


def test_compliance_is_the_fraction_of_the_window_within_target() -> None:
    # Commits every 10 s with 2 s lag at commit: lag runs 2 → 12 s; target 7 s is met for the
    # first 5 s of every 10 s interval.
    history = commits(*[(t, 2) for t in range(0, 3601, 10)])
    value = compliance(history, now_ms=3600 * S, target_lag_ms=7 * S, window_ms=H)
    assert value == pytest.approx(0.5)
    assert compliance(history, now_ms=3600 * S, target_lag_ms=12 * S, window_ms=H) == pytest.approx(1.0)
    assert compliance(history, now_ms=3600 * S, target_lag_ms=1 * S, window_ms=H) == 0.0


def test_compliance_counts_an_outage_in_the_window() -> None:
    # Healthy until t=1800 (lag ≤ 5 s), then nothing for 20 minutes, then healthy again.
    before = [(t, 1) for t in range(0, 1801, 2)]
    after = [(t, 1) for t in range(3000, 3601, 2)]
    history = commits(*before, *after)
    value = compliance(history, now_ms=3600 * S, target_lag_ms=5 * S, window_ms=H)
    # Out of SLO from 1800 + 4 s (lag 1 s + 4 s) until the commit at 3000.
    assert value == pytest.approx((3600 - (3000 - 1804)) / 3600)


def test_window_start_inside_a_gap_and_views_younger_than_the_window() -> None:
    history = commits((0, 0), (5000, 0))
    # Window [1400, 5000+...]: from 1400 to 5000 lag is 1400..5000 s, far over a 60 s target.
    assert compliance(history, now_ms=5000 * S, target_lag_ms=60 * S, window_ms=H) == 0.0
    # A view that first committed 10 minutes ago is judged on those 10 minutes only.
    young = commits(*[(t, 1) for t in range(3000, 3601, 5)])
    assert compliance(young, now_ms=3600 * S, target_lag_ms=10 * S, window_ms=H) == pytest.approx(1.0)
    assert compliance([], now_ms=3600 * S, target_lag_ms=10 * S) is None


def test_caught_up_query_keeps_an_idle_view_fresh() -> None:
    # Last input at t=100; the running query reported at t=600 that nothing was left to read.
    history = commits((100, 1))
    assert lag_at(history, 600 * S, caught_up_at_ms=598 * S) == 2 * S
    assert compliance(
        history, now_ms=600 * S, target_lag_ms=10 * S, window_ms=500 * S, caught_up_at_ms=598 * S
    ) == pytest.approx(
        (9 + 2) / 500  # 101..109 within target, then 598..600
    )


def test_achieved_cadence_is_the_median_gap() -> None:
    history = commits((0, 0), (5, 0), (10, 0), (30, 0))
    assert achieved_cadence_ms(history, now_ms=40 * S) == 5 * S
    assert achieved_cadence_ms(commits((0, 0)), now_ms=40 * S) is None


def reason(
    history: list[CommitPoint], runtime: RuntimeSignals | None, now: int, target: int = 10
) -> DegradedReason | None:
    value = compliance(history, now_ms=now * S, target_lag_ms=target * S)
    lag = lag_at(history, now * S)
    return degraded_reason(
        compliance_value=value, lag_ms=lag, target_lag_ms=target * S, history=history, runtime=runtime, now_ms=now * S
    )


def test_degraded_reasons() -> None:
    fresh = commits(*[(t, 1) for t in range(0, 101, 5)])
    running = RuntimeSignals(alive=True, query_active=True, started_at_ms=-H)
    assert reason(fresh, running, now=101) is None
    stale = commits((0, 1), (100, 1))  # a 100 s gap with a 10 s target
    assert reason(stale, None, now=101) is DegradedReason.STOPPED
    assert reason(stale, RuntimeSignals(alive=False, started_at_ms=0), now=101) is DegradedReason.STOPPED
    assert (
        reason(stale, RuntimeSignals(alive=True, query_active=False, failed="FileNotFound"), now=101)
        is DegradedReason.SOURCE_ERROR
    )
    assert reason(
        stale, RuntimeSignals(alive=True, query_active=True, commit_retry_at_ms=100_500, started_at_ms=-H), now=101
    ) is (DegradedReason.COMMIT_RETRYING)
    assert reason(
        stale, RuntimeSignals(alive=True, query_active=True, registrars_down=("glue",), started_at_ms=-H), now=101
    ) is (DegradedReason.REGISTRAR_DOWN)
    assert reason([], RuntimeSignals(alive=True, query_active=True, trigger_active=True, started_at_ms=0), now=101) is (
        DegradedReason.BACKFILLING
    )
    restarted = RuntimeSignals(
        alive=True, query_active=True, trigger_active=True, pending_files=3, started_at_ms=150 * S
    )
    assert reason(stale, restarted, now=160) is DegradedReason.RECOVERING
    assert reason(stale, running, now=160) is DegradedReason.FALLING_BEHIND
    # Healthy now, but the window holds a slow first batch (first commit after the process started).
    first_slow = commits((100, 40), *[(t, 1) for t in range(105, 200, 5)])
    started = RuntimeSignals(alive=True, query_active=True, started_at_ms=50 * S)
    assert reason(first_slow, started, now=200) is DegradedReason.BACKFILLING
    # ... or a restart after a gap (the process started after commits it did not make).
    restarted_ok = RuntimeSignals(alive=True, query_active=True, started_at_ms=150 * S)
    assert (
        reason(stale + commits(*[(t, 1) for t in range(150, 200, 5)]), restarted_ok, now=200)
        is DegradedReason.RECOVERING
    )


def test_target_lag_defaults_to_twice_the_cadence_and_is_validated() -> None:
    sources = {"orders": {"format": "ingest", "path": "landing", "schema": "id BIGINT"}}
    views = {
        "a": {"sql": "SELECT id FROM orders", "cadence": "5s"},
        "b": {"sql": "SELECT id FROM orders", "cadence": "5s", "target_lag": "1m"},
    }
    project = parse_project({"sources": sources, "views": views})
    assert project.views["a"].target_lag_seconds == 10
    assert project.views["b"].target_lag_seconds == 60
    with pytest.raises(ConfigError, match="views.b.target_lag"):
        parse_project({"sources": sources, "views": {"b": {**views["b"], "target_lag": "manual"}}})
    with pytest.raises(ConfigError, match="spark.master"):
        parse_project({"spark": {"master": "mesos://x"}})


def test_a_parked_view_reads_failed_whatever_its_lag() -> None:
    fresh = commits(*[(t, 1) for t in range(0, 101, 5)])
    running = RuntimeSignals(alive=True, query_active=True, started_at_ms=-H)
    for history, runtime in ((fresh, running), (commits((0, 1)), None), ([], None)):
        value = compliance(history, now_ms=101 * S, target_lag_ms=10 * S)
        got = degraded_reason(
            compliance_value=value,
            lag_ms=lag_at(history, 101 * S),
            target_lag_ms=10 * S,
            history=history,
            runtime=runtime,
            now_ms=101 * S,
            parked=True,
        )
        assert got is DegradedReason.FAILED
