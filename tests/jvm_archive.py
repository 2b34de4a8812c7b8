"""A class-data-sharing archive (JDK 17 dynamic AppCDS) of the classes a Spark driver loads, for the
tests' JVMs: every `lakeview` the crash tests start in another process is a fresh JVM that otherwise
loads and verifies some 15,000 classes from pyspark's jars before its first query (measured: session
plus first query 12-13 s -> 4-6 s at load 10). Built once per run (cached by the JDK, the jars and the
JVM options) by one small `lakeview refresh` in a JVM started with ``-XX:ArchiveClassesAtExit``; a JVM
that cannot use the archive (another class path, another JDK) ignores it silently. Production JVMs
keep Spark's defaults: only the tests' ``PYSPARK_SUBMIT_ARGS`` name the archive.

``python -m tests.jvm_archive TARGET`` builds the archive at TARGET."""

from __future__ import annotations

import hashlib
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Every JVM a test starts (the shared session, `lakeview` run in another process, which inherits the
# environment, and the Hive Metastore) compiles with C1 only and the serial collector: the tests' queries are small and short-lived,
# so start-up and JIT warm-up dominate (measured: tests/spark_jobs/test_bootstrap.py + test_group_pipeline.py
# 160.6 s -> 113.6 s on a quiet machine). Without tiered compilation the JVM reserves only 48 MB of code
# cache, which Spark's generated code for a whole run fills ("Out of space in CodeCache for adapters" killed
# the shared session two thirds of the way through): 512 MB, as with C2. Production JVMs keep Spark's defaults.
# Spark's JVMs also map one archive of the Spark driver's classes once it is built (below), unless the
# environment names its own PYSPARK_SUBMIT_ARGS.
JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC -XX:ReservedCodeCacheSize=512m"
QUIET = "-Xlog:cds=off,cds+dynamic=off"  # a JVM that cannot map the archive says so on stdout otherwise


def submit_args(java_options: str) -> str:
    return f"--driver-java-options '{java_options}' pyspark-shell"


def archive_file(cache_dir: Path, java_options: str) -> Path:
    """Where the archive for this JDK, these jars and these JVM options lives in ``cache_dir``."""
    import pyspark

    java = subprocess.run(["java", "-version"], capture_output=True, text=True, check=False).stderr
    jars = sorted((p.name, p.stat().st_size) for p in (Path(pyspark.__file__).parent / "jars").glob("*.jar"))
    key = hashlib.sha256(repr((java, jars, java_options, Path(__file__).read_bytes())).encode()).hexdigest()
    return cache_dir / f"spark-driver-{key[:16]}.jsa"


class ArchiveBuild:
    """The archive at ``target``: already there, or built by a background process started now."""

    def __init__(self, target: Path, java_options: str) -> None:
        self.target = target
        self.proc: subprocess.Popen[bytes] | None = None
        if target.exists():
            return
        for stale in target.parent.glob("spark-driver-*"):  # another JDK, other jars or options (126 MB each)
            stale.unlink()
        partial = target.with_suffix(".partial")
        env = {**os.environ, "PYSPARK_SUBMIT_ARGS": submit_args(f"{java_options} -XX:ArchiveClassesAtExit={partial}")}
        env.pop("LAKEVIEW_FAULT", None)
        self.log = target.with_suffix(".log")
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "tests.jvm_archive", str(target)],
                cwd=ROOT,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def cancel(self) -> None:
        """Stop a build still running (its process group: the Python process and its JVM)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def ready(self, timeout: float | None = 0) -> Path | None:
        """The archive once it is built; None while it is being built (after waiting up to ``timeout``
        seconds; None waits to the end) or when building it failed (the JVMs then run without it)."""
        if self.proc is not None:
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                return None
            self.proc = None
        return self.target if self.target.exists() else None


def build(target: Path) -> None:
    """Refresh a small change-feed aggregate and a star join (an operator graph) in one JVM started with
    ``-XX:ArchiveClassesAtExit=<target>.partial`` (from ``PYSPARK_SUBMIT_ARGS``), end that JVM, wait while it
    writes the archive, then move it to ``target``."""
    from pyspark import SparkContext

    from lakeview.stack.embedded import EmbeddedStack
    from tests.spark_jobs.test_changes import land
    from tests.spark_jobs.test_crash import project_on_disk
    from tests.spark_jobs.test_graph_pipeline import EPOCHS, SOURCES, STAR

    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        views = {
            "categories": "SELECT category, COUNT(*) AS n, MIN(price) AS lo FROM products GROUP BY category",
            "star": STAR,
        }
        data = {
            "lake": {"warehouse": "lake"},
            "server": {"port": 0},
            "sources": SOURCES,
            "views": {n: {"sql": sql, "cadence": "manual", "namespace": "cds"} for n, sql in views.items()},
        }
        project = project_on_disk(root, data)
        for source, rows in EPOCHS[0].items():
            land(project.source_path(source), "000.json", rows)
        with EmbeddedStack(project, port=0) as stack:
            for view in views:
                stack.start_views([view], available_now=True)
                stack.queries[view].awaitTermination()
            assert stack.spark is not None
            stack.spark.stop()
    gateway = SparkContext._gateway
    assert gateway is not None and gateway.proc is not None
    gateway.proc.stdin.close()  # the JVM exits at the end of its input, writing the archive as it does
    partial = target.with_suffix(".partial")
    if gateway.proc.wait(timeout=600) != 0 or not partial.exists():
        raise SystemExit(f"the JVM exited with status {gateway.proc.returncode} without writing {partial}")
    os.replace(partial, target)


if __name__ == "__main__":
    build(Path(sys.argv[1]))
    sys.stdout.flush()
    os._exit(0)  # the archive is in place: no interpreter teardown (seen to abort in a native library's thread)
