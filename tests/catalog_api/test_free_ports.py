"""Servers in tests, benchmarks and the demo get ports no other process is handed meanwhile, and a
server whose port was taken between its choice and its bind starts on a new one (concurrent chaos
soaks raced for ports: "port in use", then a 300 s wait)."""

from __future__ import annotations

import socket
from pathlib import Path

import psycopg2
import pytest

from catalog_api.server import _ephemeral_range, free_ports
from catalog_api.store.local_postgres import PG_BIN, LocalPostgres
from tests.s3_server import SeaweedS3


def test_free_ports_are_distinct_bindable_and_outside_the_range_outgoing_connections_use() -> None:
    low, high = _ephemeral_range()
    ports = free_ports(8, companion=10000)
    assert len(set(ports)) == 8
    held = []
    try:
        for port in ports + [p + 10000 for p in ports]:
            assert not low <= port <= high, port
            sock = socket.socket()
            sock.bind(("127.0.0.1", port))  # free: a server can bind it
            sock.listen()
            held.append(sock)
    finally:
        for sock in held:
            sock.close()


def test_seaweedfs_whose_port_was_taken_starts_on_new_ports(tmp_path: Path) -> None:
    s3 = SeaweedS3(tmp_path / "weed")
    taken = s3.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with s3:
            assert s3.port != taken
            s3.create_bucket_when_ready("after-a-port-race")
            assert "after-a-port-race" in [b["Name"] for b in s3.client().list_buckets()["Buckets"]]


@pytest.mark.skipif(not (PG_BIN / "initdb").exists(), reason=f"PostgreSQL 15 is not installed in {PG_BIN}")
def test_postgresql_whose_port_was_taken_starts_on_a_new_port() -> None:
    pg = LocalPostgres()
    taken = pg.port
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", taken))
        squatter.listen()
        with pg:
            assert pg.port != taken
            with psycopg2.connect(host="127.0.0.1", port=pg.port, user="postgres", dbname="postgres") as conn:
                assert conn.cursor().execute("SELECT 1") is None
