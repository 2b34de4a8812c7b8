"""The ``[auth]`` section of ``lakeview.toml``: how the catalog authenticates clients.

```toml
[auth]
mode = "oauth2"                 # or "none" (the default; loopback only)
token_ttl = 3600                # seconds a bearer token lives
signing_key_file = "secrets/catalog.key"   # shared by every catalog process; default: random per process

[auth.clients.spark]
secret_hash = "scrypt$16384$8$1$<salt hex>$<hash hex>"   # catalog_api.auth.hash_secret("...")
privileges = { analytics = "write", "*" = "read" }        # namespace (dotted) or "*" → read|write|admin
```
"""

from __future__ import annotations

import os
import secrets
from enum import Enum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator


def check_secret_hash(stored: str) -> str:
    """Validate the format of a stored secret hash. Raises ValueError naming how to make one."""
    parts = stored.split("$")
    ok = (parts[0] == "scrypt" and len(parts) == 6) or (parts[0] == "pbkdf2_sha256" and len(parts) == 4)
    try:
        if ok:
            bytes.fromhex(parts[-1]), bytes.fromhex(parts[-2])
    except ValueError:
        ok = False
    if not ok:
        raise ValueError(
            "not a secret hash; store the output of "
            "`python -c \"from catalog_api.auth import hash_secret; print(hash_secret('SECRET'))\"`"
        )
    return stored


class AuthMode(str, Enum):
    NONE = "none"
    OAUTH2 = "oauth2"


class AuthClientConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    secret_hash: str = Field(
        description=(
            'the client secret as `catalog_api.auth.hash_secret("...")` output (scrypt; pbkdf2_sha256 accepted), '
            "never the secret itself"
        ),
    )
    privileges: dict[str, str] = Field(
        default_factory=dict,
        description=(
            'e.g. `{ "sales" = "write", "*" = "read" }`: a namespace (its children inherit) or `*` → `read`, `write` '
            "(tables, views, commits) or `admin` (namespaces)"
        ),
    )

    @field_validator("secret_hash")
    @classmethod
    def _hash(cls, value: str) -> str:
        return check_secret_hash(value)

    @field_validator("privileges")
    @classmethod
    def _privileges(cls, value: dict[str, str]) -> dict[str, str]:
        for namespace, privilege in value.items():
            if privilege.lower() not in ("read", "write", "admin"):
                raise ValueError(f"privilege {privilege!r} for {namespace!r} is not valid; use read, write or admin")
        return value


class AuthConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    mode: AuthMode = Field(
        AuthMode.NONE,
        description=(
            "`none` (loopback only) or `oauth2`: clients get short-lived bearer tokens from `POST "
            "/iceberg/v1/oauth/tokens` (client_credentials, HTTP Basic or form)"
        ),
    )
    token_ttl: int = Field(3600, ge=60, le=86400, description="bearer token lifetime in seconds")
    signing_key_file: str | None = Field(
        None,
        description=(
            "file with the HMAC key every catalog process shares (created 0600 when missing; without it each process "
            "has its own key)"
        ),
    )
    clients: dict[str, AuthClientConfig] = Field(default_factory=dict, description="the OAuth2 clients, by client id")

    @property
    def enabled(self) -> bool:
        return self.mode is AuthMode.OAUTH2


def load_signing_key(path: Path) -> bytes:
    """The HMAC key shared by every catalog process of a project; created (mode 0600) when missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(secrets.token_hex(32).encode())
    return path.read_bytes().strip()
