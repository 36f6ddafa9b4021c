"""``memdir agents`` and ``memdir agents forget``: real state folders, the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from helpers import cli_env, stop_process

KEYWORDS = '[memorySearch]\nprovider = "none"\n'


@contextmanager
def writer_lock_held(path: Path, state_dir: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding memdir's writer lock of ``path`` (an index, a long-term memory)
    until the block ends."""
    code = ("import sys, time\nfrom pathlib import Path\nfrom memdir.lock import FileWriterLock\n"
            "lock = FileWriterLock(Path(sys.argv[1]))\nassert lock.acquire(5)\nprint('held', flush=True)\n"
            "time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(path)], stdout=subprocess.PIPE, text=True,
                              env=cli_env(state_dir))
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        yield holder
    finally:
        stop_process(holder)


def _setup(state_dir: Path, make_workspace, run_cli) -> tuple[Path, Path]:
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    ops = make_workspace({"MEMORY.md": "The kiwi rollout is on Tuesday.\n"}, name="ops-ws")
    gone = make_workspace({"MEMORY.md": "The mango audit is on Friday.\n", "memory/2026-01-02.md": "- mango\n"},
                          name="gone-ws")
    run_cli("-w", str(ops), "--agent", "ops", "index", check=True)
    run_cli("-w", str(gone), "index", check=True)
    return ops, gone


def _agents(run_cli) -> dict[str, dict]:
    proc = run_cli("agents", "--json", check=True)
    return {a["id"]: a for a in json.loads(proc.stdout)["agents"]}


def test_agents_lists_each_agent_and_forget_deletes_only_its_derived_state(make_workspace, state_dir: Path,
                                                                          run_cli, tmp_path: Path):
    ops, gone = _setup(state_dir, make_workspace, run_cli)
    sessions = state_dir / "agents" / "ops" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "s1.jsonl").write_text('{"type": "message"}\n', encoding="utf-8")
    ltm = state_dir / "ltm" / "ops"
    (ltm / "memories.lance").mkdir(parents=True)
    (ltm / "memories.lance" / "data").write_bytes(b"x" * 100)
    import shutil

    shutil.rmtree(gone)
    agents = _agents(run_cli)
    assert set(agents) == {"ops", next(k for k in agents if k.startswith("gone-ws-"))}
    a = agents["ops"]
    assert a["kind"] == "agent" and a["workspace"] == str(ops) and not a["orphaned"]
    assert a["index"]["files"] == 1 and a["index"]["chunks"] == 1 and a["index"]["bytes"] > 0
    assert a["index"]["lastSync"] and a["transcripts"]["files"] == 1 and a["longTermMemory"]["exists"]
    key = next(k for k in agents if k != "ops")
    assert agents[key]["kind"] == "workspace" and agents[key]["orphaned"] and agents[key]["index"]["files"] == 2
    text = run_cli("agents", check=True).stdout
    assert f"{key} (workspace; orphaned: its workspace {gone} no longer exists)" in text
    assert "index: 1 file, 1 chunk" in text and "transcripts: 1 file" in text
    assert run_cli("agents", "list", check=True).stdout == text

    # a dry run deletes nothing; without --yes and no terminal to ask on, nothing either (bad usage)
    before = sorted(p.name for p in (state_dir / "memory").iterdir())
    dry = run_cli("agents", "forget", "ops", "--dry-run", check=True)
    assert str(state_dir / "memory" / "ops.sqlite") in dry.stdout and "kept" in dry.stdout
    refused = run_cli("agents", "forget", "ops")
    assert refused.returncode == 2 and "--yes" in refused.stderr
    assert sorted(p.name for p in (state_dir / "memory").iterdir()) == before

    done = run_cli("agents", "forget", "ops", "--yes", "--json", check=True)
    report = json.loads(done.stdout)
    assert str(state_dir / "memory" / "ops.sqlite") in report["deleted"]
    assert not list((state_dir / "memory").glob("ops.sqlite*"))
    assert (sessions / "s1.jsonl").is_file() and (ltm / "memories.lance" / "data").is_file()
    assert (ops / "MEMORY.md").read_text(encoding="utf-8") == "The kiwi rollout is on Tuesday.\n"
    assert any("transcripts" in k for k in report["kept"]) and any("--ltm" in k for k in report["kept"])
    # the long-term memory goes only when asked for; the transcripts never
    run_cli("agents", "forget", "ops", "--yes", "--ltm", check=True)
    assert not ltm.exists() and (sessions / "s1.jsonl").is_file()
    again = run_cli("agents", "forget", "ops", "--yes")
    assert again.returncode == 1 and "no derived state to delete" in again.stderr
    # the agent's index is built again from its notes by its next search
    assert "kiwi" in run_cli("-w", str(ops), "--agent", "ops", "search", "kiwi", check=True).stdout


