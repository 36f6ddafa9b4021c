"""Settings that shape a search mean the same on SQLite and PostgreSQL (the keyword side:
test_backend_keyword_parity.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from helpers import Backend
from memdir.api import Memory


def test_vector_search_turned_off_is_off_on_both_backends(pg: Backend, make_workspace: Callable[..., Path]) -> None:
    """``store.vector.enabled = false`` turns vector search off on SQLite (status: path disabled);
    PostgreSQL ignored it and kept answering by meaning: "puppy" found the note about a dog there
    and nothing on SQLite, while its status said ``enabled: false`` beside ``path: exact``."""
    ws = make_workspace({"memory/2026-01-01.md": "- we adopted a small dog named Biscuit\n",
                         "memory/2026-01-02.md": "- lunch notes about pasta\n"})
    off = {"memorySearch": {"store": {"vector": {"enabled": False}}}}
    answers = []
    for config in (off, pg.config(off)):
        with Memory(ws, config=config) as mem:
            mem.sync()
            answers.append([r.path for r in mem.search("puppy").results])
            assert mem.status()["vector"]["path"] == "disabled"
    assert answers == [[], []]
