"""Message times written in RFC 3339's lower-case form still date a transcript's lines.

``fromisoformat`` takes neither a lower-case ``z`` nor ``t``, so such a time read as 0 (unknown):
temporal decay then used the file's mtime for every message of the session.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.sessions.store import append_record
from memdir.sessions.transcript import session_document, timestamp_ms

WHEN = 1_767_607_200_000  # 2026-01-05 10:00:00 UTC


@pytest.mark.parametrize("text", ["2026-01-05T10:00:00.000z", "2026-01-05t10:00:00z", "2026-01-05T10:00:00Z"])
def test_lower_case_rfc3339_times_are_read(text: str) -> None:
    assert timestamp_ms(text) == WHEN


def test_a_transcript_dated_in_lower_case_keeps_its_message_times(tmp_path: Path) -> None:
    path = tmp_path / "abc.jsonl"
    append_record(path, {"type": "message", "timestamp": "2026-01-05t10:00:00z",
                         "message": {"role": "user", "content": "the kiwi lands"}})
    assert session_document(path).timestamps_ms == [WHEN]
