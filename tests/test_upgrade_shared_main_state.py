"""Agent ``main``'s state from memdir of 11-23 (8a54763 .. a9dd87a) is named after an upgrade.

Those versions kept each workspace's index as ``memory/<folder-name>-<hash>.sqlite`` but wrote the
transcripts (``agents/main/sessions``) and long-term memories (``ltm/main``) of every workspace used
without ``--agent`` under agent ``main``.  memdir now keys them by workspace and keeps ``main``'s
only for the workspace that owned ``main.sqlite``, which none of those versions wrote: an upgraded
workspace started empty, its memories no longer listed, searched or recalled, and neither
``status`` nor ``ltm`` said where they were.  The layout is made here as those versions left it
(checked against 99db4a7: index, ``agents/main/sessions``, ``ltm/main`` with its mirror state).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltm_fakes import AxisProvider
from memdir.api import Memory
from memdir.config import load_config, workspace_index_name
from memdir.sessions.store import SessionStore, message_record, session_key

CONFIG = {"memorySearch": {"provider": "none"}}


def _as_left_by_11_23(ws: Path, state_dir: Path) -> Path:
    """The workspace's own index, and agent ``main``'s transcripts and long-term memory."""
    pytest.importorskip("lancedb")
    from memdir.ltm.memory import LongTermMemory

    with Memory(ws, state_dir=state_dir, config=CONFIG) as mem:
        mem.sync()
    main = load_config(workspace=ws, state_dir=state_dir, agent_id="main").settings
    SessionStore(main.sessions_dir).append(session_key("main", "main"), message_record("user", "the walrus fact"))
    with LongTermMemory(main, provider=AxisProvider()) as ltm:
        ltm.store("My cat is called Pumpernickel")
    assert not main.index_path.exists()  # main.sqlite: never written by those versions
    return state_dir.resolve() / "ltm" / "main"


def test_status_names_agent_mains_unclaimed_state(make_workspace, state_dir: Path, run_cli) -> None:
    ws = make_workspace({"MEMORY.md": "# Notes\n"})
    old_ltm = _as_left_by_11_23(ws, state_dir)
    own = workspace_index_name(ws)
    st = json.loads(run_cli("status", "--json", "-w", str(ws), check=True).stdout)
    assert st["stateKeyKind"] == "workspace"
    (issue,) = [i for i in st["issues"] if "agents/main" in i]
    assert f"mv {old_ltm} {old_ltm.with_name(own)}" in issue
    assert f"mv {state_dir.resolve() / 'agents' / 'main'} {state_dir.resolve() / 'agents' / own}" in issue


def test_long_term_memory_names_agent_mains_unclaimed_memories_once(make_workspace, state_dir: Path) -> None:
    from memdir.ltm.memory import LongTermMemory

    ws = make_workspace({"MEMORY.md": "# Notes\n"})
    old_ltm = _as_left_by_11_23(ws, state_dir)
    told: list[str] = []
    settings = load_config(workspace=ws, state_dir=state_dir).settings
    with LongTermMemory(settings, provider=AxisProvider(), notice=told.append) as ltm:
        assert ltm.list() == [] and ltm.search("cat") == []
        (note,) = told  # once
        assert f"mv {old_ltm} {ltm.db_path}" in note
    # following the advice brings them back
    old_ltm.rename(settings.state_path / "ltm" / settings.state_key)
    with LongTermMemory(settings, provider=AxisProvider(), notice=told.append) as ltm:
        assert [r.text for r in ltm.list()] == ["My cat is called Pumpernickel"]
    assert len(told) == 1


def test_nothing_is_said_when_main_is_a_chosen_agents_or_the_workspace_has_its_own(make_workspace,
                                                                                  state_dir: Path) -> None:
    """``main.sqlite`` claimed (``--agent main``, or memdir before 11-23) is another case: its owner
    keeps main's state, other workspaces are not told to take it."""
    from memdir.ltm.memory import LongTermMemory

    ws = make_workspace({"MEMORY.md": "# Notes\n"}, name="ws")
    other = make_workspace({"MEMORY.md": "# Other\n"}, name="other")
    _as_left_by_11_23(ws, state_dir)
    with Memory(ws, state_dir=state_dir, agent_id="main", config=CONFIG) as mem:
        mem.sync()  # main.sqlite now names ws
    told: list[str] = []
    with LongTermMemory(load_config(workspace=other, state_dir=state_dir).settings, provider=AxisProvider(),
                        notice=told.append) as ltm:
        assert ltm.list() == []
    with Memory(other, state_dir=state_dir, config=CONFIG) as mem:
        assert not [i for i in mem.status()["issues"] if "agents/main" in i]
    assert told == []

