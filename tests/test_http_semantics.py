"""HTTP details a client or a browser relies on: HEAD, JSON media types, repeated keys, one-line text,
whole-number parameters."""

from __future__ import annotations

import httpx
import pytest
from helpers import Graph, assert_problem, uid


@pytest.fixture(scope="module")
def objects(base_url: str, api_key: str) -> dict[str, str]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {api_key}"}) as c:
        g = Graph(c)
        worker, thread = g.worker()["id"], g.thread()["id"]
        said = c.post(f"/threads/{thread}/messages", json={"messages": [{"role": "user", "content": "hi"}]})
        assert said.json()["messages"][0]["seq"] == 1
        trigger = g.trigger(thread_id=thread)["id"]
        report = g.report(worker, thread, refs=[trigger])["id"]
        memory = c.post("/memories", json={"namespace": ["head"], "key": "k", "kind": "fact", "summary": "s",
                                           "value": {"a": 1}}).json()["id"]
    return {"worker": worker, "thread": thread, "trigger": trigger, "report": report, "memory": memory}


def get_routes(base_url: str) -> list[str]:
    """Every GET path template the server publishes."""
    document = httpx.get(base_url + "/schema/openapi.json", timeout=30).json()
    return [path for path, item in document["paths"].items() if "get" in item]


def test_head_answers_every_get_route_like_get_without_a_body(client: httpx.Client, base_url: str,
                                                              objects: dict[str, str]) -> None:
    filled = {"{thread_id}": objects["thread"], "{worker_id}": objects["worker"],
              "{trigger_id}": objects["trigger"], "{report_id}": objects["report"], "{object_id}": objects["report"],
              "{key_id}": "0123456789abcdef", "{memory_id}": objects["memory"], "{run_id}": "head-run",
              "{seq}": "1", "{request_id}": "head-request"}
    paths = []
    for template in get_routes(base_url):
        path = template
        for name, value in filled.items():
            path = path.replace(name, value)
        assert "{" not in path, f"no value for {template}"
        paths.append(path)
    paths += [f"/threads/{uid('thr')}", "/threads?limit=1e3", "/no/such/route"]  # misses and errors too
    assert len(paths) >= 12
    for path in paths:
        got, head = client.get(path), client.head(path)
        assert head.status_code == got.status_code, path
        assert head.content == b"", path
        for header in ("content-type", "etag", "content-length", "cache-control", "x-content-type-options"):
            if header == "content-length" and path == "/metrics":
                continue  # the counters move between the two requests
            assert head.headers.get(header) == got.headers.get(header), (path, header)


def test_head_of_a_payload_honours_if_none_match(client: httpx.Client, objects: dict[str, str]) -> None:
    path = f"/triggers/{objects['trigger']}/payload"
    tag = client.get(path).headers["etag"]
    assert client.head(path, headers={"If-None-Match": tag}).status_code == 304


def test_options_lists_head_where_get_is(client: httpx.Client, objects: dict[str, str]) -> None:
    assert "HEAD" in client.options(f"/threads/{objects['thread']}").headers["allow"].split(", ")
    assert "HEAD" not in client.options("/admin/keys/0123456789abcdef").headers["allow"].split(", ")


@pytest.mark.parametrize("content_type", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data",
                                          "application/jsonx", "text/json", None])
def test_a_json_body_under_another_media_type_is_415(client: httpx.Client, sql, content_type) -> None:
    thread = uid("thr")
    request = client.build_request("POST", "/threads", content=f'{{"id": "{thread}", "title": "t"}}'.encode())
    request.headers.pop("content-type", None)
    if content_type:
        request.headers["content-type"] = content_type
    r = client.send(request)
    assert_problem(r, 415, "application/json")
    assert sql("SELECT 1 FROM threads WHERE id = $1", thread) == []


@pytest.mark.parametrize("content_type", ["application/json", "application/json; charset=utf-8",
                                          "Application/JSON", "application/merge-patch+json"])
def test_json_and_plus_json_media_types_are_accepted(client: httpx.Client, content_type: str) -> None:
    r = client.post("/threads", content=f'{{"id": "{uid("thr")}", "title": "t"}}'.encode(),
                    headers={"content-type": content_type})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("body", [
    '{"id": "%s", "title": "a", "title": "b"}',
    '{"id": "%s", "title": "a", "title" : "b"}',
    '{"id": "%s", "title": "a:b", "labels": 1, "title": "\\u0062"}',
    '{"id": "%s", "id": "%s", "title": "t"}',
])
def test_a_repeated_key_in_a_json_object_is_400(client: httpx.Client, sql, body: str) -> None:
    thread = uid("thr")
    text = body.replace("%s", thread)
    r = client.post("/threads", content=text.encode(), headers={"content-type": "application/json"})
    assert_problem(r, 400, "repeats the key")
    assert sql("SELECT 1 FROM threads WHERE id = $1", thread) == []


def test_a_repeated_key_deep_inside_a_payload_is_400(client: httpx.Client) -> None:
    body = '{"source": "s", "summary": "x", "payload": {"a": [{"k": 1, "k": 2}]}}'
    assert_problem(client.post("/triggers", content=body.encode(), headers={"content-type": "application/json"}),
                   400, "repeats the key 'k'")


def test_colons_and_escapes_in_values_are_not_mistaken_for_keys(client: httpx.Client) -> None:
    body = ('{"source": "s", "summary": "at 12:30: \\"x\\": done \\u00e9", '
            '"payload": {"url": "http://a:1/b", "t": "\\u003a\\":", "n": {"a": ":"}}}')
    r = client.post("/triggers", content=body.encode(), headers={"content-type": "application/json"})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\u0085", "\u202a", "\u202b", "\u202c", "\u202d", "\u202e",
                                  "\u2066", "\u2067", "\u2068", "\u2069", "\u200e", "\u200f", "\u061c"])
def test_summaries_and_titles_refuse_line_separators_and_bidi_controls(client: httpx.Client, char: str) -> None:
    assert_problem(client.post("/threads", json={"id": uid("thr"), "title": f"a{char}b"}), 400)
    assert_problem(client.post("/threads", json={"id": uid("thr"), "title": "t", "summary": f"a{char}b"}), 400)


def test_one_line_text_still_takes_any_printable_script(client: httpx.Client) -> None:
    r = client.post("/threads", json={"id": uid("thr"), "title": "café 中文 עברית العربية 🙂", "summary": "naïve"})
    assert r.status_code == 201, r.text


@pytest.mark.parametrize("query", ["budget=1e6", "budget=4096.0", "budget=+5000", "budget=0x1000", "budget= 5000"])
def test_budget_takes_whole_numbers_only(client: httpx.Client, objects: dict[str, str], query: str) -> None:
    assert_problem(client.get(f"/threads/{objects['thread']}?{query}"), 400, "whole number")


@pytest.mark.parametrize("query", ["limit=1e1", "limit=5.0", "limit=-0"])
def test_limit_takes_whole_numbers_only(client: httpx.Client, query: str) -> None:
    assert_problem(client.get(f"/threads?{query}"), 400, "whole number")


def test_whole_numbers_are_still_accepted(client: httpx.Client, objects: dict[str, str]) -> None:
    assert client.get(f"/threads/{objects['thread']}?budget=5000").status_code == 200
    assert client.get("/threads?limit=5").status_code == 200


def test_non_latin_query_names_next_to_budget_are_no_500(client: httpx.Client, objects: dict[str, str]) -> None:
    r = client.get(f"/threads/{objects['thread']}?%F3%B7%98%8Ebudget=1&budget=5000&limit%E2%80%AE=x")
    assert r.status_code in (200, 400), r.text
