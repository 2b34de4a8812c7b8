"""How much a flood of wrong client secrets slows everyone else; prints one table.

    .venv/bin/python bench/token_flood.py [--requests 300] [--flooders 4]

A catalog with ``[auth]`` (one client) serves a table; loadTable latency (p50/p99 of sequential
requests with a valid token) is measured alone, then while ``--flooders`` threads post wrong
secrets to the token endpoint as fast as they can (scrypt per attempt, until the rate limit
answers 429). Issue #16 measured p50 0.6 ms → 160 ms with hashing on the event loop.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import tempfile
import threading
import time
from pathlib import Path

import httpx

from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore

SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


def latencies(client: httpx.Client, url: str, count: int) -> list[float]:
    result = []
    for _ in range(count):
        start = time.perf_counter()
        assert client.get(url).status_code == 200
        result.append((time.perf_counter() - start) * 1000)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--flooders", type=int, default=4)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp())
    store = CatalogStore(f"sqlite:///{root / 'c.db'}", root / "wh", "lakeview")
    clients = {"app": Client(hash_secret("app-secret"), {"*": Privilege.ADMIN})}
    rows = []
    for limited in (False, True):
        per_minute = 5 if limited else 10**9
        authenticator = Authenticator(clients, token_attempts_per_minute=10**9, token_failures_per_minute=per_minute)
        with CatalogServer(store, authenticator=authenticator) as server:
            form = {"grant_type": "client_credentials", "client_id": "app", "client_secret": "app-secret"}
            token = httpx.post(f"{server.uri}/v1/oauth/tokens", data=form).json()["access_token"]
            api = httpx.Client(base_url=f"{server.uri}/v1/lakeview", headers={"Authorization": f"Bearer {token}"})
            api.post("/namespaces", json={"namespace": ["b"]})
            api.post("/namespaces/b/tables", json={"name": "t", "schema": SCHEMA})
            quiet = latencies(api, "/namespaces/b/tables/t", args.requests)
            stop, attempts = threading.Event(), [0]

            def flood(stop: threading.Event = stop, attempts: list[int] = attempts, uri: str = server.uri) -> None:
                with httpx.Client() as c:
                    while not stop.is_set():
                        bad = {"grant_type": "client_credentials", "client_id": "app", "client_secret": "wrong"}
                        c.post(f"{uri}/v1/oauth/tokens", data=bad)
                        attempts[0] += 1

            threads = [threading.Thread(target=flood) for _ in range(args.flooders)]
            for thread in threads:
                thread.start()
            time.sleep(1)
            loud = latencies(api, "/namespaces/b/tables/t", args.requests)
            stop.set()
            for thread in threads:
                thread.join()
            label = "failures limited 5/min" if limited else "no rate limit"
            for name, values in (("alone", quiet), (f"{args.flooders} flooders, {label}", loud)):
                p99 = statistics.quantiles(values, n=100)[98]
                rows.append((name, statistics.median(values), p99))
            rows.append((f"  (wrong-secret attempts during the run: {attempts[0]})", float("nan"), float("nan")))
    print(subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip())
    print(f"{'loadTable (sequential, valid token)':55} {'p50 ms':>8} {'p99 ms':>8}")
    for name, p50, p99 in rows:
        print(f"{name:55} {p50:8.2f} {p99:8.2f}")
    store.close()


if __name__ == "__main__":
    main()
