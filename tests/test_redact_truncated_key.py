"""A private key pasted without its END line (output cut mid-key) is masked, in the session index too.

Only whole ``BEGIN … END`` blocks were recognised, so the body of a truncated key — the secret
itself — was indexed and shown by ``memory_get`` verbatim.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from memdir.redact import redact_text
from memdir.sessions.store import append_record, message_record
from memdir.sessions.transcript import session_document

BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn"


@pytest.mark.parametrize(
    "text",
    [
        f"-----BEGIN OPENSSH PRIVATE KEY-----\n{BODY}\n{BODY}\n[output truncated]",
        f"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,0A1B\n\n{BODY}",
        f"here is my key -----BEGIN PRIVATE KEY----- {BODY}",
    ],
)
def test_a_key_without_its_end_line_is_masked(text: str) -> None:
    out = redact_text(text)
    assert BODY[:16] not in out and BODY[20:40] not in out
    assert "…" in out


def test_prose_about_the_header_is_left_alone() -> None:
    text = "A PEM key starts with -----BEGIN PRIVATE KEY----- and then the body."
    assert redact_text(text) == text


def test_a_truncated_key_in_a_transcript_never_reaches_the_index(tmp_path: Path) -> None:
    path = tmp_path / "abc.jsonl"
    append_record(path, message_record("user", f"cat id_rsa | head -3 gave:\n-----BEGIN OPENSSH PRIVATE KEY-----\n"
                                               f"{BODY}\n{BODY}"))
    text = session_document(path).text
    assert text.startswith("User: cat id_rsa | head -3 gave: -----B…")
    assert BODY[:16] not in text
