"""Sample order data for the demo and tests, landed atomically (write hidden, then rename)."""

from __future__ import annotations

import json
import os
import random
from datetime import UTC, datetime, timedelta
from pathlib import Path


def make_orders(count: int, *, seed: int, first_id: int = 1, products: int = 8) -> list[dict]:
    rng = random.Random(seed)
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {
            "order_id": first_id + i,
            "product_id": rng.randint(1, products),
            "quantity": rng.randint(1, 5),
            # order ids may be large (time-based); the timestamp stays within one year
            "ts": (start + timedelta(seconds=(first_id + i) % 31_536_000)).isoformat(),
        }
        for i in range(count)
    ]


def land_json(directory: Path, name: str, rows: list[dict]) -> Path:
    """Write ``rows`` as JSON lines to ``directory/name`` atomically: Spark and the oracle
    skip files starting with '.', so a reader never sees a half-written file."""
    directory.mkdir(parents=True, exist_ok=True)
    hidden = directory / f".{name}.tmp"
    hidden.write_text("".join(json.dumps(row) + "\n" for row in rows))
    final = directory / name
    os.replace(hidden, final)
    return final
