"""``memdir migrate`` (SQLite ⇄ PostgreSQL) met with damaged sources, read-only folders, held locks
and large indexes: the source is left as it was, the target is complete or untouched, and every
failure says what is wrong in memdir's words.  Runs against a real server (see conftest's ``pg``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import time
from pathlib import Path

import numpy as np
import pytest
from tests.test_postgres import HashProvider

from helpers import Backend, ReadOnlyFolder, deep_merge, pg_query
from memdir.api import Memory
from memdir.errors import IndexOwnershipError


def _sqlite_cfg(pg: Backend, extra: dict | None = None) -> dict:
    """The agent's index in SQLite, the database configured too (the target of ``migrate --to postgres``)."""
    return deep_merge(pg.config(extra), {"memorySearch": {"store": {"driver": "sqlite"}}})


def test_damaged_vectors_are_left_out_not_copied_into_the_teams_cache(pg: Backend, make_workspace, tmp_path: Path):
    """A stored vector whose bytes were damaged (a NaN inside its blob, or a blob one byte too
    long) is scored 0 by searches and is a cache miss on SQLite.  ``migrate --to postgres``
    stopped at the long one with NumPy's 'buffer size must be a multiple of element size', and
    copied the NaN one as it was: PostgreSQL took the NaN as 0 and kept that vector in the team's
    shared cache, where every later rebuild (of this agent or another with the same text) reused
    it.  Damaged vectors are left out: the next sync embeds those two chunks again."""
    texts = {f"memory/n{i}.md": f"# note {i}\n\nThe heron marker{i} fed at the pond.\n" for i in range(4)}
    ws = make_workspace(texts)
    provider = HashProvider()
    with Memory(ws, agent_id="dmg", config=_sqlite_cfg(pg), state_dir=tmp_path, provider=provider) as lite:
        lite.sync()
        index = lite.index_path
    con = sqlite3.connect(index)
    rows = con.execute("SELECT rowid, path, text, embedding FROM chunks WHERE path IN ('memory/n0.md', "
                       "'memory/n1.md') ORDER BY path").fetchall()
    nan = np.frombuffer(rows[0][3], dtype="<f4").copy()
    nan[3] = np.nan
    con.execute("UPDATE chunks SET embedding = ? WHERE rowid = ?", (nan.tobytes(), rows[0][0]))
    con.execute("UPDATE chunks SET embedding = ? WHERE rowid = ?", (rows[1][3] + b"\x00", rows[1][0]))
    con.commit()
    con.close()
    damaged_texts = sorted(r[2] for r in rows)
    before = len(provider.embedded)
    with Memory(ws, agent_id="dmg", config=_sqlite_cfg(pg), state_dir=tmp_path, provider=provider) as lite:
        report = lite.migrate("postgres")
    assert (report["files"], report["chunks"], report["vectors"]) == (4, 4, 2), report
    s = pg.schema
    # nothing of the damaged vectors reached the shared cache (the NaN one zeroed, above all)
    zeroed = pg_query(pg.url, f'SELECT count(*) FROM "{s}".embedding_cache WHERE embedding = %s::vector',
                      (str(np.where(np.isnan(nan), 0, nan).tolist()),))
    assert zeroed == [(0,)]
    assert pg_query(pg.url, f'SELECT count(*) FROM "{s}".embedding_cache') == [(2,)]
    with Memory(ws, agent_id="dmg", config=pg.config(), state_dir=tmp_path, provider=provider) as post:
        post.sync()
        assert sorted(provider.embedded[before:]) == damaged_texts  # embedded again, nothing else
    stored = pg_query(pg.url, f'SELECT v.embedding::text FROM "{s}".vectors v JOIN "{s}".chunks c ON c.index_id = '
                              f"v.index_id AND c.id = v.chunk_id WHERE c.path = 'memory/n0.md'")
    assert np.allclose(np.array(json.loads(stored[0][0])), np.frombuffer(rows[0][3], dtype="<f4"), atol=1e-6)


