"""An index written by an older memdir whose indexing has since changed is re-read once.

Indexes whose meta said ``chunker: 12`` were built before several changes to what indexing derives
from the files (11-28): a private key pasted without its END line is masked in transcripts
(5e2e6a6), base64 data-URI payloads are left out of transcripts (4e2ca34), RFC 3339 times with a
lower-case ``z`` date their messages (659ee9c), '$2000' is no year (7c33b23), a CJK-heavy long
line is sliced differently (7a9105c).  None bumped the chunker version, so an upgraded index kept
the old rows of every file that did not change: a rotated transcript never does, and the secret
it held stayed searchable and was shown in snippets for good.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.index_identity import CHUNKER_VERSION
from memdir.sessions.store import append_record, message_record
from memdir.stores.sqlite import META_KEY

BODY = "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAABlwAAAAdzc2gtcn"
CONFIG = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                           "experimental": {"sessionMemory": True}}}


def _set_chunker(index: Path, version: int) -> None:
    """Make the index's meta say which chunker wrote it (as an older memdir's did)."""
    with sqlite3.connect(index) as conn:
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps({**meta, "chunker": version}), META_KEY))
    conn.close()


def test_a_transcript_indexed_before_truncated_keys_were_masked_is_read_again(
        make_workspace, state_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ws = make_workspace({"MEMORY.md": "# Notes\n- nothing secret here\n"})
    with Memory(ws, state_dir=state_dir, config=CONFIG) as mem:
        sessions = mem.settings.sessions_dir
        sessions.mkdir(parents=True)
        # a transcript set aside by /new: never appended to again
        append_record(sessions / "abc.jsonl.reset.2026-11-27T10-00-00.000Z", message_record(
            "user", f"cat id_rsa | head -3 gave:\n-----BEGIN OPENSSH PRIVATE KEY-----\n{BODY}\n{BODY}"))
        # what memdir wrote before 5e2e6a6: the key's body unmasked
        with monkeypatch.context() as m:
            m.setattr("memdir.sessions.transcript.redact_text", lambda text: text)
            mem.sync()
        assert mem.search(BODY, sync=False).results  # the secret is in the index
        index = mem.index_path
    _set_chunker(index, 12)

    with Memory(ws, state_dir=state_dir, config=CONFIG) as mem:
        report = mem.sync()
        assert report.full and "chunker" in (report.reason or "")
        assert not any(BODY[:16] in r.snippet for r in mem.search("OPENSSH PRIVATE KEY", sync=False).results)
        assert mem.search(BODY, sync=False).results == []
        assert not mem.sync().full  # once


def test_the_first_search_of_an_upgraded_index_rebuilds_it_though_no_note_changed(
        make_workspace, state_dir: Path, run_cli) -> None:
    """A search syncs only changed files: with none changed, every search read the index as the older
    version had chunked it (here: the unmasked key) until some note changed, and ``status`` said
    "Dirty: no"."""
    ws = make_workspace({"MEMORY.md": "# Keys\n- deploy key: " + BODY + "\n"})
    with Memory(ws, state_dir=state_dir, config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        index = mem.index_path
    _set_chunker(index, 12)

    st = json.loads(run_cli("status", "--json", "-w", str(ws), "--config", _config(ws), check=True).stdout)
    assert st["syncPending"] and st["dirtyCount"] == 0
    said = [i for i in st["issues"] if f"an older memdir version (chunker changed (12 → {CHUNKER_VERSION}))" in i]
    # a watcher of that older memdir still running rebuilds it back: "rebuilds it once" was untrue then
    assert said and "restart or upgrade it" in said[0] and "once" not in said[0]
    with Memory(ws, state_dir=state_dir, config={"memorySearch": {"provider": "none"}}) as mem:
        assert mem.search("deploy key").results
        assert mem.store.read_meta()["chunker"] == CHUNKER_VERSION
        assert not mem.status()["syncPending"]


def _config(ws: Path) -> str:
    path = ws.parent / "keywords.json"
    path.write_text(json.dumps({"memorySearch": {"provider": "none"}}), encoding="utf-8")
    return str(path)
