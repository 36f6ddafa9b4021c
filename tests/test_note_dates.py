"""Notes other tools write (Logseq, Obsidian, Dendron, Foam, Joplin, Hugo) carry their day in
their names, folders, front matter or headings in other languages: memdir dates them so a
question about that day prefers them, as it does daily logs."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys

import pytest

from memdir.api import Memory
from memdir.dates import file_date, front_matter_date, header_date, line_dates, path_date, text_date

D = dt.date(2024, 3, 5)


@pytest.mark.parametrize("path,day", [
    ("journals/2024_03_05.md", D),  # Logseq
    ("notes/daily.journal.2024.03.05.md", D),  # Dendron
    ("Daily/2024/03/05.md", D),  # year and month folders, the day's name
    ("2024/03/05 Tuesday.md", D),
    ("Daily/Tuesday, March 5, 2024.md", D),  # Obsidian's daily notes in another format
    ("journal/5 mars 2024.md", D),
    ("journal/2024年3月5日.md", D),
    ("Invoices/Invoice 2024.md", None),
    ("memory/2024-03-05-standup.md", D),  # the session hook's captures, as before
    ("2024/03/05/index.md", None),  # a folder of the day holding other notes: no guess
    ("2024/13/05.md", None),
    ("journals/2024_02_30.md", None),
    ("notes/v1.2.3.md", None),
    ("notes/2024_3_5.md", None),
    ("notes/2024_03.05.md", None),  # two separators: no date
])
def test_journal_names_and_folders_date_a_note(path: str, day: dt.date | None) -> None:
    """Logseq's ``journals/2024_03_05.md``, Dendron's ``daily.journal.2024.03.05.md`` and a
    ``2024/03/05.md`` daily-notes folder were undated: "what did I do on 5 March 2024" did not
    prefer them.  Which notes are chunked as daily logs is unchanged (the file name's ISO date)."""
    assert path_date(path) == day
    assert line_dates(path, "- a\n- b") == [day, day]
    if "-" not in path:
        assert file_date(path) is None


TOKYO = dt.timezone(dt.timedelta(hours=9))


@pytest.mark.parametrize("front,day", [
    ("---\ndate: 2024-03-05\ntags: [trip]\n---\n", D),  # Obsidian, Jekyll
    ("---\ntitle: Trip\ndate: '2024-03-05'\n---\n", D),
    ('---\ncreated: "2024-03-05 09:12"\n---\n', D),
    ("---\ncreated: 2024-03-04T20:00:00Z\n---\n", D),  # an instant in UTC: the day in the user's zone
    ("+++\ndate = 2024-03-05T10:00:00+01:00\n+++\n", D),  # Hugo's TOML, a time with its offset
    ("---\ndate: March 5, 2024\n---\n", D),
    ("---\ncreated: 1709596800000\n---\n", D),  # Dendron's milliseconds (2024-03-05 00:00 UTC)
    ("---\nupdated: 2024-06-01\ncreated: 2024-03-05\n---\n", D),  # the last edit is not the note's day
    ("---\ncreated: 2024-01-01\ndate: 2024-03-05\n---\n", D),  # date wins over created
    ("---\nupdated: 2024-06-01\n---\n", None),
    ("---\ndate: 2024-02-30\n---\n", None),
    ("---\nmeta:\n  date: 2024-03-05\n---\n", None),  # a nested key is some other thing's date
    ("---\n---\n", None),
    ("Some prose, date: 2024-03-05\n", None),  # no front matter
])
def test_front_matter_dates_a_note(front: str, day: dt.date | None) -> None:
    """A note's front matter ``date:`` / ``created:`` (YAML or TOML) was ignored: an Obsidian or
    Hugo note dated there was undated, its period questions did not prefer it."""
    assert front_matter_date(front + "# Trip\nBooked the ferry.\n", TOKYO) == day
    n = front.count("\n")
    days = line_dates("notes/trip.md", front + "# Trip\nBooked the ferry.\n## 2024-04-01\nPaid it.", TOKYO)
    assert days[n:] == [day, day, dt.date(2024, 4, 1), dt.date(2024, 4, 1)]  # a dated heading still wins


def test_memory_md_stays_undated_by_its_front_matter() -> None:
    """MEMORY.md is evergreen: a template's ``created:`` is not the day of its facts (its dated
    headings still date their sections)."""
    note = "---\ncreated: 2023-01-01\n---\n# Memory\n- likes tea\n## 2024-03-05\n- met Sam"
    assert line_dates("MEMORY.md", note) == [None] * 5 + [D, D]
    assert line_dates("memory.md", "Date: 2023-01-01\n- likes tea") == [None, None]
    assert line_dates("notes/MEMORY.md", "Date: 2024-03-05\n- likes tea") == [D, D]


def test_a_date_in_the_file_name_wins_over_front_matter() -> None:
    assert line_dates("memory/2024-03-06.md", "---\ndate: 2024-03-05\n---\n- a") == [dt.date(2024, 3, 6)] * 4
    assert line_dates("journals/2024_03_06.md", "---\ndate: 2024-03-05\n---\n- a") == [dt.date(2024, 3, 6)] * 4


@pytest.mark.parametrize("note,day", [
    ("# Roof quote\n\nCreated: March 5, 2024 9:12 AM\nTags: house\n\nThe roofer quoted 4000.\n", D),  # Notion
    ("Gym plan\n\nCreated: 2024-03-05 08:00\n\nDeadlift day.\n", D),
    ("# Standup\nAttendees: Bob\nDate: 5 mars 2024\n\n- shipped it\n", D),  # a meeting template
    ("Date: 2024-03-05\n\n- shipped it\n", D),
    ("title:: Trip\ndate:: [[Mar 5th, 2024]]\n\n- booked the ferry\n", D),  # Logseq's page properties
    ("created-at:: 1709596800000\n- booked the ferry\n", D),
    ("---\ntags: [house]\n---\n# Roof quote\n\nCreated: 2024-03-05\n\nQuoted 4000.\n", D),
    ("# Notes\n\nSome prose.\n\nDate: 2024-03-05\n", None),  # a line further down is no property of the note
    ("# Memory\n\n- Ana: Created: 2024-03-05\n", None),
    ("# Roof\n\nUpdated: 2024-03-05\n", None),
])
def test_properties_under_a_title_date_a_note(note: str, day: dt.date | None) -> None:
    """Notion's export writes a page's properties under its title (``Created: March 5, 2024 9:12
    AM``); such a note was undated though its day is written at its top."""
    assert header_date(note) == day
    assert set(line_dates("notes/roof.md", note)) == {day}


@pytest.mark.parametrize("heading,day", [
    ("5 mars 2024", D), ("mardi 5 mars 2024", D), ("1er mars 2024", dt.date(2024, 3, 1)),
    ("5. März 2024", D), ("Dienstag, 5. Maerz 2024", D), ("5 de marzo de 2024", D),
    ("5 de março de 2024", D), ("5 marzo 2024", D), ("5 maart 2024", D), ("5 févr. 2024", dt.date(2024, 2, 5)),
    ("12 décembre 2024", dt.date(2024, 12, 12)), ("11 novembre 2024", dt.date(2024, 11, 11)),
    ("3 ottobre 2024", dt.date(2024, 10, 3)), ("2024年3月5日", D), ("2024年03月05日（火）", D),
    ("2024년 3월 5일", D), ("05.03.2024", D), ("Tuesday, March 5, 2024", D),
    ("30 février 2024", None), ("Mars 2024 plans", None), ("Session 1, 1:56 pm", None), ("v1.2.3", None),
])
def test_headings_in_other_languages_are_dated(heading: str, day: dt.date | None) -> None:
    """``## 5 mars 2024``, ``## 5. März 2024`` and ``## 2024年3月5日`` dated nothing (only English
    month names and ISO dates were read), so their lines were undated."""
    assert text_date(heading) == day
    assert line_dates("notes/log.md", f"# Log\n## {heading}\n- a")[1:] == [day, day]


def test_a_name_or_heading_in_nfd_is_dated_as_in_nfc(make_workspace, keyword_config) -> None:
    """A note named on macOS is named in NFD: '3 fe\u0301vrier 2024.md' (or '5. Ma\u0308rz 2024.md',
    a heading pasted from a PDF the same) was undated, the month names being read in NFC only."""
    import unicodedata

    nfd = {unicodedata.normalize("NFD", name): text for name, text in {
        "memory/journal/3 février 2024.md": "- Repaired the kayak paddles.\n",
        "memory/journal/5. März 2024.md": "- Booked the ferry.\n",
    }.items()}
    heading = "# " + unicodedata.normalize("NFD", "12 décembre 2023") + "\n\n- Bought the skis.\n"
    assert text_date(unicodedata.normalize("NFD", "2 août 2023")) == dt.date(2023, 8, 2)
    ws = make_workspace({"MEMORY.md": "# Memory\n", "memory/ski.md": heading, **nfd})
    with Memory(ws, config=keyword_config) as mem:
        mem.sync()
        for day, path in (("2024-02-03", "3 février 2024.md"), ("2024-03-05", "5. März 2024.md"),
                          ("2023-12-12", "ski.md")):
            [hit] = mem.store.chunks_in_period(day, day, 20)
            assert unicodedata.normalize("NFC", hit.path).endswith(path), (day, hit.path)


def test_period_questions_find_notes_other_tools_dated(make_workspace, keyword_config) -> None:
    """Through sync and search: every note of 5 March 2024, whatever tool wrote it, is of that day."""
    notes = {
        "vault/journals/2024_03_05.md": "- Saw the dentist about the molar\n\tstatus:: done\n",
        "vault/journals/2024_03_20.md": "- Saw the dentist about the crown\n",
        "vault/Daily/2024/03/05.md": "Bought kayak paddles.\n",
        "vault/daily.journal.2024.03.05.md": "Repaired the bike chain.\n",
        "vault/trip.md": "---\ndate: 2024-03-05\n---\n# Trip\nBooked the ferry.\n",
        "vault/Roof quote 3f2a.md": "# Roof quote\n\nCreated: 2024-03-05 9:12 AM\n\nQuoted 4000.\n",
        "vault/journal-fr.md": "# Journal\n\n## 5 mars 2024\nAcheté du pain.\n\n## 20 mars 2024\nLavé la voiture.\n",
    }
    ws = make_workspace({"MEMORY.md": "# Memory\n", **notes})
    cfg = {"memorySearch": {**keyword_config["memorySearch"], "extraPaths": ["vault"]}}  # type: ignore[dict-item]
    with Memory(ws, config=cfg) as mem:
        mem.sync()
        rows = mem.store.chunks_in_period("2024-03-05", "2024-03-05", 20)
        assert sorted({h.path for h in rows}) == sorted([
            "vault/Daily/2024/03/05.md", "vault/daily.journal.2024.03.05.md", "vault/Roof quote 3f2a.md",
            "vault/journal-fr.md", "vault/journals/2024_03_05.md", "vault/trip.md"])
        resp = mem.search("When did I see the dentist on 5 March 2024?", explain=True)
        top = resp.results[0]
        assert top.path == "vault/journals/2024_03_05.md" and top.explain["inPeriod"] is True
        assert top.explain["dates"] == "2024-03-05"


def test_a_long_front_matter_value_is_read_in_linear_time() -> None:
    """The value pattern (lazy, then trailing spaces) was quadratic: a front matter ``date:`` line
    of 16,000 spaces held the sync for a second, one of 200,000 for minutes."""
    code = ("from memdir.dates import line_dates\n"
            "pad = ' ' * 200_000\n"
            "print(line_dates('n.md', '---\\ndate: x' + pad + 'y\\n---\\nbody')[-1],"
            " line_dates('n.md', '# T\\nDate: x' + pad + 'y\\n\\nbody')[-1],"
            " line_dates('n.md', '---\\ndate: 2024-03-05' + pad + '\\n---\\nbody')[-1])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=30, check=True)
    assert out.stdout.split() == ["None", "None", "2024-03-05"]


def test_the_cli_prefers_a_journal_of_the_day_asked_about(make_workspace, run_cli) -> None:
    """``memdir search`` over an Obsidian vault in ``extraPaths``: the Logseq journal and the
    front-matter-dated note of 5 March 2024 are of that day, the journal of the 20th is not."""
    ws = make_workspace({
        "memdir.toml": '[memorySearch]\nprovider = "none"\nextraPaths = ["vault"]\n',
        "MEMORY.md": "# Memory\n",
        "vault/journals/2024_03_05.md": "- Saw the dentist about the molar\n",
        "vault/journals/2024_03_20.md": "- Saw the dentist about the crown\n",
        "vault/visit.md": "---\ncreated: 2024-03-05T10:00:00Z\n---\nThe dentist's new address is Elm Street 4.\n",
    })
    out = run_cli("search", "When did I see the dentist on 5 March 2024?", "--json", "--explain", "-w", str(ws),
                  env={"MEMDIR_USER_TIMEZONE": "UTC"}, check=True)
    results = json.loads(out.stdout)["results"]
    by_path = {r["path"]: r["explain"] for r in results}
    assert by_path["vault/journals/2024_03_05.md"]["inPeriod"] is True
    assert by_path["vault/visit.md"]["dates"] == "2024-03-05"
    assert by_path.get("vault/journals/2024_03_20.md", {"inPeriod": False})["inPeriod"] is False
    assert results[0]["path"] in ("vault/journals/2024_03_05.md", "vault/visit.md")
