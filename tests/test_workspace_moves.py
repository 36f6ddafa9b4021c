"""Workspaces and state over their lifetime: a workspace renamed, moved or copied while memdir
runs or between runs, its state folder carried to another place."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.errors import MemdirError


def test_a_workspace_renamed_under_a_running_memory_keeps_its_index_and_says_why(make_workspace, keyword_config):
    """A long-running server (MCP, watch) whose workspace folder was renamed away found no files,
    removed every note from the index and answered searches with nothing, without a word."""
    ws = make_workspace({"MEMORY.md": "We chose RabbitMQ for billing.\n", "memory/2026-01-01.md": "Cursors.\n"})
    with Memory(ws, config=keyword_config) as mem:
        assert mem.sync().indexed == 2
        moved = ws.with_name("ws-moved")
        os.rename(ws, moved)
        response = mem.search("rabbitmq")
        assert [r.path for r in response.results] == ["MEMORY.md"]
        assert any("no longer exists" in w for w in response.warnings)
        with pytest.raises(MemdirError, match=f"workspace {ws} no longer exists"):
            mem.sync()
        os.rename(moved, ws)
        report = mem.sync()
        assert (report.indexed, report.removed, report.unchanged) == (0, 0, 2)


def test_a_state_folder_moved_behind_its_symlink_is_the_one_searches_use(make_workspace, tmp_path: Path, run_cli):
    """``mv ~/Sync/memdir ~/Other/memdir; ln -sfn ~/Other/memdir ~/.memdir``: the remembered CLI
    settings still named the old target, so ``memdir search`` recreated it and built an index
    there while ``index`` and ``status`` used the new one."""
    ws = make_workspace({"MEMORY.md": "alpha note\n"})
    link, old, new = tmp_path / "st", tmp_path / "v1", tmp_path / "v2"
    old.mkdir()
    link.symlink_to(old)
    env = {"MEMDIR_STATE_DIR": str(link)}
    args = ("-w", str(ws), "search", "alpha", "--mode", "keyword", "--json")
    assert json.loads(run_cli(*args, env=env, check=True).stdout)["results"]  # builds the index, remembers settings
    os.rename(old, new)
    link.unlink()
    link.symlink_to(new)
    (ws / "MEMORY.md").write_text("alpha note\nbeta line\n")
    out = run_cli("-w", str(ws), "search", "beta", "--mode", "keyword", "--json", env=env, check=True)
    assert [r["path"] for r in json.loads(out.stdout)["results"]] == ["MEMORY.md"]
    assert not old.exists()


def test_a_workspace_symlink_repointed_is_followed_by_searches(tmp_path: Path, state_dir: Path, run_cli):
    """``workspace = "~/agent/current"`` in a config file, the link moved to a new release: the
    remembered settings still named the old target, so searches answered from the old notes."""
    for name, word in (("w1", "one"), ("w2", "two")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "MEMORY.md").write_text(f"alpha {word}\n")
    current = tmp_path / "current"
    current.symlink_to(tmp_path / "w1")
    state_dir.mkdir()
    (state_dir / "memdir.toml").write_text(f'workspace = "{current}"\n[memorySearch]\nprovider = "none"\n')
    search = ("search", "alpha", "--json")
    assert json.loads(run_cli(*search, check=True, cwd=tmp_path).stdout)["results"][0]["snippet"] == "alpha one\n"
    current.unlink()
    current.symlink_to(tmp_path / "w2")
    assert json.loads(run_cli(*search, check=True, cwd=tmp_path).stdout)["results"][0]["snippet"] == "alpha two\n"


def test_status_names_the_transcripts_a_renamed_workspace_left_under_its_old_key(make_workspace, state_dir: Path,
                                                                                  keyword_config, run_cli):
    """State is kept by the workspace's path: renamed, a workspace starts with no transcripts and
    no long-term memories, and nothing said where they went."""
    from memdir.config import load_config, workspace_index_name
    from memdir.sessions.store import SessionStore, message_record, session_key

    ws = make_workspace({"MEMORY.md": "# notes\n"}, name="agent")
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
    settings = load_config(workspace=ws).settings
    SessionStore(settings.sessions_dir).append(session_key(settings.agent_id, "main"), message_record("user", "hi"))
    old = settings.sessions_dir.parent
    renamed = ws.with_name("agent-renamed")
    os.rename(ws, renamed)

    st = json.loads(run_cli("status", "--json", "-w", str(renamed), check=True).stdout)
    new = state_dir.resolve() / "agents" / workspace_index_name(renamed)
    (note,) = [i for i in st["issues"] if "mv " in i]
    assert f"this folder, kept under the key of its path {ws}" in note and f"mv {old} {new}" in note
    assert f"mv {old} {new}" in run_cli("status", "-w", str(renamed), check=True).stdout

    os.rename(old, new)  # as the note says: the transcripts are this workspace's again
    st = json.loads(run_cli("status", "--json", "-w", str(renamed), check=True).stdout)
    assert not [i for i in st["issues"] if "mv " in i]
    assert list(Path(st["sessionsDir"]).glob("*.jsonl"))


def test_a_same_size_edit_within_one_coarse_timestamp_tick_is_indexed(make_workspace, keyword_config, monkeypatch):
    """On a file system that keeps whole seconds (HFS+, FAT's 2 s, some network shares) a file
    indexed and edited again within the same second, keeping its size, kept its stamp: the edit was
    never indexed (git calls such a file "racily clean").  Simulated: every file's mtime and ctime
    are this second."""
    from memdir import workspace

    tick = time.time_ns() // 1_000_000_000 * 1_000_000_000
    monkeypatch.setattr(workspace, "times", lambda st: (tick, tick))
    ws = make_workspace({"MEMORY.md": "colour red\n"})
    with Memory(ws, config=keyword_config) as mem:
        assert mem.sync().indexed == 1
        (ws / "MEMORY.md").write_text("colour tan\n")
        mem.sync()
        assert [r.path for r in mem.search("tan", sync=False).results] == ["MEMORY.md"]
        assert mem.search("red", sync=False).results == []


def test_memory_named_with_other_case_is_said_not_silently_left_out(make_workspace, keyword_config):
    """A workspace made on macOS (case ignored) with ``Memory/`` and ``Memory.md`` has them indexed
    there; on Linux they were left out, and nothing but "no memory files found" said why."""
    ws = make_workspace({"Memory/2026-01-01.md": "kiwi\n", "Memory.md": "mango\n", "memorial.md": "not memory\n"})
    with Memory(ws, config=keyword_config) as mem:
        report = mem.sync()
        assert report.indexed == 0
        assert {s["path"]: s["error"] for s in report.skipped} == {
            "Memory": "not memory: names are case-sensitive here (rename it to memory/)",
            "Memory.md": "not memory: names are case-sensitive here (rename it to MEMORY.md)"}
        (ws / "Memory").rename(ws / "memory")
        (ws / "Memory.md").rename(ws / "MEMORY.md")
        report = mem.sync()
        assert (report.indexed, report.skipped) == (2, [])


def test_the_long_term_memory_mirror_of_a_moved_workspace_is_kept_aside_and_regenerated(tmp_path: Path):
    """Renamed, a workspace gets a store of its own, and its mirror (memory/long-term.md), naming
    the old store, was refused as another agent's on every change, for good, even after the old
    store was moved to the new key as ``memdir status`` says."""
    pytest.importorskip("lancedb")
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory

    def ltm(ws: Path) -> LongTermMemory:
        settings = load_config(workspace=ws, state_dir=tmp_path / "state",
                               overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
        return LongTermMemory(settings, provider=AxisProvider())

    ws = tmp_path / "agent"
    ws.mkdir()
    with ltm(ws) as old:
        old.store("I prefer tea")
        old_store = old.db_path
    renamed = tmp_path / "agent-renamed"
    os.rename(ws, renamed)
    from memdir.ltm.settings import db_path

    os.rename(old_store, db_path(load_config(workspace=renamed, state_dir=tmp_path / "state").settings))  # status's mv
    with ltm(renamed) as new:
        result = new.store("I prefer coffee")
        mirror = renamed / "memory" / "long-term.md"
        (aside,) = mirror.parent.glob("long-term.md.*")
        assert "no longer there" in result.warnings[0] and aside.name in result.warnings[0]
        assert "I prefer tea" in aside.read_text()
        assert "I prefer tea" in mirror.read_text() and "I prefer coffee" in mirror.read_text()
        assert str(new.db_path) in mirror.read_text()


def _bind_mount_runs() -> bool:
    """Whether this process may bind-mount in a private mount namespace (root, with ``unshare``)."""
    if os.geteuid() != 0 or not shutil.which("unshare"):
        return False
    return subprocess.run(["unshare", "-m", "mount", "--bind", "/", "/mnt"], capture_output=True).returncode == 0


@pytest.mark.skipif(not _bind_mount_runs(), reason="needs root and unshare to bind-mount")
def test_one_workspace_reached_by_two_paths_shares_its_agents_index(make_workspace, tmp_path: Path, state_dir: Path):
    """A bind mount (or, on macOS, a path typed in another case) reaches the same folder by another
    path: the agent's index was refused as "another workspace's", advising a new agent id."""
    ws = make_workspace({"MEMORY.md": "We chose RabbitMQ for billing.\n"})
    other = tmp_path / "mounted"
    other.mkdir()
    memdir = f"{sys.executable} -m memdir --agent ops --state-dir {state_dir}"
    script = (f"mount --bind {ws} {other} && {memdir} -w {ws} index > /dev/null && "
              f"{memdir} -w {other} search rabbitmq --mode keyword --json")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert [r["path"] for r in json.loads(out.stdout)["results"]] == ["MEMORY.md"]


def test_a_workspace_renamed_under_its_agent_id_keeps_its_index(make_workspace, run_cli, tmp_path: Path):
    """A folder renamed is the same folder (its identity is recorded with the index): it keeps the
    agent's index, nothing rebuilt, where it was refused as another workspace's."""
    ws = make_workspace({"MEMORY.md": "We chose RabbitMQ for billing.\n"}, name="notes")
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("-w", str(ws), "--agent", "ops", "index", env=env).returncode == 0
    moved = ws.rename(tmp_path / "notes-2026")
    out = run_cli("-w", str(moved), "--agent", "ops", "index", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["indexed"] == 0


@pytest.mark.skipif(not _bind_mount_runs(), reason="needs root and unshare to bind-mount")
def test_a_shared_workspace_mounted_elsewhere_in_another_container_keeps_its_agents_index(tmp_path: Path,
                                                                                          state_dir: Path, backend):
    """One volume, two containers: the workspace is /workspace in the first and /home/u/ws in the
    second, where /workspace does not exist; the second was refused ("belongs to workspace …, and
    … no longer exists: … delete …/ops.sqlite"), advising to delete the index the first one used."""
    ws = tmp_path / "first" / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("We chose RabbitMQ for billing.\n")
    other = tmp_path / "second" / "ws"
    other.mkdir(parents=True)
    memdir = f"{sys.executable} -m memdir --agent ops --state-dir {state_dir}"
    env = {**os.environ, **backend.env(), "MEMDIR_PROVIDER": "none"}
    first = subprocess.run([*memdir.split(), "-w", str(ws), "index"], capture_output=True, text=True, timeout=120,
                           env=env)
    assert first.returncode == 0, first.stderr
    # the second container: the volume at another path, the first one's path not there at all
    script = (f"mount --bind {ws} {other} && mount -t tmpfs none {ws.parent} && test ! -e {ws} && "
              f"echo 'Kafka carries the events.' > {other}/memory/2026-03-01.md && "
              f"{memdir} -w {other} search rabbitmq --mode keyword --json")
    second = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120,
                            env=env)
    assert second.returncode == 0, second.stderr
    assert [r["path"] for r in json.loads(second.stdout)["results"]] == ["MEMORY.md"]
    # and the first container goes on with the index the second one synced
    back = subprocess.run([*memdir.split(), "-w", str(ws), "search", "kafka", "--mode", "keyword", "--json"],
                          capture_output=True, text=True, timeout=120, env=env)
    assert back.returncode == 0, back.stderr
    assert [r["path"] for r in json.loads(back.stdout)["results"]] == ["memory/2026-03-01.md"]


@pytest.mark.skipif(not _bind_mount_runs(), reason="needs root and unshare to bind-mount")
def test_status_in_a_container_mounting_the_workspace_elsewhere_does_not_call_it_gone(tmp_path: Path,
                                                                                      state_dir: Path):
    """Without an agent id, a second container (the shared workspace at /home/u/ws, its
    /workspace not there) was told the first one's transcripts belonged to 'workspace /workspace,
    which no longer exists', with only the mv that takes them from the container still using them."""
    from memdir.config import workspace_index_name

    ws = tmp_path / "first" / "ws"
    ws.mkdir(parents=True)
    (ws / "MEMORY.md").write_text("We chose RabbitMQ for billing.\n")
    other = tmp_path / "second" / "ws"
    other.mkdir(parents=True)
    memdir = [sys.executable, "-m", "memdir", "--state-dir", str(state_dir)]
    assert subprocess.run([*memdir, "-w", str(ws), "index"], capture_output=True, timeout=120).returncode == 0
    (state_dir / "agents" / workspace_index_name(ws) / "sessions").mkdir(parents=True)  # its transcripts
    script = (f"mount --bind {ws} {other} && mount -t tmpfs none {ws.parent} && "
              f"{' '.join(memdir)} -w {other} status --json")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    (note,) = [i for i in json.loads(out.stdout)["issues"] if "mv " in i]
    assert "no longer exists" not in note
    assert f"if it is also used at {ws} (a container or mount that sees it there), give both the same agent id" in note


@pytest.mark.skipif(not _bind_mount_runs(), reason="needs root and unshare to bind-mount")
def test_extra_paths_in_a_workspace_seen_at_two_paths_do_not_rebuild_the_agents_index(make_workspace, tmp_path: Path,
                                                                                       state_dir: Path):
    """extraPaths = ["."] (what memdir advises for a folder of ordinary notes) named two folders
    for one workspace seen at two paths, and each path's sync rebuilt the whole shared index
    ("full reindex (extraPaths changed)"), the other's next one again."""
    ws = make_workspace({"ideas.md": "We chose RabbitMQ for billing.\n",
                         "memdir.toml": '[memorySearch]\nextraPaths = ["."]\nprovider = "none"\n'})
    other = tmp_path / "mounted"
    other.mkdir()
    memdir = f"{sys.executable} -m memdir --agent ops --state-dir {state_dir}"
    script = (f"mount --bind {ws} {other} && {memdir} -w {ws} index --json && echo === && "
              f"{memdir} -w {other} index --json && echo === && {memdir} -w {ws} index --json")
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    runs = [json.loads(part) for part in out.stdout.split("===")]
    assert [r["full"] for r in runs] == [True, False, False], runs


def test_an_index_whose_extra_paths_were_hashed_as_full_paths_is_not_rebuilt(make_workspace, state_dir: Path,
                                                                              run_cli):
    """An index an earlier memdir built (the extra paths hashed by their full paths) is no
    reason for a rebuild now that paths within the workspace are hashed as such."""
    import hashlib
    import sqlite3

    ws = make_workspace({"ideas.md": "We chose RabbitMQ for billing.\n",
                         "memdir.toml": '[memorySearch]\nextraPaths = [".", "/nonexistent/team"]\nprovider = "none"\n'})
    assert run_cli("-w", str(ws), "index", check=True)
    index = Path(json.loads(run_cli("-w", str(ws), "status", "--json", check=True).stdout)["indexPath"])
    with sqlite3.connect(index) as db:
        (raw,) = db.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchone()
        meta = json.loads(raw)
        meta["scopeHash"] = hashlib.sha256("\n".join(sorted([str(ws), "/nonexistent/team"])).encode()).hexdigest()
        db.execute("UPDATE meta SET value = ? WHERE key = 'memory_index_meta_v1'", (json.dumps(meta),))
    out = json.loads(run_cli("-w", str(ws), "index", "--json", check=True).stdout)
    assert out["full"] is False and out["reason"] == "cli"


def test_a_workspace_named_in_another_unicode_form_is_pointed_at(tmp_path: Path, run_cli):
    """A folder copied from macOS keeps its decomposed (NFD) name; the path typed is composed (NFC),
    and "workspace …/café does not exist" looked wrong beside ``ls`` showing café."""
    import unicodedata

    (tmp_path / unicodedata.normalize("NFD", "café")).mkdir()
    typed = tmp_path / unicodedata.normalize("NFC", "café")
    out = run_cli("-w", str(typed), "status")
    assert out.returncode == 1 and "Traceback" not in out.stderr
    assert "does not exist" in out.stderr and "another Unicode form (NFD" in out.stderr


def test_a_workspace_moved_or_restored_elsewhere_reuses_the_embeddings_its_old_index_cached(tmp_path: Path):
    """A workspace renamed, or restored into another home folder (or machine) with its state
    folder, gets a new key, and its first index there embedded every note again (8 minutes for
    600 notes with the local model) while its old index, embeddings cached, was right beside it.
    That index's cache is taken; that of another workspace of the same name, still there, is not."""
    notes = {"MEMORY.md": "We chose RabbitMQ for billing.\n", "memory/2026-01-01.md": "Cursors for pagination.\n"}
    ws = tmp_path / "alice" / "agent"
    for rel, text in notes.items():
        (ws / rel).parent.mkdir(parents=True, exist_ok=True)
        (ws / rel).write_text(text)

    def first_sync(folder: Path) -> tuple[int, int, int]:
        with Memory(folder) as mem:
            report = mem.sync()
            assert [r.path for r in mem.search("which message broker for billing").results][:1] == ["MEMORY.md"]
        return report.indexed, report.embedded, report.cache_hits

    assert first_sync(ws) == (2, 2, 0)
    other = tmp_path / "carol" / "agent"
    shutil.copytree(ws, other)
    assert first_sync(other) == (2, 2, 0)  # a copy of it, beside it: its own
    renamed = ws.rename(ws.with_name("agent-2026"))  # the same folder (its identity recorded)
    assert first_sync(renamed) == (2, 0, 2)
    restored = tmp_path / "bob" / "agent"  # restored from a backup into another home folder
    shutil.copytree(renamed, restored)
    shutil.rmtree(renamed)
    assert first_sync(restored) == (2, 0, 2)


def test_an_index_restored_in_place_under_a_running_memdir_reads_its_notes_again(make_workspace, keyword_config):
    """The state folder copied back from a backup under a running watcher (``cp -a backup/.
    ~/.memdir/``, which rewrites the index in place): SQLite went on with the pages its write-ahead
    log held over the older file, a mix of two versions that every check calls sound, in which the
    notes indexed since the backup kept their rows and lost their text.  Every search for their
    words answered "No matches." and status called the index clean, for good; a search that finds
    nothing reads such notes again.  A note of blank lines (no text to index) is not one."""
    ws = make_workspace({"memory/a.md": "- apple\n", "memory/blank.md": "  \n\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        index = Path(mem.index_path)
    backup = index.with_name("backup.sqlite")
    shutil.copy(index, backup)
    for i in range(50):
        (ws / "memory" / f"b{i}.md").write_text(f"- banana {i} ferry\n")
    with Memory(ws, config=keyword_config) as mem:
        assert mem.sync().indexed == 50
    with Memory(ws, config=keyword_config) as mem:  # a watcher started since
        assert mem.sync(reason="watch").indexed == 0
        with open(backup, "rb") as src, open(index, "r+b") as dst:  # as cp writes it: in place
            dst.truncate(0)
            shutil.copyfileobj(src, dst)
        (ws / "memory" / "c.md").write_text("- cherry\n")
        assert mem.sync(reason="watch").indexed == 1
    with Memory(ws, config=keyword_config) as mem:
        before = mem.status()
        assert (before["files"], before["chunks"], before["dirty"]) == (53, 2, False)  # the mix
        hits = {r.path for r in mem.search("banana ferry", max_results=100).results}
        assert hits == {f"memory/b{i}.md" for i in range(50)}
        assert mem.status()["chunks"] == 52
        assert {r.path for r in mem.search("zebra").results} == set()  # (nothing more to read again)
