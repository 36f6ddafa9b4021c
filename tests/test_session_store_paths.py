"""A ``sessions.json`` entry never makes the store write, create or rename a file outside its folder.

``sessions.json`` is plain JSON another tool (or a stale copy from a moved state folder) may have
written; its ``sessionFile`` and ``sessionId`` must not steer appends and ``/new`` elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memdir.sessions.store import SessionStore, SessionStoreError, message_record, read_records

KEY = "agent:main:main"


def _store(tmp_path: Path, entry: dict) -> SessionStore:
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    (sessions / "sessions.json").write_text(json.dumps({KEY: entry}), encoding="utf-8")
    return SessionStore(sessions)


def test_session_file_outside_the_folder_is_neither_appended_to_nor_renamed(tmp_path: Path) -> None:
    """A sessionFile naming a user's file (not a transcript) falls back to <sessionId>.jsonl."""
    victim = tmp_path / "notes.txt"
    victim.write_text("important\n", encoding="utf-8")
    store = _store(tmp_path, {"sessionId": "abc", "sessionFile": str(victim)})
    store.append(KEY, message_record("user", "hello"))
    rotation = store.rotate(KEY)
    assert victim.read_text(encoding="utf-8") == "important\n"
    live = tmp_path / "sessions" / "abc.jsonl"
    assert rotation.rotated_file is not None and rotation.rotated_file.parent == tmp_path / "sessions"
    assert rotation.rotated_file.name.startswith("abc.jsonl.reset.")
    assert not live.exists()
    assert [r["message"]["content"] for r in read_records(rotation.rotated_file) if r.get("type") == "message"] == [
        "hello"]


def test_session_file_in_another_folder_resolves_to_this_folder(tmp_path: Path) -> None:
    """An absolute path from elsewhere (a moved state folder, another agent) keeps only its name."""
    other = tmp_path / "other-agent"
    other.mkdir()
    foreign = other / "abc.jsonl"
    foreign.write_text('{"type":"session"}\n', encoding="utf-8")
    store = _store(tmp_path, {"sessionId": "abc", "sessionFile": str(foreign)})
    store.append(KEY, message_record("user", "mine"))
    assert foreign.read_text(encoding="utf-8") == '{"type":"session"}\n'
    assert store.transcript_path(store.get(KEY)) == tmp_path / "sessions" / "abc.jsonl"
    assert (tmp_path / "sessions" / "abc.jsonl").is_file()


@pytest.mark.parametrize("session_id", ["../escaped", "a/b", "..\\x", "nul\x00byte"])
def test_session_id_with_a_path_is_refused(tmp_path: Path, session_id: str) -> None:
    """A sessionId holding a separator wrote ``<id>.jsonl`` outside the folder; now it is an error."""
    store = _store(tmp_path, {"sessionId": session_id})
    with pytest.raises(SessionStoreError, match="session id"):
        store.append(KEY, message_record("user", "hello"))
    assert not (tmp_path / "escaped.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]
