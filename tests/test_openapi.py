"""openapi.yaml is exact: it is what the server serves, it is valid OpenAPI 3.1, and it covers every route."""

from __future__ import annotations

import re

from pathlib import Path

import httpx
import pytest
import yaml
from openapi_spec_validator import validate

from recall_server import config, text
from recall_server.app import create_app
from recall_server.openapi import document, document_yaml

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "openapi.yaml"


def test_committed_openapi_yaml_matches_the_generator() -> None:
    app = create_app(config.Settings(database_url="postgresql://unused"))
    assert COMMITTED.read_text() == document_yaml(app), "openapi.yaml drifted: run `recall-server openapi -o openapi.yaml`"


def test_committed_openapi_yaml_is_what_the_server_serves(client: httpx.Client) -> None:
    served = client.get("/schema/openapi.json")
    assert served.status_code == 200
    assert served.json() == yaml.safe_load(COMMITTED.read_text())


def test_openapi_yaml_is_valid_openapi_3_1() -> None:
    doc = yaml.safe_load(COMMITTED.read_text())
    assert doc["openapi"].startswith("3.1")
    validate(doc)


def test_every_route_is_documented_and_every_documented_route_exists() -> None:
    app = create_app(config.Settings(database_url="postgresql://unused"))
    documented = {(path, method.upper()) for path, item in yaml.safe_load(COMMITTED.read_text())["paths"].items()
                  for method in item}
    served = set()
    for route in app.routes:
        for handler in getattr(route, "route_handlers", []):
            if handler.include_in_schema and not route.path.startswith("/schema"):
                path = re.sub(r":(str|int)}", "}", route.path)
                served |= {(path, m) for m in handler.http_methods}
    assert documented == served


def test_every_error_response_is_problem_json_and_every_field_list_is_required() -> None:
    doc = yaml.safe_load(COMMITTED.read_text())
    for path, item in doc["paths"].items():
        for method, op in item.items():
            for status, response in op["responses"].items():
                if int(status) >= 400:
                    assert list(response["content"]) == ["application/problem+json"], (path, method, status)
    for name, schema in doc["components"]["schemas"].items():
        if schema.get("type") == "object" and name not in {"UpdateThread"}:
            assert schema.get("required") or schema.get("minProperties"), f"{name}: an empty {{}} would validate"


def test_creates_link_to_the_reads_they_enable() -> None:
    doc = yaml.safe_load(COMMITTED.read_text())
    links = doc["paths"]["/threads"]["post"]["responses"]["201"]["links"]
    assert links["GetThread"]["parameters"] == {"thread_id": "$response.body#/id"}
    assert {"ListEvents", "AddNote", "AssignOwner"} <= links.keys()
    report_links = doc["paths"]["/workers/{worker_id}/reports"]["post"]["responses"]["201"]["links"]
    assert report_links["GetReport"]["parameters"] == {"report_id": "$response.body#/id"}


@pytest.mark.parametrize("key", ["tone", "café", "emoji \U0001f600", "tone\u200b", "tone\U000e0001", "a\U0001d173b",
                                 "x\U0001bca0", "tone\U000e0579"])
def test_the_published_memory_key_pattern_refuses_what_the_server_refuses(key: str) -> None:
    """Astral ignorables (tags, shorthand format controls) too: the pattern names them as characters, so a
    schema-valid key is never refused by text.memory_key."""
    doc = document(create_app(config.Settings(database_url="postgresql://unused")))
    pattern = doc["components"]["schemas"]["CreateMemory"]["properties"]["key"]["pattern"]
    try:
        text.memory_key(key)
        kept = True
    except ValueError:
        kept = False
    assert bool(re.search(pattern, key)) == kept