def test_a_read_only_source_is_copied_and_a_read_only_target_refused(pg: Backend, make_workspace, run_cli,
                                                                     tmp_path: Path):
    """An index on a read-only mount (a backup, a state folder mounted read-only) is read as any
    search reads it, yet ``migrate --to postgres`` from it failed with '[Errno 30] Read-only file
    system: …/x.sqlite.lock' (its writer lock, made beside it); ``migrate --to sqlite`` into such
    an index failed the same way.  The first copies it, the second says why it cannot."""
    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    folder = ReadOnlyFolder(tmp_path / "ro")
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema,
           "MEMDIR_STATE_DIR": str(folder.root)}
    try:
        run_cli("index", "-w", str(ws), env=env, check=True)
        folder.lock(folder.root / "memory")
        out = run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env)
        assert out.returncode == 0, out.stderr
        assert (json.loads(out.stdout)["files"], json.loads(out.stdout)["chunks"]) == (2, 2)
        post = {**env, "MEMDIR_STORE_DRIVER": "postgres"}
        hits = json.loads(run_cli("search", "quokka", "--json", "-w", str(ws), env=post, check=True).stdout)
        assert hits["results"][0]["path"] == "memory/a.md"
        back = run_cli("migrate", "--to", "sqlite", "-w", str(ws), env=post)
        assert back.returncode == 1, back.stdout
        assert f"cannot be updated: {folder.root}" in back.stderr, back.stderr  # (names the folder, or mount)
        assert "Errno" not in back.stderr and "Traceback" not in back.stderr, back.stderr
    finally:
        assert folder.release(), "a file of the index left open"


def _damage_table(index: Path, table: str) -> None:
    """Overwrite the root page of ``table`` in the SQLite file ``index`` (a bad sector, a torn write)."""
    con = sqlite3.connect(index)
    (page_size,) = con.execute("PRAGMA page_size").fetchone()
    (root,) = con.execute("SELECT rootpage FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    con.close()
    with open(index, "r+b") as fh:
        fh.seek((root - 1) * page_size)
        fh.write(b"\xff" * page_size)


def test_a_damaged_source_is_healed_then_copied(pg: Backend, make_workspace, run_cli, state_dir: Path):
    """A damaged page in the SQLite index (one the open's quick probe does not read) stopped
    ``memdir migrate`` with SQLite's bare 'memdir: database disk image is malformed', naming neither
    the index nor what to do, and ``memdir index`` (nothing changed) did not read that page either.
    The damaged index is set aside and rebuilt from the Markdown files, as a search does, and the
    rebuilt one copied: the note changed since the last migrate is in the database's copy."""
    ws = make_workspace({f"memory/n{i}.md": f"# note {i}\n\nthe quokka marker{i} ate lunch\n" for i in range(30)})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    run_cli("migrate", "--to", "postgres", "-w", str(ws), env=env, check=True)
    (ws / "memory" / "n0.md").write_text("# note 0\n\nthe wombat marker0 ate lunch\n")
    run_cli("index", "-w", str(ws), env=env, check=True)
    (index,) = state_dir.glob("memory/*.sqlite")
    _damage_table(index, "chunks")
    out = run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env)
    assert out.returncode == 0, out.stderr
    assert (json.loads(out.stdout)["files"], json.loads(out.stdout)["chunks"]) == (30, 30)
    assert f"the index {index} was damaged (" in out.stderr and "moved it aside to " in out.stderr, out.stderr
    assert len(list(state_dir.glob("memory/*.sqlite.corrupt-*[0-9]"))) == 1  # kept, as every heal keeps it
    post = {**env, "MEMDIR_STORE_DRIVER": "postgres"}
    hits = json.loads(run_cli("search", "wombat", "--json", "--no-sync", "-w", str(ws), env=post, check=True).stdout)
    assert [r["path"] for r in hits["results"]] == ["memory/n0.md"]
    assert json.loads(run_cli("index", "--json", "-w", str(ws), env=post, check=True).stdout)["indexed"] == 0


