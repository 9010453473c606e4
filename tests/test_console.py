"""The console (recall_server/console/): served under a strict policy, and walked by clicking in a real
browser (Playwright driving Chromium) against a real server process."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, tenant_with_keys, uid

from recall_server import demo
from recall_server.routes.console import CSP

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: pip install -e '.[test]'")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
if not Path(CHROMIUM).exists():
    pytest.skip(f"NO BROWSER: the console's browser tests need Debian's chromium at {CHROMIUM} "
                "(.ci/run installs it: apt-get install -y chromium)", allow_module_level=True)

HOSTILE = '<img src=x onerror="window.__pwned=1">'
SCRIPT = "<script>window.__pwned=2</script>"


@pytest.fixture(scope="module")
def tenant(database_url: str, server: ServerProcess) -> dict[str, str]:
    """A tenant of this module's own, with a key of each scope."""
    return tenant_with_keys(database_url, "console")


@pytest.fixture(scope="module")
def writer(base_url: str, tenant: dict[str, str]) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {tenant['write']}"}) as c:
        yield c


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


class Tab:
    """A fresh browser context (its own sessionStorage) on the console, recording what the page did."""

    def __init__(self, browser: Any, base_url: str, **context: Any) -> None:
        self.base_url = base_url
        self.context = browser.new_context(**context)
        self.page = self.context.new_page()
        self.page.set_default_timeout(10_000)
        self.console: list[str] = []
        self.errors: list[str] = []
        self.requests: list[Any] = []
        self.page.on("console", lambda m: self.console.append(f"{m.type}: {m.text}"))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("request", lambda r: self.requests.append(r))

    def open(self, fragment: str = "") -> None:
        self.page.goto(self.base_url + "/console" + fragment)
        self.page.wait_for_selector("body[data-ready='1']")

    def sign_in(self, key: str) -> None:
        self.open()
        self.page.fill("#key", key)
        self.page.click("#sign-in button")
        self.page.wait_for_selector("#nav:not([hidden])")

    def go(self, fragment: str) -> None:
        self.page.evaluate("f => { location.hash = f }", fragment)

    def api_requests(self, path_part: str) -> list[Any]:
        return [r for r in self.requests if path_part in r.url and "/console" not in r.url]

    def problems(self) -> list[str]:
        """Errors the page raised or logged (a CSP violation is logged as an error); not the API's own 4xx
        answers, which the browser logs too and the console shows as problems."""
        return self.errors + [m for m in self.console if m.startswith("error") and "Failed to load resource" not in m]


@pytest.fixture()
def tab(browser: Any, base_url: str) -> Iterator[Tab]:
    t = Tab(browser, base_url)
    yield t
    t.context.close()


# ---- what the server serves ----------------------------------------------------------------------


