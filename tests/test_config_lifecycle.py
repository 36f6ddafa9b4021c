"""Settings edited over the life of an index: what must rebuild it, and what must not."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from helpers import deep_merge
from memdir.api import Memory

NOTE = "\n".join(f"line {i} the quokka migration plan step {i} " + "w" * 50 for i in range(120))


def _keyword(extra: dict[str, Any] | None = None) -> dict[str, Any]:
    return deep_merge({"memorySearch": {"provider": "none"}}, extra or {})


@pytest.mark.parametrize(("change", "key", "value"), [
    ({"memorySearch": {"chunking": {"tokens": 80}}}, "chunkTokens", 80),
    ({"memorySearch": {"chunking": {"overlap": 0}}}, "chunkOverlap", 0),
    ({"memorySearch": {"store": {"fts": {"tokenizer": "trigram"}}}}, "ftsTokenizer", "trigram"),
    ({"userTimezone": "Asia/Tokyo"}, "userTimezone", "Asia/Tokyo"),
])
def test_a_setting_that_shapes_the_index_is_applied_by_the_next_search(make_workspace, change, key, value):
    """No note changed after the edit, so no file was dirty and searches kept answering from the
    index built with the old settings (old chunks, the old tokenizer) for as long as that lasted;
    ``status`` said "Dirty: no"."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    with Memory(ws, config=_keyword()) as mem:
        mem.sync()
        built = mem.store.read_meta()
    assert built[key] != value
    with Memory(ws, config=_keyword(change)) as mem:
        st = mem.status()
        assert st["syncPending"] and st["dirty"] and key in (st["rebuildReason"] or "")
        assert st["dirtyCount"] == 0  # no note changed: the settings did
        assert mem.search("quokka migration").results
        meta = mem.store.read_meta()
        assert meta[key] == value and meta["builtAt"] != built["builtAt"]
        st = mem.status()
        assert not st["syncPending"] and st["rebuildReason"] is None


def test_a_tokenizer_switch_finds_what_the_new_tokenizer_matches_at_once(make_workspace):
    """Trigrams match part of a word; the unicode61 index the search kept using did not."""
    ws = make_workspace({"MEMORY.md": "The deployment uses kubernetesoperators everywhere."})
    with Memory(ws, config=_keyword()) as mem:
        assert not mem.search("netesoper").results
    trigram = _keyword({"memorySearch": {"store": {"fts": {"tokenizer": "trigram"}}}})
    with Memory(ws, config=trigram) as mem:
        assert [r.path for r in mem.search("netesoper").results] == ["MEMORY.md"]


@pytest.mark.parametrize("change", [
    {"memorySearch": {"query": {"maxResults": 3, "minScore": 0.1}}},
    {"memorySearch": {"query": {"hybrid": {"vectorWeight": 0.2, "candidateMultiplier": 9,
                                           "mmr": {"enabled": True}, "temporalDecay": {"enabled": True}}}}},
    {"memorySearch": {"sync": {"searchBudgetMs": 500, "watchDebounceMs": 10}, "cache": {"maxEntries": 10}}},
    {"memory": {"citations": "off"}, "memorySearch": {"remote": {"maxRetries": 1}}},
])
def test_a_query_time_setting_rebuilds_nothing(make_workspace, change):
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    with Memory(ws, config=_keyword()) as mem:
        mem.sync()
        built = mem.store.read_meta()
    with Memory(ws, config=_keyword(change)) as mem:
        st = mem.status()
        assert not st["syncPending"] and st["rebuildReason"] is None
        assert mem.search("quokka").results
        assert mem.store.read_meta()["builtAt"] == built["builtAt"]
        report = mem.sync()
        assert not report.full and report.indexed == 0


