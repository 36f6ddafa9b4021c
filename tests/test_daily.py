"""Append-only daily logs: format, timezone, refusal of symlinks, and many concurrent writers."""

from __future__ import annotations

import datetime as dt
import itertools
import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from helpers import SRC, run_git
from memdir import Memory
from memdir.daily import DailyLogError, append_daily, coerce_date, today


def test_append_creates_memory_dir_and_returns_relative_path(make_workspace):
    ws = make_workspace({})
    rel = append_daily(ws, "Decided: Kafka for billing", date="2026-01-12")
    assert rel == "memory/2026-01-12.md"
    assert (ws / rel).read_text() == "Decided: Kafka for billing\n"
    append_daily(ws, "- second entry\r\n- with CRLF\r\n\n\n", date="2026-01-12")
    assert (ws / rel).read_text() == "Decided: Kafka for billing\n- second entry\n- with CRLF\n"


def test_append_never_fuses_with_a_hand_edited_last_line(make_workspace):
    ws = make_workspace({"memory/2026-01-12.md": "# Notes\nlast line without newline"})
    append_daily(ws, "appended", date=dt.date(2026, 1, 12))
    assert (ws / "memory/2026-01-12.md").read_text() == "# Notes\nlast line without newline\nappended\n"


def test_append_refuses_blank_text_bad_dates_and_unknown_timezones(make_workspace):
    ws = make_workspace({})
    with pytest.raises(DailyLogError, match="text required"):
        append_daily(ws, "  \n ")
    with pytest.raises(DailyLogError, match="invalid date"):
        append_daily(ws, "x", date="../../etc/passwd")
    with pytest.raises(DailyLogError, match="invalid date"):
        append_daily(ws, "x", date="2026-02-30")
    with pytest.raises(DailyLogError, match="unknown timezone"):
        append_daily(ws, "x", timezone="Mars/Olympus_Mons")
    assert not (ws / "memory").exists() or not any((ws / "memory").iterdir())


def test_append_refuses_symlinked_file_and_folder(make_workspace, tmp_path):
    ws = make_workspace({})
    outside = tmp_path / "outside.md"
    outside.write_text("secret\n")
    (ws / "memory").mkdir()
    os.symlink(outside, ws / "memory" / "2026-01-12.md")
    with pytest.raises(DailyLogError, match="symlink"):
        append_daily(ws, "x", date="2026-01-12")
    assert outside.read_text() == "secret\n"

    ws2 = make_workspace({}, name="ws2")
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.symlink(target, ws2 / "memory")
    with pytest.raises(DailyLogError, match="symlink"):
        append_daily(ws2, "x", date="2026-01-12")
    assert list(target.iterdir()) == []


def test_today_is_the_users_day_not_the_machines():
    instant = dt.datetime(2026, 1, 12, 11, 30, tzinfo=dt.UTC)
    assert today("Pacific/Kiritimati", now=instant) == dt.date(2026, 1, 13)  # UTC+14
    assert today("Etc/GMT+12", now=instant) == dt.date(2026, 1, 11)  # UTC-12
    assert coerce_date(instant, "Pacific/Kiritimati") == dt.date(2026, 1, 13)


def test_memory_append_daily_uses_configured_timezone(make_workspace, keyword_config):
    ws = make_workspace({})
    tz = "Pacific/Kiritimati"
    before = dt.datetime.now(ZoneInfo(tz)).date()
    with Memory(ws, config={**keyword_config, "userTimezone": tz}) as mem:
        rel = mem.append_daily("User prefers tabs over spaces")
    after = dt.datetime.now(ZoneInfo(tz)).date()
    assert rel in {f"memory/{before.isoformat()}.md", f"memory/{after.isoformat()}.md"}
    assert (ws / rel).read_text() == "User prefers tabs over spaces\n"


WRITER = textwrap.dedent("""
    import sys, time
    from memdir.daily import append_daily
    ws, who, count, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
    while time.time() < start:
        time.sleep(0.001)
    for j in range(count):
        pad = "x" * (50 + (j * 37 + who * 11) % 3000)   # entries of very different sizes
        append_daily(ws, f"entry p{who}-{j} begin {pad}\\ncontinued p{who}-{j} end", date="2026-01-12")
""")