class Scripts(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def test_the_console_is_served_under_a_strict_policy(base_url: str) -> None:
    page = httpx.get(base_url + "/console")
    assert page.status_code == 200
    assert page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert policy == CSP
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == "'self'"  # no 'unsafe-inline', no 'unsafe-eval', no other origin
    assert directives["connect-src"] == "'self'"
    assert directives["frame-ancestors"] == "'none'"
    assert directives["require-trusted-types-for"] == "'script'"
    assert page.headers["x-frame-options"] == "DENY"
    assert page.headers["x-content-type-options"] == "nosniff"
    parsed = Scripts()
    parsed.feed(page.text)
    scripts = [attrs for tag, attrs in parsed.tags if tag == "script"]
    assert scripts and all(a.get("src", "").startswith("/console/") for a in scripts), "no inline script"
    assert not [attrs for _, attrs in parsed.tags if any(name.startswith("on") or name == "style" for name in attrs)]
    assert not [a for tag, a in parsed.tags if tag == "link" and not a["href"].startswith("/console/")]

    script = httpx.get(base_url + "/console/console.js")
    assert script.status_code == 200 and script.headers["content-type"] == "text/javascript; charset=utf-8"
    assert script.headers["content-security-policy"] == CSP
    assert httpx.get(base_url + "/console/console.css").headers["content-type"] == "text/css; charset=utf-8"
    assert_problem(httpx.get(base_url + "/console/secrets.txt"), 404, "secrets.txt")
    assert_problem(httpx.get(base_url + "/console/..%2Fapp.py"), 404)

    root = httpx.get(base_url + "/")
    assert root.status_code == 302 and root.headers["location"] == "/console"
    assert httpx.head(base_url + "/console").status_code == 200


def test_no_html_sink_in_the_console_script() -> None:
    """Server data reaches the page only as text: the script never assigns markup."""
    from recall_server.routes.console import FILES

    code = FILES["console.js"][0].decode()
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval(", "new Function"):
        assert sink not in code.split("// ---- DOM")[1], sink


# ---- in the browser ------------------------------------------------------------------------------


def test_sign_in_keeps_the_key_in_the_tab_and_out_of_urls(tab: Tab, tenant: dict[str, str]) -> None:
    tab.open()
    tab.page.fill("#key", "rk_0000000000000000.wrong")
    tab.page.click("#sign-in button")
    tab.page.wait_for_selector(".error")
    assert "401" in tab.page.text_content(".error")
    assert tab.page.is_hidden("#nav")

    tab.sign_in(tenant["write"])
    assert tenant["name"] in tab.page.text_content("#whoami")
    assert tab.page.evaluate("() => sessionStorage.getItem('recall.key')") == tenant["write"]
    assert tab.page.evaluate("() => localStorage.length + document.cookie.length") == 0
    secret = tenant["write"].split(".", 1)[1]
    assert not [r.url for r in tab.requests if secret in r.url or tenant["write"][:19] in r.url]
    api = tab.api_requests("/key")
    assert api and all(r.headers.get("authorization") == f"Bearer {tenant['write']}" for r in api[1:])

    tab.page.reload()  # the same tab keeps its key
    tab.page.wait_for_selector("#nav:not([hidden])")
    tab.page.click("#sign-out")
    tab.page.wait_for_selector("#sign-in")
    assert tab.page.evaluate("() => sessionStorage.length") == 0
    assert tab.problems() == []


def test_a_key_revoked_in_use_signs_the_tab_out(tab: Tab, base_url: str, tenant: dict[str, str]) -> None:
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant['admin']}"}) as admin:
        made = admin.post("/admin/keys", json={"scope": "read", "label": "revoked in use"}).json()
        tab.sign_in(made["key"])
        assert admin.delete(f"/admin/keys/{made['id']}").status_code == 200
    tab.go("#/id/thr_pr_412")
    tab.page.wait_for_selector("#sign-in")
    assert "revoked" in tab.page.text_content("main .error")
    assert tab.page.is_hidden("#nav")
    assert tab.page.evaluate("() => sessionStorage.length") == 0


@pytest.mark.slow
def test_the_pr_412_story_walked_by_clicking(tab: Tab, base_url: str, tenant: dict[str, str]) -> None:
    demo.load(base_url, tenant["write"])
    tab.sign_in(tenant["read"])
    page = tab.page
    page.fill("#goto-id", "thr_pr_412")
    started = time.perf_counter()
    page.click("#goto button")
    page.wait_for_selector("#events li.event")
    loaded = time.perf_counter() - started
    print(f"\nthread page (inline view, first events page, backlinks, reads) loaded in {loaded * 1000:.0f} ms")
    assert page.text_content("#object-summary") == "PR #412: add retry logic to the payments client"
    assert len(tab.api_requests("/threads/thr_pr_412/events")) == 1  # one page of the log, not the whole log

    page.click("tr[data-field='owner_workers'] a.id[data-id='wkr_77a0']")
    page.wait_for_selector("#object-id:text('wkr_77a0')")
    page.click("tr[data-field='reports'] a.id[data-id='rpt_412a']")
    page.wait_for_selector("#object-id:text('rpt_412a')")
    page.click("tr[data-field='refs'] a.id[data-id='trg_8f21']")
    page.wait_for_selector("#object-id:text('trg_8f21')")
    page.wait_for_selector("#backlinks li:has-text('cites') a.id[data-id='rpt_412a']")  # the report cites it

    page.fill("#grep-pattern", "payment timeout")
    page.click("#grep button")
    match = page.wait_for_selector("#grep-matches li.match")
    assert "line 201" in match.text_content()
    assert "payment timeout after 30s" in match.text_content()
    page.click("#grep-matches button.read-range")
    page.wait_for_function("() => document.querySelector('#content-payload').textContent.includes('payment timeout')")
    assert page.text_content("#content-where-payload").startswith("bytes ")

    page.fill("#range-first-payload", "0")
    page.fill("#range-last-payload", "5")
    page.click("#range-payload button")
    page.wait_for_function("() => document.querySelector('#content-payload').textContent === 'PASSED'")
    assert tab.problems() == []


def test_the_sign_in_page_says_where_a_key_is(tab: Tab) -> None:
    tab.open()
    where = tab.page.text_content("#key-where")
    assert "<data dir>/api-key" in where and "~/.local/share/recall-server/api-key" in where
    assert "recall-server keys create" in where


def test_a_missing_id_is_said_once_and_a_gone_one_keeps_its_reads(tab: Tab, writer: httpx.Client,
                                                                   tenant: dict[str, str]) -> None:
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{uid('thr')}")
    tab.page.wait_for_selector("main .error:has-text('404')")
    tab.page.wait_for_timeout(500)  # time for any other read of the page to answer
    assert tab.page.locator("main .error").count() == 1
    assert tab.page.locator("main h2:text('Runs that read it')").count() == 0

    gone = Graph(writer).trigger()["id"]
    assert writer.delete(f"/triggers/{gone}").status_code in (200, 204)
    tab.go(f"#/id/{gone}")
    tab.page.wait_for_selector("#object-reads ~ p.note:text('No traced run has read it.')")  # 200: its audit
    assert tab.page.locator("main .error").count() == 1 and "410" in tab.page.text_content("main .error")


def test_adding_a_note_refreshes_the_inline_view(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    thread = Graph(writer).thread()["id"]
    for i in range(3):
        Graph(writer).note(thread, f"note {i}")
    tab.sign_in(tenant["write"])
    tab.go(f"#/id/{thread}")
    total = "n => document.querySelector(\"tr[data-field='events_total'] td\")?.textContent === n"
    tab.page.wait_for_function(total, arg="3")
    before = tab.page.text_content("tr[data-field='updated_at'] td")
    tab.page.fill("#note-summary", "the fourth")
    tab.page.click("#add-note button")
    tab.page.wait_for_selector("#events li.event:has-text('the fourth')")
    tab.page.wait_for_function(total, arg="4")
    assert tab.page.text_content("tr[data-field='updated_at'] td") != before
    assert tab.problems() == []


def test_a_views_links_lead_into_the_console(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    graph = Graph(writer)
    worker = graph.worker()["id"]
    thread = graph.thread()["id"]
    assert writer.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
    trigger = graph.trigger(thread_id=thread)["id"]
    for i in range(30):  # the event log above the backlinks is long
        graph.note(thread, f"note {i}")
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{trigger}")
    rows = tab.page.wait_for_selector("tr[data-field='links']")
    hrefs = {a.get_attribute("href") for a in rows.query_selector_all("a")}
    assert hrefs == {f"#/id/{trigger}", f"#/id/{trigger}?at=payload", f"#/id/{trigger}?at=backlinks",
                     f"#/id/{thread}"}
    tab.page.click("tr[data-link='thread'] a")
    tab.page.wait_for_selector(f"#object-id:text('{thread}')")

    tab.page.click("tr[data-link='backlinks'] a")
    tab.page.wait_for_selector(f"#backlinks a.id[data-id='{trigger}']")
    tab.page.wait_for_function("() => { const r = document.querySelector('[data-at=backlinks]').getBoundingClientRect();"
                               " return r.top >= 0 && r.bottom <= innerHeight }")  # scrolled to, below the log
    assert tab.page.evaluate("() => scrollY") > 0

    tab.go(f"#/id/{worker}")
    tab.page.click("tr[data-link='threads'] a")
    tab.page.wait_for_selector(f"#read a.id[data-id='{thread}']")
    assert tab.page.text_content("#read-path") == f"/threads?owner={worker}"
    assert tab.page.locator("tr[data-link] a[href^='/']").count() == 0  # never a bare API URL (no key)
    assert tab.problems() == []


def test_backlinks_say_each_relation(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    graph = Graph(writer)
    worker = graph.worker()["id"]
    thread = graph.thread()["id"]
    trigger = graph.trigger(thread_id=thread)["id"]
    report = graph.report(worker, thread)["id"]
    other = graph.thread()["id"]
    assert writer.post(f"/threads/{other}/events", json={"summary": "see", "ref": thread}).status_code == 201
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{thread}")
    tab.page.wait_for_function("() => document.querySelectorAll('#backlinks li').length === 3")
    said = {li.query_selector("a.id").text_content(): li.text_content()
            for li in tab.page.query_selector_all("#backlinks li")}
    assert said[trigger].startswith(f"{trigger} trigger, in this thread")
    assert said[report].startswith(f"{report} report, in this thread")
    assert said[other].startswith(f"{other} thread, an event in its log refers to it")


def test_no_sideways_scroll_on_a_phone(browser: Any, base_url: str, writer: httpx.Client,
                                       tenant: dict[str, str]) -> None:
    word = "zq" + uuid.uuid4().hex[:10]
    long = uuid.uuid4().hex * 4  # 128 characters, nowhere to break
    graph = Graph(writer)
    worker = graph.worker(id="wkr_" + long[:64], name=long[:80], summary=long)["id"]
    thread = graph.thread(id="thr_" + long[:64], title=long[:120], summary=f"{word} {long}"[:200])["id"]
    assert writer.post(f"/threads/{thread}/owners", json={"worker_id": worker}).status_code == 201
    trigger = graph.trigger(id="trg_" + long[:64], thread_id=thread, summary=long,
                            payload="x" * 40_000, content_type="text/plain")["id"]
    assert writer.post(f"/threads/{thread}/events", json={"summary": long, "ref": trigger}).status_code == 201
    tab = Tab(browser, base_url, viewport={"width": 390, "height": 844})
    try:
        tab.open()
        wide = "() => document.scrollingElement.scrollWidth - innerWidth"
        assert tab.page.evaluate(wide) <= 0, "the sign-in page"
        tab.sign_in(tenant["admin"])
        for fragment, ready in ((f"#/id/{thread}", "#events li.event"), (f"#/id/{trigger}", "#grep"),
                                (f"#/search?q={word}&mode=lexical", "#hits li.hit"), ("#/", "#threads li"),
                                ("#/admin", "#keys tr")):
            tab.go(fragment)
            tab.page.wait_for_selector(ready)
            tab.page.wait_for_function("() => !document.querySelector('main button.more:disabled')")
            assert tab.page.evaluate(wide) <= 0, fragment
    finally:
        tab.context.close()


def test_the_event_log_pages_with_the_cursor(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    thread = Graph(writer).thread()["id"]
    for i in range(60):
        Graph(writer).note(thread, f"note {i}")
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{thread}")
    events = tab.page.locator("#events li.event")
    tab.page.wait_for_selector("#events li.event")
    assert events.count() == 25
    for shown in (50, 60):
        tab.page.click("#events ~ button.more")
        tab.page.wait_for_function(f"() => document.querySelectorAll('#events li.event').length === {shown}")
    assert tab.page.is_hidden("#events ~ button.more")
    texts = events.all_text_contents()
    assert [t.rsplit(" ", 1)[-1] for t in texts] == [str(i) for i in range(60)]  # each once, in order
    assert len(tab.api_requests(f"/threads/{thread}/events")) == 3


def test_search_leads_to_objects(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    word = "zq" + uuid.uuid4().hex[:10]
    thread = Graph(writer).thread(summary=f"the {word} outage")["id"]
    tab.sign_in(tenant["read"])
    tab.page.fill("#search-q", word)
    tab.page.select_option("#search-mode", "lexical")
    tab.page.check("#search input[value='thread']")
    tab.page.click("#search button")
    hit = tab.page.wait_for_selector(f"#hits li.hit:has(a.id[data-id='{thread}'])")
    assert word in hit.text_content() and hit.query_selector("mark") is not None
    assert tab.page.text_content("#search-ran").startswith("lexical search")
    request = tab.api_requests("/search?")[-1]
    assert "type=thread" in request.url and "mode=lexical" in request.url
    hit.query_selector(f"a.id[data-id='{thread}']").click()
    tab.page.wait_for_selector(f"#object-id:text('{thread}')")


def test_search_shows_each_hits_relevance_and_says_when_nothing_is_close(
    tab: Tab, writer: httpx.Client, tenant: dict[str, str]
) -> None:
    word = "zq" + uuid.uuid4().hex[:10]
    thread = Graph(writer).thread(summary=f"the {word} outage")["id"]
    tab.sign_in(tenant["read"])
    tab.go(f"#/search?q={word}&mode=lexical")
    hit = tab.page.wait_for_selector(f"#hits li.hit:has(a.id[data-id='{thread}'])")
    assert 0.5 <= float(hit.query_selector(".score").text_content()) <= 1
    tab.go(f"#/search?q=zq{uuid.uuid4().hex[:10]}&mode=lexical")  # a word nothing has
    tab.page.wait_for_selector("main p.note:text('No close match.')")
    assert tab.page.text_content("#search-ran") == "lexical search: no close match"
    assert tab.page.locator("#hits li").count() == 0 and tab.page.is_hidden("#nearest")
    tab.go(f"#/search?q={word}&mode=exact")
    hit = tab.page.wait_for_selector(f"#hits li.hit:has(a.id[data-id='{thread}'])")
    assert hit.query_selector(".score") is None  # an exact page's ts_rank is no relevance


@pytest.mark.slow
def test_a_runs_recall_is_a_timeline_of_hops_with_their_state_now(tab: Tab, writer: httpx.Client,
                                                                    tenant: dict[str, str]) -> None:
    run = "console-" + uuid.uuid4().hex[:8]
    graph = Graph(writer)
    thread = graph.thread()["id"]
    trigger = graph.trigger(thread_id=thread)["id"]
    key = uid("k")
    memory = writer.post("/memories", json={"namespace": ["console"], "key": key, "value": "v1"}).json()["id"]
    for path in (f"/threads/{thread}", f"/triggers/{trigger}", f"/memories/{memory}"):
        assert writer.get(path, headers={"X-Recall-Run": run}).status_code == 200
    assert writer.post("/memories", json={"namespace": ["console"], "key": key, "value": "v2"}).status_code == 201
    assert writer.delete(f"/triggers/{trigger}").status_code in (200, 204)
    deadline = time.monotonic() + 15
    while len(writer.get(f"/runs/{run}/reads").json()["data"]) < 3 and time.monotonic() < deadline:
        time.sleep(0.2)  # the trace settles after two flush intervals

    tab.sign_in(tenant["read"])
    tab.page.fill("#run-id", run)
    tab.page.click("#run button")
    tab.page.wait_for_function("() => document.querySelectorAll('#timeline li.hop .state').length === 3 && "
                               "[...document.querySelectorAll('#timeline .state')].every(s => s.textContent)")
    hops = tab.page.locator("#timeline li.hop")
    assert [hops.nth(i).get_attribute("data-object") for i in range(3)] == [thread, trigger, memory]
    states = tab.page.locator("#timeline .state").all_text_contents()
    assert states == ["live", "gone (deleted or expired)", "superseded"]
    assert "/triggers/{trigger_id}" in hops.nth(1).text_content()

    hops.nth(0).locator("a.id").click()
    tab.page.wait_for_selector(f"#object-reads a.run:text('{run}')")  # and back: the runs that read the thread
    assert tab.problems() == []


def test_a_memorys_versions_side_by_side(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    key = uid("k")
    source = Graph(writer).trigger()["id"]
    made = [writer.post("/memories", json={"namespace": ["console", "prefs"], "key": key, "value": f"value {n}",
                                           "summary": f"summary {n}", "sources": [source] if n == 2 else [],
                                           "confirmed": "user" if n == 3 else "unconfirmed"}).json()["id"]
            for n in (1, 2, 3)]
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{made[0]}")
    tab.page.click("#versions-link")
    tab.page.wait_for_function("() => document.querySelectorAll('#versions .version .detail > table').length === 3")
    columns = tab.page.locator("#versions .version")
    assert [columns.nth(i).get_attribute("data-id") for i in range(3)] == made[::-1]  # newest first
    assert columns.locator(".status").all_text_contents() == ["current", "superseded", "superseded"]
    middle = columns.nth(1)
    assert made[2] in middle.locator("tr[data-field='superseded_by']").text_content()
    assert made[0] in middle.locator("tr[data-field='supersedes']").text_content()
    assert source in middle.locator("tr[data-field='sources']").text_content()
    assert "user" in columns.nth(0).locator("tr[data-field='confirmed']").text_content()
    assert "value 2" in middle.locator("pre.content").text_content()


@pytest.mark.slow
def test_a_read_key_sees_no_write_controls(tab: Tab, browser: Any, base_url: str, writer: httpx.Client,
                                           tenant: dict[str, str]) -> None:
    thread = Graph(writer).thread()["id"]
    tab.sign_in(tenant["read"])
    tab.go(f"#/id/{thread}")
    tab.page.wait_for_selector("#events ~ p.note:text('No events.')")
    assert tab.page.locator("#add-note, form.write, button.revoke").count() == 0
    assert tab.page.is_hidden("#nav-admin")
    tab.go("#/admin")
    tab.page.wait_for_selector("main .error:text('admin key')")
    with httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {tenant['read']}"}) as reader:
        assert_problem(reader.post(f"/threads/{thread}/events", json={"summary": "x"}), 403)  # the server refuses too

    other = Tab(browser, base_url)  # a write key does see them, and they write
    try:
        other.sign_in(tenant["write"])
        other.go(f"#/id/{thread}")
        other.page.fill("#note-summary", "written from the console")
        other.page.click("#add-note button")
        other.page.wait_for_selector("#events li.event:has-text('written from the console')")
        assert other.page.is_hidden("#nav-admin")
    finally:
        other.context.close()


@pytest.mark.slow
def test_an_admin_key_manages_keys_and_hooks(tab: Tab, base_url: str, tenant: dict[str, str]) -> None:
    tab.sign_in(tenant["admin"])
    tab.page.click("#nav-admin")
    tab.page.wait_for_selector("#keys tr")
    label = "made-" + uuid.uuid4().hex[:6]
    tab.page.select_option("#new-key-scope", "read")
    tab.page.fill("#new-key-label", label)
    tab.page.click("#create-key button")
    made = tab.page.wait_for_selector("#new-secret").text_content()
    assert httpx.get(base_url + "/key", headers={"Authorization": f"Bearer {made}"}).json()["label"] == label
    row = tab.page.locator("#keys tr", has_text=label)
    row.locator("button.revoke").click()
    row.locator("button.revoke").click()  # armed, then revoked
    tab.page.wait_for_function(f"() => [...document.querySelectorAll('#keys tr')].some(r => "
                               f"r.textContent.includes('{label}') && !r.querySelector('button.revoke'))")
    assert_problem(httpx.get(base_url + "/key", headers={"Authorization": f"Bearer {made}"}), 401)
    assert tab.page.locator("#keys tr", has_text=tenant["admin"][3:19]).locator("button.revoke").is_disabled()

    tab.page.fill("#new-hook-label", label)
    tab.page.click("#create-hook button")
    tab.page.wait_for_selector("#secret:has-text('/hooks/github/')")
    hook = tab.page.locator("#hooks tr", has_text=label)
    hook.locator("button.revoke").click()
    hook.locator("button.revoke").click()
    tab.page.wait_for_function(f"() => [...document.querySelectorAll('#hooks tr')].some(r => "
                               f"r.textContent.includes('{label}') && !r.querySelector('button.revoke'))")
    assert tab.problems() == []


def test_untrusted_text_is_shown_as_text_and_runs_nothing(tab: Tab, writer: httpx.Client, tenant: dict[str, str]) -> None:
    word = "zq" + uuid.uuid4().hex[:10]
    graph = Graph(writer)
    thread = graph.thread(title=SCRIPT, summary=f"{HOSTILE} {word}")["id"]
    graph.note(thread, HOSTILE)
    payload = (f"{SCRIPT}\n{HOSTILE}\n" + "filler line\n" * 2000)  # spilled: grep and ranges show it as text
    trigger = graph.trigger(thread_id=thread, summary=HOSTILE, content_type="text/html", payload=payload)["id"]
    inline = graph.trigger(thread_id=thread, summary="inline", payload={"html": HOSTILE})["id"]
    tab.sign_in(tenant["read"])

    tab.go(f"#/id/{thread}")
    tab.page.wait_for_selector("#events li.event")
    assert tab.page.text_content("#object-summary") == f"{HOSTILE} {word}"
    assert SCRIPT in tab.page.text_content("tr[data-field='title']")
    assert HOSTILE in tab.page.text_content("#events")

    tab.go(f"#/id/{trigger}")
    tab.page.wait_for_selector("#content-payload")
    assert tab.page.text_content("#content-payload").startswith(SCRIPT)
    tab.page.fill("#grep-pattern", "onerror")
    tab.page.click("#grep button")
    tab.page.wait_for_selector("#grep-matches li.match")
    assert HOSTILE in tab.page.text_content("#grep-matches")
    tab.page.click("#range-payload button")
    tab.page.wait_for_function("() => document.querySelector('#content-where-payload').textContent.startsWith('bytes 0-')")

    tab.go(f"#/id/{inline}")
    tab.page.wait_for_selector("pre[data-content='payload']")
    assert json.dumps(HOSTILE) in tab.page.text_content("pre[data-content='payload']")  # the JSON, as text

    memory = writer.post("/memories", json={"namespace": ["console"], "key": uid("k"), "summary": HOSTILE,
                                            "value": SCRIPT}).json()["id"]
    tab.go(f"#/versions/{memory}")
    tab.page.wait_for_selector("#versions .version .detail > table")
    assert HOSTILE in tab.page.text_content("#versions .version .summary")
    assert tab.page.text_content("#versions .version pre.content") == SCRIPT

    tab.go(f"#/search?q={word}")
    tab.page.wait_for_selector("#hits li.hit")
    assert HOSTILE in tab.page.text_content("#hits")

    assert tab.page.locator("main img, main script, main iframe").count() == 0
    assert tab.page.evaluate("() => window.__pwned") is None
    assert tab.problems() == []  # no script ran, and nothing even tried (a blocked one logs a CSP error)


def test_the_policy_refuses_eval_html_sinks_inline_script_and_other_origins(tab: Tab, tenant: dict[str, str]) -> None:
    tab.sign_in(tenant["read"])
    # Each attempt runs as the page's own code would (a timer, an event handler, an appended element), not
    # inside the test's evaluate call, which DevTools exempts from the page's policy.
    outcome = tab.page.evaluate("""async () => {
        const tries = {};
        try { setTimeout('window.__pwned = 5', 0); tries.eval = 'ran' } catch (e) { tries.eval = e.name }
        try { document.body.innerHTML = '<img src=x onerror="window.__pwned=6">'; tries.innerHTML = 'ran' }
        catch (e) { tries.innerHTML = e.name }
        const s = document.createElement('script');
        try { s.textContent = 'window.__pwned = 7'; document.body.append(s); tries.inline = 'appended' }
        catch (e) { tries.inline = e.name }
        const b = document.createElement('button');
        try { b.setAttribute('onclick', 'window.__pwned = 8'); tries.handler = 'set' } catch (e) { tries.handler = e.name }
        document.body.append(b);
        b.click();
        try { await fetch('http://127.0.0.2:9/'); tries.fetch = 'ran' } catch (e) { tries.fetch = e.name }
        await new Promise(r => setTimeout(r, 200));
        tries.pwned = window.__pwned ?? null;
        return tries;
    }""")
    assert outcome == {"eval": "TypeError", "innerHTML": "TypeError", "inline": "TypeError", "handler": "TypeError",
                       "fetch": "TypeError", "pwned": None}
    violations = [m for m in tab.console if "Content Security Policy" in m or "TrustedHTML" in m or "Trusted" in m]
    assert violations, tab.console
