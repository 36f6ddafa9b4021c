"""A config file edited under a long-running Memory: settings are read once, and it says so."""

from __future__ import annotations

from memdir.api import Memory


def test_a_long_running_memory_says_once_that_its_config_file_was_edited(make_workspace):
    """Settings are read once: a ``memdir mcp`` whose config file was edited went on with the old
    settings without a word.  The next search says so (to the agent, and on stderr), once."""
    ws = make_workspace({"MEMORY.md": "The quokka sync is on Fridays.\n"})
    cfg = ws / "memdir.toml"
    cfg.write_text('[memorySearch]\nprovider = "none"\n')
    notices: list[str] = []
    with Memory(ws, notice=notices.append) as mem:
        assert not any("memdir.toml changed" in w for w in mem.search("quokka").warnings)
        cfg.write_text('[memorySearch]\nprovider = "none"\nextraPaths = ["team"]\n')
        said = [w for w in mem.search("quokka").warnings if "memdir.toml changed" in w]
        assert said and str(cfg) in said[0] and "restarted" in said[0]
        assert [n for n in notices if "memdir.toml changed" in n] == said
        assert not any("memdir.toml changed" in w for w in mem.search("quokka").warnings)  # once per edit

