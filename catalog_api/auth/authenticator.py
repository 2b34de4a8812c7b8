"""OAuth2 client credentials for the catalog: hashed client secrets, short-lived signed bearer
tokens, and the middleware that turns a token into a :class:`~catalog_api.auth.access.Principal`.

Tokens are standard signed JWTs (``catalog_api/auth/tokens.py``: scope, expiry, key rotation,
revocation, an external OIDC issuer), so any catalog process holding the same keys accepts them.
Secrets are stored only as ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` (see :func:`hash_secret`).
"""

from __future__ import annotations

import base64
import binascii
import functools
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

import anyio
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog_api.auth.access import PRINCIPAL_KEY, Identifier, Principal, Privilege, grant_keys
from catalog_api.auth.rate_limit import SlidingWindow
from catalog_api.auth.tokens import ExternalIssuer, TokenCodec, load_jwks
from catalog_api.request_limits import read_body
from catalog_api.responses import error_response
from lakeview import errors
from lakeview.config.auth import AuthConfig, check_secret_hash, load_signing_key
from lakeview.config.models import ProjectConfig

__all__ = [
    "AuthMiddleware",
    "Authenticator",
    "Client",
    "build_authenticator",
    "check_secret_hash",
    "hash_secret",
    "project_authenticator",
    "token_endpoint",
    "verify_secret",
]

TOKEN_PATH = "/iceberg/v1/oauth/tokens"
PUBLIC_PATHS = frozenset({"/healthz", TOKEN_PATH})
_SCRYPT = (2**14, 8, 1)
HASH_CONCURRENCY = 2  # scrypt is CPU- and memory-bound: more at once only queues on the cores


def hash_secret(secret: str, salt: bytes | None = None) -> str:
    """The stored form of a client secret (scrypt; the salt is random unless given)."""
    salt = salt or secrets.token_bytes(16)
    n, r, p = _SCRYPT
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=n, r=r, p=p, dklen=32)
    return f"scrypt${n}${r}${p}${salt.hex()}${digest.hex()}"


def verify_secret(secret: str, stored: str) -> bool:
    """Check a secret against :func:`hash_secret` output (or ``pbkdf2_sha256$iter$salt$hash``)."""
    parts = stored.split("$")
    try:
        if parts[0] == "scrypt" and len(parts) == 6:
            n, r, p = int(parts[1]), int(parts[2]), int(parts[3])
            expected = bytes.fromhex(parts[5])
            actual = hashlib.scrypt(secret.encode(), salt=bytes.fromhex(parts[4]), n=n, r=r, p=p, dklen=len(expected))
        elif parts[0] == "pbkdf2_sha256" and len(parts) == 4:
            expected = bytes.fromhex(parts[3])
            actual = hashlib.pbkdf2_hmac(
                "sha256", secret.encode(), bytes.fromhex(parts[2]), int(parts[1]), len(expected)
            )
        else:
            return False
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


@dataclass(frozen=True)
class Client:
    """A configured client: its secret's hash and its grants (configured strings, kept as level tuples)."""

    secret_hash: str
    grants: Mapping[Identifier, Privilege] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "grants", grant_keys(self.grants))  # type: ignore[arg-type]


