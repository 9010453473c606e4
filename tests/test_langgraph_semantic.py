"""LangGraph's own vector-search store tests, run against RecallStore (with `index=`) on a live server.

Adapted from langgraph-checkpoint-sqlite 3.1.2 (tests/test_store.py, tests/test_async_store.py): every
vector-search test (a store opened with an index config) -- test_vector_store_initialization,
test_vector_insert_with_auto_embedding, test_vector_update_with_embedding, test_vector_search_with_filters,
test_vector_search_pagination, test_vector_search_edge_cases, test_embed_with_path,
test_embed_with_path_operation_config, test_scores, test_non_ascii, and the async twins of the first seven
(here with the suffix `_async`) -- plus test_search_sorting, which is not in the SQLite package: it is
langgraph-checkpoint-postgres's (tests/test_async_store.py). Each store is a RecallStore on a fresh tenant
of the test server, so "the store" holds exactly what the test put.

What differs from upstream, and why:

- Data. Upstream embeds with CharacterEmbeddings (character counts through random projections), whose
  similarities mean nothing ("bbbbluuu" is nearest to "blue car"). The server embeds with its own model
  (wordllama by default), so each test's texts are replaced by texts whose nearest neighbour by meaning is
  unambiguous ("zany zebra Xerxes" -> "zebras and lions roaming the African savanna", queried as "safari
  wildlife", a question sharing no word with it). The structure (which item is put, updated, deleted,
  filtered, and which one each query must find first) is upstream's. test_non_ascii keeps upstream's data:
  each item is found by its own text, which is already meaningful.
- `fake_embeddings` is an Embeddings whose every call fails the test: RecallStore keeps the index config
  but must never embed on the client (the server does).
- Every search that must see a write waits for the server's indexer to drain the tenant's
  `embedding_queue` first (`indexed`): a write is searchable by meaning shortly after it commits, not in
  the same call. A delete needs no wait (a deleted memory leaves the ranking at once).
- Parametrizations over SQLite's `conn_type` (memory/file) and `distance_type` (only "cosine") are dropped:
  one server, cosine similarity.

Dropped or changed assertions:

- test_vector_store_initialization: `store.embeddings == fake_embeddings` dropped (RecallStore resolves no
  client-side embeddings object); the check that setup created SQLite's vector tables becomes "a put gets
  exactly one vector on the server" (the `embeddings` table, for the tenant), and the embedder was never
  called. The async twin's `index_config["embed"] == fake_embeddings` is kept (the config is kept as given).
- test_vector_insert_with_auto_embedding(_async): added that the two nearest items come first and that the
  items with their text in `description`, `content` or `body` are embedded and found too (upstream's "doc2
  and doc3 are among the results" holds for any ranking of six items under the default limit of 10).
- test_vector_update_with_embedding(_async): upstream's last step (a put with `index=False` is not in the
  top 3) is test_vector_update_with_embedding_index_false(_async). Added: the updated item is first for its
  new text, and once deleted it is no longer found.
- test_vector_search_with_filters_async: upstream runs the four searches and asserts nothing ("can be
  inconsistent in test environments", with random projections); with meaningful data it asserts what the
  sync test asserts.
- test_vector_search_pagination(_async): added that the two pages are the first four of the full ranking,
  in order, and that the full ranking's scores never increase.
- test_vector_search_edge_cases(_async): added (after langgraph-checkpoint-postgres's version of the test)
  that a search without a query has no score, and that an unrelated query still finds the item (vector
  search orders, it does not drop), scored below a paraphrase. The long and special-character queries are
  upstream's, on the item's topic ("payment timeout " * 100, "payment!@#$%^&*()").
- test_embed_with_path(_async): `score > 0.9` for the query matching a field of both items, and `score < 0.9`
  for the query matching only the un-indexed field key2, dropped: they check per-field vectors (each
  indexed field embedded alone, an exact match scoring ~1); the server embeds the whole item as one text,
  `fields` are not used. The orderings (which item is first for a field only it holds) are kept.
- test_embed_with_path_operation_config: `abs(score0 - score1) < 0.1` for the field both items share and
  `all(score < 0.9)` for a field outside `index=[...]` dropped, for the same reason (per-operation field
  paths). The orderings and the `index=False` item being listed by a search without a query are kept.
- test_scores: the expected score was the cosine similarity of the fake embedder's vectors; here it is the
  cosine similarity of the query's vector (the server's model, run here) and the vector the server stored
  for the item (read from `embeddings`), to 1e-3. The queries (upstream "aaa", "bbb", "ccc", "abcd",
  "poisson" against "aaa") become: the item's own text, a paraphrase, one of its words, an unrelated text
  and "poisson".
- test_search_sorting_async: N = 100 per namespace as upstream; the matching item's text is about a payment
  timeout, the 200 others are a banana bread recipe.
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
from helpers import create_key, fails_after, run_sql
from langchain_core.embeddings import Embeddings

from recall_server.langgraph import RecallStore

_target: dict[str, str] = {}
_tenant_of: dict[int, str] = {}  # id(store) -> its tenant, for `indexed`


@pytest.fixture(autouse=True)
def _live_server(base_url: str, database_url: str) -> Iterator[None]:
    """Where the stores are made; and a test that hangs fails after 180 s instead."""
    _target.update(url=base_url, dsn=database_url)
    with fails_after(180):
        yield


@pytest.fixture()
def anyio_backend() -> str:
    return "asyncio"


class UnusedEmbeddings(Embeddings):
    """The index config's `embed`. RecallStore keeps the config but the server embeds: a call is a failure."""

    def __init__(self, dims: int = 256) -> None:
        self.dims = dims
        self.calls: list[Any] = []

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self.calls.append(texts)
        raise AssertionError(f"RecallStore embedded documents on the client: {texts!r}")

    def embed_query(self, text: str) -> list[float]:
        self.calls.append(text)
        raise AssertionError(f"RecallStore embedded a query on the client: {text!r}")