def test_cli_status_and_search_after_editing_the_config_file(make_workspace, run_cli):
    """The user's path: index, edit memdir.toml, ask ``status``, search."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    cfg = ws / "memdir.toml"
    cfg.write_text('[memorySearch]\nprovider = "none"\n')
    run_cli("index", "-w", str(ws), check=True)
    cfg.write_text('[memorySearch]\nprovider = "none"\n[memorySearch.chunking]\ntokens = 80\n')
    st = json.loads(run_cli("status", "-w", str(ws), "--json", check=True).stdout)
    assert st["syncPending"] and "chunkTokens changed (200 → 80)" in st["rebuildReason"]
    text = run_cli("status", "-w", str(ws), check=True).stdout
    assert "Dirty: yes (to be rebuilt: chunkTokens changed (200 → 80)" in text
    out = json.loads(run_cli("search", "quokka", "-w", str(ws), "--json", check=True).stdout)
    assert out["results"]
    st = json.loads(run_cli("status", "-w", str(ws), "--json", check=True).stdout)
    assert not st["syncPending"] and st["rebuildReason"] is None


def test_status_names_a_pending_rebuild_when_notes_changed_too(make_workspace, tmp_path, run_cli):
    """extraPaths (or sources) changed and a note edited: status said "Dirty: yes (1 changed, 0
    removed; the next search or the watcher syncs them)", not that the whole index is rebuilt."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    extra = make_workspace({"team.md": "- the zebra crossing\n"}, name="extra")
    cfg = ws / "memdir.toml"
    cfg.write_text('[memorySearch]\nprovider = "none"\n')
    run_cli("index", "-w", str(ws), check=True)
    cfg.write_text(f'[memorySearch]\nprovider = "none"\nextraPaths = ["{extra}"]\n')
    st = json.loads(run_cli("status", "-w", str(ws), "--json", check=True).stdout)
    assert st["rebuildReason"] == "extraPaths changed" and st["dirtyCount"] == 1
    text = run_cli("status", "-w", str(ws), check=True).stdout
    assert ("Dirty: yes (to be rebuilt: extraPaths changed; 1 changed, 0 removed; the next search, memdir index or "
            "the watcher does it)") in text, text


def test_a_search_without_sync_says_the_index_was_built_with_other_settings(make_workspace, run_cli):
    """``--no-sync`` (and ``sync=False``) cannot rebuild: it answered from the chunks cut with the
    old chunk size, not ``stale`` and without a word; it now says which setting changed."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    cfg = ws / "memdir.toml"
    cfg.write_text('[memorySearch]\nprovider = "none"\n')
    run_cli("index", "-w", str(ws), check=True)
    out = json.loads(run_cli("search", "quokka", "-w", str(ws), "--no-sync", "--json", check=True).stdout)
    assert out["results"] and not out.get("stale")
    assert not [w for w in out.get("warnings", []) if "rebuilt" in w]
    cfg.write_text('[memorySearch]\nprovider = "none"\n[memorySearch.chunking]\ntokens = 80\n')
    run = run_cli("search", "quokka", "-w", str(ws), "--no-sync", "--json", check=True)
    out = json.loads(run.stdout)
    assert out["results"] and out["stale"] is True
    assert any("must be rebuilt (chunkTokens changed (200 → 80))" in w for w in out["warnings"]), out
    text = run_cli("search", "quokka", "-w", str(ws), "--no-sync", check=True)
    assert "chunkTokens changed (200 → 80)" in text.stderr
    with Memory(ws, config=_keyword({"memorySearch": {"chunking": {"tokens": 80}}})) as mem:
        response = mem.search("quokka", sync=False)
        assert response.stale and any("chunkTokens changed" in w for w in response.warnings)
        synced = mem.search("quokka")  # a sync-on search rebuilds, and then there is nothing to say
        assert not synced.stale and not [w for w in synced.warnings if "rebuilt" in w]
        again = mem.search("quokka", sync=False)
        assert not again.stale and not [w for w in again.warnings if "rebuilt" in w]


def test_a_search_without_sync_says_another_memdir_version_wrote_the_index(make_workspace):
    import sqlite3

    from memdir.index_identity import CHUNKER_VERSION
    from memdir.stores.sqlite import META_KEY

    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    with Memory(ws, config=_keyword()) as mem:
        mem.sync()
        path = mem.store.location
    con = sqlite3.connect(path)
    meta = json.loads(con.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()[0])
    meta["chunker"] = CHUNKER_VERSION - 1
    con.execute("UPDATE meta SET value = ? WHERE key = ?", (json.dumps(meta), META_KEY))
    con.commit()
    con.close()
    with Memory(ws, config=_keyword()) as mem:
        response = mem.search("quokka", sync=False)
        assert response.results and response.stale
        assert any(f"chunker changed ({CHUNKER_VERSION - 1} → {CHUNKER_VERSION})" in w for w in response.warnings)


def test_the_watcher_rebuilds_for_settings_changed_while_it_was_not_running(make_workspace):
    """A host (``memdir mcp``) started after a chunk-size edit: its watcher finds no changed note,
    but the settings: it rebuilds, so the first search does not have to."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    with Memory(ws, config=_keyword()) as mem:
        mem.sync()
    events: list[dict[str, Any]] = []
    with Memory(ws, config=_keyword({"memorySearch": {"chunking": {"tokens": 80}}})) as mem:
        watcher = mem.watch(on_event=events.append)
        try:
            assert watcher.ready.wait(30)
            deadline = time.monotonic() + 30
            while mem.store.read_meta()["chunkTokens"] != 80 and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            watcher.stop()
        assert mem.store.read_meta()["chunkTokens"] == 80, events


