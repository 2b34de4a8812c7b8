"""A sliding-window rate limit per key (client id, client address) for the token endpoint, where
each attempt costs a deliberately slow secret hash."""

from __future__ import annotations

import math
import threading
import time
from collections import deque


class SlidingWindow:
    """At most ``limit`` hits per ``window`` seconds per key; :meth:`hit` says how long to wait when over."""

    def __init__(self, limit: int, window: float = 60.0, max_keys: int = 100_000) -> None:
        self.limit = limit
        self.window = window
        self.max_keys = max_keys  # bounded memory under a flood of distinct keys
        self._hits: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def hit(self, key: str) -> int | None:
        """Record a hit; None if allowed, else the seconds (≥ 1) until the key may try again."""
        now = time.monotonic()
        with self._lock:
            hits = self._hits.get(key)
            if hits is None:
                if len(self._hits) >= self.max_keys:
                    self._forget_idle(now)
                hits = self._hits[key] = deque()
            while hits and hits[0] <= now - self.window:
                hits.popleft()
            if len(hits) >= self.limit:
                return max(1, math.ceil(hits[0] + self.window - now))
            hits.append(now)
            return None

    def over(self, key: str) -> int | None:
        """Like :meth:`hit` without recording one: None if a hit would be allowed now."""
        now = time.monotonic()
        with self._lock:
            hits = [t for t in self._hits.get(key, ()) if t > now - self.window]
            return max(1, math.ceil(hits[0] + self.window - now)) if len(hits) >= self.limit else None

    def _forget_idle(self, now: float) -> None:
        for key in [k for k, hits in self._hits.items() if not hits or hits[-1] <= now - self.window]:
            del self._hits[key]
        if len(self._hits) >= self.max_keys:  # still full of active keys: the oldest go
            for key in list(self._hits)[: len(self._hits) // 2]:
                del self._hits[key]


__all__ = ["SlidingWindow"]
