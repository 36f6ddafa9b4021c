"""Dates in memory and questions (issue 10 item 4): what day a chunk is about, which period a
question names, and search preferring that period — in the user's timezone."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from memdir.api import Memory
from memdir.config import load_config
from memdir.dates import Period, Periods, file_date, line_dates, query_periods

TODAY = dt.date(2026, 11, 23)  # a Monday


@pytest.mark.parametrize("question,start,end", [
    ("What did we decide on 2025-02-12?", "2025-02-12", "2025-02-12"),
    ("What happened on 1 February, 2023?", "2023-02-01", "2023-02-01"),
    ("What did John do the week before August 3, 2023?", "2023-08-03", "2023-08-03"),
    ("What setback did Melanie face in October 2023?", "2023-10-01", "2023-10-31"),
    ("How many beach trips in 2023?", "2023-01-01", "2023-12-31"),
    ("What did we ship yesterday?", "2026-11-22", "2026-11-22"),
    ("notes from last week", "2026-11-16", "2026-11-22"),
    ("what did I buy last month", "2026-10-01", "2026-10-31"),
    ("the call two weeks ago", "2026-11-06", "2026-11-12"),
    ("last Monday's retro", "2026-11-16", "2026-11-16"),
    ("the dinner 3 days ago", "2026-11-20", "2026-11-20"),
])
def test_query_periods(question: str, start: str, end: str) -> None:
    (p,) = query_periods(question, TODAY)
    assert (p.start.isoformat(), p.end.isoformat()) == (start, end)


@pytest.mark.parametrize("question,asks", [
    ("what did we decide about the database migration", False),
    ("What did we decide on 2025-02-12?", False),
    ("How many beach trips in October 2023?", False),
    ("what did Joanna finish last Friday on 23 January, 2022?", False),  # counted from the named day
    ("What did we ship yesterday?", True),
    ("the call two weeks ago", True),
    ("When did Melanie go camping in June?", True),  # which June is the latest past one
    ("What did they give him when they met on Aug 15th?", True),
])
def test_today_is_asked_for_only_when_the_question_needs_it(question: str, asks: bool) -> None:
    """Search passes a function for today: finding the user's zone (``zoneinfo``) costs a cold CLI
    search time, so a question without a relative period must not call it; the periods are the
    same as with the date itself, and a question that needs it calls it once."""
    calls: list[int] = []

    def today() -> dt.date:
        calls.append(1)
        return TODAY

    assert query_periods(question, today) == query_periods(question, TODAY)
    assert len(calls) == (1 if asks else 0)


@pytest.mark.parametrize("question", [
    "what did we decide about the database migration", "in Sept. we moved", "the MAY release?",
    "see you on friday", "three weeks ago", "a few days ago", "last night", "this morning", "DECEMBER plans",
    "dec. review", "tonight?", "the 2023 offsite", "café in März", "the call on Tuesday", "Ünïcödé — notes",
    "she said maybe", "q3 numbers", "any news", "monday-ish", "the last thing",
])
def test_the_quick_no_date_check_never_hides_a_period(question: str, monkeypatch) -> None:
    """Questions are first checked for a digit, a month or weekday name, "ago" or a relative word,
    so that most never compile the patterns; the periods found are those of the full patterns."""
    from memdir import dates

    quick = query_periods(question, TODAY)
    monkeypatch.setattr(dates, "_may_name_a_period", lambda text: True)
    assert quick == query_periods(question, TODAY)


def test_a_bare_month_means_that_month_of_any_year_and_may_is_usually_a_verb() -> None:
    (p,) = query_periods("When did Melanie go camping in June?", TODAY)
    assert p.any_year and p.covers("2023-06-27", "2023-06-27") and not p.covers("2023-07-27", "2023-07-27")
    assert query_periods("May I ask what Maya likes?", TODAY) == []
    assert query_periods("She may march in the parade", TODAY) == []
    assert query_periods("no date here", TODAY) == []


def test_a_day_without_a_year_takes_the_questions_year_or_any_year() -> None:
    (p,) = query_periods("Where was the picture shared on December 1,2023 taken?", TODAY)
    assert (p.start, p.end, p.any_year) == (dt.date(2023, 12, 1), dt.date(2023, 12, 1), False)
    (p,) = query_periods("What did they give him when they met on Aug 15th?", TODAY)
    assert p.any_year and p.covers("2023-08-17", "2023-08-17") and not p.covers("2023-09-17", "2023-09-17")


def test_two_days_joined_by_and_or_to_are_one_range() -> None:
    (p,) = query_periods("Where was John between August 11 and August 15 2023?", TODAY)
    assert (p.start, p.end, p.any_year) == (dt.date(2023, 8, 11), dt.date(2023, 8, 15), False)
    (p,) = query_periods("notes from 3 May to 9 May 2024", TODAY)
    assert (p.start, p.end) == (dt.date(2024, 5, 3), dt.date(2024, 5, 9))
    # two separate days stay two periods
    assert len(query_periods("on 3 May 2024, and later on 9 May 2024", TODAY)) == 2


@pytest.mark.parametrize("question,start,end", [
    ("What did Joanna finish last Friday on 23 January, 2022?", "2022-01-21", "2022-01-21"),
    ("What did Maria do last weekend before April 10, 2023?", "2023-04-08", "2023-04-09"),
    ("What was the issue last week, as mentioned on November 6, 2023?", "2023-10-30", "2023-11-05"),
])
def test_relative_words_count_back_from_the_date_the_question_names(question: str, start: str, end: str) -> None:
    periods = query_periods(question, TODAY)
    assert len(periods) == 2  # the named day itself, and the relative period before it
    assert (periods[1].start.isoformat(), periods[1].end.isoformat()) == (start, end)


def test_a_period_covers_notes_written_within_a_week_after_it() -> None:
    (p,) = query_periods("What did Gina get accepted for on May 23, 2023?", TODAY)
    assert p.covers("2023-05-27", "2023-05-27")  # the daily log written four days later
    assert not p.covers("2023-06-10", "2023-06-10") and not p.covers("2023-05-20", "2023-05-22")
    assert not p.covers(None, None)


def test_file_and_heading_dates() -> None:
    assert file_date("memory/2023-08-05.md") == dt.date(2023, 8, 5)
    assert file_date("memory/2023-08-05-standup.md") == dt.date(2023, 8, 5)
    assert file_date("memory/log-2023-08-05.md") == dt.date(2023, 8, 5)
    assert file_date("memory/2023-02-30.md") is None and file_date("MEMORY.md") is None
    text = "# Journal\n## 2024-03-02\n- a\n### detail\n- b\n## Other\n- c\n## March 3, 2024\n- d"
    days = line_dates("MEMORY.md", text)
    d1, d2 = dt.date(2024, 3, 2), dt.date(2024, 3, 3)
    assert days == [None, d1, d1, d1, d1, None, None, d2, d2]
    assert line_dates("memory/2023-08-05.md", "# x\n- y") == [dt.date(2023, 8, 5)] * 2


@pytest.mark.parametrize("question,start,end", [
    ("What did we ship from January to March 2024?", "2024-01-01", "2024-03-31"),
    ("notes between Jan and Mar 2024", "2024-01-01", "2024-03-31"),
    ("the budget talks between November 2023 and February 2024", "2023-11-01", "2024-02-29"),
    ("the budget talks from November to February 2024", "2023-11-01", "2024-02-29"),
    ("trips May-July 2023", "2023-05-01", "2023-07-31"),
])
def test_two_months_joined_by_and_or_to_are_one_range(question: str, start: str, end: str) -> None:
    """Read month by month, "January to March 2024" preferred March 2024 alone (the first month,
    with no year nor a word before it, was no date) and "between Jan and Mar 2024" March 2024 and
    January of *any* year: notes of February 2024 were not preferred, notes of January 2019 were."""
    (p,) = query_periods(question, TODAY)
    assert (p.start.isoformat(), p.end.isoformat(), p.any_year) == (start, end, False)


def test_search_prefers_the_named_day_and_explains_why(make_workspace, keyword_config) -> None:
    days = {f"memory/2025-02-{d:02d}.md": f"# 2025-02-{d:02d}\n\n- Rotated the bucket credentials.\n"
            for d in range(10, 20)}
    ws = make_workspace(days)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        resp = mem.search("Which credentials were rotated on 14 February 2025?", explain=True)
        top = resp.results[0]
        assert top.path == "memory/2025-02-14.md"
        assert top.explain["inPeriod"] is True and top.explain["dates"] == "2025-02-14"
        assert top.explain["queryPeriods"][0]["start"] == "2025-02-14"
        rest = mem.search("Which credentials were rotated on 14 February 2025?", explain=True, min_score=0,
                          max_results=10).results
        by_path = {r.path: r for r in rest}
        assert rest[0].path == top.path and len(rest) == 10
        # notes of the next days may be about it (grace week); notes written before it are not
        assert by_path["memory/2025-02-15.md"].explain["inPeriod"] is True
        before = [r for r in rest if r.path < "memory/2025-02-14.md"]
        assert before and all(r.explain["inPeriod"] is False and r.score < top.score / 1.5 for r in before)


def test_relative_dates_use_the_users_timezone(make_workspace, keyword_config) -> None:
    """At 23:30 UTC on 2026-11-23 it is already 24 November in Tokyo: "yesterday" is the 23rd there."""
    from memdir.search import run_search

    ws = make_workspace({"memory/2026-11-22.md": "- Called the plumber.\n",
                         "memory/2026-11-23.md": "- Called the plumber again.\n"})
    now = int(dt.datetime(2026, 11, 23, 23, 30, tzinfo=dt.UTC).timestamp() * 1000)
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for tz, day in (("UTC", "2026-11-22"), ("Asia/Tokyo", "2026-11-23")):
            resp = run_search(mem.store, mem.settings.memory_search, "when did I call the plumber yesterday",
                              provider=None, workspace=ws, now_ms=now, timezone=tz, explain=True)
            assert resp.results[0].path == f"memory/{day}.md", tz


def test_transcript_chunks_are_dated_by_their_messages(make_workspace, keyword_config, state_dir) -> None:
    """Session transcripts carry message times; their chunks know the day in the user's timezone."""
    ws = make_workspace({"MEMORY.md": "# Memory\n"})
    sessions = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    sessions.mkdir(parents=True)
    ts = int(dt.datetime(2025, 6, 1, 12, 0, tzinfo=dt.UTC).timestamp() * 1000)
    rec = {"type": "message", "timestamp": ts, "message": {"role": "user", "content": "Book the ferry to Hvar"}}
    (sessions / "s1.jsonl").write_text(json.dumps(rec) + "\n")
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    with Memory(ws, config=cfg, state_dir=state_dir) as mem:
        mem.sync()
        rows = mem.store.chunks_in_period("2025-06-01", "2025-06-01", 10)
        assert [h.source for h in rows] == ["sessions"] and rows[0].date_start == "2025-06-01"


