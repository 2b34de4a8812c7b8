"""Which storage prefixes a namespace owns, so a privilege on a namespace confines its files.

A namespace ``a.b`` owns ``<warehouse>/a/b`` (the path form Lakeview's Delta views use),
``<warehouse>/a.b`` (the catalog's default table location: its store key, levels escaped, so
``("a.b",)`` owns ``<warehouse>/a%2Eb`` instead), ``<warehouse>/a.b.db`` (the Hive-style one)
and the ``location`` property an admin set on it. Every location a request can set or imply for a table or view of the
namespace (its location, ``set-location``, ``write.*.path``, a registered metadata file) must
lie under one of them and not under the path-form prefix of an existing child namespace
(``a/b/c`` belongs to ``a.b.c``, whatever the grant on ``a.b``). Purge deletes only listed
files under these prefixes. See docs/security.md.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING

from catalog_api.store import namespace_keys
from lakeview import errors

if TYPE_CHECKING:
    from catalog_api.store.catalog import CatalogStore

Identifier = tuple[str, ...]

# Table properties that tell writers (and the catalog, for metadata) where to put files.
PATH_PROPERTIES = (
    "write.data.path",
    "write.object-storage.path",
    "write.folder-storage.path",
    "write.metadata.path",
)


def under(location: str, prefix: str) -> bool:
    """``location`` is ``prefix`` or lies below it (on path-segment boundaries)."""
    return location == prefix or location.startswith(prefix.rstrip("/") + "/")


class Confinement:
    """The prefixes of each namespace of one store's warehouse."""

    def __init__(self, store: CatalogStore) -> None:
        self.store = store

    def default_prefixes(self, namespace: Identifier) -> list[str]:
        warehouse = self.store.warehouse
        key = namespace_keys.encode(namespace)  # pyiceberg's default table location is <warehouse>/<key>/<table>
        return [f"{warehouse}/{'/'.join(namespace)}", f"{warehouse}/{key}", f"{warehouse}/{key}.db"]

    def prefixes(self, namespace: Identifier) -> list[str]:
        """The namespace's own prefixes (defaults, plus its admin-set ``location``)."""
        own = self.default_prefixes(namespace)
        try:
            granted = self.store.load_namespace(namespace).get("location")
        except errors.NoSuchNamespaceError:
            granted = None
        if granted:
            try:
                own.append(self._normalize(granted))
            except errors.BadRequestError:  # a legacy location outside the warehouse grants nothing
                pass
        return own

    def rule(self, namespace: Identifier) -> tuple[list[str], list[str]]:
        """(the namespace's prefixes, its descendants' path-form prefixes): read once per request."""
        try:
            descendants = self.store.list_namespaces(namespace)
        except errors.NoSuchNamespaceError:
            descendants = []
        warehouse = self.store.warehouse
        children = [
            f"{warehouse}/{'/'.join(d)}"
            for d in descendants
            if len(d) > len(namespace) and d[: len(namespace)] == namespace
        ]
        return self.prefixes(namespace), children

    def _normalize(self, location: str) -> str:
        return self.store.check_location(location).rstrip("/")  # inside the warehouse, '..' collapsed

    def allows(self, namespace: Identifier, location: str, rule: tuple[list[str], list[str]] | None = None) -> bool:
        """True when ``location`` lies under the namespace's prefixes (and not a child namespace's)."""
        try:
            normalized = self._normalize(location)
        except errors.BadRequestError:
            return False
        own, children = rule if rule is not None else self.rule(namespace)
        return any(under(normalized, p) for p in own) and not any(under(normalized, c) for c in children)

    def check(self, namespace: Identifier, location: str, what: str) -> str:
        """The normalized location. Raises BadRequestError (outside the warehouse), ForbiddenError (outside
        the namespace's prefixes)."""
        normalized = self._normalize(location)
        rule = self.rule(namespace)
        own = rule[0]
        if not self.allows(namespace, normalized, rule):
            raise errors.ForbiddenError(
                f"{what} {location!r} is outside namespace {'.'.join(namespace)!r}'s storage "
                f"({', '.join(own)}, excluding its child namespaces); an admin of the namespace can grant "
                "another prefix with the namespace property 'location'"
            )
        return normalized

    def check_paths(
        self, namespace: Identifier, properties: Mapping[str, str], before: Mapping[str, str] | None = None
    ) -> None:
        """Check every new or changed ``write.*.path`` property. Raises as :meth:`check`."""
        before = before or {}
        for key in PATH_PROPERTIES:
            value = properties.get(key)
            if value and before.get(key) != value:
                self.check(namespace, value, f"table property {key}")

    def check_namespace_location(self, namespace: Identifier, location: str, warehouse_admin: bool) -> str:
        """A namespace's ``location`` property: under its own default prefixes unless a warehouse admin
        (``*`` admin, or auth mode none) grants another prefix. Raises as :meth:`check`."""
        normalized = self._normalize(location)
        if warehouse_admin:
            return normalized
        own = self.default_prefixes(namespace)
        if not any(under(normalized, p) for p in own):
            raise errors.ForbiddenError(
                f"namespace location {location!r} is outside {', '.join(own)}; only a warehouse admin ('*') "
                "may grant a namespace another prefix"
            )
        return normalized

    def deletable(self, namespace: Identifier, files: Iterable[str]) -> list[str]:
        """The files a purge of a table of ``namespace`` may delete: those under the namespace's prefixes."""
        rule = self.rule(namespace)
        return sorted(f for f in set(files) if self.allows(namespace, f, rule))


__all__ = ["PATH_PROPERTIES", "Confinement", "under"]
