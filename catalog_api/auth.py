"""OAuth2 client credentials for the catalog: hashed client secrets, short-lived signed bearer
tokens, and the middleware that turns a token into a :class:`~catalog_api.access.Principal`.

Tokens are ``lv1.<payload>.<signature>`` with an HMAC-SHA256 signature, so any catalog
process holding the same signing key accepts them (scale-out) and nothing is stored.
Secrets are stored only as ``scrypt$<n>$<r>$<p>$<salt hex>$<hash hex>`` (see :func:`hash_secret`).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import parse_qs

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.types import ASGIApp, Receive, Scope, Send

from catalog_api.access import PRINCIPAL_KEY, Principal, Privilege
from catalog_api.responses import error_response
from lakeview import errors
from lakeview.auth_config import check_secret_hash

__all__ = ["AuthMiddleware", "Authenticator", "Client", "check_secret_hash", "hash_secret", "token_endpoint", "verify_secret"]

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

    def issue(self, client_id: str, secret: str) -> str:
        """A bearer token for a client whose secret matches. Raises NotAuthorizedError."""
        client = self.clients.get(client_id)
        if client is None or not verify_secret(secret, client.secret_hash):
            raise errors.NotAuthorizedError("unknown client or wrong secret")
        payload = json.dumps({"sub": client_id, "exp": int(time.time()) + self.token_ttl}, separators=(",", ":"))
        body = _b64(payload.encode())
        return f"lv1.{body}.{self._sign(body)}"

    def principal(self, token: str) -> Principal:
        """The principal a token stands for. Raises NotAuthorizedError (forged, expired, unknown client)."""
        if not token.isascii():  # compare_digest refuses non-ASCII str: such a token is simply invalid
            raise errors.NotAuthorizedError("malformed bearer token")
        try:
            version, body, signature = token.split(".")
        except ValueError:
            raise errors.NotAuthorizedError("malformed bearer token") from None
        if version != "lv1" or not hmac.compare_digest(signature, self._sign(body)):
            raise errors.NotAuthorizedError("invalid bearer token")
        try:
            claims = json.loads(_unb64(body))
        except (ValueError, binascii.Error):
            raise errors.NotAuthorizedError("malformed bearer token") from None
        if claims.get("exp", 0) < time.time():
            raise errors.NotAuthorizedError("bearer token expired; request a new one")
        client = self.clients.get(claims.get("sub"))
        if client is None:
            raise errors.NotAuthorizedError("the token's client no longer exists")
        return Principal(claims["sub"], client.grants)

    def _sign(self, body: str) -> str:
        return _b64(hmac.new(self.signing_key, body.encode(), hashlib.sha256).digest())


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
            token = authenticator.issue(client_id, secret)
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


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
