"""Paths in a config file mean the same thing from whatever folder memdir runs in."""

from __future__ import annotations

import json
from pathlib import Path

from memdir.config import load_config


def test_a_relative_store_path_in_a_config_file_is_read_from_the_files_folder(tmp_path: Path, make_workspace,
                                                                              state_dir: Path, run_cli):
    """It was read from each run's current folder: every folder memdir ran in got an index of its own."""
    ws = make_workspace({"MEMORY.md": "The pager rota lives in the ops wiki.\n"})
    state_dir.mkdir(parents=True, exist_ok=True)
    (state_dir / "memdir.toml").write_text(
        '[memorySearch]\nprovider = "none"\n[memorySearch.store]\npath = "indexes/{agentId}.sqlite"\n')
    one, two = tmp_path / "one", tmp_path / "two"
    one.mkdir()
    two.mkdir()
    run_cli("index", "-w", str(ws), "--agent", "ops", cwd=one, check=True)
    want = state_dir.resolve() / "indexes" / "ops.sqlite"
    assert want.is_file()
    st = json.loads(run_cli("status", "-w", str(ws), "--agent", "ops", "--json", cwd=two, check=True).stdout)
    assert st["indexPath"] == str(want) and st["indexExists"] and st["files"] == 1
    assert not (one / "indexes").exists() and not (two / "indexes").exists()


def test_a_relative_store_path_given_as_an_option_stays_relative_to_the_current_folder(tmp_path: Path,
                                                                                        monkeypatch) -> None:
    """Only a config file's paths are its folder's; a value from the environment is the caller's."""
    cfg = tmp_path / "conf" / "memdir.json"
    cfg.parent.mkdir()
    cfg.write_text('{"memorySearch": {"provider": "none"}}')
    monkeypatch.chdir(tmp_path)
    loaded = load_config(config_path=cfg, workspace=tmp_path, agent_id="a",
                         env={"MEMDIR_INDEX_PATH": "idx/{agentId}.sqlite"})
    assert loaded.settings.index_path == tmp_path.resolve() / "idx" / "a.sqlite"
    cfg.write_text('{"memorySearch": {"store": {"path": "idx/{agentId}.sqlite"}}}')
    loaded = load_config(config_path=cfg, workspace=tmp_path, agent_id="a", env={})
    assert loaded.settings.index_path == cfg.parent.resolve() / "idx" / "a.sqlite"


def test_a_model_folder_put_beside_the_config_file_later_is_seen_by_the_cli_snapshot(tmp_path: Path):
    """``local.modelPath = "models/mini"`` names a hub model while no such folder is beside the file,
    and that folder once it is: a snapshot of the settings from before kept the hub name (no input
    of its key changed), so searches went on without the model put there."""
    from memdir import settings_cache

    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    (ws / "memdir.toml").write_text('[memorySearch.local]\nmodelPath = "models/mini"\n')
    args = {"config_path": None, "workspace": str(ws), "agent_id": None, "state_dir": str(state)}
    before = load_config(**args, env={})
    assert before.settings.memory_search.local.model_path == "models/mini"
    key, path = settings_cache.snapshot_key(**args, env={})
    assert settings_cache.save_snapshot(path, key, before)
    kept = settings_cache.load_snapshot(path, key)
    assert kept is not None and kept.settings.memory_search.local.model_path == "models/mini"
    (ws / "models" / "mini").mkdir(parents=True)
    assert settings_cache.snapshot_key(**args, env={})[0] == key  # the key cannot see it ...
    assert settings_cache.load_snapshot(path, key) is None  # ... the snapshot does
    assert load_config(**args, env={}).settings.memory_search.local.model_path == str(ws / "models" / "mini")


def test_an_extra_path_named_in_another_unicode_form_on_disk_is_indexed(tmp_path: Path, make_workspace) -> None:
    """A folder synced from macOS is named in NFD; the same name typed into a config file is NFC.
    The extra path was "missing" (status's issue, nothing said by index) and its notes searched
    nowhere, though ``ls`` shows it by that name; the form that exists is the one indexed and read,
    either way round."""
    import unicodedata

    from memdir.api import Memory

    for typed, on_disk in (("NFC", "NFD"), ("NFD", "NFC")):
        ws = make_workspace({"MEMORY.md": "- hello\n"}, name=f"ws-{typed}")
        folder = ws / unicodedata.normalize(on_disk, "notes-été")
        folder.mkdir()
        (folder / "a.md").write_text("- the ocelot enclosure reopens in May\n")
        config = {"memorySearch": {"provider": "none", "extraPaths": [unicodedata.normalize(typed, "notes-été")]}}
        with Memory(ws, config=config, state_dir=tmp_path / f"state-{typed}") as mem:
            report = mem.sync()
            [hit] = mem.search("ocelot enclosure").results
            assert hit.path == f"{folder.name}/a.md", report
            assert mem.get(unicodedata.normalize(typed, "notes-été/a.md")).text.startswith("- the ocelot")
            assert not any("missing" in issue for issue in mem.status()["issues"])
