"""CLI commands that make views discoverable: ``register``, ``unregister``, ``prune`` and
``trino-config``. Added to the ``lakeview`` app by :func:`add_commands`; heavy imports stay
inside the commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from lakeview.errors import LakeviewError

REGISTRAR_HELP = "glue, hive or filesystem"


def add_commands(app: typer.Typer) -> None:
    """Register the discoverability commands on ``app``."""
    app.command()(register)
    app.command()(unregister)
    app.command()(prune)
    app.command("trino-config")(trino_config)


ProjectOption = Annotated[Path, typer.Option("--project", "-p", help="Project directory or lakeview.toml file.")]


def _load(project: Path):
    from lakeview.project import load_project  # lazy: the command line imports a command's modules only when it runs

    return load_project(project)


def _registrar(name: str, config):
    from catalog_api.registrars.service import (  # lazy: the command line imports a command's modules only when it runs
        REGISTRARS,
        make_registrar,
    )

    if name not in REGISTRARS:
        raise LakeviewError(f"no registrar {name!r}; use {REGISTRAR_HELP}")
    return make_registrar(name, config)


def register(
    view: Annotated[str, typer.Argument(help="The view to publish.")],
    to: Annotated[str, typer.Option("--to", help=f"Where: {REGISTRAR_HELP}.")],
    project: ProjectOption = Path("."),
) -> None:
    """Publish VIEW's current snapshot in Glue, the Hive Metastore or as a path, now."""
    from catalog_api.registrars.service import (
        register_now,  # lazy: the command line imports a command's modules only when it runs
    )
    from lakeview.errors import NoSuchTableError  # lazy: the command line imports a command's modules only when it runs

    config = _load(project)
    config.require_view(view)
    registrar = _registrar(to, config)
    try:
        table = register_now(config, view, registrar)
    except NoSuchTableError:
        raise LakeviewError(f"{view} has no table yet; run `lakeview up` or `lakeview refresh {view}` first") from None
    finally:
        registrar.close()
    pointer = table.metadata_location or table.location
    typer.echo(f"{view}: registered in {to} as {table.qualified_name} -> {pointer}")


def unregister(
    view: Annotated[str, typer.Argument(help="The view to remove.")],
    from_: Annotated[str, typer.Option("--from", help=f"Where: {REGISTRAR_HELP}.")],
    project: ProjectOption = Path("."),
    namespace: Annotated[str | None, typer.Option(help="Namespace, for a view no longer in the config.")] = None,
) -> None:
    """Remove VIEW's entry from Glue, the Hive Metastore or its path hint (never its data)."""
    from catalog_api.registrars.service import (  # lazy: the command line imports a command's modules only when it runs
        RegistrationState,
        unregister_now,
    )

    config = _load(project)
    recorded = RegistrationState(config).load().get(view, {}).get(from_, {})
    ns = namespace or (config.views[view].namespace if view in config.views else recorded.get("namespace"))
    if ns is None:
        raise LakeviewError(f"no view {view!r} in the config and none recorded in {from_}; pass --namespace")
    registrar = _registrar(from_, config)
    try:
        removed = unregister_now(config, view, ns, registrar)
    finally:
        registrar.close()
    typer.echo(f"{view}: {'removed from' if removed else 'was not registered in'} {from_}")


def prune(
    project: ProjectOption = Path("."),
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask for confirmation.")] = False,
) -> None:
    """Unregister, everywhere, the views no longer in the config (or no longer registered there)."""
    from catalog_api.registrars.service import (  # lazy: the command line imports a command's modules only when it runs
        registered_elsewhere,
        unregister_now,
    )

    config = _load(project)
    stale = registered_elsewhere(config)
    if not stale:
        typer.echo("nothing to prune: every registered view is still configured")
        return
    typer.echo("would unregister:")
    for view, registrar, namespace in stale:
        typer.echo(f"  {namespace}.{view} from {registrar}")
    if not yes and not typer.confirm("unregister these?", default=False):
        typer.echo("nothing changed")
        return
    for view, name, namespace in stale:
        registrar = _registrar(name, config)
        try:
            unregister_now(config, view, namespace, registrar)
        finally:
            registrar.close()
        typer.echo(f"{namespace}.{view}: removed from {name}")


def trino_config(
    project: ProjectOption = Path("."),
    credential: Annotated[
        str | None, typer.Option(help="OAuth2 client credential client_id:client_secret for the REST catalog.")
    ] = None,
    out: Annotated[Path | None, typer.Option(help="Write the files into this directory (etc/catalog) instead.")] = None,
) -> None:
    """Print the Trino catalog files (REST, and Glue/HMS when configured) for this project."""
    from lakeview.cli.trino import (  # lazy: the command line imports a command's modules only when it runs
        catalog_files,
        render,
    )

    files = catalog_files(_load(project), credential=credential)
    for name, properties in files.items():
        text = render(name, properties)
        if out is None:
            typer.echo(text)
        else:
            out.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
            typer.echo(f"wrote {out / name}")
