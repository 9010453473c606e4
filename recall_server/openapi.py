"""The published OpenAPI document: Litestar's schema, corrected where Litestar falls short.

Litestar (2.x) generates paths, parameters and component schemas from the handlers and
Structs. What it cannot know, added here in one place:
  - component schemas come from msgspec itself, so every constraint (patterns on list items,
    additionalProperties: false from forbid_unknown_fields) is exactly what the server enforces;
  - errors it documents itself (400 on parameter validation) are problem+json like all ours;
  - response headers: Location on creates, Link on pages, ETag/Content-Range on content,
    Retry-After on 503, and the content routes' 206/304 and any-media-type bodies;
  - OpenAPI links from every create to the reads and writes it enables, so a stateful
    tester (schemathesis) walks the same hop chains an agent does;
  - query parameters it cannot describe (a JSON object, a date-time, a repeated one's item pattern), and
    rules between a field's values that msgspec cannot state (no NUL in checkpoint metadata, at any depth);
  - IDs as named schemas (ThreadId, WorkerId, TriggerId, ReportId, MemoryId, AnyId), and their patterns on
    path parameters. The server answers a malformed or wrong-kind path ID with a 404 naming it
    (contract 3), so there the pattern is published, not enforced by the framework (a 400).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
import yaml
from litestar import Litestar, Request
from litestar.enums import OpenAPIMediaType
from litestar.openapi.plugins import JsonRenderPlugin, OpenAPIRenderPlugin

from recall_server import ids, models
from recall_server.errors import PROBLEM_JSON
from recall_server.webhooks import github

_PROBLEM = {"$ref": "#/components/schemas/ProblemBody"}
_HEADER_DOCS = {
    "Location": "Path of the created (or, on an identical retry, existing) object.",
    "Link": 'RFC 8288 link to the next page (rel="next"); present only when has_more is true.',
    "ETag": "Strong validator: a hash of the content, which never changes.",
    "Cache-Control": "Content is immutable.",
    "Content-Range": "The range served, or bytes */size on 416.",
    "Retry-After": "Seconds to wait before retrying.",
    "Idempotent-Replayed": "true when this is the stored outcome of an earlier request with the same Idempotency-Key.",
}

# operationId of each create -> (path parameter of the objects it makes, operations to link to)
_CREATES = {
    "CreateThread": ("thread_id", ["GetThread", "ListEvents", "AddNote", "AssignOwner", "UpdateThread",
                                   "DeleteThread"]),
    "CreateWorker": ("worker_id", ["GetWorker", "ListReports", "CreateReport", "DeleteWorker"]),
    "CreateTrigger": ("trigger_id", ["GetTrigger", "GetPayload", "DeleteTrigger"]),
    "CreateReport": ("report_id", ["GetReport", "GetBody", "DeleteReport"]),
    "CreateMemory": ("memory_id", ["GetMemory", "GetMemoryValue", "ListMemoryVersions", "DeleteMemory"]),
}
_PAGES = {"ListThreads", "ListEvents", "ListReports", "ListMemories", "ListMemoryVersions", "ListMemoryNamespaces",
          "Search", "ListBacklinks"}
_PAGES |= {"ListRunReads", "ListObjectReads", "ListRequests"}  # the recall trace, the request audit
_PAGES |= {"ListCheckpoints"}  # LangGraph checkpoints
# The named ID schemas: the same patterns recall_server/models enforces in bodies.
_ID_SCHEMAS = {
    "ThreadId": ids.pattern("thread"), "WorkerId": ids.pattern("worker"), "TriggerId": ids.pattern("trigger"),
    "ReportId": ids.pattern("report"), "MemoryId": ids.pattern("memory"), "AnyId": ids.ANY_ID_PATTERN,
}
_PATH_IDS = {"thread_id": "ThreadId", "worker_id": "WorkerId", "trigger_id": "TriggerId", "report_id": "ReportId",
             "memory_id": "MemoryId", "object_id": "AnyId"}
# A JSON media type (application/json or any +json), case-insensitive as media types are.
_JSON_TYPE = "^(" + "".join(f"[{c}{c.upper()}]" if c.isalpha() else c for c in "application/json") + "|.*\\+" \
    + "".join(f"[{c}{c.upper()}]" for c in "json") + ")$"
_KEY_ID = {"type": "string", "pattern": ids.KEY_ID_PATTERN, "description": "An API key's ID (rk_<id>.<secret>)."}
_CONTENT = {"GetPayload", "GetBody", "GetMemoryValue", "GetMessageContent", "GetCheckpointValue",
            "GetCheckpointWriteValue"}


def _header(name: str, required: bool) -> dict[str, Any]:
    return {"description": _HEADER_DOCS[name], "required": required, "schema": {"type": "string"}}


def _operations(doc: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    """operationId -> (path, method, operation)."""
    found = {}
    for path, item in doc["paths"].items():
        for method, op in item.items():
            found[op["operationId"]] = (path, method, op)
    return found


def _exact_components(names: list[str]) -> dict[str, Any]:
    """msgspec's own JSON Schema of the Structs: exact constraints (Litestar drops some on list items)."""
    structs = [getattr(models, name) for name in names]
    _, components = msgspec.json.schema_components(structs, ref_template="#/components/schemas/{name}")
    return components