def test_the_cache_export_holds_a_page_of_vectors_not_all_of_them(backend: Backend, tmp_path: Path):
    """``memdir migrate`` read the agent's whole embedding cache into memory before writing the first
    entry to the target: from PostgreSQL, 133 MB for 20,000 chunks of 384 dimensions (four times
    that with a model of 1,536), from SQLite as much again as on disk.  The export reads a page at
    a time: the memory it holds while the copy runs is a fraction of the vectors' size."""
    import hashlib
    import tracemalloc

    from memdir.config import load_config
    from memdir.stores import open_store
    from memdir.stores.base import ChunkRow

    n, dims = 2000, 256
    settings = load_config(overrides=backend.config(), state_dir=tmp_path, agent_id="big").settings
    store = open_store(settings)
    try:
        hashes = [hashlib.sha256(str(i).encode()).hexdigest() for i in range(n)]
        with store.transaction():
            store.replace_file("memory/big.md", "memory", "f", 1, 1, [
                ChunkRow(f"c{i}", "memory/big.md", "memory", i + 1, i + 1, h, "m", f"entry {i}") for i, h in
                enumerate(hashes)])
            vector = np.linspace(-1, 1, dims, dtype=np.float32)
            for start in range(0, n, 500):
                store.cache_put("p", "m", "k", {h: vector for h in hashes[start:start + 500]})
        tracemalloc.start()
        try:
            exported = sum(1 for _ in store.export_cache())
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert exported == n
        assert peak < n * dims * 4 / 2, f"{peak / 1e6:.1f} MB held for {n * dims * 4 / 1e6:.1f} MB of vectors"
    finally:
        store.close()


def test_a_long_migrate_says_how_far_it_is(pg: Backend, make_workspace, run_cli, tmp_path: Path):
    """``memdir migrate`` printed nothing until it was done: an agent of 20,000 chunks copied for
    25 s without a word, and a larger one for minutes, which reads as a hang.  Like ``memdir index``
    it prints progress lines on stderr (the cache entries, then the files and chunks); --json and
    --quiet print none."""
    import io

    from memdir.progress import ProgressLines

    ws = make_workspace({f"memory/n{i}.md": f"# note {i}\n\nthe quokka marker{i} ate lunch\n" for i in range(12)})
    with Memory(ws, agent_id="far", config=_sqlite_cfg(pg), state_dir=tmp_path / "a", provider=HashProvider()) as lite:
        lite.sync()
        out = io.StringIO()
        report = lite.migrate("postgres", progress=ProgressLines(out, interval=0, action="copying"))
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("copying: ") and " cache entries, " in lines[0], lines
    assert "copying: 12/12 cache entries, " in out.getvalue()
    assert lines[-1].startswith("copying: 12/12 files, 12/12 chunks, ") and lines[-1].endswith(" elapsed"), lines
    assert report["files"] == 12
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema,
           "MEMDIR_PROGRESS_INTERVAL": "0"}
    run_cli("index", "-w", str(ws), env=env, check=True)
    proc = run_cli("migrate", "--to", "postgres", "-w", str(ws), env=env, check=True)
    assert "copying: 12/12 files, 12/12 chunks, " in proc.stderr, proc.stderr
    proc = run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env, check=True)
    assert "copying:" not in proc.stderr + proc.stdout, proc.stderr


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to see a process is stopped")
def test_a_held_lock_is_named_with_its_holder_and_a_stopped_one_not_waited_out(pg: Backend, make_workspace,
                                                                              tmp_path: Path, monkeypatch):
    """A migrate that met the SQLite index's writer lock held waited 30 s, then said 'another process
    is writing one of the indexes; try again when it is done': not which index nor who, and for a
    writer stopped with Ctrl-Z (never done) the same advice after the same wait.  It says whom it
    waits for, then which index and which process; a stopped one is named with how to resume it."""
    import signal
    import time

    from tests.test_lock_hostile import _lock_holder

    import memdir.lock
    from memdir.lock import LockTimeout, WriterStopped, is_stopped

    ws = make_workspace({"memory/a.md": "the quokka ate lunch"})
    said: list[str] = []
    with Memory(ws, agent_id="held", config=_sqlite_cfg(pg, {"memorySearch": {"provider": "none"}}),
                state_dir=tmp_path, notice=said.append) as lite:
        lite.sync()
        holder = _lock_holder(lite.index_path)
        try:
            with pytest.raises(LockTimeout) as caught:
                lite.migrate("postgres", lock_timeout=0.5)
            assert str(caught.value) == (f"another memdir process (pid {holder.pid}) is writing {lite.index_path}, "
                                         "still after 0.5 s: nothing was copied; try again when it is done")
            assert f"waiting for another memdir process (pid {holder.pid}) to finish writing {lite.index_path}" in said
            os.kill(holder.pid, signal.SIGSTOP)
            end = time.monotonic() + 10
            while not is_stopped(holder.pid) and time.monotonic() < end:
                time.sleep(0.01)
            monkeypatch.setattr(memdir.lock, "STOPPED_WRITER_WAIT", 0.0)  # (10 s by default)
            stopped = f"pid {holder.pid} holds the writer lock .* `kill -CONT {holder.pid}`"
            with pytest.raises(WriterStopped, match=stopped):
                lite.migrate("postgres", lock_timeout=60)
        finally:
            os.kill(holder.pid, signal.SIGCONT)
            holder.kill()
            holder.wait()
        assert lite.migrate("postgres", lock_timeout=5)["files"] == 1


