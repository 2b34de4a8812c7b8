"""A private PostgreSQL 15 server (Debian's binaries) for tests and benchmarks.

``initdb`` refuses to run as root, so as root the server runs as the ``postgres`` OS user;
data and socket live in a fresh temporary directory, it listens on 127.0.0.1 only, on a
free port, and :meth:`LocalPostgres.stop` removes everything.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

from catalog_api.server import free_port
from lakeview.errors import SetupError

PG_BIN = Path(os.environ.get("LAKEVIEW_PG_BIN", "/usr/lib/postgresql/15/bin"))


class LocalPostgres:
    """``with LocalPostgres() as pg: pg.url`` → ``postgresql+psycopg2://postgres@127.0.0.1:PORT/postgres``."""

    def __init__(self, durable: bool = False) -> None:
        """``durable=False`` turns fsync off: fine for tests, not for benchmarks of commit latency."""
        self.durable = durable
        if not (PG_BIN / "initdb").exists():
            raise SetupError(
                f"PostgreSQL 15 binaries not found in {PG_BIN}; install the Debian package postgresql-15 "
                "(apt-get install -y postgresql-15) or set LAKEVIEW_PG_BIN"
            )
        self.port = free_port()
        self.base = Path(tempfile.mkdtemp(prefix="lakeview-pg-"))
        self.data = self.base / "data"
        self._user = "postgres" if os.geteuid() == 0 else None
        if self._user:
            entry = pwd.getpwnam(self._user)
            os.chown(self.base, entry.pw_uid, entry.pw_gid)
        self.started = False

    @property
    def url(self) -> str:
        return f"postgresql+psycopg2://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *args: str) -> None:
        command = [*(["runuser", "-u", self._user, "--"] if self._user else []), *args]
        result = subprocess.run(command, capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise SetupError(f"{' '.join(args[:2])} failed: {result.stderr.strip() or result.stdout.strip()}")

    def start(self) -> LocalPostgres:
        self._run(
            str(PG_BIN / "initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust", "-E", "UTF8", "--no-sync"
        )
        for attempt in range(1, 4):
            try:
                self._pg_ctl("start")
                break
            except SetupError:
                # Another process bound the port between its choice and the server's bind: a new port.
                if attempt == 3 or "already in use" not in self._log():
                    raise
                self.port = free_port()
        self.started = True
        return self

    def _log(self) -> str:
        try:
            return (self.base / "log").read_text(errors="replace")
        except OSError:
            return ""

    def _pg_ctl(self, action: str) -> None:
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.base} -c max_connections=200"
        if not self.durable:
            options += " -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
        self._run(
            str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-o", options, "-l", str(self.base / "log"), "-w", action
        )

    def halt(self) -> None:
        """Stop the server (fast: open sessions are cut), keeping its data for :meth:`resume`."""
        self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")

    def resume(self) -> None:
        """Start a halted server again on the same data directory and port."""
        self._pg_ctl("start")

    def stop(self) -> None:
        if self.started:
            try:
                self._run(str(PG_BIN / "pg_ctl"), "-D", str(self.data), "-m", "fast", "-w", "stop")
            finally:
                self.started = False
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
