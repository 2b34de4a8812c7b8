"""One behaviour suite for every registrar (Glue on moto, the real Hive Metastore, the filesystem):
the shared register loop's outcomes on a view whose table moves through real commits: a new
entry, an unchanged one, a swap, never backwards, a concurrent writer racing the swap, unregister.

The concurrent writer is a second registrar publishing for real between our read and our write
(or right after our write); the registrar under test is only observed at its ``swap``, the point
the shared loop hands to the backend."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from catalog_api.registrars.base import Outcome, PublishedTable, Registrar, Registration
from catalog_api.registrars.filesystem import FilesystemRegistrar
from catalog_api.registrars.glue import GlueRegistrar
from catalog_api.registrars.hive import HiveRegistrar
from catalog_api.registrars.service import published_table
from lakeview.errors import RegistrarConflictError
from tests.registrars.conftest import commit, iceberg_writer


@pytest.fixture(params=["glue", "hive", "filesystem"])
def make_registrar(request: pytest.FixtureRequest) -> Callable[[], Registrar]:
    """A factory of registrars of one kind, all publishing to the same service."""
    if request.param == "glue":
        endpoint = request.getfixturevalue("moto").endpoint
        return lambda: GlueRegistrar(endpoint=endpoint)
    if request.param == "hive":
        uri = request.getfixturevalue("hms").uri
        return lambda: HiveRegistrar(uri)
    return FilesystemRegistrar


@pytest.fixture()
def commits(view_project, rest_catalog, unique_name: str) -> list[PublishedTable]:
    """The view's table after each of three real commits (metadata versions growing)."""
    project = view_project()
    writer = iceberg_writer(rest_catalog, project, unique_name)
    tables = []
    for epoch in range(3):
        commit(writer, unique_name, epoch, {1: (10 + epoch, "a"), 2 + epoch: (epoch, "b")})
        tables.append(published_table(project, unique_name))
    return tables


def pointer(registration: Registration | None) -> str | None:
    """The metadata file an entry points at (the filesystem's hint links to it, so it names its source)."""
    if registration is None:
        return None
    location = registration.parameters.get("source") or registration.metadata_location
    return location.removeprefix("file://") if location else None


def metadata(table: PublishedTable) -> str:
    return (table.metadata_location or "").removeprefix("file://")


def test_create_keep_move_never_back(make_registrar, commits: list[PublishedTable]) -> None:
    first, second, _ = commits
    registrar = make_registrar()
    assert registrar.register(first) is Outcome.CREATED
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(first)
    assert registrar.register(first) is Outcome.UNCHANGED
    assert registrar.register(second) is Outcome.MOVED
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(second)
    with pytest.raises(RegistrarConflictError, match="newer than Lakeview's"):
        registrar.register(first)
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(second)


def test_swap_raced_by_a_newer_publish(make_registrar, commits: list[PublishedTable]) -> None:
    """Another publisher moves the entry to newer metadata right after our swap: its pointer
    survives. With optimistic locking our swap was accepted first (MOVED); without it the loop's
    re-read sees the newer entry and refuses to move it back."""
    first, second, third = commits
    registrar, racer = make_registrar(), make_registrar()
    registrar.register(first)
    swap = registrar.swap
    raced: list[str] = []

    def swap_then_race(table: PublishedTable, current: Registration) -> bool:
        done = swap(table, current)
        if not raced:
            raced.append(racer.register(third).value)
        return done

    registrar.swap = swap_then_race  # type: ignore[method-assign]
    if registrar.capabilities.optimistic_locking:
        assert registrar.register(second) is Outcome.MOVED
    else:
        with pytest.raises(RegistrarConflictError, match="newer than Lakeview's"):
            registrar.register(second)
    assert raced == ["moved"]
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(third)


def test_swap_raced_by_an_older_publish(make_registrar, commits: list[PublishedTable]) -> None:
    """Another publisher moves the entry to older metadata between our read and our swap: ours,
    the newest, ends up registered."""
    first, second, third = commits
    registrar, racer = make_registrar(), make_registrar()
    registrar.register(first)
    swap = registrar.swap
    raced: list[str] = []

    def race_then_swap(table: PublishedTable, current: Registration) -> bool:
        if not raced:
            raced.append(racer.register(second).value)
        return swap(table, current)

    registrar.swap = race_then_swap  # type: ignore[method-assign]
    assert registrar.register(third) is Outcome.MOVED
    assert raced == ["moved"]
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(third)
    assert registrar.register(third) is Outcome.UNCHANGED


def test_create_raced_by_the_same_publish(make_registrar, commits: list[PublishedTable]) -> None:
    """Two publishers create the same new entry at once: neither fails, the entry is theirs."""
    first = commits[0]
    registrar, racer = make_registrar(), make_registrar()
    create = registrar.create

    def race_then_create(table: PublishedTable) -> bool:
        assert racer.register(table) is Outcome.CREATED
        return create(table)

    registrar.create = race_then_create  # type: ignore[method-assign]
    assert registrar.register(first) in (Outcome.CREATED, Outcome.UNCHANGED)
    assert pointer(registrar.registered(first.namespace, first.name)) == metadata(first)


def test_unregister_keeps_the_files(make_registrar, commits: list[PublishedTable]) -> None:
    first = commits[0]
    registrar = make_registrar()
    registrar.register(first)
    assert registrar.unregister(first.namespace, first.name) is True
    assert registrar.registered(first.namespace, first.name) is None
    assert registrar.unregister(first.namespace, first.name) is False
    assert Path(metadata(first)).exists(), "unregister never deletes the table's files"