def test_an_agent_another_workspace_claimed_in_the_database_is_not_copied_over(pg: Backend, make_workspace,
                                                                              tmp_path: Path):
    """The owner check read only the target's meta, before the locks were taken: an agent another
    workspace had claimed in the database (its first build running, or killed before it published:
    no meta yet) was copied over by this workspace's index, as was one whose build finished while
    migrate waited for the lock.  It is checked under the lock as a sync claims an index, and the
    refusal says what to do, as index's does."""
    from memdir.config import load_config
    from memdir.stores import open_store
    from memdir.stores.base import OWNER_STATE

    theirs = make_workspace({"memory/t.md": "their note"}, name="theirs")
    mine = make_workspace({"memory/m.md": "my note"}, name="mine")
    store = open_store(load_config(overrides=pg.config(), state_dir=tmp_path, agent_id="bot").settings)
    try:
        with store.transaction():
            store.set_state(OWNER_STATE, str(theirs))  # what a first build claims before it writes anything
    finally:
        store.close()
    cfg = _sqlite_cfg(pg, {"memorySearch": {"provider": "none"}})
    with Memory(mine, agent_id="bot", config=cfg, state_dir=tmp_path) as lite:
        lite.sync()
        with pytest.raises(IndexOwnershipError, match=f"belongs to workspace {theirs}, not {mine}; give this "
                                                      r"workspace its own agent id \(--agent NAME\)"):
            lite.migrate("postgres")
    assert pg_query(pg.url, f'SELECT meta FROM "{pg.schema}".indexes') == [(None,)]


def test_a_large_files_vectors_are_exported_as_float32_not_python_lists(backend: Backend, tmp_path: Path):
    """The export ``memdir migrate`` copies a file at a time from handed each vector over as a list
    of Python floats, 8 times its float32 size: one transcript of 3,000 chunks (3 MB of vectors)
    held 30 MB, a long-running agent's transcript of 50,000 hundreds.  Vectors are exported as
    float32 arrays, as the indexer holds them (tracemalloc counts allocations: load cannot move it)."""
    import tracemalloc

    from memdir.config import load_config
    from memdir.stores import open_store
    from memdir.stores.base import ChunkRow

    n, dims = 1500, 256
    settings = load_config(overrides=backend.config(), state_dir=tmp_path, agent_id="one").settings
    store = open_store(settings)
    try:
        rng = np.random.default_rng(0)
        vectors = rng.standard_normal((n, dims)).astype(np.float32)
        with store.transaction():
            store.replace_file("sessions/big.jsonl", "sessions", "f", 1, 1, [
                ChunkRow(f"c{i}", "sessions/big.jsonl", "sessions", i + 1, i + 1, f"h{i}", "m", f"entry {i}",
                         vectors[i]) for i in range(n)])
        tracemalloc.start()
        try:
            (exported,) = [chunks for *_, chunks in store.export_files()]
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        assert len(exported) == n and np.allclose(exported[7].embedding, vectors[7])
        assert peak < 3 * n * dims * 4, f"{peak / 1e6:.1f} MB held for {n * dims * 4 / 1e6:.1f} MB of vectors"
    finally:
        store.close()


