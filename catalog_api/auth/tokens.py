"""Bearer tokens as standard signed JWTs (PyJWT): issued by the catalog, or by an external OIDC issuer.

The catalog's own tokens are HS256 JWTs with ``sub``, ``scope``, ``iat``, ``exp``, ``jti`` and
``iss``; the header's ``kid`` names the key (a hash of it), so a catalog holding the current key
plus retired ones (rotation) still accepts tokens signed before the rotation until they expire.
A revoked ``jti`` is refused until the token would have expired anyway (kept in the catalog
store's database when one is attached, so every catalog process sees it within 2 seconds).

An external issuer's tokens (RS256/ES256/PS256/EdDSA, keys from its JWKS file or URL) are
accepted when ``iss`` (and ``aud``, when configured) match; their subject's privileges come from
configuration. Errors: every refusal raises ``NotAuthorizedError`` naming the reason.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import jwt
from sqlalchemy import (
    BigInteger,
    Column,
    MetaData,
    String,
    Table,
    delete,
    insert,
    select,
)
from sqlalchemy.engine import Engine
from sqlalchemy.exc import IntegrityError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from catalog_api.auth.access import principal_of
from catalog_api.responses import from_exception
from lakeview import errors

ISSUER = "lakeview-catalog"
OWN_ALGORITHM = "HS256"
EXTERNAL_ALGORITHMS = ["RS256", "RS384", "RS512", "ES256", "ES384", "PS256", "EdDSA"]
READ_SCOPE = "catalog:read"
DEFAULT_SCOPE = "catalog"
KNOWN_SCOPES = frozenset({DEFAULT_SCOPE, READ_SCOPE})
REFRESH_SECONDS = 2.0  # how stale another process's view of the revocation list may be

_meta = MetaData()
revoked_tokens = Table(
    "lakeview_revoked_tokens",
    _meta,
    Column("jti", String(64), primary_key=True),
    Column("expires_at", BigInteger, nullable=False),
)


def key_id(key: bytes) -> str:
    """The ``kid`` of a signing key: a hash, so the key itself never appears in a token."""
    return hashlib.sha256(key).hexdigest()[:16]


@dataclass(frozen=True)
class Claims:
    """What a verified token says: who, with which scopes, until when, and whose token it is."""

    subject: str
    scopes: frozenset[str]
    expires_at: int
    token_id: str | None
    external: bool = False

    @property
    def read_only(self) -> bool:
        """A token asked for ``catalog:read`` only: its holder's grants are capped at read."""
        return READ_SCOPE in self.scopes and DEFAULT_SCOPE not in self.scopes


class RevocationList:
    """Revoked token ids until their tokens expire; in the store's database once :meth:`attach` ed."""

    def __init__(self) -> None:
        self._local: dict[str, int] = {}
        self._engine: Engine | None = None
        self._lock = threading.Lock()
        self._loaded_at = float("-inf")

    def attach(self, engine: Engine) -> None:
        """Keep revocations in ``lakeview_revoked_tokens`` of ``engine`` (shared by catalog processes)."""
        _meta.create_all(engine, checkfirst=True)
        self._engine = engine
        for jti, expires_at in list(self._local.items()):
            self.revoke(jti, expires_at)

    def revoke(self, jti: str, expires_at: int) -> None:
        with self._lock:
            self._local[jti] = expires_at
        if self._engine is not None:
            now = int(time.time())
            try:
                with self._engine.begin() as conn:
                    conn.execute(delete(revoked_tokens).where(revoked_tokens.c.expires_at < now))
                    conn.execute(insert(revoked_tokens).values(jti=jti, expires_at=expires_at))
            except IntegrityError:
                pass  # revoked already

    def is_revoked(self, jti: str) -> bool:
        """True for a revoked id; other processes' revocations are seen within ``REFRESH_SECONDS``."""
        now = time.monotonic()
        if self._engine is not None and now - self._loaded_at > REFRESH_SECONDS:
            with self._engine.connect() as conn:  # one query per interval, not one per request
                rows = conn.execute(
                    select(revoked_tokens.c.jti, revoked_tokens.c.expires_at).where(
                        revoked_tokens.c.expires_at >= int(time.time())
                    )
                ).all()
            with self._lock:
                self._local.update({row[0]: row[1] for row in rows})
                self._loaded_at = now
        with self._lock:
            return jti in self._local


