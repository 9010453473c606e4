"""RecallMemoryTool, the Claude memory tool's backend on recall memories, driven the way the anthropic SDK's tool
runner drives it (`call` with the command's input, decoded into the SDK's own command types), against a live
server; no API call."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator

import pytest
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import BetaMemoryTool20250818ViewCommand

from recall_server.anthropic_memory import AsyncRecallMemoryTool, RecallMemoryTool
from recall_server.client import RecallClient


@pytest.fixture()
def tool(base_url: str, api_key: str) -> Iterator[RecallMemoryTool]:
    with RecallClient(base_url, api_key) as client:
        yield RecallMemoryTool(client, root=["claude", f"u{uuid.uuid4().hex[:10]}"])


def test_it_is_the_sdks_memory_tool(tool: RecallMemoryTool) -> None:
    assert isinstance(tool, BetaAbstractMemoryTool)
    assert tool.to_dict() == {"type": "memory_20250818", "name": "memory"}


def test_a_scripted_session_of_the_six_commands(tool: RecallMemoryTool) -> None:
    call = tool.call
    assert call({"command": "view", "path": "/memories"}).endswith("in /memories, excluding hidden items:\n0B\t/memories")
    assert call({"command": "create", "path": "/memories/projects/acme/notes.md",
                 "file_text": "# Acme\nprefers email\ntimezone: UTC\n"}) == \
        "File created successfully at: /memories/projects/acme/notes.md"
    assert call({"command": "create", "path": "/memories/user.md", "file_text": "name: Ada\n"}) == \
        "File created successfully at: /memories/user.md"
    with pytest.raises(ToolError, match="already exists"):
        call({"command": "create", "path": "/memories/user.md", "file_text": "again"})

    listing = call({"command": "view", "path": "/memories"}).split("\n")
    assert listing[0] == "Here're the files and directories up to 2 levels deep in /memories, excluding hidden items:"
    assert listing[1:] == ["45B\t/memories", "35B\t/memories/projects/", "35B\t/memories/projects/acme/",
                           "10B\t/memories/user.md"]
    assert call({"command": "view", "path": "/memories/projects/acme/notes.md", "view_range": [2, 3]}) == \
        "Here's the content of /memories/projects/acme/notes.md with line numbers:\n     2\tprefers email\n     3\ttimezone: UTC"

    edited = call({"command": "str_replace", "path": "/memories/projects/acme/notes.md",
                   "old_str": "prefers email", "new_str": "prefers phone"})
    assert edited.startswith("The memory file has been edited.") and "     2\tprefers phone" in edited
    with pytest.raises(ToolError, match="did not appear verbatim"):
        call({"command": "str_replace", "path": "/memories/projects/acme/notes.md", "old_str": "fax", "new_str": "x"})
    assert call({"command": "insert", "path": "/memories/projects/acme/notes.md", "insert_line": 1,
                 "insert_text": "owner: Bo\n"}) == "The file /memories/projects/acme/notes.md has been edited."
    with pytest.raises(ToolError, match=r"range \[0, 4\]"):
        call({"command": "insert", "path": "/memories/projects/acme/notes.md", "insert_line": 9, "insert_text": "x"})

    # every edit is a new version of the memory, superseding the last: the history stays readable
    current = tool.client.current_memory([*tool.root, "projects", "acme"], "notes.md")
    assert current.value == "# Acme\nowner: Bo\nprefers phone\ntimezone: UTC\n" and current.version == 3
    versions = [v.version for v in tool.client.iter_memory_versions(current.id)]
    assert versions == [3, 2, 1]

    assert call({"command": "rename", "old_path": "/memories/projects/acme", "new_path": "/memories/clients/acme"}) == \
        "Successfully renamed /memories/projects/acme to /memories/clients/acme"
    assert "prefers phone" in call({"command": "view", "path": "/memories/clients/acme/notes.md"})
    with pytest.raises(ToolError, match="does not exist"):
        call({"command": "view", "path": "/memories/projects/acme/notes.md"})
    with pytest.raises(ToolError, match="already exists"):
        call({"command": "rename", "old_path": "/memories/user.md", "new_path": "/memories/clients/acme/notes.md"})

    assert call({"command": "delete", "path": "/memories/user.md"}) == "Successfully deleted /memories/user.md"
    assert call({"command": "delete", "path": "/memories/clients"}) == "Successfully deleted /memories/clients"
    with pytest.raises(ToolError, match="does not exist"):
        call({"command": "delete", "path": "/memories/user.md"})
    assert call({"command": "view", "path": "/memories"}).endswith("\n0B\t/memories")
    assert list(tool.client.iter_memories(namespace=tool.root)) == []


@pytest.mark.parametrize("path", [
    "/memories/../secrets.md", "/memories/a/../../etc/passwd", "/memories/./x.md", "../memories/x.md",
    "/etc/passwd", "/memoriesX/x.md", "memories/x.md", "/tmp/memories/x.md", "/memories/a\\..\\b.md",
    "/memories/a\x00b.md",
])
def test_paths_outside_memories_are_refused_before_anything_is_written(tool: RecallMemoryTool, path: str) -> None:
    for command in ({"command": "create", "path": path, "file_text": "x"}, {"command": "view", "path": path},
                    {"command": "delete", "path": path},
                    {"command": "rename", "old_path": "/memories/ok.md", "new_path": path}):
        with pytest.raises(ToolError, match="/memories"):
            tool.call(command)
    assert list(tool.client.iter_memories(namespace=tool.root)) == []


def test_the_root_cannot_be_deleted_or_renamed(tool: RecallMemoryTool) -> None:
    with pytest.raises(ToolError, match="Cannot delete the /memories directory itself"):
        tool.call({"command": "delete", "path": "/memories"})
    with pytest.raises(ToolError, match="Cannot rename the /memories directory itself"):
        tool.call({"command": "rename", "old_path": "/memories/", "new_path": "/memories/x"})


def test_a_large_file_reads_back_whole(tool: RecallMemoryTool) -> None:
    big = "".join(f"line {i}\n" for i in range(5000))
    tool.call({"command": "create", "path": "/memories/log.txt", "file_text": big})
    shown = tool.view(BetaMemoryTool20250818ViewCommand(command="view", path="/memories/log.txt", view_range=[4999, 5000]))
    assert shown.endswith("  4999\tline 4998\n  5000\tline 4999")


def test_files_of_two_roots_are_apart(base_url: str, api_key: str) -> None:
    with RecallClient(base_url, api_key) as client:
        ada = RecallMemoryTool(client, root=["claude", f"a{uuid.uuid4().hex[:8]}"])
        bo = RecallMemoryTool(client, root=["claude", f"b{uuid.uuid4().hex[:8]}"])
        ada.call({"command": "create", "path": "/memories/me.md", "file_text": "Ada"})
        with pytest.raises(ToolError, match="does not exist"):
            bo.call({"command": "view", "path": "/memories/me.md"})


def test_the_async_tool_answers_as_the_sync_one_and_never_blocks_the_loop(base_url: str, api_key: str) -> None:
    """AsyncRecallMemoryTool (AsyncAnthropic's runner): the same answers, and while its commands wait on the
    server the event loop keeps running other tasks."""
    script = [{"command": "create", "path": "/memories/a/notes.md", "file_text": "one\ntwo\n"},
              {"command": "str_replace", "path": "/memories/a/notes.md", "old_str": "two", "new_str": "three"},
              {"command": "view", "path": "/memories"},
              {"command": "rename", "path": "/memories/a/notes.md", "old_path": "/memories/a/notes.md",
               "new_path": "/memories/b/notes.md"},
              {"command": "view", "path": "/memories/b/notes.md"},
              {"command": "delete", "path": "/memories/b"}]
    with RecallClient(base_url, api_key) as client:
        sync = RecallMemoryTool(client, root=["claude", f"u{uuid.uuid4().hex[:10]}"])
        expected = [sync.call(step) for step in script]

        async def run() -> tuple[list[object], int]:
            tool = AsyncRecallMemoryTool(client, root=["claude", f"u{uuid.uuid4().hex[:10]}"])
            assert isinstance(tool, BetaAsyncAbstractMemoryTool) and tool.to_dict()["name"] == "memory"
            ticks, done = 0, False

            async def ticker() -> None:
                nonlocal ticks
                while not done:
                    ticks += 1
                    await asyncio.sleep(0.001)

            beat = asyncio.create_task(ticker())
            answers = []
            for step in script:
                answers.append(await tool.call(step))
            done = True
            await beat
            with pytest.raises(ToolError, match="does not exist"):
                await tool.call({"command": "view", "path": "/memories/b/notes.md"})
            return answers, ticks

        started = time.monotonic()
        answers, ticks = asyncio.run(run())
    assert answers == expected
    assert ticks >= 6, f"the loop ran {ticks} times in {time.monotonic() - started:.2f} s: it was blocked"
