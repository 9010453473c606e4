"""The Claude Messages API memory tool on recall: each file under /memories is a recall memory.

    from anthropic import Anthropic
    from recall_server.anthropic_memory import RecallMemoryTool

    memory = RecallMemoryTool(root=["claude", "u1"])   # files under namespace claude/u1
    Anthropic().beta.messages.tool_runner(model=..., tools=[memory], messages=[...]).until_done()

AsyncRecallMemoryTool is the same tool for AsyncAnthropic's runner.

A file's path is its memory's address: the directories under /memories are namespace segments after
`root`, the file name is the key (`/memories/projects/acme/notes.md` is key `notes.md` in namespace
`<root>/projects/acme`). So a directory name is a namespace segment (1-64 of [A-Za-z0-9_-]) and at most
8 - len(root) deep, and a file name is a memory key (one line, at most 256 characters). A directory exists
while a file is under it. Every edit (create, str_replace, insert) writes a new version of the memory that
supersedes the last (docs/memories.md), so its history stays readable by ID; delete erases the memory and
every version of it, and rename writes the file at its new path and erases the old one.

Paths are checked before anything is read: a path must be /memories or under it, and `.` or `..`
segments, backslashes and control characters are refused, so no command reaches outside the root.

Install with `pip install 'recall-server[anthropic]'` (the anthropic package).
"""

from __future__ import annotations

import re
from typing import Any

import anyio.to_thread
from anthropic.lib.tools import BetaAbstractMemoryTool, BetaAsyncAbstractMemoryTool, ToolError
from anthropic.types.beta import (
    BetaMemoryTool20250818CreateCommand,
    BetaMemoryTool20250818DeleteCommand,
    BetaMemoryTool20250818InsertCommand,
    BetaMemoryTool20250818RenameCommand,
    BetaMemoryTool20250818StrReplaceCommand,
    BetaMemoryTool20250818ViewCommand,
)

from recall_server import text
from recall_server.client import Gone, NotFound, RecallClient
from recall_server.models import MemoryIndexEntry, MemoryView

ROOT = "/memories"
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,64}")
_MAX_DEPTH = 8  # namespace segments a memory may have
_WIDTH = 6  # line numbers, right-aligned as the SDK's own file backend does (up to 999,999 lines)


