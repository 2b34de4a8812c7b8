"""Registrars publish view tables where readers look: AWS Glue, a Hive Metastore, plain paths.

Chosen through an explicit dict of lazy loaders (boto3 and thrift load only when used).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from catalog_api.registrars.base import Outcome, PublishedTable, Registrar, RegistrarCapabilities, Registration

if TYPE_CHECKING:
    from lakeview.config import ProjectConfig

__all__ = [
    "REGISTRARS", "Outcome", "PublishedTable", "Registrar", "RegistrarCapabilities", "Registration", "make_registrar"
]


def _glue(project: ProjectConfig) -> Registrar:
    from catalog_api.registrars.glue import GlueRegistrar
    from lakeview.config import GlueConfig

    config = project.glue or GlueConfig()
    return GlueRegistrar(endpoint=config.endpoint, region=config.region, catalog_id=config.catalog_id)


def _hive(project: ProjectConfig) -> Registrar:
    from catalog_api.registrars.hive import HiveRegistrar
    from lakeview.errors import ConfigError

    if project.hive is None:
        raise ConfigError(project.file, "hive", 'no [hive] table; add one with uri = "thrift://HOST:PORT"')
    return HiveRegistrar(project.hive.uri)


def _filesystem(project: ProjectConfig) -> Registrar:
    from catalog_api.registrars.filesystem import FilesystemRegistrar

    def locate(namespace: str, name: str) -> str | None:
        from lakeview.registration import table_location

        return table_location(project, namespace, name)

    return FilesystemRegistrar(locate)


REGISTRARS: dict[str, Callable[[ProjectConfig], Registrar]] = {
    "glue": _glue,
    "hive": _hive,
    "filesystem": _filesystem,
}


def make_registrar(name: str, project: ProjectConfig) -> Registrar:
    """The registrar called ``name`` configured from ``project``."""
    try:
        loader = REGISTRARS[name]
    except KeyError:
        raise ValueError(f"unknown registrar {name!r}; use one of {', '.join(REGISTRARS)}") from None
    return loader(project)
