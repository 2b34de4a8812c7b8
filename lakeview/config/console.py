"""``[console]``: how the browser console served at ``/ui/`` keeps its history (lakeview.history)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakeview.config.cadence import Cadence, parse_cadence


def _duration(value: Any) -> Cadence:
    parsed = value if isinstance(value, Cadence) else parse_cadence(value)
    if parsed.is_manual:
        raise ValueError(f'{value!r}: use a duration like "5s", "1h" or "2d"')
    return parsed


class ConsoleConfig(BaseModel):
    """The console's lag, commit and backlog history, sampled by the process serving the catalog."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    history_retention: Cadence = Field(
        default_factory=lambda: parse_cadence("2d"),
        description="how long samples of lag, commits and source backlog are kept in "
        "`<warehouse>/_lakeview/history.db` (the console charts the last hour and day); older ones are deleted",
    )
    sample_interval: Cadence = Field(
        default_factory=lambda: parse_cadence("5s"),
        description="how often the running `lakeview up` / `serve` samples every view's lag and every source's backlog",
    )

    @field_validator("history_retention", "sample_interval", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> Cadence:
        return _duration(value)

    @property
    def retention_ms(self) -> int:
        return int((self.history_retention.seconds or 0) * 1000)
