"""The sessions source in the index: transcripts searchable beside memory files (R§6, R§8, R§18.10)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.config import load_config


def _msg(role: str, text: str, ts: int) -> str:
    return json.dumps({"type": "message", "timestamp": ts, "message": {"role": role, "content": text}}) + "\n"


@pytest.fixture
def setup(make_workspace, state_dir: Path):
    ws = make_workspace({"memory/2026-01-12.md": "# notes\n- unrelated daily note about lunch\n"})
    sessions = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    sessions.mkdir(parents=True)
    t = sessions / "s1.jsonl"
    t.write_text(
        json.dumps({"type": "session-meta", "id": "s1"}) + "\n"
        + _msg("user", "Our staging token is sk-abcdefghijklmnop1234, keep it safe", 1_700_000_000_000)
        + json.dumps({"type": "custom", "x": 1}) + "\n"
        + _msg("assistant", "Noted. The flamingo migration is scheduled for Friday.", 1_700_000_100_000)
    )
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    return ws, t, cfg


def test_transcripts_are_indexed_with_jsonl_line_numbers(setup):
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        report = mem.sync()
        assert report.indexed == 2
        hit = mem.search("flamingo migration").results[0]
        assert (hit.source, hit.path) == ("sessions", "sessions/s1.jsonl")
        assert (hit.start_line, hit.end_line) == (2, 4)  # JSONL lines of the two messages
        assert "Assistant: Noted." in hit.snippet
        counts = {c["source"]: c for c in mem.status()["sourceCounts"]}
        assert counts["sessions"]["files"] == 1 and counts["memory"]["files"] == 1


def test_secrets_never_reach_the_index(setup):
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        texts = " ".join(t for (t,) in mem.store.conn.execute("SELECT text FROM chunks"))
        assert "sk-abcdefghijklmnop1234" not in texts and "sk-abc…1234" in texts


def test_small_growth_waits_for_the_delta_threshold_on_search(setup):
    ws, t, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        with t.open("a") as fh:
            fh.write(_msg("user", "remember the pelican protocol", 1_700_000_200_000))
        assert not mem.search("pelican").results  # 1 message, < 100 KB: deferred
        assert mem.status()["dirty"] is True
        report = mem.sync(reason="cli")  # an explicit index always catches up
        assert report.indexed == 1
        assert mem.search("pelican").results[0].path == "sessions/s1.jsonl"


def test_growth_past_the_message_threshold_is_indexed_on_search(setup):
    ws, t, cfg = setup
    cfg["memorySearch"]["sync"] = {"sessions": {"deltaMessages": 3}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        with t.open("a") as fh:
            for i in range(3):
                fh.write(_msg("user", f"heron note {i}", 1_700_000_300_000 + i))
        assert mem.search("heron").results


def test_forced_reindex_includes_sessions(setup):
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        report = mem.sync(force=True)
        assert report.full and report.indexed == 2
        assert mem.search("flamingo").results[0].source == "sessions"


def test_session_hits_decay_by_message_time(setup):
    ws, _, cfg = setup
    cfg["memorySearch"]["query"] = {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        hit = mem.search("flamingo", explain=True, min_score=0).results[0]
        # written 2023-11-14: years old, so the multiplier is tiny (OpenClaw never decays sessions)
        assert hit.source == "sessions" and hit.explain["decay"] < 0.001


def test_without_the_flag_sessions_stay_out(setup):
    ws, _, cfg = setup
    cfg["memorySearch"]["experimental"] = {"sessionMemory": False}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        assert not mem.search("flamingo").results
