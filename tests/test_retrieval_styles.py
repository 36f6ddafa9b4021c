"""Notes in styles the benchmarks do not cover (terse one-line daily logs, a developer's notes,
curated bullet facts) and the questions a user asks of them: each note that plainly answers a
question is among its results."""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.api import Memory

#: A terse daily log, one line an entry, every other day from the 6th of January.
TERSE = ["Ran 5k in 27:40.", "Dentist: filling on lower left molar.", "Called mum.",
         "Bought a new kettle (Bosch, 1.7 l).", "Team offsite planning w/ Priya.", "Finished Piranesi.",
         "Cooked shakshuka for Jordan.", "Flu jab at pharmacy.", "Car MOT passed.", "Paid council tax (£142)."]


def terse_logs(year: int) -> dict[str, str]:
    days = [dt.date(year, 1, 6) + dt.timedelta(days=2 * i) for i in range(len(TERSE))]
    return {f"memory/{d}.md": f"# {d}\n\n- {entry}\n" for d, entry in zip(days, TERSE, strict=True)}


def test_a_day_named_without_its_year_finds_that_days_log(
        make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """A day or month named without a year ("on January 8th", "in March") means that period of any
    year, but only a period with its year was looked up in the index: "what did I do on January
    8th?" shares no word with that day's log and found nothing at all by keywords, while "on 8
    January 2024" found it.  The latest past year's and earlier ones are looked up now."""
    year = dt.date.today().year - 2
    ws = make_workspace(terse_logs(year))
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for question in ("what did I do on January 8th?", "what did I do on 8 Jan?",
                         f"what did I do on 8 January {year}?"):
            hits = mem.search(question, explain=True).results
            assert hits and hits[0].path == f"memory/{year}-01-08.md", (question, hits)
            assert hits[0].explain["rescuedBecause"] == "written in the period the question names"
        # a month of any year holding no more chunks than the pool: its logs, in date order
        hits = mem.search("what did I do in January?", max_results=10).results
        assert [h.path for h in hits] == sorted(terse_logs(year))


def test_a_shortened_weekday_names_its_day(make_workspace: Callable[..., Path], keyword_config: dict[str, Any]) -> None:
    """Only a weekday's full name was read: "what did I do last tues?" named no day, and no log
    holds its words, so keywords found nothing (nor "on Thurs.", "this fri"); "sat" and "sun"
    are English words and are read after "last" and "this" only."""
    from memdir.dates import query_periods

    today = dt.date.today()
    days = {n: today - dt.timedelta(days=n) for n in range(1, 15)}
    ws = make_workspace({f"memory/{d}.md": f"# {d}\n\n- {TERSE[n % len(TERSE)]}\n" for n, d in days.items()})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for short, full in (("tues", "tuesday"), ("Thurs.", "thursday"), ("fri", "friday"), ("sat", "saturday")):
            [day] = [d for d in days.values() if d.strftime("%A").lower() == full and (today - d).days < 8]
            hits = mem.search(f"what did I do last {short}?").results
            assert hits and hits[0].path == f"memory/{day}.md", (short, hits)
    for short, full in (("last tues", "last Tuesday"), ("on Thurs. we met", "on Thursday we met"),
                        ("this wed", "this wednesday")):
        assert [p.start for p in query_periods(short, today)] == [p.start for p in query_periods(full, today)] != []
    assert query_periods("the kids sat on sat mats, then on sun cream", today) == []


#: A developer's notes: identifiers, versions, paths, error messages.
DEV = {
    "memory/dev/payments-api.md": (
        "# payments-api\n\nRepo: git@github.com:acme/payments-api.git, owner @lena.k (lena.kowalski@acme.io)\n\n"
        "## Known issues\n- v2.3.1 leaks connections under load: `psycopg2.OperationalError: too many connections "
        "for role \"payments\"`. Fixed in v2.3.2.\n- `ERR_IDEMPOTENCY_KEY_REUSED` when a retry changes the amount "
        "(PAY-4412).\n\n## Config\n- `max_retry_count = 5` in `config/retry.toml`\n"),
    "memory/dev/cli.md": "# CLI\n\n- Released 1.4.0 of the CLI on the 3rd; 1.4.1 fixes the Windows paths.\n",
    "memory/dev/laptop.md": ("# Laptop setup\n\n- Python 3.12 via `uv python install 3.12`\n"
                             "- Node 20.11.1 with fnm\n- bastion: port 2222, user ec2-user\n"),
}


def test_a_version_is_found_with_or_without_its_v(make_workspace: Callable[..., Path],
                                                  keyword_config: dict[str, Any]) -> None:
    """The index holds "v2.3.1" as the words v2, 3 and 1 and "2.3.1" as 2, 3 and 1, so a question
    for "2.3.1" found no note saying "v2.3.1" (nothing at all here), nor "v1.4.0" one saying
    "1.4.0": each form is searched for with the other's words too."""
    with Memory(make_workspace(DEV), config=keyword_config) as mem:
        mem.sync()
        for question, path in (("2.3.1", "payments-api"), ("what broke in 2.3.1?", "payments-api"),
                               ("fixed in 2.3.2", "payments-api"), ("v1.4.0 release", "cli"), ("V1.4.1", "cli"),
                               ("v20.11.1", "laptop")):
            hits = mem.search(question).results
            assert hits and hits[0].path == f"memory/dev/{path}.md", (question, hits)


def test_a_camel_case_name_is_found_by_its_words(make_workspace: Callable[..., Path],
                                                 keyword_config: dict[str, Any]) -> None:
    """The keyword index holds a CamelCase word as one token (``operationalerror``), so a note
    naming ``psycopg2.OperationalError`` or ``OOMKilled`` was found by no question for
    "operational error" or "oom killed" (nothing at all for the second), and a question naming
    ``ConnectionResetError`` by no note writing "connection reset error" in words.  The stems
    column holds the words' parts (chunker 19) and a question's CamelCase words are searched for
    by their parts too."""
    files = {**DEV, "memory/dev/incidents.md": (
        "# Incidents\n\n## INC-2025-052\n`celery-worker` pods OOMKilled at 512Mi; raised the limit to 1Gi.\n\n"
        "## INC-2025-060\nThe proxy dropped idle sockets: every client saw a connection reset error after 60 s.\n"),
        "memory/dev/xcode.md": "# Xcode\n\n- `xcrun: error: invalid active developer path`: run xcode-select.\n"}
    with Memory(make_workspace(files), config=keyword_config) as mem:
        mem.sync()
        for question, path, line in (("operational error", "payments-api", 6), ("oom killed", "incidents", 4),
                                     ("ConnectionResetError", "incidents", 7)):
            hits = mem.search(question).results  # (xcode.md's "error", a word of its own, may rank above)
            assert any(h.path == f"memory/dev/{path}.md" and h.start_line <= line <= h.end_line for h in hits), (
                question, hits)


def test_a_couple_of_days_ago_names_its_day(make_workspace: Callable[..., Path],
                                             keyword_config: dict[str, Any]) -> None:
    """Only one to ten, "a few" and "several" were read before "days ago": "what did I do a couple
    of days ago?", "twelve days ago" or "a fortnight ago" named no day, and shared no word with
    its log, so keywords found nothing."""
    today = dt.date.today()
    days = {n: today - dt.timedelta(days=n) for n in range(1, 22)}
    ws = make_workspace({f"memory/{d}.md": f"# {d}\n\n- {TERSE[n % len(TERSE)]}\n" for n, d in days.items()})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for question, back in (("what did I do a couple of days ago?", 2), ("a couple days ago", 2),
                               ("what did I do twelve days ago", 12), ("and nineteen days ago?", 19)):
            hits = mem.search(question).results
            assert hits and hits[0].path == f"memory/{days[back]}.md", (question, hits)
        for question in ("what happened a fortnight ago?", "a couple of weeks ago"):
            hits = mem.search(question).results  # the week around 14 days back, and the grace days after it
            assert hits and all(10 <= (today - dt.date.fromisoformat(h.path[7:17])).days <= 17 for h in hits), hits


def test_a_day_of_the_month_named_alone_is_the_latest_past_one(make_workspace: Callable[..., Path],
                                                                keyword_config: dict[str, Any]) -> None:
    """"What did I do on the 8th?" named no day (only a day with its month was read), and shared
    no word with that day's log: keywords found nothing.  It is the latest past 8th."""
    today = dt.date.today()
    days = [today - dt.timedelta(days=n) for n in range(1, 12)]
    ws = make_workspace({f"memory/{d}.md": f"# {d}\n\n- {TERSE[n % len(TERSE)]}\n" for n, d in enumerate(days)})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for day in (days[2], days[9]):
            suffix = {1: "st", 2: "nd", 3: "rd", 21: "st", 22: "nd", 23: "rd", 31: "st"}.get(day.day, "th")
            hits = mem.search(f"what did I do on the {day.day}{suffix}?").results
            assert hits and hits[0].path == f"memory/{day}.md", (day, hits)


def test_a_two_letter_acronym_in_capitals_is_searched_for(make_workspace: Callable[..., Path],
                                                          keyword_config: dict[str, Any]) -> None:
    """R§9 drops every word shorter than three letters, so "which TV did I buy?" searched for
    "buy" alone and ranked the shopping list above the TV, and "HR meeting" found the other
    meeting first.  A two-letter word in capitals, no stop word, is searched for too."""
    ws = make_workspace({
        "memory/2025-03-01.md": "# 2025-03-01\n\n- Went to Currys to buy a TV: the 55-inch LG OLED.\n",
        "memory/2025-03-02.md": "# 2025-03-02\n\n- Buy oat milk and eggs on the way home; buy bin bags.\n",
        "memory/2025-03-03.md": "# 2025-03-03\n\n- Meeting with HR about the parental leave policy.\n",
        "memory/2025-03-04.md": "# 2025-03-04\n\n- Sprint meeting; the API meeting moved to Thursday.\n",
        "memory/2025-03-05.md": "# 2025-03-05\n\n- Booked the flights for the trip to the UK in June.\n",
        "memory/2025-03-06.md": "# 2025-03-06\n\n- Planned the cycling trip to the Peak District.\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for question, day in (("which TV did I buy?", 1), ("HR meeting", 3), ("when is the UK trip?", 5)):
            hits = mem.search(question).results
            assert hits and hits[0].path == f"memory/2025-03-0{day}.md", (question, hits)
    from memdir.query import acronyms

    # in lower case or in a question all in capitals it is no acronym (R§9 as before), nor is a
    # stop word in capitals
    assert acronyms("WHICH TV DID I BUY") == acronyms("which tv did i buy") == []
    assert acronyms("Is IT in the US or UK?") == ["uk"]


def test_a_notes_front_matter_is_found_with_the_note(make_workspace: Callable[..., Path],
                                                    keyword_config: dict[str, Any]) -> None:
    """A curated note's front matter was a chunk of its own, so the best result for the note's
    title or tags ("lisbon trip", "reading list") showed its metadata and nothing of the note
    (``title: Lisbon trip``, ``tags: [travel]``); it goes with the note's first heading and block,
    as a heading keeps its first block."""
    trip = ("---\ntitle: Lisbon trip\ndate: 2025-04-18\ntags: [travel, portugal]\nstatus: planning\n---\n\n"
            "# Lisbon trip\n\nFlights booked with TAP, confirmation XK7Q2P.\n\n"
            "## Packing\n- [ ] travel adapter (type F)\n- [ ] sunscreen\n")
    reading = ("---\ntitle: Reading list\nupdated: 2025-03-01\n---\n"
               "- [x] The Left Hand of Darkness, Ursula K. Le Guin\n- [ ] Project Hail Mary, Andy Weir\n")
    with Memory(make_workspace({"notes/trip.md": trip, "notes/reading.md": reading}),
                config={"memorySearch": {"provider": "none", "extraPaths": ["notes"]}}) as mem:
        mem.sync()
        for question, path, shown in (("lisbon trip status", "notes/trip.md", "XK7Q2P"),
                                      ("reading list", "notes/reading.md", "Project Hail Mary")):
            hits = mem.search(question).results
            assert hits and hits[0].path == path and shown in hits[0].snippet, (question, hits)
