"""Two memdir versions on one state folder: an upgrade under a running watcher or MCP server, a
downgrade after a bad upgrade, a team's machines on different versions.

Old code cannot be changed, so "a future memdir" is simulated by the format markers it would write
(a higher chunker or schema number in the index's meta); what is tested is how this memdir behaves
toward it: it says clearly that it is the older one and never undoes the newer one's work.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.errors import IndexFromNewerMemdir
from memdir.index_identity import CHUNKER_VERSION, INDEX_SCHEMA
from memdir.stores.sqlite import META_KEY

KEYWORDS = {"memorySearch": {"provider": "none"}}


def _meta(index: Path) -> dict:
    with sqlite3.connect(index) as conn:
        meta = json.loads(conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
    conn.close()
    return meta


def _write_meta(index: Path, **values: int) -> None:
    """Make the index's meta say what a newer (or older) memdir would have written."""
    meta = {**_meta(index), **values}
    with sqlite3.connect(index) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), META_KEY))
    conn.close()


def _config(ws: Path) -> str:
    path = ws.parent / "keywords.json"
    path.write_text(json.dumps(KEYWORDS), encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(("key", "ours"), [("chunker", CHUNKER_VERSION), ("schema", INDEX_SCHEMA)])
def test_an_index_a_newer_memdir_wrote_is_not_rebuilt_back(make_workspace, state_dir: Path, run_cli,
                                                           key: str, ours: int) -> None:
    """A watcher started before an upgrade rebuilt the upgraded CLI's index for its own chunker
    ("chunker changed (19 → 18)"), the CLI's next search rebuilt it back, and so on for as long as
    both ran; each rebuild said "once".  The older memdir now leaves a newer one's index as it is,
    says why and what to do, and a search still answers from it."""
    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    with Memory(ws, state_dir=state_dir, config=KEYWORDS) as mem:
        mem.sync()
        index = mem.index_path
    _write_meta(index, **{key: ours + 1})
    built = _meta(index)["builtAt"]

    with Memory(ws, state_dir=state_dir, config=KEYWORDS) as mem:
        with pytest.raises(IndexFromNewerMemdir, match=rf"written by a newer memdir \({key} {ours + 1}; "
                                                       rf"this memdir's is {ours}\)"):
            mem.sync()
        response = mem.search("quokka")
        assert response.results and response.stale
        assert any("memdir index --force" in w for w in response.warnings)
        quiet = mem.search("quokka", sync=False)
        assert quiet.results and not any("run `memdir index`, or search" in w for w in quiet.warnings)
        assert any("newer memdir" in w for w in quiet.warnings)
    assert _meta(index)[key] == ours + 1 and _meta(index)["builtAt"] == built  # untouched
    if key == "schema":
        return  # (the CLI's words are the same)

    with Memory(ws, state_dir=state_dir, config=KEYWORDS) as mem:
        st = mem.status()
        assert not st["rebuildReason"] and any("newer memdir" in i for i in st["issues"])
        assert not any("rebuilds it once" in i for i in st["issues"])
        # a note changed meanwhile is no sync pending for this memdir ("the next search … syncs them")
        (ws / "MEMORY.md").write_text("# Notes\n- the quokka lives on Rottnest\n- and the otter\n", encoding="utf-8")
        st = mem.status()
        assert st["dirtyCount"] == 1 and not st["syncPending"]
        assert st["newerVersion"] == f"{key} {ours + 1}; this memdir's is {ours}"
    assert _meta(index)[key] == ours + 1

    cli = ("-w", str(ws), "--config", _config(ws))
    proc = run_cli("index", *cli)
    assert proc.returncode == 1 and "newer memdir" in proc.stderr and "Traceback" not in proc.stderr
    text = run_cli("status", *cli, check=True).stdout
    assert "Dirty: yes (1 changed, 0 removed; not synced by this memdir: a newer one wrote the index" in text
    # going back to this version is asked for: --force rebuilds it for this one
    run_cli("index", "--force", *cli, check=True)
    assert _meta(index)[key] == ours


def test_a_search_does_not_wait_to_rebuild_a_newer_memdirs_index(make_workspace, state_dir: Path) -> None:
    """While another process held the writer lock (the newer memdir's watcher, indexing), a search
    of the older memdir waited for it to rebuild the newer index back, then said 'the index is to
    be rebuilt (chunker changed (19 → 18)) and another sync is writing it now'."""
    import fcntl
    import os

    config = {"memorySearch": {"provider": "none", "sync": {"searchBudgetMs": 500}}}
    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    with Memory(ws, state_dir=state_dir, config=config) as mem:
        mem.sync()
        index = mem.index_path
    _write_meta(index, chunker=CHUNKER_VERSION + 1)
    fd = os.open(f"{index}.lock", os.O_RDWR)  # another process's writer lock
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with Memory(ws, state_dir=state_dir, config=config) as mem:
            response = mem.search("quokka")
    finally:
        os.close(fd)
    assert response.results and response.stale
    assert any("written by a newer memdir" in w for w in response.warnings)
    assert not any("to be rebuilt" in w or "written by an older memdir" in w for w in response.warnings)


def test_status_reads_a_progress_file_of_another_shape(make_workspace, state_dir: Path, run_cli) -> None:
    """A writer's progress file whose counts are not numbers (another memdir version's, or damaged)
    made `memdir status` fail whole with "memdir: Cannot specify ',' with 's'." while it ran."""
    import subprocess
    import sys

    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    cli = ("-w", str(ws), "--config", _config(ws))
    run_cli("index", *cli, check=True)
    index = Path(json.loads(run_cli("status", "--json", *cli, check=True).stdout)["indexPath"])
    code = (f"import time; from pathlib import Path; from memdir.lock import FileWriterLock; "
            f"FileWriterLock(Path({str(index)!r})).acquire(); print('held', flush=True); time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        Path(f"{index}.progress").write_text(json.dumps(
            {"pid": holder.pid, "phase": "full", "done": "3", "total": "10 files", "chunksDone": [1],
             "chunksPlanned": {"n": 2}}), encoding="utf-8")
        status = run_cli("status", *cli)
    finally:
        holder.kill()
        holder.wait()
    assert status.returncode == 0, status.stderr
    assert f"Writer: pid {holder.pid} is indexing" in status.stdout