def test_forget_refuses_ids_that_are_no_agent(make_workspace, state_dir: Path, run_cli):
    _setup(state_dir, make_workspace, run_cli)
    for bad in ("../ops", "ops/x", ".."):
        proc = run_cli("agents", "forget", bad, "--yes")
        assert proc.returncode == 2 and "not a plain name" in proc.stderr, proc.stderr
    proc = run_cli("agents", "forget", "Ops", "--yes")
    assert proc.returncode == 1 and "did you mean 'ops'?" in proc.stderr
    assert (state_dir / "memory" / "ops.sqlite").is_file()


def test_forget_is_refused_while_a_watcher_of_the_agent_runs(make_workspace, state_dir: Path, run_cli):
    """An idle ``memdir watch`` holds the index open without the writer lock: deleted under it, the
    index was built again at its next sync, the forget undone without a word."""
    ops, _ = _setup(state_dir, make_workspace, run_cli)
    watcher = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(ops), "--agent", "ops", "watch", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env(state_dir))
    try:
        assert watcher.stdout is not None
        watcher.stdout.readline()  # its first event: the start sync is done
        proc = run_cli("agents", "forget", "ops", "--yes")
        assert proc.returncode == 1 and f"in use by pid {watcher.pid}" in proc.stderr, proc.stderr
        assert (state_dir / "memory" / "ops.sqlite").is_file()
    finally:
        stop_process(watcher)
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not (state_dir / "memory" / "ops.sqlite").exists()


def test_forget_unlinks_links_and_never_deletes_what_they_point_at(make_workspace, state_dir: Path, run_cli,
                                                                  tmp_path: Path):
    _setup(state_dir, make_workspace, run_cli)
    outside = tmp_path / "outside"
    (outside / "keep").mkdir(parents=True)
    (outside / "keep" / "precious.md").write_text("mine\n", encoding="utf-8")
    (outside / "precious.vec8").write_text("mine\n", encoding="utf-8")
    (state_dir / "ltm" / "ops2" / "memories.lance").mkdir(parents=True)
    os.symlink(outside / "keep", state_dir / "ltm" / "ops")
    os.symlink(outside / "keep", state_dir / "ltm" / "ops2" / "memories.lance" / "data")  # a link inside
    run_cli("agents", "forget", "ops2", "--yes", "--ltm", check=True)
    assert not os.path.lexists(state_dir / "ltm" / "ops2")
    os.symlink(outside / "precious.vec8", state_dir / "memory" / "ops.sqlite.vec8")
    run_cli("agents", "forget", "ops", "--yes", "--ltm", check=True)
    assert not os.path.lexists(state_dir / "ltm" / "ops")
    assert not os.path.lexists(state_dir / "memory" / "ops.sqlite.vec8")
    assert (outside / "keep" / "precious.md").read_text(encoding="utf-8") == "mine\n"
    assert (outside / "precious.vec8").read_text(encoding="utf-8") == "mine\n"


