"""Per-agent state follows the index's key: transcripts and long-term memory are the workspace's
own without an agent id, and the agent's (shared, as in OpenClaw) with one.

Before, the index was keyed by workspace but ``agents/main/sessions`` and ``ltm/main`` were
shared by every workspace used without ``--agent``: a chat in one workspace was indexed into the
other's search (``sources`` with ``sessions``), and long-term memories leaked between them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ltm_fakes import AxisProvider
from memdir.api import Memory
from memdir.config import load_config, workspace_index_name
from memdir.sessions.store import SessionStore, message_record, session_key

SESSIONS = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}}


def _chat(ws: Path, state_dir: Path, text: str, agent: str | None = None) -> Path:
    """Record one exchange the way the agent loop does, in the settings' own sessions folder."""
    settings = load_config(workspace=ws, state_dir=state_dir, agent_id=agent, overrides=SESSIONS).settings
    SessionStore(settings.sessions_dir).append(session_key(settings.agent_id, "main"), message_record("user", text))
    return settings.sessions_dir


def _found(ws: Path, state_dir: Path, query: str, agent: str | None = None) -> list[str]:
    with Memory(ws, state_dir=state_dir, agent_id=agent, config=SESSIONS) as mem:
        return [f"{r.source}:{r.path}" for r in mem.search(query).results]


def test_two_workspaces_without_an_agent_id_keep_their_own_transcripts(make_workspace, state_dir: Path):
    a = make_workspace({"MEMORY.md": "# A\n"}, name="alpha")
    b = make_workspace({"MEMORY.md": "# B\n"}, name="beta")
    dir_a = _chat(a, state_dir, "The capybara project ships on Tuesday.")
    dir_b = _chat(b, state_dir, "The narwhal budget is approved.")
    assert dir_a != dir_b
    assert dir_a == state_dir.resolve() / "agents" / workspace_index_name(a) / "sessions"
    assert not (state_dir / "agents" / "main").exists()
    assert _found(a, state_dir, "capybara project")[:1] == ["sessions:sessions/" + _only_transcript(dir_a)]
    assert _found(b, state_dir, "capybara project") == []  # never another workspace's chat
    assert _found(b, state_dir, "narwhal budget") != [] and _found(a, state_dir, "narwhal budget") == []


def test_with_an_agent_id_transcripts_are_the_agents_as_in_openclaw(make_workspace, state_dir: Path):
    a = make_workspace({"MEMORY.md": "# A\n"}, name="alpha")
    b = make_workspace({"MEMORY.md": "# B\n"}, name="beta")
    assert _chat(a, state_dir, "one", agent="ops") == _chat(b, state_dir, "two", agent="ops") == (
        state_dir.resolve() / "agents" / "ops" / "sessions")


def _only_transcript(folder: Path) -> str:
    (name,) = [p.name for p in folder.glob("*.jsonl")]
    return name


def _ltm(ws: Path, state_dir: Path, agent: str | None = None):  # type: ignore[no-untyped-def]
    pytest.importorskip("lancedb")
    from memdir.ltm.memory import LongTermMemory

    settings = load_config(workspace=ws, state_dir=state_dir, agent_id=agent).settings
    return LongTermMemory(settings, provider=AxisProvider())


def test_long_term_memory_is_per_workspace_without_an_agent_id_and_shared_with_one(make_workspace,
                                                                                   state_dir: Path):
    a = make_workspace(name="alpha")
    b = make_workspace(name="beta")
    with _ltm(a, state_dir) as la, _ltm(b, state_dir) as lb:
        assert la.db_path == state_dir.resolve() / "ltm" / workspace_index_name(a)
        la.store("I prefer dark mode")
        assert [r.text for r in la.list()] == ["I prefer dark mode"]
        assert lb.list() == []  # another workspace never sees it
    with _ltm(a, state_dir, "ops") as oa, _ltm(b, state_dir, "ops") as ob:
        oa.store("Deploys happen on Fridays")
        assert [r.text for r in ob.list()] == ["Deploys happen on Fridays"]  # one agent, one store
        assert oa.db_path == ob.db_path == state_dir.resolve() / "ltm" / "ops"


def test_agent_id_token_in_configured_paths_follows_the_same_key(make_workspace, tmp_path: Path, state_dir: Path):
    a = make_workspace(name="alpha")
    b = make_workspace(name="beta")
    over = {"memorySearch": {"store": {"path": str(tmp_path / "idx" / "{agentId}.sqlite")}},
            "longTermMemory": {"dbPath": str(tmp_path / "ltm-root" / "{agentId}")}}
    from memdir.ltm.settings import db_path

    sa = load_config(workspace=a, state_dir=state_dir, overrides=over).settings
    sb = load_config(workspace=b, state_dir=state_dir, overrides=over).settings
    assert sa.index_path != sb.index_path and db_path(sa) != db_path(sb)
    assert sa.index_path == (tmp_path / "idx" / f"{workspace_index_name(a)}.sqlite").resolve()
    so = load_config(workspace=a, state_dir=state_dir, agent_id="ops", overrides=over).settings
    assert so.index_path == (tmp_path / "idx" / "ops.sqlite").resolve()
    assert db_path(so) == (tmp_path / "ltm-root" / "ops").resolve()


def test_the_workspace_that_owned_agent_main_keeps_its_old_state(make_workspace, state_dir: Path, run_cli):
    """An upgrade: agent main's transcripts and memories stay with the one workspace whose index
    was ``main.sqlite``; any other workspace starts its own, and ``status`` says which is which."""
    old = make_workspace({"MEMORY.md": "# old\n"}, name="old")
    other = make_workspace({"MEMORY.md": "# other\n"}, name="other")
    cfg = {"memorySearch": {"provider": "none"}}
    with Memory(old, state_dir=state_dir, agent_id="main", config=cfg) as mem:  # what memdir used to do
        mem.sync()
    legacy = _chat(old, state_dir, "the walrus fact", agent="main")
    assert legacy == state_dir.resolve() / "agents" / "main" / "sessions"

    kept = load_config(workspace=old, state_dir=state_dir).settings
    assert (kept.state_key, kept.state_key_kind, kept.sessions_dir) == ("main", "legacy", legacy)
    fresh = load_config(workspace=other, state_dir=state_dir).settings
    assert (fresh.state_key, fresh.state_key_kind) == (workspace_index_name(other), "workspace")

    st = json.loads(run_cli("status", "--json", "-w", str(old), check=True).stdout)
    assert (st["stateKey"], st["stateKeyKind"], st["sessionsDir"]) == ("main", "legacy", str(legacy))
    assert st["longTermMemoryPath"] == str(state_dir.resolve() / "ltm" / "main")
    text = run_cli("status", "-w", str(old), check=True).stdout
    assert f"Agent state: {legacy} (transcripts)" in text and "before memdir kept state per workspace" in text
    text = run_cli("status", "-w", str(other), check=True).stdout
    assert f"agents/{workspace_index_name(other)}/sessions" in text and "this workspace's own" in text

    # Once the workspace has state of its own, that is what it uses.
    (state_dir / "agents" / workspace_index_name(old) / "sessions").mkdir(parents=True)
    moved = load_config(workspace=old, state_dir=state_dir).settings
    assert (moved.state_key, moved.state_key_kind) == (workspace_index_name(old), "workspace")