def test_a_long_term_memory_table_with_a_newer_memdirs_column_is_refused_clearly(tmp_path: Path) -> None:
    """A newer memdir that adds a column to the memories table (as this one added supersededBy to
    OpenClaw's): every memory_store of an older one failed with Lance's 'Append with different
    schema: fields did not match, missing=[pinned], location: <a Rust source path>', and a reembed
    rewrote the table with that column emptied in every row."""
    pytest.importorskip("lancedb")
    import lancedb

    from ltm_fakes import AxisProvider, axis
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory, LtmError

    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / "state").settings
    provider = AxisProvider({"tea": axis(0), "cat": axis(1), "coffee": axis(2)})
    with LongTermMemory(settings, provider=provider) as ltm:
        ltm.store("tea", category="preference")
        folder = ltm.db_path
    table = lancedb.connect(str(folder)).open_table("memories")
    table.add_columns({"pinned": "CAST(true AS BOOLEAN)"})  # what a newer memdir would do

    with LongTermMemory(settings, provider=provider) as ltm:
        with pytest.raises(LtmError, match=r"columns this memdir does not know \(pinned\): a newer memdir"):
            ltm.store("cat", category="fact")
        with pytest.raises(LtmError, match="a newer memdir"):
            ltm.reembed()
        assert [r.text for r in ltm.list()] == ["tea"]  # reading still works
    rows = lancedb.connect(str(folder)).open_table("memories").to_arrow().select(["text", "pinned"]).to_pylist()
    assert rows == [{"text": "tea", "pinned": True}]


@pytest.mark.parametrize("marker", ["pgTextForm", "chunker"])
def test_a_team_database_index_a_newer_memdir_wrote_is_not_rebuilt_back(pg, make_workspace, tmp_path: Path,
                                                                        marker: str) -> None:
    """Hosts of two memdir versions sharing one agent's index in PostgreSQL: the older rebuilt the
    newer one's for its own keyword text form ("keyword text form changed (4 → 3)") or chunker, and
    the newer one rebuilt it back at its next sync, for as long as both ran."""
    from helpers import pg_query
    from memdir.stores.pgkeyword import TEXT_FORM

    ours = {"pgTextForm": TEXT_FORM, "chunker": CHUNKER_VERSION}[marker]
    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    config = pg.config(KEYWORDS)
    with Memory(ws, agent_id="team", config=config, state_dir=tmp_path / "state") as mem:
        mem.sync()
    table = f'"{pg.schema}".indexes'
    pg_query(pg.url, f"UPDATE {table} SET meta = jsonb_set(meta, %s, to_jsonb(%s::int)) WHERE agent = 'team'",
             ([marker], ours + 1))

    with Memory(ws, agent_id="team", config=config, state_dir=tmp_path / "state") as mem:
        with pytest.raises(IndexFromNewerMemdir, match=rf"this memdir's is {ours}\)"):
            mem.sync()
        response = mem.search("quokka")
        assert response.results and any("newer memdir" in w for w in response.warnings)
        assert any("newer memdir" in i for i in mem.status()["issues"])
    (meta,) = pg_query(pg.url, f"SELECT meta FROM {table} WHERE agent = 'team'")[0]
    assert meta[marker] == ours + 1


