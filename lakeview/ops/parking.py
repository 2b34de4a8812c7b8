"""Parked views: a view whose epoch failed with a terminal error stops alone, recorded as FAILED
with the error and the epoch, while every other view goes on.

The record is a small JSON file next to the heartbeats (``<warehouse>/_lakeview/runtime/
<view>.failed.json``), so ``lakeview status``, the catalog's ``/lakeview/v1`` routes and
``/metrics`` in any process see it. ``lakeview resume VIEW`` (or ``POST /lakeview/v1/views/
VIEW/resume``) drops a ``<view>.resume`` request there; the process running the views picks it
up within a second and restarts the view from its last committed epoch (Spark replays the
failed epoch; every table skips what it already holds, so it is applied exactly once). A
restart of ``lakeview up`` retries every parked view the same way.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from lakeview.config.models import ProjectConfig
from lakeview.ops.runtime import runtime_dir

FAILED = "FAILED"


@dataclass(frozen=True)
class ParkedView:
    """Why and where a view stopped: the status API shows these fields as they are."""

    view: str
    error: str
    failed_epoch: int | None  # the epoch that failed (None: the view failed before its first epoch)
    error_type: str
    failed_at_ms: int
    transient: bool = False  # a transient error that outlasted its retries

    def as_dict(self) -> dict:
        return asdict(self)


def _failed_path(project: ProjectConfig, view: str) -> Path:
    return runtime_dir(project) / f"{view}.failed.json"


def _resume_path(project: ProjectConfig, view: str) -> Path:
    return runtime_dir(project) / f"{view}.resume"


def park(
    project: ProjectConfig, view: str, error: BaseException | str, epoch: int | None, *, transient: bool = False
) -> ParkedView:
    """Record ``view`` as FAILED at ``epoch`` with ``error`` (atomically replaced)."""
    message = str(error) if not isinstance(error, str) else error
    kind = error.__class__.__name__ if not isinstance(error, str) else "Error"
    parked = ParkedView(
        view=view,
        error=message[:2000],
        failed_epoch=epoch,
        error_type=kind,
        failed_at_ms=int(time.time() * 1000),
        transient=transient,
    )
    directory = runtime_dir(project)
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{view}.failed.json.{os.getpid()}"
    hidden.write_text(json.dumps(parked.as_dict()))
    os.replace(hidden, _failed_path(project, view))
    return parked


def parked(project: ProjectConfig, view: str) -> ParkedView | None:
    """The view's FAILED record, or None when it is not parked."""
    try:
        data = json.loads(_failed_path(project, view).read_text())
        known = ParkedView.__dataclass_fields__
        return ParkedView(**{k: v for k, v in data.items() if k in known})
    except (OSError, ValueError, TypeError):
        return None


def unpark(project: ProjectConfig, view: str) -> None:
    """Forget the view's FAILED record and any resume request (it is running again)."""
    for path in (_failed_path(project, view), _resume_path(project, view)):
        path.unlink(missing_ok=True)


def request_resume(project: ProjectConfig, view: str) -> Path:
    """Ask the process running the views to restart ``view``; returns the request file."""
    directory = runtime_dir(project)
    directory.mkdir(parents=True, exist_ok=True)
    path = _resume_path(project, view)
    path.write_text(json.dumps({"view": view, "requested_at_ms": int(time.time() * 1000)}))
    return path


def resume_requested(project: ProjectConfig, view: str) -> bool:
    return _resume_path(project, view).exists()