def test_memdir_index_says_which_setting_made_it_rebuild(make_workspace, run_cli):
    """``--json`` had the reason; the summary line said only "full reindex"."""
    ws = make_workspace({"memory/2026-01-12.md": NOTE})
    cfg = ws / "memdir.toml"
    cfg.write_text('[memorySearch]\nprovider = "none"\n')
    first = run_cli("index", "-w", str(ws), check=True).stdout
    assert "full reindex, " in first  # a first build: nothing to explain
    cfg.write_text('[memorySearch]\nprovider = "none"\nextraPaths = ["notes"]\n')
    (ws / "notes").mkdir()
    (ws / "notes" / "team.md").write_text("The quokka sync is on Fridays.\n")
    again = run_cli("index", "-w", str(ws), check=True).stdout
    assert "full reindex (extraPaths changed)" in again


def test_postgres_text_search_config_switch_is_applied_by_the_next_search(pg, make_workspace, state_dir):
    """The stored stems were the old configuration's until a note changed: "running" kept missing
    "runs" after switching to english, search after search."""
    ws = make_workspace({"memory/a.md": "The dog runs along the beach every morning.\n",
                         "memory/b.md": "A quiet note about lunch.\n"})
    simple = pg.config(_keyword(), textSearchConfig="simple")
    with Memory(ws, agent_id="cfg", config=simple, state_dir=state_dir) as mem:
        assert not mem.search("running").results  # no stems with "simple"
    english = pg.config(_keyword(), textSearchConfig="english")
    with Memory(ws, agent_id="cfg", config=english, state_dir=state_dir) as mem:
        assert "textSearchConfig" in (mem.status()["rebuildReason"] or "")
        assert [r.path for r in mem.search("running").results] == ["memory/a.md"]
        assert mem.status()["rebuildReason"] is None


def test_search_help_gives_the_configured_result_count_as_the_default(make_workspace, run_cli):
    """It said "(default 6)" whatever query.maxResults was set to."""
    ws = make_workspace({"MEMORY.md": "".join(f"quokka fact {i}\n\n" + "filler " * 200 + "\n" for i in range(12))})
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n[memorySearch.query]\nmaxResults = 9\n'
                                     "minScore = 0\n")
    assert "the configured maxResults" in " ".join(run_cli("search", "--help", check=True).stdout.split())
    out = json.loads(run_cli("search", "quokka fact", "-w", str(ws), "--json", check=True).stdout)
    assert len(out["results"]) == 9
