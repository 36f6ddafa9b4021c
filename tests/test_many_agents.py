"""Many agents on one machine: agent ids, finding an agent's state, one state folder for all."""

from __future__ import annotations

from pathlib import Path

KEYWORDS = '[memorySearch]\nprovider = "none"\n'


def test_a_search_for_a_new_agent_from_a_folder_without_notes_claims_nothing(make_workspace, tmp_path: Path,
                                                                            state_dir: Path, run_cli):
    """``memdir --agent opps search …`` (a typo, or an agent missing from agents.list) run from a
    folder without notes made that folder the agent's workspace: 'No matches.', and the agent's
    real workspace was then refused its index ('belongs to workspace …')."""
    state_dir.mkdir(parents=True)
    (state_dir / "memdir.toml").write_text(KEYWORDS, encoding="utf-8")
    ops = make_workspace({"MEMORY.md": "The kiwi rollout is on Tuesday.\n"}, name="ops-ws")
    run_cli("-w", str(ops), "--agent", "ops", "index", check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()

    proc = run_cli("--agent", "opps", "search", "kiwi", cwd=elsewhere)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "agent 'opps' has no index yet" in proc.stderr and str(elsewhere) in proc.stderr
    assert "did you mean 'ops'?" in proc.stderr and "the agents in" in proc.stderr
    assert "No matches." not in proc.stdout
    assert not list((state_dir / "memory").glob("opps.sqlite*"))

    # the agent id is still free for its real workspace
    opps = make_workspace({"MEMORY.md": "The kiwi audit is on Friday.\n"}, name="opps-ws")
    found = run_cli("-w", str(opps), "--agent", "opps", "search", "kiwi", check=True)
    assert "audit" in found.stdout
    # a known agent, a chosen workspace, or a folder with notes is searched as before
    assert "rollout" in run_cli("--agent", "ops", "search", "kiwi", cwd=ops, check=True).stdout
    assert "No matches." in run_cli("-w", str(elsewhere), "--agent", "fresh", "search", "kiwi", check=True).stdout


def test_an_agent_id_given_as_bytes_is_that_agent_and_other_types_are_refused(make_workspace, state_dir: Path):
    """A host reading its agent ids from Redis (bytes) made ``Memory(ws, agent_id=b"ops")`` agent
    "b'ops'": another index (``b'ops'.sqlite``), transcripts and long-term memory than agent ops's;
    an int or a list was its repr too ('['x'].sqlite')."""
    import pytest

    from memdir import Memory
    from memdir.config import ConfigError

    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    with Memory(ws, agent_id=b"ops", config={"memorySearch": {"provider": "none"}}) as mem:
        assert mem.settings.agent_id == "ops"
        assert mem.index_path == state_dir / "memory" / "ops.sqlite"
    for wrong in (5, ["ops"]):
        with pytest.raises(ConfigError, match="agent id must be text"):
            Memory(ws, agent_id=wrong)  # type: ignore[arg-type]


def test_an_agent_id_in_either_unicode_form_is_one_agent(make_workspace, tmp_path: Path, state_dir: Path):
    """'café' typed (composed, NFC) and 'café' from a folder name synced from macOS (decomposed,
    NFD) look the same wherever they are printed, but were two agents: two indexes, transcripts
    and long-term memories, and an agents.list entry spelled one way never applied to the other."""
    import json
    import unicodedata

    import pytest

    from memdir.config import ConfigError, load_config

    composed, decomposed = (unicodedata.normalize(form, "café") for form in ("NFC", "NFD"))
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    settings = load_config(workspace=ws, agent_id=decomposed).settings
    assert settings.agent_id == composed and settings.index_path == state_dir / "memory" / f"{composed}.sqlite"
    assert settings.sessions_dir == state_dir / "agents" / composed / "sessions"

    cfg = tmp_path / "agents.json"
    cfg.write_text(json.dumps({"agents": {"list": [{"id": composed, "workspace": str(ws)}]}}), encoding="utf-8")
    assert load_config(config_path=cfg, agent_id=decomposed).settings.workspace_path == ws
    twice = {"agents": {"list": [{"id": composed, "workspace": str(ws)}, {"id": decomposed, "workspace": "/"}]}}
    cfg.write_text(json.dumps(twice), encoding="utf-8")
    with pytest.raises(ConfigError, match="configured twice"):
        load_config(config_path=cfg, agent_id=composed)

    # state kept under the decomposed spelling before is still this agent's, whichever is typed
    (state_dir / "agents" / decomposed / "sessions").mkdir(parents=True)
    assert load_config(workspace=ws, agent_id=composed).settings.agent_id == decomposed


def test_an_agents_rebuild_leaves_the_index_of_an_agent_named_after_its_temp_files(make_workspace, state_dir: Path):
    """Agent 'ops''s rebuild leftovers are ``ops.sqlite.tmp-<12 hex>``, found by a glob of
    ``ops.sqlite.tmp-*``, which took in agent 'ops.sqlite.tmp-x''s index, lock and WAL (and
    'ops.sqlite.vec8.tmp-1''s, by the vector file's leftovers): agent ops's sync deleted them."""
    from memdir import Memory

    keywords = {"memorySearch": {"provider": "none"}}
    ops = make_workspace({"MEMORY.md": "ops kiwi\n"}, name="ops")
    other = make_workspace({"MEMORY.md": "neighbour kiwi\n"}, name="other")
    folder = state_dir / "memory"
    neighbours = ["ops.sqlite.tmp-x", "ops.sqlite.vec8.tmp-1", "ops.sqlite.tmp-0123456789ab"]
    for agent in neighbours:
        with Memory(other, agent_id=agent, config=keywords) as mem:
            mem.sync()
    leftovers = [folder / "ops.sqlite.tmp-abcdefabcdef", folder / "ops.sqlite.tmp-abcdefabcdef-wal",
                 folder / "ops.sqlite.vec8.tmp-999999999-abcdef01"]
    with Memory(ops, agent_id="ops", config=keywords) as mem:
        mem.sync()
        for leftover in leftovers:  # a killed rebuild's (pid 999999999 is no process)
            leftover.write_bytes(b"")
        mem.sync(force=True)
    assert not [leftover for leftover in leftovers if leftover.exists()]
    for agent in neighbours:
        assert (folder / f"{agent}.sqlite").is_file() and (folder / f"{agent}.sqlite.lock").is_file(), agent
        with Memory(other, agent_id=agent, config=keywords) as mem:
            assert [hit.path for hit in mem.search("neighbour").results] == ["MEMORY.md"], agent


def test_an_agents_list_entry_whose_id_no_agent_can_have_is_a_configuration_error(make_workspace, tmp_path: Path,
                                                                                  run_cli):
    """An entry ``{"id": "ops ", "workspace": …}`` (copied with its space) or ``"a/b"`` applied to
    no agent without a word: ``--agent ops`` indexed the current folder instead, which then held
    agent ops's index against its real workspace."""
    import json

    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    for bad in ("ops ", "a/b"):
        cfg = tmp_path / "agents.json"
        cfg.write_text(json.dumps({"agents": {"defaults": {"memorySearch": {"provider": "none"}},
                                              "list": [{"id": "main", "workspace": str(ws)},
                                                       {"id": bad, "workspace": str(ws)}]}}), encoding="utf-8")
        proc = run_cli("-c", str(cfg), "--agent", "ops", "index", cwd=elsewhere)
        assert proc.returncode == 1 and f"agents.list[1].id in {cfg}: agent id {bad!r} is not a plain name" \
            in proc.stderr, proc.stderr
    assert not (tmp_path / "state" / "memory").exists()


def test_an_agent_id_claimed_by_a_folder_without_notes_says_how_to_take_it_back(make_workspace, tmp_path: Path,
                                                                               state_dir: Path, run_cli):
    """``memdir --agent bot index`` run in the wrong folder claimed agent bot for a folder without
    notes; its real workspace was told only 'give this workspace its own agent id', though
    deleting the empty index loses nothing."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    env = {"MEMDIR_PROVIDER": "none"}
    run_cli("--agent", "bot", "index", cwd=elsewhere, env=env, check=True)
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    index = state_dir / "memory" / "bot.sqlite"
    proc = run_cli("-w", str(ws), "--agent", "bot", "index", env=env)
    assert proc.returncode == 1
    assert (f"belongs to workspace {elsewhere}, not {ws}, but holds no notes" in proc.stderr
            and f"delete {index}" in proc.stderr), proc.stderr
    index.unlink()
    assert "kiwi" in run_cli("-w", str(ws), "--agent", "bot", "search", "kiwi", env=env, check=True).stdout



def test_an_agent_searched_from_another_folder_is_told_to_give_its_workspace(make_workspace, tmp_path: Path,
                                                                             run_cli):
    """``memdir --agent ops search …`` run away from agent ops's workspace (no -w) was told to give
    'this workspace its own agent id', where its user had only left out the agent's workspace."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    run_cli("-w", str(ws), "--agent", "ops", "index", env=env, check=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    proc = run_cli("--agent", "ops", "search", "kiwi", cwd=elsewhere, env=env)
    assert proc.returncode == 1
    assert (f"No workspace was given, so the current folder was taken: to use the index's own, add --workspace {ws}"
            in proc.stderr), proc.stderr
    chosen = run_cli("-w", str(elsewhere), "--agent", "ops", "search", "kiwi", env=env)
    assert chosen.returncode == 1 and "No workspace was given" not in chosen.stderr


def test_agents_sharing_one_store_path_never_search_each_others_transcripts(make_workspace, state_dir: Path):
    """``store.path`` without ``{agentId}`` gives every agent one index; with the sessions source
    each agent's sync put its own transcripts there beside the other's notes, and agent a's
    search answered agent b's chat ('bravo secret mango')."""
    import json

    from memdir import Memory

    ws = make_workspace({"MEMORY.md": "notes\n"})
    config = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                               "experimental": {"sessionMemory": True},
                               "store": {"path": str(state_dir / "shared.sqlite")}}}
    said = {"a": "alpha secret pineapple", "b": "bravo secret mango"}
    for agent, text in said.items():
        folder = state_dir / "agents" / agent / "sessions"
        folder.mkdir(parents=True)
        record = {"type": "message", "message": {"role": "user", "content": text}}
        (folder / "s.jsonl").write_text(json.dumps(record) + "\n", encoding="utf-8")
    with Memory(ws, agent_id="a", config=config) as a, Memory(ws, agent_id="b", config=config) as b:
        a.sync()
        b.sync()
        for agent, mem in (("a", a), ("b", b), ("a", a)):
            snippets = " ".join(hit.snippet for hit in mem.search("secret").results)
            assert said[agent] in snippets and said["b" if agent == "a" else "a"] not in snippets, (agent, snippets)
