"""Lakeview's one retry policy: retry what :func:`is_transient` calls transient, with capped
exponential backoff (tenacity), and let everything else through at once.

The decision is the error's class (``lakeview.errors``: ``TransientError`` / ``TerminalError``,
i.e. the ``transient`` attribute); a caller whose library raises its own exceptions says which
of them are transient (``transient=(CommitFailedError, ...)``) rather than writing a loop.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TypeVar

import tenacity

from lakeview.errors import LakeviewError

T = TypeVar("T")
log = logging.getLogger("lakeview.retrying")

# OSErrors that say the thing is not there or not ours: retrying cannot make them appear.
PERMANENT_OS_ERRORS = (FileNotFoundError, PermissionError, IsADirectoryError, NotADirectoryError)


def is_transient(exc: BaseException, transient: tuple[type[BaseException], ...] = ()) -> bool:
    """Whether retrying may help: a Lakeview error says so itself (``transient``); a connection,
    timeout or storage ``OSError`` is transient unless it says a file is missing or not ours;
    ``transient`` adds a caller's library errors. Anything else is terminal (a bug, bad data)."""
    if isinstance(exc, LakeviewError):
        return exc.transient
    if transient and isinstance(exc, transient):
        return True
    if isinstance(exc, PERMANENT_OS_ERRORS):
        return False
    return isinstance(exc, (OSError, TimeoutError, ConnectionError))


def retry_transient(
    step: Callable[[], T],
    *,
    what: str,
    attempts: int = 8,
    transient: tuple[type[BaseException], ...] = (),
    first_s: float = 0.2,
    max_s: float = 5.0,
    before_retry: Callable[[BaseException, int], None] | None = None,
    sleep: Callable[[float], None] | None = None,
) -> T:
    """Run ``step``; on a transient error (:func:`is_transient`) wait and run it again, at most
    ``attempts`` times in all. A terminal error, or the last attempt's transient one, is raised
    as it is. ``before_retry(error, attempt)`` runs before each wait (reset a cache, count a race).
    """

    def retryable(exc: BaseException) -> bool:
        return is_transient(exc, transient)

    def log_retry(state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        log.warning("%s failed (attempt %s of %s), retrying: %s", what, state.attempt_number, attempts, exc)
        if before_retry is not None and exc is not None:
            before_retry(exc, state.attempt_number)

    retrying = tenacity.Retrying(
        stop=tenacity.stop_after_attempt(attempts),
        wait=tenacity.wait_exponential(multiplier=first_s, exp_base=2, max=max_s),
        retry=tenacity.retry_if_exception(retryable),
        before_sleep=log_retry,
        reraise=True,
        **({"sleep": sleep} if sleep is not None else {}),
    )
    return retrying(step)
