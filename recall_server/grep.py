"""A lens into spilled content: a bounded, linear-time grep with line numbers and byte offsets (pure).

Regular expressions run on RE2 (google-re2), whose matching time is linear in the input whatever the
pattern, so a pattern built to backtrack ((a+)+$) cannot stall a worker; its compile step refuses
patterns whose automaton would exceed RE2's memory bound. Everything is bounded: the bytes scanned
(SCAN_BYTES), the characters shown per line (LINE_CHARS), the matches (max) and the text returned
(RESPONSE_CHARS), so a response's size does not grow with the content.

Like grep, a line matches once (the first match in it); a regex sees the content as a whole in
multi-line mode (`^`/`$` match at line ends), so a match may run on past its line, and `length`
says how far.
"""

from __future__ import annotations

from dataclasses import dataclass

import re2

from recall_server.errors import BadRequest
from recall_server.models import GrepLine, GrepMatch

SCAN_BYTES = 4 * 1024 * 1024  # the most of a content grep reads (its head)
LINE_CHARS = 240  # the most characters of one line shown
RESPONSE_CHARS = 64 * 1024  # the most line text one response carries (then `truncated`)
MAX_PATTERN = 256
MAX_CONTEXT = 10
MAX_MATCHES = 100

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # RE2 would log the pattern to stderr: patterns stay out of the server log
# Only a match's span is used. With capture groups RE2 must extract submatches over the whole match
# (its slower NFA): (.*a){20} over a 1 MB line took 5.6 s; without, the DFA finds both ends in 19 ms.
_OPTIONS.never_capture = True
# Compiling is bounded by the automaton's memory, and its time grows with it: a pattern too large for the
# default 8 MiB (\pL{999}) took 35-50 ms to refuse; within 2 MiB a quarter of that. Every pattern of
# tests/test_grep.py fits. The route compiles only for a key the database accepted (routes.caller_key).
_OPTIONS.max_mem = 2 << 20


@dataclass
class Found:
    matches: list[GrepMatch]
    scanned: int
    truncated: bool


class _Literal:
    def __init__(self, needle: bytes) -> None:
        self.needle = needle

    def search(self, data: bytes, pos: int) -> tuple[int, int] | None:
        at = data.find(self.needle, pos)
        return None if at < 0 else (at, at + len(self.needle))


class _Regex:
    def __init__(self, pattern: str) -> None:
        try:
            self.compiled = re2.compile(("(?m)" + pattern).encode(), _OPTIONS)
        except re2.error as exc:
            reason = exc.args[0].decode(errors="replace") if exc.args and isinstance(exc.args[0], bytes) else str(exc)
            raise BadRequest(f"pattern is not a valid RE2 regular expression: {reason}.", field="pattern") from None

    def search(self, data: bytes, pos: int) -> tuple[int, int] | None:
        found = self.compiled.search(data, pos)
        return None if found is None else found.span()


def matcher(pattern: str, regex: bool) -> _Literal | _Regex:
    """The compiled pattern; 400 for an empty or invalid one (checked before any content is read)."""
    if not pattern or len(pattern) > MAX_PATTERN:
        raise BadRequest(f"pattern must be 1-{MAX_PATTERN} characters.", field="pattern")
    return _Regex(pattern) if regex else _Literal(pattern.encode())


def _text(data: bytes, start: int, end: int, focus: int | None = None) -> GrepLine:
    line = data[start:end].rstrip(b"\r").decode("utf-8", errors="replace")
    if len(line) <= LINE_CHARS:
        return GrepLine(number=0, text=line)
    first = 0
    if focus is not None:  # keep the match in view: start a little before it
        at = len(data[start:focus].decode("utf-8", errors="replace"))
        first = max(0, min(at - LINE_CHARS // 4, len(line) - LINE_CHARS))
    return GrepLine(number=0, text=line[first:first + LINE_CHARS], truncated=True)


def grep(data: bytes, found: _Literal | _Regex, context: int, max_matches: int) -> Found:
    """The first `max_matches` matching lines of `data`'s head, each with `context` lines around it."""
    buf = data[:SCAN_BYTES]
    matches: list[GrepMatch] = []
    chars = 0
    pos = line_no = counted_to = 0
    truncated = len(data) > len(buf)
    while pos <= len(buf):
        hit = found.search(buf, pos)
        if hit is None:
            break
        if len(matches) == max_matches:
            truncated = True
            break
        start, end = hit
        line_no += buf.count(b"\n", counted_to, start)
        counted_to = start
        line_start = buf.rfind(b"\n", 0, start) + 1
        line_end = buf.find(b"\n", start)
        line_end = len(buf) if line_end < 0 else line_end
        # context lines: walk back and forward over newlines
        first, before = line_start, 0
        while before < context and first > 0:
            first = buf.rfind(b"\n", 0, first - 1) + 1
            before += 1
        last, after = line_end, 0
        while after < context and last < len(buf):
            nxt = buf.find(b"\n", last + 1)
            last = len(buf) if nxt < 0 else nxt
            after += 1
        lines: list[GrepLine] = []
        at, number = first, line_no + 1 - before
        while True:
            stop = buf.find(b"\n", at)
            stop = last if stop < 0 or stop > last else stop
            shown = _text(buf, at, stop, start if at == line_start else None)
            shown.number = number
            lines.append(shown)
            if stop >= last:
                break
            at, number = stop + 1, number + 1
        cost = sum(len(line.text) + 32 for line in lines)
        if matches and chars + cost > RESPONSE_CHARS:
            truncated = True
            break
        chars += cost
        matches.append(GrepMatch(line=line_no + 1, offset=start, length=end - start,
                                 range=f"bytes={first}-{max(first, last - 1)}", lines=lines))
        pos = line_end + 1  # one match per line
    return Found(matches=matches, scanned=len(buf), truncated=truncated)