def _named_ids(node: Any) -> Any:
    """Every inline ID schema (a string with one of the ID patterns) as a $ref to its named schema."""
    by_pattern = {pattern: name for name, pattern in _ID_SCHEMAS.items()}
    if isinstance(node, dict):
        if node.get("type") == "string" and node.get("pattern") in by_pattern:
            return {"$ref": f"#/components/schemas/{by_pattern[node['pattern']]}"}
        return {k: _named_ids(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_named_ids(v) for v in node]
    return node


def _id_components() -> dict[str, Any]:
    examples = {"ThreadId": "thr_pr_412", "WorkerId": "wkr_77a0", "TriggerId": "trg_8f21", "ReportId": "rpt_412a",
                "MemoryId": "mem_u1_tone", "AnyId": "thr_pr_412"}
    return {
        name: {"type": "string", "pattern": pattern, "examples": [examples[name]],
               "description": "Any recall ID: trg_, thr_, wkr_, rpt_ or mem_ and a body of 1-64 [A-Za-z0-9_-]."
               if name == "AnyId" else f"A {name[:-2].lower()} ID."}
        for name, pattern in _ID_SCHEMAS.items()
    }


def correct(doc: dict[str, Any]) -> dict[str, Any]:
    """Litestar's generated document with the corrections listed at the top of this module."""
    doc = copy.deepcopy(doc)
    schemas = _named_ids(_exact_components(sorted(doc["components"]["schemas"])))
    doc["components"]["schemas"] = schemas = dict(sorted({
        **schemas, **_id_components(), "JsonWithoutNul": copy.deepcopy(_JSON_WITHOUT_NUL)}.items()))
    ops = _operations(doc)

    for _, _, op in ops.values():
        for param in op.get("parameters", []):
            if param["in"] == "path" and param["name"] in _PATH_IDS:
                param["schema"] = {"$ref": f"#/components/schemas/{_PATH_IDS[param['name']]}"}
            elif param["in"] == "path" and param["name"] == "key_id":
                param["schema"] = dict(_KEY_ID)

    for _, _, op in ops.values():
        for status, response in op["responses"].items():
            if int(status) >= 400:
                response["content"] = {PROBLEM_JSON: {"schema": _PROBLEM}}
            if status == "503":
                response["headers"] = {"Retry-After": _header("Retry-After", True)}
            if not response.get("headers"):
                response.pop("headers", None)

    for op_id, (param, targets) in _CREATES.items():
        _, _, op = ops[op_id]
        for status in ("201", "200"):
            if status == "200":
                op["responses"]["200"] = copy.deepcopy(op["responses"]["201"])
                op["responses"]["200"]["description"] = "An identical retry: the existing object, unchanged."
            response = op["responses"][status]
            response["headers"] = {"Location": _header("Location", True),
                                   "Idempotent-Replayed": _header("Idempotent-Replayed", False)}
            response["links"] = {
                target: {"operationId": target, "parameters": {param: "$response.body#/id"}}
                for target in targets
            }
            response["links"]["ResolveId"] = {"operationId": "ResolveId",
                                              "parameters": {"object_id": "$response.body#/id"}}
    ops["AssignOwner"][2]["responses"]["200"] = copy.deepcopy(ops["AssignOwner"][2]["responses"]["201"])
    ops["AssignOwner"][2]["responses"]["200"]["description"] = "The worker already owned the thread."
    retracted = ops["RetractMessages"][2]["responses"]
    retracted["200"] = copy.deepcopy(retracted["201"])
    retracted["200"]["description"] = "Nothing was left to take out: no retraction appended (count 0)."
    put = ops["PutCheckpoint"][2]["responses"]
    put["200"] = copy.deepcopy(put["201"])
    put["200"]["description"] = "An identical retry: the checkpoint was stored before, unchanged."
    for status in ("201", "200"):  # the stateful phase reads back what a put stored, and erases its thread
        ref = {name: f"$response.body#/{name}" for name in ("thread_id", "checkpoint_ns", "checkpoint_id")}
        put[status]["links"] = {
            "GetCheckpointTuple": {"operationId": "GetCheckpointTuple", "parameters": ref},
            "ListCheckpoints": {"operationId": "ListCheckpoints", "parameters": {"thread_id": ref["thread_id"]}},
            "DeleteCheckpointThread": {"operationId": "DeleteCheckpointThread",
                                       "parameters": {"thread_id": ref["thread_id"]}},
        }

    for op_id in _PAGES:
        ops[op_id][2]["responses"]["200"]["headers"] = {"Link": _header("Link", False)}

    for op_id in _CONTENT:
        responses = ops[op_id][2]["responses"]
        any_media = {"*/*": {"schema": {}}}
        cached = {"ETag": _header("ETag", True), "Cache-Control": _header("Cache-Control", True)}
        responses["200"] = {"description": "The full content, in its own content type.", "headers": cached,
                            "content": any_media}
        # No `content` on 206: a byte range of JSON is not JSON, so it has no schema to check against.
        responses["206"] = {"description": "One byte range of the content, with the content's own Content-Type.",
                            "headers": {**cached, "Content-Range": _header("Content-Range", True)}}
        responses["304"] = {"description": "Not modified (If-None-Match matched the ETag).", "headers": cached}
        responses["416"]["headers"] = {"Content-Range": _header("Content-Range", True)}
        op = ops[op_id][2]
        op["parameters"] = [p for p in op.get("parameters", []) if p["in"] in ("path", "query")] + [
            {"name": name, "in": "header", "required": False, "schema": {"type": "string"}, "description": text}
            for name, text in (("Range", "bytes=first-last, first-, or -suffix (one range)."),
                               ("If-None-Match", "ETag(s) the client holds."),
                               ("If-Range", "Serve the range only if the ETag still matches."))
        ]

    _github_delivery(ops)
    # The recall trace and the request audit: every GET that needs a key takes X-Recall-Run, except the trace's
    # and the audit's own pages and the key list (trace.UNTRACED), and so does every write (service/audit.py);
    # a malformed one is a 400.
    for op_id, (_, method, op) in ops.items():
        if not op.get("security") or op_id in {"ListRunReads", "ListObjectReads", "ListRequests", "GetRequest",
                                               "ListKeys"}:
            continue
        if method in ("get", "post", "put", "patch", "delete"):
            recorded = ("this read in the trace" if method == "get" else "this request in the audit") \
                if op_id != "Search" else "this search in the trace and the audit"
            op.setdefault("parameters", []).append(
                {"name": "X-Recall-Run", "in": "header", "required": False,
                 "schema": {"type": "string", "pattern": ids.RUN_PATTERN},
                 "description": f"Record {recorded} of this run (GET /runs/{{run_id}}/reads, GET /requests?run=)."})
            op["responses"].setdefault("400", {"description": "A malformed X-Recall-Run header (or parameter).",
                                               "content": {PROBLEM_JSON: {"schema": _PROBLEM}}})
    _lens_links(ops)
    _query_values(ops)

    # Checkpoint metadata is stored as jsonb, which cannot hold a NUL: the server refuses one, naming the field.
    metadata = schemas["PutCheckpoint"]["properties"]["metadata"]
    metadata.update({"propertyNames": {"pattern": _NO_NUL},
                     "additionalProperties": {"$ref": "#/components/schemas/JsonWithoutNul"}})
    metadata["description"] += " No string or member name in it may hold the NUL character (U+0000)."

    schemas["Spilled"]["minProperties"] = 1
    # Exactly one of seqs, newest and through (a null one counts as absent; the server answers 422 otherwise).
    retract = schemas["RetractMessages"]
    retract["minProperties"] = retract["maxProperties"] = 1
    for field in ("seqs", "newest", "through"):  # null is taken as absent, and publishing it would allow {"seqs": null}
        prop = retract["properties"][field]
        prop.update(next(v for v in prop.pop("anyOf") if v.get("type") != "null"))
        prop.pop("default", None)
    # Rules between fields, which msgspec cannot state; the server answers 422 for them.
    for name in ("CreateThread", "CreateWorker", "CreateTrigger", "CreateReport", "CreateMemory"):
        schemas[name]["not"] = {"description": "ttl and expires_at together", "required": ["ttl", "expires_at"],
                                "properties": {"ttl": {"type": "integer"}, "expires_at": {"type": "string"}}}
    for name, field in (("CreateTrigger", "payload"), ("CreateReport", "body"), ("CreateMemory", "value")):
        schemas[name]["if"] = {"required": ["content_type"],
                               "properties": {"content_type": {"type": "string", "not": {"pattern": _JSON_TYPE}}}}
        schemas[name]["then"] = {"description": f"a non-JSON content type takes {field} as a string",
                                 "properties": {field: {"type": "string"}}}
    schemas["CreateKey"]["if"] = {"required": ["grants"], "properties": {"grants": {"contains": {
        "required": ["namespace"], "properties": {"namespace": {"type": "string", "pattern": "[{]"}}}}}}
    schemas["CreateKey"]["then"] = {"description": "a grant naming {subject_id} or {subject_kind} needs a subject",
                                    "required": ["subject"], "properties": {"subject": {"type": "string"}}}
    for op in (o for _, _, o in ops.values()):
        op["responses"] = dict(sorted(op["responses"].items()))
    return _ecma_patterns(doc)


_HOOK_ID = {"type": "string", "pattern": ids.HOOK_ID_PATTERN, "description": "A webhook endpoint's ID."}
_NO_NUL = "^[^\\u0000]*$"
_JSON_WITHOUT_NUL = {
    "description": "Any JSON value with no NUL character (U+0000) in a string or a member name (PostgreSQL's "
                   "jsonb cannot hold one).",
    "anyOf": [{"type": ["null", "boolean", "number"]}, {"type": "string", "pattern": _NO_NUL},
              {"type": "array", "items": {"$ref": "#/components/schemas/JsonWithoutNul"}},
              {"type": "object", "propertyNames": {"pattern": _NO_NUL},
               "additionalProperties": {"$ref": "#/components/schemas/JsonWithoutNul"}}],
}
# Query parameters whose value is a JSON object (the server decodes it): published as such, with their bound
# on the text (which no schema of the object can state) in their description.
_JSON_QUERY = {("ListCheckpoints", "metadata_contains"), ("ListMemories", "value_contains")}


def _query_values(ops: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    """What Litestar cannot say of a query parameter: that it is JSON, that it is a date-time, and the pattern
    of a repeated one's items (which Litestar enforces and leaves out)."""
    for op_id, (_, _, op) in ops.items():
        for param in op.get("parameters", []):
            schema = param.get("schema", {})
            if (op_id, param["name"]) in _JSON_QUERY:
                param["description"] += f" At most {schema['maxLength']} characters of JSON."
                for key in ("schema", "allowReserved"):  # a parameter with `content` has no serialisation style
                    param.pop(key, None)
                param["content"] = {"application/json": {"schema": {"type": "object"}}}
            elif (op_id, param["name"]) in (("ListMessages", "since"), ("ListMessages", "until"),
                                            ("ListRequests", "since"), ("ListRequests", "until"),
                                            ("GetCurrentMemory", "as_of")):
                schema["oneOf"][0]["format"] = "date-time"
            elif (op_id, param["name"]) == ("ListMemories", "tag"):
                next(v for v in schema["oneOf"] if v.get("type") == "array")["items"].update(
                    msgspec.json.schema(models.TagFilter))


def _github_delivery(ops: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    """GitHub deliveries: a raw JSON body and GitHub's headers, signed instead of keyed (the handler reads
    them itself, so that a missing signature is a 401 before a missing event name is a 400)."""
    for op_id in ("RevokeHook", "DeliverGitHub"):
        for param in ops[op_id][2].get("parameters", []):
            if param["name"] == "hook_id":
                param["schema"] = dict(_HOOK_ID)
    op = ops["DeliverGitHub"][2]
    op["security"] = []
    op["parameters"] += [
        {"name": "X-GitHub-Event", "in": "header", "required": True,
         "schema": {"type": "string", "pattern": github.EVENT_PATTERN}, "description": "The event, e.g. pull_request."},
        {"name": "X-GitHub-Delivery", "in": "header", "required": True,
         "schema": {"type": "string", "pattern": github.DELIVERY_PATTERN},
         "description": "The delivery's GUID: a redelivery with the same one answers the first result."},
        {"name": "X-Hub-Signature-256", "in": "header", "required": True,
         "schema": {"type": "string", "pattern": "^sha256=[0-9a-fA-F]{64}$"},
         "description": "sha256=<hex HMAC-SHA256 of the raw body under the hook's secret>."},
    ]
    op["requestBody"] = {"required": True, "description": "The delivery exactly as GitHub sends it.",
                         "content": {"application/json": {"schema": {"type": "object"}}}}
    responses = op["responses"]
    responses["200"]["description"] = "ping, or an event that is acknowledged and not stored."
    responses["201"] = copy.deepcopy(responses["200"])
    responses["201"]["description"] = "Filed as a trigger (or a redelivery of one: the first answer again)."
    responses["201"]["headers"] = {"Location": _header("Location", True),
                                   "Idempotent-Replayed": _header("Idempotent-Replayed", False)}
    responses["400"]["description"] = "X-GitHub-Event or X-GitHub-Delivery missing or malformed (a signed body " \
        "the mapping cannot read is filed raw, never refused)."
    responses["409"] = copy.deepcopy(responses["410"])
    responses["409"]["description"] = "This hook already received this delivery GUID with other bytes."
    responses["401"]["description"] = "X-Hub-Signature-256 missing, malformed, or not the body's HMAC."
    responses["404"]["description"] = "No such webhook (unknown or revoked)."
    responses["410"]["description"] = "The thread the delivery belongs to was deleted or has expired."


def _lens_links(ops: dict[str, tuple[str, str, dict[str, Any]]]) -> None:
    """Search and backlinks hand out IDs to hop to; a grep match a Range to read around it."""
    for param in ops["Search"][2]["parameters"]:
        if param["name"] in ("since", "until"):
            param["schema"]["oneOf"][0]["format"] = "date-time"
    for op_id in ("Search", "ListBacklinks"):
        ops[op_id][2]["responses"]["200"]["links"] = {
            "ResolveId": {"operationId": "ResolveId", "parameters": {"object_id": "$response.body#/data/0/id"},
                          "description": "The first entry's ID (each entry's href is its view)."},
            "ListBacklinks": {"operationId": "ListBacklinks",
                              "parameters": {"object_id": "$response.body#/data/0/id"}},
        }
    for op_id, content_op, param in (("GrepPayload", "GetPayload", "trigger_id"), ("GrepBody", "GetBody", "report_id")):
        ops[op_id][2]["responses"]["200"]["links"] = {
            content_op: {"operationId": content_op,
                         "parameters": {param: f"$request.path.{param}", "header.Range": "$response.body#/matches/0/range"},
                         "description": "The first match's lines and context, as a byte range of the content."},
        }
    for op_id in ("CreateThread", "CreateWorker", "CreateTrigger", "CreateReport"):
        for status in ("201", "200"):
            ops[op_id][2]["responses"][status]["links"]["ListBacklinks"] = {
                "operationId": "ListBacklinks", "parameters": {"object_id": "$response.body#/id"}}
    for op_id, param in (("CreateTrigger", "trigger_id"), ("CreateReport", "report_id")):
        target = "GrepPayload" if op_id == "CreateTrigger" else "GrepBody"
        for status in ("201", "200"):
            ops[op_id][2]["responses"][status]["links"][target] = {
                "operationId": target, "parameters": {param: "$response.body#/id"}}


def _ecma_patterns(node: Any) -> Any:
    """Python patterns end in \\Z (its $ also matches before a final newline); JSON Schema's regexes are
    ECMA 262, whose $ (without the m flag) means exactly that, so the published patterns end in $."""
    if isinstance(node, dict):
        return {k: (v[:-2] + "$" if k == "pattern" and isinstance(v, str) and v.endswith("\\Z") else _ecma_patterns(v))
                for k, v in node.items()}
    if isinstance(node, list):
        return [_ecma_patterns(v) for v in node]
    return node


def document(app: Litestar) -> dict[str, Any]:
    return correct(app.openapi_schema.to_schema())


class _PlainDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:  # no &id001 anchors: the file is read by people too
        return True


def document_yaml(app: Litestar) -> str:
    return _as_yaml(document(app))


def _as_yaml(doc: dict[str, Any]) -> str:
    return yaml.dump(doc, Dumper=_PlainDumper, sort_keys=False, allow_unicode=True, width=120)


class CorrectedJsonPlugin(JsonRenderPlugin):
    """Serves the corrected document at /schema/openapi.json, the same one `recall-server openapi` writes."""

    _rendered: bytes | None = None

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = msgspec.json.encode(correct(openapi_schema))
        return self._rendered


class CorrectedYamlPlugin(OpenAPIRenderPlugin):
    """Serves the corrected document at /schema/openapi.yaml: byte for byte the openapi.yaml `recall-server openapi`
    writes."""

    _rendered: bytes | None = None

    def __init__(self) -> None:
        super().__init__(path="/openapi.yaml", media_type=OpenAPIMediaType.OPENAPI_YAML)

    def render(self, request: Request, openapi_schema: dict[str, Any]) -> bytes:
        if self._rendered is None:
            self._rendered = _as_yaml(correct(openapi_schema)).encode()
        return self._rendered
