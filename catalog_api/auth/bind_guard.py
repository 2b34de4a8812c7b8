"""One rule for every way the catalog starts (``lakeview serve``/``up``, ``CatalogServer``, the ASGI
factory under uvicorn or gunicorn, with workers or in the container): without auth it serves
loopback only. The rule is checked where the bind address is known (the server's host, the
command line of the ASGI server) and, for paths that hide it, per connection by
:class:`LoopbackOnly`, which answers 403 to any request that did not arrive on a loopback address."""

from __future__ import annotations

import functools
import ipaddress
import multiprocessing
import os
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence

from starlette.types import ASGIApp, Receive, Scope, Send

from catalog_api.responses import error_response
from lakeview.errors import SetupError

_HOW_TO = 'configure [auth] mode = "oauth2" with clients (LAKEVIEW_PROJECT), or bind 127.0.0.1'


@functools.lru_cache(maxsize=4096)  # asked on every request without auth; parsing an address costs ~20 µs
def is_loopback(host: str) -> bool:
    """True for localhost and loopback addresses (``[::1]`` too)."""
    host = host.strip("[]")
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refuse_open_bind(host: str, authenticated: bool, how: str = "the catalog") -> None:
    """Raise SetupError for a non-loopback bind without auth (auth mode none is loopback-only)."""
    if not authenticated and not is_loopback(host):
        raise SetupError(f"refusing to serve {how} on {host} without auth (mode none is loopback-only); {_HOW_TO}")


def command_line_hosts(argv: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """The bind hosts an ASGI server was told on its command line or environment (uvicorn ``--host``,
    ``UVICORN_HOST``; gunicorn ``-b``/``--bind``, ``GUNICORN_CMD_ARGS``)."""
    args = list(argv) + shlex.split(environ.get("GUNICORN_CMD_ARGS", ""))
    hosts = [environ["UVICORN_HOST"]] if environ.get("UVICORN_HOST") else []
    for i, arg in enumerate(args):
        for flag in ("--host", "--bind", "-b"):
            value = None
            if arg == flag and i + 1 < len(args):
                value = args[i + 1]
            elif arg.startswith(flag + "="):
                value = arg.split("=", 1)[1]
            if value is None:
                continue
            if flag == "--host":
                hosts.append(value)
            elif not value.startswith(("unix:", "fd://")):
                hosts.append(value.rsplit(":", 1)[0] if value.count(":") == 1 or value.startswith("[") else value)
    return hosts


def refuse_open_command_line(
    authenticated: bool, argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> None:
    """The ASGI factory's check: raise SetupError if the server process was told to bind a
    non-loopback host without auth."""

    try:
        for host in command_line_hosts(sys.argv if argv is None else argv, os.environ if environ is None else environ):
            refuse_open_bind(host, authenticated, "the catalog (ASGI factory)")
    except SetupError as exc:
        if multiprocessing.parent_process() is not None:  # a worker: its supervisor would respawn it forever
            print(f"error: {exc}", file=sys.stderr, flush=True)
            os.kill(os.getppid(), signal.SIGTERM)
        raise


class LoopbackOnly:
    """Without auth: 403 for any connection that did not arrive on (and come from) a loopback address."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] in ("http", "websocket") and not _local(scope):
            response = error_response(
                403, "ForbiddenException", f"this catalog runs without auth and serves loopback only; {_HOW_TO}"
            )
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def _local(scope: Scope) -> bool:
    server, client = scope.get("server"), scope.get("client")
    if server is None or server[1] is None:  # a unix socket: not reachable over the network
        return True
    return is_loopback(str(server[0])) and (client is None or is_loopback(str(client[0])))


__all__ = ["LoopbackOnly", "command_line_hosts", "is_loopback", "refuse_open_bind", "refuse_open_command_line"]