def test_concurrent_appends_from_processes_lose_nothing_and_never_interleave(make_workspace, state_dir):
    ws = make_workspace({})
    procs, count, writers = [], 200, 4
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    start = time.time() + 1.5
    for who in range(writers):
        procs.append(subprocess.Popen([sys.executable, "-c", WRITER, str(ws), str(who), str(count), str(start)],
                                      env=env, stderr=subprocess.PIPE, text=True))
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err
    lines = (ws / "memory/2026-01-12.md").read_text().split("\n")
    assert lines[-1] == ""  # newline-terminated
    lines = lines[:-1]
    assert len(lines) == writers * count * 2
    seen = set()
    for i in range(0, len(lines), 2):
        first, second = lines[i], lines[i + 1]
        assert first.startswith("entry p") and " begin x" in first, first[:60]
        tag = first.split()[1]
        pad = first.split()[3]
        assert set(pad) == {"x"}
        assert second == f"continued {tag} end"  # the entry's two lines are adjacent and whole
        seen.add(tag)
    assert seen == {f"p{w}-{j}" for w in range(writers) for j in range(count)}
    writers_in_order = [lines[i].split()[1].split("-")[0] for i in range(0, len(lines), 2)]
    switches = sum(1 for a, b in itertools.pairwise(writers_in_order) if a != b)
    assert switches >= 10, "the writers did not overlap, so this run proved nothing about concurrency"


def test_host_zone_follows_tz_at_once_and_reads_localtime_once_per_ttl(monkeypatch):
    """The machine's zone is cached (searches ask for it every time) but a changed ``$TZ`` wins
    at once, and ``/etc/localtime`` is read again after the TTL."""
    from memdir import daily, timezones

    monkeypatch.setattr(timezones, "_host_zone_cache", None)
    monkeypatch.setenv("TZ", "Asia/Tokyo")
    assert daily.resolve_timezone(None)[1] == "Asia/Tokyo"
    monkeypatch.setenv("TZ", "Europe/Berlin")
    tz, name = daily.resolve_timezone("")
    assert name == "Europe/Berlin" and tz == ZoneInfo("Europe/Berlin")

    monkeypatch.delenv("TZ")
    reads: list[str] = []
    real = os.path.realpath

    def counting(path, *args, **kwargs):
        reads.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(timezones.os.path, "realpath", counting)
    first = daily.resolve_timezone(None)
    assert daily.resolve_timezone(None) == first and reads == ["/etc/localtime"]
    monkeypatch.setattr(timezones, "HOST_ZONE_TTL_S", 0.0)
    monkeypatch.setattr(timezones, "_host_zone_cache", None)
    daily.resolve_timezone(None)
    daily.resolve_timezone(None)
    assert reads == ["/etc/localtime"] * 3


def test_long_term_memory_days_follow_the_machines_zone_rules_across_dst():
    """With no userTimezone, long-term memory's dates took the machine's offset of *today*
    (``astimezone()``): in Berlin, a memory stored at 00:30 in July showed as the day before once
    the clocks went back (and one stored in January did so in summer).  Run with ``TZ`` set, as a
    machine in Berlin is."""
    code = textwrap.dedent("""
        import datetime as dt
        from memdir.ltm.markdown import day_of, ms_of_day
        summer = dt.datetime(2026, 7, 14, 22, 30, tzinfo=dt.UTC)  # 00:30 CEST on 15 July
        winter = dt.datetime(2026, 1, 14, 23, 30, tzinfo=dt.UTC)  # 00:30 CET on 15 January
        print(day_of(int(summer.timestamp() * 1000)), day_of(int(winter.timestamp() * 1000)))
        print(ms_of_day("2026-07-15") == int(dt.datetime(2026, 7, 14, 22, 0, tzinfo=dt.UTC).timestamp() * 1000))
    """)
    env = {**os.environ, "TZ": "Europe/Berlin", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, check=True)
    assert out.stdout.split() == ["2026-07-15", "2026-01-15", "True"]


