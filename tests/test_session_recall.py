"""Retrieval over session transcripts searched beside notes: what a result shows and cites.

Real transcripts in a real sessions folder, a real index, searched through :class:`Memory`."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.api import Memory
from memdir.config import load_config

SESSIONS = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}}


def _sessions_dir(ws: Path, state: Path) -> Path:
    d = load_config(workspace=ws, state_dir=state).settings.sessions_dir
    d.mkdir(parents=True, exist_ok=True)
    return d


def _write_transcript(path: Path, turns: list[tuple[str, Any]]) -> None:
    """A session header, then one message record per ``(role, content)``."""
    lines = [json.dumps({"type": "session", "id": path.stem, "timestamp": "2026-01-16T14:00:00Z"})]
    for i, (role, content) in enumerate(turns):
        lines.append(json.dumps({"type": "message", "timestamp": 1_768_572_000_000 + i * 1000,
                                 "message": {"role": role, "content": content}}))
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


TURNS = [
    ("user", "We picked the Quokka hotel in Lisbon for the offsite in March."),
    ("assistant", "Noted: the Quokka hotel, Lisbon, March offsite. Anything else to book?"),
    ("user", "Yes, the dinner at the quokka-friendly tasca on the second night."),
]


def test_the_same_turns_in_a_note_and_a_transcript_take_one_place(
        make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """A conversation written down in a daily log (or by the session hook, as ``user: …`` lines)
    is also its transcript: with the sessions source on, both answered a question about it, as
    two of its results (here the only two places), so the other note that matched never showed.
    The copy ranked second is left out, whichever source it is; the other note takes its place."""
    ws = make_workspace({
        "memory/2026-01-16.md": "# 2026-01-16\n\n## Chat with the agent\n\n" + "".join(
            f"- {role}: {text}\n" for role, text in TURNS),
        "memory/2026-01-20.md": "# 2026-01-20\n- Paid the Quokka deposit, 400 euros.\n",
        **{f"memory/2026-02-{d:02d}.md": f"# 2026-02-{d:02d}\n- groceries, a run, emails ({d})\n" for d in range(1, 9)},
    })
    state = tmp_path / "state"
    _write_transcript(_sessions_dir(ws, state) / "s1.jsonl", [(r, [{"type": "text", "text": t}]) for r, t in TURNS])
    with Memory(ws, state_dir=state, config=SESSIONS) as mem:
        mem.sync(reason="test")
        two = [r.path for r in mem.search("Quokka hotel", max_results=2, min_score=0).results]
        # the transcript alone, as a note alone, is still found
        one = [r.path for r in mem.search("quokka-friendly tasca", max_results=6, min_score=0).results]
    assert "memory/2026-01-20.md" in two, two
    assert not {"sessions/s1.jsonl", "memory/2026-01-16.md"} <= set(two), two
    assert one and one[0] in ("sessions/s1.jsonl", "memory/2026-01-16.md"), one


def test_a_transcript_saying_more_than_the_note_is_still_shown(
        make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """Only a result whose every line a better one of the other source shows is left out: a note
    and a transcript that each hold a turn the other does not are both results."""
    ws = make_workspace({"memory/2026-01-16-quokka.md": f"user: {TURNS[0][1]}\n- the quokka hotel invoice came\n"})
    state = tmp_path / "state"
    _write_transcript(_sessions_dir(ws, state) / "s1.jsonl", [("user", TURNS[0][1]),
                                                             ("assistant", "The quokka hotel has a rooftop pool.")])
    with Memory(ws, state_dir=state, config=SESSIONS) as mem:
        mem.sync(reason="test")
        shown = {r.path for r in mem.search("quokka hotel", max_results=6, min_score=0).results}
    assert shown == {"memory/2026-01-16-quokka.md", "sessions/s1.jsonl"}


HEARTBEAT_POLL = ("Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat "
                  "old tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK.")


def test_heartbeat_polls_answered_heartbeat_ok_are_not_indexed(
        make_workspace: Callable[..., Path], tmp_path: Path) -> None:
    """An agent polled every 30 minutes (OpenClaw's heartbeat, memdir's Agent.send(heartbeat=True))
    keeps each poll and its HEARTBEAT_OK in the transcript: a day of them was 48 copies of one
    prompt in the index, which answered 'what tasks did I mention?' alone (score 0, the note and the
    message about tasks not shown: 'tasks' was in every chunk), and filled the snippet of a real
    answer.  The poll and its silent reply are left out; a message answered NO_REPLY is kept."""
    ws = make_workspace({
        "memory/2026-01-10.md": "# 2026-01-10\n- Open tasks: renew the passport, call the plumber about the leak.\n",
        **{f"memory/2026-01-{d}.md": f"# 2026-01-{d}\n- groceries, a run and emails ({d})\n" for d in range(11, 23)},
    })
    state = tmp_path / "state"
    turns: list[tuple[str, Any]] = []
    for i in range(48):
        if i == 5:
            turns += [("user", "Remind me: the tasks for the garage sale are pricing books and printing flyers."),
                      ("assistant", [{"type": "text", "text": "Got it, noted."}])]
        if i == 20:
            turns += [("user", "(group chat) Dana: the barbecue moved to Sunday"),
                      ("assistant", [{"type": "text", "text": "NO_REPLY"}])]
        turns += [("user", HEARTBEAT_POLL), ("assistant", [{"type": "text", "text": "HEARTBEAT_OK"}])]
    _write_transcript(_sessions_dir(ws, state) / "main.jsonl", turns)
    with Memory(ws, state_dir=state, config=SESSIONS) as mem:
        mem.sync(reason="test")
        tasks = mem.search("what tasks did I mention?", max_results=6).results
        barbecue = mem.search("when is the barbecue?", max_results=6).results
        shown = mem.get("sessions/main.jsonl").text
    assert {r.path for r in tasks} == {"memory/2026-01-10.md", "sessions/main.jsonl"}, tasks
    assert not any("HEARTBEAT" in r.snippet for r in tasks + barbecue)
    assert barbecue and "barbecue moved to Sunday" in barbecue[0].snippet
    assert "HEARTBEAT" not in shown and "NO_REPLY" not in shown and "garage sale" in shown


def test_a_message_answered_heartbeat_ok_by_mistake_is_kept(tmp_path: Path) -> None:
    """Only a poll (a message naming the heartbeat) goes with its HEARTBEAT_OK: a real message a
    model answered with the token is still indexed."""
    from memdir.sessions.transcript import session_document

    t = tmp_path / "s.jsonl"
    _write_transcript(t, [("user", "the locksmith comes Tuesday at 9"), ("assistant", "HEARTBEAT_OK"),
                          ("user", HEARTBEAT_POLL), ("assistant", "**HEARTBEAT_OK**")])
    doc = session_document(t)
    assert doc.text == "User: the locksmith comes Tuesday at 9" and doc.line_map == [2]