def test_a_shared_store_path_is_kept_and_named_no_agent(make_workspace, state_dir: Path, run_cli):
    """One index for every agent, ``store.path = "~/.memdir/memory/team.sqlite"``, was listed as agent
    'team' (whose forget then had nothing to delete), and the agents using it not at all."""
    state_dir.mkdir(parents=True)
    shared = state_dir / "memory" / "team.sqlite"
    (state_dir / "memdir.toml").write_text(KEYWORDS + f'[memorySearch.store]\npath = "{shared}"\n',
                                           encoding="utf-8")
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    run_cli("-w", str(ws), "--agent", "a", "index", check=True)
    (state_dir / "ltm" / "a").mkdir(parents=True)
    listing = json.loads(run_cli("agents", "--json", check=True).stdout)
    agents = {a["id"]: a for a in listing["agents"]}
    assert list(agents) == ["a"] and agents["a"]["index"]["shared"]
    assert listing["sharedIndex"]["path"] == str(shared) and listing["sharedIndex"]["files"] == 1
    assert "Shared index (memorySearch.store.path, every agent's): 1 file" in run_cli("agents", check=True).stdout
    proc = run_cli("agents", "forget", "a", "--yes")
    assert proc.returncode == 1 and "shared by every agent" in proc.stderr
    assert shared.is_file()


def test_under_postgres_the_sqlite_index_left_behind_is_listed_as_unused_and_forgotten(make_workspace, state_dir: Path,
                                                                                      run_cli):
    """After memdir migrate --to postgres the agent's SQLite index stays in the state folder, unused:
    memdir agents showed it as the agent's index, and forget refused to delete it ('its index is in
    PostgreSQL'), so it stayed for good.  No connection to the database is tried."""
    _setup(state_dir, make_workspace, run_cli)
    (state_dir / "memdir.toml").write_text(
        KEYWORDS + '[memorySearch.store]\ndriver = "postgres"\ndsn = "postgresql://nobody@127.0.0.1:1/none"\n',
        encoding="utf-8")
    listing = run_cli("agents", check=True)
    assert "SQLite, not used: store.driver is postgres" in listing.stdout
    assert "store.driver is postgres" in listing.stderr
    proc = run_cli("agents", "forget", "ops", "--yes", check=True)
    assert "its index in PostgreSQL" in proc.stdout
    assert not list((state_dir / "memory").glob("ops.sqlite*"))


def test_a_folder_at_an_index_file_name_is_never_deleted(make_workspace, state_dir: Path, run_cli):
    """A folder named as a file memdir keeps beside an index (``ops.sqlite.progress/``) or as an
    index (``dd.sqlite/``) was deleted with all it held by ``agents forget``; memdir writes files
    there, so such a folder is someone's: it is left, and said to be."""
    _setup(state_dir, make_workspace, run_cli)
    mine = state_dir / "memory" / "ops.sqlite.progress"
    mine.mkdir()
    (mine / "notes.md").write_text("mine\n", encoding="utf-8")
    other = state_dir / "memory" / "dd.sqlite"
    other.mkdir()
    (other / "notes.md").write_text("mine\n", encoding="utf-8")
    assert "dd" not in _agents(run_cli)
    assert run_cli("agents", "forget", "dd", "--yes").returncode == 1
    proc = run_cli("agents", "forget", "ops", "--yes", check=True)
    assert "a folder, not a file memdir writes" in proc.stdout
    assert (mine / "notes.md").is_file() and (other / "notes.md").is_file()
    assert not (state_dir / "memory" / "ops.sqlite").exists()


def test_forget_is_refused_while_a_watcher_holds_an_index_kept_behind_a_link(make_workspace, state_dir: Path,
                                                                           run_cli, tmp_path: Path):
    """``memory/ops.sqlite`` a link to an index on another disk: the watcher holds the link's target
    open, which is what /proc names, and the forget went ahead under it."""
    ops, _ = _setup(state_dir, make_workspace, run_cli)
    disk = tmp_path / "disk"
    disk.mkdir()
    index = state_dir / "memory" / "ops.sqlite"
    os.replace(index, disk / "ops.sqlite")
    os.symlink(disk / "ops.sqlite", index)
    watcher = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(ops), "--agent", "ops", "watch", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env(state_dir))
    try:
        assert watcher.stdout is not None
        watcher.stdout.readline()
        proc = run_cli("agents", "forget", "ops", "--yes")
        assert proc.returncode == 1 and f"in use by pid {watcher.pid}" in proc.stderr, proc.stderr
        assert index.is_symlink()
    finally:
        stop_process(watcher)
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not os.path.lexists(index) and (disk / "ops.sqlite").is_file()  # (the link alone goes)


