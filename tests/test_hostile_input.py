"""Hostile input on every route: a 4xx problem+json, never a 5xx, a bare error page or a hang, and nothing written."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
import pytest
from helpers import ServerProcess, create_key, uid
from hypothesis import assume, given, settings
from hypothesis import strategies as st

pytestmark = pytest.mark.fault

COUNTED = ("threads", "workers", "triggers", "reports", "thread_events", "idempotency_keys", "api_keys")
JSON = {"content-type": "application/json"}
SQL_LIKE = ("'; DROP TABLE threads; --", "thr_x' OR '1'='1")

# Every write route: its method, path, a minimal valid body and the text field hostile values go into.
WRITES = [
    ("POST", "/threads", {"title": "t"}, "title"),
    ("POST", "/workers", {"name": "w"}, "name"),
    ("POST", "/triggers", {"source": "s", "summary": "s"}, "summary"),
    ("POST", "/workers/{worker}/reports", {"thread_id": "{thread}", "summary": "s"}, "summary"),
    ("POST", "/threads/{thread}/events", {"summary": "s"}, "summary"),
    ("POST", "/threads/{thread}/owners", {"worker_id": "{worker}"}, "worker_id"),
    ("POST", "/admin/keys", {"scope": "read", "label": "l"}, "label"),
    ("PATCH", "/threads/{thread}", {"summary": "s"}, "summary"),
]
WRITE_IDS = [f"{m} {p}" for m, p, _, _ in WRITES]
# The body fields that name an object (or, for keys and status, a closed vocabulary).
NAMING_FIELDS = {
    "POST /threads": ["id", "status"],
    "POST /workers": ["id"],
    "POST /triggers": ["id", "thread_id", "neighbours"],
    "POST /workers/{worker}/reports": ["id", "thread_id", "refs"],
    "POST /threads/{thread}/events": ["ref"],
    "POST /threads/{thread}/owners": ["worker_id"],
    "POST /admin/keys": ["scope"],
    "PATCH /threads/{thread}": ["status"],
}
ANY_FIELD = {"/triggers": "payload", "/workers/{worker}/reports": "body"}  # fields that take any JSON value

# Every GET route and the query parameters it reads.
GETS = {
    "/threads": ("limit", "cursor", "status", "owner", "app_id", "agent_id", "run_id"),
    "/threads/{thread}": ("budget",),
    "/threads/{thread}/events": ("limit", "cursor"),
    "/workers/{worker}": ("budget",),
    "/workers/{worker}/reports": ("limit", "cursor", "app_id", "agent_id", "run_id"),
    "/triggers/{trigger}": ("budget",),
    "/triggers/{trigger}/payload": (),
    "/reports/{report}": ("budget",),
    "/reports/{report}/body": (),
    "/ids/{thread}": (),
}  # (GET /admin/keys takes neither an ID nor a parameter)
DELETES = ("/threads/{}", "/workers/{}", "/triggers/{}", "/reports/{}", "/admin/keys/{}")

# Path segments, already percent-encoded as they go on the wire.
HOSTILE_IDS = [
    *(quote(s, safe="") for s in SQL_LIKE),
    "%00", "thr_a%00b", "%FF%FE", "thr_%ED%A0%80",  # NUL, invalid UTF-8, a UTF-8-encoded lone surrogate
    "thr_" + "x" * 65, "thr_" + "x" * 10_000, "%2E%2E", "thr_a%2Fb", "thr_%E2%80%AE", "%25", "thr_%20", "%5C",
    "thr_%0D%0ASet-Cookie:%20x=1",
]
NUMBERS = ["-1", "0", "1e400", "1" + "0" * 100, "abc", "", "NaN", "inf", "2.5", "0x10", "%00", "%FF", "9" * 5000]
HOSTILE_PARAMS = {
    "budget": [*NUMBERS, "4095", "1048577", "4096%00"],
    "limit": [*NUMBERS, "501"],
    "cursor": ["a.b", "%00", "x" * 600, *(quote(s, safe="") for s in SQL_LIKE), "..", "a.b.c", "%FF.%FE",
               "WzJd.AAAAAAAAAAAAAAAAAAAAAA"],
    "app_id": [*(quote(s, safe="") for s in SQL_LIKE), "%00", "x" * 65, "%FF", "a%20b", "", "**"],
}
HOSTILE_PARAMS["agent_id"] = HOSTILE_PARAMS["run_id"] = HOSTILE_PARAMS["app_id"]
FREE_FILTERS = [*(quote(s, safe="") for s in SQL_LIKE), "%00", "%FF", "%ED%A0%80", "x" * 5000, "%25"]


# ---- what counts as refused -------------------------------------------------------------------


def not_refused(r: httpx.Response) -> str | None:
    """None for a 4xx RFC 9457 problem (the only acceptable answer to hostile input); else what it was."""
    ctype = r.headers.get("content-type", "")
    ok = 400 <= r.status_code < 500 and ctype.startswith("application/problem+json")
    if ok:
        body = r.json()
        ok = {"type", "title", "status", "detail", "instance"} <= body.keys() and body["status"] == r.status_code
    return None if ok else f"{r.request.method} {str(r.request.url)[:160]} -> {r.status_code} {ctype} {r.text[:200]!r}"


def assert_all_refused(responses: list[httpx.Response]) -> None:
    wrong = [w for w in map(not_refused, responses) if w]
    assert not wrong, f"{len(wrong)} of {len(responses)} hostile requests were not a 4xx problem:\n" + "\n".join(wrong)


def row_counts(sql) -> dict[str, int]:
    row = sql("SELECT " + ", ".join(f"(SELECT count(*) FROM {t}) AS {t}" for t in COUNTED))[0]
    return dict(row)


@contextmanager
def writes_nothing(sql) -> Iterator[None]:
    before = row_counts(sql)
    yield
    assert row_counts(sql) == before, "a refused request wrote something"


def fill(text: str, target: dict[str, str]) -> str:
    for name, value in target.items():
        text = text.replace("{" + name + "}", value)
    return text


def with_raw_value(body: dict[str, Any], field: str, raw: bytes, target: dict[str, str]) -> bytes:
    """The body as JSON bytes, with `raw` (exact bytes, not re-encoded) as the value of `field`."""
    encoded = fill(json.dumps({**body, field: "\x01HOSTILE\x01"}), target).encode()
    return encoded.replace(b'"\\u0001HOSTILE\\u0001"', raw)


# ---- fixtures --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def admin_key(server: ServerProcess, database_url: str) -> str:
    """An admin key of tenant default: it may call every route, /admin/keys included."""
    return create_key(database_url, "default", "admin")


@pytest.fixture(scope="module")
def admin(base_url: str, admin_key: str) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {admin_key}"}) as c:
        yield c


@pytest.fixture(scope="module")
def target(admin: httpx.Client) -> dict[str, str]:
    """One live object of every kind, for the routes that need an existing ID."""
    def made(path: str, body: dict[str, Any]) -> str:
        r = admin.post(path, json=body)
        assert r.status_code == 201, r.text
        return r.json()["id"]

    worker, thread = made("/workers", {"name": "w"}), made("/threads", {"title": "t"})
    trigger = made("/triggers", {"source": "s", "summary": "s", "thread_id": thread, "payload": {"k": 1}})
    report = made(f"/workers/{worker}/reports", {"thread_id": thread, "summary": "s", "body": "b"})
    return {"worker": worker, "thread": thread, "trigger": trigger, "report": report}


@pytest.fixture(scope="module")
def small_server(database_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    proc = ServerProcess(database_url, tmp_path_factory.mktemp("hostile") / "server.log",
                         RECALL_MAX_BODY_BYTES="65536").start()
    yield proc
    proc.stop()


# ---- bodies ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_random_bytes_are_refused_and_write_nothing(admin, target, sql, method, path, body, field) -> None:
    @settings(max_examples=40, deadline=None)
    @given(st.binary())
    def send(content: bytes) -> None:
        try:
            assume(not isinstance(json.loads(content), dict))  # a valid object may be a valid request
        except ValueError:
            pass
        r = admin.request(method, fill(path, target), content=content, headers=JSON)
        assert not_refused(r) is None, not_refused(r)

    with writes_nothing(sql):
        send()


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_invalid_utf8_nul_and_lone_surrogates_in_text_are_refused(admin, target, sql, method, path, body,
                                                                  field) -> None:
    values = [b'"\xff\xfe"', b'"a\xc0\x80b"', b'"\xed\xa0\x80"', rb'"\u0000"', rb'"a\u0000b"', rb'"\ud800"',
              rb'"\udc00x"', rb'"\ud800\u0041"', rb'"\ud800\ud800"']
    with writes_nothing(sql):
        assert_all_refused([admin.request(method, fill(path, target), headers=JSON,
                                          content=with_raw_value(body, field, raw, target)) for raw in values])


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_json_nested_100000_levels_deep_is_refused(admin, target, sql, method, path, body, field) -> None:
    deep = [b"[" * 100_000 + b"]" * 100_000, b'{"a":' * 100_000 + b"1" + b"}" * 100_000]
    contents = list(deep)
    contents += [with_raw_value(body, field, d, target) for d in deep]
    if path in ANY_FIELD:  # where any JSON value is welcome, the nesting reaches the decoder's recursion
        contents += [with_raw_value(body, ANY_FIELD[path], d, target) for d in deep]
    with writes_nothing(sql):
        assert_all_refused([admin.request(method, fill(path, target), content=c, headers=JSON) for c in contents])


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_sql_looking_ids_in_bodies_are_refused(admin, target, sql, method, path, body, field) -> None:
    requests = []
    for name in NAMING_FIELDS[f"{method} {path}"]:
        for hostile in SQL_LIKE:
            value = [hostile] if name in ("neighbours", "refs") else hostile
            requests.append(json.loads(fill(json.dumps(body), target)) | {name: value})
    with writes_nothing(sql):
        assert_all_refused([admin.request(method, fill(path, target), json=b) for b in requests])
    assert sql("SELECT count(*) FROM threads")[0][0] > 0, "the threads table is still there"


def test_huge_numbers_are_refused(admin, target, sql) -> None:
    bodies = [("/threads", {"title": "t"}), ("/workers", {"name": "w"}), ("/triggers", {"source": "s", "summary": "s"}),
              (f"/workers/{target['worker']}/reports", {"thread_id": target["thread"], "summary": "s"})]
    numbers = [b"1e400", b"-1e400", str(10**100).encode(), str(-(10**100)).encode(), b"1e308", b"3.5", b"0",
               b"315360001", b"NaN", b"Infinity"]
    requests = [(path, with_raw_value(body, "ttl", n, target)) for path, body in bodies for n in numbers]
    requests += [("/triggers", with_raw_value({"source": "s", "summary": "s"}, "payload", b"[1e400]", target)),
                 (bodies[3][0], with_raw_value(bodies[3][1], "body", b'{"x": -1e400}', target))]
    with writes_nothing(sql):
        assert_all_refused([admin.post(path, content=content, headers=JSON) for path, content in requests])


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_form_and_multipart_bodies_are_refused(admin, target, sql, method, path, body, field) -> None:
    form = "&".join(f"{k}={quote(fill(v, target))}" for k, v in body.items())
    parts = "".join(f'--b0undary\r\nContent-Disposition: form-data; name="{k}"\r\n\r\n{fill(v, target)}\r\n'
                    for k, v in body.items()) + "--b0undary--\r\n"
    sent = [("application/x-www-form-urlencoded", form), ("multipart/form-data; boundary=b0undary", parts),
            ("text/plain", form), ("application/xml", "<thread><title>t</title></thread>")]
    with writes_nothing(sql):
        assert_all_refused([admin.request(method, fill(path, target), content=content.encode(),
                                          headers={"content-type": ctype}) for ctype, content in sent])


# ---- the size limit (a server of its own, with a 64 KiB limit) -----------------------------------


def padded(size: int, body: dict[str, Any], target: dict[str, str]) -> bytes:
    """A JSON body of exactly `size` bytes: the request plus one long text field."""
    head = fill(json.dumps(body), target)[:-1].encode() + b', "pad": "'
    return head + b"x" * (size - len(head) - 2) + b'"}'


@pytest.mark.parametrize(("method", "path", "body", "field"), WRITES, ids=WRITE_IDS)
def test_a_body_one_byte_over_the_limit_is_413(small_server, admin_key, target, sql, method, path, body,
                                               field) -> None:
    with writes_nothing(sql), httpx.Client(base_url=small_server.url, timeout=30,
                                           headers={"Authorization": f"Bearer {admin_key}", **JSON}) as c:
        over = padded(65_537, body, target)
        assert len(over) == 65_537

        def chunked() -> Iterator[bytes]:  # no Content-Length: the limit must hold while reading
            yield from (over[i:i + 4096] for i in range(0, len(over), 4096))

        responses = [c.request(method, fill(path, target), content=over),
                     c.request(method, fill(path, target), content=chunked())]
        assert_all_refused(responses)
        assert [r.status_code for r in responses] == [413, 413]


def test_a_body_of_exactly_the_limit_is_read(small_server, api_key, sql) -> None:
    trigger = uid("trg")
    prefix = json.dumps({"id": trigger, "source": "s", "summary": "s", "content_type": "text/plain"})[:-1].encode()
    prefix += b', "payload": "'
    payload = b"x" * (65_536 - len(prefix) - 2)
    body = prefix + payload + b'"}'
    assert len(body) == 65_536
    r = httpx.post(f"{small_server.url}/triggers", content=body,
                   headers={"Authorization": f"Bearer {api_key}", **JSON}, timeout=30)
    assert r.status_code == 201, r.text
    assert sql("SELECT payload FROM triggers WHERE id = $1", trigger)[0][0] == payload


def test_a_declared_huge_body_is_413_at_once_without_waiting_for_it(small_server, api_key, sql) -> None:
    with writes_nothing(sql):
        head = raw_request(small_server.url, b"POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
                           + api_key.encode() + b"\r\nContent-Type: application/json\r\n"
                           b"Content-Length: 999999999999\r\n\r\n{", timeout=10)
    assert head.startswith(b"HTTP/1.1 413 ") and b"application/problem+json" in head, head


# ---- headers ------------------------------------------------------------------------------------------


def raw_request(url: str, request: bytes, timeout: float = 30) -> bytes:
    """Send bytes httpx would refuse to send; return the response head and body (first 64 KiB)."""
    where = urlsplit(url)
    with socket.create_connection((where.hostname, where.port), timeout=timeout) as s:
        s.sendall(request)
        data = b""
        while b"\r\n\r\n" not in data or len(data) < data.index(b"\r\n\r\n") + 4 + content_length(data):
            chunk = s.recv(65536)
            if not chunk:
                break
            data += chunk
    return data


def content_length(data: bytes) -> int:
    for line in data.split(b"\r\n\r\n")[0].split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            return int(value)
    return 0


IDEMPOTENT_POSTS = [w for w in WRITES if w[0] == "POST" and w[1] != "/admin/keys"]  # /admin/keys stores no outcome


@pytest.mark.parametrize(("method", "path", "body", "field"), IDEMPOTENT_POSTS,
                         ids=[f"{m} {p}" for m, p, _, _ in IDEMPOTENT_POSTS])
def test_a_long_or_malformed_idempotency_key_refuses_even_a_valid_request(admin, target, sql, method, path, body,
                                                                          field) -> None:
    keys = ["k" * 256, "k" * 60_000, "a b", "a\tb", "é".encode().decode("latin-1"), "\x80\xff"]
    request = json.loads(fill(json.dumps(body), target))
    with writes_nothing(sql):
        assert_all_refused([admin.post(fill(path, target), json=request,
                                       headers={"Idempotency-Key": key.encode("latin-1")}) for key in keys])
        # past RECALL_MAX_HEADER_BYTES the HTTP server answers before the application: a bare 431 (or 400)
        assert admin.post(fill(path, target), json=request, headers={"Idempotency-Key": "k" * 100_000}).status_code in (400, 431)


@pytest.mark.parametrize("control", [b"\x00", b"\x01", b"\x1b[31m", b"\x7f", b"a\rb"])
def test_a_header_with_control_characters_is_refused_and_writes_nothing(base_url, api_key, sql, control) -> None:
    """Control characters make the request invalid HTTP (RFC 9110 field values exclude them), so
    the HTTP server's parser answers 400 before the application runs: a bare 400, not a problem body."""
    body = b'{"title": "t"}'
    request = (b"POST /threads HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " + api_key.encode()
               + b"\r\nContent-Type: application/json\r\nIdempotency-Key: k" + control
               + b"k\r\nContent-Length: " + str(len(body)).encode() + b"\r\nConnection: close\r\n\r\n" + body)
    with writes_nothing(sql):
        response = raw_request(base_url, request)
    head = response.partition(b"\r\n\r\n")[0]
    assert head.split(b" ")[1].startswith(b"4"), response


