"""Benchmark the Iceberg REST catalog; prints one table.

    .venv/bin/python bench/catalog.py --workers 2 [--duration 5] [--no-seaweed] [--no-postgres] [--commits-only]

Every load comes from ``wrk`` (Debian package: ``apt-get install -y wrk``), a C load generator whose own CPU is in
the table (``client CPU/s``), so the client is not the bottleneck:

- loadTable requests/s and p50/p99 latency at 1, 8 and 32 concurrent connections on a table with 50 snapshots;
- server-side commits/s at 1 and 4 clients on SQLite and on PostgreSQL 15 (durable: fsync on): raw HTTP commits
  (bench/catalog_commits.lua, one wrk connection per client, each to its own table of 50 snapshots; each commit
  adds a snapshot on top of the last and expires the oldest, one new metadata file each), so no client-side data
  writing is measured; the tables are checked afterwards to have advanced by the commits wrk counted;
- the same loadTable run against SeaweedFS's own Iceberg REST catalog (``weed mini -tableBucket=...``) for
  comparison (its requests are SigV4-signed once and replayed).

Each catalog runs in its own process tree: ``--workers`` uvicorn workers (uvloop + httptools) started by
``catalog_api.workers``, each on its own SO_REUSEPORT socket; ``per worker`` is how the kernel spread the
connections over them (sampled half way). ``CPU ms/req`` is the catalog's CPU per request plus, for PostgreSQL,
the database server's (its postmaster and backends): on a loaded machine it compares runs better than req/s.
Below the table: each target met or not in wall clock, and what the measured CPU per request (the client's
added) would serve on this machine's cores, and the ratio to SeaweedFS. The load average is printed at the start
and the end. About 3 minutes with SeaweedFS on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from catalog_api.server import free_port  # noqa: E402
from catalog_api.workers import sockets_per_process, wait_listening  # noqa: E402

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
    ],
}
SERVE = """
import os, sys
os.environ.update(LAKEVIEW_CATALOG_STORE=sys.argv[1], LAKEVIEW_WAREHOUSE=sys.argv[2])
from catalog_api.asgi import create_app
from catalog_api.workers import serve
create_app().router  # fail here, not in a worker, when the store is unreachable
sys.exit(serve("127.0.0.1", int(sys.argv[3]), int(sys.argv[4]), log_level="warning", lifespan="off"))
"""


def cpu_seconds(pid: int | None) -> float:
    """CPU seconds of a process and its children that are still running (uvicorn workers, PostgreSQL backends),
    plus what its children that ended used (a backend that closed its connection)."""
    if pid is None:
        return 0.0
    total = 0.0
    pids = [pid, *(int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split())]
    for one in pids:
        try:
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
        except FileNotFoundError:
            continue
        total += sum(int(f) for f in fields[11 : 15 if one == pid else 13]) / os.sysconf("SC_CLK_TCK")
    return total


def uptime_load() -> str:
    """The load average over 1, 5 and 15 minutes, as ``uptime`` prints it."""
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def postmaster_pid(data_dir: Path) -> int:
    return int((data_dir / "postmaster.pid").read_text().split()[0])


@contextmanager
def catalog_process(store_url: str, warehouse: Path, workers: int = 1) -> Iterator[tuple[str, int]]:
    port = free_port("127.0.0.1")
    process = subprocess.Popen(
        [sys.executable, "-c", SERVE, store_url, str(warehouse), str(port), str(workers)], cwd=ROOT
    )
    base = f"http://127.0.0.1:{port}/iceberg"
    for _ in range(200):
        try:
            if httpx.get(f"{base}/v1/config", timeout=1).status_code == 200:
                break
        except httpx.HTTPError:
            time.sleep(0.05)
    with contextlib.suppress(OSError):  # without ss (iproute2) the bench cannot tell; the per-worker column is empty
        wait_listening(port, workers)
    try:
        yield base, process.pid
    finally:
        process.terminate()
        process.wait(timeout=10)


def snapshot_commit(metadata: dict[str, Any], snapshot_id: int) -> dict[str, Any]:
    """A commit adding snapshot ``snapshot_id`` on top of the table's current one and pointing ``main`` at it."""
    parent = metadata.get("current-snapshot-id")
    parent = None if parent in (None, -1) else parent
    return commit_body(metadata["location"], snapshot_id, parent, metadata["last-sequence-number"] + 1,
                       int(time.time() * 1000), str(1000 * snapshot_id))  # fmt: skip


