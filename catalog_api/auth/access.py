"""Who may do what: privileges per namespace (read < write < admin).

The auth middleware (``auth.py``) puts the caller's :class:`Principal` into the request
scope; routes call :func:`authorize` with the namespaces they touch. Without auth
(loopback-only mode ``none``) there is no principal and everything is allowed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import IntEnum

from starlette.requests import HTTPConnection

from catalog_api.store import namespace_keys
from lakeview import errors

Identifier = tuple[str, ...]

PRINCIPAL_KEY = "lakeview.principal"
EVERY_NAMESPACE: Identifier = ()  # the ``*`` grant: a prefix of every namespace


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


def grant_key(namespace: str | Identifier) -> Identifier:
    """The namespace a grant names, as its tuple of levels.

    Configured grants are strings: ``*`` is every namespace, ``.`` separates levels, and a level holding
    a dot or a percent sign writes them as the store does (``%2E``, ``%25``): ``"a.b"`` is ``a`` → ``b``,
    ``"a%2Eb"`` the one level ``a.b``. Keyed by tuples, a grant on one can never match the other."""
    if isinstance(namespace, tuple):
        return namespace
    return EVERY_NAMESPACE if namespace == "*" else namespace_keys.decode(namespace)


def grant_keys(grants: Mapping[str | Identifier, Privilege]) -> dict[Identifier, Privilege]:
    """Grants keyed by level tuples (see :func:`grant_key`); two spellings of one namespace are refused."""
    keyed: dict[Identifier, Privilege] = {}
    for namespace, privilege in grants.items():
        key = grant_key(namespace)
        if key in keyed and keyed[key] != privilege:
            raise ValueError(f"namespace {namespace!r} is granted twice, as {keyed[key].name} and {privilege.name}")
        keyed[key] = privilege
    return keyed


@dataclass(frozen=True)
class Principal:
    """An authenticated client and its grants: namespace levels (``()`` for ``*``, every namespace) → privilege.

    Grants may be given as configured strings (see :func:`grant_key`); they are kept as level tuples."""

    client_id: str
    grants: Mapping[Identifier, Privilege] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grants", grant_keys(self.grants))  # type: ignore[arg-type]

    def privilege_on(self, namespace: Identifier) -> Privilege | None:
        """The grant on the longest matching prefix of levels (``a``→``b`` inherits from ``a``), else ``*``."""
        for depth in range(len(namespace), -1, -1):
            grant = self.grants.get(tuple(namespace[:depth]))
            if grant is not None:
                return grant
        return None

    @property
    def warehouse_admin(self) -> bool:
        """Admin on ``*``: may revoke anyone's tokens and grant a namespace storage outside its own."""
        return self.grants.get(EVERY_NAMESPACE) == Privilege.ADMIN


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
            f"client {principal.client_id!r} has {what} privilege on namespace {namespace_keys.display(namespace)}; "
            f"this needs {needed.name.lower()}"
        )


def is_warehouse_admin(conn: HTTPConnection) -> bool:
    """Admin on ``*`` (or no auth): may grant a namespace a storage prefix outside its own."""
    principal = principal_of(conn)
    return principal is None or principal.warehouse_admin


def can_see(conn: HTTPConnection, namespace: Identifier) -> bool:
    """A namespace is listed to callers with some privilege on it or on a namespace below it."""
    principal = principal_of(conn)
    if principal is None or principal.privilege_on(namespace) is not None:
        return True
    depth = len(namespace)
    return any(len(grant) > depth and grant[:depth] == tuple(namespace) for grant in principal.grants)