def test_copying_an_index_out_of_date_here_says_the_next_index_rebuilds_it(pg: Backend, make_workspace, run_cli,
                                                                           state_dir: Path):
    """An index built by an earlier memdir (another chunker version) was copied without a word, and
    the README's 'the next memdir index has nothing to do' was then a full reindex on the server.
    The copy says so (stderr, and 'warnings' in --json)."""
    from memdir.index_identity import CHUNKER_VERSION

    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    (index,) = state_dir.glob("memory/*.sqlite")
    con = sqlite3.connect(index)
    (value,) = con.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchone()
    con.execute("UPDATE meta SET value = ? WHERE key = 'memory_index_meta_v1'",
                (json.dumps({**json.loads(value), "chunker": CHUNKER_VERSION - 1}),))
    con.commit()
    con.close()
    out = run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env, check=True)
    why = f"chunker changed ({CHUNKER_VERSION - 1} → {CHUNKER_VERSION})"
    assert json.loads(out.stdout)["warnings"] == [
        f"the index copied was out of date here ({why}): the next memdir index on postgres rebuilds it (what the "
        "copied cache holds is not embedded again)"]
    assert f"note: the index copied was out of date here ({why})" in out.stderr
    report = json.loads(run_cli("index", "--json", "-w", str(ws), env={**env, "MEMDIR_STORE_DRIVER": "postgres"},
                                check=True).stdout)
    assert report["full"]  # as the note said
    run_cli("index", "-w", str(ws), env=env, check=True)  # the SQLite index rebuilt by this memdir
    out = run_cli("migrate", "--to", "postgres", "-w", str(ws), env=env, check=True)
    assert "note:" not in out.stderr, out.stderr


