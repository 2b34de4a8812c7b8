"""Registration in the background: a registrar that is down never blocks or undoes a commit; the
view shows as degraded (REGISTRAR_DOWN) and the pointer catches up when the registrar is back."""

from __future__ import annotations

import boto3

from catalog_api.ops.status import view_statuses
from catalog_api.registrars.service import REGISTRAR_DOWN, RegistrationService, degraded_reasons, published_table
from lakeview.ivm.commits import CommitRecord
from lakeview.stack.embedded import EmbeddedStack
from tests.registrars.conftest import MotoServer, commit, iceberg_writer, sorted_rows
from tests.waiting import wait_for


def glue_pointer(endpoint: str, namespace: str, name: str) -> str | None:
    glue = boto3.client("glue", endpoint_url=endpoint, region_name="us-east-1")
    try:
        return glue.get_table(DatabaseName=namespace, Name=name)["Table"]["Parameters"]["metadata_location"]
    except Exception:  # down, or not registered yet
        return None


def test_glue_down_degrades_then_catches_up(aws_env, view_project, rest_catalog, unique_name) -> None:
    glue = MotoServer().start()  # its own server: this test stops and restarts it
    try:
        project = view_project(register=["glue", "filesystem"], glue={"endpoint": glue.endpoint, "interval": "100ms"})
        namespace = project.views[unique_name].namespace
        writer = iceberg_writer(rest_catalog, project, unique_name)
        # The same fan-out `lakeview up` installs around the pipeline's on_commit.
        stack = EmbeddedStack(project, port=0)
        seen: list[CommitRecord] = []
        on_commit = stack._with_registration(seen.append)
        assert on_commit is not None and stack.registration is not None
        stack.registration.base_delay, stack.registration.max_delay = 0.1, 0.5
        try:
            record = writer.commit(*_epoch(unique_name, 0, {1: 10}))
            on_commit(record)
            first = published_table(project, unique_name)
            wait_for(
                lambda: glue_pointer(glue.endpoint, namespace, unique_name) == first.metadata_location, interval=0.05
            )

            glue.stop()
            record = writer.commit(*_epoch(unique_name, 1, {1: 11, 2: 20}))
            on_commit(record)  # returns at once; the commit stands
            assert [r.epoch for r in seen] == [0, 1]
            second = published_table(project, unique_name)
            assert sorted_rows(rest_catalog.load_table((namespace, unique_name)).scan().to_arrow()) == [
                (1, 11, "x"),
                (2, 20, "x"),
            ]
            reason = wait_for(lambda: degraded_reasons(project).get(unique_name), interval=0.05)
            assert str(reason).startswith(f"{REGISTRAR_DOWN}: glue: ")
            # The filesystem registrar is not held up by Glue being down.
            assert "filesystem" not in str(reason)
            status = {s.view: s for s in view_statuses(project)}[unique_name]
            assert status.degraded_reason == REGISTRAR_DOWN and "glue" in str(status.registrar_errors)

            glue.start()  # same port, empty state: the registrar recreates database and table
            wait_for(
                lambda: glue_pointer(glue.endpoint, namespace, unique_name) == second.metadata_location, interval=0.05
            )
            wait_for(lambda: unique_name not in degraded_reasons(project), interval=0.05)
            assert {s.view: s for s in view_statuses(project)}[unique_name].registrar_errors is None
        finally:
            stack.stop_views()
    finally:
        glue.stop()


def test_pointer_moves_at_most_once_per_interval(aws_env, moto, view_project, rest_catalog, unique_name) -> None:
    """Several commits inside one interval are published as one Glue update with the newest pointer."""
    project = view_project(register=["glue"], glue={"endpoint": moto.endpoint, "interval": "1h"})
    namespace = project.views[unique_name].namespace
    writer = iceberg_writer(rest_catalog, project, unique_name)
    commit(writer, unique_name, 0, {1: (1, "x")})
    service = RegistrationService(project).start()
    try:
        assert service.wait_idle(30)
        for epoch in (1, 2, 3):
            commit(writer, unique_name, epoch, {1: (epoch, "x")})
            service.notify(unique_name)
        assert not service.wait_idle(0.5), "still inside the interval: nothing published yet"
        client = boto3.client("glue", endpoint_url=moto.endpoint, region_name="us-east-1")
        versions = client.get_table_versions(DatabaseName=namespace, TableName=unique_name)["TableVersions"]
        assert len(versions) == 1
    finally:
        service.stop()


def _epoch(view: str, number: int, totals: dict[int, int]):
    import pyarrow as pa

    from lakeview.ivm.commits import Change, Epoch
    from tests.registrars.conftest import SCHEMA

    rows = pa.table(
        {"product_id": list(totals), "total_sold": list(totals.values()), "label": ["x"] * len(totals)}, schema=SCHEMA
    )
    return Epoch(view, number, {"orders": number}), Change(rows, ("product_id",))
