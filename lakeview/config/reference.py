"""The configuration reference (docs/configuration.md), rendered from the config models.

Every key of ``lakeview.toml`` is a pydantic field; its type, default and ``description`` are the
reference, so the document cannot drift from what the loader accepts. Regenerate with
``python -m lakeview.config.reference > docs/configuration.md`` (a test fails when it is stale).
"""

from __future__ import annotations

import enum
import inspect
import re
import types
from typing import Any, Union, get_args, get_origin

import annotated_types
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from lakeview.config.cadence import Cadence
from lakeview.config.models import ProjectConfig

REGENERATE = "python -m lakeview.config.reference > docs/configuration.md"

# Placeholder for the user-chosen name of a table in a dict-of-tables section, e.g. [views.NAME].
_ENTRY_NAMES = {"sources": "NAME", "views": "NAME", "clients": "ID"}

_PREAMBLE = f"""\
# Configuration reference (`lakeview.toml`)

<!-- Generated from the config models' field descriptions; do not edit by hand.
     Regenerate: {REGENERATE} -->

A project is one TOML file, `lakeview.toml`, found by `-p/--project` (a directory or the file) or in
the current directory. Relative paths are relative to the project file. Unknown keys are rejected,
and every error names the file, the key, the bad value and what is valid, e.g.
`lakeview.toml: views.sales.cadence: '5 parsecs' is not a cadence; use a duration like "500ms", "5s",
"1m", "1h", "1d", or "manual"`. A whole example: [examples/orders/lakeview.toml](../examples/orders/lakeview.toml).

Durations are written like `"500ms"`, `"30s"`, `"5m"`, `"1h"`, `"7d"`. Sections named `NAME` or
`ID` are one table per entry (`[views.sales_by_product]`, `[auth.clients.spark]`).
"""


def render() -> str:
    """The markdown of docs/configuration.md: one table per section (key, type, default, meaning)."""
    parts = [_PREAMBLE]
    for path, model, description in _sections(ProjectConfig, [], None):
        parts.append(_section(path, model, description))
    return "\n".join(parts)


def _sections(
    model: type[BaseModel], path: list[str], description: str | None
) -> list[tuple[list[str], type[BaseModel], str | None]]:
    """Each section (a TOML table) under ``model`` depth-first, ``model`` itself first when it has keys."""
    found: list[tuple[list[str], type[BaseModel], str | None]] = []
    if path and _plain_fields(model):
        found.append((path, model, description))
    for name, field in model.model_fields.items():
        if field.exclude:
            continue
        nested, is_dict = _nested_model(field.annotation)
        if nested is None:
            continue
        key = field.alias or name
        sub = [*path, key, _ENTRY_NAMES.get(key, "NAME")] if is_dict else [*path, key]
        found.extend(_sections(nested, sub, field.description))
    return found


def _plain_fields(model: type[BaseModel]) -> list[tuple[str, FieldInfo]]:
    return [
        (name, field)
        for name, field in model.model_fields.items()
        if not field.exclude and _nested_model(field.annotation)[0] is None
    ]


def _nested_model(annotation: Any) -> tuple[type[BaseModel] | None, bool]:
    """The config model a field holds (directly, optionally, or as a dict of tables) and whether it is a dict."""
    if _is_model(annotation):
        return annotation, False
    args = [a for a in get_args(annotation) if a is not type(None)]
    if get_origin(annotation) is dict and len(args) == 2 and _is_model(args[1]):
        return args[1], True
    if _is_union(annotation) and len(args) == 1 and _is_model(args[0]):
        return args[0], False
    return None, False


def _is_model(annotation: Any) -> bool:
    return inspect.isclass(annotation) and issubclass(annotation, BaseModel)


def _is_union(annotation: Any) -> bool:
    return get_origin(annotation) in (Union, types.UnionType)


def _section(path: list[str], model: type[BaseModel], description: str | None) -> str:
    lines = [f"## `[{'.'.join(path)}]`", ""]
    if "__doc__" in vars(model) and model.__doc__:  # the model's own docstring, not BaseModel's
        intro = _inline_code(" ".join(inspect.cleandoc(model.__doc__).split()))
        intro = re.sub(r"^`\[[^]]+\]`: ", "", intro)  # the heading already names the section
        lines += [intro[0].upper() + intro[1:], ""]
    elif description:
        lines += [description[0].upper() + description[1:] + ".", ""]
    lines += ["| key | type | default | meaning |", "|---|---|---|---|"]
    for name, field in _plain_fields(model):
        cells = [f"`{field.alias or name}`", _type_text(field), _default_text(field), field.description or ""]
        lines.append("| " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(lines) + "\n"


def _type_text(field: FieldInfo) -> str:
    text = _annotation_text(field.annotation)
    for bound in field.metadata:
        if isinstance(bound, annotated_types.Ge):
            text += f", ≥ {bound.ge}"
        elif isinstance(bound, annotated_types.Le):
            text += f", ≤ {bound.le}"
        elif isinstance(bound, annotated_types.MinLen) and bound.min_length:
            text += f", at least {bound.min_length}"
    return text


def _annotation_text(annotation: Any) -> str:
    if _is_union(annotation):
        return " or ".join(_annotation_text(a) for a in get_args(annotation) if a is not type(None))
    origin, args = get_origin(annotation), get_args(annotation)
    if origin is list:
        return f"list of {_annotation_text(args[0])}"
    if origin is dict:
        return f"table of {_annotation_text(args[0])} → {_annotation_text(args[1])}"
    if inspect.isclass(annotation) and issubclass(annotation, enum.Enum):
        return " | ".join(f'`"{member.value}"`' for member in annotation)
    if annotation is Cadence:
        return "duration"
    return {str: "string", int: "integer", bool: "boolean", float: "number"}.get(annotation, str(annotation))


def _default_text(field: FieldInfo) -> str:
    if field.default_factory is not None:
        value = field.default_factory()
    elif field.default is PydanticUndefined:
        return "required"
    else:
        value = field.default
    return "none" if value is None else f"`{_toml(value)}`"


def _toml(value: Any) -> str:
    """A default as it would be written in lakeview.toml."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return _toml(value.value)
    if isinstance(value, (Cadence, str)):
        return '"' + str(value) + '"'
    if isinstance(value, list):
        return "[" + ", ".join(_toml(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k} = {_toml(v)}" for k, v in value.items()) + "}"
    if isinstance(value, int) and value >= 10_000:
        return f"{value:_}"  # TOML accepts 8_388_608; easier to read than 8388608
    return str(value)


def _inline_code(text: str) -> str:
    return re.sub(r"``([^`]+)``", r"`\1`", text)


def _cell(text: str) -> str:
    return text.replace("\n", " ").replace("|", "\\|")


if __name__ == "__main__":
    print(render(), end="")