def commit_body(
    location: str, snapshot_id: Any, parent: Any, sequence: Any, timestamp: Any, total: str, expire: Any = None
) -> dict[str, Any]:
    """The bench's commit: assert ``main`` is at ``parent``, add snapshot ``snapshot_id``, point ``main`` at it,
    and (with ``expire``) remove that snapshot. Values may be wrk template placeholders (commit_template)."""
    body = {
        "requirements": [{"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent}],
        "updates": [
            {"action": "add-snapshot", "snapshot": {
                "snapshot-id": snapshot_id, **({"parent-snapshot-id": parent} if parent else {}),
                "sequence-number": sequence, "timestamp-ms": timestamp,
                "manifest-list": f"{location}/metadata/snap-{snapshot_id}-1-manifest-list.avro",
                "summary": {"operation": "append", "added-data-files": "1", "added-records": "1000",
                            "total-records": total, "lakeview.epoch": str(snapshot_id)},
                "schema-id": 0}},
            {"action": "set-snapshot-ref", "ref-name": "main", "type": "branch", "snapshot-id": snapshot_id},
        ],
    }  # fmt: skip
    if expire is not None:
        body["updates"].append({"action": "remove-snapshots", "snapshot-ids": [expire]})
    return body


def commit_template(location: str) -> str:
    """The commit body as JSON with @NAME@ placeholders that bench/catalog_commits.lua fills per commit: each adds a
    snapshot on top of the last and expires the oldest, so the metadata stays the size of a maintained view's."""
    body = commit_body(location, "@ID@", "@PARENT@", "@SEQUENCE@", "@TIMESTAMP@", "@TOTAL@", expire="@FIRST@")
    body["updates"][0]["snapshot"]["summary"]["lakeview.epoch"] = "@EPOCH@"  # a string: "@ID@" is unquoted below
    text = json.dumps(body, separators=(",", ":"))
    for number in ("ID", "PARENT", "SEQUENCE", "TIMESTAMP", "FIRST"):
        text = text.replace(f'"@{number}@"', f"@{number}@")
    return text


def table_with_snapshots(base: str, namespace: str, name: str, snapshots: int) -> str:
    api = f"{base}/v1/lakeview"
    httpx.post(f"{api}/namespaces", json={"namespace": [namespace]})
    metadata = httpx.post(f"{api}/namespaces/{namespace}/tables", json={"name": name, "schema": SCHEMA}).json()[
        "metadata"
    ]
    url = f"{api}/namespaces/{namespace}/tables/{name}"
    for i in range(1, snapshots + 1):
        response = httpx.post(url, json=snapshot_commit(metadata, i))
        response.raise_for_status()
        metadata = response.json()["metadata"]
    return url


def wrk(
    url: str,
    connections: int,
    duration: float,
    headers: dict[str, str] | None = None,
    script: Path | None = None,
    script_args: Sequence[str] = (),
) -> dict[str, float]:
    """Requests/s and latency percentiles (ms) from wrk, plus wrk's own CPU seconds. With ``script`` (a commit
    run), one wrk thread per connection, so each connection's script state is its own."""
    threads = connections if script else min(connections, 2)
    args = ["wrk", f"-t{threads}", f"-c{connections}", f"-d{duration}s", "--latency"]
    for key, value in (headers or {}).items():
        args += ["-H", f"{key}: {value}"]
    if script:
        args += ["-s", str(script)]
    args += [url, *(["--", *script_args] if script else [])]
    split: dict[int, int] = {}  # connections per serving process, half way through

    def sample() -> None:
        with contextlib.suppress(OSError, subprocess.CalledProcessError):  # no ss (iproute2): no split shown
            split.update(sockets_per_process(urlsplit(url).port or 80))

    sampler = threading.Timer(duration / 2, sample)
    sampler.start()
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    output = subprocess.run(args, capture_output=True, text=True, check=True).stdout
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    sampler.join()
    failed = re.search(r"Non-2xx or 3xx responses: (\d+)", output)
    if failed:
        raise RuntimeError(f"{failed.group(1)} failed requests to {url}:\n{output}")
    broken = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", output)
    if broken and any(int(n) for n in broken.groups()[:3]):  # a timeout (> 2 s) is only late: its answer counts
        raise RuntimeError(f"connections to {url} failed:\n{output}")

    def latency(pct: str) -> float:
        value, unit = re.search(rf"\s{pct}%\s+([\d.]+)(us|ms|s)", output).groups()  # type: ignore[union-attr]
        return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]

    return {
        "requests": float(re.search(r"(\d+) requests in", output).group(1)),  # type: ignore[union-attr]
        "rps": float(re.search(r"Requests/sec:\s+([\d.]+)", output).group(1)),  # type: ignore[union-attr]
        "p50": latency("50"),
        "p99": latency("99"),
        "client_cpu": (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime),
        "split": "/".join(str(n) for n in sorted(split.values(), reverse=True)),
    }


def cost_cells(requests: float, seconds: float, server_cpu: float, db_cpu: float) -> list[str]:
    """catalog CPU/s, database CPU/s, CPU ms per request (both), requests per CPU-second (both)."""
    total = server_cpu + db_cpu
    per_request = f"{total * 1000 / requests:.3f}" if requests and total > 0 else ""
    per_cpu = f"{requests / total:,.0f}" if total > 0 else ""
    return [f"{server_cpu / seconds:.2f}", f"{db_cpu / seconds:.2f}" if db_cpu else "", per_request, per_cpu]


def load_runs(
    label: str,
    url: str,
    pid: int | None,
    duration: int,
    headers: dict[str, str] | None = None,
    db_pid: int | None = None,
) -> list[list[str]]:
    rows = []
    for connections in (1, 8, 32):
        server_before, db_before = cpu_seconds(pid), cpu_seconds(db_pid)
        result = wrk(url, connections, duration, headers)
        server_cpu, db_cpu = cpu_seconds(pid) - server_before, cpu_seconds(db_pid) - db_before
        rows.append([label, "loadTable", str(connections), result["split"], f"{result['rps']:,.0f}", f"{result['p50']:.2f}",
                     f"{result['p99']:.2f}", f"{result['client_cpu'] / duration:.2f}",
                     *cost_cells(result["rps"] * duration, duration, server_cpu, db_cpu)])  # fmt: skip
    return rows


def commit_rate(base: str, pid: int, label: str, clients: int, duration: int, db_pid: int | None = None) -> list[str]:
    """Commits/s with ``clients`` concurrent committers (wrk connections), each to its own table of 50 snapshots
    (no conflicts). Each commit adds a snapshot and expires the oldest (bench/catalog_commits.lua)."""
    script_args: list[str] = []
    tables: list[tuple[str, int]] = []  # url, last snapshot id before the run
    for i in range(clients):
        url = table_with_snapshots(base, f"commits_{label.replace('/', '_')}_{clients}", f"t{i}", 50)
        metadata = httpx.get(url).json()["metadata"]
        ids = sorted(s["snapshot-id"] for s in metadata["snapshots"])
        assert ids == list(range(ids[0], ids[-1] + 1)), "the Lua script expires the oldest of consecutive ids"
        tables.append((url, ids[-1]))
        path = url.split("://", 1)[1].split("/", 1)[1]
        script_args += [f"/{path}", commit_template(metadata["location"]), str(ids[0]), str(ids[-1]),
                        str(metadata["last-sequence-number"])]  # fmt: skip
    server_before, db_before = cpu_seconds(pid), cpu_seconds(db_pid)
    started = time.perf_counter()
    result = wrk(base, clients, duration, script=COMMITS_LUA, script_args=script_args)
    elapsed = time.perf_counter() - started
    server_cpu, db_cpu = cpu_seconds(pid) - server_before, cpu_seconds(db_pid) - db_before
    # every answered commit is in its table (a commit in flight at the end may have landed too)
    committed = sum(httpx.get(url).json()["metadata"]["current-snapshot-id"] - last for url, last in tables)
    if not result["requests"] <= committed <= result["requests"] + clients:
        raise RuntimeError(f"wrk counted {result['requests']:.0f} commits, the tables advanced by {committed}")
    return [label, "commit", str(clients), result["split"], f"{result['rps']:,.0f}", f"{result['p50']:.2f}", f"{result['p99']:.2f}",
            f"{result['client_cpu'] / elapsed:.2f}",
            *cost_cells(result["requests"], elapsed, server_cpu, db_cpu)]  # fmt: skip


def seaweed_rows(duration: int, work: Path) -> list[list[str]]:
    """The same loadTable run against SeaweedFS's Iceberg REST catalog (SigV4, signed once)."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials
    from pyiceberg.catalog.rest import RestCatalog

    sys.path.insert(0, str(ROOT))
    from tests.s3_server import SeaweedS3

    weed = SeaweedS3(work / "seaweed")
    iceberg_port = int(next(a for a in weed.args if a.startswith("-s3.port.iceberg=")).split("=")[1])
    weed.args.append("-tableBucket=bench")
    os.environ.update(weed.env)
    with weed:
        base = f"http://127.0.0.1:{iceberg_port}"
        for _ in range(100):
            try:
                httpx.get(f"{base}/v1/config", timeout=1)
                break
            except httpx.HTTPError:
                time.sleep(0.3)
        catalog = RestCatalog(
            "seaweed", uri=base, warehouse="s3://bench",
            **{"rest.sigv4-enabled": "true", "rest.signing-name": "s3tables", "rest.signing-region": "us-east-1",
               "s3.endpoint": weed.endpoint, "s3.access-key-id": weed.env["AWS_ACCESS_KEY_ID"],
               "s3.secret-access-key": weed.env["AWS_SECRET_ACCESS_KEY"], "s3.region": "us-east-1"},
        )  # fmt: skip
        import pyarrow as pa

        for _ in range(100):  # weed creates the table bucket a little after it starts serving
            try:
                catalog.create_namespace("bench")
                break
            except Exception:
                time.sleep(0.5)
        table = catalog.create_table("bench.t", pa.schema([("id", pa.int64()), ("name", pa.string())]))
        for i in range(50):
            table.append(pa.table({"id": [i], "name": [str(i)]}))
        config = httpx.get(f"{base}/v1/config", params={"warehouse": "s3://bench"}).json()
        prefix = (config.get("overrides") or {}).get("prefix")
        url = f"{base}/v1/{prefix + '/' if prefix else ''}namespaces/bench/tables/t"
        request = AWSRequest(method="GET", url=url)
        SigV4Auth(
            Credentials(weed.env["AWS_ACCESS_KEY_ID"], weed.env["AWS_SECRET_ACCESS_KEY"]), "s3tables", "us-east-1"
        ).add_auth(request)
        headers = dict(request.headers.items())
        assert httpx.get(url, headers=headers).status_code == 200, httpx.get(url, headers=headers).text
        return load_runs("seaweedfs", url, weed.process.pid if weed.process else None, duration, headers)


COMMITS_LUA = Path(__file__).with_name("catalog_commits.lua")
HEADER = ["catalog", "operation", "clients", "per worker", "req/s", "p50 ms", "p99 ms", "client CPU/s",
          "catalog CPU/s", "db CPU/s", "CPU ms/req", "req per CPU-s"]  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=int, default=5, help="seconds per wrk/commit run")
    parser.add_argument("--no-seaweed", action="store_true")
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="worker processes per catalog (the issue: 2)")
    parser.add_argument("--commits-only", action="store_true", help="only the commit runs (no loadTable, no SeaweedFS)")
    args = parser.parse_args()
    if not shutil.which("wrk"):  # loadTable and commits alike
        sys.exit("wrk is missing (the load generator): apt-get install -y wrk")
    work = Path(tempfile.mkdtemp(prefix="lakeview-bench-"))
    rows: list[list[str]] = []
    started, load_before = time.strftime("%H:%M:%S UTC", time.gmtime()), uptime_load()
    try:
        with catalog_process(f"sqlite:///{work / 'catalog.db'}", work / "warehouse", args.workers) as (base, pid):
            url = table_with_snapshots(base, "bench", "t", 50)
            assert len(httpx.get(url).json()["metadata"]["snapshots"]) == 50
            if not args.commits_only:
                rows += load_runs("lakeview/sqlite", url, pid, args.duration)
            for clients in (1, 4):
                rows.append(commit_rate(base, pid, "lakeview/sqlite", clients, args.duration))
        if not args.no_postgres:
            from catalog_api.store.local_postgres import LocalPostgres

            with (
                LocalPostgres(durable=True) as pg,
                catalog_process(pg.url, work / "pg-warehouse", args.workers) as (base, pid),
            ):
                url = table_with_snapshots(base, "bench", "t", 50)
                db = postmaster_pid(pg.data)
                if not args.commits_only:
                    rows += load_runs("lakeview/postgresql", url, pid, args.duration, db_pid=db)
                for clients in (1, 4):
                    rows.append(commit_rate(base, pid, "lakeview/postgresql", clients, args.duration, db_pid=db))
        if not args.no_seaweed and not args.commits_only:
            try:
                rows += seaweed_rows(args.duration, work)
            except Exception as exc:
                print(f"seaweedfs run failed: {type(exc).__name__}: {exc}", file=sys.stderr)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    header = HEADER
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    print(
        f"machine: {os.cpu_count()} cores; load average (1/5/15 min) {load_before} at {started}, {uptime_load()} at "
        f"{time.strftime('%H:%M:%S UTC', time.gmtime())}; {args.duration}s per run; {args.workers} worker(s) per catalog"
    )
    # per CPU: on a loaded machine the server gets a fraction of a core, so req/s alone misleads
    for row in [header, ["-" * w for w in widths], *rows]:
        print("  ".join(cell.rjust(w) if i >= 2 else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths))))
    for line in target_lines(rows, os.cpu_count() or 1, args.workers):
        print(line)


def target_lines(rows: list[list[str]], cores: int, workers: int) -> list[str]:
    """The issue's targets, met or not in wall clock, and as CPU per request on this machine's cores (what each
    measured cost would serve with the whole machine for the server, the load generator's CPU included)."""
    at = {name: HEADER.index(name) for name in ("per worker", "req/s", "p99 ms", "client CPU/s", "CPU ms/req")}
    targets = {"loadTable": ("32", 8000.0), "commit": ("4", 1000.0)}
    seaweed = next((r for r in rows if r[0] == "seaweedfs" and r[2] == "32" and r[at["CPU ms/req"]]), None)
    lines = [f"targets on {cores} cores:"]
    for row in rows:
        if row[0] == "seaweedfs" or targets[row[1]][0] != row[2] or not row[at["CPU ms/req"]]:
            continue
        cost, target = float(row[at["CPU ms/req"]]), targets[row[1]][1]
        rate = float(row[at["req/s"]].replace(",", ""))
        client = float(row[at["client CPU/s"]]) * 1000 / rate if rate and row[at["client CPU/s"]] else 0.0
        met = rate >= target and (row[1] != "loadTable" or float(row[at["p99 ms"]]) <= 10.0)
        line = (
            f"  {row[0]} {row[1]} at {row[2]} clients: {'met' if met else 'NOT met'} in wall clock "
            f"({rate:,.0f}/s{', p99 ' + row[at['p99 ms']] + ' ms' if row[1] == 'loadTable' else ''}); "
            f"{cost:.3f} ms CPU per request + {client:.3f} ms the client's -> {cores * 1000 / (cost + client):,.0f}/s "
            f"on {cores} cores; {target:,.0f}/s needs <= {cores * 1000 / target:.3f} ms"
        )
        if seaweed is not None and row[1] == "loadTable":
            theirs = float(seaweed[at["CPU ms/req"]])
            line += f"; {theirs / cost:.1f}x less CPU per request than SeaweedFS ({theirs:.3f} ms)"
        if workers > 1 and "/" not in row[at["per worker"]]:
            line += "; every client was on one worker (the kernel hashes connections to workers): run again"
        lines.append(line)
    return lines


if __name__ == "__main__":
    main()
