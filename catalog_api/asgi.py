"""ASGI factory for running the catalog in several worker processes (scale-out on one host):

    LAKEVIEW_PROJECT=path/to/lakeview.toml uvicorn --factory catalog_api.asgi:create_app --workers 2 --port 8181

binds 127.0.0.1 (uvicorn's default). ``--host 0.0.0.0`` (or any non-loopback host) is refused unless the
project configures ``[auth] mode = "oauth2"``; without auth the app also answers 403 to any connection
that did not arrive on loopback, whatever server runs it.

or, without a project file, ``LAKEVIEW_CATALOG_STORE`` (SQLAlchemy URL), ``LAKEVIEW_WAREHOUSE`` and
optionally ``LAKEVIEW_WAREHOUSE_NAME``. Workers share the store (SQLite in WAL mode or PostgreSQL),
whose compare-and-swap keeps them one catalog; with ``[auth]`` every worker must read the same
``signing_key_file`` so a token issued by one is accepted by all.
"""

from __future__ import annotations

import os

from starlette.applications import Starlette

from catalog_api.app import build_app
from catalog_api.auth.authenticator import project_authenticator
from catalog_api.auth.bind_guard import refuse_open_command_line
from catalog_api.store.catalog import CatalogStore, open_store
from lakeview.errors import SetupError
from lakeview.project import load_project


def create_app() -> Starlette:
    """The catalog app for an ASGI server. Raises SetupError for a non-loopback ``--host``/``--bind``
    without ``[auth]`` (and the app answers 403 to non-loopback connections without auth anyway)."""
    project_file = os.environ.get("LAKEVIEW_PROJECT")
    if project_file:
        project = load_project(project_file)
        refuse_open_command_line(project.auth.enabled)
        if project.auth.enabled and not project.auth.signing_key_file:
            raise SetupError("several catalog workers need [auth] signing_key_file so they accept each other's tokens")
        return build_app(open_store(project), authenticator=project_authenticator(project))
    try:
        url, warehouse = os.environ["LAKEVIEW_CATALOG_STORE"], os.environ["LAKEVIEW_WAREHOUSE"]
    except KeyError as exc:
        raise SetupError(
            f"set LAKEVIEW_PROJECT, or {exc.args[0]} (and LAKEVIEW_CATALOG_STORE/LAKEVIEW_WAREHOUSE)"
        ) from None
    refuse_open_command_line(authenticated=False)  # without a project there is no [auth]
    return build_app(CatalogStore(url, warehouse, os.environ.get("LAKEVIEW_WAREHOUSE_NAME", "lakeview")))
