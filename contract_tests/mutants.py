"""Deliberately broken builds, to prove the recall-contract suite catches them.

    python contract_tests/mutants.py MUTANT serve --port 8000 ...

patches one behaviour of the real server, then runs the normal CLI. Each mutant breaks exactly
one contract through the server's own mechanism, so the suite must catch the broken contract
itself (the mutant test also checks that the mutant is still doing what it claims).
"""

from __future__ import annotations

import sys

from recall_server import cursor, errors
from recall_server.cli import main
from recall_server.service.views import Views

_get_thread = Views.get_thread
_next = cursor.Pager._next


async def empty_miss(self, cred, thread_id, budget):
    """A miss answered as 200 {} instead of a loud 404."""
    try:
        return await _get_thread(self, cred, thread_id, budget)
    except errors.NotFound:
        return {}


def skipping_cursor(self, tenant, position):
    """An event-log cursor that silently skips the event after each page: still signed for the right
    list of the right tenant by the one cursor helper, so the server accepts it."""
    if self.list_key[0] == "events":
        position = [position[0] + 1]
    return _next(self, tenant, position)


MUTANTS = {
    "empty-miss": (Views, "get_thread", empty_miss),
    "skipping-cursor": (cursor.Pager, "_next", skipping_cursor),
}

if __name__ == "__main__":
    owner, name, replacement = MUTANTS[sys.argv.pop(1)]
    setattr(owner, name, replacement)
    main()