@dataclass
class ExternalIssuer:
    """An OIDC issuer whose tokens the catalog accepts: its ``iss``, keys (JWKS) and optional audience."""

    issuer: str
    jwks: dict[str, Any] | None = None  # a JWKS document (from a file)
    jwks_url: str | None = None
    audience: str | None = None
    subject_claim: str = "sub"
    _client: Any = field(default=None, repr=False)

    def signing_key(self, token: str) -> Any:
        header = jwt.get_unverified_header(token)
        if self.jwks is not None:
            keys = jwt.PyJWKSet.from_dict(self.jwks)
            kid = header.get("kid")
            for key in keys.keys:
                if kid is None or key.key_id == kid:
                    return key.key
            raise errors.NotAuthorizedError(f"the issuer's JWKS has no key {kid!r}")
        if self._client is None:
            self._client = jwt.PyJWKClient(self.jwks_url, cache_keys=True, lifespan=300, timeout=5)
        try:
            return self._client.get_signing_key_from_jwt(token).key
        except jwt.PyJWKClientError as exc:
            raise errors.NotAuthorizedError(f"cannot get the issuer's signing key: {exc}") from None


@dataclass
class TokenCodec:
    """Issues and verifies the catalog's JWTs; verifies an external issuer's too."""

    signing_key: bytes
    retired_keys: Iterable[bytes] = ()
    external: ExternalIssuer | None = None
    revocations: RevocationList = field(default_factory=RevocationList)
    leeway: int = 5  # seconds of clock skew tolerated on exp / iat

    def __post_init__(self) -> None:
        self._keys = {key_id(k): k for k in (*self.retired_keys, self.signing_key)}
        self._current = key_id(self.signing_key)

    def issue(self, subject: str, ttl: int, scopes: Iterable[str] = (DEFAULT_SCOPE,)) -> str:
        """A signed token for ``subject``, valid ``ttl`` seconds, with the known ``scopes`` requested.

        Scopes other catalogs define (DuckDB asks for ``PRINCIPAL_ROLE:ALL``) are left out of the
        token, as OAuth2 lets a server grant less than asked; none known means ``catalog``."""
        scopes = [s for s in dict.fromkeys(scopes) if s in KNOWN_SCOPES] or [DEFAULT_SCOPE]
        now = int(time.time())
        payload = {
            "iss": ISSUER,
            "sub": subject,
            "scope": " ".join(scopes),
            "iat": now,
            "exp": now + ttl,
            "jti": uuid.uuid4().hex,
        }
        return jwt.encode(payload, self.signing_key, algorithm=OWN_ALGORITHM, headers={"kid": self._current})

    def verify(self, token: str) -> Claims:
        """The claims of a valid token. Raises NotAuthorizedError (malformed, forged, expired, revoked)."""
        try:
            header = jwt.get_unverified_header(token)
            unverified = jwt.decode(token, options={"verify_signature": False})
        except jwt.PyJWTError:
            raise errors.NotAuthorizedError("malformed bearer token (not a JWT)") from None
        issuer = unverified.get("iss")
        if issuer == ISSUER and header.get("alg") == OWN_ALGORITHM:
            claims = self._verify_own(token, header)
        elif self.external is not None and issuer == self.external.issuer:
            claims = self._verify_external(token)
        else:
            raise errors.NotAuthorizedError(f"bearer token from an issuer this catalog does not trust: {issuer!r}")
        if claims.token_id and self.revocations.is_revoked(claims.token_id):
            raise errors.NotAuthorizedError("bearer token was revoked; request a new one")
        return claims

    def revoke(self, token: str) -> Claims:
        """Revoke a (valid) token by its ``jti``. Raises NotAuthorizedError for an invalid token."""
        claims = self.verify(token)
        if not claims.token_id:
            raise errors.BadRequestError("this token has no jti and cannot be revoked")
        self.revocations.revoke(claims.token_id, claims.expires_at)
        return claims

    def _verify_own(self, token: str, header: dict[str, Any]) -> Claims:
        key = self._keys.get(header.get("kid", ""))
        if key is None:
            raise errors.NotAuthorizedError("bearer token signed with a key this catalog does not hold (rotated out?)")
        payload = self._decode(token, key, [OWN_ALGORITHM], issuer=ISSUER, audience=None)
        return _claims(payload, "sub", external=False)

    def _verify_external(self, token: str) -> Claims:
        assert self.external is not None
        try:
            key = self.external.signing_key(token)
        except jwt.PyJWTError as exc:
            raise errors.NotAuthorizedError(f"invalid bearer token: {exc}") from None
        issuer, audience = self.external.issuer, self.external.audience
        payload = self._decode(token, key, EXTERNAL_ALGORITHMS, issuer=issuer, audience=audience)
        return _claims(payload, self.external.subject_claim, external=True)

    def _decode(self, token: str, key: Any, algorithms: list[str], issuer: str, audience: str | None) -> dict[str, Any]:
        try:
            return jwt.decode(
                token,
                key,
                algorithms=algorithms,
                issuer=issuer,
                audience=audience,
                leeway=self.leeway,
                options={"require": ["exp", "iss", "sub"], "verify_aud": audience is not None},
            )
        except jwt.ExpiredSignatureError:
            raise errors.NotAuthorizedError("bearer token expired; request a new one") from None
        except jwt.PyJWTError as exc:
            raise errors.NotAuthorizedError(f"invalid bearer token: {exc}") from None


