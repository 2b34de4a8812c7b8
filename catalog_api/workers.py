"""Serve the catalog in several worker processes, each accepting on its own socket (``SO_REUSEPORT``).

``uvicorn --workers N`` shares one listening socket between its workers, and the worker whose event loop wakes
first accepts every pending connection (uvloop accepts until the backlog is empty): 32 connections opened
together were split 28/4, 25/7 and 30/2 between 2 workers, so one worker queued most clients at several times
the other's latency (p99) while the other idled, and the pair served 8-10k loadTable/s where a 16/16 split served
23k. Here every worker binds the port itself with ``SO_REUSEPORT`` and the kernel spreads new connections over
the workers by a hash of their addresses, whatever each worker is doing::

    LAKEVIEW_PROJECT=lakeview.toml python -m catalog_api.workers --workers 2 --port 8181 [--host 127.0.0.1]

Each worker builds the app with :func:`catalog_api.asgi.create_app` (so the same rules hold: a non-loopback host
needs ``[auth]``). When a worker exits, the others are stopped and the launcher exits with its code. Linux only
(``SO_REUSEPORT`` groups sockets of one user: another user's process cannot join the port).
"""

from __future__ import annotations

import argparse
import collections
import multiprocessing
import multiprocessing.connection
import re
import signal
import socket
import subprocess
import sys
import time
from typing import Any

PR_SET_PDEATHSIG = 1  # prctl(2): the signal a process gets when its parent dies


def worker_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` that other sockets of this user may bind too (the kernel balances them)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((host, port))
    return sock


def _worker(host: str, port: int, options: dict[str, Any]) -> None:
    import ctypes

    import uvicorn

    ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)  # a launcher killed outright takes its workers along

    config = uvicorn.Config("catalog_api.asgi:create_app", factory=True, host=host, port=port, **options)
    uvicorn.Server(config).run(sockets=[worker_socket(host, port)])


def serve(host: str, port: int, workers: int, **options: Any) -> int:
    """Run ``workers`` uvicorn workers on ``host:port`` until SIGINT/SIGTERM or until one exits; returns the exit
    code of a worker that failed, else 0. ``options``: more ``uvicorn.Config`` settings (``log_level`` ...)."""
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_worker, args=(host, port, options), daemon=True) for _ in range(workers)]
    previous = signal.signal(signal.SIGTERM, _stop)
    try:
        for process in processes:
            process.start()
        multiprocessing.connection.wait([p.sentinel for p in processes])
    except (KeyboardInterrupt, _Stopped):
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        for process in processes:
            process.terminate()
        for process in processes:
            process.join(timeout=10)
    failed = [p.exitcode for p in processes if p.exitcode and p.exitcode > 0]
    return failed[0] if failed else 0


class _Stopped(Exception):
    """SIGTERM to the launcher (a worker refusing its settings sends it too): stop every worker."""


def _stop(*_: Any) -> None:
    raise _Stopped


def sockets_per_process(port: int, state: str = "established") -> dict[int, int]:
    """TCP sockets on local ``port`` in ``state`` per process id, from ``ss`` (iproute2): ``established``, how the
    kernel spread the clients over the workers; ``listening``, which workers accept yet. Raises OSError when ``ss``
    is missing."""
    listed = subprocess.run(
        ["ss", "-tnpH", "state", state, f"( sport = :{port} )"], capture_output=True, text=True, check=True
    ).stdout
    return dict(collections.Counter(int(pid) for pid in re.findall(r"pid=(\d+)", listed)))


def wait_listening(port: int, workers: int, timeout: float = 60.0) -> None:
    """Wait until ``workers`` processes accept on ``port`` (a worker not listening yet gets no connection: the
    kernel spreads over the sockets that listen). Raises TimeoutError; OSError when ``ss`` is missing."""
    deadline = time.monotonic() + timeout
    while len(sockets_per_process(port, "listening")) < workers:
        if time.monotonic() > deadline:
            raise TimeoutError(f"fewer than {workers} workers listen on port {port} after {timeout:.0f} s")
        time.sleep(0.05)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the catalog in worker processes balanced by SO_REUSEPORT.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8181)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    sys.exit(serve(args.host, args.port, args.workers, log_level=args.log_level))


if __name__ == "__main__":
    main()