def test_migrate_leaves_an_index_a_newer_memdir_wrote(pg, make_workspace, tmp_path: Path) -> None:
    """An older memdir copied a newer one's index to PostgreSQL as its own layout reads it, then said
    'the index copied was out of date here (…): the next memdir index on postgres rebuilds it',
    which that memdir then refuses to do; it leaves it to the newer memdir, copying nothing."""
    from helpers import deep_merge, pg_query

    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    lite = deep_merge(pg.config(KEYWORDS), {"memorySearch": {"store": {"driver": "sqlite"}}})
    with Memory(ws, agent_id="mig", config=lite, state_dir=tmp_path / "state") as mem:
        mem.sync()
        index = mem.index_path
    _write_meta(index, chunker=CHUNKER_VERSION + 1)
    with (Memory(ws, agent_id="mig", config=lite, state_dir=tmp_path / "state") as mem,
          pytest.raises(IndexFromNewerMemdir, match="run memdir migrate with the newer memdir")):
        mem.migrate("postgres")
    (table,) = pg_query(pg.url, "SELECT to_regclass(%s)::text", (f'"{pg.schema}".indexes',))[0]
    assert table is None or pg_query(pg.url, f"SELECT meta FROM {table} WHERE agent = 'mig' AND meta IS NOT NULL") == []


def test_a_team_database_index_an_older_memdir_rebuilt_says_so(pg, make_workspace, tmp_path: Path) -> None:
    """A host of the older memdir rebuilt the agent's index for its own keyword text form: status
    said nothing of another version (only 'to be rebuilt: keyword text form changed …'), and a
    search rebuilding it said 'the settings changed', while that host went on rebuilding it back."""
    from helpers import pg_query
    from memdir.stores.pgkeyword import TEXT_FORM

    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    config = pg.config(KEYWORDS)
    with Memory(ws, agent_id="team", config=config, state_dir=tmp_path / "state") as mem:
        mem.sync()
    pg_query(pg.url, f"UPDATE \"{pg.schema}\".indexes SET meta = jsonb_set(meta, '{{pgTextForm}}', "
             f"to_jsonb({TEXT_FORM - 1})) WHERE agent = 'team'")
    with Memory(ws, agent_id="team", config=config, state_dir=tmp_path / "state") as mem:
        said = [i for i in mem.status()["issues"]
                if f"older memdir version (keyword text form changed ({TEXT_FORM - 1} → {TEXT_FORM}))" in i]
        assert said and "another host sharing the database" in said[0]
        assert mem.search("quokka").results
        assert mem.status()["issues"] == []


def test_a_running_process_does_not_write_a_schema_a_newer_memdir_migrated_since(pg, make_workspace,
                                                                                 tmp_path: Path) -> None:
    """The schema version was checked when a process first opened the database only: a `memdir mcp`
    running for days went on writing with its layout after another host's newer memdir migrated
    the team's schema, which the README says an older memdir refuses."""
    from helpers import pg_query
    from memdir.errors import StoreError
    from memdir.stores.pgschema import LATEST

    ws = make_workspace({"MEMORY.md": "# Notes\n- the quokka lives on Rottnest\n"})
    with Memory(ws, agent_id="team", config=pg.config(KEYWORDS), state_dir=tmp_path / "state") as mem:
        mem.sync()
        pg_query(pg.url, f"INSERT INTO \"{pg.schema}\".schema_version(version, description) "
                         f"VALUES ({LATEST + 1}, 'a newer memdir')")
        (ws / "memory").mkdir()
        (ws / "memory" / "2026-11-29.md").write_text("- the wombat digs at night\n", encoding="utf-8")
        with pytest.raises(StoreError, match=rf"is at version {LATEST + 1}, newer than this memdir understands "
                                             rf"\({LATEST}\): a newer memdir migrated it since this process started"):
            mem.sync()
        assert mem.search("quokka").results  # searching goes on
    assert pg_query(pg.url, f"SELECT count(*) FROM \"{pg.schema}\".files WHERE path LIKE 'memory/%%'") == [(0,)]
