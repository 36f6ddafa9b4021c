"""A ``sessions.json`` entry never makes the store write, create or rename a file outside its folder.

``sessions.json`` is plain JSON another tool (or a stale copy from a moved state folder) may have
written; its ``sessionFile`` and ``sessionId`` must not steer appends and ``/new`` elsewhere.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memdir.sessions.hook import run_session_memory_hook
from memdir.sessions.store import SessionStore, SessionStoreError, append_record, message_record, read_records

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


def test_rotation_hands_the_hook_the_transcript_it_rotated(tmp_path: Path) -> None:
    """/new after a stale sessionFile: the hook saves this agent's conversation, not the file named."""
    other = tmp_path / "other-agent"
    other.mkdir()
    (other / "abc.jsonl").write_text(json.dumps(message_record("user", "someone else's chat")) + "\n",
                                     encoding="utf-8")
    store = _store(tmp_path, {"sessionId": "abc", "sessionFile": str(other / "abc.jsonl")})
    store.append(KEY, message_record("user", "my own flamingo plan"))
    rotation = store.rotate(KEY)
    assert rotation.previous is not None and rotation.rotated_file is not None
    result = run_session_memory_hook(action="new", session_key=KEY, workspace=tmp_path / "ws",
                                     previous_entry=rotation.previous, sessions_dir=store.dir,
                                     now=datetime(2026, 1, 16, 12, 0, tzinfo=UTC), timezone="UTC")
    assert result is not None and result.error is None and result.path is not None
    body = result.path.read_text(encoding="utf-8")
    assert "my own flamingo plan" in body and "someone else" not in body


def test_new_recovers_a_session_whose_id_names_no_file(tmp_path: Path) -> None:
    """A refused sessionId must not also block /new, the user's way out of it."""
    store = _store(tmp_path, {"sessionId": "../escaped"})
    rotation = store.rotate(KEY)
    assert rotation.rotated_file is None
    store.append(KEY, message_record("user", "fresh start"))
    assert store.transcript_path(store.get(KEY)).parent == tmp_path / "sessions"


def test_opening_a_session_whose_id_names_no_file_starts_a_new_one(tmp_path: Path) -> None:
    """``memdir chat`` opens its session first: a refused id must not stop it from ever starting."""
    store = _store(tmp_path, {"sessionId": "../escaped", "model": "m1"})
    entry = store.open_session(KEY)
    assert entry.session_id != "../escaped" and entry.model == "m1"
    assert store.transcript_path(entry).is_file()
    store.append(KEY, message_record("user", "back in business"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sessions"]


def test_hook_never_follows_a_session_id_out_of_the_sessions_folder(tmp_path: Path) -> None:
    """/new on an entry whose sessionId is a path: another agent's chat is not copied into memory."""
    other = tmp_path / "other-agent"
    other.mkdir()
    append_record(other / "abc.jsonl", message_record("user", "the other agent's private plan"))
    store = _store(tmp_path, {"sessionId": "../other-agent/abc"})
    rotation = store.rotate(KEY)
    result = run_session_memory_hook(action="new", session_key=KEY, workspace=tmp_path / "ws",
                                     previous_entry=rotation.previous, sessions_dir=store.dir,
                                     now=datetime(2026, 1, 16, 12, 0, tzinfo=UTC), timezone="UTC")
    assert result is not None and result.error is None and result.transcript is None
    assert result.path is not None and "private plan" not in result.path.read_text(encoding="utf-8")


@pytest.mark.parametrize("planted", ["dangling link", "link to a file", "directory", "fifo"])
def test_the_sessions_lock_is_never_opened_through_a_link_nor_taken_when_it_is_no_file(
        tmp_path: Path, planted: str) -> None:
    """``sessions.json.lock`` was opened as it was, with O_CREAT: a symlink planted at its name made
    the file it pointed to outside the state folder (0600, empty), and a directory there failed
    ``memdir chat`` with a bare "[Errno 21] Is a directory"."""
    import os

    sessions = tmp_path / "sessions"
    sessions.mkdir()
    lock = sessions / "sessions.json.lock"
    outside = tmp_path / "elsewhere"
    if planted == "link to a file":
        outside.write_text("keep\n", encoding="utf-8")
    if planted.endswith(("link", "file")):
        lock.symlink_to(outside)
    elif planted == "directory":
        lock.mkdir()
    else:
        os.mkfifo(lock)
    with pytest.raises(SessionStoreError) as refused:
        SessionStore(sessions).open_session(KEY)
    kind = {"directory": "a directory", "fifo": "a FIFO"}.get(planted, "a symbolic link")
    assert f"{lock} is {kind}" in str(refused.value) and "remove it" in str(refused.value)
    assert (outside.read_text(encoding="utf-8") == "keep\n") if planted == "link to a file" else not outside.exists()
    assert sorted(p.name for p in sessions.iterdir()) == ["sessions.json.lock"]  # nothing else written


@pytest.mark.parametrize("planted", ["link", "fifo", "directory"])
def test_a_transcript_that_is_no_file_is_named_for_what_it_is(tmp_path: Path, planted: str) -> None:
    """A transcript replaced by a symlink failed memdir chat (and the hook, the flush) with
    "[Errno 40] Too many levels of symbolic links" for one link, a folder with a bare "[Errno 21]",
    a FIFO with "Invalid argument"; each is named for what it is, nothing written through it."""
    import os

    store = _store(tmp_path, {"sessionId": "abc"})
    transcript = tmp_path / "sessions" / "abc.jsonl"
    victim = tmp_path / "victim.txt"
    victim.write_text("keep\n", encoding="utf-8")
    if planted == "link":
        transcript.symlink_to(victim)
    elif planted == "fifo":
        os.mkfifo(transcript)
    else:
        transcript.mkdir()
    kind = {"link": "a symbolic link", "fifo": "a FIFO", "directory": "a directory"}[planted]
    with pytest.raises(OSError) as refused:
        store.append(KEY, message_record("user", "hello"))
    assert f"{kind}, not a regular file" in str(refused.value) and str(transcript) in str(refused.value)
    if planted != "directory":
        with pytest.raises(OSError) as unread:
            read_records(transcript)
        assert f"{kind}, not a regular file" in str(unread.value)
    assert victim.read_text(encoding="utf-8") == "keep\n"
