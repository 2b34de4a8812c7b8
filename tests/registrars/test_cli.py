"""``lakeview register / unregister / prune`` on a project file, against moto Glue and paths."""

from __future__ import annotations

import io
import logging
from pathlib import Path

import boto3
import pytest

from lakeview.cli.main import main
from lakeview.project import load_project
from lakeview.stack.embedded import EmbeddedStack
from tests.registrars.conftest import commit, iceberg_writer

VIEW_SQL = "SELECT product_id, SUM(quantity) AS total_sold, MAX(label) AS label FROM orders GROUP BY product_id"


def write_project(path: Path, lake_dir: Path, port: int, glue: str, views: dict[str, str]) -> Path:
    text = f"""
[lake]
warehouse = "{lake_dir / "warehouse"}"
catalog_store = "sqlite:///{lake_dir / "catalog.db"}"
[server]
port = {port}
[glue]
endpoint = "{glue}"
[sources.orders]
format = "json"
path = "landing"
schema = "product_id BIGINT, quantity INT, label STRING"
"""
    for name, namespace in views.items():
        text += f'[views.{name}]\nsql = "{VIEW_SQL}"\nnamespace = "{namespace}"\nregister = ["glue", "filesystem"]\n'
    (path / "lakeview.toml").write_text(text)
    return path


def test_register_unregister_and_prune(
    moto, lake_dir, catalog_server, rest_catalog, tmp_path, unique_name, monkeypatch, capsys, caplog
) -> None:
    namespace = f"cli_{unique_name}"[:50]
    project_dir = write_project(tmp_path, lake_dir, catalog_server.port, moto.endpoint, {unique_name: namespace})
    project = load_project(project_dir)
    commit(iceberg_writer(rest_catalog, project, unique_name), unique_name, 0, {1: (1, "a")})
    glue = boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")

    main(["register", unique_name, "--to", "glue", "-p", str(project_dir)])
    main(["register", unique_name, "--to", "filesystem", "-p", str(project_dir)])
    assert f"{unique_name}: registered in glue as {namespace}.{unique_name}" in capsys.readouterr().out
    assert glue.get_table(DatabaseName=namespace, Name=unique_name)["Table"]["Parameters"]["table_type"] == "ICEBERG"

    main(["unregister", unique_name, "--from", "filesystem", "-p", str(project_dir)])
    assert f"{unique_name}: removed from filesystem" in capsys.readouterr().out
    main(["register", unique_name, "--to", "filesystem", "-p", str(project_dir)])

    with pytest.raises(SystemExit) as done:
        main(["register", unique_name, "--to", "nowhere", "-p", str(project_dir)])
    assert done.value.code == 2 and "no registrar 'nowhere'" in capsys.readouterr().err

    # Drop the view from the config: prune lists it, asks, and does nothing on "n".
    write_project(tmp_path, lake_dir, catalog_server.port, moto.endpoint, {})
    capsys.readouterr()
    # `lakeview up` points at prune when it starts.
    with caplog.at_level(logging.WARNING, logger="lakeview"):
        EmbeddedStack(load_project(project_dir), port=0)._with_registration(None)
    assert f"{namespace}.{unique_name} is still registered in glue" in caplog.text and "lakeview prune" in caplog.text
    monkeypatch.setattr("sys.stdin", io.StringIO("n\n"))
    main(["prune", "-p", str(project_dir)])
    out = capsys.readouterr().out
    assert "nothing changed" in out
    assert f"{namespace}.{unique_name} from glue" in out and f"{namespace}.{unique_name} from filesystem" in out
    assert glue.get_table(DatabaseName=namespace, Name=unique_name)

    main(["prune", "-p", str(project_dir), "--yes"])
    assert f"{namespace}.{unique_name}: removed from glue" in capsys.readouterr().out
    with pytest.raises(glue.exceptions.EntityNotFoundException):
        glue.get_table(DatabaseName=namespace, Name=unique_name)
    main(["prune", "-p", str(project_dir)])
    assert "nothing to prune" in capsys.readouterr().out
