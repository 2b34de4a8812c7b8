"""Old runs' temporary directories removed in the background while this run goes on.

pytest removes the numbered base directories of older sessions (``pytest-of-<user>/pytest-<n>``
beyond ``tmp_path_retention_count``) when a session ends; a run of this suite leaves some
hundreds of MB in many small files (lakes, checkpoints, catalog stores), so that removal made
the end of every run wait (measured: 4 s for a small leftover at load 16, ~15 s after full runs).
At the start of a session the same removal (pytest's own function and arguments: directories
in use are locked and kept) runs in a detached process instead, and the session's end finds
nothing left to remove.

``python -m tests.stale_temp ROOT KEEP LOCK_DEAD_BEFORE`` does the removal."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PREFIX = "pytest-"
_started: list[subprocess.Popen[bytes]] = []  # referenced to the end: not collected (and warned about) while it runs


def remove_in_background(config: pytest.Config, basetemp: Path) -> subprocess.Popen[bytes] | None:
    """Start the removal of the sessions older than the ones pytest keeps, next to ``basetemp``
    (None: a base directory given with ``--basetemp``, or a policy keeping none, left to pytest)."""
    from _pytest.pathlib import LOCK_TIMEOUT  # pytest's own: a lock older than this is a dead run's

    keep = int(config.getini("tmp_path_retention_count"))
    if not re.fullmatch(rf"{PREFIX}\d+", basetemp.name) or config.getini("tmp_path_retention_policy") == "none":
        return None
    dead_before = basetemp.stat().st_mtime - LOCK_TIMEOUT
    removal = subprocess.Popen(
        [sys.executable, "-m", "tests.stale_temp", str(basetemp.parent), str(keep), str(dead_before)],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # outlives the session when the removal takes longer than the run
    )
    _started.append(removal)
    return removal


def main(root: str, keep: str, dead_before: str) -> None:
    from _pytest.pathlib import cleanup_numbered_dir  # what pytest runs at the session's end

    cleanup_numbered_dir(Path(root), PREFIX, int(keep), float(dead_before))


if __name__ == "__main__":
    main(*sys.argv[1:4])