@pytest.fixture()
def fake_embeddings() -> Iterator[UnusedEmbeddings]:
    embeddings = UnusedEmbeddings()
    yield embeddings
    assert embeddings.calls == [], "RecallStore must not embed on the client"


def _fresh_tenant() -> tuple[str, str]:
    """A new tenant and a write key of it: a store that holds nothing yet."""
    tenant = f"lgs-{uuid.uuid4().hex[:16]}"
    return tenant, create_key(_target["dsn"], tenant, "write")


def _index_config(fake_embeddings: UnusedEmbeddings, text_fields: list[str] | None,
                  distance_type: str = "cosine") -> dict[str, Any]:
    """Upstream's SqliteIndexConfig, as given to the store."""
    return {"dims": fake_embeddings.dims, "embed": fake_embeddings, "text_fields": text_fields,
            "distance_type": distance_type}


def _open(fake_embeddings: UnusedEmbeddings, text_fields: list[str] | None) -> RecallStore:
    tenant, key = _fresh_tenant()
    store = RecallStore(_target["url"], key, index=_index_config(fake_embeddings, text_fields))
    _tenant_of[id(store)] = tenant
    return store


@contextmanager
def create_vector_store(fake_embeddings: UnusedEmbeddings,
                        text_fields: list[str] | None = None) -> Iterator[RecallStore]:
    """A RecallStore with LangGraph's index config, on a fresh tenant."""
    store = _open(fake_embeddings, text_fields)
    try:
        with store:
            yield store
    finally:
        _tenant_of.pop(id(store), None)


@asynccontextmanager
async def create_async_vector_store(fake_embeddings: UnusedEmbeddings,
                                    text_fields: list[str] | None = None) -> AsyncIterator[RecallStore]:
    store = _open(fake_embeddings, text_fields)
    try:
        yield store
    finally:
        await store.aclose()
        store.close()
        _tenant_of.pop(id(store), None)


def tenant_of(store: RecallStore) -> str:
    return _tenant_of[id(store)]


