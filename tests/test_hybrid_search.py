"""GET /search in its ranked modes (hybrid, lexical, semantic) against a live server with the default offline
embedder: questions in an agent's own words find the objects they mean; filters, paging, deletion, supersede,
expiry and other tenants behave as in exact search. Each test writes in a tenant of its own, so what it
finds is exactly what it wrote."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import asyncpg
import httpx
import pytest
from helpers import Graph, ServerProcess, assert_problem, cli, create_key, run_script, run_sql, with_database

from recall_server import config, demo, ids, rerank
from recall_server.process import free_port


def tenant_client(base_url: str, database_url: str, scope: str = "write") -> httpx.Client:
    """A client of a new tenant (its name in `.tenant`)."""
    tenant = "t" + uuid.uuid4().hex[:12]
    key = create_key(database_url, tenant, scope)
    client = httpx.Client(base_url=base_url, timeout=30, headers={"Authorization": f"Bearer {key}"})
    client.tenant = tenant  # type: ignore[attr-defined]
    return client


@pytest.fixture()
def mine(base_url: str, database_url: str) -> Iterator[httpx.Client]:
    """A client of a fresh tenant."""
    with tenant_client(base_url, database_url) as c:
        yield c


def tenant_of(client: httpx.Client) -> str:
    return client.tenant  # type: ignore[attr-defined]


def indexed(database_url: str, client: httpx.Client, timeout: float = 60) -> None:
    """Until the indexer has embedded everything this tenant queued."""
    tenant = tenant_of(client)
    deadline = time.monotonic() + timeout
    while run_sql(database_url, "SELECT 1 FROM embedding_queue WHERE tenant_id = $1 LIMIT 1", tenant):
        assert time.monotonic() < deadline, "the indexer did not drain the queue"
        time.sleep(0.1)


def remember(client: httpx.Client, namespace: list[str], key: str, value: object, **kw: object) -> dict:
    r = client.post("/memories", json={"namespace": namespace, "key": key, "value": value, **kw})
    assert r.status_code == 201, r.text
    return r.json()


def search(client: httpx.Client, q: str, **params: object) -> dict:
    """A page of GET /search; ranked modes show every reranked hit (min_score=0) unless asked otherwise: most
    tests here are about what the arms find, the floor's own tests ask for it."""
    if params.get("mode") != "exact" and "min_score" not in params and params.get("rerank") != "false":
        params["min_score"] = 0
    r = client.get("/search", params={"q": q, **params})
    assert r.status_code == 200, r.text
    return r.json()


def found(client: httpx.Client, q: str, **params: object) -> list[str]:
    return [h["id"] for h in search(client, q, **params)["data"]]


# ---- finding by meaning ------------------------------------------------------------------------


@pytest.mark.parametrize("question", ["why did CI fail on PR 412", "fail", "payment timed out"])
def test_the_pr_412_questions_find_its_trigger_or_thread_in_the_top_3(
    base_url: str, database_url: str, mine: httpx.Client, question: str
) -> None:
    demo.load(base_url, mine.headers["Authorization"].split()[1])
    indexed(database_url, mine)
    page = search(mine, question)
    assert page["mode"] == "hybrid" and page["note"] is None
    assert {"trg_8f21", "thr_pr_412"} & set(h["id"] for h in page["data"][:3]), page["data"][:3]


