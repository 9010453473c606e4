"""Scores a ranking on the labelled retrieval set: recall@5 and MRR, overall and per query class.

    python bench/retrieval/evaluate.py --embedder wordllama [--embedder minilm] [--loop-lag] [--json FILE]
    python bench/retrieval/evaluate.py --url http://127.0.0.1:8000 --key KEY [--seed] [--mode hybrid ...] [--no-rerank]

The first ranks in-process: cosine between each query's vector and every object's (corpus.document),
and also reports what the model costs: load seconds, wall ms and CPU ms per text embedded. The second
asks a live server's `GET /search` (after `--seed` creates the corpus there through the HTTP API), so
lexical, semantic and hybrid search are scored on the same questions, each with the rerank stage and
without it (`--no-rerank`: without only), on each half of the questions (queries.split: the rerank curves
were fitted on `dev`; `held-out` is the figure to quote). `evaluate(search)` takes any
`search(query) -> list[id]`, best first.

recall@1, recall@5: the share of a query's relevant objects among the first 1 or 5 results, averaged over
queries (recall@1 counts a query whose first result is relevant as 1).
MRR: 1 / the rank of the first relevant result within the first 10 (0 when none is), averaged.
none: of the questions nothing answers (queries.UNANSWERABLE), how many got a hit at all.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import sys
import time
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

import corpus  # noqa: E402
from queries import QUERIES, UNANSWERABLE, split  # noqa: E402

K, DEPTH = 5, 10
CLASSES = ("paraphrase", "keyword", "exact")
SPLITS = ("dev", "held-out")


def evaluate(search: Callable[[str], list[str]], queries: list[tuple[str, str, list[str]]] = QUERIES) -> dict:
    """{class or "all": {"n", "recall@1", "recall@5", "mrr"}} for a ranking, {"none": {"n", "answered"}} for the
    unanswerable questions among `queries`, and the per-query ranks under "queries"."""
    scores: dict[str, list[tuple[float, float, float]]] = {c: [] for c in (*CLASSES, "all")}
    answered, unanswerable = 0, 0
    detail = []
    for cls, query, relevant in queries:
        ranked = search(query)[:DEPTH]
        if not relevant:
            unanswerable += 1
            answered += bool(ranked)
            detail.append({"class": cls, "query": query, "top": ranked[:K]})
            continue
        recall = len(set(ranked[:K]) & set(relevant)) / len(relevant)
        first = next((rank for rank, oid in enumerate(ranked, 1) if oid in relevant), None)
        rr = 1 / first if first else 0.0
        for c in (cls, "all"):
            scores[c].append((float(first == 1), recall, rr))
        detail.append({"class": cls, "query": query, "first_relevant_rank": first, "top": ranked[:K]})
    result: dict = {c: {"n": len(s), **{m: round(sum(v[i] for v in s) / len(s), 3)
                                        for i, m in enumerate(("recall@1", "recall@5", "mrr"))}}
                    for c, s in scores.items() if s}
    if unanswerable:
        result["none"] = {"n": unanswerable, "answered": answered}
    result["queries"] = detail
    return result


def cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def cosine_search(embedder, objects: list[dict] = corpus.OBJECTS) -> tuple[Callable[[str], list[str]], dict]:
    """A ranking by cosine over the corpus with an in-process embedder, and what embedding it cost."""
    import numpy as np

    docs = [corpus.document(o) for o in objects]
    texts = [q for _, q, _ in QUERIES]
    wall, used = time.perf_counter(), cpu()
    doc_vectors = np.array(embedder.embed_sync(docs))
    query_vectors = np.array(embedder.embed_sync(texts))
    wall, used = time.perf_counter() - wall, cpu() - used
    by_query = dict(zip(texts, query_vectors))
    ids = [o["id"] for o in objects]

    def search(query: str) -> list[str]:
        scores = doc_vectors @ by_query[query]
        return [ids[i] for i in np.argsort(-scores, kind="stable")[:DEPTH]]

    count = len(docs) + len(texts)
    cost = {"texts": count, "chars_per_text": round(sum(map(len, docs + texts)) / count),
            "wall_ms_per_text": round(1000 * wall / count, 3), "cpu_ms_per_text": round(1000 * used / count, 3)}
    return search, cost


def loop_lag(embedder, texts: list[str], threaded: bool) -> float:
    """The event loop's longest stall (ms) while `texts` are embedded inline or in a worker thread: a
    ticker asks to wake every millisecond and records how late it woke."""
    async def go() -> float:
        worst, done = 0.0, asyncio.Event()

        async def ticker() -> None:
            nonlocal worst
            while not done.is_set():
                before = time.perf_counter()
                await asyncio.sleep(0.001)
                worst = max(worst, time.perf_counter() - before - 0.001)

        tick = asyncio.create_task(ticker())
        await asyncio.sleep(0.01)
        if threaded:
            await embedder.embed(texts)
        else:
            embedder.embed_sync(texts)
        done.set()
        await tick
        return round(worst * 1000, 1)

    return asyncio.run(go())


def in_process(name: str, lag: bool) -> dict:
    from recall_server import embedders

    started, used = time.perf_counter(), cpu()
    embedder = {"wordllama": embedders.WordLlama, "minilm": embedders.MiniLM}[name]()
    load = {"load_s": round(time.perf_counter() - started, 2), "load_cpu_s": round(cpu() - used, 2)}
    search, cost = cosine_search(embedder)
    result = {"ranking": f"cosine, {embedder.model}", **load, **cost, **evaluate(search)}
    if lag:
        docs = [corpus.document(o) for o in corpus.OBJECTS]
        result["loop_lag_ms"] = {"inline": loop_lag(embedder, docs, False), "thread": loop_lag(embedder, docs, True)}
    return result


def live(url: str, key: str, seed: bool, mode: str | None, rerank: bool, floor: float | None = None) -> list[dict]:
    """GET /search in `mode`, with the rerank stage (and min_score `floor`: None, the server's) or without,
    scored on each half of the questions."""
    from recall_server.client import RecallClient

    with RecallClient(url, key) as client:
        if seed:
            corpus.seed(client)
            wait_indexed(client)
        questions = QUERIES + UNANSWERABLE
        answers = {q: [hit.id for hit in client.search(q, mode=mode, limit=DEPTH, rerank=rerank, min_score=floor).data]
                   for _, q, _ in questions}
    label = f"mode={mode or 'default'}, rerank " + (("on" + (f", min_score {floor}" if floor is not None else ""))
                                                   if rerank else "off")
    return [{"ranking": label, "split": half, **evaluate(answers.__getitem__, [x for x in questions if split(x[1]) == half])}
            for half in SPLITS]


def wait_indexed(client, timeout: float = 120.0) -> None:
    """Until every object of the set is found by its own summary in semantic mode (the indexer has caught up)."""
    deadline = time.monotonic() + timeout
    last = corpus.OBJECTS[-1]
    from recall_server.client import Unavailable

    while time.monotonic() < deadline:
        try:
            page = client.search(last["summary"], mode="semantic", limit=DEPTH, rerank=False)
        except Unavailable:  # the embedder is busy with the corpus: the question waits its turn
            page = None
        if page and any(hit.id == last["id"] for hit in page.data):
            return
        time.sleep(0.5)


def table(results: list[dict]) -> str:
    head = ["ranking", "split", *(f"{c} R@1 / R@5 / MRR" for c in (*CLASSES, "all")), "none answered"]
    rows = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        cells = [r["ranking"], r.get("split", "all"),
                 *(f"{r[c]['recall@1']:.3f} / {r[c]['recall@5']:.3f} / {r[c]['mrr']:.3f} (n={r[c]['n']})"
                   for c in (*CLASSES, "all")),
                 f"{r['none']['answered']} of {r['none']['n']}" if "none" in r else "-"]
        rows.append("| " + " | ".join(cells) + " |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--embedder", action="append", choices=["wordllama", "minilm"], default=[])
    parser.add_argument("--loop-lag", action="store_true", help="also measure event-loop stalls, inline vs thread")
    parser.add_argument("--url", help="a live server: score its GET /search")
    parser.add_argument("--key", help="a write key for --url (to seed) or a read key")
    parser.add_argument("--seed", action="store_true", help="create the corpus on --url first")
    parser.add_argument("--mode", action="append", default=[],
                        help="score GET /search in this mode (repeatable: exact, lexical, semantic, hybrid)")
    parser.add_argument("--no-rerank", action="store_true", help="score GET /search without the rerank stage only")
    parser.add_argument("--json", type=Path, help="write the full results (per query too) here")
    args = parser.parse_args()
    results = [in_process(name, args.loop_lag) for name in args.embedder]
    seed = args.seed
    for mode in args.mode or ([None] if args.url else []):
        for rerank, floor in (((False, None),) if args.no_rerank or mode == "exact"
                              else ((True, None), (True, 0.0), (False, None))):
            results += live(args.url, args.key, seed, mode, rerank, floor)
            seed = False
    if not results:
        parser.error("give --embedder or --url")
    print(f"{len(corpus.OBJECTS)} objects, {len(QUERIES)} queries")
    print(table(results))
    for r in results:
        extra = {k: v for k, v in r.items() if k not in (*CLASSES, "all", "none", "queries")}
        print(json.dumps(extra))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1) + "\n")


if __name__ == "__main__":
    main()