def test_a_copied_or_path_named_machine_zone_keeps_its_daylight_saving_rules(monkeypatch, tmp_path):
    """``/etc/localtime`` copied rather than linked (many container images), or ``$TZ`` naming a zone
    file by its path, gave the machine's offset of today: a July message sent at 00:30 in Berlin was
    dated the 14th in winter.  Such a file is read with its rules."""
    from zoneinfo import TZPATH

    from memdir import timezones

    found = [os.path.join(root, "Europe", "Berlin") for root in TZPATH
             if os.path.isfile(os.path.join(root, "Europe", "Berlin"))]
    if not found:
        pytest.skip("no system zone database")
    copy = tmp_path / "localtime"
    copy.write_bytes(Path(found[0]).read_bytes())
    summer = dt.datetime(2026, 7, 14, 22, 30, tzinfo=dt.UTC)  # 00:30 CEST on 15 July
    winter = dt.datetime(2026, 1, 14, 23, 30, tzinfo=dt.UTC)  # 00:30 CET on 15 January
    for env in (str(copy), ":" + str(copy), None):
        monkeypatch.setattr(timezones, "_host_zone_cache", None)
        if env is None:
            monkeypatch.delenv("TZ", raising=False)
            monkeypatch.setattr(timezones, "LOCALTIME", str(copy))
        else:
            monkeypatch.setenv("TZ", env)
        assert [today(None, now=t) for t in (summer, winter)] == [dt.date(2026, 7, 15), dt.date(2026, 1, 15)], env
    os.mkfifo(tmp_path / "fifo")  # no zone, and never waited on for a writer
    assert timezones._zone_file(str(tmp_path / "fifo")) is None and timezones._zone_file(str(tmp_path)) is None


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_append_refuses_a_daily_log_left_with_a_merge_conflict(make_workspace, run_cli):
    """Two machines appended to today's log and ``git pull`` left it conflicted: a note appended
    then went after the ``>>>>>>>`` line, and the ``git merge --abort`` (or ``git checkout
    --theirs``) that resolved the merge put the committed side back, the note lost without a word.
    The append is refused, saying why; once resolved, appends go on.  A log that only quotes
    markers in a code block is appended to."""
    log = "memory/2026-01-12.md"
    ws = make_workspace({log: "# 2026-01-12\n\n- base\n"})
    for step in (["init", "-q", "-b", "main"], ["add", "-A"], ["commit", "-qm", "base"], ["checkout", "-qb", "laptop"]):
        assert run_git(ws, *step).returncode == 0
    (ws / log).write_text("# 2026-01-12\n\n- from the laptop\n")
    assert run_git(ws, "commit", "-qam", "laptop").returncode == 0
    assert run_git(ws, "checkout", "-q", "main").returncode == 0
    (ws / log).write_text("# 2026-01-12\n\n- from the desktop\n")
    assert run_git(ws, "commit", "-qam", "desktop").returncode == 0
    assert run_git(ws, "merge", "laptop").returncode != 0  # a conflict
    conflicted = (ws / log).read_bytes()
    out = run_cli("-w", str(ws), "append", "--date", "2026-01-12", "Decided: ship on Friday",
                  env={"MEMDIR_PROVIDER": "none"})
    assert out.returncode != 0
    assert f"{log} holds an unresolved merge conflict (its '<<<<<<<' on line 3)" in out.stderr
    assert "nothing was written" in out.stderr
    assert (ws / log).read_bytes() == conflicted
    with pytest.raises(DailyLogError, match="unresolved merge conflict"):
        append_daily(ws, "Decided: ship on Friday", date="2026-01-12")
    (ws / log).write_text("# 2026-01-12\n\n- from the desktop\n- from the laptop\n")  # resolved
    append_daily(ws, "Decided: ship on Friday", date="2026-01-12")
    assert (ws / log).read_text().endswith("- from the laptop\nDecided: ship on Friday\n")
    quoted = "memory/2026-01-13.md"
    (ws / quoted).write_text("How a conflict looks:\n\n```\n<<<<<<< HEAD\na\n=======\nb\n>>>>>>> x\n```\n")
    append_daily(ws, "Rebased instead.", date="2026-01-13")
    assert (ws / quoted).read_text().endswith("```\nRebased instead.\n")