def test_a_paraphrase_sharing_no_word_is_found_by_meaning(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    outage = g.trigger(summary="Card charges declined: the payment gateway answered 503 for ten minutes",
                       content_type="text/plain", payload="gateway 503\n")
    g.trigger(summary="Renamed the onboarding email template", content_type="text/plain", payload="-")
    g.thread(summary="Quarterly planning for the design system")
    indexed(database_url, mine)
    question = "customers could not pay by credit card"
    assert found(mine, question, mode="exact") == []  # no object has all these words
    assert found(mine, question, mode="semantic")[0] == outage["id"]
    assert found(mine, question)[0] == outage["id"]


def test_a_memory_written_with_embed_false_is_found_by_words_never_by_meaning(
    database_url: str, mine: httpx.Client
) -> None:
    text = "the customer prefers invoices in Portuguese"
    kept = remember(mine, ["prefs"], "kept", text)
    unembedded = remember(mine, ["prefs"], "unembedded", text, embed=False)
    indexed(database_url, mine)
    assert run_sql(database_url, "SELECT count(*) FROM embeddings WHERE object_id = $1", unembedded["id"])[0][0] == 0
    by_meaning = found(mine, "which language should billing documents use", mode="semantic")
    assert kept["id"] in by_meaning and unembedded["id"] not in by_meaning
    assert unembedded["id"] in found(mine, "invoices Portuguese", mode="lexical")
    for not_a_boolean in (0, 1, "false", None):
        refused = mine.post("/memories", json={"namespace": ["prefs"], "key": "k", "value": 1, "embed": not_a_boolean})
        assert refused.status_code == 400 and "embed" in refused.text


def test_lexical_mode_matches_word_forms_and_ranks_rare_words_first(mine: httpx.Client) -> None:
    g = Graph(mine)
    for i in range(30):  # "build" is in every object; "flaky" in one
        g.trigger(summary=f"build {i} passed", content_type="text/plain", payload="ok")
    flaky = g.trigger(summary="build 7 failed: a flaky test", content_type="text/plain", payload="FAILED")
    assert found(mine, "failing builds", mode="exact") == []
    assert found(mine, "failing builds", mode="lexical")[0] == flaky["id"]  # fail:* and build:* by stem
    assert found(mine, "build flaky", mode="lexical")[0] == flaky["id"]  # the rare word decides
    assert len(found(mine, "build", mode="lexical", limit=50)) == 31


def test_quoted_phrases_and_minus_words_hold_in_every_ranked_mode(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    phrase = g.thread(summary="payment timeout in checkout")
    apart = g.thread(summary="timeout while paying; payment retried later")
    indexed(database_url, mine)
    for mode in ("lexical", "hybrid"):
        assert found(mine, '"payment timeout"', mode=mode) == [phrase["id"]]
        assert found(mine, "payment timeout -checkout", mode=mode) == [apart["id"]]


def test_explain_says_which_arm_found_each_hit(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    both = g.thread(summary="The payment service timed out during checkout")
    g.thread(summary="Garden club meets on Thursday")
    indexed(database_url, mine)
    page = search(mine, "payment timed out", explain="true")
    first = page["data"][0]
    assert first["id"] == both["id"]
    assert first["explain"]["arms"] == ["lexical", "semantic"]
    assert first["explain"]["lexical_rank"] == 1 and first["explain"]["semantic_rank"] == 1
    assert 0 < first["explain"]["semantic_score"] <= 1
    semantic_only = [h for h in page["data"] if h["explain"]["arms"] == ["semantic"]]
    assert all("lexical_rank" not in h["explain"] for h in semantic_only)
    assert semantic_only and all(h["explain"]["semantic_rank"] > 1 for h in semantic_only)
    assert "explain" not in search(mine, "payment timed out")["data"][0]  # compact unless asked


def test_filters_apply_inside_the_candidate_search_so_a_page_fills(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    for i in range(30):  # the nearest objects are threads; the memories are far down the ranking
        g.thread(summary=f"payment gateway outage number {i}")
    memories = [remember(mine, ["ops", "notes"], f"k{i}", f"gardening tip {i}", summary=f"gardening tip {i}")
                for i in range(5)]
    indexed(database_url, mine)
    for mode in ("semantic", "hybrid", "lexical"):
        hits = search(mine, "payment gateway outage gardening", mode=mode, type="memory", limit=5)["data"]
        assert sorted(h["id"] for h in hits) == sorted(m["id"] for m in memories), mode


def test_ranked_pages_are_exactly_once_while_objects_are_added(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    made = [g.trigger(summary=f"deploy {i} rolled back after a timeout", payload={"n": i})["id"] for i in range(12)]
    indexed(database_url, mine)
    for mode in ("hybrid", "semantic", "lexical"):
        seen: list[str] = []
        page = search(mine, "rollback after timeout", mode=mode, limit=5)
        while True:
            seen += [h["id"] for h in page["data"]]
            g.trigger(summary="deploy rolled back after a timeout, again")  # a new best match between pages
            if not page["has_more"]:
                break
            page = search(mine, "rollback after timeout", mode=mode, limit=5, cursor=page["next_cursor"])
        assert len(seen) == len(set(seen)), f"{mode}: nothing repeated"
        assert set(made) <= set(seen), f"{mode}: nothing that existed was skipped"


def test_a_cursor_of_another_mode_or_question_is_a_400(mine: httpx.Client) -> None:
    g = Graph(mine)
    for i in range(3):
        g.thread(summary=f"release {i} notes")
    page = search(mine, "release notes", mode="lexical", limit=1)
    assert_problem(mine.get("/search", params={"q": "release notes", "mode": "hybrid", "cursor": page["next_cursor"]}),
                   400, "cursor")
    assert_problem(mine.get("/search", params={"q": "release", "mode": "lexical", "cursor": page["next_cursor"]}),
                   400, "cursor")
    assert_problem(mine.get("/search", params={"q": "release", "mode": "fuzzy"}), 400)


# ---- the rerank stage: relevance in [0, 1], a floor, and IDs first ----------------------------------


def test_reranked_scores_are_relevance_and_explain_shows_each_stage(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    answer = g.thread(summary="The payment service timed out during checkout")
    g.thread(summary="Garden club meets on Thursday")
    indexed(database_url, mine)
    page = search(mine, "payment timed out", explain="true", min_score=0.5)
    assert page["min_score"] == 0.5 and page["note"] is None and page["nearest"] is None
    assert [h["id"] for h in page["data"]] == [answer["id"]]  # the garden club is below the floor
    hit = page["data"][0]
    assert 0.5 <= hit["score"] <= 1
    why = hit["explain"]
    assert why["fused_rank"] == 1 and 0 < why["fused_score"] < 0.1  # reciprocal rank: not a relevance
    assert why["cosine"] == why["semantic_score"] and why["lexical_score"] > 0.5
    every = search(mine, "payment timed out", explain="true", min_score=0)["data"]
    assert [h["id"] for h in every][0] == answer["id"] and len(every) == 2
    assert all(0 <= h["score"] <= 1 for h in every) and every[1]["score"] < 0.5
    curves = rerank.calibration("wordllama:l2_supercat:256")  # the suite's servers' embedder (conftest.py)
    for h in every:  # the statement computes what rerank.relevance says
        expected = rerank.relevance(h["explain"]["cosine"], h["explain"].get("lexical_score"), curves)
        assert abs(h["score"] - expected) < 1e-5, h
    assert every[1]["explain"]["cosine"] is not None  # scored from its stored vector, whichever arm found it
    plain = search(mine, "payment timed out", explain="true", rerank="false")
    assert plain["min_score"] is None and len(plain["data"]) == 2
    assert all(h["score"] == h["explain"]["fused_score"] for h in plain["data"])


def test_a_question_nothing_answers_says_no_close_match_with_the_nearest(
    database_url: str, mine: httpx.Client
) -> None:
    g = Graph(mine)
    for summary in ("Card payments are retried three times", "Deploys go out on Tuesdays",
                    "Quarterly planning for the design system"):
        g.thread(summary=summary)
    indexed(database_url, mine)
    for mode in ("hybrid", "semantic"):
        page = search(mine, "what did we decide about the database migration", mode=mode, min_score=0.5)
        assert page["data"] == [] and page["has_more"] is False and page["next_cursor"] is None
        assert page["note"] == "no close match" and page["min_score"] == 0.5
        assert 1 <= len(page["nearest"]) <= 2 and all(h["score"] < 0.5 for h in page["nearest"])
    answered = search(mine, "how often are card payments retried", min_score=0.5)
    assert answered["note"] is None and answered["nearest"] is None and answered["data"]


def test_min_score_needs_the_rerank_stage_and_a_ranked_mode(mine: httpx.Client) -> None:
    Graph(mine).thread(summary="release notes")
    for params in ({"min_score": 0.3, "rerank": "false"}, {"min_score": 0.3, "mode": "exact"},
                   {"min_score": 1.5}, {"min_score": -0.1}):
        assert_problem(mine.get("/search", params={"q": "release", **params}), 400, "min_score")
    assert search(mine, "release", mode="exact")["min_score"] is None


@pytest.mark.parametrize("mode", ["hybrid", "lexical", "semantic"])
def test_an_id_in_the_question_puts_that_object_first(
    base_url: str, database_url: str, mine: httpx.Client, mode: str
) -> None:
    demo.load(base_url, mine.headers["Authorization"].split()[1])
    indexed(database_url, mine)
    for question, named in (("trg_8f21", "trg_8f21"), ("who owns thr_pr_412?", "thr_pr_412"),
                            ("what did wkr_77a0 report", "wkr_77a0")):
        page = search(mine, question, mode=mode, explain="true", min_score=0.5)
        assert page["data"][0]["id"] == named and page["data"][0]["score"] == 1, (question, page["data"][:2])
        assert "id" in page["data"][0]["explain"]["arms"]


def test_a_named_id_is_found_only_where_the_key_and_filters_reach(
    base_url: str, database_url: str, mine: httpx.Client
) -> None:
    with tenant_client(base_url, database_url) as other:
        theirs = Graph(other).thread(summary="their release train")
    g = Graph(mine)
    thread = g.thread(summary="our release train")
    gone = g.thread(summary="an old release train")
    assert mine.delete(f"/threads/{gone['id']}").status_code in (200, 204)
    memory = remember(mine, ["ops"], "train", "the release train leaves on Tuesdays")
    indexed(database_url, mine)
    assert theirs["id"] not in found(mine, f"what about {theirs['id']}")  # another tenant's: never
    assert gone["id"] not in found(mine, f"what about {gone['id']}")  # deleted: never
    assert found(mine, f"what about {thread['id']}", min_score=0.5)[0] == thread["id"]
    assert thread["id"] not in found(mine, f"what about {thread['id']}", type="memory")  # the kind filter holds
    assert memory["id"] not in found(mine, f"what about {memory['id']}", namespace="other")  # and the namespace
    assert found(mine, f"what about {memory['id']}", namespace="ops", min_score=0.5)[0] == memory["id"]


def test_reranked_pages_are_exactly_once_and_in_score_order(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    made = [g.thread(summary=f"rollback {i} after a deploy timeout")["id"] for i in range(9)]
    indexed(database_url, mine)
    seen: list[dict] = []
    page = search(mine, "rollback after a deploy timeout", limit=2, min_score=0.2)
    while True:
        seen += page["data"]
        g.thread(summary="rollback after a deploy timeout")  # a new best match between pages
        if not page["has_more"]:
            break
        page = search(mine, "rollback after a deploy timeout", limit=2, min_score=0.2, cursor=page["next_cursor"])
    assert [h["id"] for h in seen] == list(dict.fromkeys(h["id"] for h in seen)) and set(made) <= {h["id"] for h in seen}
    keys = [(h["score"]) for h in seen]
    assert keys == sorted(keys, reverse=True)
    other_floor = mine.get("/search", params={"q": "rollback after a deploy timeout", "limit": 2, "min_score": 0.3,
                                               "cursor": search(mine, "rollback after a deploy timeout", limit=2,
                                                                min_score=0.2)["next_cursor"]})
    assert_problem(other_floor, 400, "cursor")  # a cursor belongs to its floor


# ---- what is gone is never found, and erasure removes the vector ---------------------------------


def test_deleted_expired_and_superseded_objects_never_appear_in_any_mode(
    database_url: str, mine: httpx.Client, expire
) -> None:
    g = Graph(mine)
    deleted = g.thread(summary="the invoice export job crashed")
    expiring = g.thread(summary="the invoice export job crashed again", ttl=3600)
    old = remember(mine, ["ops"], "export", "invoice export runs nightly", summary="invoice export schedule")
    new = remember(mine, ["ops"], "export", "invoice export runs hourly", summary="invoice export schedule")
    indexed(database_url, mine)
    assert mine.delete(f"/threads/{deleted['id']}").status_code == 204
    expire(expiring["id"])
    for mode in ("hybrid", "semantic", "lexical"):
        ids = found(mine, "invoice export crashed", mode=mode, limit=50)
        assert deleted["id"] not in ids and expiring["id"] not in ids and old["id"] not in ids, mode
        assert new["id"] in ids, mode


def test_erasure_deletes_the_vector_and_verify_erasure_checks_it(database_url: str, mine: httpx.Client) -> None:
    secret = Graph(mine).thread(summary="a secret merger with Initech")
    Graph(mine).thread(summary="the cafeteria menu")
    indexed(database_url, mine)
    tenant = tenant_of(mine)
    vectors = "SELECT count(*) FROM embeddings WHERE tenant_id = $1 AND object_id = $2"
    assert run_sql(database_url, vectors, tenant, secret["id"])[0][0] == 1
    assert mine.delete(f"/threads/{secret['id']}").status_code == 204
    assert run_sql(database_url, vectors, tenant, secret["id"])[0][0] == 0
    assert "a vector of" not in cli(database_url, "verify-erasure", "--tenant", tenant, secret["id"])
    # a vector left behind (as a bug would leave it) is a finding
    run_sql(database_url, "INSERT INTO embeddings SELECT tenant_id, $2, 'thread', model, dims, now(), embedding"
                          " FROM embeddings WHERE tenant_id = $1 LIMIT 1", tenant, secret["id"])
    found_left = subprocess.run([sys.executable, "-m", "recall_server", "verify-erasure", "--tenant", tenant, secret["id"]],
                                env={**os.environ, "DATABASE_URL": database_url}, capture_output=True, text=True)
    assert found_left.returncode == 1 and f"a vector of {secret['id']} still exists" in found_left.stdout


# ---- tenants -------------------------------------------------------------------------------------


def test_another_tenants_data_changes_neither_my_hits_nor_their_scores(
    base_url: str, database_url: str, mine: httpx.Client
) -> None:
    g = Graph(mine)
    for summary in ("payment timeout in checkout", "the payment provider rotated its keys",
                    "checkout latency doubled", "a timeout in the search service"):
        g.thread(summary=summary)
    indexed(database_url, mine)
    questions = ["payment timeout", "why is checkout slow", "timeout"]
    before = {(q, m): search(mine, q, mode=m, explain="true")["data"] for q in questions
              for m in ("hybrid", "lexical", "semantic")}
    with tenant_client(base_url, database_url) as other:
        for i in range(40):  # the same words, closer matches, many times over
            Graph(other).thread(summary=f"payment timeout {i}: payment timeout in checkout, timeout")
        indexed(database_url, other)
    after = {(q, m): search(mine, q, mode=m, explain="true")["data"] for q in questions
             for m in ("hybrid", "lexical", "semantic")}
    assert after == before


@pytest.mark.slow
def test_a_word_only_another_tenant_uses_reads_no_more_than_an_absent_word(base_url: str, database_url: str) -> None:
    """The GIN lookup reads the caller's postings only: another tenant with 10x the data, all of it holding a
    word, leaves the cost of searching that word (in buffers touched) at the cost of a word no one uses.
    Written in SQL, as the bench store is: enough rows that the planner looks the word up in the index."""
    mine, theirs = "t" + uuid.uuid4().hex[:12], "t" + uuid.uuid4().hex[:12]
    for tenant, n, words in ((mine, 2_000, "ordinary event"), (theirs, 20_000, "zebraword event")):
        run_script(database_url, f"""
            INSERT INTO tenants (id) VALUES ('{tenant}');
            INSERT INTO triggers (tenant_id, id, source, summary, content_type, payload, payload_sha256, request_hash,
                                  occurred_at)
            SELECT '{tenant}', 'trg_x' || g, 'test', '{words} ' || g, 'text/plain', p, sha256(p), '\\x', now()
              FROM generate_series(1, {n}) g, LATERAL (SELECT convert_to('{words} ' || g, 'UTF8') AS p) x;
            DELETE FROM embedding_queue WHERE tenant_id = '{tenant}';  -- not the indexer's work: other tests wait on it
            ANALYZE triggers;""")
    zebra, absent = explain_buffers(database_url, mine, "zebraword", "absentword" + uuid.uuid4().hex[:6])
    assert zebra <= absent, (zebra, absent)
    [where_it_is] = explain_buffers(database_url, theirs, "zebraword")
    assert where_it_is > absent + 10, (where_it_is, absent)  # where the word is, the probe reads it


def test_another_tenants_bulk_messages_leave_my_searches_reading_what_they_read(
    base_url: str, database_url: str, mine: httpx.Client
) -> None:
    """Every arm starts from the tenant's own rows: another tenant's 2,000 messages holding the same common
    words (and their vectors), after ANALYZE, leave the buffers my lexical and semantic arms and my named-ID
    lookup touch where they were."""
    g = Graph(mine)
    thread = g.thread(summary="support chat")["id"]
    for i in range(5):
        r = mine.post(f"/threads/{thread}/messages",
                      json={"messages": [{"role": "user", "content": f"the payment failed again {i}"}] * 20})
        assert r.status_code == 201, r.text
    indexed(database_url, mine)
    question = "payment failed again"
    vector = _wordllama_vector(question)
    analyze = "ANALYZE thread_messages; ANALYZE embeddings; ANALYZE thread_events; ANALYZE threads"
    run_script(database_url, analyze)
    before = arm_buffers(database_url, tenant_of(mine), question, vector, thread)
    with tenant_client(base_url, database_url) as other:
        theirs = Graph(other).thread(summary="bulk chat")["id"]
        text = ("the payment failed again and the customer is waiting " * 40)[:2000]
        for _ in range(20):
            r = other.post(f"/threads/{theirs}/messages", json={"messages": [{"role": "user", "content": text}] * 100})
            assert r.status_code == 201, r.text
        indexed(database_url, other, timeout=120)
    run_script(database_url, analyze)
    after = arm_buffers(database_url, tenant_of(mine), question, vector, thread)
    for arm in before:
        assert after[arm] <= before[arm] * 1.5 + 20, (arm, before, after)


def _wordllama_vector(text: str) -> str:
    from recall_server import embedders
    [v] = embedders.WordLlama().embed_sync([text])
    return "[" + ",".join(map(repr, v)) + "]"


def arm_buffers(database_url: str, tenant: str, question: str, vector: str, named: str) -> dict[str, int]:
    """Shared buffers each arm's function touches for `question` in `tenant` (EXPLAIN ANALYZE BUFFERS of its
    function scan, which counts the statements run inside it), after a first run of each."""
    kinds = "ARRAY['thread', 'worker', 'trigger', 'report', 'memory', 'message']"
    statements = {
        "lexical": f"SELECT * FROM recall_lexical_hits($1, {kinds}, NULL, NULL, NULL, NULL, NULL, NULL, now(), 200, NULL)",
        "semantic": f"SELECT * FROM recall_semantic_hits($1, $2, 'wordllama:l2_supercat:256', 256, {kinds}, NULL, NULL, "
                    "NULL, NULL, NULL, NULL, now(), 200, NULL)",
        "named": f"SELECT * FROM recall_named_hits(ARRAY[$1], {kinds}, NULL, NULL, NULL, NULL, NULL, NULL, now(), NULL)",
    }

    async def go() -> dict[str, int]:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("SELECT set_config('app.tenant_id', $1, false), set_config('app.access', 'write', false)",
                               tenant)
            out = {}
            args = {"lexical": (question,), "semantic": (question, vector), "named": (named,)}
            for arm, sql in statements.items():
                for _ in range(2):  # the first run plans and reads the catalogs
                    plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}", *args[arm])
                node = json.loads(plan)[0]["Plan"]
                out[arm] = node["Shared Hit Blocks"] + node["Shared Read Blocks"]
        finally:
            await conn.close()
        return out

    return asyncio.run(go())


@pytest.mark.slow
def test_a_word_the_statistics_call_common_ranks_as_it_does_counted(base_url: str, database_url: str) -> None:
    """A word ANALYZE finds in 10,000 or more of a table's objects of the tenant is taken as common without
    counting its matches (counting reads up to 1,000 rows a word, after building the word's whole bitmap: on a
    million objects, 95% of a question's time; bench/million.py), and the page is exactly the counted one: a
    key granted `**` counts, since what its grants reach decides its counts."""
    tenant = "t" + uuid.uuid4().hex[:12]
    run_script(database_url, f"""
        INSERT INTO tenants (id) VALUES ('{tenant}');
        INSERT INTO triggers (tenant_id, id, source, summary, content_type, payload, payload_sha256, request_hash,
                              occurred_at)
        SELECT '{tenant}', 'trg_x' || g, 'test', words || ' ' || g, 'text/plain', p, sha256(p), '\\x', now()
          FROM generate_series(1, 12000) g,
               LATERAL (SELECT CASE WHEN g % 200 = 0 THEN 'everywhere seldomword' ELSE 'everywhere' END AS words) w,
               LATERAL (SELECT convert_to(w.words, 'UTF8') AS p) x;
        DELETE FROM embedding_queue WHERE tenant_id = '{tenant}';  -- not the indexer's work: other tests wait on it
        ANALYZE triggers;""")
    everything = "write" + ids.grant_lines([("**", "write")], None)
    for question, found in (("everywhere seldomword", 60), ("everywhere", 200)):  # the rare word finds; a page
        by_statistics = lexical_hits(database_url, tenant, question, "write")
        assert len(by_statistics) == found and by_statistics == lexical_hits(database_url, tenant, question, everything)


def lexical_hits(database_url: str, tenant: str, q: str, access: str,
                 kinds: tuple[str, ...] = ("thread", "worker", "trigger", "report", "memory")) -> list[tuple]:
    """recall_lexical_hits' page for `q` (its best 200: kind, ID, score), bound as a key with `access`."""
    async def go() -> list[tuple]:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("SELECT set_config('app.tenant_id', $1, false), set_config('app.access', $2, false)",
                               tenant, access)
            rows = await conn.fetch("SELECT hit_kind, hit_id, hit_score FROM recall_lexical_hits($1, $2, NULL, NULL, "
                                    "NULL, NULL, NULL, NULL, now(), 200, NULL)", q, list(kinds))
        finally:
            await conn.close()
        return [tuple(r) for r in rows]

    return asyncio.run(go())


def explain_buffers(database_url: str, tenant: str, *words: str, access: str = "write") -> list[int]:
    """Shared buffers (hit or read) of a lexical search for each word (letters and digits) in `tenant` by a key
    with `access` (bound as the key check binds it: its scope, then its grants' lines), from EXPLAIN (ANALYZE,
    BUFFERS): a function scan's node counts every statement run inside the function. On one connection, after
    a first search, so that planning's catalog reads are not counted."""
    assert all(w.isalnum() for w in words)  # inlined: EXPLAIN EXECUTE takes no parameters

    async def go() -> list[int]:
        conn = await asyncpg.connect(database_url)
        try:
            await conn.execute("SELECT set_config('app.tenant_id', $1, false), set_config('app.access', $2, false)",
                               tenant, access)
            await conn.execute("PREPARE lexical(text) AS SELECT * FROM recall_lexical_hits($1, ARRAY['thread', "
                               "'worker', 'trigger', 'report', 'memory'], NULL, NULL, NULL, NULL, NULL, NULL, now(), 200, NULL)")
            out = []
            for word in ("warmup", *words):
                plan = await conn.fetchval(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE lexical('{word}')")
                node = json.loads(plan)[0]["Plan"]
                out.append(node["Shared Hit Blocks"] + node["Shared Read Blocks"])
        finally:
            await conn.close()
        return out[1:]

    return asyncio.run(go())


# ---- servers configured otherwise: no embedder, no pgvector, an embedder that fails ------------------


@contextmanager
def serving(database_url: str, tmp_path: Path, **env: str) -> Iterator[tuple[ServerProcess, httpx.Client]]:
    server = ServerProcess(database_url, tmp_path / f"server-{uuid.uuid4().hex[:6]}.log", **env).start()
    try:
        with tenant_client(server.url, database_url) as c:
            yield server, c
    finally:
        server.stop()


@pytest.mark.slow
def test_the_default_embedder_serves_search_by_meaning(fresh_database: str, tmp_path: Path) -> None:
    """A server on the default embedder (MiniLM on onnxruntime, not the suite's fast wordllama) embeds its
    writes and ranks by meaning a question that shares no word with its answer, over HTTP; a question nothing
    stored answers gets the "no close match" page. Its own database: no other server's indexer drains its queue."""
    database_url = fresh_database
    assert config.Settings().embedder == "minilm"
    with serving(database_url, tmp_path, RECALL_EMBEDDER="minilm") as (server, c):
        answer = remember(c, ["ops"], "retries", "Card payments are retried three times with exponential backoff")
        remember(c, ["ops"], "deploys", "Deploys go out on Tuesdays after the release train leaves")
        Graph(c).thread(summary="Quarterly planning for the design system")
        indexed(database_url, c)
        models = run_sql(database_url, "SELECT DISTINCT model FROM embeddings WHERE tenant_id = $1", tenant_of(c))
        assert [m["model"] for m in models] == ["minilm:all-MiniLM-L6-v2-int8:384"]
        assert found(c, "how many times do we re-attempt a charge", mode="semantic")[0] == answer["id"]
        page = search(c, "how many times do we re-attempt a charge", min_score=0.5)
        assert [h["id"] for h in page["data"]][:1] == [answer["id"]] and page["data"][0]["score"] >= 0.5
        page = search(c, "what did we decide about the database", min_score=0.5)
        assert page["data"] == [] and page["note"] == "no close match" and page["nearest"], page


def test_without_an_embedder_search_is_lexical_and_says_so(database_url: str, tmp_path: Path) -> None:
    with serving(database_url, tmp_path, RECALL_EMBEDDER="none") as (server, c):
        ready = httpx.get(f"{server.url}/readyz").json()["search"]
        assert ready["modes"] == ["lexical", "exact"] and not ready.get("note") is None
        assert "RECALL_EMBEDDER=none" in ready["note"]
        Graph(c).thread(summary="the nightly export failed")
        page = search(c, "export failures")
        assert page["mode"] == "lexical" and "RECALL_EMBEDDER=none" in page["note"]
        assert len(page["data"]) == 1
        assert_problem(c.get("/search", params={"q": "export", "mode": "semantic"}), 400, "mode")


@pytest.mark.slow
def test_a_store_without_pgvector_serves_lexical_search(fresh_database: str, tmp_path: Path) -> None:
    cli(fresh_database, "migrate")
    run_script(fresh_database, "DROP EXTENSION vector CASCADE")  # as on a PostgreSQL without pgvector
    with serving(fresh_database, tmp_path) as (server, c):
        ready = httpx.get(f"{server.url}/readyz").json()["search"]
        assert ready["modes"] == ["lexical", "exact"] and ready["vectors"] is False
        assert "no pgvector" in ready["note"]
        thread = Graph(c).thread(summary="the nightly export failed")
        page = search(c, "export failures")
        assert page["mode"] == "lexical" and "no pgvector" in page["note"]
        assert [h["id"] for h in page["data"]] == [thread["id"]]
        assert c.delete(f"/threads/{thread['id']}").status_code == 204  # erasure works without the vectors


@pytest.mark.slow
@pytest.mark.skipif(bool(os.environ.get("DATABASE_URL")), reason="about the embedded cluster's own processes")
def test_the_indexers_backend_of_the_embedded_cluster_runs_at_the_lowest_priority(
    fresh_database: str, tmp_path: Path
) -> None:
    """The indexer's PostgreSQL backend yields the CPU to the requests' backends, as its embedding thread does,
    where the server runs the embedded cluster (its data directory); elsewhere it is left as it is."""
    [[directory]] = run_sql(fresh_database, "SELECT current_setting('data_directory')")
    cluster_home = str(Path(directory).parent)  # the embedded cluster is <data dir>/pg

    def indexer_backend_priority(**env: str) -> tuple[int, int]:
        with serving(fresh_database, tmp_path, **env) as (server, c):
            thread = Graph(c).thread(summary="indexed at the lowest priority")
            deadline = time.monotonic() + 60
            while run_sql(fresh_database, "SELECT 1 FROM embedding_queue WHERE object_id = $1", thread["id"]):
                assert time.monotonic() < deadline, "the indexer never took the thread"
                time.sleep(0.2)
            backends = dict(run_sql(fresh_database, "SELECT application_name, pid FROM pg_stat_activity "  # this
                                                    "WHERE application_name LIKE 'recall-server%' "  # server's
                                                    "AND datname = current_database()"))
            return (os.getpriority(os.PRIO_PROCESS, backends["recall-server indexer"]),
                    os.getpriority(os.PRIO_PROCESS, backends["recall-server"]))  # one of the requests' pool

    assert indexer_backend_priority(RECALL_DATA_DIR=cluster_home) == (19, 0)
    assert indexer_backend_priority(RECALL_DATA_DIR=str(tmp_path / "elsewhere")) == (0, 0)


@pytest.mark.slow
def test_a_write_never_waits_for_an_unavailable_embedder_and_its_entry_is_kept(
    fresh_database: str, tmp_path: Path
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"  # nothing listens: every embedding call fails at once
    with serving(fresh_database, tmp_path, RECALL_EMBEDDER="openai", RECALL_EMBED_URL=dead,
                 RECALL_EMBED_MODEL="m", RECALL_EMBED_DIMS="8") as (server, c):
        thread = Graph(c).thread(summary="written while the embedder is down")
        deadline = time.monotonic() + 30
        while not (rows := run_sql(fresh_database, "SELECT attempts, last_error, not_before > now() AS later "
                                                   "FROM embedding_queue WHERE object_id = $1", thread["id"])) \
                or rows[0]["attempts"] == 0:
            assert time.monotonic() < deadline, "the indexer never tried"
            time.sleep(0.2)
        assert rows[0]["later"] and "unreachable" in rows[0]["last_error"]
        assert c.get(f"/threads/{thread['id']}").status_code == 200
        page = search(c, "written while the embedder is down")  # the question cannot be embedded either
        assert page["mode"] == "lexical" and "could not embed" in page["note"]
        assert [h["id"] for h in page["data"]] == [thread["id"]]
        refused = c.get("/search", params={"q": "written while the embedder is down", "mode": "semantic"})
        assert_problem(refused, 503, "mode=lexical")  # by meaning only: try again
        assert refused.headers["Retry-After"] == "1"
        metrics = httpx.get(f"{server.url}/metrics").text
        assert 'recall_embedding_failures_total{reason="unavailable"}' in metrics


@pytest.mark.slow
def test_reindex_embeds_what_has_no_vector_and_reports_progress(database_url: str, mine: httpx.Client) -> None:
    g = Graph(mine)
    made = [g.thread(summary=f"release train {i} departed")["id"] for i in range(5)]
    indexed(database_url, mine)
    run_sql(database_url, "DELETE FROM embeddings WHERE tenant_id = $1", tenant_of(mine))
    assert found(mine, "release train departed", mode="semantic") == []
    out = cli(database_url, "reindex")
    assert out.startswith("reindexed ") and "wordllama" in out
    vectors = run_sql(database_url, "SELECT object_id FROM embeddings WHERE tenant_id = $1", tenant_of(mine))
    assert sorted(r[0] for r in vectors) == sorted(made)
    assert set(found(mine, "release train departed", mode="semantic")) == set(made)


# ---- the semantic arm past exact_max: the HNSW walk and when it is not taken ----------------------------------

WALK_MODEL = "walk-test:8"


def _axis(i: int, noise: str) -> str:
    """SQL for an 8-d vector near axis i (noise from `noise`, a column)."""
    return (f"('[' || array_to_string(ARRAY(SELECT CASE WHEN d = {i} THEN 1 ELSE 0.05 * sin({noise} * (d + 1)) END"
            " FROM generate_series(0, 7) d), ',') || ']')::vector")


@pytest.fixture(scope="module")
def walk_store(database_url: str) -> Iterator[str]:
    """A store of its own with an 8-d model past exact_max (20,000 of a tenant's vectors) and its HNSW index:
    tenant walk-a has 20,100 threads near axis 0 and 30 workers near axis 1; tenant walk-b 30,000 threads
    near axis 2, so a walk from axis 2 meets only walk-b's vectors for its first hnsw.max_scan_tuples."""
    from recall_server.db.migrate import migrate

    name = f"recall_walk_{uuid.uuid4().hex[:12]}"
    run_script(database_url, f'CREATE DATABASE "{name}"')
    store = with_database(database_url, name)
    try:
        asyncio.run(migrate(store))
        if not run_sql(store, "SELECT recall_vectors_available()")[0][0]:
            pytest.skip("this PostgreSQL has no pgvector")
        run_script(store, f"""
            SET session_replication_role = replica;  -- no embedding queue for these rows
            INSERT INTO tenants (id) VALUES ('walk-a'), ('walk-b');
            INSERT INTO threads (tenant_id, id, title, summary, status, request_hash)
            SELECT t, 'thr_w' || g, 't', 's', 'open', '\\x'
              FROM (VALUES ('walk-a', 20100), ('walk-b', 30000)) v(t, n), generate_series(1, n) g;
            INSERT INTO workers (tenant_id, id, name, summary, request_hash)
            SELECT 'walk-a', 'wkr_w' || g, 'w', 's', '\\x' FROM generate_series(1, 30) g;
            INSERT INTO embeddings (tenant_id, object_id, kind, model, dims, embedding)
            SELECT tenant_id, id, 'thread', '{WALK_MODEL}', 8,
                   CASE tenant_id WHEN 'walk-a' THEN {_axis(0, "(hashtext(id) % 1000)")} ELSE {_axis(2, "(hashtext(id) % 1000)")} END
              FROM threads WHERE tenant_id IN ('walk-a', 'walk-b');
            INSERT INTO embeddings (tenant_id, object_id, kind, model, dims, embedding)
            SELECT 'walk-a', id, 'worker', '{WALK_MODEL}', 8, {_axis(1, "(hashtext(id) % 1000)")}
              FROM workers WHERE tenant_id = 'walk-a';
            ANALYZE;
        """)
        assert run_sql(store, "SELECT recall_embedding_index($1, 8)", WALK_MODEL)[0][0]
        yield store
    finally:
        run_script(database_url, f'DROP DATABASE "{name}" WITH (FORCE)')


def _nearest(store: str, axis: int, kinds: list[str], depth: int) -> list[str]:
    """recall_semantic_hits as tenant walk-a's requests call it (as recall_app, the tenant bound)."""
    from recall_server.db.pool import as_app_role

    vector = "[" + ",".join("1" if d == axis else "0" for d in range(8)) + "]"

    async def run() -> list[str]:
        conn = await asyncpg.connect(as_app_role(store))
        try:
            async with conn.transaction():
                await conn.execute("SELECT set_config('app.tenant_id', 'walk-a', true)")
                rows = await conn.fetch(
                    "SELECT hit_id FROM recall_semantic_hits('', $1, $2, 8, $3, NULL, NULL, NULL, NULL, NULL, NULL,"
                    " now(), $4, NULL)", vector, WALK_MODEL, kinds, depth)
                return [r[0] for r in rows]
        finally:
            await conn.close()
    return asyncio.run(run())


ALL_KINDS = ["thread", "worker", "trigger", "report", "memory", "message"]


@pytest.mark.slow
def test_past_exact_max_a_question_walks_the_graph_and_finds_the_nearest(walk_store: str) -> None:
    found = _nearest(walk_store, 0, ALL_KINDS, 200)
    exact = [r[0] for r in run_sql(walk_store, f"""
        SELECT object_id FROM embeddings WHERE tenant_id = 'walk-a' AND model = '{WALK_MODEL}'
         ORDER BY embedding <=> '[1,0,0,0,0,0,0,0]'::vector LIMIT 200""")]
    assert len(found) == 200 and all(f.startswith("thr_w") for f in found)
    assert len(set(found) & set(exact)) >= 180, "the walk's page is not near the exact one"


@pytest.mark.slow
def test_a_filtered_question_finds_every_hit_however_far_they_lie_in_the_graph(walk_store: str) -> None:
    """The workers lie near axis 1; asked from axis 0 (where 20,100 threads are) with type=worker, a walk would
    meet few of them before it stops; the arm sorts the exact distances instead."""
    found = _nearest(walk_store, 0, ["worker"], 200)
    assert sorted(found) == sorted(f"wkr_w{g}" for g in range(1, 31))


@pytest.mark.slow
def test_a_walk_that_meets_only_other_tenants_vectors_falls_back_to_the_sort(walk_store: str) -> None:
    """From axis 2 the walk's first 20,000 vectors are walk-b's: it comes back short, and the sort of walk-a's
    own distances fills the page."""
    found = _nearest(walk_store, 2, ALL_KINDS, 200)
    assert len(found) == 200 and all(f.startswith(("thr_w", "wkr_w")) for f in found)


def test_the_servers_connections_compile_no_statement_with_jit(database_url: str) -> None:
    """A plan priced past jit_above_cost compiles on every execution where PostgreSQL has LLVM (the semantic
    arm's walk and sort as one statement with sorting off: 1.1 s a search). The server's connections turn JIT off."""
    from recall_server.db.pool import Database

    async def go() -> str:
        db = await Database.open(database_url, min_size=1, max_size=1, timeout=10, queue_limit=1, queue_wait=1)
        try:
            return await db.pool.fetchval("SELECT current_setting('jit')")
        finally:
            await db.close()

    assert asyncio.run(go()) == "off"
