"""session-memory hook (R§13, R§18.11) with R§17 vectors 63-65."""

from __future__ import annotations

import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from memdir.sessions.hook import (
    clean_slug,
    find_transcript,
    format_session_memory,
    llm_slug,
    recent_messages,
    run_session_memory_hook,
)
from memdir.sessions.store import SessionStore, append_record, message_record

KEY = "agent:main:main"
NOW = datetime(2026, 1, 16, 14, 30, 5, tzinfo=UTC)


def write_transcript(path: Path, records: list[dict[str, object]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    return path


def user(text: object, **extra: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": "user", "content": text, **extra}}


def assistant(text: object) -> dict[str, object]:
    return {"type": "message", "message": {"role": "assistant", "content": text}}


def run(ws: Path, entry: dict[str, object] | None, **kw: object):
    return run_session_memory_hook(action=kw.pop("action", "new"), session_key=KEY, workspace=ws,
                                   previous_entry=entry, now=kw.pop("now", NOW),
                                   timezone=kw.pop("timezone", "UTC"), **kw)


def test_vector_63_last_n_after_filtering(tmp_path: Path) -> None:
    records: list[dict[str, object]] = []
    for i in range(1, 11):
        records.append(user(f"Message {i}"))
        records.append({"type": "message", "message": {"role": "tool", "content": "tool_result"}})
        records.append({"type": "tool_use", "name": "x"})
    records += [user("/help"), user("/new"), user([{"type": "text", "text": "/reset now"}])]
    t = write_transcript(tmp_path / "s" / "abc.jsonl", records)
    assert recent_messages(t, 3) == ["user: Message 8", "user: Message 9", "user: Message 10"]
    res = run(tmp_path / "ws", {"sessionId": "abc", "sessionFile": str(t)}, messages=3)
    text = res.path.read_text()
    for i in (8, 9, 10):
        assert f"user: Message {i}" in text
    assert "Message 7" not in text and "/help" not in text and "/new" not in text
    assert "tool_result" not in text and res.messages == 3


def test_message_extraction_rules(tmp_path: Path) -> None:
    t = write_transcript(tmp_path / "t.jsonl", [
        user([{"type": "image"}, {"type": "text", "text": "first block"}, {"type": "text", "text": "second"}]),
        user("relayed", provenance={"kind": "inter_session"}),
        {"type": "message", "provenance": {"kind": "inter_session"}, "message": {"role": "user", "content": "r2"}},
        assistant("multi\nline\nreply"),
        assistant(""),
        assistant([{"type": "text", "text": "   "}]),
        {"type": "message", "message": {"role": "system", "content": "sys"}},
        {"type": "custom", "message": {"role": "user", "content": "not a message record"}},
    ])
    with open(t, "a") as fh:
        fh.write('{"type":"message","message":{"role":"user","content":"torn')
    assert recent_messages(t, 15) == ["user: first block", "assistant: multi\nline\nreply"]


POLL = "Read HEARTBEAT.md if it exists (workspace context). If nothing needs attention, reply HEARTBEAT_OK."


@pytest.mark.parametrize("limit", [4, 0])
def test_heartbeat_polls_and_silent_replies_are_not_saved(tmp_path: Path, limit: int) -> None:
    """An agent polled every 30 minutes between messages saved the polls and their HEARTBEAT_OK of
    its last messages, and none of the conversation before them; they are left out as the index
    leaves them out (a message answered NO_REPLY, from a group chat, is kept, without the token)."""
    t = write_transcript(tmp_path / "t.jsonl", [
        user("the boiler service is booked for March 3"), assistant("Noted, March 3."),
        user("(group) Dana: bring the cake"), assistant("NO_REPLY"),
        *[r for _ in range(5) for r in (user(POLL), assistant([{"type": "text", "text": " HEARTBEAT_OK "}]))],
    ])
    assert recent_messages(t, limit) == ["user: the boiler service is booked for March 3",
                                         "assistant: Noted, March 3.", "user: (group) Dana: bring the cake"][-limit:]
    # a real message a model answered HEARTBEAT_OK by mistake is kept (a poll names the heartbeat)
    t = write_transcript(tmp_path / "t2.jsonl", [user("the locksmith comes Tuesday"), assistant("HEARTBEAT_OK")])
    assert recent_messages(t, limit) == ["user: the locksmith comes Tuesday"]


def test_vector_64_file_name_and_format_without_slug(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    t = write_transcript(tmp_path / "s" / "abc.jsonl", [user("hello"), assistant("hi")])
    res = run(ws, {"sessionId": "abc", "sessionFile": str(t)}, command_source="telegram")
    assert res.path == ws / "memory" / "2026-01-16-1430.md" and res.slug == "1430"
    assert res.path.read_text() == (
        "# Session: 2026-01-16 14:30:05 UTC\n\n"
        f"- **Session Key**: {KEY}\n- **Session ID**: abc\n- **Source**: telegram\n\n"
        "## Conversation Summary\n\nuser: hello\nassistant: hi\n"
    )


def test_vector_64_no_content_no_summary_section(tmp_path: Path) -> None:
    res = run(tmp_path / "ws", None)
    assert res.path.read_text() == (
        f"# Session: 2026-01-16 14:30:05 UTC\n\n- **Session Key**: {KEY}\n"
        "- **Session ID**: unknown\n- **Source**: unknown\n"
    )
    assert "## Conversation Summary" not in format_session_memory(
        now=NOW, session_key=KEY, session_id=None, source=None, content="")


@pytest.mark.parametrize(
    ("reply", "slug"),
    [("  API Design!\n", "api-design"), ("Vendor Pitch (Q3)", "vendor-pitch-q3"), ("!!!", None), ("", None),
     (None, None), ("a" * 40, "a" * 30), ("Émigré café", "migr-caf"), ("--x--", "x"),
     ("word " * 10, "word-word-word-word-word-word")],
)
def test_vector_65_slug_cleanup(reply: str | None, slug: str | None) -> None:
    assert clean_slug(reply) == slug


def test_llm_slug_used_and_fallback_on_garbage(tmp_path: Path) -> None:
    t = write_transcript(tmp_path / "s" / "abc.jsonl", [user("Let's design the API")])
    prompts: list[str] = []

    def llm(prompt: str) -> str:
        prompts.append(prompt)
        return "  API Design!\n"

    res = run(tmp_path / "ws", {"sessionId": "abc", "sessionFile": str(t)}, slug_llm=llm)
    assert res.path.name == "2026-01-16-api-design.md"
    assert "user: Let's design the API" in prompts[0]
    res2 = run(tmp_path / "ws2", {"sessionId": "abc", "sessionFile": str(t)}, slug_llm=lambda p: "!!!")
    assert res2.path.name == "2026-01-16-1430.md"

    def broken(prompt: str) -> str:
        raise RuntimeError("model down")

    res3 = run(tmp_path / "ws3", {"sessionId": "abc", "sessionFile": str(t)}, slug_llm=broken)
    assert res3.path.name == "2026-01-16-1430.md" and res3.error is None


def test_slug_budget_is_enforced() -> None:
    def slow(prompt: str) -> str:
        time.sleep(2)
        return "too-late"

    t0 = time.monotonic()
    assert llm_slug("content", slow, timeout=0.2) is None
    assert time.monotonic() - t0 < 1.5
    assert llm_slug("", lambda p: "x") is None  # no content: no model call


def test_slug_prompt_uses_only_first_2000_chars(tmp_path: Path) -> None:
    seen: list[str] = []
    llm_slug("a" * 1995 + "TAILMARKER" + "b" * 5000, lambda p: seen.append(p) or "x")
    assert "a" * 1995 + "TAILM" in seen[0]  # exactly 2000 characters of content
    assert "TAILMA" not in seen[0] and "b" not in seen[0].split("a" * 1995, 1)[1]


def test_never_overwrites_existing_files(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    existing = ws / "memory" / "2026-01-16-1430.md"
    existing.write_text("precious")
    t = write_transcript(tmp_path / "s" / "abc.jsonl", [user("hello")])
    names = [run(ws, {"sessionId": "abc", "sessionFile": str(t)}).path.name for _ in range(3)]
    assert names == ["2026-01-16-1430-2.md", "2026-01-16-1430-3.md", "2026-01-16-1430-4.md"]
    assert existing.read_text() == "precious"


def test_reads_pre_rotation_transcript_after_reset_rename(tmp_path: Path) -> None:
    """#17563: /new renamed the live transcript to .reset.<ts> before the hook ran."""
    store = SessionStore(tmp_path / "sessions")
    store.open_session(KEY)
    store.append(KEY, message_record("user", "we chose postgres"))
    store.append(KEY, message_record("assistant", "noted: postgres"))
    rot = store.rotate(KEY, when=NOW)
    assert rot.previous and not Path(rot.previous.session_file).exists()
    res = run(tmp_path / "ws", rot.previous, sessions_dir=store.dir)
    assert res.transcript == rot.rotated_file
    assert "user: we chose postgres\nassistant: noted: postgres" in res.path.read_text()


def test_find_transcript_order(tmp_path: Path) -> None:
    d = tmp_path / "s"
    live = write_transcript(d / "abc.jsonl", [user("live")])
    reset = write_transcript(d / "abc.jsonl.reset.2026-01-01T00-00-00.000Z", [user("old")])
    # A recorded .reset. name prefers the live original if it exists...
    assert find_transcript(str(reset), "abc", [d]) == live
    live.unlink()
    # ...else the reset file itself.
    assert find_transcript(str(reset), "abc", [d]) == reset
    # No recorded file: <sessionId>.jsonl, then the newest <sessionId>-topic-*.jsonl.
    write_transcript(d / "xyz-topic-1.jsonl", [user("t1")])
    t2 = write_transcript(d / "xyz-topic-2.jsonl", [user("t2")])
    assert find_transcript(None, "xyz", [d]) == t2
    # Never an unrelated "latest .jsonl" (#143328).
    write_transcript(d / "unrelated.jsonl", [user("someone else's session")])
    assert find_transcript(None, "nope", [d]) is None
    assert find_transcript(str(d / "gone.jsonl"), None, [d]) is None


def test_empty_live_transcript_falls_back_to_newest_reset_sibling(tmp_path: Path) -> None:
    d = tmp_path / "s"
    live = write_transcript(d / "abc.jsonl", [{"type": "session"}])
    write_transcript(d / "abc.jsonl.reset.2026-01-01T00-00-00.000Z", [user("older")])
    write_transcript(d / "abc.jsonl.reset.2026-01-02T00-00-00.000Z", [user("newer")])
    res = run(tmp_path / "ws", {"sessionId": "abc", "sessionFile": str(live)})
    assert "user: newer" in res.path.read_text() and "older" not in res.path.read_text()


def test_other_actions_and_disabled_are_ignored(tmp_path: Path) -> None:
    assert run(tmp_path / "ws", None, action="stop") is None
    assert run_session_memory_hook(action="new", session_key=KEY, workspace=tmp_path / "ws", previous_entry=None,
                                   enabled=False) is None
    assert not (tmp_path / "ws").exists()


def test_reset_action_and_naive_time(tmp_path: Path) -> None:
    res = run(tmp_path / "ws", None, action="reset", now=datetime(2026, 5, 1, 9, 7, 0), timezone=None)
    assert res.path.name == "2026-05-01-0907.md"  # a naive time is the machine's: its own wall clock


def test_a_time_at_the_calendars_ends_is_reported_not_raised(tmp_path: Path) -> None:
    """The hook never raises (its failures are reported), but a ``now`` with no day in the user's
    zone (9999-12-31 23:00 UTC is year 10000 in Kiritimati) raised OverflowError to the host."""
    for now, zone in ((datetime(9999, 12, 31, 23, 0, tzinfo=UTC), "Pacific/Kiritimati"),
                      (datetime(1, 1, 1, 0, 30, tzinfo=UTC), "America/Los_Angeles")):
        res = run(tmp_path / "ws", None, now=now, timezone=zone)
        assert res.path is None and res.error and "out of range" in res.error
    assert not (tmp_path / "ws" / "memory").exists()


def test_a_naive_time_is_the_machines_as_for_the_flush(tmp_path: Path) -> None:
    """The hook alone took a naive ``now`` for UTC: a host passing ``datetime.now()`` on a machine in
    Los Angeles at 01:00 on the 28th had its capture filed under the 27th (17:00 there), while the
    flush and the start-up context, given the same time, used the 28th."""
    import subprocess
    import sys
    import textwrap

    from helpers import SRC

    code = textwrap.dedent("""
        import sys
        from datetime import datetime
        from memdir.sessions.flush import build_flush_plan
        from memdir.sessions.hook import run_session_memory_hook
        now = datetime(2026, 11, 28, 1, 0)
        res = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=sys.argv[1],
                                      previous_entry=None, now=now, timezone="America/Los_Angeles")
        print(res.path.name, build_flush_plan(now=now, timezone="America/Los_Angeles").relative_path)
        print(res.path.read_text().splitlines()[0])
    """)
    ws = tmp_path / "ws"
    ws.mkdir()
    env = {**os.environ, "TZ": "America/Los_Angeles", "PYTHONPATH": str(SRC)}
    out = subprocess.run([sys.executable, "-c", code, str(ws)], capture_output=True, text=True, env=env,
                         timeout=60, check=True).stdout.splitlines()
    assert out == ["2026-11-28-0100.md memory/2026-11-28.md", "# Session: 2026-11-28 09:00:00 UTC"]


def test_symlinked_memory_dir_is_refused_and_reported(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    (ws / "memory").symlink_to(outside, target_is_directory=True)
    res = run(ws, None)
    assert res.path is None and res.error and "symlink" in res.error
    assert list(outside.iterdir()) == []


def test_messages_are_read_as_the_index_reads_them(tmp_path: Path) -> None:
    """``str.splitlines`` cut a record holding U+2028 or U+0085 (which ``append_record`` writes raw) in
    two and lost the message; a record nested too deep for the JSON parser failed the whole hook; a
    lone surrogate (``"\\ud800"``) could not be written as UTF-8 and failed it too."""
    d = tmp_path / "s"
    d.mkdir()
    t = d / "abc.jsonl"
    append_record(t, message_record("user", "first"))
    append_record(t, message_record("user", "line\u2028separator and next\x85line"))
    with t.open("a") as fh:
        fh.write("[" * 100_000 + "]" * 100_000 + "\n")
        fh.write('{"type":"message","message":{"role":"assistant","content":"lone \\ud800 half"}}\n')
    res = run(tmp_path / "ws", {"sessionId": "abc", "sessionFile": str(t)})
    assert res.error is None and res.messages == 3
    text = res.path.read_text(encoding="utf-8")
    assert "user: line\u2028separator and next\x85line" in text
    assert "assistant: lone \ufffd half" in text


def test_secrets_are_masked_in_the_dated_file_and_never_indexed(tmp_path: Path) -> None:
    """The capture is a memory file, indexed and shown to the agent as it is: a key said in the chat
    was written to it in clear, although the transcript's own index entry masks it (R§8)."""
    from memdir.api import Memory

    d = tmp_path / "s"
    t = write_transcript(d / "abc.jsonl", [
        user("deploy with OPENAI_API_KEY=sk-proj-abcdefghijklmnop1234 on the heron cluster"),
        assistant("the db is postgres://app:Tr0ub4dor3@db.internal/heron"),
    ])
    ws = tmp_path / "ws"
    res = run(ws, {"sessionId": "abc", "sessionFile": str(t)})
    text = res.path.read_text()
    assert "sk-proj-abcdefghijklmnop1234" not in text and "OPENAI_API_KEY=sk-pro…1234" in text
    assert "Tr0ub4dor3" not in text and "postgres://app:***@db.internal/heron" in text
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
        stored = " ".join(c.text for *_, chunks in mem.store.export_files() for c in chunks)
        assert "heron cluster" in stored and "abcdefghijklmnop1234" not in stored and "Tr0ub4dor3" not in stored


def test_hooks_at_the_same_moment_each_keep_their_own_file(tmp_path: Path) -> None:
    """Threads of one process shared one temporary name (``.<stem>.md.tmp-<pid>``): one removed the
    other's file mid-write, so captures were lost ("No such file") or saved under two names with one
    session's text."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    d = tmp_path / "s"
    entries = []
    for i in range(8):
        t = write_transcript(d / f"s{i}.jsonl", [user(f"session {i} says " + "x" * 100_000)])
        entries.append({"sessionId": f"s{i}", "sessionFile": str(t)})
    gate = threading.Barrier(len(entries))

    def one(entry: dict[str, object]):
        gate.wait()
        return run(tmp_path / "ws", entry)

    with ThreadPoolExecutor(len(entries)) as pool:
        results = list(pool.map(one, entries))
    assert [r.error for r in results] == [None] * len(entries)
    names = sorted(p.name for p in (tmp_path / "ws" / "memory").iterdir())
    assert names == sorted(["2026-01-16-1430.md", *(f"2026-01-16-1430-{n}.md" for n in range(2, 9))])
    saved = sorted(r.path.read_text().split("session ", 1)[1][0] for r in results)
    assert saved == [str(i) for i in range(8)]  # every session's own text, once


def test_file_is_dated_by_the_users_day_so_the_next_session_loads_it(tmp_path: Path) -> None:
    """A session that ends at 20:30 in Los Angeles is 04:30 UTC the next day: named by the UTC day,
    the capture was missing from the next session's start-up context (today and yesterday, local)."""
    from memdir.prompt import build_session_context

    d = tmp_path / "s"
    t = write_transcript(d / "abc.jsonl", [user("we chose the walrus layout")])
    ws = tmp_path / "ws"
    ended = datetime(2026, 1, 17, 4, 30, 5, tzinfo=UTC)  # 2026-01-16 20:30:05 in Los Angeles
    res = run(ws, {"sessionId": "abc", "sessionFile": str(t)}, now=ended, timezone="America/Los_Angeles")
    assert res.path.name == "2026-01-16-2030.md"
    assert res.path.read_text().startswith("# Session: 2026-01-17 04:30:05 UTC\n")  # the header stays UTC
    context = build_session_context(workspace=ws, timezone="America/Los_Angeles", now=ended, chat_type="direct")
    assert "walrus layout" in context.text
    # Across the DST change (2026-03-08 02:00 local): 23:59:59.9 local is still that day.
    late = datetime(2026, 3, 9, 6, 59, 59, 900_000, tzinfo=UTC)  # 2026-03-08 23:59:59.9 PDT
    res = run(ws, {"sessionId": "abc", "sessionFile": str(t)}, now=late, timezone="America/Los_Angeles")
    assert res.path.name == "2026-03-08-2359.md"


def test_a_symlink_named_like_a_rotated_transcript_is_never_read(tmp_path: Path) -> None:
    """Every candidate transcript was checked for symlinks except the ``.reset.*`` fallback, which
    copied whatever the link pointed at into the dated memory file."""
    d = tmp_path / "s"
    live = write_transcript(d / "abc.jsonl", [{"type": "session"}])
    outside = write_transcript(tmp_path / "elsewhere" / "other.jsonl", [user("another agent's private talk")])
    (d / "abc.jsonl.reset.2026-01-02T00-00-00.000Z").symlink_to(outside)
    res = run(tmp_path / "ws", {"sessionId": "abc", "sessionFile": str(live)})
    assert res.error is None and res.messages == 0
    assert "private talk" not in res.path.read_text()
    os.remove(live)  # the live file rotated away: the link is not taken for it either
    assert find_transcript(str(live), "abc", [d]) is None


def test_a_slug_model_that_never_answers_does_not_keep_the_host_from_exiting(tmp_path: Path) -> None:
    """The hook gives up on the slug after its timeout, but the pool thread asking was joined at
    interpreter exit: a host whose slug model never answered could not exit until it did."""
    from helpers import python_child

    code = ("import time\nfrom memdir.sessions import hook\n"
            "print(hook.llm_slug('we talked about kafka', lambda p: time.sleep(600) or 'late', timeout=0.2))\n")
    done = python_child(code, state_dir=tmp_path, timeout=60)  # (without the fix: 600 s, killed at 60)
    assert done.returncode == 0 and done.stdout.strip() == "None"