# ---- paths and query parameters -----------------------------------------------------------------------


def test_hostile_ids_in_every_path_are_refused(admin, target, sql) -> None:
    requests: list[tuple[str, str, Any]] = []
    for bad in HOSTILE_IDS:
        everywhere = {name: bad for name in target}
        requests += [("GET", fill(path, everywhere), None) for path in GETS if "{" in path]
        requests += [("DELETE", path.format(bad), None) for path in DELETES]
        requests += [(method, fill(path, everywhere), json.loads(fill(json.dumps(body), target)))
                     for method, path, body, _ in WRITES if "{" in path]  # a valid body, so only the ID is wrong
    with writes_nothing(sql):
        assert_all_refused([admin.request(method, path, json=body) for method, path, body in requests])


def test_hostile_query_parameters_on_every_get_route_are_refused(admin, target, sql) -> None:
    requests = [f"{fill(path, target)}?{param}={value}"
                for path, params in GETS.items() for param in params if param in HOSTILE_PARAMS
                for value in HOSTILE_PARAMS[param]]
    with writes_nothing(sql):
        assert_all_refused([admin.get(r) for r in requests])


def test_hostile_filter_values_match_nothing(admin, target, sql) -> None:
    """status and owner are free-form filters: any text may be refused, or else it must match no thread."""
    wrong = []
    with writes_nothing(sql):
        for param in ("status", "owner"):
            for value in FREE_FILTERS:
                r = admin.get(f"/threads?{param}={value}")
                if r.status_code == 200 and r.json()["data"] == [] or not_refused(r) is None:
                    continue
                wrong.append(not_refused(r))
    assert not wrong, wrong


