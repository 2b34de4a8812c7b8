"""Table, view and namespace properties are data, never code.

pyiceberg turns some properties into classes it imports and instantiates (``py-io-impl``,
``write.py-location-provider.impl``; Java clients read ``io-impl`` and
``write.location-provider.impl``). A client that could set them on a table would choose code
for every process that later opens the table, the catalog included. So the catalog refuses
any property naming an implementation when it is set, and never hands a table's properties
to a pyiceberg loader (see ``store.py``: FileIO comes from the catalog's own properties only).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from lakeview import errors

# `*.impl`, `*-impl` and `impl` itself, in any case: every key pyiceberg or iceberg-java resolves to a class.
_IMPLEMENTATION = re.compile(r"(^|[.\-_])impl$", re.IGNORECASE)
_CLASS_VALUED = frozenset({"catalog-impl", "py-catalog-impl", "py-io-impl", "io-impl", "metrics-reporter-impl"})


def names_implementation(key: str) -> bool:
    """True for a property key that some Iceberg library resolves to a class it loads."""
    return bool(_IMPLEMENTATION.search(key)) or key.lower() in _CLASS_VALUED


def refuse_implementations(properties: Mapping[str, str], what: str, before: Mapping[str, str] | None = None) -> None:
    """Raise BadRequestError naming the first property (new or changed since ``before``) that names a class."""
    before = before or {}
    for key in sorted(properties):
        if names_implementation(key) and before.get(key) != properties[key]:
            raise errors.BadRequestError(
                f"{what} property {key!r} names an implementation class; the catalog refuses properties that "
                "would make a process load code (set FileIO and location providers in the client's own config)"
            )


__all__ = ["names_implementation", "refuse_implementations"]
