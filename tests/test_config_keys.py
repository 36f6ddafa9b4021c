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
