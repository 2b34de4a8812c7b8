"""Who may do what: privileges per namespace (read < write < admin).

The auth middleware (``auth.py``) puts the caller's :class:`Principal` into the request
scope; routes call :func:`authorize` with the namespaces they touch. Without auth
(loopback-only mode ``none``) there is no principal and everything is allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import IntEnum

from starlette.requests import HTTPConnection

from lakeview import errors

Identifier = tuple[str, ...]

PRINCIPAL_KEY = "lakeview.principal"


class Privilege(IntEnum):
    READ = 1
    WRITE = 2
    ADMIN = 3

    @classmethod
    def parse(cls, name: str) -> Privilege:
        try:
            return cls[name.upper()]
        except KeyError:
            raise ValueError(f"{name!r} is not a privilege; use read, write or admin") from None


@dataclass(frozen=True)
class Principal:
    """An authenticated client and its grants: namespace (dotted, or ``*`` for all) → privilege."""

    client_id: str
    grants: dict[str, Privilege] = field(default_factory=dict)

    def privilege_on(self, namespace: Identifier) -> Privilege | None:
        """The grant on the longest matching namespace prefix (``a.b`` inherits from ``a``), else ``*``."""
        for depth in range(len(namespace), 0, -1):
            grant = self.grants.get(".".join(namespace[:depth]))
            if grant is not None:
                return grant
        return self.grants.get("*")


def principal_of(conn: HTTPConnection) -> Principal | None:
    return conn.scope.get(PRINCIPAL_KEY)


def authorize(conn: HTTPConnection, namespace: Identifier, needed: Privilege) -> None:
    """Raise ForbiddenError unless the caller holds ``needed`` on ``namespace`` (no-op without auth)."""
    principal = principal_of(conn)
    if principal is None:
        return
    held = principal.privilege_on(namespace)
    if held is None or held < needed:
        what = held.name.lower() if held else "no"
        raise errors.ForbiddenError(
            f"client {principal.client_id!r} has {what} privilege on namespace {'.'.join(namespace)!r}; "
            f"this needs {needed.name.lower()}"
        )


def is_warehouse_admin(conn: HTTPConnection) -> bool:
    """Admin on ``*`` (or no auth): may grant a namespace a storage prefix outside its own."""
    principal = principal_of(conn)
    return principal is None or principal.grants.get("*") == Privilege.ADMIN


def can_see(conn: HTTPConnection, namespace: Identifier) -> bool:
    """A namespace is listed to callers with some privilege on it or on a namespace below it."""
    principal = principal_of(conn)
    if principal is None or principal.privilege_on(namespace) is not None:
        return True
    dotted = ".".join(namespace) + "."
    return any(grant.startswith(dotted) for grant in principal.grants)