def test_a_copy_over_the_agents_index_says_what_it_replaced(pg: Backend, make_workspace, run_cli):
    """Migrating onto a database that already held the agent's index (the team's, served to other
    hosts) replaced it without a word: the output read as for a first copy.  It says what the index
    replaced held (and the README says a copy replaces it)."""
    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    first = json.loads(run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert first["replaced"] is None
    (ws / "memory" / "b.md").write_text("the wombat slept")
    run_cli("index", "-w", str(ws), env=env, check=True)
    again = run_cli("migrate", "--to", "postgres", "-w", str(ws), env=env, check=True)
    assert "copied 3 files, 3 chunks, " in again.stdout
    assert " (replacing the index of 2 files, 2 chunks it held) in " in again.stdout, again.stdout


def test_an_index_set_aside_when_opened_is_rebuilt_then_copied(pg: Backend, make_workspace, run_cli,
                                                                state_dir: Path):
    """An index file that is no database at all (overwritten, zero-filled) is set aside when opened,
    with 'moved it aside … and rebuilding it from the Markdown files'; migrate then said 'nothing to
    migrate: … holds no index yet (run memdir index first)' and rebuilt nothing.  It is rebuilt, as
    said, and copied."""
    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    (index,) = state_dir.glob("memory/*.sqlite")
    index.write_bytes(b"\x00" * 8192)
    out = run_cli("migrate", "--to", "postgres", "--json", "-w", str(ws), env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert (json.loads(out.stdout)["files"], json.loads(out.stdout)["chunks"]) == (2, 2)
    assert f"the index {index} was damaged" in out.stderr and "rebuilding it from the Markdown files" in out.stderr
    post = {**env, "MEMDIR_STORE_DRIVER": "postgres"}
    hits = json.loads(run_cli("search", "quokka", "--json", "-w", str(ws), env=post, check=True).stdout)
    assert [r["path"] for r in hits["results"]] == ["memory/a.md"]


def test_only_the_cache_of_the_agents_notes_goes_into_the_teams_cache(pg: Backend, make_workspace, tmp_path: Path):
    """An SQLite cache keeps the vectors of texts no note holds any more (edited, deleted) until
    ``maxEntries``; ``migrate --to postgres`` copied them all into the team's shared cache as its
    newest entries, so the next prune (``cache.maxEntries``) evicted the other agents' entries for
    them, and those agents paid to embed their notes again.  Only the entries of the agent's chunk
    texts are copied, as from PostgreSQL."""
    provider = HashProvider()
    theirs = make_workspace({f"memory/b{i}.md": f"Bob's note {i}.\n" for i in range(3)}, name="theirs")
    capped = {"memorySearch": {"cache": {"maxEntries": 6}}}
    with Memory(theirs, agent_id="bob", config=pg.config(capped), state_dir=tmp_path, provider=provider) as bob:
        bob.sync()
    mine = make_workspace({"memory/a.md": "Alice's note.\n", "memory/c.md": "Carol's note.\n"}, name="mine")
    with Memory(mine, agent_id="alice", config=_sqlite_cfg(pg, capped), state_dir=tmp_path, provider=provider) as lite:
        for draft in range(3):  # earlier drafts: their vectors stay in this SQLite cache
            (mine / "memory" / "a.md").write_text(f"Alice's note, draft {draft}.\n")
            (mine / "memory" / "c.md").write_text(f"Carol's note, draft {draft}.\n")
            lite.sync()
        (mine / "memory" / "a.md").write_text("Alice's note.\n")
        (mine / "memory" / "c.md").write_text("Carol's note.\n")
        lite.sync()
        assert lite.migrate("postgres")["cacheEntries"] == 2
    with Memory(mine, agent_id="alice", config=pg.config(capped), state_dir=tmp_path, provider=provider) as alice:
        (mine / "memory" / "d.md").write_text("Dave's note.\n")
        alice.sync()  # embeds one note, then prunes the shared cache to maxEntries
    before = len(provider.embedded)
    with Memory(theirs, agent_id="bob", config=pg.config(capped), state_dir=tmp_path, provider=provider) as bob:
        assert bob.sync(force=True).indexed == 3
    assert provider.embedded[before:] == []  # Bob's vectors were still in the cache


def test_a_copy_of_one_note_says_one_file_not_one_files(pg: Backend, make_workspace, run_cli):
    ws = make_workspace({"MEMORY.md": "# prefs\ndark mode"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    out = run_cli("migrate", "--to", "postgres", "-w", str(ws), env=env, check=True).stdout
    assert out.startswith("copied 1 file, 1 chunk, 0 vectors and 0 cache entries from "), out


def test_migrate_with_the_driver_already_set_says_how_to_copy(pg: Backend, make_workspace, run_cli):
    """The README's setup exports MEMDIR_STORE_DRIVER=postgres before anything else; a user with an
    SQLite index who then ran 'memdir migrate --to postgres' read "this agent's index is already on
    postgres (store.driver)", as if it had been copied or there were nothing to do, while the
    database held nothing.  The refusal says how to copy it, and that way works."""
    ws = make_workspace({"memory/a.md": "the quokka ate lunch", "MEMORY.md": "# prefs\ndark mode"})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    post = {**env, "MEMDIR_STORE_DRIVER": "postgres"}
    out = run_cli("migrate", "--to", "postgres", "-w", str(ws), env=post)
    assert out.returncode == 1
    assert "To copy its SQLite index to PostgreSQL, run MEMDIR_STORE_DRIVER=sqlite memdir migrate --to postgres" \
        in out.stderr, out.stderr
    run_cli("migrate", "--to", "postgres", "-w", str(ws), env={**post, "MEMDIR_STORE_DRIVER": "sqlite"}, check=True)
    report = json.loads(run_cli("index", "--json", "-w", str(ws), env=post, check=True).stdout)
    assert not report["full"] and report["indexed"] == 0


def test_an_agent_whose_workspace_moved_says_how_to_let_go_of_its_database_index(pg: Backend, make_workspace,
                                                                                 run_cli, tmp_path: Path):
    """An agent copied into the database from one path (a laptop's) and used from another (the
    server's clone, a workspace moved) was refused with "… no longer exists: if it was moved here,
    delete postgresql://…#schema/agent (memdir rebuilds it …); otherwise give this workspace its own
    agent id (--agent NAME) or index path (store.path)": no one can delete a URL, and an index path
    is no setting of a database index.  It names the statement that retires the index, which works."""
    ws = make_workspace({"memory/a.md": "the quokka ate lunch"}, name="laptop")
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "--agent", "bot", "-w", str(ws), env=env, check=True)
    run_cli("migrate", "--to", "postgres", "--agent", "bot", "-w", str(ws), env=env, check=True)
    moved = Path(shutil.copytree(ws, tmp_path / "server"))  # a clone elsewhere (a renamed folder keeps its index)
    shutil.rmtree(ws)
    post = {**env, "MEMDIR_STORE_DRIVER": "postgres"}
    refused = run_cli("index", "--agent", "bot", "-w", str(moved), env=post)
    assert refused.returncode == 1
    statement = f"UPDATE \"{pg.schema}\".indexes SET state = 'retired' WHERE agent = 'bot' AND state = 'live';"
    assert f"{ws} no longer exists: if it was moved here, retire it (psql: {statement}) and memdir rebuilds it from " \
           "the Markdown files, removing its old rows; otherwise give this workspace its own agent id (--agent NAME)" \
           in refused.stderr, refused.stderr
    assert "store.path" not in refused.stderr and "delete postgresql" not in refused.stderr
    pg_query(pg.url, statement)
    assert json.loads(run_cli("index", "--json", "--agent", "bot", "-w", str(moved), env=post,
                              check=True).stdout)["indexed"] == 1
    assert pg_query(pg.url, f'SELECT state FROM "{pg.schema}".indexes') == [("live",)]  # the old one dropped


def test_status_during_a_migrate_says_it_is_copying_and_how_far(pg: Backend, make_workspace, run_cli,
                                                                state_dir: Path):
    """While a long migrate ran, 'memdir status' said 'Writer: pid N is indexing' and nothing of
    how far it was.  It says the index is being copied, and the files and chunks copied so far."""
    ws = make_workspace({f"memory/n{i}.md": f"# note {i}\n\nthe quokka marker{i} ate lunch\n" for i in range(12)})
    env = {"MEMDIR_PROVIDER": "none", "MEMDIR_DATABASE_URL": pg.url, "MEMDIR_PG_SCHEMA": pg.schema}
    run_cli("index", "-w", str(ws), env=env, check=True)
    seen: list[str] = []

    def look(done: int, total: int, label: str) -> None:
        if done == 5 and getattr(label, "unit", "files") == "files":  # midway: what does status say?
            seen.append(run_cli("status", "-w", str(ws), env=env, check=True).stdout)

    cfg = _sqlite_cfg(pg, {"memorySearch": {"provider": "none"}})
    with Memory(ws, config=cfg, state_dir=state_dir) as lite:
        lite.migrate("postgres", progress=look)
    (text,) = seen
    # (the file is written at most twice a second: the first files' count, or a later one)
    assert re.search(rf"Writer: pid {os.getpid()} is copying the index to postgres \(([1-5])/12 files, \1/12 chunks\)",
                     text), text
    status = run_cli("status", "-w", str(ws), env=env, check=True).stdout
    assert "Writer:" not in status  # (and the progress file is gone)


def test_a_migrate_waiting_for_the_sqlite_lock_does_not_hold_the_databases(pg: Backend, make_workspace,
                                                                           tmp_path: Path):
    """'migrate --to sqlite' took the database's writer lock first, then waited for the SQLite
    index's (a watcher of the old index stopped with Ctrl-Z, another migrate going the other way):
    meanwhile no host could sync the agent, and two migrates the opposite ways each held the lock
    the other waited for until both gave up.  The SQLite lock is taken first."""
    import threading

    from tests.test_lock_hostile import _lock_holder

    from memdir.config import load_config
    from memdir.stores import open_store

    ws = make_workspace({"memory/a.md": "the quokka ate lunch"})
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    said: list[str] = []
    with Memory(ws, agent_id="order", config=cfg, state_dir=tmp_path, notice=said.append) as post:
        post.sync()
        holder = _lock_holder(post.index_path)  # the SQLite index's lock, held elsewhere
        done: list[dict] = []
        worker = threading.Thread(target=lambda: done.append(post.migrate("sqlite", lock_timeout=60)))
        try:
            worker.start()
            deadline = time.monotonic() + 30
            while not any("to finish writing" in s for s in said) and time.monotonic() < deadline:
                time.sleep(0.02)
            assert any(str(post.index_path) in s for s in said), said
            other = open_store(load_config(overrides=cfg, state_dir=tmp_path / "o", agent_id="order").settings)
            try:
                lock = other.writer_lock()
                assert lock.acquire(0), "the database's lock was held while migrate waited for the SQLite one"
                lock.release()
            finally:
                other.close()
        finally:
            holder.kill()
            holder.wait()
            worker.join(60)
        assert done and done[0]["files"] == 1
