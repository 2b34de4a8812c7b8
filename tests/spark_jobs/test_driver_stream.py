"""DriverStream, the epochs of a view whose files the driver reads itself: each epoch takes exactly the files
that landed since the last (hidden files ignored, at most ``max_files`` per source), its checkpoint reads
back through the same functions as Spark's (the epoch's frontier and files, the oracle's file log), a
restart carries on, an epoch planned but not marked done is processed again with the same files, and an
epoch's error stops the stream and is raised to whoever waits on it."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from lakeview.errors import TerminalError
from lakeview.ops.source_log import logged_files
from spark_jobs.driver_stream import DriverStream
from spark_jobs.source_frames import frontier

SOURCES = ("a", "b")


def land(directory: Path, *names: str) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    for name in names:
        (directory / name).write_text(name)


class Epochs:
    """Each processed epoch's files per source, as the pipeline reads them from the checkpoint."""

    def __init__(self, checkpoint: Path, fail_at: int | None = None) -> None:
        self.checkpoint, self.fail_at = checkpoint, fail_at
        self.seen: list[tuple[int, dict[str, list[str]]]] = []

    def __call__(self, batch: object, epoch: int) -> None:
        assert batch is None
        _, _, paths = frontier(self.checkpoint, SOURCES, epoch)
        if epoch == self.fail_at:
            raise TerminalError(f"epoch {epoch} refused")
        self.seen.append((epoch, {s: sorted(p.name for p in files) for s, files in paths.items()}))


def stream(tmp_path: Path, epochs: Epochs, max_files: int | None = None) -> DriverStream:
    directories = [tmp_path / "landing" / s for s in SOURCES]
    return DriverStream("lakeview_t", tmp_path / "ck", directories, epochs, 0.01, max_files=max_files).start()


def test_each_epoch_takes_the_new_files_and_a_restart_carries_on(tmp_path: Path) -> None:
    land(tmp_path / "landing" / "a", "1.parquet", ".hidden.parquet", "_SUCCESS")
    epochs = Epochs(tmp_path / "ck")
    query = stream(tmp_path, epochs)
    query.processAllAvailable()
    land(tmp_path / "landing" / "b", "2.parquet")
    query.processAllAvailable()
    query.stop()
    assert not query.isActive and query.exception() is None
    land(tmp_path / "landing" / "a", "3.parquet", "4.parquet")
    query = stream(tmp_path, epochs)  # a restart reads what the logs hold
    query.processAllAvailable()
    query.stop()
    assert epochs.seen == [
        (0, {"a": ["1.parquet"], "b": []}),
        (1, {"a": [], "b": ["2.parquet"]}),
        (2, {"a": ["3.parquet", "4.parquet"], "b": []}),
    ]
    assert [f.path.name for f in logged_files(tmp_path / "ck", 0)] == ["1.parquet", "3.parquet", "4.parquet"]


def test_a_backlog_becomes_several_epochs_and_the_file_log_compacts_as_sparks(tmp_path: Path) -> None:
    land(tmp_path / "landing" / "a", *(f"{i:02d}.parquet" for i in range(12)))
    epochs = Epochs(tmp_path / "ck")
    query = stream(tmp_path, epochs, max_files=1)
    query.processAllAvailable()
    query.stop()
    assert [files["a"] for _, files in epochs.seen] == [[f"{i:02d}.parquet"] for i in range(12)]
    assert (tmp_path / "ck" / "sources" / "0" / "9.compact").exists()  # where Spark reads batch 9 from
    assert len(logged_files(tmp_path / "ck", 0)) == 12


def test_an_epoch_planned_but_not_done_is_processed_again_with_its_files(tmp_path: Path) -> None:
    land(tmp_path / "landing" / "a", "1.parquet")
    epochs = Epochs(tmp_path / "ck")
    query = stream(tmp_path, epochs)
    query.processAllAvailable()
    query.stop()
    (tmp_path / "ck" / "commits" / "0").unlink()  # a crash after the epoch's commit, before the checkpoint's
    land(tmp_path / "landing" / "a", "2.parquet")
    query = stream(tmp_path, epochs)
    query.processAllAvailable()
    query.stop()
    assert epochs.seen == [
        (0, {"a": ["1.parquet"], "b": []}),
        (0, {"a": ["1.parquet"], "b": []}),
        (1, {"a": ["2.parquet"], "b": []}),
    ]


def test_an_epochs_error_stops_the_stream_and_is_raised_to_the_waiter(tmp_path: Path) -> None:
    land(tmp_path / "landing" / "b", "1.parquet")
    query = stream(tmp_path, Epochs(tmp_path / "ck", fail_at=0))
    with pytest.raises(TerminalError, match="epoch 0 refused"):
        query.processAllAvailable()
    assert not query.isActive and isinstance(query.exception(), TerminalError)
    assert not (tmp_path / "ck" / "commits" / "0").exists()


def test_once_processes_what_has_landed_then_ends(tmp_path: Path) -> None:
    """`lakeview refresh` (or a manual cadence): every landed file in as many epochs as max_files allows,
    then the stream ends by itself."""
    land(tmp_path / "landing" / "a", "1.parquet", "2.parquet")
    land(tmp_path / "landing" / "b", "3.parquet")
    epochs = Epochs(tmp_path / "ck")
    directories = [tmp_path / "landing" / s for s in SOURCES]
    query = DriverStream("lakeview_t", tmp_path / "ck", directories, epochs, 60.0, once=True, max_files=1).start()
    assert query.awaitTermination(30) is True
    assert not query.isActive
    assert epochs.seen == [
        (0, {"a": ["1.parquet"], "b": ["3.parquet"]}),
        (1, {"a": ["2.parquet"], "b": []}),
    ]


def test_a_file_landing_between_ticks_is_an_epoch_at_once_still_one_per_cadence(tmp_path: Path) -> None:
    """An idle stream watches its directories: with a cadence of ten minutes, a file landed (written hidden,
    then renamed, as the landing does; here in a new subdirectory) is an epoch long before the next tick; a
    second file landed right after waits for the tick one cadence after that epoch began (not taken here)."""
    epochs = Epochs(tmp_path / "ck")
    directories = [tmp_path / "landing" / s for s in SOURCES]
    for directory in directories:
        directory.mkdir(parents=True)
    query = DriverStream("lakeview_t", tmp_path / "ck", directories, epochs, 600.0).start()
    try:
        time.sleep(0.5)  # the first trigger finds nothing: the stream waits for the tick 600 s away
        (tmp_path / "landing" / "b" / "sub").mkdir()
        hidden = tmp_path / "landing" / "b" / "sub" / ".1.parquet.tmp"
        hidden.write_text("1")
        hidden.rename(hidden.with_name("1.parquet"))
        for _ in range(6000):  # the tick is 600 s away; 300 s at most here
            if epochs.seen:
                break
            time.sleep(0.05)
        land(tmp_path / "landing" / "a", "2.parquet")
        time.sleep(0.5)  # fifty times the stream's look at its directories
    finally:
        query.stop()
    assert epochs.seen == [(0, {"a": [], "b": ["1.parquet"]})]
