"""A config file that does not parse: the message places the mistake as the user's editor does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from memdir.config import ConfigError, load_config


@pytest.mark.parametrize(("name", "text", "place"), [
    ("memdir.json5", '{\n  memorySearch: {\n    provider: "none"\n    chunking: {tokens: 100}\n  }\n}\n',
     "at line 4, column 5"),
    ("memdir.toml", '[memorySearch]\nprovider = "none"\nchunking.tokens 100\n', "at line 3, column 17"),
    ("memdir.json", '{"memorySearch": {\n  "provider": "none",\n}}\n', "line 3 column 1"),
])
def test_a_syntax_error_names_the_file_line_and_column(tmp_path: Path, name: str, text: str, place: str):
    """json5 said ``<string>:4 Unexpected "c" at column 5``: no file, and the line as a name."""
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(config_path=path, workspace=tmp_path, env={})
    message = str(caught.value)
    assert message.startswith(f"cannot parse config file {path}: ") and place in message
    assert "<string>" not in message


def test_comments_in_a_json_file_say_json5_takes_them(tmp_path: Path):
    path = tmp_path / "memdir.json"
    path.write_text('{\n  // keyword search only for now\n  "memorySearch": {"provider": "none"}\n}\n')
    with pytest.raises(ConfigError, match=re.escape("(JSON has no comments: name the file memdir.json5")):
        load_config(config_path=path, workspace=tmp_path, env={})
    renamed = path.rename(tmp_path / "memdir.json5")
    assert load_config(config_path=renamed, workspace=tmp_path, env={}).settings.memory_search.provider == "none"


@pytest.mark.parametrize(("text", "key"), [
    ('{"memorySearch": {"remote": null}}', "memorySearch.remote = None"),
    ('{"memorySearch": null}', "memorySearch = None"),
    ('{"memorySearch": {"query": {"hybrid": null}}}', "memorySearch.query.hybrid = None"),
])
def test_a_section_given_as_null_is_named_without_a_class_name(tmp_path: Path, text: str, key: str):
    """It said "must be a valid dictionary or instance of RemoteConfig": a Python class, not a key."""
    path = tmp_path / "memdir.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(config_path=path, workspace=tmp_path, env={})
    message = str(caught.value)
    assert f"{key} in {path}: must be a table/object" in message and "instance of" not in message
