"""docs/configuration.md is generated from the config models; these tests keep the two in step."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from lakeview.config.models import ProjectConfig
from lakeview.config.reference import REGENERATE, render
from lakeview.errors import ConfigError
from lakeview.project import parse_project


def _repo_root() -> Path:
    here = Path(__file__).resolve()
    return next(p for p in here.parents if (p / "pyproject.toml").exists())


DOC = _repo_root() / "docs" / "configuration.md"


def _doc_sections(text: str) -> dict[str, set[str]]:
    """Section heading (``lake``, ``views.NAME``...) → the keys its table lists."""
    sections: dict[str, set[str]] = {}
    current = None
    for line in text.splitlines():
        if heading := re.match(r"^## `\[(.+)\]`$", line):
            current = sections.setdefault(heading.group(1), set())
        elif current is not None and (row := re.match(r"^\| `([a-z_0-9]+)` \|", line)):
            current.add(row.group(1))
    return sections


def test_configuration_doc_is_up_to_date() -> None:
    assert DOC.exists(), f"docs/configuration.md is missing; generate it: {REGENERATE}"
    assert DOC.read_text() == render(), (
        f"docs/configuration.md is out of date with the config models; run: {REGENERATE}"
    )


def test_every_key_has_a_description() -> None:
    missing = []

    def walk(model: type, path: str) -> None:
        for name, field in model.model_fields.items():
            if not field.description:
                missing.append(f"{path}{field.alias or name}")
            for arg in (field.annotation, *getattr(field.annotation, "__args__", ())):
                if isinstance(arg, type) and hasattr(arg, "model_fields"):
                    walk(arg, f"{path}{field.alias or name}.")

    walk(ProjectConfig, "")
    assert not missing, f"config keys without a description (add Field(description=...)): {missing}"


_SOURCE = {"format": "json", "path": "landing", "schema": "id BIGINT, n INT"}
_VIEW = {"sql": "SELECT id, n FROM orders"}
_BASE = {"sources": {"orders": _SOURCE}, "views": {"v": _VIEW}}


@pytest.mark.parametrize(
    ("section", "document"),
    [
        ("lake", {"lake": {"bogus": 1}}),
        ("lake.s3", {"lake": {"s3": {"bogus": 1}}}),
        ("server", {"server": {"bogus": 1}}),
        ("spark", {"spark": {"bogus": 1}}),
        ("auth", {"auth": {"bogus": 1}}),
        ("glue", {"glue": {"bogus": 1}}),
        ("hive", {"hive": {"uri": "thrift://h:9083", "bogus": 1}}),
        ("sources.NAME", {"sources": {"orders": {**_SOURCE, "bogus": 1}}}),
        ("views.NAME", {"views": {"v": {**_VIEW, "bogus": 1}}}),
        ("views.NAME.retention", {"views": {"v": {**_VIEW, "retention": {"bogus": 1}}}}),
        ("views.NAME.maintenance", {"views": {"v": {**_VIEW, "maintenance": {"bogus": 1}}}}),
    ],
)
def test_doc_lists_the_keys_the_loader_accepts(section: str, document: dict) -> None:
    """An unknown key's error names the valid keys; the doc's table (plus its subsections) lists the same."""
    with pytest.raises(ConfigError) as caught:
        parse_project({**_BASE, **document})
    assert "unknown key" in caught.value.problem
    valid = set(caught.value.problem.split("valid keys: ", 1)[1].split(", "))
    sections = _doc_sections(DOC.read_text())
    children = {s[len(section) + 1 :].split(".")[0] for s in sections if s.startswith(section + ".")}
    assert sections[section] | children == valid
