"""Source schema evolution: ``[sources.NAME] new_columns = "evolve"``.

With ``"ignore"`` (the default) Spark projects the declared schema and input columns not in it
are dropped. With ``"evolve"`` each batch's files are checked for columns the source does not
know yet (JSON: the keys of every line; CSV: each file's header; Parquet: the file footers).
A new column is added to the source's schema with the type Spark infers for it, recorded in
``<warehouse>/_lakeview/schemas/<source>.json`` (so a restart, every view of the source and
``lakeview verify`` see the same schema), and the batch is read again with the evolved schema
so its values are not lost. Views that select ``*`` gain the column (their table's schema
evolves; rows committed before read NULL for it; a graph view's where its ``*`` can follow:
:mod:`lakeview.graph.evolve`); views naming their columns are unaffected.

Columns are only ever added, never dropped or retyped: a value that does not fit the recorded
type later is a malformed row (quarantined). Change feeds evolve the same way: with an operation
column a new column is a new top-level key (the feed's mirror table gains it too, so the old
image of a row written before reads NULL for it); with before/after images it is a new field of
either image object (keys outside the two images are not row columns and stay ignored).
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import uuid
from collections.abc import Collection
from pathlib import Path
from typing import TYPE_CHECKING

from lakeview.config.models import NewColumns, ProjectConfig
from lakeview.config.schema import parse_ddl

if TYPE_CHECKING:
    pass

log = logging.getLogger("lakeview.evolution")


def schema_file(project: ProjectConfig, source: str) -> Path:
    return project.warehouse_path / "_lakeview" / "schemas" / f"{source}.json"


def added_columns(project: ProjectConfig, source: str) -> list[dict[str, object]]:
    """The columns evolution added to ``source``, in the order they appeared:
    ``{"name", "type" (Spark DDL), "epoch", "view"}``."""
    try:
        return list(json.loads(schema_file(project, source).read_text())["added"])
    except (OSError, ValueError, KeyError):
        return []


def effective_ddl(project: ProjectConfig, source: str) -> str:
    """The source's schema as it has evolved: the declared columns, then the added ones
    (``project`` may already be evolved: columns it has are not added twice)."""
    ddl = project.sources[source].schema_
    have = {c.name.lower() for c in parse_ddl(ddl)}
    added = [f"`{c['name']}` {c['type']}" for c in added_columns(project, source) if str(c["name"]).lower() not in have]
    return ", ".join([ddl, *added]) if added else ddl


def with_evolved_sources(project: ProjectConfig, only: Collection[str] | None = None) -> ProjectConfig:
    """``project`` with every evolving source's schema (``only``: of these sources) replaced by its evolved
    schema; ``project`` itself when no source has columns it lacks (callers test ``is`` per batch)."""
    evolved = {
        name: source.model_copy(update={"schema_": ddl})
        for name, source in project.sources.items()
        if source.new_columns is NewColumns.EVOLVE
        and (only is None or name in only)
        and (ddl := effective_ddl(project, name)) != source.schema_
    }
    if not evolved:
        return project
    return project.model_copy(update={"sources": {**project.sources, **evolved}})


def record_added(
    project: ProjectConfig, source: str, columns: list[tuple[str, str]], *, epoch: int, view: str
) -> list[str]:
    """Add ``columns`` ((name, Spark type)) to the source's recorded schema; returns the names
    that were really new (another view of the source may have recorded them already)."""
    path = schema_file(project, source)
    path.parent.mkdir(parents=True, exist_ok=True)
    # Several views of one source (threads of one process, or processes) may find the same
    # new column at once: read-merge-write under an exclusive lock, through a unique temp file.
    with open(path.parent / f".{source}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        added = added_columns(project, source)
        known = {c.name.lower() for c in parse_ddl(project.sources[source].schema_)} | {
            str(c["name"]).lower() for c in added
        }
        fresh = [(name, kind) for name, kind in columns if name.lower() not in known]
        if not fresh:
            return []
        added += [{"name": name, "type": kind, "epoch": epoch, "view": view} for name, kind in fresh]
        hidden = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        hidden.write_text(json.dumps({"source": source, "added": added}, indent=2))
        os.replace(hidden, path)
    log.warning(
        "source %s: new column(s) %s (epoch %s of %s) added to its schema",
        source,
        ", ".join(f"{n} {t}" for n, t in fresh),
        epoch,
        view,
    )
    return [name for name, _ in fresh]
