"""msgspec Structs: the wire shapes published in openapi.yaml, one module per part of the API.

Request Structs forbid unknown fields, so a typo is a 400, not a silently dropped field.
Length limits are what keep every inline view inside the smallest allowed budget.
"""

from recall_server.models.common import (  # noqa: F401
    AnyId, BEYOND_UTC_YEARS, ContentType, DateTimeText, DisplayLabel, FREE_TEXT, Label, MAX_LINKS, MemoryId, Name,
    Namespace, OneLine, ReportId, Request, SEGMENT, Segment, Source, Status, Summary, ThreadId, Timestamp, Title,
    TriggerId, TriggerLinks, WorkerId,
)
from recall_server.models.requests import (  # noqa: F401
    AssignOwner, CreateKey, CreateMemory, CreateNote, CreateReport, CreateThread, CreateTrigger, CreateWorker,
    ExtractSetting,
    Grant, Grants, MAX_SOURCES, MemoryKey, RefreshMemories, Sources, Subject, TagFilter, TagKey, TagValue, Tags, UpdateKey, UpdateThread,
)
from recall_server.models.views import (  # noqa: F401
    Event, EventPage, Health, KeyList, KeyView, Link, MemoryIndexEntry, MemoryPage, MemoryVersion,
    MemoryVersionPage, MemoryView, NamespacePage, NewKey, ProblemBody, RefreshedMemories, RefreshedMemory, ReportIndexEntry, ReportPage,
    ReportView, Resolved, SearchStatus, Spill, Spilled, ThreadIndexEntry, ThreadPage, ThreadView, TriggerView,
    WorkerView,
)
from recall_server.models.hooks import (  # noqa: F401
    CreateHook, Delivery, HookId, HookList, HookView, NewHook,
)
from recall_server.models.trace import (  # noqa: F401
    AuditedRequest, Background, Read, ReadPage, RequestPage, RunId,
)
from recall_server.models.search import (  # noqa: F401
    Backlink, BacklinkPage, GrepLine, GrepMatch, GrepResult, SearchExplain, SearchHit, SearchPage,
)
from recall_server.models.messages import (  # noqa: F401
    AppendMessages, AppendedMessages, Extraction, ExtractionPage, ExtractedMemory, MAX_MESSAGES, MAX_SEQ, MESSAGE_INLINE, Message, MessagePage, MessageSeq,
    Metadata, MetadataKey, MetadataValue, NewMessage, RetractMessages, Retraction, Role,
)
from recall_server.models.checkpoints import (  # noqa: F401
    Base64, ChannelBlob, ChannelName, ChannelValue, ChannelVersion, CheckpointCount, CheckpointId,
    CheckpointNs, CheckpointPage, CheckpointRef, CheckpointThreadId, CheckpointTupleView, CopyCheckpoints,
    DeleteCheckpointRuns, PendingWrite, PruneCheckpoints, PutCheckpoint, PutWrites, RunIdText, SerdeType,
    TaskId, TaskPath, WriteItem,
)
