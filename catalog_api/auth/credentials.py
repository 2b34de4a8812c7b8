"""Credential vending for ``s3://`` warehouses: short-lived S3 credentials limited to one table.

The catalog holds the warehouse's own keys; a client asking ``loadTable`` with
``X-Iceberg-Access-Delegation: vended-credentials`` (or ``GET …/credentials``) gets credentials
from the object store's STS ``AssumeRole`` with an inline session policy: objects under the
table's location prefix only, read-only (Get/List) unless the caller holds write on the
namespace, expiring after ``ttl`` seconds. SeaweedFS (4.48) implements ``AssumeRole`` with a
session policy on its S3 port; AWS STS works the same way when ``role_arn`` names a role.

Enabled by the store property ``lakeview.vended-credentials-ttl`` (seconds; set by
``[lake.s3] vended_credentials_ttl``). Errors: ``CatalogUnavailableError`` when STS refuses.
"""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

from lakeview import errors

TTL_PROPERTY = "lakeview.vended-credentials-ttl"
ROLE_PROPERTY = "lakeview.vended-credentials-role-arn"
READ_ACTIONS = ["s3:GetObject", "s3:GetObjectVersion"]
WRITE_ACTIONS = ["s3:PutObject", "s3:DeleteObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts"]
DELEGATION_HEADER = "x-iceberg-access-delegation"


def split_location(location: str) -> tuple[str, str]:
    """``s3://bucket/a/b`` → (``bucket``, ``a/b``). Raises BadRequestError for anything else."""
    scheme, _, rest = location.partition("://")
    bucket, _, key = rest.partition("/")
    if scheme not in ("s3", "s3a") or not bucket or not key.strip("/"):
        raise errors.BadRequestError(f"cannot vend credentials for {location!r}: not an s3://bucket/prefix location")
    return bucket, key.strip("/")


def session_policy(location: str, write: bool) -> dict[str, Any]:
    """An IAM policy allowing reads (and writes) of objects under ``location`` and listing that prefix only."""
    bucket, prefix = split_location(location)
    actions = READ_ACTIONS + (WRITE_ACTIONS if write else [])
    return {
        "Version": "2012-10-17",
        "Statement": [
            {"Effect": "Allow", "Action": actions, "Resource": [f"arn:aws:s3:::{bucket}/{prefix}/*"]},
            {
                "Effect": "Allow",
                "Action": ["s3:ListBucket"],
                "Resource": [f"arn:aws:s3:::{bucket}"],
                "Condition": {"StringLike": {"s3:prefix": [f"{prefix}/*", prefix]}},
            },
            {"Effect": "Allow", "Action": ["s3:GetBucketLocation"], "Resource": [f"arn:aws:s3:::{bucket}"]},
        ],
    }


@dataclass
class CredentialVendor:
    """Vends table-scoped S3 credentials through STS ``AssumeRole`` with a session policy."""

    properties: dict[str, str]
    ttl: int = 900
    role_arn: str = ""  # empty: SeaweedFS's "assume a session for yourself"; AWS needs a role
    _cache: dict[tuple[str, bool], tuple[float, dict[str, Any]]] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @classmethod
    def from_properties(cls, properties: dict[str, str]) -> CredentialVendor | None:
        """The vendor a store's properties configure, or None (vending off)."""
        ttl = properties.get(TTL_PROPERTY)
        if not ttl:
            return None
        return cls(dict(properties), int(ttl), properties.get(ROLE_PROPERTY, ""))

    def vend(self, location: str, write: bool) -> dict[str, Any]:
        """A StorageCredential (``prefix`` + ``config``) for ``location``, reused while half its life is left."""
        key = (location.rstrip("/"), write)
        now = time.time()
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None and cached[0] - now > self.ttl / 2:
                return cached[1]
        credential = self._assume(key[0], write)
        with self._lock:
            self._cache[key] = (credential["expires_at"], credential["body"])
            if len(self._cache) > 4096:  # drop expired entries now and then
                self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        return credential["body"]

    def _assume(self, location: str, write: bool) -> dict[str, Any]:
        import boto3  # lazy: boto3 loads only for Glue or S3
        from botocore.config import Config  # lazy: botocore loads only for Glue or S3
        from botocore.exceptions import BotoCoreError, ClientError  # lazy: botocore loads only for Glue or S3

        p = self.properties
        sts = boto3.client(
            "sts",
            endpoint_url=p.get("s3.endpoint"),
            region_name=p.get("s3.region", "us-east-1"),
            aws_access_key_id=p.get("s3.access-key-id"),
            aws_secret_access_key=p.get("s3.secret-access-key"),
            aws_session_token=p.get("s3.session-token"),
            config=Config(parameter_validation=False, retries={"max_attempts": 2}),  # RoleArn may be empty
        )
        try:
            answer = sts.assume_role(
                RoleArn=self.role_arn,
                RoleSessionName=f"lakeview-{int(time.time())}",
                Policy=json.dumps(session_policy(location, write)),
                DurationSeconds=self.ttl,
            )
        except (BotoCoreError, ClientError) as exc:
            raise errors.CatalogUnavailableError(f"the object store refused to vend credentials: {exc}") from None
        creds = answer["Credentials"]
        expires_at = creds["Expiration"].timestamp()
        config = {
            "s3.access-key-id": creds["AccessKeyId"],
            "s3.secret-access-key": creds["SecretAccessKey"],
            "s3.session-token": creds["SessionToken"],
            "s3.session-token-expires-at-ms": str(int(expires_at * 1000)),
            "s3.region": p.get("s3.region", "us-east-1"),
            "client.region": p.get("s3.region", "us-east-1"),
        }
        if p.get("s3.endpoint"):
            config["s3.endpoint"] = p["s3.endpoint"]
        if p.get("s3.force-virtual-addressing", "false") == "false":
            config["s3.path-style-access"] = "true"
            config["s3.force-virtual-addressing"] = "false"
        return {"expires_at": expires_at, "body": {"prefix": location, "config": config}}


def wants_vending(headers: Any) -> bool:
    """True when the client asked for vended credentials (the delegation header lists several modes)."""
    modes = headers.get(DELEGATION_HEADER, "")
    return "vended-credentials" in [m.strip() for m in modes.split(",")]


def with_credentials(body: bytes, credential: dict[str, Any]) -> bytes:
    """A LoadTableResult body with the credential in ``config`` and ``storage-credentials``."""
    result = json.loads(body)
    result["config"] = {**result.get("config", {}), **credential["config"]}
    result["storage-credentials"] = [credential]
    return json.dumps(result, separators=(",", ":")).encode()
