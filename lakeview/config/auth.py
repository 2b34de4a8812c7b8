"""The ``[auth]`` section of ``lakeview.toml``: how the catalog authenticates clients.

```toml
[auth]
mode = "oauth2"                 # or "none" (the default; loopback only)
token_ttl = 3600                # seconds a bearer token lives
signing_key_file = "secrets/catalog.key"   # shared by every catalog process; default: random per process
retired_signing_key_files = ["secrets/catalog-2026-10.key"]  # rotation: tokens they signed stay valid until exp

[auth.oidc]                     # optional: also accept an identity provider's JWTs
issuer = "https://idp.example.com/"          # must equal the tokens' iss
jwks_url = "https://idp.example.com/jwks"    # or jwks_file = "secrets/idp-jwks.json"
audience = "lakeview"                         # optional: required aud
privileges = { "svc-etl" = { analytics = "write" } }   # token subject → namespace → privilege

[auth.clients.spark]
secret_hash = "scrypt$16384$8$1$<salt hex>$<hash hex>"   # catalog_api.auth.authenticator.hash_secret("...")
privileges = { analytics = "write", "*" = "read" }        # namespace (levels joined by "."; a dot inside a
                                                          # level written %2E, a percent %25) or "*" → read|write|admin
```
"""

from __future__ import annotations

import os
import secrets
from enum import Enum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


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
            "`python -c \"from catalog_api.auth.authenticator import hash_secret; print(hash_secret('SECRET'))\"`"
        )
    return stored


class AuthMode(str, Enum):
    NONE = "none"
    OAUTH2 = "oauth2"


class AuthClientConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    secret_hash: str = Field(
        description=(
            'the client secret as `catalog_api.auth.authenticator.hash_secret("...")` output (scrypt; pbkdf2_sha256 accepted), '
            "never the secret itself"
        ),
    )
    privileges: dict[str, str] = Field(
        default_factory=dict,
        description=(
            'e.g. `{ "sales" = "write", "*" = "read" }`: a namespace (its children inherit) or `*` → `read`, `write` '
            '(tables, views, commits) or `admin` (namespaces); levels are joined by `.`, so `"a.b"` is `a` → `b`; '
            'a dot inside one level is written `%2E` (`"new%2Edb"` is the one level `new.db`), a percent sign `%25`'
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


def _check_privileges(value: dict[str, str]) -> dict[str, str]:
    for namespace, privilege in value.items():
        if privilege.lower() not in ("read", "write", "admin"):
            raise ValueError(f"privilege {privilege!r} for {namespace!r} is not valid; use read, write or admin")
    return value


class OidcConfig(BaseModel):
    """An external OIDC issuer whose signed JWTs the catalog accepts (keys from its JWKS)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    issuer: str = Field(description="the issuer's identifier; a token's iss claim must equal it")
    jwks_file: str | None = Field(None, description="file with the issuer's JWKS (JSON), relative to the project")
    jwks_url: str | None = Field(None, description="URL of the issuer's JWKS, fetched and cached for 5 minutes")
    audience: str | None = Field(None, description="required aud claim; default: aud is not checked")
    subject_claim: str = Field("sub", description="the claim naming the caller, looked up in privileges")
    privileges: dict[str, dict[str, str]] = Field(
        default_factory=dict, description="subject → namespace or '*' → read, write or admin"
    )

    @field_validator("privileges")
    @classmethod
    def _privileges(cls, value: dict[str, dict[str, str]]) -> dict[str, dict[str, str]]:
        for grants in value.values():
            _check_privileges(grants)
        return value

    @model_validator(mode="after")
    def _one_jwks(self) -> OidcConfig:
        if (self.jwks_file is None) == (self.jwks_url is None):
            raise ValueError("set exactly one of jwks_file and jwks_url")
        return self


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
    retired_signing_key_files: list[str] = Field(
        default_factory=list, description="keys rotated out: tokens they signed are accepted until they expire"
    )
    oidc: OidcConfig | None = Field(None, description="an external identity provider whose tokens are accepted")
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
