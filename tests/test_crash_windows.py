"""Writers killed (SIGKILL) in the windows a randomized crash sweep found between the kill
points other tests choose: each test kills a real ``memdir`` process at one exact call, then
checks that the next run heals and that nothing piles up."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import blocked_rebuild, cli_env
from memdir.testing.provider_server import ProviderServer

#: Runs the CLI with ``os.replace`` killing the process (SIGKILL) the first time its source
#: path contains the marker in ``argv[1]``, after the call when ``argv[2]`` is "after".
KILL_AT_REPLACE = textwrap.dedent("""
    import os, signal, sys
    marker, when = sys.argv.pop(1), sys.argv.pop(1)
    real = os.replace
    def replace(src, dst, **kw):
        if marker in str(src) and when == "before":
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, **kw)
        if marker in str(src) and when == "after":
            os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    from memdir.cli import main
    raise SystemExit(main(sys.argv[1:]))
""")


def killed_cli(state_dir: Path, marker: str, when: str, *args: str) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run([sys.executable, "-c", KILL_AT_REPLACE, marker, when, *args], capture_output=True,
                          text=True, env=cli_env(state_dir), timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    return proc


def keyword_workspace(tmp_path: Path, make_workspace) -> tuple[Path, tuple[str, ...]]:
    ws = make_workspace({"memory/notes.md": "# Kettle\n\nThe kettle descaler is under the sink.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ws, ("--workspace", str(ws), "--config", str(cfg))


def test_progress_temp_files_of_killed_writers_do_not_pile_up(tmp_path: Path, make_workspace, run_cli,
                                                                 state_dir: Path) -> None:
    """Each writer killed while it wrote ``<index>.progress`` used to leave its own
    ``<index>.progress.<pid>.tmp`` beside the index for ever (named by its pid, never reused)."""
    _, base = keyword_workspace(tmp_path, make_workspace)
    folder = state_dir / "memory"
    for _ in range(2):
        killed_cli(state_dir, ".progress.", "before", "index", "--force", *base)
        assert len(list(folder.glob("*.progress.*.tmp"))) == 1  # the kill's, the one before it removed
    run_cli("index", *base, check=True)
    assert sorted(p.name for p in folder.iterdir() if ".progress" in p.name) == []
    hits = json.loads(run_cli("search", "descaler", "--json", *base, check=True).stdout)["results"]
    assert [h["path"] for h in hits] == ["memory/notes.md"]


def test_a_mirror_write_killed_leaves_no_temp_file_in_the_workspace(tmp_path: Path, make_workspace, run_cli,
                                                                    state_dir: Path) -> None:
    """``ltm store`` killed between writing the long-term memory mirror's temp file and renaming
    it used to leave a hidden ``.long-term.md.<random>.tmp`` in the user's ``memory/`` folder for
    ever (one more per kill); the next write removes it, and the memory stored before the kill stays."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    with ProviderServer(api_key="test-key") as server:
        cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "remote": {
            "baseUrl": f"{server.url}/v1", "apiKey": "test-key", "maxRetries": 0}},
            "longTermMemory": {"mirror": {"enabled": True}}}))
        base = ("--workspace", str(ws), "--config", str(cfg))
        killed_cli(state_dir, ".long-term.md.", "before", "ltm", "store", "The boiler is serviced in May", *base)
        assert [p.name for p in (ws / "memory").glob(".long-term.md.*.tmp")], "the kill should leave a temp"
        run_cli("ltm", "store", "The bins go out on Tuesday", *base, check=True)
        listed = json.loads(run_cli("ltm", "list", "--json", *base, check=True).stdout)
    assert sorted(m["text"] for m in listed) == ["The bins go out on Tuesday", "The boiler is serviced in May"]
    assert sorted(p.name for p in (ws / "memory").iterdir()) == ["long-term.md"]
    assert "The boiler is serviced in May" in (ws / "memory" / "long-term.md").read_text()


SESSION_WRITE_KILLED = textwrap.dedent("""
    import os, signal, sys
    from memdir.sessions.store import SessionStore
    real = os.replace
    def replace(src, dst, **kw):
        if "sessions.json.tmp-" in str(src) and os.path.exists(dst):  # the second write
            os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst, **kw)
    os.replace = replace
    store = SessionStore(sys.argv[1])
    store.open_session("agent:main:main")
    store.update("agent:main:main", total_tokens=7)
""")


