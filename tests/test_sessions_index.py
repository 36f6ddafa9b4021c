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
def setup(make_workspace, state_dir: Path, backend):
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
    cfg = backend.config({"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                                           "experimental": {"sessionMemory": True}}})
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
        texts = " ".join(c.text for *_, chunks in mem.store.export_files() for c in chunks)
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


def test_status_does_not_promise_a_search_syncs_a_transcript_it_waits_for(setup):
    """A transcript grown less than the delta thresholds was "changed; the next search or the
    watcher syncs them" in status, before and after every search (which leave it for later)."""
    from memdir.cli import _dirty_words

    ws, t, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        with t.open("a") as fh:
            fh.write(_msg("user", "remember the pelican protocol", 1_700_000_200_000))
        for _ in range(2):
            st = mem.status()
            assert (st["dirty"], st["dirtyCount"], st["waitingCount"], st["syncPending"]) == (True, 1, 1, False)
            assert "1 transcript grown less than sync.sessions.deltaBytes" in _dirty_words(st)
            assert "the next search" not in _dirty_words(st)
            mem.search("pelican")
        (ws / "memory" / "2026-01-13.md").write_text("- a new note\n")
        st = mem.status()
        assert (st["dirtyCount"], st["waitingCount"], st["syncPending"]) == (2, 1, True)
        assert _dirty_words(st).startswith(" (1 changed, 0 removed; the next search or the watcher syncs them; 1 ")
        mem.sync(reason="cli")
        st = mem.status()
        assert (st["dirty"], st["waitingCount"], st["syncPending"]) == (False, 0, False)


def test_growth_past_the_message_threshold_is_indexed_on_search(setup):
    ws, t, cfg = setup
    cfg["memorySearch"]["sync"] = {"sessions": {"deltaMessages": 3}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        with t.open("a") as fh:
            for i in range(3):
                fh.write(_msg("user", f"heron note {i}", 1_700_000_300_000 + i))
        assert mem.search("heron").results


@pytest.mark.parametrize(("delta_bytes", "delta_messages", "indexed"), [
    (0, 50, True),  # R§6: a bytes threshold of 0 is hit by any growth (it waited for 50 messages)
    (0, 0, True),
    (100_000, 0, False),  # messages are not counted without a threshold: wait for 100 KB
])
def test_a_zero_delta_threshold_is_openclaws(setup, delta_bytes: int, delta_messages: int, indexed: bool):
    ws, t, cfg = setup
    cfg["memorySearch"]["sync"] = {"sessions": {"deltaBytes": delta_bytes, "deltaMessages": delta_messages}}
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        with t.open("a") as fh:
            fh.write(_msg("user", "remember the pelican protocol", 1_700_000_200_000))
        assert bool(mem.search("pelican").results) is indexed


def test_forced_reindex_includes_sessions(setup):
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        report = mem.sync(force=True)
        assert report.full and report.indexed == 2
        assert mem.search("flamingo").results[0].source == "sessions"


@pytest.mark.parametrize("reason", ["watch", "session-start"])
def test_a_rebuild_started_by_the_watcher_or_a_session_start_keeps_the_transcripts(setup, reason: str):
    """OpenClaw left sessions out of a full reindex triggered by ``watch`` or ``session-start`` and
    published an index without session rows while its meta still listed ``sessions`` (R§6, R§18)."""
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
    cfg["memorySearch"]["chunking"] = {"tokens": 300, "overlap": 30}  # a new index fingerprint: full rebuild
    with Memory(ws, config=cfg) as mem:
        report = mem.sync(reason=reason)
        assert report.full
        counts = {c["source"]: c for c in mem.status()["sourceCounts"]}
        assert counts["sessions"]["files"] == 1 and counts["sessions"]["chunks"] >= 1
        assert mem.search("flamingo migration", sync=False).results[0].source == "sessions"


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


def test_one_hostile_record_never_hides_the_rest_of_a_transcript(tmp_path: Path) -> None:
    """A list-valued role (unhashable) and a lone surrogate escape (not encodable as UTF-8) each made
    the whole transcript unindexable, and ``memory_get`` on it raised; a line with one byte that is
    not UTF-8 lost its message."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    with Memory(ws, state_dir=tmp_path / "state", config=cfg) as mem:
        folder = mem.settings.sessions_dir
        folder.mkdir(parents=True)
        (folder / "t.jsonl").write_bytes(
            _msg("user", "the pelican protocol starts Monday", 1_700_000_000_000).encode()
            + b'{"type":"message","message":{"role":["user"],"content":"odd role"}}\n'
            + b'{"type":"message","message":{"role":"user","content":"lone \\ud800 surrogate zebra"}}\n'
            + b'{"type":"message","message":{"role":"assistant","content":"bad \xff byte giraffe"}}\n')
        report = mem.sync()
        assert not report.skipped
        assert [h.path for h in mem.search("pelican protocol").results] == ["sessions/t.jsonl"]
        assert mem.search("zebra").results and mem.search("giraffe").results
        text = mem.get("sessions/t.jsonl").text
        assert text.splitlines() == ["User: the pelican protocol starts Monday", "User: lone \ufffd surrogate zebra",
                                     "Assistant: bad \ufffd byte giraffe"]


def test_a_line_still_being_written_is_indexed_once_complete(run_cli, make_workspace, state_dir: Path) -> None:
    """A transcript read while its last line is half written: the fragment is not indexed as text,
    and the message is found once the line is complete (``memdir index`` as a subprocess)."""
    ws = make_workspace({"memory/a.md": "# a\n- note\n",
                         "memdir.json": json.dumps({"memorySearch": {
                             "provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}})})
    folder = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    folder.mkdir(parents=True)
    line = _msg("user", "the quokka arrives at noon", 1_700_000_000_000)
    t = folder / "g.jsonl"
    t.write_text(_msg("user", "first armadillo", 1_700_000_000_000) + line[:30])
    assert run_cli("-w", str(ws), "index").returncode == 0

    def found(word: str) -> list[str]:
        out = run_cli("-w", str(ws), "search", word, "--json")
        return [r["path"] for r in json.loads(out.stdout)["results"]]

    assert found("armadillo") == ["sessions/g.jsonl"] and found("quokka") == []
    with t.open("a") as fh:
        fh.write(line[30:])
    assert run_cli("-w", str(ws), "index").returncode == 0
    assert found("quokka") == ["sessions/g.jsonl"]
    assert run_cli("-w", str(ws), "get", "sessions/g.jsonl").stdout.splitlines() == [
        "User: first armadillo", "User: the quokka arrives at noon"]


def test_a_transcript_swapped_after_listing_is_skipped_not_waited_on(tmp_path: Path) -> None:
    """Between the sync's listing and its read, a transcript replaced by a FIFO made ``open`` wait for
    a writer forever (the index's writer lock held), and one replaced by a symlink was read wherever
    it pointed."""
    import os
    import threading

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    outside = tmp_path / "outside.jsonl"
    outside.write_text(_msg("user", "a private walrus elsewhere", 1_700_000_000_000))
    with Memory(ws, state_dir=tmp_path / "state", config=cfg) as mem:
        folder = mem.settings.sessions_dir
        folder.mkdir(parents=True)
        for name in ("fifo", "link", "kept"):
            (folder / f"{name}.jsonl").write_text(_msg("user", f"the {name} pangolin", 1_700_000_000_000))
        real_list = mem.indexer.list_files

        def list_then_swap(*args, **kwargs):
            found = real_list(*args, **kwargs)
            (folder / "fifo.jsonl").unlink()
            os.mkfifo(folder / "fifo.jsonl")
            (folder / "link.jsonl").unlink()
            (folder / "link.jsonl").symlink_to(outside)
            return found

        mem.indexer.list_files = list_then_swap
        done: list[object] = []
        worker = threading.Thread(target=lambda: done.append(mem.sync()), daemon=True)
        worker.start()
        worker.join(30)
        if worker.is_alive():  # let the stuck open return, so the test fails instead of hanging
            os.close(os.open(folder / "fifo.jsonl", os.O_WRONLY | os.O_NONBLOCK))
            worker.join(10)
        assert done, "the sync waited on a FIFO"
        skipped = {s["path"]: s["error"] for s in done[0].skipped}
        assert "FIFO" in skipped["sessions/fifo.jsonl"] and "sessions/link.jsonl" in skipped
        mem.indexer.list_files = real_list
        assert [h.path for h in mem.search("pangolin").results] == ["sessions/kept.jsonl"]
        assert not mem.search("walrus").results


def test_a_conversation_stays_searchable_after_new_sets_its_transcript_aside(tmp_path: Path) -> None:
    """``/new`` renames the transcript to ``<id>.jsonl.reset.<time>``; only ``*.jsonl`` was listed, so
    the next sync removed the whole conversation from the index (R§3 [v4.12] keeps archived ones)."""
    from memdir.sessions.store import SessionStore, message_record
    from memdir.watch import WatchPlan

    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    with Memory(ws, state_dir=tmp_path / "state", config=cfg) as mem:
        store = SessionStore(mem.settings.sessions_dir)
        key = "agent:main:main"
        store.open_session(key)
        store.append(key, message_record("user", "the narwhal budget was approved on Tuesday"))
        mem.sync()
        assert [h.path for h in mem.search("narwhal budget").results] == [f"sessions/{store.get(key).session_id}.jsonl"]
        rotated = store.rotate(key).rotated_file
        assert rotated is not None
        mem.sync(reason="watch")
        hits = mem.search("narwhal budget").results
        assert [h.path for h in hits] == [f"sessions/{rotated.name}"]
        assert mem.get(hits[0].path).text == "User: the narwhal budget was approved on Tuesday"
        assert WatchPlan(ws, [], mem.settings.sessions_dir).file_matters(str(rotated))


def test_status_counts_the_transcripts_it_would_index(setup):
    # "Indexed: 2/1 files": the indexed count took in transcripts, the scanned count did not
    ws, _, cfg = setup
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        st = mem.status()
        assert (st["files"], st["scannedFiles"]) == (2, 2)
    only_sessions = {**cfg, "memorySearch": {**cfg["memorySearch"], "sources": ["sessions"]}}
    with Memory(ws, config=only_sessions) as mem:
        mem.sync()
        st = mem.status()
        assert (st["files"], st["scannedFiles"]) == (1, 1)