def test_listing_the_agents_leaves_the_state_folder_as_it_was(make_workspace, state_dir: Path, run_cli):
    """A read-only open of an index in WAL mode leaves an empty ``-wal`` and a 32 KiB ``-shm``
    beside it: ``memdir agents`` added two files per agent, and the index's last write read as now."""
    _setup(state_dir, make_workspace, run_cli)
    before = {p.name: p.stat().st_mtime_ns for p in (state_dir / "memory").iterdir()}
    first = _agents(run_cli)
    assert {p.name: p.stat().st_mtime_ns for p in (state_dir / "memory").iterdir()} == before
    assert _agents(run_cli) == first and first["ops"]["index"]["files"] == 1
    assert first["ops"]["workspace"] and not first["ops"]["index"].get("error")


def test_what_a_killed_forget_leaves_is_listed_and_deleted_by_the_next(make_workspace, state_dir: Path,
                                                                       run_cli):
    """A forget killed (kill -9) after the index went left its vector file (as large as the index,
    38 MB at 100k chunks) and lock beside no index, and one killed while deleting the long-term
    memory it had moved aside left that folder: no agent was listed for them, and the next
    forget said 'no agent 'ops' has state', so they stayed for good."""
    import signal

    _setup(state_dir, make_workspace, run_cli)
    ltm = state_dir / "ltm" / "ops"
    for i in range(400):
        (ltm / f"d{i % 20}").mkdir(parents=True, exist_ok=True)
        (ltm / f"d{i % 20}" / f"f{i}").write_bytes(b"x")
    # the forget is killed once it has moved the long-term memory aside
    forget = subprocess.Popen([sys.executable, "-m", "memdir", "agents", "forget", "ops", "--yes", "--ltm"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=cli_env(state_dir))
    try:
        for _ in range(6000):
            if forget.poll() is not None or not ltm.exists():
                break
            time.sleep(0.005)
        forget.send_signal(signal.SIGKILL)
    finally:
        forget.wait(timeout=60)
    assert not ltm.exists()  # (moved aside first: never a half long-term memory at its path)
    # what the kill leaves when it lands in the deletion (made here: the kill may come after it)
    aside = state_dir / "ltm" / ".forgetting-ops-0123456789ab"
    (aside / "d1").mkdir(parents=True, exist_ok=True)
    (aside / "d1" / "f1").write_bytes(b"x")
    # and what a kill after the index went leaves beside it (the vector file, its lock)
    (state_dir / "memory" / "ops.sqlite.vec8").write_bytes(b"MEMDIR-VEC8-2\n" + b"\0" * 1000)
    (state_dir / "memory" / "ops.sqlite.lock").write_bytes(b"")
    for name in [p.name for p in (state_dir / "memory").glob("ops.sqlite*")]:
        if name not in ("ops.sqlite.vec8", "ops.sqlite.lock"):
            os.unlink(state_dir / "memory" / name)

    agents = _agents(run_cli)
    assert "ops" in agents and not agents["ops"]["index"]["exists"]
    assert str(aside) in agents["ops"]["interruptedForget"]
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not list((state_dir / "memory").glob("ops.sqlite*"))
    assert not list((state_dir / "ltm").iterdir())
    assert "ops" not in _agents(run_cli)


def test_agents_whose_indexes_store_path_keeps_elsewhere_are_listed_and_forgotten(make_workspace, state_dir: Path,
                                                                                  run_cli, tmp_path: Path):
    """``memorySearch.store.path = "…/indexes/{agentId}.sqlite"`` keeps each agent's index outside the
    state folder: memdir agents said 'No agent has state', and forget 'no agent 'zed''."""
    state_dir.mkdir(parents=True)
    indexes = tmp_path / "indexes"
    (state_dir / "memdir.toml").write_text(KEYWORDS + f'[memorySearch.store]\npath = "{indexes}/idx-{{agentId}}.db"\n',
                                           encoding="utf-8")
    ws = make_workspace({"MEMORY.md": "zebra\n"})
    run_cli("-w", str(ws), "--agent", "zed", "index", check=True)
    (indexes / "notes.db").write_text("not an index\n", encoding="utf-8")
    agents = _agents(run_cli)
    assert list(agents) == ["zed"] and agents["zed"]["index"]["path"] == str(indexes / "idx-zed.db")
    assert agents["zed"]["index"]["files"] == 1 and agents["zed"]["workspace"] == str(ws)
    run_cli("agents", "forget", "zed", "--yes", check=True)
    assert sorted(p.name for p in indexes.iterdir()) == ["notes.db"]


def test_forgetting_an_index_without_its_lock_file_leaves_nothing(make_workspace, state_dir: Path, run_cli):
    """An index with no lock file beside it (copied back from a backup alone): the forget's own lock
    made one, left behind, so the agent was still listed ('index: none') after it was forgotten."""
    _setup(state_dir, make_workspace, run_cli)
    (state_dir / "memory" / "ops.sqlite.lock").unlink()
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not list((state_dir / "memory").glob("ops.sqlite*"))
    assert "ops" not in _agents(run_cli)


def test_a_long_term_memory_a_killed_forget_moved_aside_is_no_agent_id(state_dir: Path, run_cli, tmp_path: Path):
    """``ltm/.forgetting-ops-…`` (a forget killed while deleting it) was offered as an agent id: by
    ``--agent <Tab>`` and in the refusal of a search for an unknown agent ('the agents in … are
    .forgetting-ops-0123456789ab')."""
    (state_dir / "ltm" / ".forgetting-ops-0123456789ab").mkdir(parents=True)
    (state_dir / "ltm" / "ops").mkdir()
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    empty = tmp_path / "empty"
    empty.mkdir()
    proc = run_cli("--agent", "opx", "search", "kiwi", cwd=empty)
    assert proc.returncode == 1 and "the agents in" in proc.stderr
    assert ".forgetting" not in proc.stderr and "are ops" in proc.stderr


def test_forget_ltm_is_refused_while_a_long_term_memory_writer_holds_it(make_workspace, state_dir: Path, run_cli):
    """A process holding the long-term memory's writer lock (an ``ltm reembed``, an MCP server's
    store) made the refusal say the index would be built again, and its command line of several
    lines (python -c '…') broke the one-line error over them."""
    _setup(state_dir, make_workspace, run_cli)
    ltm = state_dir / "ltm" / "ops"
    ltm.mkdir(parents=True)
    with writer_lock_held(ltm / "ltm", state_dir) as holder:
        proc = run_cli("agents", "forget", "ops", "--yes", "--ltm")
        assert proc.returncode == 1 and f"in use by pid {holder.pid}" in proc.stderr
        assert "long-term memory open" in proc.stderr and "build the index" not in proc.stderr
        assert proc.stderr.count("\n") == 1
        assert (state_dir / "memory" / "ops.sqlite").is_file() and ltm.is_dir()


def test_forget_given_a_workspace_path_names_its_key(make_workspace, state_dir: Path, run_cli):
    """``memdir agents forget ~/old-notes``, the natural thing to type for a deleted workspace, was
    told only that its id is 'not a plain name: use letters, digits, …'."""
    import shutil

    _, gone = _setup(state_dir, make_workspace, run_cli)
    key = next(k for k in _agents(run_cli) if k.startswith("gone-ws-"))
    shutil.rmtree(gone)
    proc = run_cli("agents", "forget", str(gone), "--yes")
    assert proc.returncode == 2 and f"its state is under '{key}' (memdir agents forget {key})" in proc.stderr
    assert (state_dir / "memory" / f"{key}.sqlite").is_file()
    ops = run_cli("agents", "forget", str(make_workspace(name="ops-ws")), "--yes")
    assert ops.returncode == 2 and "its state is under 'ops'" in ops.stderr


def test_a_forget_that_would_be_refused_says_so_before_asking_and_in_a_dry_run(make_workspace, state_dir: Path,
                                                                              run_cli):
    """Under a running watcher of the agent, ``--dry-run`` listed what would go as if a forget could
    run, and at a terminal the question was asked and answered before the refusal came."""
    import pty

    ops, _ = _setup(state_dir, make_workspace, run_cli)
    watcher = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(ops), "--agent", "ops", "watch", "--json"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=cli_env(state_dir))
    try:
        assert watcher.stdout is not None
        watcher.stdout.readline()
        dry = run_cli("agents", "forget", "ops", "--dry-run", "--json", check=True)
        assert f"in use by pid {watcher.pid}" in json.loads(dry.stdout)["refusedNow"]
        main, tty = pty.openpty()
        try:
            os.write(main, b"y\n")  # (waits in the terminal's input for whoever reads it)
            proc = subprocess.run([sys.executable, "-m", "memdir", "agents", "forget", "ops"], stdin=tty,
                                  capture_output=True, text=True, env=cli_env(state_dir), timeout=120)
        finally:
            os.close(tty)
            os.close(main)
        assert proc.returncode == 1 and "in use by pid" in proc.stderr and "Delete them?" not in proc.stderr
        assert (state_dir / "memory" / "ops.sqlite").is_file()
    finally:
        stop_process(watcher)


