"""Every view's epochs run under one guard (:func:`guarded`, wrapped around each query's
``foreachBatch``): a transient error is retried in place with backoff (``lakeview.ops.retrying``;
every table skips what an earlier attempt already committed), and the error that ends the
epoch — terminal, or transient past its retries — is noted here before it stops this query
only. The process running the views (``lakeview.stack.supervision``) then parks the view as FAILED.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from lakeview.ops.retrying import is_transient, retry_transient
from spark_jobs import faults

log = logging.getLogger("lakeview.epochs")
# About four minutes of retries (0.5 s doubling to 30 s): outlasts a storage or catalog outage.
VIEW_ATTEMPTS = 12
FIRST_WAIT_S = 0.5
MAX_WAIT_S = 30.0


@dataclass(frozen=True)
class EpochFailure:
    """The error that stopped a query, and at which epoch."""

    epoch: int
    error: BaseException
    transient: bool


_failures: dict[str, EpochFailure] = {}  # query name -> what stopped it
_lock = threading.Lock()


def failure_of(query_name: str) -> EpochFailure | None:
    """What stopped the query named ``query_name`` (None: nothing, or it was not the guard)."""
    with _lock:
        return _failures.get(query_name)


def guarded(query_name: str, process: Callable[[Any, int], None]) -> Callable[[Any, int], None]:
    """``process`` with transient errors retried and the final error noted (then re-raised)."""

    def run(batch: Any, epoch_id: int) -> None:
        with _lock:
            _failures.pop(query_name, None)

        def once() -> None:
            faults.raise_point(query_name, epoch_id)
            process(batch, epoch_id)

        try:
            retry_transient(
                once,
                what=f"{query_name} epoch {epoch_id}",
                attempts=VIEW_ATTEMPTS,
                first_s=FIRST_WAIT_S,
                max_s=MAX_WAIT_S,
            )
        except BaseException as exc:
            log.error("%s: epoch %s failed: %s: %s", query_name, epoch_id, exc.__class__.__name__, exc)
            with _lock:
                _failures[query_name] = EpochFailure(epoch_id, exc, is_transient(exc))
            raise

    return run