def test_a_session_store_write_killed_leaves_no_temp_file_behind(tmp_path: Path, state_dir: Path) -> None:
    """The same for ``sessions.json``: each writer killed mid-replace left a ``sessions.json.tmp-*``."""
    from memdir.sessions.store import SessionStore

    folder = tmp_path / "sessions"
    proc = subprocess.run([sys.executable, "-c", SESSION_WRITE_KILLED, str(folder)], capture_output=True, text=True,
                          env=cli_env(state_dir), timeout=60)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert list(folder.glob("sessions.json.tmp-*")), "the kill should leave a temp"
    store = SessionStore(folder)
    assert store.get("agent:main:main") is not None  # the first write stayed whole
    store.update("agent:main:main", total_tokens=9)
    assert not list(folder.glob("sessions.json.tmp-*"))
    assert SessionStore(folder).get("agent:main:main").total_tokens == 9


def test_a_memory_stored_while_reembed_embeds_is_kept(tmp_path: Path) -> None:
    """``ltm reembed`` read every memory, embedded them (minutes with a local model) and then
    overwrote the table with what it had read: a memory another process stored meanwhile (an MCP
    server, ``ltm store``) was lost, and one forgotten meanwhile came back."""
    pytest.importorskip("lancedb")
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory

    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main").settings
    texts = ["The user's cat is named Miso", "The user lives in Lisbon", "The user prefers tea over coffee"]
    with LongTermMemory(settings, provider=AxisProvider(model="axis-1")) as first:
        ids = [first.store(t, category="fact").record.id for t in texts]
    other = LongTermMemory(settings, provider=AxisProvider(model="axis-1"))
    ltm = LongTermMemory(settings, provider=AxisProvider(model="axis-1"))
    embed = ltm.embedder.documents
    calls: list[list[str]] = []

    def documents(batch: list[str]) -> list:
        if not calls:  # while the reembed embeds, another writer stores one memory and forgets one
            other.store("The user plays the cello", category="fact")
            other.forget(ids[0])
        calls.append(list(batch))
        return embed(batch)

    ltm.embedder.documents = documents
    try:
        assert ltm.reembed() == 3
        assert sorted(r.text for r in ltm.list()) == sorted([*texts[1:], "The user plays the cello"])
        assert calls[1:] == [["The user plays the cello"]]  # only the new text embedded under the lock
        assert ltm.search("The user plays the cello")[0].text == "The user plays the cello"  # its new vector
    finally:
        ltm.close()
        other.close()