def test_forget_at_a_terminal_asks_first(make_workspace, state_dir: Path, run_cli):
    import pty

    _setup(state_dir, make_workspace, run_cli)
    for answer, deleted in ((b"n\n", False), (b"yes\n", True)):
        main, tty = pty.openpty()
        try:
            os.write(main, answer)
            proc = subprocess.run([sys.executable, "-m", "memdir", "agents", "forget", "ops"], stdin=tty,
                                  capture_output=True, text=True, env=cli_env(state_dir), timeout=120)
        finally:
            os.close(tty)
            os.close(main)
        assert "Delete them? [y/N]" in proc.stderr
        assert proc.returncode == (0 if deleted else 1), proc.stderr
        assert (state_dir / "memory" / "ops.sqlite").exists() is not deleted


def test_an_index_with_damaged_metadata_is_listed_as_damaged(make_workspace, state_dir: Path, run_cli):
    """Its metadata not JSON (a damaged index, a hand edit): the listing said 'unreadable: Expecting
    property name enclosed in double quotes: line 1 column 2 (char 1)' and nothing of what it meant."""
    from memdir import db

    _setup(state_dir, make_workspace, run_cli)
    conn = db.connect(state_dir / "memory" / "ops.sqlite")
    conn.execute("UPDATE meta SET value = '{not json' WHERE key = 'memory_index_meta_v1'")
    conn.close()
    (state_dir / "memory" / "ops.sqlite.progress").write_text('{"total": "10 files", ', encoding="utf-8")
    text = run_cli("agents", check=True).stdout
    assert "memory_index_meta_v1) is not valid JSON: the next sync of the agent moves it aside" in text
    assert "Expecting" not in text
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not list((state_dir / "memory").glob("ops.sqlite*"))


