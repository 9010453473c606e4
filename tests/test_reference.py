"""The API reference (routes/reference.py) and the documents under /schema: served by this server alone,
under a strict policy, listing every route openapi.yaml has; and every miss under /schema a problem."""

from __future__ import annotations

import gzip
import shutil
import uuid
from collections.abc import Iterator
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from helpers import assert_problem, create_key

from recall_server.routes.reference import CSP, PATH

ROOT = Path(__file__).resolve().parent.parent
COMMITTED = ROOT / "openapi.yaml"


# ---- the documents, and the misses ---------------------------------------------------------------


def test_openapi_yaml_is_served_as_committed(base_url: str) -> None:
    served = httpx.get(base_url + "/schema/openapi.yaml", timeout=30)
    assert served.status_code == 200
    assert served.headers["content-type"].startswith("application/vnd.oai.openapi")
    assert served.text == COMMITTED.read_text()
    assert httpx.head(base_url + "/schema/openapi.yaml").headers["content-length"] == served.headers["content-length"]


@pytest.mark.parametrize("path", [
    "/schema/swagger/nope.js", "/schema/swagger/index.html", "/schema/swagger/..%2F..%2Fapp.py",
    "/schema/redoc", "/schema/elements", "/schema/rapidoc", "/schema/scalar", "/schema/oauth2-redirect.html",
    "/schema/openapi.yml", "/schema/openapi.txt", "/schema/openapi.json.bak", "/schema/a/b",
])
def test_every_miss_under_schema_is_a_404_problem(base_url: str, path: str) -> None:
    assert_problem(httpx.get(base_url + path), 404)
    head = httpx.head(base_url + path)
    assert head.status_code == 404 and head.headers["content-type"].startswith("application/problem+json")


def test_a_wrong_method_under_schema_is_a_405_problem(base_url: str) -> None:
    assert_problem(httpx.post(base_url + "/schema/openapi.yaml"), 405)
    assert_problem(httpx.post(base_url + PATH), 405)


def test_docs_leads_to_the_reference(base_url: str) -> None:
    answer = httpx.get(base_url + "/docs")
    assert answer.status_code == 302 and answer.headers["location"] == PATH


# ---- what the server serves ----------------------------------------------------------------------


class Tags(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.inline: list[str] = []  # text inside <script> or <style>
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self._in = tag if tag in ("script", "style") else None

    def handle_data(self, data: str) -> None:
        if self._in and data.strip():
            self.inline.append(data)


def test_the_reference_is_served_under_a_strict_policy(base_url: str) -> None:
    page = httpx.get(base_url + PATH)
    assert page.status_code == 200 and page.headers["content-type"] == "text/html; charset=utf-8"
    policy = page.headers["content-security-policy"]
    assert policy == CSP
    directives = dict(d.strip().split(" ", 1) for d in policy.split(";"))
    assert directives["default-src"] == "'none'"
    assert directives["script-src"] == directives["style-src"] == directives["connect-src"] == "'self'"
    assert directives["img-src"] == "'self' data: blob:"
    assert directives["frame-ancestors"] == "'none'"
    assert "unsafe" not in policy and "http" not in policy
    assert page.headers["x-frame-options"] == "DENY" and page.headers["x-content-type-options"] == "nosniff"

    parsed = Tags()
    parsed.feed(page.text)
    assert parsed.inline == [], "no inline script or style"
    local = [a.get("src") or a.get("href") or "" for tag, a in parsed.tags if tag in ("script", "link")]
    assert len(local) == 5 and all(u.startswith(("/schema/swagger/", "/console/")) for u in local), local
    assert not [a for _, a in parsed.tags if any(name.startswith("on") or name == "style" for name in a)]

    for name, media_type in (("swagger-ui-bundle.js", "text/javascript"), ("swagger-ui.css", "text/css"),
                             ("reference.js", "text/javascript"), ("reference.css", "text/css")):
        asset = httpx.get(f"{base_url}{PATH}/{name}")
        assert asset.status_code == 200 and asset.headers["content-type"] == f"{media_type}; charset=utf-8", name
        assert asset.headers["content-security-policy"] == CSP


def test_the_files_are_gzipped_for_a_browser_and_validated_by_etag(base_url: str) -> None:
    url = f"{base_url}{PATH}/swagger-ui-bundle.js"
    with httpx.Client(headers={"Accept-Encoding": "identity"}) as plain:
        whole = plain.get(url)
        assert "content-encoding" not in whole.headers and len(whole.content) > 1_000_000
        assert plain.get(url, headers={"Accept-Encoding": "br, gzip;q=0"}).headers.get("content-encoding") is None
        zipped = plain.get(url, headers={"Accept-Encoding": "gzip, deflate, br"})
        assert zipped.headers["content-encoding"] == "gzip" and zipped.headers["vary"] == "Accept-Encoding"
        assert zipped.content == whole.content  # httpx decodes it
        assert int(zipped.headers["content-length"]) < len(whole.content) // 3
        assert zipped.headers["etag"] != whole.headers["etag"]  # two representations, two strong validators
        again = plain.get(url, headers={"If-None-Match": whole.headers["etag"]})
        assert again.status_code == 304 and again.content == b""
        assert plain.get(url, headers={"If-None-Match": zipped.headers["etag"]}).status_code == 200  # not this one
    with httpx.stream("GET", url, headers={"Accept-Encoding": "gzip"}) as streamed:
        assert gzip.decompress(b"".join(streamed.iter_raw())) == whole.content  # the bytes on the wire


# ---- in the browser ------------------------------------------------------------------------------

sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is in the test extra: pip install -e '.[test]'")
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
needs_chromium = pytest.mark.skipif(not Path(CHROMIUM).exists(),
                                    reason=f"NO BROWSER: Debian's chromium at {CHROMIUM} (.ci/run installs it)")
# Every Content-Security-Policy violation the page meets, recorded before any of its own scripts run.
RECORD_VIOLATIONS = """document.addEventListener("securitypolicyviolation",
    e => (window.__violations = window.__violations || []).push(e.violatedDirective + " " + e.blockedURI));"""


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield browser
        browser.close()


class Tab:
    """A fresh browser context (empty cache and storage), recording every request and error of its page."""

    def __init__(self, browser: Any) -> None:
        self.context = browser.new_context()
        self.context.add_init_script(RECORD_VIOLATIONS)
        self.page = self.context.new_page()
        self.page.set_default_timeout(20_000)
        self.requests: list[Any] = []
        self.errors: list[str] = []
        self.page.on("request", lambda r: self.requests.append(r))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)

    def violations(self) -> list[str]:
        return self.page.evaluate("() => window.__violations || []")


