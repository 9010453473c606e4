"""recall_server.spill: every view fits its byte budget, keeps every linked ID, and spills what does not fit.

Rows are built the way the fetch queries in db/queries/ build them: content arrives whole when it
may fit the budget and as a PREVIEW_BYTES prefix otherwise; events, threads and reports arrive
newest first and only the newest few hundred of them, however long the history is.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from recall_server import spill
from recall_server.models import MAX_LINKS, Event, Link, Spill
from recall_server.rows import ReportRow, ThreadRow, TriggerRow, WorkerRow

AT = datetime(2026, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC)
EMOJI = "😀"  # 4 bytes of UTF-8: the most one character of a one-line field can cost on the wire
BUDGETS = [spill.MIN_BUDGET, 5_000, 8_192, 16_384, 40_000]
FETCHED = 500  # the most events, threads or reports a fetch query ever hands to a view
TEXT_TYPE = "text/" + "x" * 95  # ContentType at its 100-character maximum
JSON_TYPE = "application/" + "x" * 83 + "+json"

budgets = st.integers(min_value=spill.MIN_BUDGET, max_value=40_000)


def size(view: msgspec.Struct) -> int:
    return len(msgspec.json.encode(view))


def wire(view: msgspec.Struct) -> dict[str, Any]:
    return json.loads(msgspec.json.encode(view))


def longest_id(prefix: str, n: int) -> str:
    """A distinct ID at the 68-character maximum."""
    return f"{prefix}_{n:064d}"


def stored(data: bytes, budget: int) -> tuple[int, bytes]:
    """(size, head) as fetch_trigger/fetch_report read content for a view of this budget."""
    return len(data), data if len(data) <= budget else data[:spill.PREVIEW_BYTES]


def stored_tail(data: bytes, budget: int) -> bytes:
    """The tail fetch_trigger/fetch_report read: the last PREVIEW_BYTES when only a prefix is the head."""
    return b"" if len(data) <= budget else data[-spill.PREVIEW_BYTES:]


SKIP = re.compile(r"(?s)(.*)\n…\[([\d,]+) bytes skipped\]…\n(.*)")


def assert_preview(data: bytes, preview: str, content_type: str) -> None:
    """A prefix of the content; or, for text, its head and its tail with the exact count skipped between."""
    assert len(preview.encode()) <= spill.PREVIEW_BYTES
    text = data.decode("utf-8", errors="ignore")
    if text.startswith(preview):
        return
    assert content_type.startswith("text/"), "only text previews skip"
    head, skipped, tail = SKIP.fullmatch(preview).groups()
    assert head and tail and text.startswith(head) and text.endswith(tail)
    assert len(head.encode()) + int(skipped.replace(",", "")) + len(tail.encode()) == len(data)


def worst_links(prefix: str) -> list[Link]:
    return [Link(id=longest_id(prefix, i), summary=EMOJI * 200) for i in range(MAX_LINKS)]


def worst_events(last_seq: int) -> list[Event]:
    return [
        Event(seq=seq, type="owner_assigned", at=AT, summary=EMOJI * 200, ref=longest_id("wkr", seq))
        for seq in range(last_seq, max(0, last_seq - FETCHED), -1)
    ]


def trigger_row(data: bytes = b"hello", budget: int = spill.DEFAULT_BUDGET, *, content_type: str = "text/plain",
                neighbours: list[Link] | None = None, **fields: Any) -> TriggerRow:
    content_size, head = stored(data, budget)
    row = TriggerRow(
        id="trg_a", source="github.check_run", thread_id=None, summary="CI failed", content_type=content_type,
        size=content_size, head=head, occurred_at=AT, created_at=AT, neighbours=neighbours or [],
        tail=stored_tail(data, budget),
    )
    return msgspec.structs.replace(row, **fields)


def report_row(data: bytes = b"hello", budget: int = spill.DEFAULT_BUDGET, *, content_type: str = "text/plain",
               refs: list[Link] | None = None, **fields: Any) -> ReportRow:
    content_size, head = stored(data, budget)
    row = ReportRow(
        id="rpt_a", worker_id="wkr_a", thread_id="thr_a", summary="Fixed it", content_type=content_type,
        size=content_size, head=head, created_at=AT, refs=refs or [], tail=stored_tail(data, budget),
    )
    return msgspec.structs.replace(row, **fields)


def thread_row(events: list[Event], last_seq: int, *, owners: list[Link] | None = None, **fields: Any) -> ThreadRow:
    row = ThreadRow(
        id="thr_a", title="PR 412", summary="", status="open", last_seq=last_seq, created_at=AT, updated_at=AT,
        owners=owners or [], events=events,
    )
    return msgspec.structs.replace(row, **fields)


def note(seq: int, summary: str = "looked at it") -> Event:
    return Event(seq=seq, type="note", at=AT, summary=summary, ref=None)


def newest_events(last_seq: int, fetched: int = 64) -> list[Event]:
    """What fetch_thread returns: only the newest events, newest first."""
    return [note(seq) for seq in range(last_seq, max(0, last_seq - fetched), -1)]


# ---- worst-case rows: every field at its maximum, in 4-byte characters where allowed ----------


def worst_trigger(budget: int, content_type: str = TEXT_TYPE) -> TriggerRow:
    data = msgspec.json.encode([EMOJI * budget]) if spill.is_json(content_type) else (EMOJI * budget).encode()
    return trigger_row(
        data, budget, content_type=content_type, neighbours=worst_links("trg"),
        id=longest_id("trg", 9999), source="github.check_run:" + "x" * 63, thread_id=longest_id("thr", 9999),
        summary=EMOJI * 200,
    )


def worst_report(budget: int, content_type: str = TEXT_TYPE) -> ReportRow:
    data = msgspec.json.encode([EMOJI * budget]) if spill.is_json(content_type) else (EMOJI * budget).encode()
    return report_row(
        data, budget, content_type=content_type, refs=worst_links("trg"),
        id=longest_id("rpt", 9999), worker_id=longest_id("wkr", 9999), thread_id=longest_id("thr", 9999),
        summary=EMOJI * 200,
    )


def worst_thread(last_seq: int = 1_000_000) -> ThreadRow:
    return thread_row(
        worst_events(last_seq), last_seq, owners=worst_links("wkr"),
        id=longest_id("thr", 9999), title=EMOJI * 120, summary=EMOJI * 200, status="s" * 32,
    )


def worst_worker() -> WorkerRow:
    threads = [Link(id=longest_id("thr", i), summary=EMOJI * 200) for i in range(FETCHED)]
    reports = [
        Link(id=longest_id("rpt", i), summary=EMOJI * 200, refs=[longest_id("trg", i * 100 + j) for j in range(MAX_LINKS)])
        for i in range(FETCHED)
    ]
    return WorkerRow(
        id=longest_id("wkr", 9999), name=EMOJI * 80, summary=EMOJI * 200, created_at=AT,
        threads_total=10**9, threads=threads, reports_total=10**9, reports=reports,
    )


# ---- shared assertions ----------------------------------------------------------------------


def assert_every_link_kept(kept: list[Link], given: list[Link]) -> None:
    """Every linked ID appears, in order; each with its summary or as a bare ID, never altered."""
    assert [link.id for link in kept] == [link.id for link in given]
    for shown, original in zip(kept, given):
        assert shown in (original, Link(id=original.id))


def assert_content(view: Any, field: str, data: bytes, href: str, content_type: str) -> None:
    """Content is either inlined whole or replaced by a complete spill pointer; never both, never neither."""
    body = wire(view)
    if field in body:
        assert "spilled" not in body
        expected = json.loads(data) if spill.is_json(content_type) else data.decode()
        assert body[field] == expected
        return
    pointer = getattr(view.spilled, field)
    assert isinstance(pointer, Spill)
    assert set(body["spilled"]) == {field}
    assert pointer.href == href
    assert pointer.bytes == len(data)
    assert pointer.content_type == content_type
    assert_preview(data, pointer.preview, content_type)
    assert href in pointer.hint


# ---- the budget holds, even for the worst objects the API accepts --------------------------


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("content_type", [TEXT_TYPE, JSON_TYPE], ids=["text", "json"])
def test_worst_case_trigger_view_fits_the_budget(budget: int, content_type: str) -> None:
    assert size(spill.trigger_view(worst_trigger(budget, content_type), budget)) <= budget


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("content_type", [TEXT_TYPE, JSON_TYPE], ids=["text", "json"])
def test_worst_case_report_view_fits_the_budget(budget: int, content_type: str) -> None:
    assert size(spill.report_view(worst_report(budget, content_type), budget)) <= budget


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_thread_view_fits_the_budget(budget: int) -> None:
    assert size(spill.thread_view(worst_thread(), budget)) <= budget


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_worker_view_fits_the_budget(budget: int) -> None:
    assert size(spill.worker_view(worst_worker(), budget)) <= budget


@pytest.mark.slow
@pytest.mark.parametrize("content_size", [100, 400, 512, 5_000])
def test_views_fit_every_budget_byte_by_byte(content_size: int) -> None:
    """Each budget at which one more summary just fits leaves zero bytes spare: the tightest case."""
    data = b"y" * content_size  # small enough to arrive whole, too big to inline beside the links
    links = [Link(id=f"trg_n{i}", summary=EMOJI * (60 + 37 * i % 140)) for i in range(MAX_LINKS)]
    over = []
    for budget in range(spill.MIN_BUDGET, 3 * spill.MIN_BUDGET):
        trigger = spill.trigger_view(trigger_row(data, budget, neighbours=links), budget)
        report = spill.report_view(report_row(data, budget, refs=links), budget)
        over += [(kind, budget, size(view)) for kind, view in [("trigger", trigger), ("report", report)]
                 if size(view) > budget]
    assert over == []


def test_max_length_ascii_trigger_with_summarised_neighbours_fits_the_default_budget() -> None:
    """Plain ASCII at the field limits is enough to stress the budget: no emoji needed."""
    row = trigger_row(
        b"y" * 100_000, content_type="a" * 49 + "/" + "b" * 50, id=longest_id("trg", 99),
        source="s" * 80, thread_id=longest_id("thr", 1), summary="x" * 200,
        neighbours=[Link(id=longest_id("trg", i), summary="x" * 200) for i in range(MAX_LINKS)],
    )
    view = spill.trigger_view(row, spill.DEFAULT_BUDGET)
    assert size(view) <= spill.DEFAULT_BUDGET
    assert_every_link_kept(view.neighbours, row.neighbours)


# ---- no linked ID is ever dropped -----------------------------------------------------------


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_trigger_view_keeps_every_neighbour_id(budget: int) -> None:
    row = worst_trigger(budget)
    assert_every_link_kept(spill.trigger_view(row, budget).neighbours, row.neighbours)


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_report_view_keeps_every_ref_id(budget: int) -> None:
    row = worst_report(budget)
    assert_every_link_kept(spill.report_view(row, budget).refs, row.refs)


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_thread_view_keeps_every_owner_id(budget: int) -> None:
    row = worst_thread()
    assert_every_link_kept(spill.thread_view(row, budget).owner_workers, row.owners)


def test_links_keep_their_summaries_when_the_budget_allows() -> None:
    row = trigger_row(neighbours=[Link(id=f"trg_n{i}", summary=f"neighbour {i}") for i in range(MAX_LINKS)])
    assert spill.trigger_view(row, spill.DEFAULT_BUDGET).neighbours == row.neighbours


# ---- properties over any row within the field limits ------------------------------------------


one_line = st.text(
    alphabet=st.one_of(
        st.sampled_from([EMOJI, '"', "\\", "a", "é"]),
        st.characters(blacklist_categories=("Cs",), blacklist_characters=[chr(c) for c in range(32)] + ["\x7f"]),
    ),
    max_size=200,
)


# Biased towards the limits, where budgets break: 68-character IDs and 4-byte summaries.
long_summaries = st.integers(min_value=0, max_value=200).map(lambda n: EMOJI * n)


def ids_of(prefix: str) -> st.SearchStrategy[str]:
    longest = st.integers(min_value=0, max_value=10**6).map(lambda n: longest_id(prefix, n))
    return st.one_of(st.from_regex(rf"{prefix}_[A-Za-z0-9_-]{{1,64}}", fullmatch=True), longest)


def links_of(prefix: str) -> st.SearchStrategy[list[Link]]:
    link = st.builds(Link, id=ids_of(prefix), summary=st.one_of(one_line, long_summaries))
    crowded = st.integers(min_value=0, max_value=MAX_LINKS).map(lambda n: worst_links(prefix)[:n])
    return st.one_of(st.lists(link, max_size=MAX_LINKS, unique_by=lambda link: link.id), crowded)


@st.composite
def contents(draw: st.DrawFn) -> tuple[str, bytes]:
    """(content type, stored bytes): text or JSON, from a few bytes to several budgets long."""
    reps = draw(st.sampled_from([1, 2, 10, 100, 1_000]))
    if draw(st.booleans()):
        value = draw(st.recursive(
            st.none() | st.booleans() | st.integers() | st.text(max_size=20),
            lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
            max_leaves=10,
        ))
        content_type = draw(st.sampled_from(["application/json", "application/vnd.api+json", JSON_TYPE]))
        return content_type, msgspec.json.encode([value] * reps)
    unit = draw(st.text(min_size=1, max_size=60))
    return draw(st.sampled_from(["text/plain", "text/markdown", TEXT_TYPE])), (unit * reps).encode()


property_settings = settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])


@property_settings
@given(budgets, contents(), links_of("trg"), ids_of("trg"), st.none() | ids_of("thr"), one_line)
def test_any_trigger_view_fits_keeps_its_neighbours_and_inlines_or_spills_its_payload(
    budget: int, content: tuple[str, bytes], neighbours: list[Link], trigger_id: str, thread_id: str | None,
    summary: str,
) -> None:
    content_type, data = content
    row = trigger_row(data, budget, content_type=content_type, neighbours=neighbours, id=trigger_id,
                      thread_id=thread_id, summary=summary)
    view = spill.trigger_view(row, budget)
    assert size(view) <= budget
    assert_every_link_kept(view.neighbours, neighbours)
    assert_content(view, "payload", data, f"/triggers/{trigger_id}/payload", content_type)


@property_settings
@given(budgets, contents(), links_of("trg"), ids_of("rpt"), ids_of("wkr"), ids_of("thr"), one_line)
def test_any_report_view_fits_keeps_its_refs_and_inlines_or_spills_its_body(
    budget: int, content: tuple[str, bytes], refs: list[Link], report_id: str, worker_id: str, thread_id: str,
    summary: str,
) -> None:
    content_type, data = content
    row = report_row(data, budget, content_type=content_type, refs=refs, id=report_id, worker_id=worker_id,
                     thread_id=thread_id, summary=summary)
    view = spill.report_view(row, budget)
    assert size(view) <= budget
    assert_every_link_kept(view.refs, refs)
    assert_content(view, "body", data, f"/reports/{report_id}/body", content_type)


@property_settings
@given(budgets, links_of("wkr"), st.lists(one_line, max_size=FETCHED), st.integers(min_value=0, max_value=10**9),
       one_line, one_line)
def test_any_thread_view_fits_keeps_its_owners_and_shows_the_newest_events_in_order(
    budget: int, owners: list[Link], summaries: list[str], older: int, title: str, summary: str,
) -> None:
    last_seq = older + len(summaries)
    events = [note(last_seq - i, s) for i, s in enumerate(summaries)]  # newest first, as fetched
    row = thread_row(events, last_seq, owners=owners, title=title or "t", summary=summary)
    view = spill.thread_view(row, budget)
    assert size(view) <= budget
    assert spill.thread_view(row, size(view)) == view  # exact at the byte: it needs all of what it took
    assert_every_link_kept(view.owner_workers, owners)
    seqs = [event.seq for event in view.events]
    assert seqs == list(range(last_seq - len(seqs) + 1, last_seq + 1))
    assert view.events_total == last_seq


# ---- content: inline when it fits, a spill pointer when it does not -------------------------


def test_text_content_that_fits_is_inlined_as_a_string() -> None:
    view = spill.trigger_view(trigger_row("héllo, wörld 😀".encode()), spill.DEFAULT_BUDGET)
    assert wire(view)["payload"] == "héllo, wörld 😀"
    assert "spilled" not in wire(view)


@pytest.mark.parametrize("content_type", ["application/json", "application/vnd.github+json"])
def test_json_content_that_fits_is_inlined_as_the_json_value_itself(content_type: str) -> None:
    value = {"check": "ci", "failed": [1, 2], "nested": {"ok": None, "emoji": EMOJI}}
    view = spill.report_view(report_row(msgspec.json.encode(value), content_type=content_type),
                             spill.DEFAULT_BUDGET)
    assert wire(view)["body"] == value
    assert "spilled" not in wire(view)


def test_a_json_string_inlines_as_a_json_string_not_double_encoded() -> None:
    view = spill.trigger_view(trigger_row(b'"just text"', content_type="application/json"), spill.DEFAULT_BUDGET)
    assert wire(view)["payload"] == "just text"


def test_empty_text_content_inlines_as_an_empty_string() -> None:
    assert wire(spill.trigger_view(trigger_row(b""), spill.DEFAULT_BUDGET))["payload"] == ""


@pytest.mark.parametrize("content_type", ["text/plain", "application/json"])
def test_trigger_payload_bigger_than_the_budget_spills_with_a_full_pointer(content_type: str) -> None:
    data = msgspec.json.encode({"log": "line\n" * 5_000}) if content_type == "application/json" else b"x" * 50_000
    view = spill.trigger_view(trigger_row(data, content_type=content_type), spill.DEFAULT_BUDGET)
    assert "payload" not in wire(view)
    assert_content(view, "payload", data, "/triggers/trg_a/payload", content_type)
    if content_type == "application/json":  # JSON: the head (its structure); text: head and tail
        assert view.spilled.payload.preview == data[:spill.PREVIEW_BYTES].decode()
    else:
        assert SKIP.fullmatch(view.spilled.payload.preview)
    assert view.spilled.payload.hint


def test_report_body_bigger_than_the_budget_spills_with_a_full_pointer() -> None:
    data = ("report line 😀\n" * 4_000).encode()
    view = spill.report_view(report_row(data, content_type="text/markdown"), spill.DEFAULT_BUDGET)
    assert "body" not in wire(view)
    assert_content(view, "body", data, "/reports/rpt_a/body", "text/markdown")
    assert set(wire(view)["spilled"]["body"]) == {"href", "bytes", "content_type", "preview", "hint"}


def test_content_that_fits_the_budget_alone_but_not_beside_the_links_spills() -> None:
    data = b"z" * 3_000
    neighbours = [Link(id=f"trg_n{i}", summary="s" * 150) for i in range(8)]
    view = spill.trigger_view(trigger_row(data, neighbours=neighbours), spill.DEFAULT_BUDGET)
    assert size(view) <= spill.DEFAULT_BUDGET
    assert view.payload is msgspec.UNSET
    assert_content(view, "payload", data, "/triggers/trg_a/payload", "text/plain")


def test_a_preview_cut_inside_a_character_is_still_a_prefix_of_the_text() -> None:
    data = ("ab" + EMOJI).encode() * 2_000  # 6-byte units: 512 bytes ends inside an emoji
    view = spill.trigger_view(trigger_row(data), spill.DEFAULT_BUDGET)
    preview = view.spilled.payload.preview
    assert preview and "\ufffd" not in preview
    assert_preview(data, preview, "text/plain")


def test_spilled_bytes_is_the_full_size_not_the_preview_length() -> None:
    data = b"q" * 1_000_000
    view = spill.trigger_view(trigger_row(data), spill.DEFAULT_BUDGET)
    assert view.spilled.payload.bytes == 1_000_000


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("content_type", [TEXT_TYPE, JSON_TYPE], ids=["text", "json"])
def test_worst_case_content_bigger_than_the_budget_is_spilled_with_a_preview(
    budget: int, content_type: str
) -> None:
    trigger = worst_trigger(budget, content_type)
    report = worst_report(budget, content_type)
    for pointer, row, href in [
        (spill.trigger_view(trigger, budget).spilled.payload, trigger, f"/triggers/{trigger.id}/payload"),
        (spill.report_view(report, budget).spilled.body, report, f"/reports/{report.id}/body"),
    ]:
        assert (pointer.href, pointer.bytes, pointer.content_type) == (href, row.size, content_type)
        data = msgspec.json.encode([EMOJI * budget]) if spill.is_json(content_type) else (EMOJI * budget).encode()
        assert_preview(data, pointer.preview, content_type)


# ---- thread events: the most recent, in ascending order --------------------------------------


def test_a_thread_with_ten_events_shows_all_of_them_in_ascending_order() -> None:
    view = spill.thread_view(thread_row(newest_events(10), 10), spill.DEFAULT_BUDGET)
    assert [event.seq for event in view.events] == list(range(1, 11))
    assert view.events_total == 10
    assert size(view) <= spill.DEFAULT_BUDGET


def test_a_thread_with_a_million_events_shows_the_newest_within_budget() -> None:
    row = thread_row(newest_events(1_000_000), 1_000_000)
    view = spill.thread_view(row, spill.DEFAULT_BUDGET)
    seqs = [event.seq for event in view.events]
    assert size(view) <= spill.DEFAULT_BUDGET
    assert view.events_total == 1_000_000
    assert seqs and seqs[-1] == 1_000_000
    assert seqs == list(range(1_000_000 - len(seqs) + 1, 1_000_001))


@pytest.mark.parametrize("budget", BUDGETS)
def test_worst_case_thread_keeps_the_newest_events_ascending(budget: int) -> None:
    row = worst_thread()
    seqs = [event.seq for event in spill.thread_view(row, budget).events]
    assert seqs == list(range(row.last_seq - len(seqs) + 1, row.last_seq + 1))


def test_a_bigger_budget_shows_more_events() -> None:
    row = thread_row(newest_events(1_000, fetched=500), 1_000)
    small = spill.thread_view(row, spill.MIN_BUDGET)
    large = spill.thread_view(row, 32_768)
    assert 0 < len(small.events) < len(large.events)


def test_a_view_its_budget_long_shows_everything_and_one_byte_less_drops_the_last_that_fitted() -> None:
    """The budget is exact at the byte: what fits is shown, whether taken one by one or all at once."""
    owners = [Link(id=f"wkr_o{i}", summary=f"owner {i}") for i in range(3)]
    row = thread_row(newest_events(40, fetched=10), 40, owners=owners)
    full = size(spill.thread_view(row, spill.MAX_BUDGET))
    exact, short = spill.thread_view(row, full), spill.thread_view(row, full - 1)
    assert (size(exact), len(exact.events), exact.owner_workers) == (full, 10, owners)
    assert ([e.seq for e in short.events], short.owner_workers) == (list(range(32, 41)), owners)
    assert spill.thread_view(row, size(short)) == short

    bare = thread_row([], 0, owners=owners)
    full = size(spill.thread_view(bare, spill.MAX_BUDGET))
    assert spill.thread_view(bare, full).owner_workers == owners
    short = spill.thread_view(bare, full - 1)
    assert short.owner_workers == [*owners[:2], Link(id="wkr_o2")]
    assert spill.thread_view(bare, size(short)) == short


# ---- workers: the most recent threads and reports that fit ----------------------------------


@pytest.mark.parametrize("budget", BUDGETS)
def test_worker_view_keeps_the_most_recent_threads_and_reports_with_totals(budget: int) -> None:
    row = worst_worker()
    view = spill.worker_view(row, budget)
    assert view.reports == row.reports[:len(view.reports)]
    assert view.threads == row.threads[:len(view.threads)]
    assert (view.threads_total, view.reports_total) == (10**9, 10**9)


def test_a_small_worker_shows_every_thread_and_report() -> None:
    row = WorkerRow(
        id="wkr_a", name="ci-bot", summary="", created_at=AT, threads_total=2,
        threads=[Link(id="thr_b", summary="b"), Link(id="thr_a", summary="a")], reports_total=1,
        reports=[Link(id="rpt_a", summary="fixed", refs=["trg_a"])],
    )
    view = spill.worker_view(row, spill.DEFAULT_BUDGET)
    assert view.threads == row.threads
    assert view.reports == row.reports
    assert wire(view)["reports"] == [{"id": "rpt_a", "summary": "fixed", "refs": ["trg_a"]}]


# ---- text previews show the head and the tail -------------------------------------------------


def test_a_spilled_text_preview_shows_the_end_of_a_log_where_failures_are() -> None:
    data = b"".join(f"PASSED test_{i}\n".encode() for i in range(5_000)) + b"=== 1 failed: payment timeout ===\n"
    pointer = spill.trigger_view(trigger_row(data), spill.DEFAULT_BUDGET).spilled.payload
    assert pointer.preview.startswith("PASSED test_0\n")
    assert pointer.preview.endswith("=== 1 failed: payment timeout ===\n")
    head, skipped, tail = SKIP.fullmatch(pointer.preview).groups()
    assert int(skipped.replace(",", "")) == len(data) - len(head.encode()) - len(tail.encode())
    assert len(pointer.preview.encode()) <= spill.PREVIEW_BYTES


def test_a_json_preview_stays_a_prefix() -> None:
    data = msgspec.json.encode({"log": ["line"] * 5_000, "end": "failure"})
    pointer = spill.trigger_view(trigger_row(data, content_type="application/json"), spill.DEFAULT_BUDGET)
    assert data.decode().startswith(pointer.spilled.payload.preview)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(budget=budgets, text=st.text(min_size=1, max_size=200), repeat=st.integers(1, 400),
       tail=st.text(max_size=300), links=st.integers(0, MAX_LINKS))
def test_any_text_preview_fits_the_budget_and_is_head_plus_tail(
    budget: int, text: str, repeat: int, tail: str, links: int
) -> None:
    data = (text * repeat + tail).encode()
    neighbours = [Link(id=longest_id("trg", i), summary=EMOJI * 200) for i in range(links)]
    for view, field in [
        (spill.trigger_view(trigger_row(data, budget, neighbours=neighbours), budget), "payload"),
        (spill.report_view(report_row(data, budget, refs=neighbours), budget), "body"),
    ]:
        assert size(view) <= budget
        body = wire(view)
        if field in body:
            assert body[field] == data.decode()
        else:
            assert_preview(data, getattr(view.spilled, field).preview, "text/plain")
