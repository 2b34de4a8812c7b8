"""Bearer tokens as standard JWTs: claims, key rotation, revocation, read-only scope, and an external
OIDC issuer's tokens verified through its JWKS (a local key pair, the JWKS served on 127.0.0.1)."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from pyiceberg.catalog.rest import RestCatalog
from pyiceberg.exceptions import ForbiddenError

from catalog_api.auth.authenticator import build_authenticator, hash_secret
from catalog_api.auth.tokens import load_jwks
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore
from lakeview.config.auth import AuthConfig

KEY_OLD, KEY_NEW = b"o" * 32, b"n" * 32
SECRET = "s3cret"
IDP = "http://127.0.0.1/idp"


def auth_config(oidc: dict | None = None) -> AuthConfig:
    clients = {
        "etl": {"secret_hash": hash_secret(SECRET), "privileges": {"*": "admin"}},
        "bi": {"secret_hash": hash_secret(SECRET), "privileges": {"*": "read"}},
    }
    return AuthConfig.model_validate(
        {"mode": "oauth2", "token_ttl": 300, "clients": clients, **({"oidc": oidc} if oidc else {})}
    )


@pytest.fixture()
def store(tmp_path: Path) -> Iterator[CatalogStore]:
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "w", "lakeview")
    yield store
    store.close()


def token(server: CatalogServer, client: str, scope: str = "catalog") -> str:
    form = {"grant_type": "client_credentials", "client_id": client, "client_secret": SECRET, "scope": scope}
    response = httpx.post(f"{server.uri}/v1/oauth/tokens", data=form)
    assert response.status_code == 200, response.text
    return response.json()["access_token"]


def get(server: CatalogServer, bearer: str) -> httpx.Response:
    return httpx.get(f"{server.uri}/v1/lakeview/namespaces", headers={"Authorization": f"Bearer {bearer}"})


def test_tokens_are_signed_jwts_and_rotation_keeps_old_ones_valid(store: CatalogStore) -> None:
    with CatalogServer(store, authenticator=build_authenticator(auth_config(), KEY_OLD)) as old:
        issued = token(old, "etl")
    header, claims = jwt.get_unverified_header(issued), jwt.decode(issued, KEY_OLD, algorithms=["HS256"])
    assert header["alg"] == "HS256" and len(header["kid"]) == 16
    assert claims["sub"] == "etl" and claims["scope"] == "catalog" and claims["exp"] - claims["iat"] == 300
    assert claims["jti"]

    rotated = build_authenticator(auth_config(), KEY_NEW, retired_keys=(KEY_OLD,))
    with CatalogServer(store, authenticator=rotated) as server:
        assert get(server, issued).status_code == 200  # signed before the rotation, not expired
        fresh = token(server, "etl")
        assert jwt.get_unverified_header(fresh)["kid"] != header["kid"]
        assert get(server, fresh).status_code == 200
    with CatalogServer(store, authenticator=build_authenticator(auth_config(), KEY_NEW)) as retired:
        refused = get(retired, issued)  # the old key is no longer held
        assert refused.status_code == 401 and "does not hold" in refused.json()["error"]["message"]
        forged = jwt.encode({**claims, "sub": "etl"}, b"x" * 32, algorithm="HS256", headers={"kid": header["kid"]})
        assert get(retired, forged).status_code == 401
        expired = jwt.encode(
            {**claims, "exp": int(time.time()) - 60},
            KEY_NEW,
            algorithm="HS256",
            headers={"kid": jwt.get_unverified_header(token(retired, "etl"))["kid"]},
        )
        assert "expired" in get(retired, expired).json()["error"]["message"]


def test_revoked_tokens_are_refused_by_every_process(store: CatalogStore) -> None:
    with CatalogServer(store, authenticator=build_authenticator(auth_config(), KEY_NEW)) as server:
        etl, other, bi = token(server, "etl"), token(server, "etl"), token(server, "bi")
        revoke = f"{server.uri}/v1/oauth/revoke"
        denied = httpx.post(revoke, data={"token": etl}, headers={"Authorization": f"Bearer {bi}"})
        assert denied.status_code == 403 and "only its own" in denied.json()["error"]["message"]
        assert httpx.post(revoke, data={}, headers={"Authorization": f"Bearer {bi}"}).status_code == 400
        assert httpx.post(revoke, data={"token": etl}, headers={"Authorization": f"Bearer {etl}"}).status_code == 200
        refused = get(server, etl)
        assert refused.status_code == 401 and "revoked" in refused.json()["error"]["message"]
        assert get(server, other).status_code == 200  # only that jti
    # A second catalog process on the same store (a new app) refuses it too.
    with CatalogServer(store, authenticator=build_authenticator(auth_config(), KEY_NEW)) as second:
        assert get(second, etl).status_code == 401
        assert get(second, other).status_code == 200


def test_read_scope_caps_the_grants(store: CatalogStore) -> None:
    with CatalogServer(store, authenticator=build_authenticator(auth_config(), KEY_NEW)) as server:
        reader = token(server, "etl", scope="catalog:read")
        assert jwt.decode(reader, options={"verify_signature": False})["scope"] == "catalog:read"
        catalog = RestCatalog("t", uri=server.uri, warehouse="lakeview", token=reader)
        assert catalog.list_namespaces() == []
        with pytest.raises(ForbiddenError, match="needs admin"):
            catalog.create_namespace("sales")
        RestCatalog("t", uri=server.uri, warehouse="lakeview", token=token(server, "etl")).create_namespace("sales")
        assert catalog.list_namespaces() == [("sales",)]


class _Jwks(BaseHTTPRequestHandler):
    document: bytes = b""

    def do_GET(self) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(self.document)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture()
def idp() -> Iterator[tuple[rsa.RSAPrivateKey, str, dict]]:
    """A local identity provider: an RSA key pair and its JWKS served on 127.0.0.1."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    jwks = {"keys": [{**public, "kid": "idp-1", "use": "sig", "alg": "RS256"}]}
    handler = type("Jwks", (_Jwks,), {"document": json.dumps(jwks).encode()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield key, f"http://127.0.0.1:{server.server_address[1]}/jwks.json", jwks
    server.shutdown()
    server.server_close()


def idp_token(
    key: rsa.RSAPrivateKey, subject: str, audience: str = "lakeview", kid: str = "idp-1", **extra: object
) -> str:
    now = int(time.time())
    claims = {"iss": IDP, "sub": subject, "aud": audience, "iat": now, "exp": now + 300, **extra}
    return jwt.encode(claims, key, algorithm="RS256", headers={"kid": kid})


def test_an_external_issuers_tokens_through_its_jwks(store: CatalogStore, idp) -> None:
    key, url, jwks = idp
    oidc = {"issuer": IDP, "jwks_url": url, "audience": "lakeview", "privileges": {"svc-etl": {"*": "admin"}}}
    with CatalogServer(store, authenticator=build_authenticator(auth_config(oidc), KEY_NEW)) as server:
        catalog = RestCatalog("idp", uri=server.uri, warehouse="lakeview", token=idp_token(key, "svc-etl"))
        catalog.create_namespace("from_idp")
        assert ("from_idp",) in catalog.list_namespaces()
        assert get(server, token(server, "bi")).status_code == 200  # the catalog's own tokens still work
        wrong_audience = get(server, idp_token(key, "svc-etl", audience="other"))
        assert wrong_audience.status_code == 401 and "audience" in wrong_audience.json()["error"]["message"].lower()
        unknown = get(server, idp_token(key, "someone"))
        assert unknown.status_code == 401 and "has no grants" in unknown.json()["error"]["message"]
        impostor = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        assert get(server, idp_token(impostor, "svc-etl")).status_code == 401  # same kid, another key
        assert get(server, idp_token(key, "svc-etl", kid="idp-9")).status_code == 401
        stranger = jwt.encode(
            {"iss": "http://elsewhere", "sub": "svc-etl", "exp": int(time.time()) + 60}, key, algorithm="RS256"
        )
        assert "does not trust" in get(server, stranger).json()["error"]["message"]

    from_file = {"issuer": IDP, "jwks_file": "jwks.json", "privileges": {"svc-etl": {"*": "read"}}}  # no audience
    authenticator = build_authenticator(auth_config(from_file), KEY_NEW, jwks=load_jwks(json.dumps(jwks)))
    with CatalogServer(store, authenticator=authenticator) as server:
        catalog = RestCatalog("idp", uri=server.uri, warehouse="lakeview", token=idp_token(key, "svc-etl"))
        assert ("from_idp",) in catalog.list_namespaces()
        with pytest.raises(ForbiddenError):
            catalog.create_namespace("nope")


def test_oidc_config_is_checked() -> None:
    with pytest.raises(ValueError, match="exactly one of jwks_file and jwks_url"):
        auth_config({"issuer": IDP})
    with pytest.raises(ValueError, match="not valid"):
        auth_config({"issuer": IDP, "jwks_url": "http://127.0.0.1/j", "privileges": {"x": {"*": "root"}}})
    with pytest.raises(ValueError, match="keys"):
        load_jwks('{"keys": []}')