# ---- hostile but valid: stored exactly, and the tables still exist -----------------------------------


def test_sql_looking_and_odd_text_is_just_text_and_round_trips(admin, target, sql) -> None:
    texts = [*SQL_LIKE, "Robert'); DROP TABLE workers;--", "💥" * 50, "\\x00 %s %n {}"]
    assert admin.post("/threads", json={"title": "\u202eevil\u202c"}).status_code == 400  # bidi controls: not one line
    for text in texts:
        thread = admin.post("/threads", json={"title": text, "summary": text})
        assert thread.status_code == 201, thread.text
        view = admin.get(f"/threads/{thread.json()['id']}").json()
        assert (view["title"], view["summary"]) == (text, text)
        note = admin.post(f"/threads/{target['thread']}/events", json={"summary": text})
        assert note.status_code == 201 and note.json()["summary"] == text
        trigger = admin.post("/triggers", json={"source": "s", "summary": text, "external_id": text + uid("x")})
        assert trigger.status_code == 201 and admin.get(f"/triggers/{trigger.json()['id']}").json()["summary"] == text
        assert admin.get("/threads", params={"status": text}).json()["data"] == []
    tables = sql("SELECT count(*) FROM pg_tables WHERE schemaname = 'public' AND tablename = ANY($1)", list(COUNTED))
    assert tables[0][0] == len(COUNTED)


