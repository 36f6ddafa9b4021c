"""Session store: keys, sessions.json, transcripts, rotation, crash safety."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from helpers import ReadOnlyFolder
from memdir.sessions.store import (
    SessionEntry,
    SessionStore,
    append_record,
    chat_type_from_session_key,
    iter_records,
    list_transcripts,
    message_record,
    parse_session_key,
    read_records,
    session_key,
)

SRC = str(Path(__file__).resolve().parents[1] / "src")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        ("agent:main:discord:dm:u123", "direct"),  # vector 49
        ("agent:main:discord:group:c123", "group"),
        ("agent:main:slack:channel:c1", "channel"),
        ("agent:main:main", "direct"),
        (None, "direct"),
        ("", "direct"),
        ("not-a-key", "direct"),
        ("agent:main", "direct"),  # fewer than 3 parts: no parse
        ("AGENT:Main:Telegram:GROUP:x", "group"),  # lower-cased before parsing
        ("agent:main:group:channel", "channel"),  # channel wins over group
        ("agent:main:groupies:x", "direct"),  # tokens, not substrings
    ],
)
def test_chat_type_from_session_key(key: str | None, expected: str) -> None:
    assert chat_type_from_session_key(key) == expected


def test_parse_and_build_session_key() -> None:
    assert parse_session_key("agent:ops:slack:channel:c1") == ("ops", "slack:channel:c1")
    assert parse_session_key("agent::x") is None
    assert session_key("ops") == "agent:ops:main"
    assert session_key("ops", "agent:other:x") == "agent:other:x"


def test_open_session_creates_entry_and_transcript(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "sessions")
    entry = store.open_session("agent:main:discord:group:g1", model="m1")
    assert entry.chat_type == "group"
    assert entry.compaction_count == 0
    assert Path(entry.session_file) == tmp_path / "sessions" / f"{entry.session_id}.jsonl"
    records = read_records(entry.session_file)
    assert records[0]["type"] == "session" and records[0]["id"] == entry.session_id
    # Idempotent: a second open returns the same session.
    assert store.open_session("agent:main:discord:group:g1").session_id == entry.session_id
    on_disk = json.loads((tmp_path / "sessions" / "sessions.json").read_text())
    assert on_disk["agent:main:discord:group:g1"]["sessionId"] == entry.session_id
    assert on_disk["agent:main:discord:group:g1"]["chatType"] == "group"


def test_entries_keep_unknown_fields_and_use_camel_case(tmp_path: Path) -> None:
    folder = tmp_path / "s"
    folder.mkdir()
    (folder / "sessions.json").write_text(json.dumps({
        "agent:main:main": {"sessionId": "abc", "totalTokens": 10, "skillsSnapshot": {"x": 1},
                            "memoryFlushCompactionCount": 0},
        "broken": "not an object",
    }))
    store = SessionStore(folder)
    entry = store.get("agent:main:main")
    assert entry is not None and entry.total_tokens == 10 and entry.memory_flush_compaction_count == 0
    store.update("agent:main:main", compaction_count=3)
    data = json.loads((folder / "sessions.json").read_text())["agent:main:main"]
    assert data["compactionCount"] == 3
    assert data["skillsSnapshot"] == {"x": 1}  # foreign field survives a rewrite
    assert data["totalTokens"] == 10
    assert "updatedAt" in data
    assert "broken" not in data


def test_update_unknown_key_raises(tmp_path: Path) -> None:
    with pytest.raises(KeyError):
        SessionStore(tmp_path).update("agent:main:nope", total_tokens=1)


def test_append_and_read_records_skip_blank_and_torn_lines(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    append_record(path, message_record("user", "hello", timestamp=1))
    with open(path, "ab") as fh:
        fh.write(b"\n\n")
        fh.write(b'{"type":"message","message":{"role":"assistant","content":"cut mid-wr')  # a crash
    assert [r["message"]["content"] for r in read_records(path)] == ["hello"]
    # The next append must not glue itself to the torn fragment.
    append_record(path, message_record("assistant", "after crash", timestamp=2))
    lines = list(iter_records(path))
    assert [r["message"]["content"] for _, r in lines] == ["hello", "after crash"]
    assert lines[-1][0] == 5  # line numbers are real file lines (blank and torn lines count)
    raw_lines = path.read_bytes().split(b"\n")
    assert raw_lines[3].endswith(b"cut mid-wr")  # the fragment stays alone on its line
    assert json.loads(raw_lines[4])["message"]["content"] == "after crash"


def test_append_refuses_symlinked_transcript(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("x")
    link = tmp_path / "t.jsonl"
    link.symlink_to(target)
    with pytest.raises(OSError):
        append_record(link, {"type": "message"})
    assert target.read_text() == "x"


def test_concurrent_appenders_never_interleave(tmp_path: Path) -> None:
    path = tmp_path / "t.jsonl"
    big = "x" * 70_000  # larger than a pipe buffer / typical atomic write size

    def writer(n: int) -> None:
        for i in range(20):
            append_record(path, {"type": "custom", "writer": n, "i": i, "pad": big})

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    raw = path.read_bytes().splitlines()
    assert len(raw) == 80
    records = [json.loads(line) for line in raw]  # every line is a whole record
    for n in range(4):
        assert [r["i"] for r in records if r["writer"] == n] == list(range(20))


def test_rotate_moves_transcript_aside_and_resets_counters(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    key = "agent:main:main"
    first = store.open_session(key, model="m")
    store.append(key, message_record("user", "hi"))
    store.update(key, compaction_count=2, memory_flush_compaction_count=2, memory_flush_at=5, total_tokens=99)
    when = datetime(2026, 1, 16, 14, 30, 5, 123000, tzinfo=UTC)
    rot = store.rotate(key, when=when)
    assert rot.previous is not None and rot.previous.session_id == first.session_id
    assert rot.rotated_file == Path(first.session_file + ".reset.2026-01-16T14-30-05.123Z")
    assert rot.rotated_file.is_file() and not Path(first.session_file).exists()
    assert any(r.get("message", {}).get("content") == "hi" for r in read_records(rot.rotated_file))
    cur = store.get(key)
    assert cur is not None and cur.session_id != first.session_id
    assert cur.compaction_count == 0 and cur.memory_flush_compaction_count is None and cur.total_tokens is None
    assert cur.model == "m"
    assert Path(cur.session_file).is_file()
    # Rotated files are not live transcripts.
    assert list_transcripts(tmp_path) == [Path(cur.session_file)]


def test_sessions_json_parallel_updates_lose_nothing(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    keys = [f"agent:main:k{i}" for i in range(6)]
    for k in keys:
        store.open_session(k)

    def bump(k: str) -> None:
        for _ in range(15):
            store.mutate(lambda entries, k=k: entries.__setitem__(
                k, entries[k].model_copy(update={"compaction_count": (entries[k].compaction_count or 0) + 1})))

    threads = [threading.Thread(target=bump, args=(k,)) for k in keys]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(store.get(k).compaction_count == 15 for k in keys)
    assert not list(tmp_path.glob("sessions.json.tmp-*"))


_CHILD = r"""
import os, sys
sys.path.insert(0, {src!r})
from memdir.sessions.store import SessionStore, message_record
store = SessionStore({folder!r})
key = "agent:main:main"
store.open_session(key)
i = 0
pad = "p" * 200_000
print("ready", flush=True)
while True:
    store.append(key, message_record("user", f"message {{i}} " + pad, timestamp=i))
    store.update(key, total_tokens=i)
    i += 1
