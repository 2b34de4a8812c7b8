"""Run the catalog under uvicorn in a background thread (embedded mode and tests)."""

from __future__ import annotations

import random
import socket
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from catalog_api.app import build_app
from catalog_api.auth.authenticator import Authenticator
from catalog_api.auth.bind_guard import refuse_open_bind
from catalog_api.store.catalog import CatalogStore
from lakeview.errors import SetupError


class CatalogServer:
    """The catalog service on ``host:port``; ``port=0`` picks a free port."""

    def __init__(
        self,
        store: CatalogStore,
        host: str = "127.0.0.1",
        port: int = 0,
        authenticator: Authenticator | None = None,
        **app_options: Any,
    ) -> None:
        refuse_open_bind(host, authenticator is not None)
        self.store = store
        self.host = host
        self.port = port or free_port(host)
        app = build_app(store, authenticator=authenticator, **app_options)
        config = uvicorn.Config(app, host=host, port=self.port, log_level="warning", lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def uri(self) -> str:
        return f"http://{self.authority}/iceberg"

    @property
    def authority(self) -> str:
        """``host:port``, with an IPv6 host in brackets (``[::1]:8181``)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"

    def start(self, timeout: float = 15.0) -> CatalogServer:
        if _port_taken(self.host, self.port):
            raise SetupError(f"port {self.port} on {self.host} is in use; set [server] port in lakeview.toml")
        self._thread = threading.Thread(target=self._server.run, name="lakeview-catalog", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://{self.authority}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.HTTPError:
                pass
            if not self._thread.is_alive():
                break
            time.sleep(0.05)
        raise SetupError(f"the catalog did not start on {self.host}:{self.port}")

    def stop(self) -> None:
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)

    def serve_forever(self) -> None:
        """Run in the calling thread until Ctrl-C."""
        self._server.run()

    def __enter__(self) -> CatalogServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (servers in tests and the demo bind loopback; IPv6 too);
    see :func:`free_ports`."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1", companion: int = 0) -> list[int]:
    """``count`` distinct ports free on ``host`` right now (and each ``port + companion`` too, when
    ``companion`` is set), each proved free by binding it.

    Picked at random outside the kernel's ephemeral range, not by binding port 0: a port from that
    range is handed to the next outgoing connection of any process once it is released, so a
    server started (or restarted after an outage) on it a moment later could find it taken. Outside
    the range only another server picking the same port can race for it (1 in ~36,000).
    Raises SetupError when no free port is found.
    """
    low, high = _ephemeral_range()
    pick = random.SystemRandom()
    found: list[int] = []
    for _ in range(1000 * count):
        port = pick.randrange(1024, 65536 - companion)
        wanted = (port, port + companion) if companion else (port,)
        if any(low <= p <= high or p in found for p in wanted):
            continue
        if all(_bindable(host, p) for p in wanted):
            found.append(port)
            if len(found) == count:
                return found
    raise SetupError(f"no {count} free port(s) on {host} outside the ephemeral range {low}-{high}")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _bindable(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def _port_taken(host: str, port: int) -> bool:
    with socket.socket(_family(host)) as sock:
        return sock.connect_ex((host, port)) == 0


def _family(host: str) -> socket.AddressFamily:
    try:
        return socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)[0][0]
    except socket.gaierror:
        return socket.AF_INET
