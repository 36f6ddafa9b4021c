"""An index a newer memdir wrote (a schema number above ours, a column or an index more) is
rebuilt by this version, not left failing every sync.

The rebuild of an index holding an embedding cache copies the new rows into the live file table
by table; a live table with a column more refused them ("table main.files has 6 columns but 5
values were supplied"), so ``index`` and ``index --force`` failed for ever after a downgrade.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.errors import IndexFromNewerMemdir
from memdir.stores.sqlite import META_KEY
from test_cache_refs import HashProvider, _notes


def _as_if_newer(index: Path) -> None:
    with sqlite3.connect(index) as conn:
        for table in ("files", "chunks", "embedding_cache"):
            conn.execute(f"ALTER TABLE {table} ADD COLUMN future TEXT NOT NULL DEFAULT 'x'")
        conn.execute("CREATE INDEX idx_files_future ON files(future)")
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps({**meta, "schema": 99}), META_KEY))
    conn.close()


def test_an_index_a_newer_memdir_wrote_is_left_and_rebuilt_only_when_forced(make_workspace, tmp_path: Path):
    # (rebuilt by any sync before hmixed: an older process and a newer one then rebuilt it after
    # each other for as long as both ran; now searched, not updated, until `index --force`)
    ws = make_workspace(_notes(12))
    state = tmp_path / "state"
    with Memory(ws, provider=HashProvider(), state_dir=state) as mem:
        mem.sync()
        index = mem.index_path
        before = mem.search("topic7", sync=False).results[0].path
    _as_if_newer(index)

    provider = HashProvider()
    with Memory(ws, provider=provider, state_dir=state) as mem:
        with pytest.raises(IndexFromNewerMemdir, match="schema 99"):
            mem.sync()
        assert mem.search("topic7", sync=False).results[0].path == before
        report = mem.sync(force=True)
        assert report.full and report.indexed == 12 and provider.embedded == 0  # every vector from the cache
        assert mem.search("topic7", sync=False).results[0].path == before
        assert not mem.sync().full
        assert mem.store.check(thorough=True) is None and mem.status()["dirty"] is False
    with sqlite3.connect(index) as conn:
        assert all("future" not in (sql or "") for (sql,) in conn.execute("SELECT sql FROM sqlite_master"))
    conn.close()