def test_forgetting_main_does_not_cut_a_workspace_off_its_old_transcripts(make_workspace, state_dir: Path, run_cli):
    """Agent main's index also tells the workspace that owns it to keep using ``agents/main`` and
    ``ltm/main`` (its state from before memdir kept state per workspace): forgetting main made that
    workspace start anew under its own key, its transcripts and memories no longer used."""
    state_dir.mkdir(parents=True)
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    (state_dir / "agents" / "main" / "sessions").mkdir(parents=True)
    (state_dir / "agents" / "main" / "sessions" / "s.jsonl").write_text("{}\n", encoding="utf-8")
    run_cli("-w", str(ws), "--agent", "main", "index", check=True)
    before = json.loads(run_cli("-w", str(ws), "status", "--json", check=True).stdout)
    assert before["stateKeyKind"] == "legacy"
    proc = run_cli("agents", "forget", "main", "--yes")
    assert proc.returncode == 1 and f"mv {state_dir / 'agents' / 'main'}" in proc.stderr, proc.stderr
    assert (state_dir / "memory" / "main.sqlite").is_file()
    assert json.loads(run_cli("-w", str(ws), "status", "--json", check=True).stdout)["stateKeyKind"] == "legacy"


def test_long_term_memories_kept_elsewhere_by_db_path_are_listed(state_dir: Path, run_cli, tmp_path: Path):
    """``longTermMemory.dbPath = "…/memories/{agentId}"``: an agent with long-term memories there (and
    no index yet) was not listed, and its forget said 'no agent 'lt' has state'."""
    state_dir.mkdir(parents=True)
    memories = tmp_path / "memories"
    (state_dir / "memdir.toml").write_text(KEYWORDS + f'[longTermMemory]\ndbPath = "{memories}/mem-{{agentId}}"\n',
                                           encoding="utf-8")
    (memories / "mem-lt" / "memories.lance").mkdir(parents=True)
    (memories / "unrelated").mkdir()
    agents = _agents(run_cli)
    assert list(agents) == ["lt"] and agents["lt"]["longTermMemory"]["path"] == str(memories / "mem-lt")
    run_cli("agents", "forget", "lt", "--yes", "--ltm", check=True)
    assert sorted(p.name for p in memories.iterdir()) == ["unrelated"]