@pytest.fixture()
def tab(browser: Any) -> Iterator[Tab]:
    t = Tab(browser)
    yield t
    t.context.close()


def documented() -> set[tuple[str, str]]:
    return {(method.upper(), path) for path, item in yaml.safe_load(COMMITTED.read_text())["paths"].items()
            for method in item}


@needs_chromium
@pytest.mark.slow
def test_the_reference_lists_every_route_and_nothing_leaves_the_origin(tab: Tab, base_url: str) -> None:
    page = tab.page
    page.goto(base_url + "/console")
    page.click("#api-reference")  # the console links to it, signed in or not
    page.wait_for_selector("body[data-ready='1']")
    page.wait_for_selector(".opblock")
    assert page.url == base_url + PATH
    listed = page.eval_on_selector_all(".opblock", """blocks => blocks.map(b => [
        b.querySelector('.opblock-summary-method').textContent,
        b.querySelector('.opblock-summary-path').dataset.path])""")
    assert len(listed) == len(set(map(tuple, listed)))
    assert {(method, path) for method, path in listed} == documented()

    assert tab.requests and all(r.url.startswith(base_url + "/") for r in tab.requests), \
        [r.url for r in tab.requests if not r.url.startswith(base_url + "/")]
    bundle = next(r for r in tab.requests if r.url.endswith("/swagger-ui-bundle.js"))
    assert bundle.response().headers["content-encoding"] == "gzip"
    assert tab.violations() == [] and tab.errors == []


@needs_chromium
@pytest.mark.slow
def test_try_it_out_sends_the_key_only_in_its_header_and_keeps_it_nowhere(tab: Tab, base_url: str,
                                                                          database_url: str) -> None:
    tenant = f"reference-{uuid.uuid4().hex[:8]}"
    key = create_key(database_url, tenant, "read")
    page = tab.page
    page.goto(base_url + PATH + "#/default/GetOwnKey")
    page.wait_for_selector("body[data-ready='1']")
    page.click(".auth-wrapper .authorize")
    page.fill(".auth-container input", key)
    page.click(".auth-btn-wrapper .authorize")
    page.click(".btn-done")
    operation = page.locator("#operations-default-GetOwnKey")
    operation.locator(".try-out__btn").click()
    operation.locator(".execute").click()
    status = operation.locator(".live-responses-table tr.response .response-col_status").first
    status.wait_for()
    assert status.text_content().strip() == "200"
    assert tenant in operation.locator(".live-responses-table tr.response .response-col_description").first.text_content()

    sent = [r for r in tab.requests if r.url == base_url + "/key"]
    assert len(sent) == 1 and sent[0].headers["authorization"] == f"Bearer {key}"
    assert not [r.url for r in tab.requests if key.split(".", 1)[1] in r.url]
    assert page.evaluate("() => localStorage.length + sessionStorage.length + document.cookie.length") == 0
    assert tab.violations() == [] and tab.errors == []