def indexed(store: RecallStore, timeout: float = 60) -> None:
    """Until the server's indexer has embedded everything this store's tenant queued."""
    deadline = time.monotonic() + timeout
    while run_sql(_target["dsn"], "SELECT 1 FROM embedding_queue WHERE tenant_id = $1 LIMIT 1", tenant_of(store)):
        assert time.monotonic() < deadline, "the indexer did not drain the queue"
        time.sleep(0.05)


async def aindexed(store: RecallStore) -> None:
    await asyncio.to_thread(indexed, store)


# ---- sync: tests/test_store.py ------------------------------------------------------------------


def test_vector_store_initialization(fake_embeddings: UnusedEmbeddings) -> None:
    """Test store initialization with embedding config."""
    # Basic initialization
    with create_vector_store(fake_embeddings) as store:
        assert store.index_config is not None
        assert store.index_config["dims"] == fake_embeddings.dims
        assert store.index_config.get("text_fields") is None

    # With text fields specified
    text_fields = ["content", "title"]
    with create_vector_store(fake_embeddings, text_fields=text_fields) as store:
        assert store.index_config is not None
        assert store.index_config["dims"] == fake_embeddings.dims
        assert store.index_config["text_fields"] == text_fields

    # Ensure the store's items get vectors: on the server, not in the client
    with create_vector_store(fake_embeddings) as store:
        store.put(("test",), "doc1", {"text": "the payment service timed out"})
        indexed(store)
        vectors = run_sql(_target["dsn"], "SELECT dims FROM embeddings WHERE tenant_id = $1", tenant_of(store))
        assert len(vectors) == 1, "the server made no vector for the put"
        assert vectors[0]["dims"] > 0
    assert fake_embeddings.calls == []


HIKES = [
    ("doc1", {"text": "a short note to buy milk and eggs"}),
    ("doc2", {"text": "a long hike up the mountain trail"}),
    ("doc3", {"text": "the longest climb of our hiking trip through the alpine mountains"}),
    ("doc4", {"description": "how to file your income tax return"}),
    ("doc5", {"content": "beginner piano lessons for children"}),
    ("doc6", {"body": "replacing the brake pads on a car"}),
]


def test_vector_insert_with_auto_embedding(fake_embeddings: UnusedEmbeddings) -> None:
    """Test inserting items that get auto-embedded."""
    with create_vector_store(fake_embeddings) as store:
        docs = HIKES

        for key, value in docs:
            store.put(("test",), key, value)
        indexed(store)

        results = store.search(("test",), query="a long hike in the mountains")
        assert len(results) > 0

        doc_order = [r.key for r in results]
        assert "doc2" in doc_order
        assert "doc3" in doc_order
        assert set(doc_order[:2]) == {"doc2", "doc3"}
        assert sorted(doc_order) == [key for key, _ in docs]  # whatever field holds the text


SAVANNA = "zebras and lions roaming the African savanna"
PUPPY = "training a puppy to sit and stay"
SAFARI = "safari wildlife"  # upstream: "Zany Xerxes", against "zany zebra Xerxes"


def test_vector_update_with_embedding(fake_embeddings: UnusedEmbeddings) -> None:
    """Test that updating items properly updates their embeddings."""
    with create_vector_store(fake_embeddings) as store:
        store.put(("test",), "doc1", {"text": SAVANNA})
        store.put(("test",), "doc2", {"text": "our puppy loves to fetch tennis balls"})
        store.put(("test",), "doc3", {"text": "parrots and finches singing in the aviary"})
        indexed(store)

        results_initial = store.search(("test",), query=SAFARI)
        assert len(results_initial) > 0
        assert results_initial[0].key == "doc1"
        initial_score = results_initial[0].score
        assert initial_score is not None

        store.put(("test",), "doc1", {"text": PUPPY})
        indexed(store)

        results_after = store.search(("test",), query=SAFARI)
        after_score = next((r.score for r in results_after if r.key == "doc1"), 0.0)
        assert after_score is not None and after_score < initial_score

        results_new = store.search(("test",), query=PUPPY)
        assert results_new[0].key == "doc1"
        for r in results_new:
            if r.key == "doc1":
                assert r.score is not None and r.score > after_score

        # Deleted: no longer found
        store.delete(("test",), "doc1")
        results_gone = store.search(("test",), query=PUPPY)
        assert [r.key for r in results_gone] == ["doc2", "doc3"]