def test_a_question_naming_thousands_of_dates_is_read_in_linear_time() -> None:
    """Each match was checked against every period found before it, the word before each month
    was found by splitting all the text before it, and joined ranges were looked up by value in
    the list: a 500 KB question (a pasted log; MCP takes 4 MB) kept a search busy for minutes.
    Run in a child process so a regression fails on the timeout instead of hanging the suite."""
    code = ("import datetime as dt; from memdir.dates import query_periods\n"
            "q = '2024-01-01 to 2024-01-02 ' * 20000 + 'May 1 ' * 50000 + 'in May ' * 50000\n"
            "ps = query_periods(q, dt.date(2026, 1, 1))\n"
            "print(len(ps), ps[0].as_dict()['text'], sum(p.text == 'May' for p in ps))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.split() == ["119999", "2024-01-01", "to", "2024-01-02", "50000"]


def test_periods_cover_what_one_of_their_periods_covers() -> None:
    """:class:`Periods` answers by bisection what asking each period in turn answered: the same on
    thousands of random periods (some of any year, leap days, the calendar's ends) and chunks."""
    import random

    rnd = random.Random(5)

    def day() -> dt.date:
        while True:
            try:
                return dt.date(rnd.choice([rnd.randint(1, 9999), rnd.randint(1999, 2030), 1, 2000, 9999]),
                               rnd.randint(1, 12), rnd.choice([1, 28, 29, 31, rnd.randint(1, 31)]))
            except ValueError:
                continue

    for _ in range(400):
        periods = []
        for _ in range(rnd.randint(0, 8)):
            a, b = sorted((day(), day())) if rnd.random() < 0.8 else (day(), day())
            periods.append(Period(a, a if rnd.random() < 0.3 else b, "x", rnd.random() < 0.4))
        named = Periods(periods)
        for _ in range(20):
            a = day()
            b = a + dt.timedelta(days=rnd.randint(0, 40)) if rnd.random() < 0.6 and a.year < 9999 else day()
            first, last = a.isoformat(), b.isoformat()
            assert named.covers(first, last) == any(p.covers(first, last) for p in periods), (periods, first, last)
    assert not Periods([]).covers("2024-01-01", "2024-01-01") and not named.covers(None, "2024-01-01")


def test_a_question_naming_many_days_looks_each_up_once_and_checks_chunks_in_linear_time(
        make_workspace, keyword_config, monkeypatch) -> None:
    """Each chunk of the pool was checked against every period the question named, and each
    period was looked up in the index however often it was named: 4,000 days named in a question
    (a pasted log) over as many daily notes took 16 s, "last week" said 30,000 times 3 s."""
    from memdir.stores.sqlite import SqliteStore

    days = [dt.date(2025, 1, 1) + dt.timedelta(days=n) for n in range(150)]
    ws = make_workspace({f"memory/{d}.md": f"# {d}\n\n- Watered the ferns.\n" for d in days})
    lookups: list[tuple[str, str]] = []
    checks = [0]
    covers, in_period = Period.covers, SqliteStore.chunks_in_period

    def counted_covers(self: Period, *args: object, **kwargs: object) -> bool:
        checks[0] += 1
        return covers(self, *args, **kwargs)

    def counted_lookup(self: SqliteStore, start: str, end: str, limit: int) -> list:
        lookups.append((start, end))
        return in_period(self, start, end, limit)

    monkeypatch.setattr(Period, "covers", counted_covers)
    monkeypatch.setattr(SqliteStore, "chunks_in_period", counted_lookup)
    question = "When did I water the ferns? " + " ".join(f"{d} and {d}," for d in days) + " last week" * 500
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        resp = mem.search(question, explain=True, max_results=5)
    assert len(resp.results) == 5 and all(r.explain["inPeriod"] for r in resp.results)
    assert len(lookups) == len(set(lookups)) == len(days) + 1  # each day once, and last week
    assert checks[0] <= 2 * len(days)  # not (chunks x periods): 150 x 800 before


def test_a_session_capture_is_dated_by_the_users_day_not_its_utc_header(make_workspace, tmp_path, monkeypatch) -> None:
    """The hook names a capture by the user's day but heads it ``# Session: <UTC date> <time> UTC``;
    that heading dated its lines by Greenwich's day, so in Tokyo a session ended at 08:00 on the
    28th (23:00 UTC on the 27th) was indexed as the 27th and "yesterday", asked on the 29th, missed
    it.  The worker that plans a large rebuild dates it the same way."""
    from memdir import sync
    from memdir.search import run_search
    from memdir.sessions.hook import run_session_memory_hook

    ws = make_workspace({"MEMORY.md": "# Memory\n"})
    transcript = tmp_path / "s" / "abc.jsonl"
    transcript.parent.mkdir()
    rec = {"type": "message", "message": {"role": "user", "content": "Book the ferry to Hvar"}}
    transcript.write_text(json.dumps(rec) + "\n")
    ended = dt.datetime(2026, 11, 27, 23, 0, tzinfo=dt.UTC)
    res = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=ws, now=ended,
                                  previous_entry={"sessionId": "abc", "sessionFile": str(transcript)},
                                  timezone="Asia/Tokyo")
    assert res.path.name == "2026-11-28-0800.md" and "2026-11-27 23:00:00 UTC" in res.path.read_text()
    cfg = {"memorySearch": {"provider": "none"}, "userTimezone": "Asia/Tokyo"}
    asked = int(dt.datetime(2026, 11, 29, 3, 0, tzinfo=dt.UTC).timestamp() * 1000)  # noon on the 29th there
    for worker in (False, True):
        if worker:
            monkeypatch.setattr(sync, "WORKER_MIN_BYTES", 0)
            monkeypatch.setattr(sync, "free_core", lambda: True)
        with Memory(ws, config=cfg, state_dir=tmp_path / f"state-{worker}") as mem:
            assert mem.sync().full
            rows = mem.store.chunks_in_period("2026-11-01", "2026-11-30", 10)
            assert [(h.path, h.date_start, h.date_end) for h in rows] == [
                ("memory/2026-11-28-0800.md", "2026-11-28", "2026-11-28")], worker
            resp = run_search(mem.store, mem.settings.memory_search, "which ferry did I book yesterday",
                              provider=None, workspace=ws, now_ms=asked, timezone="Asia/Tokyo", explain=True)
            assert resp.results[0].explain["inPeriod"] is True
    # a heading's UTC time without a zone to convert to, or an impossible one, keeps the written day
    assert line_dates("x.md", "# 2026-11-27 23:00 UTC\n- a") == [dt.date(2026, 11, 27)] * 2
    tokyo = dt.timezone(dt.timedelta(hours=9))
    assert line_dates("x.md", "# 2026-11-27 25:61 UTC\n- a\n# 2026-11-27T15:00Z\n- b", tokyo) == [
        dt.date(2026, 11, 27)] * 2 + [dt.date(2026, 11, 28)] * 2
    assert line_dates("x.md", "# 9999-12-31 23:00 UTC", tokyo) == [dt.date(9999, 12, 31)]
    assert line_dates("x.md", "# 2026-11-27 23:00 UTC+2", tokyo) == [dt.date(2026, 11, 27)]  # not UTC itself


