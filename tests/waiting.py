"""Polling for tests that watch a real process or server: a wait, never a timing assertion."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

INTERVAL_S = 0.1  # a met condition is seen within this (plus one look), not half a second later
LOOK_SHARE = 3  # sleep twice as long as a look took at least: the poll takes a third of a core at most


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition", interval: float = INTERVAL_S
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; AssertionError on timeout.
    It looks again after ``interval`` seconds, or after twice as long as the last look took when that is
    longer (a costly look, e.g. reading a table, must not starve the server or job under test)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        began = time.monotonic()
        value = predicate()
        if value:
            return value
        time.sleep(max(interval, (LOOK_SHARE - 1) * (time.monotonic() - began)))
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
