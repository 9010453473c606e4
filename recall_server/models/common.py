"""The shared vocabulary: IDs, one-line texts, labels, namespaces, and the base of every request body."""

from __future__ import annotations

import types
from datetime import datetime
from typing import Annotated, Any, ClassVar, Union, get_args, get_origin, get_type_hints

from msgspec import Meta, Struct

from recall_server import ids, text


MAX_LINKS = 16  # neighbours, refs and owners per object: bounded so an inline view always fits

# One line, and shown as written (text.py: what it refuses; webhook text is cleaned to it).
OneLine = text.ONE_LINE
# Meta.extra of a free-text field: stored as text.free_text cleans it (Request.__post_init__), not as sent.
FREE_TEXT = {"text": "free"}
# IDs of one kind where only that kind is allowed; AnyId where any kind is (links, refs, /ids/{id}).
ThreadId = Annotated[str, Meta(pattern=ids.pattern("thread"), examples=["thr_pr_412"])]
WorkerId = Annotated[str, Meta(pattern=ids.pattern("worker"), examples=["wkr_77a0"])]
TriggerId = Annotated[str, Meta(pattern=ids.pattern("trigger"), examples=["trg_8f21"])]
ReportId = Annotated[str, Meta(pattern=ids.pattern("report"), examples=["rpt_412a"])]
AnyId = Annotated[str, Meta(pattern=ids.ANY_ID_PATTERN, examples=["thr_pr_412"])]
# What a memory was learned from: any object's ID, or a thread's message as `<thread ID>/<seq>`.
SourceId = Annotated[str, Meta(pattern=ids.SOURCE_PATTERN, examples=["thr_pr_412", "thr_chat_1/3"])]
MemoryId = Annotated[str, Meta(pattern=ids.pattern("memory"), examples=["mem_u1_tone"])]
Title = Annotated[str, Meta(min_length=1, max_length=120, pattern=OneLine, extra=FREE_TEXT)]
Summary = Annotated[str, Meta(max_length=200, pattern=OneLine, extra=FREE_TEXT)]
Name = Annotated[str, Meta(min_length=1, max_length=80, pattern=OneLine, extra=FREE_TEXT)]
DisplayLabel = Annotated[str, Meta(max_length=80, pattern=OneLine, extra=FREE_TEXT)]  # a key's or a hook's
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
    """Base of every request body. Its free-text fields (FREE_TEXT) are cleaned as it is made, decoded or built
    (its __post_init__): text.free_text, then their lengths held again, so one emptied or grown past its limit
    is a 400."""

    __free_text__: ClassVar[tuple[tuple[str, int, int | None], ...]] = ()

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.__free_text__ = _free_text_fields(cls)
        if cls.__free_text__:  # only there: msgspec calls a __post_init__ for every struct it makes (+0.07 us)
            cls.__post_init__ = Request._clean_free_text  # type: ignore[attr-defined]

    def _clean_free_text(self) -> None:
        for name, low, high in self.__free_text__:
            value = getattr(self, name)
            if not isinstance(value, str) or value.isascii():
                continue
            clean = text.free_text(value)
            if len(clean) < low or (high is not None and len(clean) > high):
                raise ValueError(
                    f"{name} must be {low}-{high or 'any'} characters once characters drawn as nothing are dropped "
                    f"and it is in Unicode NFC, got {len(clean)}.")
            setattr(self, name, clean)


def _free_text_fields(cls: type) -> tuple[tuple[str, int, int | None], ...]:
    """(field, min_length, max_length) of each of a request's fields typed FREE_TEXT (or FREE_TEXT | None ...)."""
    found = []
    for name, hint in get_type_hints(cls, include_extras=True).items():
        for option in (get_args(hint) if get_origin(hint) in (Union, types.UnionType) else (hint,)):
            metas = option.__metadata__ if get_origin(option) is Annotated else ()
            meta = next((m for m in metas if isinstance(m, Meta) and m.extra == FREE_TEXT), None)
            if meta is not None:
                found.append((name, meta.min_length or 0, meta.max_length))
    return tuple(found)


SEGMENT = r"^[A-Za-z0-9_-]{1,64}\Z"
Segment = Annotated[str, Meta(pattern=SEGMENT, examples=["users"])]
Namespace = Annotated[list[Segment], Meta(min_length=1, max_length=8, examples=[["users", "u1"]],
                                          description="A path of 1-8 segments, each like an ID body.")]