def test_a_leap_day_without_a_year_is_that_day_of_the_leap_years() -> None:
    """"On 29 February" was read in this year, where the day does not exist: it fell back to all of
    February (or, as "Feb 29", named nothing)."""
    for question in ("what did we do on 29 February?", "Feb 29 party"):
        (p,) = query_periods(question, TODAY)
        assert (p.start, p.end, p.any_year) == (dt.date(2024, 2, 29), dt.date(2024, 2, 29), True), question
        assert p.covers("2020-02-29", "2020-02-29") and not p.covers("2026-02-27", "2026-02-28")
    (p,) = query_periods("on 29 February", dt.date(2024, 2, 28))  # this year's is still ahead
    assert p.start == dt.date(2020, 2, 29)


def test_another_user_timezone_re_dates_the_index(make_workspace, state_dir) -> None:
    """Transcripts' messages (and headings' UTC times) are dated in userTimezone when indexed; a
    changed userTimezone left them on the old zone's days until each file changed."""
    ws = make_workspace({"MEMORY.md": "# Memory\n"})
    sessions = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    sessions.mkdir(parents=True)
    ts = int(dt.datetime(2025, 6, 1, 20, 0, tzinfo=dt.UTC).timestamp() * 1000)  # 2 June in Tokyo
    rec = {"type": "message", "timestamp": ts, "message": {"role": "user", "content": "Book the ferry to Hvar"}}
    (sessions / "s1.jsonl").write_text(json.dumps(rec) + "\n")
    days = []
    for zone in ("Asia/Tokyo", "America/Los_Angeles", "America/Los_Angeles"):
        cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                                "experimental": {"sessionMemory": True}}, "userTimezone": zone}
        with Memory(ws, config=cfg, state_dir=state_dir) as mem:
            full = mem.sync().full
            (row,) = mem.store.chunks_in_period("2025-05-01", "2025-06-30", 10)
            days.append((row.date_start, full))
    assert days == [("2025-06-02", True), ("2025-06-01", True), ("2025-06-01", False)]