def _size(n: int) -> str:
    """A size as the SDK's file backend shows it: 0B, 512B, 1.5K, 2M."""
    if n == 0:
        return "0B"
    i = min((n.bit_length() - 1) // 10, 3)
    value = n / 1024**i
    return f"{int(value) if value == int(value) else f'{value:.1f}'}{'BKMG'[i]}"


def _numbered(lines: list[str], first: int) -> str:
    return "\n".join(f"{str(n).rjust(_WIDTH)}\t{line}" for n, line in enumerate(lines, first))


class RecallMemoryTool(BetaAbstractMemoryTool):
    """The memory tool (memory_20250818) with its files kept as recall memories under namespace `root`."""

    def __init__(self, client: RecallClient | None = None, *, root: list[str] | tuple[str, ...] = ("claude-memory",),
                 url: str | None = None, key: str | None = None, **kwargs: Any) -> None:
        """`client`: a RecallClient to share; else one for `url` and `key` (or the local server's). `root`: the
        namespace the /memories directory maps to (e.g. one per user)."""
        super().__init__(**kwargs)
        if not 1 <= len(root) < _MAX_DEPTH or not all(_SEGMENT.fullmatch(s) for s in root):
            raise ValueError(f"root must be 1-{_MAX_DEPTH - 1} segments of [A-Za-z0-9_-], got {root!r}")
        self.root = list(root)
        self.client = client if client is not None else RecallClient(url, key)

    # ---- paths ----------------------------------------------------------------------------------

    def _parts(self, path: str) -> list[str]:
        """The path's segments under /memories; a ToolError for anything outside it."""
        if not isinstance(path, str) or not (path == ROOT or path.startswith(ROOT + "/")):
            raise ToolError(f"Path must start with /memories, got: {path}")
        parts = [p for p in path[len(ROOT):].split("/") if p]
        if any(p in (".", "..") for p in parts) or "\\" in path or any(ord(c) < 32 or ord(c) == 127 for c in path):
            raise ToolError(f"Path {path} would escape /memories directory")
        return parts

    def _directory(self, path: str, parts: list[str]) -> list[str]:
        """The namespace of a directory path."""
        bad = [p for p in parts if not _SEGMENT.fullmatch(p)]
        if bad:
            raise ToolError(f"Directory name {bad[0]!r} in {path} is not allowed: use 1-64 of A-Z a-z 0-9 _ -.")
        if len(self.root) + len(parts) > _MAX_DEPTH:
            raise ToolError(f"{path} is too deep: at most {_MAX_DEPTH - len(self.root)} directories under /memories.")
        return [*self.root, *parts]

    def _file(self, path: str) -> tuple[list[str], str]:
        """The (namespace, key) of a file path."""
        parts = self._parts(path)
        if not parts:
            raise ToolError(f"The path {path} is a directory, not a file.")
        try:
            key = text.memory_key(parts[-1])
        except ValueError as e:
            raise ToolError(f"File name in {path} is not allowed: {e}") from None
        return self._directory(path, parts[:-1]), key

    # ---- the store ------------------------------------------------------------------------------

    def _current(self, namespace: list[str], key: str) -> MemoryView | None:
        try:
            return self.client.current_memory(namespace, key)
        except (NotFound, Gone):
            return None

    def _read(self, found: MemoryView | MemoryIndexEntry) -> str:
        value = found.value
        if isinstance(value, str):
            return value
        return self.client.memory_value(found.id).decode()  # too large to ride inline

    def _write(self, namespace: list[str], key: str, content: str) -> MemoryView:
        """A new version of the file (superseding the current one, if any)."""
        summary = text.one_line(content.split("\n", 1)[0], 200)
        return self.client.remember(namespace=namespace, key=key, value=content, content_type="text/plain",
                                    summary=summary, kind="fact")

    def _under(self, namespace: list[str]) -> list[MemoryIndexEntry]:
        """Every file in the directory or below it."""
        return list(self.client.iter_memories(namespace=namespace))

    def _existing_file(self, path: str) -> tuple[list[str], str, MemoryView]:
        namespace, key = self._file(path)
        found = self._current(namespace, key)
        if found is None:
            if _SEGMENT.fullmatch(key) and len(namespace) < _MAX_DEPTH and self._under([*namespace, key]):
                raise ToolError(f"The path {path} is not a file.")
            raise ToolError(f"The path {path} does not exist. Please provide a valid path.")
        return namespace, key, found

    # ---- the six commands ---------------------------------------------------------------------------

    def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        parts = self._parts(command.path)
        if parts:
            namespace, key = self._file(command.path)
            found = self._current(namespace, key)
            if found is not None:
                return self._view_file(command, self._read(found))
            if not self._could_be_directory(parts):
                raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        namespace = self._directory(command.path, parts)
        files = self._under(namespace)
        if parts and not files:
            raise ToolError(f"The path {command.path} does not exist. Please provide a valid path.")
        return self._view_directory(command.path, namespace, files)

    def _view_file(self, command: BetaMemoryTool20250818ViewCommand, content: str) -> str:
        lines = content.split("\n")
        first = 1
        if command.view_range and len(command.view_range) == 2:
            start = max(1, command.view_range[0]) - 1
            end = len(lines) if command.view_range[1] == -1 else command.view_range[1]
            lines, first = lines[start:end], start + 1
        return f"Here's the content of {command.path} with line numbers:\n" + _numbered(lines, first)

    def _view_directory(self, path: str, namespace: list[str], files: list[MemoryIndexEntry]) -> str:
        """Files and directories up to 2 levels deep, by name, each with its size (a directory's: its files')."""
        sizes: dict[str, int] = {}
        total = 0
        for f in files:
            rel = [*f.namespace[len(namespace):], f.key]
            size = len(self._read(f).encode())
            total += size
            for depth in range(1, min(len(rel), 2) + 1):
                entry = "/".join(rel[:depth]) + ("/" if depth < len(rel) else "")
                sizes[entry] = sizes.get(entry, 0) + size
        base = path.rstrip("/") or ROOT
        lines = [f"{_size(total)}\t{path}"]
        lines += [f"{_size(sizes[e])}\t{base}/{e}" for e in sorted(sizes, key=lambda e: e.rstrip("/").split("/"))]
        return f"Here're the files and directories up to 2 levels deep in {path}, excluding hidden items:\n" \
            + "\n".join(lines)

    def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        namespace, key = self._file(command.path)
        if self._current(namespace, key) is not None:
            raise ToolError(f"File {command.path} already exists")
        self._write(namespace, key, command.file_text)
        return f"File created successfully at: {command.path}"

    def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        namespace, key, found = self._existing_file(command.path)
        content = self._read(found)
        count = content.count(command.old_str)
        if count == 0:
            raise ToolError(f"No replacement was performed, old_str `{command.old_str}` did not appear verbatim in "
                            f"{command.path}.")
        if count > 1:
            at, lines = 0, []
            while (at := content.find(command.old_str, at)) != -1:
                lines.append(content[:at].count("\n") + 1)
                at += 1
            raise ToolError(f"No replacement was performed. Multiple occurrences of old_str `{command.old_str}` in "
                            f"lines: {', '.join(map(str, lines))}. Please ensure it is unique")
        changed = content[:content.find(command.old_str)].count("\n")
        new = content.replace(command.old_str, command.new_str)
        self._write(namespace, key, new)
        new_lines = new.split("\n")
        start, end = max(0, changed - 2), min(len(new_lines), changed + 3)
        return ("The memory file has been edited. Here is the snippet showing the change (with line numbers):\n"
                + _numbered(new_lines[start:end], start + 1))

    def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        namespace, key, found = self._existing_file(command.path)
        lines = self._read(found).split("\n")
        if lines[-1] == "":
            lines.pop()
        if not 0 <= command.insert_line <= len(lines):
            raise ToolError(f"Invalid `insert_line` parameter: {command.insert_line}. It should be within the range "
                            f"[0, {len(lines)}].")
        lines.insert(command.insert_line, command.insert_text.rstrip("\n"))
        new = "\n".join(lines)
        self._write(namespace, key, new if new.endswith("\n") else new + "\n")
        return f"The file {command.path} has been edited."

    def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        parts = self._parts(command.path)
        if not parts:
            raise ToolError("Cannot delete the /memories directory itself")
        for memory_id in self._ids_at(command.path, parts):
            self.client.delete_memory(memory_id)
        return f"Successfully deleted {command.path}"

    def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        old, new = self._parts(command.old_path), self._parts(command.new_path)
        if not old:
            raise ToolError("Cannot rename the /memories directory itself")
        if self._exists(command.new_path, new):
            raise ToolError(f"The destination {command.new_path} already exists")
        namespace, key = self._file(command.old_path)
        found = self._current(namespace, key)
        if found is not None:  # a file
            moves = [(found, self._file(command.new_path))]
        else:  # a directory: every file under it, to the same place under the new one
            source = self._directory(command.old_path, old)
            target = self._directory(command.new_path, new)
            files = self._under(source)
            if not files:
                raise ToolError(f"The path {command.old_path} does not exist")
            moves = [(f, ([*target, *f.namespace[len(source):]], f.key)) for f in files]
            if any(len(ns) > _MAX_DEPTH for (ns, _) in (m[1] for m in moves)):
                raise ToolError(f"{command.new_path} is too deep for the files under {command.old_path}.")
        for f, (namespace, key) in moves:
            self._write(namespace, key, self._read(f))
            self.client.delete_memory(f.id)
        return f"Successfully renamed {command.old_path} to {command.new_path}"

    def clear_all_memory(self) -> str:
        """Erase every file under the root."""
        for f in self._under(self.root):
            self.client.delete_memory(f.id)
        return "All memory cleared"

    def _could_be_directory(self, parts: list[str]) -> bool:
        return all(_SEGMENT.fullmatch(p) for p in parts) and len(self.root) + len(parts) <= _MAX_DEPTH

    def _exists(self, path: str, parts: list[str]) -> bool:
        if not parts:
            return True
        return bool(self._ids_at(path, parts, missing_ok=True))

    def _ids_at(self, path: str, parts: list[str], missing_ok: bool = False) -> list[str]:
        """The memories a path names: its file, or every file under its directory."""
        namespace, key = self._file(path)
        found = self._current(namespace, key)
        if found is not None:
            return [found.id]
        if self._could_be_directory(parts):
            under = [f.id for f in self._under([*self.root, *parts])]
            if under:
                return under
        if missing_ok:
            return []
        raise ToolError(f"The path {path} does not exist")


class AsyncRecallMemoryTool(BetaAsyncAbstractMemoryTool):
    """RecallMemoryTool for AsyncAnthropic's tool runner: each command is the sync tool's, run in a worker thread
    (as the SDK's own async file backend runs its file system calls), so the commands are written once and the
    event loop never waits on HTTP. Takes RecallMemoryTool's arguments."""

    def __init__(self, client: RecallClient | None = None, *, root: list[str] | tuple[str, ...] = ("claude-memory",),
                 url: str | None = None, key: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.tool = RecallMemoryTool(client, root=root, url=url, key=key)

    async def view(self, command: BetaMemoryTool20250818ViewCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.view, command)

    async def create(self, command: BetaMemoryTool20250818CreateCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.create, command)

    async def str_replace(self, command: BetaMemoryTool20250818StrReplaceCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.str_replace, command)

    async def insert(self, command: BetaMemoryTool20250818InsertCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.insert, command)

    async def delete(self, command: BetaMemoryTool20250818DeleteCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.delete, command)

    async def rename(self, command: BetaMemoryTool20250818RenameCommand) -> str:
        return await anyio.to_thread.run_sync(self.tool.rename, command)

    async def clear_all_memory(self) -> str:
        return await anyio.to_thread.run_sync(self.tool.clear_all_memory)
