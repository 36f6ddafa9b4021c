"""A bench measures memdir's defaults (or a ``--config`` file), whatever the caller's shell holds.

Every memdir reads ``MEMDIR_CONFIG`` and the ``MEMDIR_*`` variables; the benches' memdirs did too,
while the report said which settings ran: ``MEMDIR_PROVIDER=openai`` made ``memdir:hybrid``
search with OpenAI's model, ``MEMDIR_INDEX_PATH`` put every sample into one index file, a
``MEMDIR_CONFIG`` changed the chunking, and a config file in the current folder (which no run
read) was written into the report as the settings used.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.bench.adapters import MemdirAdapter
from memdir.bench.speed import child_env

GATE = Path(__file__).parent / "data" / "gate"
SMALL_CHUNKS = "[memorySearch.chunking]\ntokens = 16\noverlap = 0\n"


def _gate_workspace() -> Path:
    return GATE / "notes" / "workspace"


def test_a_bench_memdir_ignores_the_callers_config_file_and_variables(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = tmp_path / "mine.toml"
    cfg.write_text(SMALL_CHUNKS)
    monkeypatch.setenv("MEMDIR_CONFIG", str(cfg))
    monkeypatch.setenv("MEMDIR_INDEX_PATH", str(tmp_path / "shared.sqlite"))
    adapter = MemdirAdapter("keyword")
    session = adapter.index(_gate_workspace(), tmp_path / "state")
    try:
        settings = session.mem.settings  # type: ignore[attr-defined]
        assert (settings.memory_search.chunking.tokens, settings.memory_search.chunking.overlap) == (200, 40)
        assert not (tmp_path / "shared.sqlite").exists()
        assert str(settings.index_path).startswith(str(tmp_path / "state"))
    finally:
        session.close()
    assert adapter.effective_config()["chunking"] == {"tokens": 200, "overlap": 40}


def test_the_cli_report_names_the_settings_that_ran_and_says_what_it_ignored(
        tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    here = tmp_path / "cwd"
    here.mkdir()
    (here / "memdir.toml").write_text(SMALL_CHUNKS)  # the current folder's config: no run reads it
    mine = tmp_path / "mine.toml"
    mine.write_text(SMALL_CHUNKS)
    shared = tmp_path / "shared.sqlite"
    proc = run_cli("bench", "quality", str(GATE), "--mode", "keyword", "--k", "1", "--json", cwd=here,
                   env={"MEMDIR_CONFIG": str(mine), "MEMDIR_INDEX_PATH": str(shared)})
    assert proc.returncode == 0, proc.stderr
    run = json.loads(proc.stdout)["runs"]["memdir:keyword"]
    assert run["config"]["chunking"] == {"tokens": 200, "overlap": 40}
    assert run["config"]["store"].get("path") is None
    assert not shared.exists()
    assert "note: MEMDIR_CONFIG, MEMDIR_INDEX_PATH ignored: benches run memdir's defaults" in proc.stderr
    plain = run_cli("bench", "quality", str(GATE), "--mode", "keyword", "--k", "1", "--json", "--quiet", check=True)
    assert json.loads(plain.stdout)["runs"]["memdir:keyword"]["overall"] == run["overall"]


def test_measured_subprocesses_do_not_inherit_memdir_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    # the speed bench's cold-start `memdir search` followed MEMDIR_INDEX_PATH to another index
    for name, value in (("MEMDIR_INDEX_PATH", "/tmp/elsewhere.sqlite"), ("MEMDIR_CONFIG", "/tmp/mine.toml"),
                        ("MEMDIR_MODEL", "text-embedding-3-small"), ("MEMDIR_STORE_DRIVER", "postgres")):
        monkeypatch.setenv(name, value)
    env = child_env({"MEMDIR_PROVIDER": "none"})
    assert not {"MEMDIR_INDEX_PATH", "MEMDIR_CONFIG", "MEMDIR_MODEL", "MEMDIR_STORE_DRIVER"} & set(env)
    assert env["MEMDIR_PROVIDER"] == "none"
