"""The ``sessions`` source: agent transcripts indexed beside memory files (R§6, R§8).

Transcripts become ``User:``/``Assistant:`` text with a map back to their JSONL lines and each
line's message time, so hits cite real transcript lines and temporal decay uses when a thing was
said (OpenClaw resolves session paths against the workspace and never decays them).

A transcript that grew only a little since it was last indexed (under 100 KB and 50 messages
by default) is left for later when the sync was triggered by a search, so a chat that appends
every few seconds does not re-chunk its transcript on every query; ``memdir index`` and full
rebuilds always index everything.

Transcripts that ``/new`` and ``/reset`` set aside (``*.jsonl.reset.<time>``) stay indexed, as in
OpenClaw v4.12 (R§3): otherwise a whole conversation left search the moment it ended, and only the
hook's last 15 messages could still be found.
"""

from __future__ import annotations

import os
from pathlib import Path

from memdir.sessions.store import list_transcripts
from memdir.sessions.transcript import count_newlines, session_document, session_rel_path
from memdir.sync import SourceDoc
from memdir.workspace import FileEntry, change_stamp


class SessionsSource:
    name = "sessions"

    def __init__(self, sessions_dir: Path, *, delta_bytes: int = 100_000, delta_messages: int = 50,
                 redact: bool = True):
        self.sessions_dir = Path(sessions_dir)
        self.delta_bytes = delta_bytes
        self.delta_messages = delta_messages
        self.redact = redact

    def list_files(self) -> list[FileEntry]:
        out = []
        for p in list_transcripts(self.sessions_dir, archived=True):
            try:
                st = os.lstat(p)
            except FileNotFoundError:
                continue
            out.append(FileEntry(session_rel_path(p), str(p), self.name, change_stamp(st), st.st_size))
        return out

    def issues(self) -> list[str]:
        return [] if self.sessions_dir.is_dir() else [f"sessions directory missing ({self.sessions_dir})"]

    def load(self, entry: FileEntry) -> SourceDoc | None:
        try:
            doc = session_document(entry.abs_path, redact=self.redact)
        except FileNotFoundError:
            return None
        return SourceDoc(doc.text, doc.hash, doc.line_map, doc.timestamps_ms)

    def defer(self, entry: FileEntry, indexed_size: int) -> bool:
        """True when growth since the last index is below both delta thresholds (R§6: a threshold
        of 0 bytes is hit by any growth; with 0 messages, messages are not counted at all)."""
        grown = entry.size - indexed_size
        if grown <= 0:
            return False  # truncated or rewritten: index now
        if self.delta_bytes <= 0 or grown >= self.delta_bytes:
            return False
        if self.delta_messages <= 0:
            return True
        return count_newlines(Path(entry.abs_path), indexed_size, entry.size) < self.delta_messages