def test_vector_update_with_embedding_index_false(fake_embeddings: UnusedEmbeddings) -> None:
    """The last step of upstream's test_vector_update_with_embedding, from the state it reaches there."""
    with create_vector_store(fake_embeddings) as store:
        store.put(("test",), "doc1", {"text": PUPPY})
        store.put(("test",), "doc2", {"text": "our puppy loves to fetch tennis balls"})
        store.put(("test",), "doc3", {"text": "parrots and finches singing in the aviary"})

        # Don't index this one
        store.put(("test",), "doc4", {"text": PUPPY}, index=False)
        indexed(store)
        results_new = store.search(("test",), query=PUPPY, limit=3)
        assert not any(r.key == "doc4" for r in results_new)


FRUIT_AND_CARS = [
    ("doc1", {"text": "a ripe apple, sweet and crunchy", "color": "red", "score": 4.5}),
    ("doc2", {"text": "a sports car with a loud engine", "color": "red", "score": 3.0}),
    ("doc3", {"text": "a tart apple for baking pies", "color": "green", "score": 4.0}),
    ("doc4", {"text": "a family car with four doors", "color": "blue", "score": 3.5}),
]
VEHICLE = "a vehicle to drive to work"  # upstream: "bbbbluuu", nearest to "blue car" by its characters