"""


def test_sigkill_while_writing_leaves_readable_transcript_and_metadata(tmp_path: Path) -> None:
    folder = tmp_path / "sessions"
    proc = subprocess.Popen([sys.executable, "-c", _CHILD.format(src=SRC, folder=str(folder))],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 20
        store = SessionStore(folder)
        while time.monotonic() < deadline:
            entry = store.get("agent:main:main")
            if entry and (entry.total_tokens or 0) >= 20:
                break
            time.sleep(0.01)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL
    entry = SessionStore(folder).get("agent:main:main")  # sessions.json parses (never half-written)
    assert entry is not None and entry.total_tokens >= 20
    transcript = Path(entry.session_file)
    records = [r for r in read_records(transcript) if r["type"] == "message"]
    numbers = [int(r["message"]["content"].split()[1]) for r in records]
    assert numbers == list(range(len(numbers)))  # complete, in order, no gaps
    assert len(numbers) >= 20
    # Every line but possibly the last is a whole record.
    lines = transcript.read_bytes().split(b"\n")
    for line in lines[:-1]:
        json.loads(line)
    # The session is usable after the crash: a new append lands on its own line.
    SessionStore(folder).append("agent:main:main", message_record("assistant", "recovered"))
    assert read_records(transcript)[-1]["message"]["content"] == "recovered"


def test_session_entry_json_roundtrip() -> None:
    entry = SessionEntry(session_id="s", total_tokens_fresh=False, memory_flush_at=1)
    assert entry.to_json() == {"sessionId": "s", "totalTokensFresh": False, "memoryFlushAt": 1}
    assert SessionEntry.model_validate(entry.to_json()) == entry


def test_a_record_with_a_lone_surrogate_is_written_escaped(tmp_path: Path) -> None:
    """A string with no UTF-8 form (a lone surrogate) made ``append_record`` raise and the record was
    lost; it is written with ``\\u`` escapes and reads back unchanged."""
    t = tmp_path / "s.jsonl"
    append_record(t, {"type": "message", "message": {"role": "assistant", "content": "half \ud83d emoji é"}})
    append_record(t, {"type": "message", "message": {"role": "user", "content": "après"}})
    assert t.read_bytes().isascii() is False  # the second record is still plain UTF-8
    assert [r["message"]["content"] for r in read_records(t)] == ["half \ud83d emoji é", "après"]


def test_list_transcripts_can_include_the_ones_set_aside(tmp_path: Path) -> None:
    live = tmp_path / "a.jsonl"
    for name in ("a.jsonl", "b.jsonl.reset.2026-01-16T14-30-05.123Z", "c.jsonl.deleted.2026-01-16T14-30-05.123Z",
                 ".jsonl", "x.jsonl.reset.", "notes.txt", "sessions.json"):
        (tmp_path / name).write_text("")
    assert list_transcripts(tmp_path) == [live]
    assert [p.name for p in list_transcripts(tmp_path, archived=True)] == [
        "a.jsonl", "b.jsonl.reset.2026-01-16T14-30-05.123Z", "c.jsonl.deleted.2026-01-16T14-30-05.123Z"]


_HOLD = "import fcntl, os, sys, time\nfd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)\n" \
        "fcntl.flock(fd, fcntl.LOCK_EX)\nprint('held', flush=True)\ntime.sleep(60)\n"


def test_a_write_waiting_for_a_stopped_holder_of_the_store_gives_up_and_names_it(tmp_path: Path, monkeypatch):
    # Before: a writer stopped (Ctrl-Z, SIGSTOP) or hung while it held sessions.json's lock or a
    # transcript's made every later chat turn, hook and flush wait for ever, without a word.
    import memdir.sessions.store
    from memdir.lock import LockTimeout

    monkeypatch.setattr(memdir.sessions.store, "SESSION_LOCK_WAIT", 0.3, raising=False)
    store = SessionStore(tmp_path)
    key = "agent:main:main"
    store.append(key, message_record("user", "first"))
    before = store.path.read_bytes()
    transcript = store.transcript_path(store.get(key))
    written = transcript.read_bytes()
    for locked in (tmp_path / "sessions.json.lock", transcript):
        holder = subprocess.Popen([sys.executable, "-c", _HOLD, str(locked)], stdout=subprocess.PIPE, text=True)
        try:
            assert holder.stdout.readline() == "held\n"
            os.kill(holder.pid, signal.SIGSTOP)
            outcome: list[BaseException | None] = []

            def write(locked: Path = locked, outcome: list[BaseException | None] = outcome) -> None:
                try:
                    if locked == transcript:
                        store.append(key, message_record("user", "second"))
                    else:
                        store.rotate(key)
                    outcome.append(None)
                except BaseException as exc:
                    outcome.append(exc)

            writer = threading.Thread(target=write, daemon=True)
            writer.start()
            writer.join(10)
            assert not writer.is_alive(), f"the write is still waiting for the lock of {locked}"
            assert isinstance(outcome[0], LockTimeout), outcome
            message = str(outcome[0])
            assert str(locked) in message and "nothing was written" in message
            assert f"pid {holder.pid} holds its lock but is stopped" in message
            assert f"kill -CONT {holder.pid}" in message
            assert store.path.read_bytes() == before and transcript.read_bytes() == written
        finally:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
    store.append(key, message_record("user", "second"))  # the lock free again: written
    assert [r.get("message", {}).get("content") for _, r in iter_records(transcript)][-2:] == ["first", "second"]


def test_a_sessions_folder_that_cannot_be_written_is_named_with_the_fix(tmp_path: Path) -> None:
    """A read-only state folder (a container's ro mount, chmod a-w, one left by 'sudo memdir chat')
    failed 'memdir chat' with Python's bare "[Errno 13] Permission denied: '…/sessions.json.lock'"
    (or the sessions folder it could not make); it names the store, the folder and the fix."""
    from memdir.sessions.store import SessionStoreError

    folder = ReadOnlyFolder(tmp_path / "ro")
    root = folder.root
    (root / "old" / "sessions").mkdir(parents=True)
    try:
        folder.lock(root / "old" / "sessions")
        for sessions, blocking in ((root / "new" / "sessions", root), (root / "old" / "sessions", None)):
            blocking = blocking or sessions
            why = (f"{blocking} is on a file system mounted read-only" if folder.mounted else
                   f"this user cannot write its own folder {blocking} (mode 555): chmod u+rwx it")
            with pytest.raises(SessionStoreError) as caught:
                SessionStore(sessions).append("agent:main:main", {"type": "message"})
            assert str(caught.value) == f"cannot write the sessions store {sessions}: {why}"
    finally:
        folder.release()
