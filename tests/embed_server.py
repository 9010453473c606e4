"""An OpenAI-compatible embeddings server backed by an offline model, for the `openai` embedder's tests.

    python tests/embed_server.py [--port 0] [--embedder wordllama|minilm] [--key KEY]

Serves `POST /v1/embeddings` ({"input": str | [str], "model", "dimensions"?} -> {"data": [{"embedding",
"index"}], "model", "usage"}) and prints `listening on PORT` once bound. `dimensions` keeps the first
n floats and rescales them to unit length (as OpenAI's models shorten). The model name is echoed, with
two names that behave as a failing server would: `status-NNN` answers that status (its message counts the
requests for that name, so a test sees the retries), `sleep-S` answers after S seconds. With --key, a request without `Authorization: Bearer KEY` is a 401.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from recall_server import embedders  # noqa: E402


def make_handler(embedder: embedders.LocalEmbedder, key: str | None) -> type[BaseHTTPRequestHandler]:
    asked, lock = Counter[str](), threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet: tests read stdout for the port
            pass

        def answer(self, status: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def error(self, status: int, message: str) -> None:
            self.answer(status, {"error": {"message": message, "type": "invalid_request_error"}})

        def do_POST(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            if self.path.rstrip("/") != "/v1/embeddings":
                return self.error(404, f"no route {self.path}")
            if key and self.headers.get("Authorization") != f"Bearer {key}":
                return self.error(401, "missing or wrong API key")
            try:
                request = json.loads(raw)
                texts = request["input"]
                model = request["model"]
            except (ValueError, KeyError, TypeError):
                return self.error(400, "the body must be JSON with input and model")
            texts = [texts] if isinstance(texts, str) else texts
            if not isinstance(texts, list) or not texts or not all(isinstance(t, str) and t.strip() for t in texts):
                return self.error(400, "input must be a non-blank string or a non-empty list of them")
            dims = request.get("dimensions")
            if dims is not None and (not isinstance(dims, int) or not 1 <= dims <= embedder.dims):
                return self.error(400, f"dimensions must be 1-{embedder.dims}")
            with lock:
                asked[model] += 1
                count = asked[model]
            if str(model).startswith("status-"):
                return self.error(int(model.removeprefix("status-")), f"asked to answer {model} (request {count})")
            if str(model).startswith("sleep-"):
                time.sleep(float(model.removeprefix("sleep-")))
            vectors = embedder.embed_sync(texts)
            if dims:
                vectors = [[x / n for x in v[:dims]] for v in vectors
                           for n in [math.sqrt(sum(x * x for x in v[:dims]))]]
            tokens = sum(len(t.split()) for t in texts)
            self.answer(200, {"object": "list", "model": model,
                              "data": [{"object": "embedding", "index": i, "embedding": v} for i, v in enumerate(vectors)],
                              "usage": {"prompt_tokens": tokens, "total_tokens": tokens}})

    return Handler


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--embedder", choices=["wordllama", "minilm"], default="wordllama")
    parser.add_argument("--key")
    args = parser.parse_args()
    embedder = embedders.WordLlama() if args.embedder == "wordllama" else embedders.MiniLM()
    server = ThreadingHTTPServer((args.host, args.port), make_handler(embedder, args.key))
    print(f"listening on {server.server_address[1]}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