def test_vector_search_with_filters(fake_embeddings: UnusedEmbeddings) -> None:
    """Test combining vector search with filters."""
    with create_vector_store(fake_embeddings) as store:
        # Insert test documents
        docs = FRUIT_AND_CARS
        for key, value in docs:
            store.put(("test",), key, value)
        indexed(store)

        results = store.search(("test",), query="apple", filter={"color": "red"})

        # Check ordering and score - verify "doc1" is first result
        assert len(results) == 2
        assert results[0].key == "doc1"

        results = store.search(("test",), query="car", filter={"color": "red"})
        # Check ordering - verify "doc2" is first result
        assert len(results) > 0
        assert results[0].key == "doc2"

        results = store.search(("test",), query=VEHICLE, filter={"score": {"$gt": 3.2}})
        # There should be 3 documents with score > 3.2
        assert len(results) == 3
        # Check that the family car is the most similar to the query
        assert results[0].key == "doc4"
        # Verify remaining docs are ordered by appropriate similarity
        high_score_keys = [r.key for r in results]
        assert "doc1" in high_score_keys  # score 4.5
        assert "doc3" in high_score_keys  # score 4.0

        # Multiple filters
        results = store.search(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
        # Check that doc3 is the top result
        assert len(results) > 0
        assert results[0].key == "doc3"


WEATHER = [
    "heavy rain flooded the streets",
    "a thunderstorm knocked out the power",
    "the forecast says showers tomorrow",
    "a sunny day at the beach",
    "a spreadsheet of quarterly sales",
]
STORMS = "storms and heavy rain"  # upstream: "test", against "test document number {i}"


def test_vector_search_pagination(fake_embeddings: UnusedEmbeddings) -> None:
    """Test pagination with vector search."""
    with create_vector_store(fake_embeddings) as store:
        # Insert multiple similar documents
        for i, text in enumerate(WEATHER):
            store.put(("test",), f"doc{i}", {"text": text})
        indexed(store)

        # Test with different page sizes
        results_page1 = store.search(("test",), query=STORMS, limit=2)
        results_page2 = store.search(("test",), query=STORMS, limit=2, offset=2)

        assert len(results_page1) == 2
        assert len(results_page2) == 2
        # Make sure different pages have different results
        assert results_page1[0].key != results_page2[0].key
        assert results_page1[1].key != results_page2[0].key
        assert results_page1[0].key != results_page2[1].key
        assert results_page1[1].key != results_page2[1].key

        # Check scores are in descending order within each page
        assert results_page1[0].score >= results_page1[1].score
        assert results_page2[0].score >= results_page2[1].score

        # First page results should have higher scores than second page
        all_results = store.search(("test",), query=STORMS, limit=10)
        assert len(all_results) == 5
        assert all_results[0].score >= all_results[2].score  # First page vs second page start
        assert [r.key for r in results_page1 + results_page2] == [r.key for r in all_results[:4]]
        scores = [r.score for r in all_results]
        assert scores == sorted(scores, reverse=True)


TIMEOUT = "the payment service timed out"


def test_vector_search_edge_cases(fake_embeddings: UnusedEmbeddings) -> None:
    """Test edge cases in vector search."""
    with create_vector_store(fake_embeddings) as store:
        store.put(("test",), "doc1", {"text": TIMEOUT})
        indexed(store)

        close = store.search(("test",), query="checkout failed: the payment timed out")
        assert len(close) == 1

        results = store.search(("test",), query="")
        assert len(results) == 1
        assert results[0].score is None

        results = store.search(("test",), query=None)
        assert len(results) == 1
        assert results[0].score is None

        long_query = "payment timeout " * 100
        results = store.search(("test",), query=long_query)
        assert len(results) == 1

        special_query = "payment!@#$%^&*()"
        results = store.search(("test",), query=special_query)
        assert len(results) == 1

        unrelated = store.search(("test",), query="a recipe for banana bread")
        assert len(unrelated) == 1
        assert unrelated[0].score < close[0].score


BREAD = "a recipe for banana bread"
PATH_DOC1 = {
    # Omit key0 - check it doesn't raise an error
    "key1": BREAD,
    "key2": "the fall of the Roman empire",
    "key3": "growing tomatoes in a vegetable garden",
}
PATH_DOC2 = {
    "key0": "the payment service timed out at checkout",
    "key1": "learning guitar chords",
    "key2": "the rules of chess",
    "key3": BREAD,
}


def test_embed_with_path(fake_embeddings: UnusedEmbeddings) -> None:
    """Test vector search with specific text fields."""
    with create_vector_store(fake_embeddings, text_fields=["key0", "key1", "key3"]) as store:
        store.put(("test",), "doc1", PATH_DOC1)
        store.put(("test",), "doc2", PATH_DOC2)
        indexed(store)

        # doc2.key3 and doc1.key1 both hold it
        results = store.search(("test",), query="baking a sweet loaf for dessert")
        assert len(results) == 2
        assert results[0].key != results[1].key

        # ~Only match doc2
        results = store.search(("test",), query="customers could not pay by credit card")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].key == "doc2"
        assert results[0].score > results[1].score

        # ~Only match doc1
        results = store.search(("test",), query="which vegetables to plant this spring")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].key == "doc1"
        assert results[0].score > results[1].score

        # A field outside text_fields (doc2.key2): both items are ranked
        results = store.search(("test",), query="the rules of chess")
        assert len(results) == 2
        assert results[0].key != results[1].key


