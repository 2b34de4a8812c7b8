"""A view's epochs run by the driver alone, without a Spark micro-batch.

When the driver reads every source of a view itself (Parquet files, JSON lines of plain columns:
:func:`spark_jobs.source_frames.direct_sources`), Spark's streaming query would only list the files and keep the offset log, and that
costs about a second of JVM time per epoch (planning the unioned file streams, writing its logs) where the
whole epoch is meant to take half of that. :class:`DriverStream` does both in the driver and writes Spark's
own checkpoint formats — ``offsets/N`` (one position per source, in source order), each source's file log
``sources/<i>/K`` (``K.compact`` every tenth batch, holding every entry so far) and ``commits/N`` — so the
epoch's frontier (:func:`spark_jobs.source_frames.frontier`), ``lakeview verify``'s oracle, a restart and
a replay read it as they read Spark's, and a Spark query could take the checkpoint over.

Exactly once, as with Spark: an epoch's files are logged and its offsets written *before* it is processed
and ``commits/N`` after; an epoch found planned but not committed (a crash) is processed again with the
same files, and the pipeline skips what its tables already hold. Files are picked up as Spark's file source
picks them (names starting with ``.`` or ``_`` hidden, oldest first, at most ``max_files_per_trigger`` per
source and trigger); at most one epoch per cadence tick. Between ticks an idle stream watches the source
directories' modification times (a stat each ``POLL_S``, no listing): a file landing wakes the next trigger
at once, no sooner than one tick after the last epoch began, instead of at the next tick (up to a cadence
later). A change the times miss (two in one clock tick of the file system) waits for the tick, as before.

The object answers what the stack asks of a ``StreamingQuery`` (``processAllAvailable``, ``stop``,
``isActive``, ``exception``, ``status``, ``lastProgress``, ``awaitTermination``).
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from lakeview.ops.source_log import logged_files
from spark_jobs.source_frames import offset_positions

log = logging.getLogger("lakeview.pipeline")
COMPACT_INTERVAL = 10  # Spark's spark.sql.streaming.fileSource.log.compactInterval
RETAIN = 100  # Spark's spark.sql.streaming.minBatchesToRetain: older offsets/commits are removed
POLL_S = 0.01  # an idle stream stats its source directories this often (a landed file's latency, not a listing)


class DriverStream:
    """Runs ``process(None, epoch)`` per epoch for the sources in ``directories`` (in the view's source
    order), one trigger every ``interval_s`` (``once``: what has landed, then stop)."""

    def __init__(
        self,
        name: str,
        checkpoint: Path,
        directories: list[Path],
        process: Callable[[Any, int], None],
        interval_s: float,
        once: bool = False,
        max_files: int | None = None,
    ) -> None:
        self.name, self.checkpoint, self.directories = name, checkpoint, directories
        self.process, self.interval_s, self.once, self.max_files = process, interval_s, once, max_files
        self.id = self.runId = str(uuid.uuid4())
        self.lastProgress: dict[str, Any] | None = None
        self.recentProgress: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._changed = threading.Condition()
        self._started_passes = 0  # triggers begun
        self._idle_pass = 0  # the newest trigger that found nothing to process
        self._error: BaseException | None = None
        self._finished = False  # the loop has ended (stopped, done, or failed)
        self._trigger_active = False
        self._seen: list[set[str]] = []  # each source's logged files (local paths)
        self._log_batch: list[int] = []  # each source's newest file-log batch (-1: none)
        self._entries: list[list[str]] = []  # each source's log lines since its last compaction
        self._listed: set[str] = {os.path.abspath(d) for d in directories}  # the directories the last listing walked
        self._thread = threading.Thread(target=self._run, name=f"lakeview-driver-{name}", daemon=True)

    # --- the StreamingQuery surface ----------------------------------------------------------------
    def start(self) -> DriverStream:
        self._load()
        self._thread.start()
        return self

    @property
    def isActive(self) -> bool:  # StreamingQuery's name
        return self._thread.is_alive()

    @property
    def status(self) -> dict[str, Any]:
        return {
            "message": "Processing new data" if self._trigger_active else "Waiting for data to arrive",
            "isDataAvailable": self._trigger_active,
            "isTriggerActive": self._trigger_active,
        }

    def exception(self) -> BaseException | None:
        return self._error

    def processAllAvailable(self) -> None:
        """Block until every file landed before the call is processed (a trigger begun after it found
        nothing new); raises the error that stopped the stream."""
        with self._changed:
            target = self._started_passes + 1
            self._changed.wait_for(lambda: self._idle_pass >= target or self._finished)
        if self._finished and self._thread is not threading.current_thread():
            self._thread.join()  # it has ended (isActive is False once this returns)
        if self._error is not None:
            raise self._error

    def awaitTermination(self, timeout: float | None = None) -> bool | None:
        self._thread.join(timeout)
        if self._error is not None:
            raise self._error
        return None if timeout is None else not self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        if self._thread is not threading.current_thread():
            self._thread.join()

    # --- the loop ----------------------------------------------------------------------------------
    def _run(self) -> None:
        try:
            began = None  # when the last trigger that processed an epoch began
            while not self._stop.is_set():
                started = time.monotonic()
                with self._changed:
                    self._started_passes += 1
                    this = self._started_passes
                stamps = self._stamps()  # before the listing: a file landing during it wakes the next trigger
                processed = self._trigger()
                if not processed:
                    with self._changed:
                        self._idle_pass = this
                        self._changed.notify_all()
                    if self.once:
                        return
                else:
                    began = started
                if processed and self.once:
                    continue
                tick = started + self.interval_s
                if processed or self.interval_s <= POLL_S:
                    self._stop.wait(max(0.0, tick - time.monotonic()))
                else:
                    self._await_files(stamps, tick, started if began is None else began + self.interval_s)
        except BaseException as exc:  # the epoch's error stops this view's stream only
            self._error = exc
        finally:
            self._trigger_active = False
            with self._changed:
                self._finished = True
                self._changed.notify_all()

    def _await_files(self, stamps: dict[str, int], tick: float, earliest: float) -> None:
        """Wait for the next ``tick``, or less: until a source directory's modification time differs from
        ``stamps`` (a file landed, or a hidden one was renamed into place) and then stays put for one more
        look (files landing together, e.g. one per source, go into one epoch), but not before ``earliest``
        (one cadence after the last epoch began)."""
        changed = None  # the stamps last seen differ from ``stamps``
        while not self._stop.is_set():
            now = time.monotonic()
            if now >= tick:
                return
            if now >= earliest:
                seen = self._stamps()
                if changed is not None and seen == changed:
                    return
                changed = seen if seen != stamps else None
            self._stop.wait(min(POLL_S, tick - now))

    def _stamps(self) -> dict[str, int]:
        """Each directory the last listing walked (and each source's own), by its modification time in ns."""
        stamps = {}
        for directory in self._listed:
            try:
                stamps[directory] = os.stat(directory).st_mtime_ns
            except FileNotFoundError:
                stamps[directory] = -1
        return stamps

    def _trigger(self) -> bool:
        """Process the next epoch, if any (a planned but uncommitted one first); False: nothing to do."""
        planned, committed = _newest(self.checkpoint / "offsets"), _newest(self.checkpoint / "commits")
        if planned is not None and (committed is None or committed < planned):
            epoch = planned  # planned before a crash: the same files again
        else:
            positions = offset_positions(self.checkpoint, planned) if planned is not None else []
            epoch = 0 if planned is None else planned + 1
            if not self._plan(epoch, positions):
                return False
        self._trigger_active = True
        started = time.perf_counter()
        try:
            self.process(None, epoch)
        finally:
            self._trigger_active = False
        _write(self.checkpoint / "commits" / str(epoch), ['{"nextBatchWatermarkMs":0}'])
        self._forget(epoch - RETAIN)
        progress = {
            "id": self.id, "runId": self.runId, "name": self.name, "batchId": epoch,
            "durationMs": {"triggerExecution": int((time.perf_counter() - started) * 1000)},
        }  # fmt: skip
        self.lastProgress = progress
        self.recentProgress = [*self.recentProgress[-9:], progress]
        return True

    def _plan(self, epoch: int, positions: list[int | None]) -> bool:
        """Log each source's new files as its next file-log batch and write the epoch's offsets; False
        when no source has any."""
        reached: list[int | None] = []
        for index, directory in enumerate(self.directories):
            last = positions[index] if index < len(positions) and positions[index] is not None else -1
            if self._log_batch[index] > last:  # logged before a crash, never planned: this epoch takes them
                reached.append(self._log_batch[index])
                continue
            files = self._new_files(index, directory)
            if files:
                self._log(index, files)
                reached.append(self._log_batch[index])
            else:
                reached.append(last if last >= 0 else None)
        if all(r is None or (i < len(positions) and r == positions[i]) for i, r in enumerate(reached)):
            return False
        metadata = json.dumps({"batchWatermarkMs": 0, "batchTimestampMs": int(time.time() * 1000), "conf": {}})
        lines = [metadata, *("-" if r is None else json.dumps({"logOffset": r}) for r in reached)]
        _write(self.checkpoint / "offsets" / str(epoch), lines)
        return True

    # --- the file logs -----------------------------------------------------------------------------
    def _load(self) -> None:
        """Read what the checkpoint's file logs hold (a restart, or a checkpoint Spark wrote)."""
        self.checkpoint.mkdir(parents=True, exist_ok=True)
        if not (self.checkpoint / "metadata").exists():
            _write(self.checkpoint / "metadata", [json.dumps({"id": self.id})], version=False)
        for index in range(len(self.directories)):
            logged = logged_files(self.checkpoint, index)
            self._seen.append({_local(f.path) for f in logged})
            self._log_batch.append(max((f.batch for f in logged), default=-1))
            self._entries.append(
                [_entry(_local(f.path), f.modified_ms, f.batch) for f in logged]
            )  # rewritten whole at the next compaction

    def _new_files(self, index: int, directory: Path) -> list[tuple[int, str]]:
        """The source's files not logged yet, oldest first (modification time in ms, path)."""
        found = []
        for root, dirs, names in os.walk(os.path.abspath(directory)):  # absolute, as the logged paths are read
            dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
            self._listed.add(root)
            for name in names:
                path = os.path.join(root, name)
                if name.startswith((".", "_")) or path in self._seen[index]:
                    continue
                try:
                    found.append((int(os.stat(path).st_mtime * 1000), path))
                except FileNotFoundError:  # removed while listed
                    continue
        found.sort()
        return found[: self.max_files] if self.max_files else found

    def _log(self, index: int, files: list[tuple[int, str]]) -> None:
        batch = self._log_batch[index] + 1
        lines = [_entry(path, modified, batch) for modified, path in files]
        directory = self.checkpoint / "sources" / str(index)
        if (batch + 1) % COMPACT_INTERVAL == 0:  # Spark reads a compaction batch from N.compact: every entry
            _write(directory / f"{batch}.compact", [*self._entries[index], *lines])
            self._entries[index] = [*self._entries[index], *lines]
        else:
            _write(directory / str(batch), lines)
            self._entries[index] += lines
        self._seen[index].update(path for _, path in files)
        self._log_batch[index] = batch

    def _forget(self, epoch: int) -> None:
        """Offsets and commits older than Spark keeps."""
        if epoch >= 0:
            for kind in ("offsets", "commits"):
                (self.checkpoint / kind / str(epoch)).unlink(missing_ok=True)


def _entry(path: str, modified_ms: int, batch: int) -> str:
    return json.dumps({"path": Path(path).as_uri(), "timestamp": modified_ms, "batchId": batch})


def _local(path: Path) -> str:
    """A logged path as a local absolute path (Spark logs URIs, percent-encoded)."""
    return os.path.abspath(unquote(str(path)))


def _newest(directory: Path) -> int | None:
    numbers = [int(p.name) for p in directory.iterdir() if p.name.isdigit()] if directory.exists() else []
    return max(numbers, default=None)


def _write(path: Path, lines: list[str], version: bool = True) -> None:
    """A log file written whole (hidden, then renamed), ``v1`` first as Spark's logs have it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.tmp"
    tmp.write_text("\n".join(["v1", *lines] if version else lines) + "\n")
    os.replace(tmp, path)
