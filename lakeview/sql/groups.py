"""View groups (``group = "name"``): views committed together in one multi-table catalog
transaction with one frontier, kept by one streaming query (:mod:`spark_jobs.group_pipeline`).
A group's members must be able to share one epoch: the same one source (not a view), the same
cadence, and a format with multi-table transactions (Iceberg)."""

from __future__ import annotations

from lakeview.config.models import ProjectConfig, TableFormat
from lakeview.errors import ConfigError
from lakeview.sql.planner import view_plan


def groups_of(config: ProjectConfig) -> dict[str, list[str]]:
    """Group name -> member views, in config order."""
    groups: dict[str, list[str]] = {}
    for name, view in config.views.items():
        if view.group is not None:
            groups.setdefault(view.group, []).append(name)
    return groups


def check_groups(config: ProjectConfig) -> None:
    """Raise ConfigError naming the first member that cannot join its group."""

    for group, members in groups_of(config).items():
        first = config.views[members[0]]
        first_sources = sorted(view_plan(config, members[0]).sources)
        for name in members:
            view = config.views[name]
            key = f"views.{name}.group"
            if view.format is not TableFormat.ICEBERG:
                raise ConfigError(
                    config.file, key, f"{group!r}: grouped views must be Iceberg (Delta has no multi-table transaction)"
                )
            if not view.materialize:
                raise ConfigError(
                    config.file, key, f"{group!r}: an inline view (materialize = false) has no table to commit"
                )
            if view.cadence.seconds != first.cadence.seconds:
                raise ConfigError(
                    config.file,
                    key,
                    f"{group!r}: cadence {view.cadence} differs from {members[0]}'s {first.cadence}; a group shares one cadence",
                )
            sources = sorted(view_plan(config, name).sources)
            if len(sources) != 1:
                raise ConfigError(
                    config.file,
                    key,
                    f"{group!r}: reads {len(sources)} sources ({', '.join(sources)}); a group's one query reads one source",
                )
            if sources[0] in config.views:
                raise ConfigError(
                    config.file,
                    key,
                    f"{group!r}: reads the view {sources[0]}; grouped views read a source (group the upstream view instead)",
                )
            if sources != first_sources:
                raise ConfigError(
                    config.file,
                    key,
                    f"{group!r}: reads {sources}, {members[0]} reads {first_sources}; a group shares its sources",
                )


def group_lines(config: ProjectConfig, view: str) -> list[str]:
    """``lakeview explain``'s line for a grouped view: who it commits with, and how (none: no line)."""
    group = config.views[view].group
    if group is None:
        return []
    others = [name for name in groups_of(config)[group] if name != view]
    return [
        f"group {group}: one streaming query keeps {', '.join([view, *others])}; each epoch every table of the group (views, "
        f"state tables, mirrors) is committed in ONE catalog transaction with one frontier (checkpoint "
        f"_lakeview/checkpoints/group-{group}); `lakeview refresh` of any member refreshes the whole group"
    ]
