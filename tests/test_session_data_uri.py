"""An image pasted as a base64 data URI stays out of the session index and the hook's memory file.

Its payload is opaque bytes: in the index it is one megabyte-long token no search matches, and in
the hook's ``memory/YYYY-MM-DD-<slug>.md`` it buries the conversation the file exists to keep.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from pathlib import Path

from memdir.sessions.hook import run_session_memory_hook
from memdir.sessions.readable import read_session_lines
from memdir.sessions.store import append_record, message_record
from memdir.sessions.transcript import session_document

PAYLOAD = base64.b64encode(bytes(range(256)) * 400).decode()  # ~136 KB of base64


def _transcript(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "abc.jsonl"
    append_record(path, {"type": "session", "id": "abc"})
    append_record(path, message_record("user", f"see the chart ![plot](data:image/png;base64,{PAYLOAD}) please"))
    block = {"type": "text", "text": f"raw data:image/jpeg;name=a.jpg;base64,{PAYLOAD}"}
    append_record(path, message_record("user", [block]))
    append_record(path, message_record("assistant", "the flamingo budget rose"))
    return path


def test_index_text_and_memory_get_hold_no_base64_payload(tmp_path: Path) -> None:
    path = _transcript(tmp_path / "sessions")
    doc = session_document(path)
    assert PAYLOAD[:64] not in doc.text
    assert doc.text.splitlines() == [
        "User: see the chart ![plot](data:image/png;base64,…) please",
        "User: raw data:image/jpeg;name=a.jpg;base64,…",
        "Assistant: the flamingo budget rose",
    ]
    assert doc.line_map == [2, 3, 4]
    assert read_session_lines("sessions/abc.jsonl", tmp_path / "sessions", 2, 1) == doc.text.splitlines()[0]


def test_hook_file_holds_no_base64_payload(tmp_path: Path) -> None:
    path = _transcript(tmp_path / "sessions")
    ws = tmp_path / "ws"
    res = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=ws,
                                  previous_entry={"sessionId": "abc", "sessionFile": str(path)},
                                  now=datetime(2026, 1, 16, 14, 30, tzinfo=UTC), timezone="UTC")
    assert res is not None and res.error is None and res.messages == 3
    body = res.path.read_text(encoding="utf-8")
    assert PAYLOAD[:64] not in body
    assert "user: see the chart ![plot](data:image/png;base64,…) please" in body
    assert len(body) < 1000
