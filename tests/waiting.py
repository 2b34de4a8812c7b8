"""Polling for tests that watch a real process or server: a wait, never a timing assertion."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(
    predicate: Callable[[], T], timeout: float = 30.0, what: str = "the condition", interval: float = 0.5
) -> T:
    """Poll ``predicate`` until it returns something truthy, and return that; AssertionError on timeout."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")
