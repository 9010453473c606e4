"""The shared vocabulary: IDs, one-line texts, labels, namespaces, and the base of every request body."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from msgspec import Meta, Struct

from recall_server import ids, text


MAX_LINKS = 16  # neighbours, refs and owners per object: bounded so an inline view always fits

# One line, and shown as written (text.py: what it refuses; webhook text is cleaned to it).
OneLine = text.ONE_LINE
# IDs of one kind where only that kind is allowed; AnyId where any kind is (links, refs, /ids/{id}).
ThreadId = Annotated[str, Meta(pattern=ids.pattern("thread"), examples=["thr_pr_412"])]
WorkerId = Annotated[str, Meta(pattern=ids.pattern("worker"), examples=["wkr_77a0"])]
TriggerId = Annotated[str, Meta(pattern=ids.pattern("trigger"), examples=["trg_8f21"])]
ReportId = Annotated[str, Meta(pattern=ids.pattern("report"), examples=["rpt_412a"])]
AnyId = Annotated[str, Meta(pattern=ids.ANY_ID_PATTERN, examples=["thr_pr_412"])]
MemoryId = Annotated[str, Meta(pattern=ids.pattern("memory"), examples=["mem_u1_tone"])]
Title = Annotated[str, Meta(min_length=1, max_length=120, pattern=OneLine)]
Summary = Annotated[str, Meta(max_length=200, pattern=OneLine)]
Name = Annotated[str, Meta(min_length=1, max_length=80, pattern=OneLine)]
Source = Annotated[str, Meta(min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._:/-]+\Z", examples=["github.check_run"])]
Status = Annotated[str, Meta(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9._-]+\Z", examples=["open", "merged", "closed"])]
ContentType = Annotated[
    str, Meta(max_length=100, pattern=r"^[A-Za-z0-9!#$&^_.+-]+/[A-Za-z0-9!#$&^_.+-]+\Z", examples=["text/plain"])
]
TriggerLinks = Annotated[list[TriggerId], Meta(max_length=MAX_LINKS)]
Label = Annotated[str, Meta(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9._:-]+\Z", examples=["router-1"])]
Timestamp = Annotated[datetime, Meta(extra_json_schema={"format": "date-time"})]
# A time that is stored lies within the years 1-9999 in UTC (Python's datetime holds no other): one on the first
# day with an offset ahead of UTC, or on the last with one behind it, is refused (service.inputs.stored_time),
# as this pattern says. (Later on the first day it would fit: a rule a pattern states, a clock comparison not.)
BEYOND_UTC_YEARS = r"^(?:0001-01-01[Tt].*\+(?!00:00)|9999-12-31[Tt].*-(?!00:00))\d\d:\d\d\Z"
# A string in bodies: Litestar decodes bodies leniently and would take a number as Unix seconds.
DateTimeText = Annotated[str, Meta(max_length=64, extra_json_schema={
    "format": "date-time", "not": {"pattern": BEYOND_UTC_YEARS, "description": "beyond the years 1-9999 in UTC"}})]


class Request(Struct, forbid_unknown_fields=True, kw_only=True):
    """Base of every request body."""


SEGMENT = r"^[A-Za-z0-9_-]{1,64}\Z"
Segment = Annotated[str, Meta(pattern=SEGMENT, examples=["users"])]
Namespace = Annotated[list[Segment], Meta(min_length=1, max_length=8, examples=[["users", "u1"]],
                                          description="A path of 1-8 segments, each like an ID body.")]
