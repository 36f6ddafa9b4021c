"""An unknown key that is a known name in the wrong table: the message names where it belongs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memdir.config import ConfigError, load_config


@pytest.mark.parametrize(("toml", "wrong", "right"), [
    ("[memorySearch]\nmaxResults = 10\n", "memorySearch.maxResults", "memorySearch.query.maxResults"),
    ('provider = "none"\n', "provider", "memorySearch.provider"),
    ("[memorySearch.query]\nvectorWeight = 0.5\n", "memorySearch.query.vectorWeight",
     "memorySearch.query.hybrid.vectorWeight"),
    # was "did you mean 'memorySearch.model'?": another setting, whose value would have been a path
    ('[memorySearch]\nmodel_path = "models/e5"\n', "memorySearch.model_path", "memorySearch.local.modelPath"),
    ('[memorySearch.query]\nuserTimezone = "UTC"\n', "memorySearch.query.userTimezone", "userTimezone"),
    ("[agents.defaults.memorySearch]\ntokens = 100\n", "agents.defaults.memorySearch.tokens",
     "agents.defaults.memorySearch.chunking.tokens"),
])
def test_a_right_name_in_the_wrong_table_is_pointed_to_its_place(tmp_path: Path, toml: str, wrong: str, right: str):
    cfg = tmp_path / "memdir.toml"
    cfg.write_text(toml)
    said = f"unknown config key '{wrong}' (did you mean '{right}'?) in {cfg}"
    with pytest.raises(ConfigError, match=re.escape(said)):
        load_config(workspace=tmp_path, env={})


def test_a_typo_still_gets_the_closest_spelling_and_nonsense_gets_none(tmp_path: Path):
    with pytest.raises(ConfigError, match=re.escape("(did you mean 'memorySearch.sources'?)")):
        load_config(workspace=tmp_path, env={}, overrides={"memorySearch": {"sourcess": ["memory"]}})
    with pytest.raises(ConfigError) as caught:
        load_config(workspace=tmp_path, env={}, overrides={"memorySearch": {"zzzq": 1}})
    assert "did you mean" not in str(caught.value)


def test_a_misspelt_environment_variable_is_named_on_every_cli_run(tmp_path: Path, run_cli):
    """``MEMDIR_PROVDER=openai`` was ignored without a word (searches kept the default provider);
    the second run reads its settings from the snapshot, which skips ``load_config``: warned too."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("# Queue\nWe picked kafka for billing.\n")
    env = {"MEMDIR_PROVDER": "openai", "MEMDIR_PROVIDER": "none", "MEMDIR_QUERY_CACHE_SIZE": "0"}
    for _ in range(2):
        proc = run_cli("search", "kafka", "-w", str(ws), env=env)
        assert proc.returncode == 0 and "kafka" in proc.stdout
        assert "MEMDIR_PROVDER (did you mean MEMDIR_PROVIDER?) is not read by memdir" in proc.stderr
        assert "MEMDIR_QUERY_CACHE_SIZE" not in proc.stderr  # a knob memdir does read


def test_every_memdir_variable_the_code_reads_is_known(tmp_path: Path, caplog):
    """The list behind the warning above must hold every ``MEMDIR_*`` name the package reads."""
    from memdir import settings_cache

    src = Path(settings_cache.__file__).parent
    read = set()
    for path in src.rglob("*.py"):
        read |= set(re.findall(r"""environ(?:\.get\(|\[)\s*["'](MEMDIR_[A-Z0-9_]+)""", path.read_text()))
        read |= set(re.findall(r"""env\.get\(\s*["'](MEMDIR_[A-Z0-9_]+)""", path.read_text()))
    assert {"MEMDIR_STATE_DIR", "MEMDIR_QUERY_CACHE_SIZE"} <= read  # the scan finds reads at all
    assert settings_cache.unknown_env_warning(dict.fromkeys(read, "1")) is None
    assert "MEMDIR_NOPE" in (settings_cache.unknown_env_warning({"MEMDIR_NOPE": "1"}) or "")
    with caplog.at_level("WARNING", logger="memdir"):
        load_config(workspace=tmp_path, env={"MEMDIR_AGNET": "x"})
    assert "MEMDIR_AGNET (did you mean MEMDIR_AGENT?)" in caplog.text
