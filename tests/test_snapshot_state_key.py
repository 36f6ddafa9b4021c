"""The CLI's remembered settings follow the folders that decide whose state a workspace uses.

Before memdir kept state per workspace, the workspace that owned ``main.sqlite`` keeps agent
``main``'s transcripts and long-term memories until it has state of its own
(:func:`memdir.state_key.uses_legacy_state`).  That depends on folders, not on any input of the
settings snapshot's key, so the snapshot kept the old answer.
"""

from __future__ import annotations

import json
from pathlib import Path

from memdir.api import Memory
from memdir.config import load_config, workspace_index_name
from memdir.sessions.store import SessionStore, message_record, session_key


def test_searches_follow_main_state_moved_under_the_workspaces_own_key(make_workspace, state_dir: Path,
                                                                      run_cli) -> None:
    """The CLI remembers settings between runs, the state key among them, but which state is the
    workspace's depends on folders no input of the snapshot covers: after ``mv agents/main
    agents/<key>`` every search still indexed ``agents/main/sessions`` (gone), dropping the moved
    transcripts from the index, and ``memdir index`` put them back: a flip-flop for good."""
    toml = ('[memorySearch]\nprovider = "none"\nsources = ["memory", "sessions"]\n\n'
            "[memorySearch.experimental]\nsessionMemory = true\n")
    ws = make_workspace({"MEMORY.md": "# Notes\n", "memdir.toml": toml})
    with Memory(ws, state_dir=state_dir, agent_id="main") as mem:  # memdir before 11-23: main.sqlite
        mem.sync()
    main = load_config(workspace=ws, state_dir=state_dir, agent_id="main").settings
    SessionStore(main.sessions_dir).append(session_key("main", "main"),
                                           message_record("user", "the walrus named Quibble lives in the attic"))

    def found() -> list[str]:
        out = json.loads(run_cli("search", "walrus Quibble", "--json", "-w", str(ws), check=True).stdout)
        return [r["path"] for r in out["results"]]

    assert found() and found()  # the second run reads the remembered settings
    own = workspace_index_name(ws)
    (state_dir / "agents" / "main").rename(state_dir / "agents" / own)
    assert found(), "the moved transcript dropped from the index"
    st = json.loads(run_cli("status", "--json", "-w", str(ws), check=True).stdout)
    assert st["stateKey"] == own and not st["syncPending"]
