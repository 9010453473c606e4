"""Deliberately broken builds, to prove the recall-contract suite catches them.

    python contract_tests/mutants.py MUTANT serve --port 8000 ...

patches one behaviour of the real server, then runs the normal CLI.
"""

from __future__ import annotations

import sys

from recall_server import errors, service
from recall_server.cli import main

_get_thread = service.Recall.get_thread
_list_events = service.Recall.list_events


async def empty_miss(self, tenant, thread_id, budget):
    """A miss answered as 200 {} instead of a loud 404."""
    try:
        return await _get_thread(self, tenant, thread_id, budget)
    except errors.NotFound:
        return {}


async def skipping_cursor(self, tenant, thread_id, cursor, limit):
    """A cursor that silently skips the event after each page."""
    page = await _list_events(self, tenant, thread_id, cursor, limit)
    if page.data:
        scope = f"{tenant}\0events\0{thread_id}"
        page.next_cursor = self.cursors.encode(scope, [page.data[-1].seq + 1])
    return page


MUTANTS = {
    "empty-miss": ("get_thread", empty_miss),
    "skipping-cursor": ("list_events", skipping_cursor),
}

if __name__ == "__main__":
    name, replacement = MUTANTS[sys.argv.pop(1)]
    setattr(service.Recall, name, replacement)
    main()
