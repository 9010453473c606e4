"""Fits the rerank stage's curves (recall_server/rerank.py) for one embedder on the development half of the
labelled set, and reports them on the held-out half.

    recall-server serve &        # the embedder to fit, e.g. RECALL_EMBEDDER=minilm
    python bench/retrieval/fit.py --url http://127.0.0.1:8000 --key KEY [--seed]

Each question (queries.QUERIES and queries.UNANSWERABLE) is asked once, `explain=true&min_score=0`: every
candidate of the rerank stage comes back with what it is scored from (its cosine, its share of the question's
words, whether the question names it). A grid of curves then re-scores them offline with rerank.relevance, the
server's own formula, and keeps the curves with the best mean MRR over the answerable `dev` questions among
those that let at most 10% of the unanswerable `dev` questions (at least 1) through the floor. What it prints
is what the server would answer with those curves; CALIBRATIONS in rerank.py takes them.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent.parent)]

import corpus  # noqa: E402
import evaluate  # noqa: E402
from queries import QUERIES, UNANSWERABLE, split  # noqa: E402

from recall_server import rerank  # noqa: E402

Candidates = dict[str, list[tuple[str, float | None, float | None, bool]]]  # question -> (id, cosine, words, named)

GRID = {
    "cosine_centre": [0.2 + 0.02 * i for i in range(21)],
    "cosine_width": [0.05, 0.08, 0.1, 0.12, 0.15, 0.18],
    "words_centre": [0.3 + 0.05 * i for i in range(11)],
    "words_width": [0.05, 0.08, 0.12, 0.16],
}


def candidates(url: str, key: str, seed: bool, mode: str | None) -> Candidates:
    """Every question's rerank candidates, in the fused order, with the signals they are scored from."""
    from recall_server.client import RecallClient

    found: Candidates = {}
    with RecallClient(url, key) as client:
        if seed:
            corpus.seed(client)
            evaluate.wait_indexed(client)
        for _, question, _ in QUERIES + UNANSWERABLE:
            page = client.search(question, mode=mode, explain=True, min_score=0, limit=100)
            hits = sorted(page.data, key=lambda h: h.explain.fused_rank or 0)
            found[question] = [(h.id, h.explain.cosine, h.explain.lexical_score, "id" in h.explain.arms) for h in hits]
    return found


def ranking(found: Candidates, curves: rerank.Calibration, floor: float = rerank.FLOOR):
    """search(question) -> the IDs the server would show with these curves, best first (ties: fused order)."""
    def search(question: str) -> list[str]:
        scored = [(1.0 if named else rerank.relevance(cosine, words, curves), -i, oid)
                  for i, (oid, cosine, words, named) in enumerate(found[question])]
        return [oid for score, _, oid in sorted(scored, reverse=True) if score >= floor]
    return search


def half(name: str) -> list[tuple[str, str, list[str]]]:
    return [q for q in QUERIES + UNANSWERABLE if split(q[1]) == name]


def fit(found: Candidates) -> tuple[rerank.Calibration, dict]:
    dev = half("dev")
    allowed = max(1, len([q for q in dev if not q[2]]) // 10)
    best: tuple[float, rerank.Calibration | None, dict] = (-1.0, None, {})
    for values in itertools.product(*GRID.values()):
        curves = rerank.Calibration(*values)
        result = evaluate.evaluate(ranking(found, curves), dev)
        if result["none"]["answered"] <= allowed and result["all"]["mrr"] > best[0]:
            best = (result["all"]["mrr"], curves, result)
    assert best[1] is not None, "no curves keep the unanswerable questions out"
    return best[1], best[2]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--key", required=True)
    parser.add_argument("--seed", action="store_true", help="create the corpus on --url first")
    parser.add_argument("--mode", help="the search mode to fit (default: the server's)")
    parser.add_argument("--json", type=Path, help="write the candidates here (to fit again without a server)")
    args = parser.parse_args()
    found = candidates(args.url, args.key, args.seed, args.mode)
    if args.json:
        args.json.write_text(json.dumps(found) + "\n")
    curves, _ = fit(found)
    shipped = {name: c for name, c in rerank.CALIBRATIONS.items()}
    rows = [{"ranking": f"fitted {tuple(round(v, 3) for v in curves)}", "split": s,
             **evaluate.evaluate(ranking(found, curves), half(s))} for s in evaluate.SPLITS]
    rows += [{"ranking": f"shipped {name} {tuple(c)}", "split": s, **evaluate.evaluate(ranking(found, c), half(s))}
             for name, c in shipped.items() for s in evaluate.SPLITS]
    print(evaluate.table(rows))


if __name__ == "__main__":
    main()