SAVED_GRAPH_BUILD_KILLED = textwrap.dedent("""
    import os, signal, sys
    from pathlib import Path
    from memdir.embeddings import saved_graph
    staging = saved_graph.start_build("ab" * 32, "1.0", Path(sys.argv[1]))
    (staging / saved_graph.DATA_NAME).write_bytes(b"w" * 100_000)  # (90 MB for the real model)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_saved_graph_build_killed_leaves_no_staging_folder_for_ever(tmp_path: Path, state_dir: Path) -> None:
    """A first run killed while onnxruntime saved the model's optimised graph left its staging
    folder (40-90 MB) in the model cache for ever, one more per kill; the next build removes it."""
    from memdir.embeddings import saved_graph

    cache = tmp_path / "cache"
    for _ in range(2):
        proc = subprocess.run([sys.executable, "-c", SAVED_GRAPH_BUILD_KILLED, str(cache)], capture_output=True,
                              text=True, env=cli_env(state_dir), timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    models = cache / "models"
    assert len([p for p in models.iterdir() if p.name.endswith(".tmp")]) == 1  # the second removed the first's
    staging = saved_graph.start_build("ab" * 32, "1.0", cache)
    assert staging is not None
    assert [p.name for p in models.iterdir()] == [staging.name]
    saved_graph.abandon(staging)


KILL_BEFORE_KEYWORD_TABLE = textwrap.dedent("""
    import os, signal, sys
    from memdir.stores.sqlite import SqliteStore
    def ddl(self, name):  # a new index's keyword table is about to be created
        os.kill(os.getpid(), signal.SIGKILL)
    SqliteStore._fts_ddl = ddl
    from memdir.cli import main
    raise SystemExit(main(sys.argv[1:]))
""")


def test_a_first_index_killed_while_creating_its_tables_is_not_called_damaged(tmp_path: Path, make_workspace,
                                                                             run_cli, state_dir: Path) -> None:
    """A first ``memdir index`` killed after the new index's change-log epoch was committed but
    before its keyword table existed left an index that the next run called damaged ("index table
    missing: chunks_fts"), moving it aside as ``.corrupt-*`` files that piled up."""
    _, base = keyword_workspace(tmp_path, make_workspace)
    proc = subprocess.run([sys.executable, "-c", KILL_BEFORE_KEYWORD_TABLE, "index", *base], capture_output=True,
                          text=True, env=cli_env(state_dir), timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert list((state_dir / "memory").glob("*.sqlite")), "the kill should leave the new index file"
    done = run_cli("index", *base, check=True)
    assert "damaged" not in done.stderr, done.stderr
    assert sorted(p.name for p in (state_dir / "memory").iterdir() if ".corrupt-" in p.name) == []
    hits = json.loads(run_cli("search", "descaler", "--json", *base, check=True).stdout)["results"]
    assert [h["path"] for h in hits] == ["memory/notes.md"]


def test_a_stopped_long_term_memory_writer_does_not_make_others_wait_for_ever(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A process stopped (Ctrl-Z, SIGSTOP) while it held the long-term memory store's lock made
    every later store, forget and capture wait for ever without a word; now they fail saying how
    to resume it, as index writers do."""
    pytest.importorskip("lancedb")
    import threading

    import memdir.lock
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.lock import WriterStopped
    from memdir.ltm import LongTermMemory

    monkeypatch.setattr(memdir.lock, "STOPPED_WRITER_WAIT", 0.5)
    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main").settings
    ltm = LongTermMemory(settings, provider=AxisProvider())
    ltm.db_path.mkdir(parents=True)
    code = ("import os, signal, sys; from pathlib import Path; from memdir.lock import FileWriterLock; "
            "lock = FileWriterLock(Path(sys.argv[1])); print(lock.acquire(0), flush=True); "
            "os.kill(os.getpid(), signal.SIGSTOP)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(ltm.db_path / "ltm")], stdout=subprocess.PIPE,
                              text=True, env=cli_env(tmp_path / "state"))
    outcome: list[BaseException | None] = []

    def store() -> None:
        try:
            ltm.store("The user plays the cello", category="fact")
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    worker = threading.Thread(target=store, daemon=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "True"
        worker.start()
        worker.join(30)
        assert outcome, "the store is still waiting for the stopped holder"
        assert isinstance(outcome[0], WriterStopped) and f"kill -CONT {holder.pid}" in str(outcome[0])
    finally:
        holder.kill()
        holder.wait()
        if worker.is_alive():
            worker.join(30)
        ltm.close()


HOOK_FILE_KILLED = textwrap.dedent("""
    import os, signal, sys
    import memdir.memfiles as mf
    real = mf._write_all
    def write_then_die(fd, data):  # the temp file written, not yet linked to its name
        real(fd, data)
        os.kill(os.getpid(), signal.SIGKILL)
    mf._write_all = write_then_die
    mf.create_memory_file(sys.argv[1], sys.argv[2], "walrus " * 50)
""")


def test_a_session_file_killed_mid_write_leaves_no_temp_once_another_is_written(tmp_path: Path,
                                                                                state_dir: Path) -> None:
    """A session hook killed while writing its dated file left a hidden temp in ``memory/``; only
    a file of the very same name removed it, and the next session's file has another name (its
    slug), so each kill left one more there for ever."""
    from memdir.memfiles import create_memory_file

    ws = tmp_path / "ws"
    ws.mkdir()
    for stem in ("2026-03-04-walrus-facts", "2026-03-05-0930"):
        proc = subprocess.run([sys.executable, "-c", HOOK_FILE_KILLED, str(ws), stem], capture_output=True,
                              text=True, env=cli_env(state_dir), timeout=60)
        assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert len(list((ws / "memory").glob(".*.md.tmp-*"))) == 1  # the second run removed the first's
    path = create_memory_file(ws, "2026-03-06-kettle", "The kettle descaler is under the sink.\n")
    assert sorted(p.name for p in (ws / "memory").iterdir()) == [path.name]


def test_a_rebuild_stopped_with_sigterm_cleans_up_and_says_so(tmp_path: Path, make_workspace, run_cli,
                                                              state_dir: Path) -> None:
    """SIGTERM (``kill``, a supervisor stopping a job) ended ``memdir index --force`` on the spot
    (exit -15): its temporary database stayed beside the index and ``--json`` printed nothing.  It
    stops as Ctrl-C does: exit 143, the temporary database gone, the index as it was."""
    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "index", "--force", "--json") as run:
        proc, go, base = run
        proc.send_signal(signal.SIGTERM)
        go.set()
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 143, err
        assert "memdir: terminated" in err
        assert json.loads(out)["error"] == {"kind": "interrupted", "message": "terminated", "exitCode": 143}
        assert list(state_dir.rglob("*.tmp-*")) == []
        hits = json.loads(run_cli("search", "boiler", "--no-sync", "--mode", "keyword", "--json", *base,
                                  check=True).stdout)["results"]
    assert [h["path"] for h in hits] == ["MEMORY.md"]
