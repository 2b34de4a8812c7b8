"""The one retry policy: transient errors are retried with backoff until they pass or the attempts
run out, terminal ones are raised at once, and the class of an error decides."""

from __future__ import annotations

import pytest

from lakeview.errors import CommitConflictError, ConfigError, StorageError, TerminalError, TransientError, WriterError
from lakeview.ops.retrying import is_transient, retry_transient


def test_a_transient_error_is_retried_until_the_step_passes() -> None:
    waits: list[float] = []
    calls = iter([CommitConflictError("race"), StorageError("s3 down"), "done"])

    def step() -> str:
        outcome = next(calls)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    assert retry_transient(step, what="commit", sleep=waits.append) == "done"
    assert waits == [0.2, 0.4], "0.2 s doubling"


def test_a_terminal_error_is_raised_at_once_and_the_last_transient_one_after_the_attempts() -> None:
    calls = []

    def terminal() -> None:
        calls.append(1)
        raise WriterError("does not fit the table")

    with pytest.raises(WriterError, match="does not fit"):
        retry_transient(terminal, what="commit", sleep=lambda s: None)
    assert len(calls) == 1

    waits: list[float] = []

    def always() -> None:
        raise StorageError("still down")

    with pytest.raises(StorageError, match="still down"):
        retry_transient(always, what="commit", attempts=5, max_s=0.5, sleep=waits.append)
    assert waits == [0.2, 0.4, 0.5, 0.5], "capped at max_s, one wait fewer than attempts"


def test_the_error_class_decides() -> None:
    assert (
        is_transient(TransientError("x")) and is_transient(StorageError("x")) and is_transient(ConnectionResetError())
    )
    assert not is_transient(TerminalError("x")) and not is_transient(ConfigError("f", "k", "bad"))
    assert not is_transient(FileNotFoundError("gone")), "a missing file does not come back by waiting"
    assert not is_transient(ValueError("a bug")) and is_transient(ValueError("x"), transient=(ValueError,))
    assert isinstance(StorageError("x"), WriterError), "callers catching WriterError still catch it"