@pytest.mark.parametrize("question", [
    "did the budget go over $2000?", "a refund of €1999", "the 2024% spike", "ticket #2024",
    "version 1.2024 of the api", "a score of 2024.5",
])
def test_an_amount_or_a_number_is_no_year(question: str) -> None:
    # Before: "$2000" was the year 2000, so notes of that year were ranked twice as high (and a
    # day named without a year in the same question was put in it).
    assert query_periods(question, TODAY) == []
    (p,) = query_periods("what did the $2000 trip on 8 May cost", TODAY)
    assert p.any_year and p.start.year != 2000


@pytest.mark.parametrize("question", ["what happened in 2023.", "in (2023)", "the 2023's plan", "FY 2023, Q3"])
def test_a_year_still_reads_at_a_sentence_end_or_in_brackets(question: str) -> None:
    assert [(p.start, p.end) for p in query_periods(question, TODAY)] == [(dt.date(2023, 1, 1), dt.date(2023, 12, 31))]


@pytest.mark.parametrize("question", ["did commit 2024ab break the build?", "build a2019f", "sha 3f2019 again",
                                      "tenant 9c1e2020abf7"])
def test_digits_inside_a_hash_or_an_identifier_are_no_year(question: str) -> None:
    # Before: "2024ab" was the year 2024, so every note of 2024 was ranked twice as high as the
    # note naming the commit.
    assert query_periods(question, TODAY) == []
    for glued, year in (("FY2024 budget", 2024), ("music of the 1990s", 1990), ("2024年の計画", 2024)):
        assert [p.start for p in query_periods(glued, TODAY)] == [dt.date(year, 1, 1)]  # still years
