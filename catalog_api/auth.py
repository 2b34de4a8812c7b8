"""OAuth2 client credentials for the catalog: hashed client secrets, short-lived signed bearer
tokens, and the middleware that turns a token into a :class:`~catalog_api.access.Principal`.

Tokens are standard signed JWTs (``catalog_api/tokens.py``: scope, expiry, key rotation,
revocation, an external OIDC issuer), so any catalog process holding the same keys accepts them.
Secrets are stored only as ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` (see :func:`hash_secret`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog_api.access import PRINCIPAL_KEY, Principal, Privilege
from catalog_api.responses import error_response
from catalog_api.tokens import ExternalIssuer, TokenCodec, load_jwks
from lakeview import errors
from lakeview.config.auth import AuthConfig, check_secret_hash, load_signing_key
from lakeview.config.models import ProjectConfig

__all__ = ["AuthMiddleware", "Authenticator", "Client", "build_authenticator", "check_secret_hash", "hash_secret", "project_authenticator", "token_endpoint", "verify_secret"]

TOKEN_PATH = "/iceberg/v1/oauth/tokens"
PUBLIC_PATHS = frozenset({"/healthz", TOKEN_PATH})
_SCRYPT = (2**14, 8, 1)


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
            actual = hashlib.pbkdf2_hmac("sha256", secret.encode(), bytes.fromhex(parts[2]), int(parts[1]), len(expected))
        else:
            return False
    except ValueError:
        return False
    return hmac.compare_digest(actual, expected)


@dataclass(frozen=True)
class Client:
    secret_hash: str
    grants: dict[str, Privilege] = field(default_factory=dict)


@dataclass
class Authenticator:
    """Issues and checks bearer tokens for the configured clients."""

    clients: Mapping[str, Client]
    token_ttl: int = 3600
    signing_key: bytes = field(default_factory=lambda: secrets.token_bytes(32))
    codec: TokenCodec | None = None  # JWTs (tokens.py); default: HS256 with signing_key, no external issuer
    external_grants: Mapping[str, dict[str, Privilege]] = field(default_factory=dict)  # OIDC subject → grants

    def __post_init__(self) -> None:
        if self.codec is None:
            self.codec = TokenCodec(self.signing_key)

    def issue(self, client_id: str, secret: str, scopes: tuple[str, ...] = ()) -> str:
        """A signed JWT for a client whose secret matches, with the scopes asked for. Raises NotAuthorizedError."""
        client = self.clients.get(client_id)
        if client is None or not verify_secret(secret, client.secret_hash):
            raise errors.NotAuthorizedError("unknown client or wrong secret")
        return self.codec.issue(client_id, self.token_ttl, scopes)  # type: ignore[union-attr]

    def principal(self, token: str) -> Principal:
        """The principal a token stands for. Raises NotAuthorizedError (forged, expired, revoked, unknown client)."""
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


def token_endpoint(authenticator: Authenticator | None):  # noqa: ANN201 - a Starlette endpoint
    """``POST /v1/oauth/tokens``: the client_credentials grant, secrets in HTTP Basic or the form."""

    async def endpoint(request: Request) -> Response:
        if authenticator is None:
            return _oauth_error(400, "unsupported_grant_type", "this catalog runs without auth (mode none)")
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode("utf-8", "replace")).items()}
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
        try:
            token = authenticator.issue(client_id, secret, tuple(form.get("scope", "").split()))
        except errors.NotAuthorizedError as exc:
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
    jwks = load_jwks(project.resolve(auth.oidc.jwks_file).read_text()) if auth.oidc is not None and auth.oidc.jwks_file else None
    return build_authenticator(auth, key, retired, jwks)