def test_embed_with_path_operation_config(fake_embeddings: UnusedEmbeddings) -> None:
    """Test operation-level field configuration for vector search."""
    with create_vector_store(fake_embeddings, text_fields=["key17"]) as store:
        doc3 = {
            "key0": "a thunderstorm flooded the streets",
            "key1": "the quarterly sales report",
            "key2": "knitting a wool scarf",
            "key3": "a jazz concert downtown",
        }
        doc4 = {
            "key0": "a marathon runner's training plan",
            "key1": "the quarterly sales report",  # Same as doc3.key1
            "key2": "repairing a bicycle tire",
            "key3": "an astronomy lecture about black holes",
        }

        store.put(("test",), "doc3", doc3, index=["key0", "key1"])
        store.put(("test",), "doc4", doc4, index=["key1", "key3"])
        indexed(store)

        results = store.search(("test",), query="heavy rain and flooding in the city")
        assert len(results) == 2
        assert results[0].key == "doc3"
        assert len(set(r.key for r in results)) == 2
        assert results[0].score > results[1].score

        results = store.search(("test",), query="black holes and distant galaxies")
        assert len(results) == 2
        assert results[0].key == "doc4"
        assert results[0].score > results[1].score

        results = store.search(("test",), query="quarterly sales figures")
        assert len(results) == 2
        assert results[0].key != results[1].key

        results = store.search(("test",), query="knitting a scarf")
        assert len(results) == 2

        # Test index=False behavior
        doc5 = {
            "key0": BREAD,
            "key1": "learning guitar chords",
        }
        store.put(("test",), "doc5", doc5, index=False)
        results = store.search(("test",))
        assert len(results) == 3
        assert any(r.key == "doc5" for r in results)


@functools.cache
def _local_model() -> Any:
    """The server's default embedder, run here (its weights ship in the wheel: no download)."""
    from recall_server.embedders import WordLlama

    return WordLlama()


def _cosine_similarity(X: list[float], Y: list[list[float]]) -> list[float]:
    similarities = []
    for y in Y:
        dot_product = sum(a * b for a, b in zip(X, y, strict=False))
        norm1 = sum(a * a for a in X) ** 0.5
        norm2 = sum(a * a for a in y) ** 0.5
        similarity = dot_product / (norm1 * norm2) if norm1 > 0 and norm2 > 0 else 0.0
        similarities.append(similarity)
    return similarities


@pytest.mark.parametrize(
    "query", [TIMEOUT, "checkout failed: payments were slow", "payment", "a recipe for banana bread", "poisson"]
)
def test_scores(fake_embeddings: UnusedEmbeddings, query: str) -> None:
    """Each item's score is the cosine similarity of the query's vector and the item's."""
    with create_vector_store(fake_embeddings, text_fields=["key0"]) as store:
        doc = {
            "key0": TIMEOUT,
        }
        store.put(("test",), "doc", doc, index=["key0", "key1"])
        indexed(store)

        results = store.search((), query=query)
        [stored] = run_sql(_target["dsn"], "SELECT model, embedding::text AS v FROM embeddings WHERE tenant_id = $1",
                           tenant_of(store))
        model = _local_model()
        assert stored["model"] == model.model, "the test server embeds with another model"
        vec0 = json.loads(stored["v"])
        [vec1] = model.embed_sync([query])

        similarities = _cosine_similarity(vec1, [vec0])

        assert len(results) == 1
        assert results[0].score == pytest.approx(similarities[0], abs=1e-3)


def test_non_ascii(fake_embeddings: UnusedEmbeddings) -> None:
    """Test support for non-ascii characters"""
    with create_vector_store(fake_embeddings) as store:
        store.put(("user_123", "memories"), "1", {"text": "这是中文"})  # Chinese
        store.put(("user_123", "memories"), "2", {"text": "これは日本語です"})  # Japanese
        store.put(("user_123", "memories"), "3", {"text": "이건 한국어야"})  # Korean
        store.put(("user_123", "memories"), "4", {"text": "Это русский"})  # Russian
        store.put(("user_123", "memories"), "5", {"text": "यह रूसी है"})  # Hindi
        indexed(store)

        result1 = store.search(("user_123", "memories"), query="这是中文")
        result2 = store.search(("user_123", "memories"), query="これは日本語です")
        result3 = store.search(("user_123", "memories"), query="이건 한국어야")
        result4 = store.search(("user_123", "memories"), query="Это русский")
        result5 = store.search(("user_123", "memories"), query="यह रूसी है")

        assert result1[0].key == "1"
        assert result2[0].key == "2"
        assert result3[0].key == "3"
        assert result4[0].key == "4"
        assert result5[0].key == "5"


# ---- async: tests/test_async_store.py -----------------------------------------------------------


