"""The CLI's remembered settings: same answers as pydantic, invalidated by every input, never fatal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env
from memdir import settings_cache
from memdir.config import load_config


@pytest.fixture
def ws(make_workspace) -> Path:
    return make_workspace({
        "memory/2026-01-12.md": "# 2026-01-12\n" + "".join(f"- ramen note {i}\n" + "filler\n" * 30
                                                            for i in range(40)),
        **{f"memory/2025-12-{d:02d}.md": f"# 2025-12-{d:02d}\n- Routine ramen standup {d}.\n" for d in range(1, 9)},
    })


def test_view_matches_the_validated_settings(tmp_path: Path):
    (tmp_path / "ws").mkdir()
    overrides = {"memorySearch": {"extraPaths": ["~/notes", "rel/dir", "rel/dir"],
                                  "store": {"path": str(tmp_path / "idx-{agentId}.sqlite")},
                                  "remote": {"timeoutSeconds": 7},
                                  "query": {"maxResults": 9, "hybrid": {"candidateMultiplier": 3,
                                                                        "mmr": {"enabled": True, "lambda": 0.4}}}}}
    loaded = load_config(workspace=tmp_path / "ws", agent_id="bob", state_dir=tmp_path / "st", overrides=overrides)
    key, path = settings_cache.snapshot_key(config_path=None, workspace=str(tmp_path / "ws"), agent_id="bob",
                                            state_dir=str(tmp_path / "st"))
    assert settings_cache.save_snapshot(path, key, loaded)
    view = settings_cache.load_snapshot(path, key)
    assert view is not None
    s, v = loaded.settings, view.settings
    for name in ("state_path", "workspace_path", "index_path", "sessions_dir", "extra_paths", "agent_id",
                 "index_key", "agent_explicit"):
        assert getattr(v, name) == getattr(s, name), name
    assert v.memory_search.query.candidates == s.memory_search.query.candidates == 27
    assert v.memory_search.query.hybrid.mmr.lambda_ == 0.4
    assert v.memory_search.remote.query_timeout == s.memory_search.remote.query_timeout == 7
    assert v.memory_search.remote.batch_timeout == s.memory_search.remote.batch_timeout
    # without a chosen agent id the index is keyed by the workspace: the view says so too
    plain = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "st")
    key2, path2 = settings_cache.snapshot_key(config_path=None, workspace=str(tmp_path / "ws"), agent_id=None,
                                              state_dir=str(tmp_path / "st"))
    assert settings_cache.save_snapshot(path2, key2, plain)
    v2 = settings_cache.load_snapshot(path2, key2)
    assert v2 is not None and v2.settings.index_path == plain.settings.index_path
    assert v2.settings.index_key == plain.settings.index_key == "workspace"
    with pytest.raises(AttributeError):
        v.memory_search.no_such_key  # noqa: B018
    with pytest.raises(AttributeError):
        v.agent_id = "other"
    # another key (another agent) never reads this snapshot
    other, _ = settings_cache.snapshot_key(config_path=None, workspace=str(tmp_path / "ws"), agent_id="eve",
                                           state_dir=str(tmp_path / "st"))
    assert other != key and settings_cache.load_snapshot(path, other) is None


def _snapshots(state: Path) -> list[Path]:
    return sorted((state / "cache").glob("settings-*.json"))


def test_cli_search_reuses_the_snapshot_and_sees_config_edits(ws: Path, run_cli, state_dir: Path):
    env = {"MEMDIR_PROVIDER": "none"}
    first = json.loads(run_cli("search", "ramen", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert len(first["results"]) == 6  # the default maxResults
    assert len(_snapshots(state_dir)) == 1
    again = json.loads(run_cli("search", "ramen", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert again["results"] == first["results"] and len(_snapshots(state_dir)) == 1

    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"query": {"maxResults": 2}}}))
    edited = json.loads(run_cli("search", "ramen", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert len(edited["results"]) == 2  # a new config file is a new key
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"query": {"maxResults": 3, "minScore": 0}}}))
    assert len(json.loads(run_cli("search", "ramen", "--json", "-w", str(ws), env=env).stdout)["results"]) == 3

    (ws / "memdir.json").write_text("{not json")
    bad = run_cli("search", "ramen", "-w", str(ws), env=env)
    assert bad.returncode == 1 and "memdir.json" in bad.stderr  # an invalid config is still reported


def test_a_config_edit_that_keeps_size_and_mtime_is_still_seen(ws: Path, run_cli, state_dir: Path):
    """An edit in place whose mtime is set back (``cp -p``, ``touch -r``, an editor keeping times)
    with the same size and inode changes only the file's ctime: the snapshot must not survive it."""
    env = {"MEMDIR_PROVIDER": "none"}
    config = ws / "memdir.json"
    config.write_text(json.dumps({"memorySearch": {"query": {"maxResults": 2}}}))
    before = config.stat()

    def found() -> int:
        out = run_cli("search", "ramen", "--json", "-w", str(ws), env=env, check=True).stdout
        return len(json.loads(out)["results"])

    assert found() == 2
    with open(config, "r+") as fh:  # same inode, same size
        fh.write(json.dumps({"memorySearch": {"query": {"maxResults": 3}}}))
    os.utime(config, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = config.stat()
    assert (after.st_ino, after.st_size, after.st_mtime_ns) == (before.st_ino, before.st_size, before.st_mtime_ns)
    assert found() == 3


def test_a_damaged_or_unwritable_snapshot_only_costs_time(ws: Path, run_cli, state_dir: Path):
    env = {"MEMDIR_PROVIDER": "none"}
    run_cli("search", "ramen", "-w", str(ws), env=env, check=True)
    (snap,) = _snapshots(state_dir)
    snap.write_text('{"key": "')
    out = run_cli("search", "ramen", "--json", "-w", str(ws), env=env, check=True)
    assert len(json.loads(out.stdout)["results"]) == 6
    snap.write_text(json.dumps({"key": "someone else", "settings": {}}))
    assert run_cli("search", "ramen", "--json", "-w", str(ws), env=env).returncode == 0
    if os.geteuid() != 0:  # root ignores permissions
        snap.unlink()
        (state_dir / "cache").chmod(0o500)
        try:
            assert run_cli("search", "ramen", "--json", "-w", str(ws), env=env).returncode == 0
        finally:
            (state_dir / "cache").chmod(0o700)


def test_a_workspace_gone_since_the_snapshot_is_an_error_not_an_emptied_index(ws: Path, run_cli):
    """The snapshot skipped load_config's check that the workspace exists: a search after the folder
    was moved (or its drive unmounted) synced an empty listing, said "No matches." and left the
    index empty; without a snapshot the same command was a configuration error."""
    env = {"MEMDIR_PROVIDER": "none"}
    run_cli("search", "ramen", "-w", str(ws), env=env, check=True)  # writes the snapshot
    moved = ws.with_name("moved")
    ws.rename(moved)
    out = run_cli("search", "ramen", "--json", "-w", str(ws), env=env)
    assert out.returncode == 1 and f"workspace {ws} does not exist" in out.stderr
    assert json.loads(out.stdout)["error"]["kind"] == "config"
    moved.rename(ws)
    kept = run_cli("search", "ramen", "--no-sync", "--json", "-w", str(ws), env=env, check=True)
    assert len(json.loads(kept.stdout)["results"]) == 6  # the index still holds the notes


def test_the_snapshot_holding_secrets_is_readable_by_its_owner_only(ws: Path, run_cli, state_dir: Path):
    """The remembered settings hold ``remote.apiKey`` and the DSN's password: the snapshot was
    written 0644 in a 0755 folder, so a key kept in a 0600 config file was readable by every user."""
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n[memorySearch.remote]\napiKey = "sk-secret"\n')
    (ws / "memdir.toml").chmod(0o600)
    run_cli("search", "ramen", "-w", str(ws), check=True)
    (snap,) = _snapshots(state_dir)
    assert "sk-secret" in snap.read_text()  # what is at stake
    assert snap.stat().st_mode & 0o777 == 0o600 and snap.parent.stat().st_mode & 0o777 == 0o700


def test_old_snapshots_are_pruned(ws: Path, run_cli, state_dir: Path):
    """One snapshot is written per set of inputs (every config edit, every folder memdir runs from)
    and none was ever removed: the cache folder only grew."""
    cache = state_dir / "cache"
    cache.mkdir(parents=True)
    for i in range(settings_cache.MAX_SNAPSHOTS + 10):
        old = cache / f"settings-old{i:03d}.json"
        old.write_text("{}")
        os.utime(old, (1_000_000 + i, 1_000_000 + i))
    (cache / "settings-left.json.123.tmp").write_text("{")  # a killed run's, long ago
    os.utime(cache / "settings-left.json.123.tmp", (1_000_000, 1_000_000))
    (cache / "settings-busy.json.456.tmp").write_text("{")  # being written right now
    run_cli("search", "ramen", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"}, check=True)
    names = sorted(p.name for p in cache.iterdir())
    assert len([n for n in names if n.endswith(".json")]) == settings_cache.MAX_SNAPSHOTS
    assert "settings-old000.json" not in names and "settings-old073.json" in names  # the oldest went
    assert any(json.loads(p.read_text()).get("key") for p in _snapshots(state_dir))  # this run's is kept
    assert "settings-left.json.123.tmp" not in names and "settings-busy.json.456.tmp" in names


def test_keyword_search_imports_neither_pydantic_nor_numpy_nor_the_indexer(ws: Path, run_cli, state_dir: Path):
    env = {**cli_env(state_dir), "MEMDIR_PROVIDER": "none"}
    run_cli("index", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"}, check=True)
    code = ("import sys, io, contextlib\nfrom memdir.cli import main\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n"
            f"    rc = main(['search', 'ramen', '--no-sync', '--json', '-w', {str(ws)!r}])\n"
            "heavy = sorted({m.split('.')[0] for m in sys.modules} & {'pydantic', 'numpy', 'httpx', 'mcp', "
            "'onnxruntime', 'sqlite_vec', 'sqlite3'})\n"
            # nor what only indexing, a named timezone, a remote provider or a rebuild needs
            "heavy += sorted(set(sys.modules) & {'memdir.sync', 'memdir.build_worker', 'memdir.chunking', "
            "'memdir.embeddings.local', 'zoneinfo', 'concurrent.futures', 'uuid', 'subprocess'})\n"
            "print(rc, heavy)\n")
    for attempt in ("first run (writes the snapshot)", "second run (reads it)"):
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
        assert proc.returncode == 0, proc.stderr
        rc, heavy = proc.stdout.strip().split(" ", 1)
        assert rc == "0"
        if attempt.startswith("second"):
            assert heavy == "[]", f"{attempt} imported {heavy}"


def test_every_environment_setting_is_an_input_of_the_snapshot_key():
    """A variable that changes the settings (e.g. MEMDIR_DATABASE_URL, a replica instead of the
    primary) must change the key, or a remembered snapshot would answer for the old value."""
    from memdir.config import ENV_KEYS
    from memdir.settings_cache import ENV_INPUTS

    assert set(ENV_KEYS) <= set(ENV_INPUTS)


def test_the_snapshot_is_never_written_through_a_link_planted_at_its_temporary_name(tmp_path: Path):
    """The snapshot's temporary file was named by the pid alone and opened with O_TRUNC through any
    symlink at that name: in a state folder others can write (``MEMDIR_STATE_DIR=/tmp/…`` on a
    shared runner) a link planted there emptied the file it pointed to and wrote the settings, API
    key included, into it."""
    (tmp_path / "ws").mkdir()
    loaded = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "st",
                         overrides={"memorySearch": {"provider": "none", "remote": {"apiKey": "sk-secret"}}})
    key, path = settings_cache.snapshot_key(config_path=None, workspace=str(tmp_path / "ws"), agent_id=None,
                                            state_dir=str(tmp_path / "st"))
    path.parent.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.symlink(victim, path.with_name(f"{path.name}.{os.getpid()}.tmp"))
    assert settings_cache.save_snapshot(path, key, loaded)
    assert victim.read_text() == "precious\n"
    assert settings_cache.load_snapshot(path, key) is not None and not path.is_symlink()
    assert path.stat().st_mode & 0o777 == 0o600
