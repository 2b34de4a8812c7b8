"""Cadence: how often a view commits a snapshot ("5s", "1m", "1h", or "manual")."""

from __future__ import annotations

import re
from dataclasses import dataclass

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d)\s*$")
VALID_CADENCE = 'a duration like "500ms", "5s", "1m", "1h", "1d", or "manual"'


@dataclass(frozen=True)
class Cadence:
    """A view's snapshot cadence; ``seconds is None`` means manual (``lakeview refresh``)."""

    text: str
    seconds: float | None

    @property
    def is_manual(self) -> bool:
        return self.seconds is None

    @property
    def spark_trigger(self) -> str:
        """The processing-time trigger Spark uses for this cadence."""
        if self.seconds is None:
            raise ValueError("a manual cadence has no trigger interval")
        return f"{int(self.seconds * 1000)} milliseconds"

    def __str__(self) -> str:
        return self.text


def parse_cadence(text: str) -> Cadence:
    """Parse a cadence string; raises ``ValueError`` naming what is valid."""
    if not isinstance(text, str):
        raise ValueError(f"cadence must be a string, {VALID_CADENCE}")
    if text.strip().lower() == "manual":
        return Cadence("manual", None)
    match = _PATTERN.match(text)
    if not match:
        raise ValueError(f"{text!r} is not a cadence; use {VALID_CADENCE}")
    seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if seconds < 0.1:
        raise ValueError(f"{text!r} is shorter than the minimum cadence of 100ms")
    return Cadence(text.strip(), seconds)