@pytest.mark.anyio
async def test_vector_store_initialization_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test store initialization with embedding config."""
    async with create_async_vector_store(fake_embeddings) as store:
        assert store.index_config is not None
        assert store.index_config["dims"] == fake_embeddings.dims
        if hasattr(store.index_config.get("embed"), "embed_documents"):
            assert store.index_config["embed"] == fake_embeddings


@pytest.mark.anyio
async def test_vector_insert_with_auto_embedding_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test inserting items that get auto-embedded."""
    async with create_async_vector_store(fake_embeddings) as store:
        docs = HIKES

        for key, value in docs:
            await store.aput(("test",), key, value)
        await aindexed(store)

        results = await store.asearch(("test",), query="a long hike in the mountains")
        assert len(results) > 0

        doc_order = [r.key for r in results]
        assert "doc2" in doc_order
        assert "doc3" in doc_order
        assert set(doc_order[:2]) == {"doc2", "doc3"}
        assert sorted(doc_order) == [key for key, _ in docs]


@pytest.mark.anyio
async def test_vector_update_with_embedding_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test that updating items properly updates their embeddings."""
    async with create_async_vector_store(fake_embeddings) as store:
        await store.aput(("test",), "doc1", {"text": SAVANNA})
        await store.aput(("test",), "doc2", {"text": "our puppy loves to fetch tennis balls"})
        await store.aput(("test",), "doc3", {"text": "parrots and finches singing in the aviary"})
        await aindexed(store)

        results_initial = await store.asearch(("test",), query=SAFARI)
        assert len(results_initial) > 0
        assert results_initial[0].score is not None
        assert results_initial[0].key == "doc1"
        initial_score = results_initial[0].score

        await store.aput(("test",), "doc1", {"text": PUPPY})
        await aindexed(store)

        results_after = await store.asearch(("test",), query=SAFARI)
        after_score = next((r.score for r in results_after if r.key == "doc1"), 0.0)
        assert after_score is not None and initial_score is not None and after_score < initial_score

        results_new = await store.asearch(("test",), query=PUPPY)
        assert results_new[0].key == "doc1"
        for r in results_new:
            if r.key == "doc1":
                assert r.score is not None and after_score is not None and r.score > after_score

        # Deleted: no longer found
        await store.adelete(("test",), "doc1")
        results_gone = await store.asearch(("test",), query=PUPPY)
        assert [r.key for r in results_gone] == ["doc2", "doc3"]


@pytest.mark.anyio
async def test_vector_update_with_embedding_index_false_async(fake_embeddings: UnusedEmbeddings) -> None:
    """The last step of upstream's test_vector_update_with_embedding, from the state it reaches there."""
    async with create_async_vector_store(fake_embeddings) as store:
        await store.aput(("test",), "doc1", {"text": PUPPY})
        await store.aput(("test",), "doc2", {"text": "our puppy loves to fetch tennis balls"})
        await store.aput(("test",), "doc3", {"text": "parrots and finches singing in the aviary"})

        # Don't index this one
        await store.aput(("test",), "doc4", {"text": PUPPY}, index=False)
        await aindexed(store)
        results_new = await store.asearch(("test",), query=PUPPY, limit=3)
        assert not any(r.key == "doc4" for r in results_new)


