"""Clocks and time travel: file times in the future or far past, a clock stepped back, dates at the
edges.  Each test failed once; the case is described on each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from helpers import CoarseClockFolder
from memdir.api import Memory

KEYWORDS = {"memorySearch": {"provider": "none", "sync": {"watch": False}}}


def _found(mem: Memory, query: str) -> list[str]:
    return [r.path for r in mem.search(query, sync=False).results]


def test_a_note_dated_ahead_on_a_whole_second_file_system_is_not_dirty_for_ever(tmp_path: Path) -> None:
    """A note copied with ``rsync -t`` from a machine whose clock ran ahead, onto a USB stick or a
    network share (whole-second times): its stamp looked like one of a tick still open, so every
    sync read it again and ``memdir status`` said 'Dirty: yes (1 changed …)' for good."""
    ahead = 2_114_380_800  # 2037-01-01
    folder = CoarseClockFolder(tmp_path / "fat", {"ws/memory/ideas.md": "apple pie\n"}, mtime=ahead)
    try:
        ws = folder.root / "ws"
        note = ws / "memory" / "ideas.md"
        with Memory(ws, config=KEYWORDS) as mem:
            assert mem.sync().indexed == 1
            assert not mem.status()["dirty"]
            assert mem.sync().indexed == 0
            note.write_text("apple tan\n")  # same size, the time set ahead again: the ctime tells
            os.utime(note, (ahead, ahead))
            mem.sync()
            assert _found(mem, "tan") == ["memory/ideas.md"]
    finally:
        folder.release()


def test_a_note_a_few_seconds_ahead_on_a_whole_second_file_system_is_read_again_until_its_second_has_passed(
        tmp_path: Path) -> None:
    """rsync -t from a machine whose clock runs a few seconds fast: the second its stamp names is
    still to come, and a same-size edit made in it keeps that stamp, so the note is read again by
    each sync until then (a stamp a year ahead is not: see above)."""
    import time

    ahead = int(time.time()) + 30
    folder = CoarseClockFolder(tmp_path / "fat", {"ws/memory/ideas.md": "apple pie\n"}, mtime=ahead)
    try:
        with Memory(folder.root / "ws", config=KEYWORDS) as mem:
            assert mem.sync().indexed == 1
            assert mem.status()["dirty"]  # to be read again
    finally:
        folder.release()


def test_notes_whose_files_keep_no_time_are_not_aged_to_nothing(make_workspace) -> None:
    """Notes from the Nix store (every file's time is 1), a reproducible tar (0) or a zip (its first
    day, 1980-01-01) unpacked with their times: with temporal decay on they were aged from 1970,
    ×2^-680, and the note that answered scored 0 under every other."""
    ws = make_workspace({"MEMORY.md": "- zebra\n",
                         "notes/deploy.md": "# Deploy\nWe deploy the billing service with blue-green releases.\n",
                         "notes/pets.md": "# Pets\nMy cat is called Miso; billing is done.\n"})
    for name, when in (("deploy.md", 1), ("pets.md", 0)):
        os.utime(ws / "notes" / name, (when, when))
    config = {"memorySearch": {"provider": "none", "extraPaths": ["notes"], "sync": {"watch": False},
                               "query": {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}}}
    with Memory(ws, config=config) as mem:
        results = mem.search("how do we deploy billing").results
        assert [r.path for r in results][:1] == ["notes/deploy.md"]
        assert results[0].score > 0.3


def test_long_term_cache_entries_stamped_by_a_clock_that_ran_ahead_do_not_push_out_new_ones(tmp_path: Path) -> None:
    """The long-term memory's embedding cache (20,000 entries): entries written while the clock ran
    ahead outranked every later one, so each prune removed the vectors just made and kept those."""
    import sqlite3

    import numpy as np

    from memdir.ltm.embedder import EmbeddingCache

    path, key = tmp_path / "embedding-cache.sqlite", ("fake", "m", "k")
    cache = EmbeddingCache(path, max_entries=4)
    cache.put(key, {f"old-{i}": np.ones(4, dtype=np.float32) for i in range(4)})
    cache.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE embedding_cache SET updated_at = 4102444800000")  # 2100-01-01
    cache = EmbeddingCache(path, max_entries=4)  # (its first write prunes)
    try:
        cache.put(key, {f"new-{i}": np.ones(4, dtype=np.float32) for i in range(2)})
        assert cache.count() == 4
        assert set(cache.get(key, ["new-0", "new-1"])) == {"new-0", "new-1"}
    finally:
        cache.close()


def _transcript(make_workspace, state_dir: Path, stamps: list[object]) -> tuple[Path, dict[str, object]]:
    """A workspace whose agent has one transcript: a user message per time in ``stamps``."""
    import json

    from memdir.config import load_config

    ws = make_workspace({"MEMORY.md": "- zebra\n"})
    sessions = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    sessions.mkdir(parents=True)
    (sessions / "s1.jsonl").write_text("".join(
        json.dumps({"type": "message", "timestamp": t, "message": {"role": "user", "content": f"kiwi note {i}"}}) + "\n"
        for i, t in enumerate(stamps)))
    return ws, {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"], "sync": {"watch": False},
                                 "experimental": {"sessionMemory": True}}}


def _dates(ws: Path, config: dict[str, object], query: str) -> list[str]:
    with Memory(ws, config=config) as mem:
        return [r.explain.get("dates") for r in mem.search(query, explain=True).results if r.source == "sessions"]


def test_a_message_sent_in_a_leap_second_keeps_its_day(make_workspace, state_dir: Path) -> None:
    """RFC 3339 allows 23:59:60, a leap second, which Python's datetime cannot hold: the message was
    undated, so a question naming its day did not prefer it (and decay read the file's time)."""
    from memdir.sessions.transcript import timestamp_ms

    assert timestamp_ms("2016-12-31T23:59:60Z") == timestamp_ms("2016-12-31T23:59:59.999Z")
    assert timestamp_ms("2016-12-31 23:59:60.5+00:00") == timestamp_ms("2016-12-31T23:59:59.999Z")
    ws, config = _transcript(make_workspace, state_dir, ["2016-12-31T23:59:60Z"])
    assert _dates(ws, {**config, "userTimezone": "UTC"}, "kiwi on 31 December 2016") == ["2016-12-31"]


def test_message_times_in_micro_and_nanoseconds_date_their_messages(make_workspace, state_dir: Path) -> None:
    """A transcript timed in microseconds or nanoseconds (Go's UnixNano, Python's time_ns(),
    OpenTelemetry): read as milliseconds, past year 9999, every message was undated."""
    from memdir.sessions.transcript import timestamp_ms

    when = 1_767_607_200_000  # 2026-01-05 10:00:00 UTC
    assert timestamp_ms(when * 1000) == timestamp_ms(when * 1_000_000) == timestamp_ms(str(when * 1_000_000)) == when
    ws, config = _transcript(make_workspace, state_dir, [when * 1000, when * 1_000_000])
    assert _dates(ws, config, "kiwi on 5 January 2026") == ["2026-01-05"]


def test_a_config_edited_twice_within_a_second_on_a_whole_second_file_system_is_not_remembered_stale(
        tmp_path: Path) -> None:
    """memdir.toml on a USB stick or a network share (whole-second times), edited again within the
    second keeping its size (a script setting maxResults = 2, then 3): the CLI's settings snapshot
    of the first version had the same key, and every later run searched with maxResults = 2."""
    from memdir import settings_cache
    from memdir.config import load_config

    folder = CoarseClockFolder(tmp_path / "fat", {"ws/MEMORY.md": "- zebra\n"}, age=0)
    try:
        ws, state = folder.root / "ws", tmp_path / "st"
        config = ws / "memdir.toml"

        def key() -> tuple[str, Path]:
            return settings_cache.snapshot_key(config_path=None, workspace=str(ws), agent_id=None,
                                               state_dir=str(state))

        for _ in range(5):  # both writes within one second (a retry when a second ends between them)
            config.write_text("[memorySearch.query]\nmaxResults = 2\n")
            first = config.stat()
            k1, path = key()
            settings_cache.save_snapshot(path, k1, load_config(workspace=ws, state_dir=state))
            config.write_text("[memorySearch.query]\nmaxResults = 3\n")
            if config.stat().st_ctime_ns == first.st_ctime_ns:
                break
        else:
            raise AssertionError("no two writes fell within one second")
        remembered = settings_cache.load_snapshot(*reversed(key()))
        assert remembered is None or remembered.settings.memory_search.query.max_results == 3
    finally:
        folder.release()


def test_message_times_counted_from_the_session_start_are_no_dates(make_workspace, state_dir: Path) -> None:
    """A transcript whose message times are milliseconds since the session began (1500, 3000), or
    sequence numbers: read as seconds since 1970 they dated every message 1970-01-01, and with
    temporal decay on the chunk kept 2^-680 of its score, under every other result."""
    ws, config = _transcript(make_workspace, state_dir, [1500, 3000])
    config["memorySearch"]["query"] = {"hybrid": {"temporalDecay": {"enabled": True, "halfLifeDays": 30}}}
    with Memory(ws, config=config) as mem:
        (hit,) = [r for r in mem.search("kiwi note", explain=True, min_score=0).results if r.source == "sessions"]
        assert hit.explain["decay"] == 1 and "dates" not in hit.explain


def test_ltm_stats_with_a_recovery_record_whose_time_is_no_time(tmp_path: Path, make_workspace, run_cli,
                                                                  state_dir: Path) -> None:
    """recovery.json (which records when a damaged long-term memory table was recovered) edited or
    damaged: a time of "abc", 1e300 or year 10000 failed ``memdir ltm stats`` with Python's bare
    words after half its lines ('could not convert string to float'), and none was 1970-01-01."""
    import json

    from memdir.ltm.heal import recovery_ms

    assert [recovery_ms({"at": at}) for at in ("abc", 1e300, 253_402_300_800_000, None, [1], True, 0)] == [None] * 7
    assert recovery_ms({"at": 1_767_607_200_000}) == 1_767_607_200_000
    pytest.importorskip("lancedb")
    from memdir.config import load_config
    from memdir.ltm.settings import db_path

    ws = make_workspace({"MEMORY.md": "# notes\n"})
    (tmp_path / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    base = ("--workspace", str(ws), "--config", str(tmp_path / "memdir.json"))
    db = db_path(load_config(workspace=ws, state_dir=state_dir).settings)
    db.mkdir(parents=True)
    (db / "recovery.json").write_text(json.dumps({"at": "abc", "message": "recovered 2 of 3 memories"}))
    out = run_cli("ltm", "stats", *base)
    assert out.returncode == 0, out.stderr
    assert "Recovered at an unknown time: recovered 2 of 3 memories" in out.stdout
