"""Trino: catalog property files for the running project, and queries through the ``trino`` client.

Trino reads Lakeview's views through any of the places they are published:

* the REST catalog (Iceberg connector, ``iceberg.catalog.type=rest``; OAuth2 when ``[auth]`` is on),
* AWS Glue (Iceberg connector ``iceberg.catalog.type=glue``; Delta Lake connector ``hive.metastore=glue``),
* a Hive Metastore (Iceberg ``iceberg.catalog.type=hive_metastore``; Delta Lake ``hive.metastore.uri``).

Property names follow Trino's documentation (object-storage/metastores, connector/delta-lake);
``tests/registrars/test_trino_config.py`` checks every generated name against the documented ones. No Trino server
runs on the machine this was built on, so the files themselves were not loaded by Trino here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from lakeview.errors import LakeviewError

if TYPE_CHECKING:
    from lakeview.config.models import ProjectConfig

CREDENTIAL_PLACEHOLDER = "<client_id>:<client_secret>"


def _uses(project: ProjectConfig, registrar: str, fmt: str | None = None) -> bool:
    return any(
        registrar in {r.value for r in view.registrars} and (fmt is None or view.format.value == fmt)
        for view in project.views.values()
    )


def catalog_files(project: ProjectConfig, *, credential: str | None = None) -> dict[str, dict[str, str]]:
    """``{file name: properties}`` of the Trino catalogs that reach this project's views.

    The REST catalog is always included; Glue and HMS catalogs when the project configures them
    (``[glue]``/``[hive]`` or a view registering there). With auth on, the REST catalog uses
    OAuth2 client credentials (``credential`` = ``client_id:client_secret``, else a placeholder).
    """
    rest = {
        "connector.name": "iceberg",
        "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": project.catalog_uri,
        "iceberg.rest-catalog.warehouse": project.lake.name,
    }
    auth = getattr(project, "auth", None)
    if credential or (auth is not None and getattr(auth, "enabled", False)):
        rest["iceberg.rest-catalog.security"] = "OAUTH2"
        rest["iceberg.rest-catalog.oauth2.credential"] = credential or CREDENTIAL_PLACEHOLDER
    files = {"lakeview.properties": rest}
    if project.glue is not None or _uses(project, "glue"):
        from lakeview.config.models import (
            GlueConfig,  # lazy: the command line imports a command's modules only when it runs
        )

        glue = project.glue or GlueConfig()
        metastore = {"hive.metastore.glue.region": glue.region}
        if glue.endpoint:
            metastore["hive.metastore.glue.endpoint-url"] = glue.endpoint
        if glue.catalog_id:
            metastore["hive.metastore.glue.catalogid"] = glue.catalog_id
        files["lakeview_glue.properties"] = {"connector.name": "iceberg", "iceberg.catalog.type": "glue", **metastore}
        files["lakeview_glue_delta.properties"] = {
            "connector.name": "delta_lake",
            "hive.metastore": "glue",
            **metastore,
        }
    if project.hive is not None:
        uri = {"hive.metastore.uri": project.hive.uri}
        files["lakeview_hive.properties"] = {
            "connector.name": "iceberg",
            "iceberg.catalog.type": "hive_metastore",
            **uri,
        }
        files["lakeview_hive_delta.properties"] = {"connector.name": "delta_lake", "hive.metastore": "thrift", **uri}
    return files


def render(name: str, properties: dict[str, str]) -> str:
    """One catalog file's text (``key=value`` lines under a comment naming the file)."""
    lines = [f"# etc/catalog/{name}  (Trino catalog {name.removesuffix('.properties')!r})"]
    lines += [f"{key}={value}" for key, value in properties.items()]
    return "\n".join(lines) + "\n"


def run_query(
    sql: str, server: str, *, catalog: str = "lakeview", schema: str | None = None, user: str = "lakeview"
) -> tuple[list[str], list[tuple[Any, ...]]]:
    """Run ``sql`` on the Trino server at ``server`` (``http(s)://HOST:PORT``); columns and rows.

    Raises LakeviewError naming the server when none answers there, or Trino's own message when
    the query fails.
    """
    import httpx  # lazy: the command line imports a command's modules only when it runs
    import trino  # lazy: the Trino client loads only for --engine trino

    url = urlparse(server if "://" in server else f"http://{server}")
    if url.scheme not in ("http", "https") or not url.hostname:
        raise LakeviewError(f"--server {server!r} is not a Trino URL; use http://HOST:PORT")
    port = url.port or (443 if url.scheme == "https" else 8080)
    try:
        httpx.get(f"{url.scheme}://{url.hostname}:{port}/v1/info", timeout=5).raise_for_status()
    except httpx.HTTPError as exc:
        raise LakeviewError(
            f"no Trino server answers at {url.scheme}://{url.hostname}:{port} ({exc.__class__.__name__}: {exc})"
        ) from None
    connection = trino.dbapi.connect(
        host=url.hostname, port=port, http_scheme=url.scheme, user=user, catalog=catalog, schema=schema
    )
    try:
        cursor = connection.cursor()
        cursor.execute(sql)
        rows = [tuple(row) for row in cursor.fetchall()]
        columns = [d[0] for d in cursor.description or []]
    except trino.exceptions.TrinoQueryError as exc:
        raise LakeviewError(f"trino: {exc.message}") from None
    except trino.exceptions.TrinoConnectionError as exc:  # the server went away mid-query
        raise LakeviewError(f"trino at {server}: {exc}") from None
    finally:
        connection.close()
    return columns, rows