@dataclass
class Authenticator:
    """Issues and checks bearer tokens for the configured clients."""

    clients: Mapping[str, Client]
    token_ttl: int = 3600
    signing_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    codec: TokenCodec | None = None  # JWTs (tokens.py); default: HS256 with signing_key, no external issuer
    external_grants: Mapping[str, Mapping[Identifier, Privilege]] = field(default_factory=dict)  # OIDC subject
    token_attempts_per_minute: int = 600  # per client address (429 beyond); one proxy may front many clients
    token_failures_per_minute: int = 20  # wrong secrets per client id: guessing stays slow
    secret_checks: int = field(default=0, init=False, compare=False)  # hashes computed (unknown ids too)
    hashing: int = field(default=0, init=False, compare=False)  # hashes in progress right now

    def __post_init__(self) -> None:
        self.external_grants = {subject: grant_keys(grants) for subject, grants in self.external_grants.items()}
        if self.codec is None:
            self.codec = TokenCodec(self.signing_key)

    def issue(self, client_id: str, secret: str, scopes: tuple[str, ...] = ()) -> str:
        """A signed JWT for a client whose secret matches, with the scopes asked for. Raises NotAuthorizedError.

        An unknown client id is hashed against a dummy hash, so it costs what a known one does."""
        client = self.clients.get(client_id)
        self.hashing += 1
        try:
            matches = verify_secret(secret, client.secret_hash if client is not None else _dummy_hash())
        finally:
            self.hashing -= 1
            self.secret_checks += 1
        if client is None or not matches:
            raise errors.NotAuthorizedError("unknown client or wrong secret")
        return self.codec.issue(client_id, self.token_ttl, scopes)  # type: ignore[union-attr]

    def principal(self, token: str) -> Principal:
        """The principal a token stands for. Raises NotAuthorizedError (forged, expired, revoked, unknown client)."""
        if not token.isascii():  # a token is ASCII; anything else is simply invalid (never a 500)
            raise errors.NotAuthorizedError("malformed bearer token")
        claims = self.codec.verify(token)  # type: ignore[union-attr]
        if claims.external:
            grants = self.external_grants.get(claims.subject)
            if grants is None:
                raise errors.NotAuthorizedError(f"the identity provider's subject {claims.subject!r} has no grants")
        else:
            client = self.clients.get(claims.subject)
            if client is None:
                raise errors.NotAuthorizedError("the token's client no longer exists")
            grants = client.grants
        if claims.read_only:
            grants = {ns: min(p, Privilege.READ) for ns, p in grants.items()}
        return Principal(claims.subject, grants)


@functools.cache
def _dummy_hash() -> str:
    return hash_secret(secrets.token_urlsafe(16))


class AuthMiddleware:
    """Require ``Authorization: Bearer <token>`` on every path but the public ones."""

    def __init__(self, app: ASGIApp, authenticator: Authenticator, public_paths: frozenset[str] = PUBLIC_PATHS) -> None:
        self.app = app
        self.authenticator = authenticator
        self.public_paths = public_paths

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in self.public_paths:
            await self.app(scope, receive, send)
            return
        header = dict(scope["headers"]).get(b"authorization", b"").decode("latin-1")
        try:
            if not header.lower().startswith("bearer "):
                raise errors.NotAuthorizedError("missing bearer token; get one from POST /iceberg/v1/oauth/tokens")
            scope[PRINCIPAL_KEY] = self.authenticator.principal(header[7:].strip())
        except errors.NotAuthorizedError as exc:
            response = error_response(exc.status, exc.kind, str(exc))
            response.headers["WWW-Authenticate"] = "Bearer"
            await response(scope, receive, send)
            return
        await self.app(scope, receive, send)


