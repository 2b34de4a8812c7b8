"""A spec-driven fuzz run: every operation in the REST spec, with generated path parameters,
query parameters and bodies (random JSON and valid bodies with one field broken). The
catalog must never answer 5xx, and every error must have the spec's shape."""

from __future__ import annotations

import functools
import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
import yaml
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from catalog_api.server import CatalogServer

SPEC = Path(__file__).parent / "spec" / "iceberg-rest-catalog-open-api.yaml"  # a copy of the Iceberg REST spec
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
VALID_BODIES: dict[str, dict[str, Any]] = {
    "namespaces": {"namespace": ["fuzz"], "properties": {"a": "b"}},
    "tables": {"name": "t", "schema": SCHEMA},
    "table": {
        "requirements": [{"type": "assert-create"}],
        "updates": [{"action": "set-properties", "updates": {"k": "v"}}],
    },
    "rename": {"source": {"namespace": ["fuzz"], "name": "t"}, "destination": {"namespace": ["fuzz"], "name": "u"}},
    "commit": {
        "table-changes": [{"identifier": {"namespace": ["fuzz"], "name": "t"}, "requirements": [], "updates": []}]
    },
    "register": {"name": "r", "metadata-location": "/tmp/x.metadata.json"},
    "views": {
        "name": "v",
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1,
            "schema-id": 0,
            "timestamp-ms": 1,
            "summary": {},
            "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
            "default-namespace": ["fuzz"],
        },
    },
    "properties": {"removals": ["a"], "updates": {"b": "c"}},
    "metrics": {"report-type": "scan-report"},
}


@functools.cache
def operations() -> list[tuple[str, str]]:
    if not SPEC.exists():
        pytest.skip(f"REST spec not found at {SPEC}")
    paths = yaml.safe_load(SPEC.read_text())["paths"]
    return sorted(
        (method.upper(), path)
        for path, item in paths.items()
        for method in item
        if method in ("get", "post", "delete", "head")
    )


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
RAW_SEGMENTS = ["a%1Fb", "%00", "%2F", "%1F%1F"]  # already percent-encoded, sent as they are
segments = st.sampled_from(["fuzz", "t", "v", "..", "x" * 300, "ns.with.dots", "é", *RAW_SEGMENTS]) | st.text(
    st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=12
)


def broken(valid: dict[str, Any], data: st.DataObject) -> Any:
    """A valid body with one top-level field replaced, dropped, or nested garbage injected."""
    body = json.loads(json.dumps(valid))
    key = data.draw(st.sampled_from(sorted(body)))
    action = data.draw(st.sampled_from(["replace", "drop", "nest"]))
    if action == "replace":
        body[key] = data.draw(json_values)
    elif action == "drop":
        del body[key]
    elif isinstance(body[key], list) and body[key] and isinstance(body[key][0], dict):
        inner = body[key][0]
        inner[data.draw(st.sampled_from(sorted(inner)))] = data.draw(json_values)
    return body


def body_kind(path: str) -> str:
    for suffix, kind in [
        ("/rename", "rename"),
        ("/transactions/commit", "commit"),
        ("/register", "register"),
        ("/register-view", "register"),
        ("/properties", "properties"),
        ("/metrics", "metrics"),
        ("/tables", "tables"),
        ("/views", "views"),
        ("/namespaces", "namespaces"),
    ]:
        if path.endswith(suffix):
            return kind
    return "table"


@pytest.fixture(scope="module")
def fuzz_client(catalog_server: CatalogServer) -> httpx.Client:
    client = httpx.Client(base_url=catalog_server.uri, timeout=30)
    client.post("/v1/lakeview/namespaces", json={"namespace": ["fuzz"]})
    client.post("/v1/lakeview/namespaces/fuzz/tables", json={"name": "t", "schema": SCHEMA})
    return client


# No shrink phase: a failure is reported as generated, and the run stays short.
@settings(
    max_examples=int(os.environ.get("LAKEVIEW_FUZZ_EXAMPLES", "200")),  # raise it for a long run
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(data=st.data())
def test_no_5xx_for_any_generated_request(fuzz_client: httpx.Client, data: st.DataObject) -> None:
    method, template = data.draw(st.sampled_from(operations()))
    path = template
    for param in ("prefix", "namespace", "table", "view", "plan-id", "function"):
        if "{" + param + "}" in path:
            value = "lakeview" if param == "prefix" and data.draw(st.booleans()) else data.draw(segments)
            path = path.replace("{" + param + "}", value if value in RAW_SEGMENTS else quote(value, safe=""))
    params = data.draw(
        st.dictionaries(
            st.sampled_from(["pageSize", "pageToken", "parent", "snapshots", "purgeRequested", "warehouse"]),
            st.text(max_size=8),
            max_size=2,
        )
    )
    headers = {}
    if data.draw(st.booleans()):
        headers["If-None-Match"] = data.draw(st.from_regex(r'\A"?[A-Za-z0-9,]{0,12}"?\Z'))
    kwargs: dict[str, Any] = {}
    if method == "POST" and not template.endswith("/oauth/tokens"):
        choice = data.draw(st.sampled_from(["valid-broken", "random", "raw"]))
        if choice == "valid-broken":
            kwargs["json"] = broken(VALID_BODIES[body_kind(template)], data)
        elif choice == "random":
            kwargs["json"] = data.draw(json_values)
        else:
            kwargs["content"] = data.draw(st.binary(max_size=40))
    response = fuzz_client.request(method, path, params=params, headers=headers, **kwargs)
    assert response.status_code < 500, (method, path, kwargs, response.text)
    if response.status_code >= 400 and method != "HEAD" and not template.endswith("/oauth/tokens"):
        error = response.json()["error"]
        assert set(error) == {"message", "type", "code"} and error["code"] == response.status_code
