"""The rerank stage of a ranked search: a relevance in [0, 1] for each candidate, and the floor below which a
candidate is not a match (pure; db/queries/search.py computes the score inside the search's one statement).

The arms rank by reciprocal rank, which says where a hit stands among the others, not whether it answers the
question: the first of ten unrelated hits has the same fused score as the first of ten right ones. The rerank
stage reads two signals each candidate has, whichever arm found it:

- `cosine`: the cosine similarity of the question's vector and the object's stored one (the semantic arm's score,
  or read from the object's vector for a candidate only the lexical arm found);
- `words`: the lexical arm's score, the share of the question's words the object has, each weighted by how rare it
  is in the tenant (0 when only the semantic arm found it).

Each becomes the chance that the object matches, a logistic curve `σ((x - centre) / width)`, and the relevance
is the stronger of the two: either signal alone can carry a match. (A noisy OR, `1 - (1 - p_meaning)(1 -
p_words)`, ranked paraphrases a little better, but two weak signals together passed the floor: 7 of 12
held-out questions that nothing answers got a hit, against 2 of 12.) An object the question names by its ID
scores 1. The curves are fitted per embedder
(bench/retrieval/fit.py): cosines of one model are not comparable with another's. Hits below FLOOR are left out,
and a page that has none says so (`note`, with the NEAREST best candidates beside it)."""

from __future__ import annotations

import math
from typing import NamedTuple

DEPTH = 50  # the fused candidates the stage scores (the arms' best, by reciprocal rank), besides the named IDs
# and the semantic arm's best, which the fusion can push below DEPTH when the words find many objects: with
# them, held-out paraphrases' recall@5 before the floor went from 0.781 to 0.823 (bench/retrieval, MiniLM)
SEMANTIC_DEPTH = 20
FLOOR = 0.5  # the default min_score: below it a hit is not shown
NEAREST = 2  # candidates shown beside a page that has no hit at or above the floor


class Calibration(NamedTuple):
    """The two logistic curves of one embedder: cosine centre and width, words centre and width."""

    cosine_centre: float
    cosine_width: float
    words_centre: float
    words_width: float


# Fitted on bench/retrieval's development questions (fit.py; the held-out half measures them).
CALIBRATIONS = {
    "minilm:": Calibration(0.34, 0.18, 0.5, 0.04),
    "wordllama:": Calibration(0.32, 0.05, 0.35, 0.05),
}
# Another embedder (an OpenAI-compatible one), or none: cosines of such models run higher than MiniLM's, so the
# meaning curve is centred higher; the words curve is MiniLM's.
DEFAULT = Calibration(0.45, 0.15, 0.5, 0.04)


def calibration(model: str | None) -> Calibration:
    """The curves for vectors of `model` (None: no vectors, words only)."""
    for prefix, found in CALIBRATIONS.items():
        if model and model.startswith(prefix):
            return found
    return DEFAULT


def relevance(cosine: float | None, words: float | None, curves: Calibration) -> float:
    """A candidate's relevance from its cosine (None: no vector of the model) and its share of the question's
    words (None: the lexical arm did not find it): what search.py's statement computes, in Python."""
    meaning = 0.0 if cosine is None else _sigmoid((cosine - curves.cosine_centre) / curves.cosine_width)
    lexical = _sigmoid(((words or 0.0) - curves.words_centre) / curves.words_width)
    return max(meaning, lexical)


def _sigmoid(x: float) -> float:
    return 1 / (1 + math.exp(-x))