def token_endpoint(authenticator: Authenticator | None):
    """``POST /v1/oauth/tokens``: the client_credentials grant, secrets in HTTP Basic or the form.

    Secret hashing (scrypt, deliberately slow) runs in worker threads, at most HASH_CONCURRENCY at a
    time, never on the event loop; attempts are rate-limited per client address and failures per
    client id (429 with Retry-After)."""
    per_address = SlidingWindow(authenticator.token_attempts_per_minute if authenticator else 1)
    failures_per_client = SlidingWindow(authenticator.token_failures_per_minute if authenticator else 1)
    hashing = anyio.CapacityLimiter(HASH_CONCURRENCY)

    async def endpoint(request: Request) -> Response:
        if authenticator is None:
            return _oauth_error(400, "unsupported_grant_type", "this catalog runs without auth (mode none)")
        address = request.client.host if request.client else "-"
        wait = per_address.hit(f"address:{address}")
        if wait is not None:
            return _too_many(wait, f"too many token requests from {address}")
        try:
            raw = await read_body(request, limit=64 * 1024)
        except errors.PayloadTooLargeError as exc:
            return _oauth_error(413, "invalid_request", str(exc))
        form = {k: v[0] for k, v in parse_qs(raw.decode("utf-8", "replace")).items()}
        if form.get("grant_type") != "client_credentials":
            return _oauth_error(400, "unsupported_grant_type", "only grant_type=client_credentials is supported")
        client_id, secret = form.get("client_id"), form.get("client_secret")
        basic = request.headers.get("authorization", "")
        if basic.lower().startswith("basic "):
            try:
                client_id, _, secret = base64.b64decode(basic[6:].strip()).decode().partition(":")
            except (ValueError, binascii.Error):
                return _oauth_error(400, "invalid_request", "malformed HTTP Basic credentials")
        if not client_id or secret is None:
            return _oauth_error(400, "invalid_request", "client_id and client_secret are required")
        wait = failures_per_client.over(f"client:{client_id}")  # checked before the hash: a refusal is cheap
        if wait is not None:
            return _too_many(wait, f"too many failed token requests for client {client_id!r}")
        try:
            token = await anyio.to_thread.run_sync(
                authenticator.issue, client_id, secret, tuple(form.get("scope", "").split()), limiter=hashing
            )
        except errors.NotAuthorizedError as exc:
            failures_per_client.hit(f"client:{client_id}")
            return _oauth_error(401, "invalid_client", str(exc))
        return JSONResponse(
            {
                "access_token": token,
                "token_type": "bearer",
                "expires_in": authenticator.token_ttl,
                "issued_token_type": "urn:ietf:params:oauth:token-type:access_token",
            },
            headers={"Cache-Control": "no-store"},
        )

    return endpoint


def _too_many(wait: int, description: str) -> Response:
    response = _oauth_error(429, "slow_down", f"{description}; retry in {wait} s")
    response.headers["Retry-After"] = str(wait)
    return response


def _oauth_error(status: int, error: str, description: str) -> Response:
    return JSONResponse({"error": error, "error_description": description}, status_code=status)


def build_authenticator(
    config: AuthConfig, signing_key: bytes | None = None, retired_keys: tuple[bytes, ...] = (), jwks: dict | None = None
) -> Authenticator | None:
    """The catalog's Authenticator for ``config`` (None in mode ``none``); ``jwks``: the OIDC issuer's file."""
    if not config.enabled:
        return None
    clients = {
        client_id: Client(c.secret_hash, {ns: Privilege.parse(p) for ns, p in c.privileges.items()})
        for client_id, c in config.clients.items()
    }
    key = signing_key or secrets.token_bytes(32)
    external, external_grants = None, {}
    if config.oidc is not None:
        oidc = config.oidc
        external = ExternalIssuer(oidc.issuer, jwks, oidc.jwks_url, oidc.audience, oidc.subject_claim)
        external_grants = {
            subject: {ns: Privilege.parse(p) for ns, p in grants.items()} for subject, grants in oidc.privileges.items()
        }
    codec = TokenCodec(key, retired_keys, external)
    return Authenticator(
        clients, token_ttl=config.token_ttl, signing_key=key, codec=codec, external_grants=external_grants
    )


def project_authenticator(project: ProjectConfig) -> Authenticator | None:
    """The Authenticator for a ProjectConfig's ``[auth]`` (None in mode ``none``)."""
    auth = project.auth
    if not auth.enabled:
        return None
    key = load_signing_key(project.resolve(auth.signing_key_file)) if auth.signing_key_file else None
    retired = tuple(project.resolve(path).read_bytes().strip() for path in auth.retired_signing_key_files)
    jwks = (
        load_jwks(project.resolve(auth.oidc.jwks_file).read_text())
        if auth.oidc is not None and auth.oidc.jwks_file
        else None
    )
    return build_authenticator(auth, key, retired, jwks)
