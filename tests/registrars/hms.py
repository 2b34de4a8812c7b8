"""A real Hive Metastore 2.3.9 (the jars inside pyspark) on Derby, for tests.

HMS 2.3 binds every interface, so it runs inside a private network namespace (``unshare -n``)
where it can only be reached through a bridge: :class:`BridgedMetastore` relays 127.0.0.1:PORT
of the test process to a Unix socket that a relay inside the namespace connects to HMS.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from tests.jvm_archive import JAVA_OPTIONS

SITE = """<?xml version="1.0"?>
<configuration>
{properties}
</configuration>
"""


def pyspark_jars() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent / "jars"


class HiveMetastore:
    """``java -cp conf:<pyspark>/jars/* org.apache.hadoop.hive.metastore.HiveMetaStore -p PORT``."""

    def __init__(self, root: Path, port: int) -> None:
        self.root = root
        self.port = port
        self.process: subprocess.Popen | None = None

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def write_site(self) -> Path:
        conf = self.root / "conf"
        conf.mkdir(parents=True, exist_ok=True)
        properties = {
            "javax.jdo.option.ConnectionURL": f"jdbc:derby:;databaseName={self.root / 'metastore_db'};create=true",
            "datanucleus.schema.autoCreateAll": "true",
            "hive.metastore.schema.verification": "false",
            "hive.async.log.enabled": "false",
            "datanucleus.connectionPoolingType": "None",
            "hive.metastore.warehouse.dir": f"file://{self.root / 'warehouse'}",
        }
        body = "\n".join(f"  <property><name>{k}</name><value>{v}</value></property>" for k, v in properties.items())
        (conf / "hive-site.xml").write_text(SITE.format(properties=body))
        return conf

    def start(self, timeout: float = 120) -> HiveMetastore:
        java = shutil.which("java")
        if java is None:
            raise RuntimeError("java is not on PATH (HMS needs Java 17)")
        conf = self.write_site()
        log = open(self.root / "hms.log", "wb")  # noqa: SIM115 - the metastore writes it for as long as it runs
        self.process = subprocess.Popen(
            [
                java,
                *JAVA_OPTIONS.split(),  # short-lived: C1 and the serial collector start it sooner
                "-Xmx512m",
                f"-Dderby.system.home={self.root}",
                "-cp",
                f"{conf}:{pyspark_jars()}/*",
                "org.apache.hadoop.hive.metastore.HiveMetaStore",
                "-p",
                str(self.port),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=self.root,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"HMS exited with {self.process.returncode}; see {self.root / 'hms.log'}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return self
            except OSError:
                time.sleep(0.2)
        raise RuntimeError(f"HMS did not listen within {timeout} s; see {self.root / 'hms.log'}")

    def stop(self) -> None:
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


def can_unshare() -> bool:
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


# -- a loopback-only bridge out of the namespace ---------------------------------------------
def _pipe(source: socket.socket, sink: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for end in (source, sink):
            try:
                end.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def relay(listener: socket.socket, connect) -> None:
    """Accept on ``listener`` forever; pipe each connection to a new ``connect()`` both ways."""
    while True:
        try:
            client, _ = listener.accept()
        except OSError:
            return  # listener closed
        try:
            upstream = connect()
        except OSError:
            client.close()
            continue
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pipe, args=(a, b), daemon=True).start()


class BridgedMetastore:
    """HMS inside a private network namespace, reachable from this process's loopback only.

    ``unshare -n`` runs this module's ``serve``: HMS (binding every interface of an otherwise
    empty namespace) plus a relay from a Unix socket to it. Here a TCP listener on 127.0.0.1
    relays to that Unix socket, so HMS is reachable on 127.0.0.1:PORT and nowhere else.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.socket_path = root / "hms.sock"
        self.process: subprocess.Popen | None = None
        self.listener: socket.socket | None = None
        self.port = 0

    @property
    def uri(self) -> str:
        return f"thrift://127.0.0.1:{self.port}"

    def start(self, timeout: float = 180) -> BridgedMetastore:
        inner = f'ip link set lo up && exec "{sys.executable}" -m tests.registrars.hms "{self.root}" 9083 "{self.socket_path}"'
        self.process = subprocess.Popen(
            ["unshare", "-n", "sh", "-c", inner], stdout=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]
        )
        assert self.process.stdout is not None
        line = self.process.stdout.readline()  # "ready" once HMS listens (or EOF when it failed)
        if line.strip() != "ready":
            self.stop()
            raise RuntimeError(f"HMS did not start: {line.strip() or 'no output'}; see {self.root / 'hms.log'}")
        self.listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(16)
        self.port = self.listener.getsockname()[1]

        def connect() -> socket.socket:
            unix = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            unix.connect(str(self.socket_path))
            return unix

        threading.Thread(target=relay, args=(self.listener, connect), daemon=True).start()
        return self

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        if self.process is not None:
            self.process.terminate()
            try:
                self.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
            self.process = None


def serve(root: Path, port: int, socket_path: Path) -> None:
    """Inside the namespace: start HMS, print "ready", relay the Unix socket to it until SIGTERM."""
    import signal

    metastore = HiveMetastore(root, port)
    try:
        metastore.start()
    except RuntimeError as exc:
        print(f"failed: {exc}", flush=True)
        raise SystemExit(1) from None

    def shutdown(signum: int, frame: object) -> None:
        metastore.stop()
        raise SystemExit(0)

    signal.signal(signal.SIGTERM, shutdown)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    if socket_path.exists():
        socket_path.unlink()
    listener.bind(str(socket_path))
    listener.listen(16)
    print("ready", flush=True)
    try:
        relay(listener, lambda: socket.create_connection(("127.0.0.1", port)))
    finally:
        metastore.stop()


if __name__ == "__main__":
    serve(Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3]))
