"""Config models for where view tables live (object storage) and how they are kept healthy
(retention, compaction, orphan removal). Used by ``lakeview.config.models``."""

from __future__ import annotations

import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from lakeview.config.cadence import Cadence, parse_cadence


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _duration(value: Any) -> Cadence | None:
    if value is None or isinstance(value, Cadence):
        return value
    parsed = parse_cadence(value)
    if parsed.is_manual:
        raise ValueError(f'{value!r}: use a duration like "30s", "1h" or "7d"')
    return parsed


class S3Config(_Strict):
    """``[lake.s3]``: how to reach an ``s3://bucket/prefix`` warehouse. Unset keys fall back to
    the usual AWS environment variables (AWS_ENDPOINT_URL, AWS_REGION, AWS_ACCESS_KEY_ID, ...)."""

    endpoint: str | None = Field(
        None,
        description=(
            "e.g. `http://127.0.0.1:8333` (S3-compatible stores); default: `AWS_ENDPOINT_URL_S3` or `AWS_ENDPOINT_URL`"
        ),
    )
    region: str | None = Field(None, description="default: `AWS_REGION`, `AWS_DEFAULT_REGION`, else `us-east-1`")
    access_key_id: str | None = Field(None, description="default: `AWS_ACCESS_KEY_ID`")
    secret_access_key: str | None = Field(None, description="default: `AWS_SECRET_ACCESS_KEY`")
    session_token: str | None = Field(None, description="default: `AWS_SESSION_TOKEN`")
    path_style: bool = Field(True, description="bucket in the path, not the host name (MinIO, SeaweedFS)")
    vended_credentials_ttl: int | None = Field(
        None,
        ge=900,
        le=43200,
        description="seconds that credentials vended to catalog clients live (STS AssumeRole); unset: no vending",
    )
    vended_credentials_role_arn: str | None = Field(
        None,
        description="role the catalog assumes to vend credentials (AWS); unset: the catalog's own identity (SeaweedFS)",
    )

    def resolved(self) -> dict[str, str | None]:
        """Endpoint, region and credentials with the AWS environment as fallback."""
        env = os.environ.get
        return {
            "endpoint": self.endpoint or env("AWS_ENDPOINT_URL_S3") or env("AWS_ENDPOINT_URL"),
            "region": self.region or env("AWS_REGION") or env("AWS_DEFAULT_REGION") or "us-east-1",
            "access_key_id": self.access_key_id or env("AWS_ACCESS_KEY_ID"),
            "secret_access_key": self.secret_access_key or env("AWS_SECRET_ACCESS_KEY"),
            "session_token": self.session_token or env("AWS_SESSION_TOKEN"),
        }

    def delta_options(self) -> dict[str, str]:
        """``storage_options`` for deltalake (delta-rs / object_store)."""
        r = self.resolved()
        options = {
            "AWS_REGION": r["region"],
            "AWS_ACCESS_KEY_ID": r["access_key_id"],
            "AWS_SECRET_ACCESS_KEY": r["secret_access_key"],
            "AWS_SESSION_TOKEN": r["session_token"],
            "AWS_ENDPOINT_URL": r["endpoint"],
            "AWS_VIRTUAL_HOSTED_STYLE_REQUEST": "false" if self.path_style else "true",
        }
        if r["endpoint"] and r["endpoint"].startswith("http://"):
            options["AWS_ALLOW_HTTP"] = "true"
        return {k: v for k, v in options.items() if v}

    def iceberg_properties(self) -> dict[str, str]:
        """FileIO properties for pyiceberg (pyarrow's S3 filesystem)."""
        r = self.resolved()
        props = {
            "py-io-impl": "pyiceberg.io.pyarrow.PyArrowFileIO",
            "s3.endpoint": r["endpoint"],
            "s3.region": r["region"],
            "s3.access-key-id": r["access_key_id"],
            "s3.secret-access-key": r["secret_access_key"],
            "s3.session-token": r["session_token"],
            "s3.force-virtual-addressing": "false" if self.path_style else "true",
            "lakeview.vended-credentials-ttl": str(self.vended_credentials_ttl)
            if self.vended_credentials_ttl
            else None,
            "lakeview.vended-credentials-role-arn": self.vended_credentials_role_arn,
        }
        return {k: v for k, v in props.items() if v}

    def duckdb_secret_sql(self) -> str:
        """The ``CREATE SECRET`` statement that lets DuckDB's httpfs read the warehouse."""
        r = self.resolved()
        endpoint = r["endpoint"] or ""

        def quoted(value: str | None) -> str:
            return "'" + (value or "").replace("'", "''") + "'"

        parts = ["TYPE s3", f"REGION {quoted(r['region'])}"]
        if r["access_key_id"]:
            parts += [f"KEY_ID {quoted(r['access_key_id'])}", f"SECRET {quoted(r['secret_access_key'])}"]
            if r["session_token"]:
                parts.append(f"SESSION_TOKEN {quoted(r['session_token'])}")
        if endpoint:
            parts += [
                f"ENDPOINT {quoted(endpoint.split('://', 1)[-1])}",
                f"USE_SSL {str(endpoint.startswith('https')).lower()}",
            ]
        if self.path_style:
            parts.append("URL_STYLE 'path'")
        return f"CREATE OR REPLACE SECRET lakeview_s3 ({', '.join(parts)})"


class RetentionConfig(_Strict):
    """``[views.NAME.retention]``: which snapshots stay readable (time travel).

    A snapshot is kept while it is one of the newest ``keep_snapshots`` OR younger than
    ``max_age``; older ones are expired and the files only they reference are deleted. The
    current snapshot is always kept. Neither set: every snapshot is kept.
    """

    keep_snapshots: int | None = Field(100, ge=1, description="keep at least the newest this many snapshots")
    max_age: Cadence | None = Field(None, description='also keep every snapshot younger than this, e.g. `"7d"`')

    @field_validator("max_age", mode="before")
    @classmethod
    def _age(cls, value: Any) -> Cadence | None:
        return _duration(value)


class MaintenanceConfig(_Strict):
    """``[views.NAME.maintenance]``: background compaction and orphan removal thresholds."""

    enabled: bool = Field(True, description="`false`: `lakeview up` runs no background pass for this view")
    interval: Cadence = Field(
        default_factory=lambda: parse_cadence("5m"), description="how often the background pass runs"
    )
    small_file_bytes: int = Field(8 * 1024 * 1024, ge=1, description="data files below this size count as small")
    compact_min_files: int = Field(10, ge=2, description="compact when at least this many small files exist")
    delete_files_max: int = Field(
        20,
        ge=1,
        description=(
            "keyed Iceberg views: the commit that would make this many position-delete files folds them all into "
            "rewritten data files instead (each keyed epoch adds one); a maintenance pass folds them at this many too"
        ),
    )
    orphan_min_age: Cadence = Field(
        default_factory=lambda: parse_cadence("1h"),
        description="unreferenced files younger than this are left alone (a commit may be writing them)",
    )

    @field_validator("interval", "orphan_min_age", mode="before")
    @classmethod
    def _durations(cls, value: Any) -> Cadence:
        parsed = _duration(value)
        if parsed is None:
            raise ValueError("a duration is required here")
        return parsed
