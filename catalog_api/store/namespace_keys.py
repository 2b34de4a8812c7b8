"""How a multi-level namespace is stored in one ``table_namespace`` / ``namespace`` column.

Iceberg's JDBC schema joins levels with ``.``; a level may itself contain ``.`` (``"new.db"``), so
each level escapes ``%`` as ``%25`` and ``.`` as ``%2E`` before the join. A namespace with neither
character keeps the key iceberg-java and pyiceberg write (``a.b``), so existing rows and other JDBC
clients keep working; only keys holding a literal ``%`` change, once, in :func:`migrate`.
"""

from __future__ import annotations

from pyiceberg.catalog.sql import IcebergNamespaceProperties, IcebergTables
from pyiceberg.typedef import Identifier
from sqlalchemy import Column, MetaData, String, Table, func, select, update
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError

SEPARATOR = "."
ENCODING_KEY = "namespace-encoding"
ENCODING_VERSION = "escaped-levels-1"

_meta = MetaData()
store_settings = Table(
    "lakeview_store_settings",
    _meta,
    Column("setting", String(255), primary_key=True),
    Column("value", String(1000), nullable=False),
)


def encode_level(level: str) -> str:
    return level.replace("%", "%25").replace(".", "%2E")


def decode_level(level: str) -> str:
    return level.replace("%2E", ".").replace("%2e", ".").replace("%25", "%")


def encode(namespace: Identifier) -> str:
    """The store key of a namespace: escaped levels joined by ``.`` (``("new.db",)`` → ``new%2Edb``)."""
    return SEPARATOR.join(encode_level(level) for level in namespace)


def decode(key: str) -> Identifier:
    """The namespace a store key names (the inverse of :func:`encode`)."""
    return tuple(decode_level(level) for level in key.split(SEPARATOR)) if key else ()


def display(namespace: Identifier) -> str:
    """A namespace for messages: levels joined by ``.``, a level with a dot quoted."""
    return SEPARATOR.join(f'"{level}"' if SEPARATOR in level else level for level in namespace)


def migrate(engine: Engine, catalog_name: str) -> int:
    """Bring a store written before escaped levels up to date; returns the number of rows rewritten.

    Keys written before held levels verbatim (a level could not contain ``.``); only a literal
    ``%`` needs escaping now. Runs once per store: the encoding is recorded in
    ``lakeview_store_settings`` in the same transaction as the rewrite.
    """
    _meta.create_all(engine, checkfirst=True)
    setting = f"{ENCODING_KEY}:{catalog_name}"
    try:
        return _migrate(engine, catalog_name, setting)
    except IntegrityError:  # another process migrated at the same time; this transaction rolled back
        return 0


def _migrate(engine: Engine, catalog_name: str, setting: str) -> int:
    with engine.begin() as conn:
        done = conn.execute(select(store_settings.c.value).where(store_settings.c.setting == setting)).scalar()
        if done == ENCODING_VERSION:
            return 0
        rewritten = 0
        for column_table, column in (
            (IcebergTables.__table__, IcebergTables.__table__.c.table_namespace),
            (IcebergNamespaceProperties.__table__, IcebergNamespaceProperties.__table__.c.namespace),
        ):
            result = conn.execute(
                update(column_table)
                .where(column_table.c.catalog_name == catalog_name, column.contains("%", autoescape=True))
                .values({column.name: func.replace(column, "%", "%25")})
            )
            rewritten += max(result.rowcount, 0)
        if done is None:
            conn.execute(store_settings.insert().values(setting=setting, value=ENCODING_VERSION))
        else:
            done_row = store_settings.c.setting == setting
            conn.execute(update(store_settings).where(done_row).values(value=ENCODING_VERSION))
        return rewritten
