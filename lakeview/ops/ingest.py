"""Rows written straight into a source: the landing side of ``POST /lakeview/v1/sources/{name}/rows``.

A source declared ``format = "ingest"`` is a landing directory of JSON-lines files, read by
the view's Spark file source like a ``json`` source. Each accepted request becomes ONE file,
written hidden, fsynced, renamed into place and the directory fsynced *before* the response,
so an acknowledged row survives a crash and no reader sees half a file.

``Idempotency-Key``: the key and the response are recorded in a SQLite file next to the
landing state (``<warehouse>/_lakeview/ingest/<source>.sqlite``) in the same transaction that
guards the file write, and the file's name is derived from the key, so a retry — also one
racing the first attempt, or arriving after a crash between rename and record — lands nothing
twice and gets the first response back.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import sqlite3
import time
import uuid
from dataclasses import asdict, dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from sqlglot import exp

from lakeview.config.models import ProjectConfig, SourceFormat
from lakeview.config.schema import parse_ddl
from lakeview.errors import BadRequestError, NotFoundError

MAX_BODY_BYTES = 16 * 1024 * 1024
T = exp.DataType.Type
_INT_RANGES = {
    T.TINYINT: 2**7,
    T.SMALLINT: 2**15,
    T.INT: 2**31,
    T.BIGINT: 2**63,
}
_FLOATS = {T.FLOAT, T.DOUBLE, T.DECIMAL}
_STRINGS = {T.VARCHAR, T.CHAR, T.TEXT, T.NCHAR, T.NVARCHAR}
_TIMESTAMPS = {T.TIMESTAMP, T.TIMESTAMPTZ, T.TIMESTAMPLTZ, T.TIMESTAMPNTZ, T.DATETIME}


@dataclass
class IngestResult:
    """What a request did: rows accepted (landed), rows rejected with reasons."""

    source: str
    accepted: int
    rejected: list[dict[str, Any]] = field(default_factory=list)
    file: str | None = None
    replayed: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_rows(body: bytes, content_type: str = "") -> tuple[list[tuple[int, Any]], list[dict[str, Any]]]:
    """A JSON array or NDJSON body → ([(index, value)], [rejections of unparseable lines]).

    Raises BadRequestError when the body as a whole is unusable (empty, not JSON at all)."""
    if len(body) > MAX_BODY_BYTES:
        raise BadRequestError(f"body is {len(body)} bytes; send at most {MAX_BODY_BYTES} per request")
    text = body.decode("utf-8", errors="strict").strip() if body else ""
    if not text:
        raise BadRequestError("empty body; send a JSON array of row objects or NDJSON (one object per line)")
    if text.startswith("[") and "ndjson" not in content_type and "jsonl" not in content_type:
        try:
            values = json.loads(text)
        except json.JSONDecodeError as exc:
            raise BadRequestError(f"body is not a valid JSON array: {exc}") from None
        if not isinstance(values, list):
            raise BadRequestError("a JSON body must be an array of row objects")
        return list(enumerate(values)), []
    rows, rejected = [], []
    for index, line in enumerate(text.splitlines()):
        if not line.strip():
            continue
        try:
            rows.append((index, json.loads(line)))
        except json.JSONDecodeError as exc:
            rejected.append({"index": index, "reason": f"line {index + 1} is not JSON: {exc.msg}"})
    return rows, rejected


class RowValidator:
    """Checks rows against a source's Spark DDL schema and normalizes them for Spark's JSON reader."""

    def __init__(self, ddl: str) -> None:
        self.columns = {c.name: c.type for c in parse_ddl(ddl)}
        self._lower = {name.lower(): name for name in self.columns}

    def validate(self, row: Any) -> tuple[dict[str, Any] | None, str | None]:
        """(normalized row, None) or (None, reason). Missing columns are NULL."""
        if not isinstance(row, dict):
            return None, f"a row must be a JSON object, got {type(row).__name__}"
        unknown = [k for k in row if k.lower() not in self._lower]
        if unknown:
            return None, f"unknown column(s) {', '.join(map(repr, unknown))}; the schema has {', '.join(self.columns)}"
        out: dict[str, Any] = {}
        for key, value in row.items():
            name = self._lower[key.lower()]
            if value is None:
                out[name] = None
                continue
            normalized, problem = _check(value, self.columns[name])
            if problem:
                return None, f"column {name!r}: {problem}"
            out[name] = normalized
        return out, None


def _check(value: Any, dtype: exp.DataType) -> tuple[Any, str | None]:
    kind = dtype.this
    if kind in _INT_RANGES:
        bound = _INT_RANGES[kind]
        if isinstance(value, bool) or not isinstance(value, int):
            return None, f"{value!r} is not an integer ({dtype.sql('spark')})"
        if not -bound <= value < bound:
            return None, f"{value} is out of range for {dtype.sql('spark')}"
        return value, None
    if kind in _FLOATS:
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return None, f"{value!r} is not a finite number ({dtype.sql('spark')})"
        return value, None
    if kind in _STRINGS:
        return (value, None) if isinstance(value, str) else (None, f"{value!r} is not a string")
    if kind == T.BOOLEAN:
        return (value, None) if isinstance(value, bool) else (None, f"{value!r} is not true/false")
    if kind in _TIMESTAMPS:
        try:
            moment = datetime.fromisoformat(value) if isinstance(value, str) else None
        except ValueError:
            moment = None
        if moment is None:
            return None, f"{value!r} is not an ISO-8601 timestamp like 2026-01-01T12:00:00Z"
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)  # naive means UTC, as Spark's session time zone here
        # Spark's JSON reader parses yyyy-MM-dd'T'HH:mm:ss[.SSS][XXX]: milliseconds at most.
        return moment.astimezone(UTC).isoformat(timespec="milliseconds"), None
    if kind == T.DATE:
        try:
            return date.fromisoformat(value).isoformat(), None
        except (TypeError, ValueError):
            return None, f"{value!r} is not a date like 2026-01-31"
    return value, None  # nested and binary types: passed to Spark as given


class SourceIngest:
    """Lands validated rows into one ``ingest`` source's directory, idempotently per key."""

    def __init__(self, project: ProjectConfig, source: str) -> None:
        config = project.sources.get(source)
        if config is None:
            raise NotFoundError(f"no source {source!r}; sources: {', '.join(project.sources) or 'none'}")
        if config.format is not SourceFormat.INGEST:
            raise BadRequestError(
                f"source {source!r} has format {config.format.value!r}; only sources declared "
                'format = "ingest" accept rows over HTTP'
            )
        self.source = source
        self.landing = project.source_path(source)
        self.validator = RowValidator(config.schema_)
        state = project.warehouse_path / "_lakeview" / "ingest"
        state.mkdir(parents=True, exist_ok=True)
        self.landing.mkdir(parents=True, exist_ok=True)
        self.keys_path = state / f"{source}.sqlite"
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.execute(
                "CREATE TABLE IF NOT EXISTS ingest_keys (key TEXT PRIMARY KEY, response TEXT NOT NULL, created_at REAL NOT NULL)"
            )

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.keys_path, timeout=60, isolation_level=None)
        db.execute("PRAGMA synchronous=FULL")
        return db

    def ingest(self, body: bytes, content_type: str = "", idempotency_key: str | None = None) -> IngestResult:
        """Validate and land a request's rows; with a key, a repeat returns the first result."""
        values, rejected = parse_rows(body, content_type)
        accepted: list[dict[str, Any]] = []
        for index, value in values:
            row, reason = self.validator.validate(value)
            if reason is not None:
                rejected.append({"index": index, "reason": reason})
            else:
                accepted.append(row)  # type: ignore[arg-type]
        rejected.sort(key=lambda r: r["index"])
        if idempotency_key is None:
            name = f"ingest-{time.time_ns()}-{uuid.uuid4().hex}.json" if accepted else None
            if name:
                _land(self.landing, name, accepted)
            return IngestResult(self.source, len(accepted), rejected, name)
        if not idempotency_key.strip() or len(idempotency_key) > 200:
            raise BadRequestError("Idempotency-Key must be 1 to 200 characters")
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")  # one writer per source at a time, across processes
            found = db.execute("SELECT response FROM ingest_keys WHERE key = ?", (idempotency_key,)).fetchone()
            if found is not None:
                db.execute("COMMIT")
                return IngestResult(**{**json.loads(found[0]), "replayed": True})
            digest = hashlib.sha256(f"{self.source}\0{idempotency_key}".encode()).hexdigest()[:40]
            # Derived from the key: a retry after a crash between rename and INSERT replaces
            # the same file instead of landing a second one.
            name = f"ingest-k{digest}.json" if accepted else None
            if name:
                _land(self.landing, name, accepted)
            result = IngestResult(self.source, len(accepted), rejected, name)
            db.execute(
                "INSERT INTO ingest_keys (key, response, created_at) VALUES (?, ?, ?)",
                (idempotency_key, json.dumps(result.as_dict()), time.time()),
            )
            db.execute("COMMIT")
            return result
        except BaseException:
            if db.in_transaction:
                db.execute("ROLLBACK")
            raise
        finally:
            db.close()


def _land(directory: Path, name: str, rows: list[dict[str, Any]]) -> None:
    """Write JSON lines durably: hidden file, fsync, rename into place, fsync the directory."""
    hidden = directory / f".{name}.{uuid.uuid4().hex}.tmp"
    with open(hidden, "wb") as handle:
        handle.write("".join(json.dumps(row, separators=(",", ":")) + "\n" for row in rows).encode())
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(hidden, directory / name)
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
