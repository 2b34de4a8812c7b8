"""Issue #16 finding 4: the token endpoint and large bodies cannot stall the catalog, nor can
timing tell client ids apart.

Secret hashing and the decoding of large JSON bodies run off the event loop (health checks
answer while they run), unknown client ids are hashed like known ones, and attempts beyond the
rate limit get 429 with Retry-After."""

from __future__ import annotations

import functools
import secrets
import threading
import time
from collections.abc import Iterator

import httpx
import pytest

from catalog_api import request_limits
from catalog_api.auth.access import Privilege
from catalog_api.auth.authenticator import Authenticator, Client, hash_secret
from catalog_api.server import CatalogServer
from catalog_api.store.catalog import CatalogStore


@functools.cache  # made once per run: each fixture's authenticator checks against it afresh
def slow_hash(secret: str) -> str:
    """A valid scrypt hash 16x the default work (p=16): each check takes a while, at 16 MiB."""
    import hashlib

    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(secret.encode(), salt=salt, n=2**14, r=8, p=16, dklen=32)
    return f"scrypt${2**14}$8$16${salt.hex()}${digest.hex()}"


@pytest.fixture()
def served(tmp_path) -> Iterator[tuple[CatalogServer, Authenticator]]:
    clients = {
        "fast": Client(hash_secret("fast-secret"), {"*": Privilege.READ}),
        "other": Client(hash_secret("other-secret"), {"*": Privilege.READ}),
        "slow": Client(slow_hash("slow-secret"), {"*": Privilege.READ}),
    }
    authenticator = Authenticator(
        clients, signing_key=b"d" * 32, token_attempts_per_minute=40, token_failures_per_minute=3
    )
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh", "lakeview")
    with CatalogServer(store, authenticator=authenticator) as server:
        yield server, authenticator
    store.close()


def ask(server: CatalogServer, client_id: str, secret: str) -> httpx.Response:
    form = {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    return httpx.post(f"{server.uri}/v1/oauth/tokens", data=form, timeout=120)


def test_health_answers_while_secret_hashes_run(served: tuple[CatalogServer, Authenticator]) -> None:
    server, authenticator = served
    results: list[int] = []
    workers = [
        threading.Thread(target=lambda: results.append(ask(server, "slow", "wrong").status_code)) for _ in range(2)
    ]
    for worker in workers:
        worker.start()
    while authenticator.hashing == 0 and len(results) < 2:  # wait until a hash is running in the server
        time.sleep(0.001)
    health = httpx.get(f"http://{server.host}:{server.port}/healthz", timeout=120)
    still_hashing = authenticator.hashing > 0
    for worker in workers:
        worker.join()
    assert health.status_code == 200 and health.json()["status"] == "ok"
    assert still_hashing, "the health check waited for the secret hashes (they ran on the event loop)"
    assert results == [401, 401]


def test_unknown_client_ids_cost_a_hash_like_known_ones(served: tuple[CatalogServer, Authenticator]) -> None:
    server, authenticator = served
    before = authenticator.secret_checks
    unknown, known = ask(server, "nobody", "x"), ask(server, "fast", "wrong")
    assert unknown.status_code == known.status_code == 401
    assert unknown.json() == known.json()  # the same answer: nothing tells an unknown id from a wrong secret
    assert authenticator.secret_checks == before + 2
    assert ask(server, "fast", "fast-secret").status_code == 200


def test_token_attempts_beyond_the_limit_get_429_with_retry_after(served: tuple[CatalogServer, Authenticator]) -> None:
    server, authenticator = served
    assert [ask(server, "fast", "guess").status_code for _ in range(3)] == [401, 401, 401]
    checks = authenticator.secret_checks
    limited = ask(server, "fast", "guess")
    assert limited.status_code == 429 and limited.json()["error"] == "slow_down"
    assert int(limited.headers["Retry-After"]) >= 1
    assert authenticator.secret_checks == checks  # refused before hashing: a flood costs no scrypt
    assert ask(server, "fast", "fast-secret").status_code == 429  # the id is locked for the window, right secret or not
    assert ask(server, "other", "other-secret").status_code == 200  # other clients are not
    # per address: every attempt counts, whatever the client id
    codes = [ask(server, f"id{i}", "x").status_code for i in range(40)]
    assert 429 in codes and set(codes) <= {401, 429}
    assert httpx.get(f"http://{server.host}:{server.port}/healthz").status_code == 200


def test_health_answers_while_a_large_body_is_decoded(tmp_path) -> None:
    """A ~10 MB body (under the 64 MiB limit; a list of lists where the spec wants properties, so it
    is refused after decoding and nothing is stored) is decoded and its nesting checked in the thread
    pool: a health check sent while it decodes is answered before the decoding ends. (Its million
    openers make the depth walk run; json.loads itself holds the GIL, the walk lets the loop in.)"""
    store = CatalogStore(f"sqlite:///{tmp_path / 'c.db'}", tmp_path / "wh", "lakeview")
    body = b'{"namespace": ["big"], "properties": [' + b",".join([b"[1234567]"] * 1_000_000) + b"]}"
    assert request_limits.INLINE_DECODE_BYTES < len(body) < request_limits.MAX_BODY_BYTES
    with CatalogServer(store) as server:
        url = f"{server.uri}/v1/lakeview/namespaces"
        answers: list[int] = []
        poster = threading.Thread(target=lambda: answers.append(httpx.post(url, content=body, timeout=300).status_code))
        poster.start()
        while request_limits.decoding.now == 0 and poster.is_alive():  # wait until the server decodes it
            time.sleep(0.0005)
        health = httpx.get(f"http://{server.host}:{server.port}/healthz", timeout=120)
        still_decoding = request_limits.decoding.now > 0
        poster.join()
    store.close()
    assert health.status_code == 200
    assert still_decoding, "the health check waited for the body's decoding (it ran on the event loop)"
    assert answers == [400]  # a list is not properties: refused with the spec's error, nothing stored