@pytest.mark.anyio
async def test_vector_search_with_filters_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test combining vector search with filters."""
    async with create_async_vector_store(fake_embeddings) as store:
        docs = FRUIT_AND_CARS

        for key, value in docs:
            await store.aput(("test",), key, value)
        await aindexed(store)

        results = await store.asearch(("test",), query="apple", filter={"color": "red"})
        assert len(results) == 2
        assert results[0].key == "doc1"

        results = await store.asearch(("test",), query="car", filter={"color": "red"})
        assert len(results) > 0
        assert results[0].key == "doc2"

        results = await store.asearch(("test",), query=VEHICLE, filter={"score": {"$gt": 3.2}})
        assert len(results) == 3
        assert results[0].key == "doc4"
        assert {"doc1", "doc3"} <= {r.key for r in results}

        results = await store.asearch(("test",), query="apple", filter={"score": {"$gte": 4.0}, "color": "green"})
        assert len(results) > 0
        assert results[0].key == "doc3"


@pytest.mark.anyio
async def test_vector_search_pagination_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test pagination with vector search."""
    async with create_async_vector_store(fake_embeddings) as store:
        for i, text in enumerate(WEATHER):
            await store.aput(("test",), f"doc{i}", {"text": text})
        await aindexed(store)

        results_page1 = await store.asearch(("test",), query=STORMS, limit=2)
        results_page2 = await store.asearch(("test",), query=STORMS, limit=2, offset=2)

        assert len(results_page1) == 2
        assert len(results_page2) == 2
        assert results_page1[0].key != results_page2[0].key

        all_results = await store.asearch(("test",), query=STORMS, limit=10)
        assert len(all_results) == 5
        assert [r.key for r in results_page1 + results_page2] == [r.key for r in all_results[:4]]
        scores = [r.score for r in all_results]
        assert scores == sorted(scores, reverse=True)


@pytest.mark.anyio
async def test_vector_search_edge_cases_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test edge cases in vector search."""
    async with create_async_vector_store(fake_embeddings) as store:
        await store.aput(("test",), "doc1", {"text": TIMEOUT})
        await aindexed(store)

        close = await store.asearch(("test",), query="checkout failed: the payment timed out")
        assert len(close) == 1

        results = await store.asearch(("test",), query="")
        assert len(results) == 1
        assert results[0].score is None

        results = await store.asearch(("test",), query=None)
        assert len(results) == 1
        assert results[0].score is None

        long_query = "payment timeout " * 100
        results = await store.asearch(("test",), query=long_query)
        assert len(results) == 1

        special_query = "payment!@#$%^&*()"
        results = await store.asearch(("test",), query=special_query)
        assert len(results) == 1

        unrelated = await store.asearch(("test",), query="a recipe for banana bread")
        assert len(unrelated) == 1
        assert unrelated[0].score < close[0].score


@pytest.mark.anyio
async def test_embed_with_path_async(fake_embeddings: UnusedEmbeddings) -> None:
    """Test vector search with specific text fields."""
    async with create_async_vector_store(fake_embeddings, text_fields=["key0", "key1", "key3"]) as store:
        await store.aput(("test",), "doc1", PATH_DOC1)
        await store.aput(("test",), "doc2", PATH_DOC2)
        await aindexed(store)

        # doc2.key3 and doc1.key1 both hold it
        results = await store.asearch(("test",), query="baking a sweet loaf for dessert")
        assert len(results) == 2
        assert results[0].key != results[1].key

        # ~Only match doc2
        results = await store.asearch(("test",), query="customers could not pay by credit card")
        assert len(results) == 2
        assert results[0].key != results[1].key
        assert results[0].key == "doc2"
        assert results[0].score > results[1].score

        # A field outside text_fields (doc2.key2): both items are ranked
        results = await store.asearch(("test",), query="the rules of chess")
        assert len(results) == 2


@pytest.mark.slow
@pytest.mark.anyio
async def test_search_sorting_async(fake_embeddings: UnusedEmbeddings) -> None:
    """One item near the query among 200 far from it, in three namespaces under the prefix."""
    async with create_async_vector_store(fake_embeddings, text_fields=["key1"]) as store:
        amatch = {
            "key1": TIMEOUT,
        }

        await store.aput(("test", "M"), "M", amatch)
        N = 100
        for i in range(N):
            await store.aput(("test", "A"), f"A{i}", {"key1": BREAD})
        for i in range(N):
            await store.aput(("test", "Z"), f"Z{i}", {"key1": BREAD})
        await aindexed(store)

        results = await store.asearch(("test",), query="payment timeout during checkout", limit=10)
        assert len(results) == 10
        assert len(set(r.key for r in results)) == 10
        assert results[0].key == "M"
        assert results[0].score > results[1].score
