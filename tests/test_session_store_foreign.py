"""``sessions.json`` values memdir does not understand survive its rewrites.

The store rewrote the whole file from the entries it parsed, so anything without a string
``sessionId`` — another tool's bookkeeping, an entry a gateway was still creating, an id written
as a number — was deleted by the next chat turn, flush or ``/new``.
"""

from __future__ import annotations

import json
from pathlib import Path

from memdir.sessions.flush import claim_flush
from memdir.sessions.store import SessionStore, message_record

KEY = "agent:main:main"
FOREIGN = {
    "_meta": {"version": 3, "owner": "gateway"},
    "agent:main:pending": {"label": "being created"},
    "agent:main:numeric": {"sessionId": 42, "label": "id as a number"},
    "agent:main:list": ["not", "an", "object"],
}


def test_other_values_survive_every_kind_of_write(tmp_path: Path) -> None:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "sessions.json").write_text(json.dumps({KEY: {"sessionId": "abc"}, **FOREIGN}), encoding="utf-8")
    store = SessionStore(sessions)
    store.update(KEY, total_tokens=123)
    store.append(KEY, message_record("user", "hello"))
    assert claim_flush(store, KEY) is not None
    store.rotate(KEY)
    store.open_session("agent:main:second")
    store.open_session("agent:main:pending")  # a key memdir now writes an entry under: the entry wins
    data = json.loads((sessions / "sessions.json").read_text(encoding="utf-8"))
    others = {k: v for k, v in FOREIGN.items() if k != "agent:main:pending"}
    assert {k: data[k] for k in others} == others
    assert set(data) == {*FOREIGN, KEY, "agent:main:second"}
    assert isinstance(data["agent:main:pending"]["sessionId"], str)
    assert data[KEY]["sessionId"] != "abc"  # rotated: memdir's own entry is still rewritten
    assert set(store.load()) == {KEY, "agent:main:second", "agent:main:pending"}

