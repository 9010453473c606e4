"""LangGraph on recall-server, over the HTTP API through the client: RecallStore (a BaseStore kept in recall's
memories) and RecallSaver (a BaseCheckpointSaver kept in its checkpoints).

    store = RecallStore()                  # or RecallStore("http://host:8000", "rk_...")
    graph = builder.compile(store=store, checkpointer=RecallSaver())

Modules: codec.py (LangGraph's labels, namespaces, keys and filters in recall's terms), steps.py (an operation
written once as a generator of client calls, driven by the sync or the async client), store.py (RecallStore),
checkpointer.py (RecallSaver).
"""

from __future__ import annotations

from recall_server.langgraph.checkpointer import RecallSaver, strict_serde
from recall_server.langgraph.codec import (
    HASHED,
    KEY_MEMBER,
    MAX_KEY_CHARS,
    MAX_SEGMENT_CHARS,
    MAX_SEGMENTS,
    decode_label,
    decode_namespace,
    encode_label,
    encode_namespace,
    original,
    stored_key,
    stored_value,
    value_contains,
)
from recall_server.langgraph.steps import PAGE, Call, Steps
from recall_server.langgraph.store import GET_BUDGET, RecallStore

__all__ = [
    "GET_BUDGET", "HASHED", "KEY_MEMBER", "MAX_KEY_CHARS", "MAX_SEGMENTS", "MAX_SEGMENT_CHARS", "PAGE", "Call",
    "RecallSaver", "RecallStore", "Steps", "decode_label", "decode_namespace", "encode_label", "encode_namespace",
    "original", "stored_key", "stored_value", "strict_serde", "value_contains",
]