@pytest.mark.parametrize("payload", [rb'"a\u0000b"', rb'{"a\u0000b": "x\u0000"}', str(10**100).encode(),
                                     b'{"n": -' + str(10**100).encode() + b"}", b"[" * 500 + b"]" * 500,
                                     rb'"\ud83d\udca5"'])
def test_payloads_with_nul_huge_integers_or_nesting_round_trip_exactly(admin, payload: bytes) -> None:
    ctype = "text/plain" if payload == rb'"a\u0000b"' else "application/json"
    body = with_raw_value({"source": "s", "summary": "s", "content_type": ctype}, "payload", payload, {})
    made = admin.post("/triggers", content=body, headers=JSON)
    assert made.status_code == 201, made.text
    stored = admin.get(f"/triggers/{made.json()['id']}/payload").content
    expected = json.loads(payload).encode() if ctype == "text/plain" else payload
    assert stored == expected or json.loads(stored) == json.loads(payload)


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data", None])
def test_a_json_body_under_another_content_type_is_refused_or_read_as_json(admin, ctype, sql) -> None:
    thread = uid("thr")
    r = admin.post("/threads", content=json.dumps({"id": thread, "title": "t"}).encode(),
                   headers={"content-type": ctype} if ctype else {})
    if r.status_code == 415:
        assert not_refused(r) is None, not_refused(r)
        assert sql("SELECT count(*) FROM threads WHERE id = $1", thread)[0][0] == 0
    else:
        assert r.status_code == 201, r.text
        assert admin.get(f"/threads/{thread}").json()["title"] == "t"