def test_forget_takes_the_agent_from_the_agent_option(make_workspace, state_dir: Path, run_cli):
    """``memdir --agent ops agents forget --yes``, as every other command takes its agent, failed
    'the following arguments are required: id'."""
    _setup(state_dir, make_workspace, run_cli)
    both = run_cli("--agent", "ops", "agents", "forget", "other", "--yes")
    assert both.returncode == 2 and "two agents given" in both.stderr
    assert run_cli("agents", "forget", "--yes").returncode == 2
    run_cli("--agent", "ops", "agents", "forget", "--yes", check=True)
    assert not (state_dir / "memory" / "ops.sqlite").exists()


def test_a_fifo_at_an_index_name_does_not_hang_the_listing(state_dir: Path, run_cli):
    """``memory/ff.sqlite`` a FIFO: opening it to read waited for a writer, and memdir agents hung
    for ever (SIGTERM did not end it).  The timeout is only a guard against the hang."""
    (state_dir / "memory").mkdir(parents=True)
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    os.mkfifo(state_dir / "memory" / "ff.sqlite")
    agents = json.loads(run_cli("agents", "--json", check=True, timeout=60).stdout)["agents"]
    assert agents[0]["index"]["error"] == "a FIFO, not an index file"
    run_cli("agents", "forget", "ff", "--yes", check=True, timeout=60)
    assert not os.path.lexists(state_dir / "memory" / "ff.sqlite")


def test_a_first_build_in_progress_is_named_by_a_dry_run(state_dir: Path, run_cli):
    """A first build holds the writer lock beside no index yet (its temporary database and progress
    file): the dry run listed them as if they could go, and only the forget itself refused."""
    (state_dir / "memory").mkdir(parents=True)
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    index = state_dir / "memory" / "ops.sqlite"
    (state_dir / "memory" / "ops.sqlite.progress").write_text('{"done": 1, "total": 9}', encoding="utf-8")
    with writer_lock_held(index, state_dir) as holder:
        dry = json.loads(run_cli("agents", "forget", "ops", "--dry-run", "--json", check=True).stdout)
        assert "being written by" in dry["refusedNow"] and str(holder.pid) in dry["refusedNow"]
        proc = run_cli("agents", "forget", "ops", "--yes")
        assert proc.returncode == 1 and "being written by" in proc.stderr
        assert (state_dir / "memory" / "ops.sqlite.progress").is_file()


def test_a_db_path_naming_an_unset_variable_does_not_fail_the_listing(make_workspace, state_dir: Path, run_cli):
    """``longTermMemory.dbPath = "${LTM_HOME}/{agentId}"``, the variable set only where the MCP server
    runs: index and status worked, and memdir agents failed whole ('configuration error: …')."""
    _setup(state_dir, make_workspace, run_cli)
    (state_dir / "memdir.toml").write_text(KEYWORDS + '[longTermMemory]\ndbPath = "${LTM_HOME}/{agentId}"\n',
                                           encoding="utf-8")
    text = run_cli("agents", check=True).stdout
    assert "long-term memory: unknown (longTermMemory.dbPath: environment variable LTM_HOME is not set" in text
    refused = run_cli("agents", "forget", "ops", "--yes", "--ltm")
    assert refused.returncode == 1 and "LTM_HOME" in refused.stderr
    assert (state_dir / "memory" / "ops.sqlite").is_file()
    run_cli("agents", "forget", "ops", "--yes", check=True)
    assert not (state_dir / "memory" / "ops.sqlite").exists()