def _claims(payload: dict[str, Any], subject_claim: str, external: bool) -> Claims:
    subject = payload.get(subject_claim)
    if not isinstance(subject, str) or not subject:
        raise errors.NotAuthorizedError(f"bearer token has no {subject_claim!r} claim")
    scope = payload.get("scope", payload.get("scp", ""))
    scopes = frozenset(scope.split() if isinstance(scope, str) else scope)
    return Claims(subject, scopes, int(payload["exp"]), payload.get("jti"), external)


def load_jwks(text: str) -> dict[str, Any]:
    """A JWKS document from JSON text. Raises ValueError naming what is wrong."""
    try:
        document = json.loads(text)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list) or not document["keys"]:
        raise ValueError('a JWKS is an object with a non-empty "keys" list')
    jwt.PyJWKSet.from_dict(document)  # raises PyJWKSetError for unusable keys
    return document


REVOKE_PATH = "/v1/oauth/revoke"


def revocation_endpoint(authenticator: Any):
    """``POST /v1/oauth/revoke`` (RFC 7009 form ``token=…``): a client revokes its own token, an admin any.

    Answers 200 ``{}`` once the token is revoked, 400 for a missing token, 401 for an invalid one,
    403 when the caller may not revoke it."""

    async def endpoint(request: Request) -> Response:
        try:
            if authenticator is None:
                raise errors.BadRequestError("this catalog runs without auth (mode none); there are no tokens")
            form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
            token = form.get("token")
            if not token:
                raise errors.BadRequestError("the form field token is required")
            claims = authenticator.codec.verify(token)
            caller = principal_of(request)
            if caller is not None and caller.client_id != claims.subject and not caller.warehouse_admin:
                raise errors.ForbiddenError(f"client {caller.client_id!r} may revoke only its own tokens")
            authenticator.codec.revoke(token)
            return JSONResponse({}, headers={"Cache-Control": "no-store"})
        except Exception as exc:
            return from_exception(exc)

    return endpoint
