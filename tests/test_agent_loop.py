"""The reference agent loop end to end: real HTTP on loopback, real files, the real index."""

from __future__ import annotations

import io
import itertools
import json
import sys
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from helpers import Trickler
from memdir.agent import Agent, AgentOptions, ChatClient, MemoryBackend, MemoryIndexBackend, chat_main
from memdir.api import Memory
from memdir.config import load_config
from memdir.sessions.flush import FlushSettings
from memdir.sessions.store import SessionStore, read_records
from memdir.testing.chat_server import FactKeeperModel, ScriptedChatServer, ScriptQueue

API_KEY = "test-key-123"
START = datetime(2026, 3, 4, 12, 0, tzinfo=UTC)
FILLER = ("Let's keep talking about the migration plan, the test matrix and the rollout steps for the "
          "service; nothing here needs remembering, it is just conversation to fill the context window. ")


class Clock:
    """Deterministic time: one minute per reading."""

    def __init__(self, start: datetime = START):
        self.ticks = itertools.count()
        self.start = start

    def __call__(self) -> datetime:
        return self.start + timedelta(seconds=20 * next(self.ticks))


class Env:
    def __init__(self, tmp: Path, responder: Callable[[dict[str, Any]], dict[str, Any]]):
        self.ws = tmp / "ws"
        self.ws.mkdir()
        self.state = tmp / "state"
        self.server = ScriptedChatServer(responder, api_key=API_KEY).start()
        self.memory = Memory(self.ws, state_dir=self.state, config={"memorySearch": {"provider": "none"}})
        self.backend = MemoryIndexBackend(self.memory, timezone="UTC")
        self.store = SessionStore(self.memory.settings.sessions_dir)
        self.client = ChatClient(self.server.url, "scripted", API_KEY)
        self.clock = Clock()

    def agent(self, key: str = "agent:main:main", **opts: Any) -> Agent:
        defaults: dict[str, Any] = dict(
            context_window=3000, flush=FlushSettings(reserve_tokens_floor=1000, soft_threshold_tokens=500),
            keep_recent_turns=2, timezone="UTC")
        defaults.update(opts)
        return Agent(client=self.client, backend=self.backend, store=self.store, session_key=key,
                     workspace=self.ws, options=AgentOptions(**defaults), clock=self.clock)

    def flush_requests(self) -> list[dict[str, Any]]:
        """Requests that open a flush turn (the flush prompt is the newest message)."""
        return [r for r in self.server.requests
                if r["body"]["messages"][-1]["role"] == "user"
                and "Pre-compaction memory flush." in str(r["body"]["messages"][-1]["content"])]

    def close(self) -> None:
        self.client.close()
        self.memory.close()
        self.server.stop()


@pytest.fixture
def env(tmp_path: Path) -> Iterator[Env]:
    e = Env(tmp_path, FactKeeperModel())
    yield e
    e.close()



def _flushing_agent(e: Any) -> Any:
    """An agent whose flush is due once a prompt passes 1,500 tokens (100,000 - 98,000 reserved - 500 soft)."""
    return e.agent(context_window=100_000, flush=FlushSettings(reserve_tokens_floor=98_000, soft_threshold_tokens=500))


def test_backend_adapter_satisfies_protocol(env: Env) -> None:
    assert isinstance(env.backend, MemoryBackend)


def test_flush_then_compaction_then_recall_in_new_session(env: Env) -> None:
    agent = env.agent()
    assert agent.send("Remember that my sister Alice lives in Lisbon.").startswith("Okay, noted.")
    daily = env.ws / "memory" / "2026-03-04.md"
    turns = 0
    while agent.stats.flushes == 0:
        agent.send(FILLER + str(turns))
        turns += 1
        assert turns < 40, "flush never triggered"
    # The flush turn read today's file, appended the fact and stayed silent.
    assert daily.read_text() == "- my sister Alice lives in Lisbon.\n"
    assert agent.stats.silent_flushes == 1
    entry = env.store.get(agent.key)
    assert entry.memory_flush_compaction_count == 0 and entry.memory_flush_at is not None
    assert entry.compaction_count == 0
    flush_req = env.flush_requests()[0]["body"]
    system = flush_req["messages"][0]["content"]
    assert "Pre-compaction memory flush turn." in system and "memory/2026-03-04.md" in system
    assert "Current time:" in flush_req["messages"][-1]["content"]
    # The flush turn's messages are not part of the conversation.
    assert not any("Pre-compaction" in str(m.get("content")) for m in agent.history)
    records = read_records(agent.transcript)
    assert [r["phase"] for r in records if r["type"] == "memory_flush"] == ["start", "end"]

    while agent.stats.compactions == 0:
        agent.send(FILLER + str(turns))
        turns += 1
        assert turns < 80, "compaction never happened"
    assert agent.stats.flushes == 1  # no second flush in the same compaction cycle
    entry = env.store.get(agent.key)
    assert entry.compaction_count == 1
    assert "Remember that my sister Alice lives in Lisbon." in agent.summary
    assert sum(1 for m in agent.history if m["role"] == "user") <= 3
    assert any(r["type"] == "compaction" for r in read_records(agent.transcript))

    # The next cycle flushes again, without duplicating the note.
    agent.send("Remember that the staging database runs on port 6543.")
    while agent.stats.flushes < 2:
        agent.send(FILLER + str(turns))
        turns += 1
        assert turns < 120, "second-cycle flush never triggered"
    assert daily.read_text() == ("- my sister Alice lives in Lisbon.\n\n"
                                 "- the staging database runs on port 6543.\n")
    assert env.store.get(agent.key).memory_flush_compaction_count == 1

    # A different, fresh session finds the notes through memory_search.
    other = env.agent("agent:main:fresh")
    assert other.history == []
    reply = other.send("Where does my sister Alice live?")
    assert "Lisbon" in reply
    hits = env.backend.search("staging database port")
    assert any("6543" in h["snippet"] for h in hits[:6])
    # Session-start context showed today's log to the new session.
    assert "memory/2026-03-04.md" in other.system_prompt()


def test_second_crossing_in_same_cycle_does_not_flush(tmp_path: Path) -> None:
    """Tokens cross the threshold, drop (without compaction), cross again: one flush only."""
    model = FactKeeperModel()
    totals = iter([1600, 1000, 1700, 1800])

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        step = model(body)
        last = body["messages"][-1]
        if last["role"] == "user" and "Pre-compaction" not in str(last["content"]):
            step["usage"] = {"prompt_tokens": next(totals), "completion_tokens": 0, "total_tokens": 0}
        return step

    e = Env(tmp_path, responder)
    try:
        agent = _flushing_agent(e)
        agent.send("Remember that the office wifi is called Nebula.")  # -> 1600 (threshold 1500)
        agent.send("a")  # flush runs first, then usage -> 1000
        assert agent.stats.flushes == 1
        agent.send("b")  # below threshold -> 1700
        agent.send("c")  # above again, same cycle -> no flush
        assert agent.stats.flushes == 1
        assert agent.stats.flush_decisions == ["no-token-count", "tokens", "below-threshold",
                                               "already-flushed-this-cycle"]
        assert len(e.flush_requests()) == 1
        assert "Nebula" in (e.ws / "memory" / "2026-03-04.md").read_text()
    finally:
        e.close()


def test_heartbeat_and_read_only_skip_flush(env: Env) -> None:
    agent = env.agent(read_only=True)
    env.store.update(agent.key, total_tokens=1900, total_tokens_fresh=True)
    agent.entry = env.store.get(agent.key)
    assert agent.flush_decision("x").reason == "read-only-workspace"
    agent2 = env.agent("agent:main:hb")
    env.store.update(agent2.key, total_tokens=1900, total_tokens_fresh=True)
    agent2.entry = env.store.get(agent2.key)
    assert agent2.flush_decision("x", heartbeat=True).reason == "heartbeat"
    agent2.send("ping", heartbeat=True)
    assert agent2.stats.flushes == 0


def test_failed_flush_does_not_break_the_turn_and_is_retried(tmp_path: Path) -> None:
    script = ScriptQueue([
        {"content": "hello", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"status": 500, "error": "model overloaded"},  # the flush turn fails
        {"content": "still here", "usage": {"prompt_tokens": 1650, "completion_tokens": 0, "total_tokens": 1650}},
        {"content": "NO_REPLY"},  # retried flush succeeds
        {"content": "fine", "usage": {"prompt_tokens": 1660, "completion_tokens": 0, "total_tokens": 1660}},
    ])
    e = Env(tmp_path, script)
    try:
        agent = _flushing_agent(e)
        assert agent.send("hi") == "hello"
        assert agent.send("next") == "still here"
        assert agent.stats.flushes == 0
        assert env_phase(agent) == ["start", "error"]
        assert agent.send("again") == "fine"
        assert agent.stats.flushes == 1 and agent.stats.silent_flushes == 1
        assert env_phase(agent) == ["start", "error", "start", "end"]
    finally:
        e.close()


def test_a_flush_that_failed_after_writing_is_not_run_again_in_the_cycle(tmp_path: Path) -> None:
    """The flush turn appended its note, then the model call after the tool result failed: the
    cycle was not marked, the next turn ran the flush again and the note was written twice."""
    script = ScriptQueue([
        {"content": "hello", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"content": "", "tool_calls": [{"name": "memory_append", "arguments": {"text": "- The wifi is Nebula."}}]},
        {"status": 500, "error": "model overloaded"},  # the flush's next call, after the note was written
        {"content": "still here", "usage": {"prompt_tokens": 1650, "completion_tokens": 0, "total_tokens": 1650}},
        {"content": "fine", "usage": {"prompt_tokens": 1660, "completion_tokens": 0, "total_tokens": 1660}},
    ])
    e = Env(tmp_path, script)
    try:
        agent = _flushing_agent(e)
        assert agent.send("hi") == "hello"
        assert agent.send("next") == "still here"  # the failed flush never costs the user's turn
        assert env_phase(agent) == ["start", "error"]
        assert [r.get("notesAppended") for r in read_records(agent.transcript) if r.get("phase") == "error"] == [1]
        assert agent.send("again") == "fine"
        assert agent.stats.flush_decisions[-1] == "already-flushed-this-cycle"
        assert env_phase(agent) == ["start", "error"]
        assert (e.ws / "memory" / "2026-03-04.md").read_text() == "- The wifi is Nebula.\n"
        assert e.store.get(agent.key).memory_flush_compaction_count == 0
    finally:
        e.close()


class _InterruptedGet(MemoryIndexBackend):
    def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict:
        raise KeyboardInterrupt  # Ctrl-C during the flush turn


def test_a_flush_interrupted_by_ctrl_c_is_run_again_in_the_cycle(tmp_path: Path) -> None:
    """Ctrl-C during the flush turn kept the cycle claimed: the flush never ran again before
    compaction, and what the user asked to remember was never written."""
    script = ScriptQueue([
        {"content": "hello", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"content": "", "tool_calls": [{"name": "memory_get", "arguments": {"path": "memory/2026-03-04.md"}}]},
        {"content": "NO_REPLY"},  # the flush, run again after the restart
        {"content": "fine", "usage": {"prompt_tokens": 1660, "completion_tokens": 0, "total_tokens": 1660}},
    ])
    e = Env(tmp_path, script)
    try:
        agent = _flushing_agent(e)
        assert agent.send("hi") == "hello"
        agent.backend = _InterruptedGet(e.memory, "UTC")
        with pytest.raises(KeyboardInterrupt):
            agent.send("next")
        resumed = _flushing_agent(e)  # `memdir chat` started again
        assert resumed.send("again") == "fine"
        assert resumed.stats.flushes == 1 and env_phase(resumed) == ["start", "error", "start", "end"]
    finally:
        e.close()


@pytest.mark.parametrize("record", [
    {"type": "message", "message": "just a string"},
    {"type": "message", "message": ["a", "list"]},
    {"type": "message", "message": {"role": "user", "content": {"not": "text"}}},
    {"type": "compaction", "keptMessages": "lots", "summary": "s"},
    {"type": "compaction", "keptMessages": 1, "summary": ["not", "text"]},
])
def test_a_session_resumes_past_records_of_the_wrong_shape(env: Env, record: dict[str, Any]) -> None:
    """A transcript is a file anyone can edit: one record of the wrong shape raised while the agent
    loaded its history (AttributeError, ValueError, TypeError), so the session could not resume."""
    agent = env.agent()
    agent.send("Remember that the cat is named Miso.")
    with agent.transcript.open("a") as fh:
        fh.write(json.dumps(record) + "\n")
    again = env.agent()
    assert all(isinstance(m.get("content"), (str, list, type(None))) for m in again.history)
    assert again.system_prompt() and again.send("What is the cat called?")


def test_a_reply_cut_inside_a_surrogate_pair_is_kept(tmp_path: Path) -> None:
    """A reply holding a lone surrogate (JSON ``"\\ud83d"``, an emoji cut in half) has no UTF-8 form:
    writing it to the transcript raised after the reply was already in the live history, and every
    later request failed to encode.  It is kept with U+FFFD in the half's place."""
    e = Env(tmp_path, ScriptQueue([{"content": "half an emoji \ud83d here"}, {"content": "next"}]))
    try:
        agent = e.agent()
        assert agent.send("hi") == "half an emoji \ufffd here"
        assert agent.send("more") == "next"
        again = e.agent()
        assert [m["content"] for m in again.history] == ["hi", "half an emoji \ufffd here", "more", "next"]
    finally:
        e.close()


def test_a_lone_surrogate_in_the_users_text_does_not_stop_the_session(tmp_path: Path) -> None:
    """Text read with ``surrogateescape`` (a non-UTF-8 byte on stdin) could not be written to the
    transcript, nor sent to the chat API, so the turn raised and every later one too."""
    e = Env(tmp_path, ScriptQueue([{"content": "got it"}, {"content": "and that"}]))
    try:
        agent = e.agent()
        assert agent.send("caf\udce9 menu") == "got it"
        assert agent.send("next") == "and that"
        assert "caf\ufffd menu" in [m["content"] for m in e.agent().history]
    finally:
        e.close()


def test_two_agents_on_one_session_flush_a_cycle_once(tmp_path: Path) -> None:
    """Each agent decided on its own cached entry and marked the cycle only after its flush turn, so
    both ran the flush and the daily log got the same note twice."""
    note = {"content": "", "tool_calls": [{"name": "memory_append", "arguments": {"text": "- The wifi is Nebula."}}]}
    script = ScriptQueue([
        {"content": "a0", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"content": "b0", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        note, {"content": "NO_REPLY"},  # a's flush
        {"content": "a1", "usage": {"prompt_tokens": 1650, "completion_tokens": 0, "total_tokens": 1650}},
        {"content": "b1", "usage": {"prompt_tokens": 1650, "completion_tokens": 0, "total_tokens": 1650}},
    ])
    e = Env(tmp_path, script)
    try:
        opts: dict[str, Any] = dict(context_window=100_000, flush=FlushSettings(reserve_tokens_floor=98_000,
                                                                                 soft_threshold_tokens=500))
        a, b = e.agent(**opts), e.agent(**opts)
        assert (a.send("hi"), b.send("hi")) == ("a0", "b0")
        assert (a.send("x"), b.send("y")) == ("a1", "b1")  # b's cached entry still said "not flushed"
        assert (a.stats.flushes, b.stats.flushes) == (1, 0)
        assert (e.ws / "memory" / "2026-03-04.md").read_text() == "- The wifi is Nebula.\n"
    finally:
        e.close()


def env_phase(agent: Agent) -> list[str]:
    return [r["phase"] for r in read_records(agent.transcript) if r["type"] == "memory_flush"]


def test_new_writes_dated_file_never_overwriting(env: Env) -> None:
    agent = env.agent()
    agent.send("We picked Postgres for the billing service.")
    agent.send("/help")
    (env.ws / "memory").mkdir(exist_ok=True)
    taken = env.ws / "memory" / "2026-03-04-project-notes.md"
    taken.write_text("an earlier capture\n")
    old_file = agent.transcript
    notice = agent.send("/new")
    # Kept: the user line and both replies; the "/help" command itself is filtered out.
    assert "Saved the last 3 messages to memory/2026-03-04-project-notes-2.md" in notice
    assert taken.read_text() == "an earlier capture\n"
    saved = (env.ws / "memory" / "2026-03-04-project-notes-2.md").read_text()
    assert saved.startswith("# Session: 2026-03-04 ")
    assert "- **Session Key**: agent:main:main" in saved and "- **Source**: cli" in saved
    assert "user: We picked Postgres for the billing service." in saved
    assert "/help" not in saved
    # The old transcript was rotated, not deleted; the new session is empty.
    assert not old_file.exists()
    assert list(old_file.parent.glob(old_file.name + ".reset.*"))
    assert agent.transcript != old_file and agent.history == []
    # Slug came from the model through the chat API, within the hook's budget.
    assert any("1-2 word slug" in str(r["body"]["messages"][-1]["content"]) for r in env.server.requests)
    # Another /new the same minute gets the next free name.
    agent.send("Second session talk.")
    agent.send("/reset")
    assert (env.ws / "memory" / "2026-03-04-project-notes-3.md").is_file()
    assert agent.stats.hook_files == ["memory/2026-03-04-project-notes-2.md", "memory/2026-03-04-project-notes-3.md"]
    # The index picked the capture up.
    assert any("Postgres" in h["snippet"] for h in env.backend.search("Postgres billing"))


def test_slug_fallback_when_model_disabled(env: Env) -> None:
    agent = env.agent(llm_slug=False)
    agent.send("hello there")
    agent.send("/new")
    files = sorted(p.name for p in (env.ws / "memory").iterdir())
    assert len(files) == 1 and files[0].startswith("2026-03-04-12") and files[0].endswith(".md")


def test_resume_from_transcript_after_restart(env: Env) -> None:
    agent = env.agent()
    agent.send("Remember that the cat is named Miso.")
    agent.send("second message")
    again = env.agent()
    assert [m["content"] for m in again.history if m["role"] == "user"] == [
        "Remember that the cat is named Miso.", "second message"]
    assert again.entry.session_id == agent.entry.session_id


def test_tool_payloads_citations_and_errors(tmp_path: Path) -> None:
    captured: list[list[dict[str, Any]]] = []

    def record(body: dict[str, Any]) -> dict[str, Any]:
        captured.append(body["messages"])
        return {"content": "done"}

    script = ScriptQueue([
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "Rex dog", "maxResults": "3"}},
                        {"name": "memory_get", "arguments": {"path": "../etc/passwd"}},
                        {"name": "memory_get", "arguments": {"path": "MEMORY.md", "from": 2.9, "lines": 1}},
                        {"name": "memory_search", "arguments": {"query": "  "}},
                        {"name": "memory_append", "arguments": {"text": "- note from tool"}},
                        {"name": "nope", "arguments": {}}]},
        record,
    ])
    e = Env(tmp_path, script)
    try:
        (e.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n")
        e.memory.sync()
        agent = e.agent("agent:main:discord:group:g1")
        assert agent.send("what is the dog called") == "done"
        tools = [json.loads(m["content"]) for m in captured[0] if m["role"] == "tool"]
        search, bad_get, good_get, blank, append, unknown = tools
        assert search["results"] and search["results"][0]["path"] == "MEMORY.md"
        assert "citation" not in search["results"][0]  # auto citations: group chat → none
        assert bad_get["disabled"] is True and bad_get["text"] == "" and bad_get["error"]
        assert good_get == {"text": "The dog is called Rex.", "path": "MEMORY.md"}
        assert blank == {"error": "query required"}
        assert append == {"ok": True, "path": "memory/2026-03-04.md"}
        assert unknown["error"].startswith("unknown tool")
        # Group chats never get MEMORY.md in the session-start context.
        assert "Rex" not in captured[0][0]["content"]
    finally:
        e.close()


def test_direct_chat_gets_citations(env: Env) -> None:
    (env.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n")
    agent = env.agent()
    agent.send("What is the dog called?")
    tool_msgs = [json.loads(m["content"]) for m in agent.history if m["role"] == "tool"]
    hit = tool_msgs[0]["results"][0]
    assert hit["citation"].startswith("MEMORY.md#L") and "\n\nSource: MEMORY.md#L" in hit["snippet"]
    assert "Rex" in agent.system_prompt()  # direct chat: MEMORY.md is in the start context


def test_memory_search_disabled_offers_no_recall_tools_nor_their_prompt(env: Env) -> None:
    """R§10: with ``memorySearch.enabled = false`` the search tools do not exist, and so neither does
    the "Memory Recall" section; the loop offered both, and every turn's search said "disabled"."""
    settings = load_config(workspace=env.ws, state_dir=env.state, env={},
                           overrides={"memorySearch": {"enabled": False}}).settings
    assert AgentOptions.from_settings(settings).memory_search is False
    (env.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n")
    agent = env.agent(memory_search=False)
    agent.send("What is the dog called?")  # the scripted model calls memory_search all the same
    request = env.server.requests[0]["body"]
    assert [t["function"]["name"] for t in request["tools"]] == ["memory_append"]
    assert "## Memory Recall" not in request["messages"][0]["content"]
    (refused,) = [json.loads(m["content"]) for m in agent.history if m["role"] == "tool"]
    assert "memory search is disabled" in refused["error"] and "results" not in refused
    on = env.agent(key="agent:main:other")
    assert [t["function"]["name"] for t in on.tools] == ["memory_search", "memory_get", "memory_append"]
    assert "## Memory Recall" in on.system_prompt()


def test_bad_api_key_surfaces_error(env: Env) -> None:
    client = ChatClient(env.server.url, "scripted", "wrong")
    agent = Agent(client=client, backend=env.backend, store=env.store, session_key="agent:main:x",
                  workspace=env.ws, options=AgentOptions(), clock=env.clock)
    with pytest.raises(RuntimeError, match="401"):
        agent.send("hi")
    client.close()


def test_a_trickling_chat_reply_is_bounded_by_the_timeout() -> None:
    # httpx's read timeout restarts with every byte: a model API trickling its reply held a turn
    # (and the pre-compaction flush) for as long as it liked
    trickler = Trickler(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9999\r\n\r\n", " ")
    client = ChatClient(trickler.url, "scripted", timeout=0.5)
    try:
        started = time.monotonic()
        with pytest.raises(httpx.TimeoutException):
            client.complete([{"role": "user", "content": "hi"}])
        assert time.monotonic() - started < 2.0
    finally:
        client.close()
        trickler.close()


def test_chat_main_cli(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}, "userTimezone": "UTC"}))
    with ScriptedChatServer(FactKeeperModel(), api_key=API_KEY) as server:
        monkeypatch.setenv("MY_KEY", API_KEY)
        monkeypatch.setattr(sys, "stdin", io.StringIO("Remember that the bike lock code is 4711.\n\n/new\n/quit\n"))
        rc = chat_main(["--base-url", server.url, "--model", "scripted", "--api-key-env", "MY_KEY",
                        "--session", "main", "--workspace", str(ws), "--state-dir", str(tmp_path / "state")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "Okay, noted." in out and "Started a new session. Saved the last 2 messages" in out
    captures = list((ws / "memory").glob("*-project-notes.md"))
    assert len(captures) == 1 and "bike lock code is 4711" in captures[0].read_text()
    state_key = load_config(workspace=ws, state_dir=tmp_path / "state").settings.state_key
    sessions = json.loads((tmp_path / "state" / "agents" / state_key / "sessions" / "sessions.json").read_text())
    assert "agent:main:main" in sessions


def test_chat_main_takes_quiet_as_memdir_chat_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    # "-q" was refused ("unrecognized arguments: -q", exit 2) where `memdir chat -q` takes it
    from memdir import cli

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}, "userTimezone": "UTC"}))
    with ScriptedChatServer(FactKeeperModel(), api_key=API_KEY) as server:
        monkeypatch.setenv("MY_KEY", API_KEY)
        monkeypatch.setattr(sys, "stdin", io.StringIO("Remember that the bike lock code is 4711.\n/quit\n"))
        rc = chat_main(["-q", "--base-url", server.url, "--model", "scripted", "--api-key-env", "MY_KEY",
                        "--workspace", str(ws), "--state-dir", str(tmp_path / "state")])
    assert rc == 0 and "Okay, noted." in capsys.readouterr().out
    assert cli._QUIET_NOTICES[0] is False  # the host's own setting is given back


def test_chat_main_requires_key_for_openai(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    assert chat_main(["--api-key-env", "NO_SUCH_KEY_VAR", "--workspace", str(tmp_path),
                      "--state-dir", str(tmp_path / "s")]) == 2


def test_memdir_chat_subcommand_as_a_subprocess(tmp_path: Path) -> None:
    """`memdir -w WS chat ...` through the real CLI: global options are forwarded to the chat loop."""
    import subprocess

    from helpers import cli_env

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}, "userTimezone": "UTC"}))
    with ScriptedChatServer(FactKeeperModel(), api_key=API_KEY) as server:
        proc = subprocess.run(
            [sys.executable, "-m", "memdir", "--workspace", str(ws), "chat", "--base-url", server.url,
             "--model", "scripted", "--api-key-env", "MY_KEY"],
            input="Remember that the gate code is 9182.\n/quit\n", capture_output=True, text=True, timeout=120,
            env=cli_env(tmp_path / "state", MY_KEY=API_KEY),
        )
    assert proc.returncode == 0, proc.stderr
    assert "Okay, noted." in proc.stdout
    state_key = load_config(workspace=ws, state_dir=tmp_path / "state").settings.state_key
    assert (tmp_path / "state" / "agents" / state_key / "sessions" / "sessions.json").is_file()


def test_memdir_chat_exits_1_when_no_turn_got_through(tmp_path: Path) -> None:
    """Turns piped to a model nobody answers for (a refused connection): every turn fails, and the
    exit status says so instead of 0; the errors are on stderr."""
    import socket
    import subprocess

    from helpers import cli_env

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}, "userTimezone": "UTC"}))
    with socket.socket() as s:  # a port nothing listens on once closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [sys.executable, "-m", "memdir", "--workspace", str(ws), "chat", "--base-url", f"http://127.0.0.1:{port}/v1",
         "--model", "scripted", "--api-key-env", "MY_KEY"],
        input="hello\nstill there?\n", capture_output=True, text=True, timeout=120,
        env=cli_env(tmp_path / "state", MY_KEY=API_KEY),
    )
    assert proc.returncode == 1, (proc.stdout, proc.stderr)
    assert proc.stderr.count("error:") == 2, proc.stderr


def test_tool_numbers_of_any_shape_never_break_the_turn(tmp_path: Path) -> None:
    """A JSON integer of 400 digits (valid JSON) raised OverflowError out of ``memory_search``,
    ending the turn with its tool call unanswered; a minScore of ``"high"`` failed the search as
    "unavailable".  They are read as the MCP tools read them: not a usable number, so absent."""
    captured: list[list[dict[str, Any]]] = []

    def record(body: dict[str, Any]) -> dict[str, Any]:
        captured.append(body["messages"])
        return {"content": "done"}

    huge = 10**400
    script = ScriptQueue([
        {"tool_calls": [{"name": "memory_search", "arguments": {"query": "Rex", "maxResults": huge}},
                        {"name": "memory_search", "arguments": {"query": "Rex", "minScore": "high"}},
                        {"name": "memory_get", "arguments": {"path": "MEMORY.md", "from": huge, "lines": -huge}}]},
        record,
    ])
    e = Env(tmp_path, script)
    try:
        (e.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n")
        e.memory.sync()
        assert e.agent().send("what is the dog called") == "done"
        big, worded, got = [json.loads(m["content"]) for m in captured[0] if m["role"] == "tool"]
        assert [r["path"] for r in big["results"]] == [r["path"] for r in worded["results"]] == ["MEMORY.md"]
        assert got == {"text": "# Pets\nThe dog is called Rex.\n", "path": "MEMORY.md"}
    finally:
        e.close()


def test_the_search_tool_tells_the_model_what_the_mcp_tool_does(tmp_path: Path) -> None:
    """The loop's ``memory_search`` gave the model its results alone: results from a note edited
    since indexing (a search that does not sync first) cited lines that may have moved, and the
    model was not told, where the MCP tool says ``stale`` with the warning naming the note."""
    captured: list[list[dict[str, Any]]] = []

    def record(body: dict[str, Any]) -> dict[str, Any]:
        captured.append(body["messages"])
        return {"content": "done"}

    e = Env(tmp_path, ScriptQueue([{"tool_calls": [{"name": "memory_search", "arguments": {"query": "Rex dog"}}]},
                                   record]))
    try:
        e.memory.close()
        e.memory = Memory(e.ws, state_dir=e.state,
                          config={"memorySearch": {"provider": "none", "sync": {"onSearch": False}}})
        e.backend = MemoryIndexBackend(e.memory, timezone="UTC")
        (e.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n")
        e.memory.sync()
        (e.ws / "MEMORY.md").write_text("# Pets\n\nA new first line.\nThe dog is called Rex.\n")
        assert e.agent("agent:main:discord:group:g1").send("what is the dog called") == "done"
        search = next(json.loads(m["content"]) for m in captured[0] if m["role"] == "tool")
        assert search["results"][0]["path"] == "MEMORY.md" and search["stale"] is True
        assert any(w.startswith("MEMORY.md changed since indexed") for w in search["warnings"])
    finally:
        e.close()


def test_the_search_tool_reads_its_arguments_as_the_mcp_tool_does(tmp_path: Path) -> None:
    """``limit`` (and ``k``) ask for ``maxResults`` over MCP and in ``memdir.tools``; the loop's own
    ``memory_search`` ignored them: ``{"limit": 1}`` returned every match there, one over MCP."""
    from memdir.tools import call_tool_payload

    captured: list[list[dict[str, Any]]] = []

    def record(body: dict[str, Any]) -> dict[str, Any]:
        captured.append(body["messages"])
        return {"content": "done"}

    calls = [{"query": "Rex", "limit": 1}, {"query": "Rex", "k": "1"}, {"query": 5}]
    e = Env(tmp_path, ScriptQueue([{"tool_calls": [{"name": "memory_search", "arguments": a} for a in calls]},
                                   record]))
    try:
        (e.ws / "MEMORY.md").write_text("# Pets\nThe dog is called Rex.\n\n# Vet\nRex sees the vet in May.\n")
        (e.ws / "memory").mkdir()
        (e.ws / "memory" / "2026-03-01.md").write_text("- Walked Rex in the park.\n")
        e.memory.sync()
        assert e.agent().send("what is the dog called") == "done"
        answers = [json.loads(m["content"]) for m in captured[0] if m["role"] == "tool"]
        over_mcp = [call_tool_payload(e.memory, "memory_search", a) for a in calls]
        assert len(over_mcp[0]["results"]) == 1
        for ours, theirs in zip(answers, over_mcp, strict=True):
            assert [r["path"] for r in ours.get("results", [])] == [r["path"] for r in theirs["results"]]
            assert ours.get("error") == theirs.get("error")
    finally:
        e.close()


def test_a_flush_whose_model_repeats_its_note_writes_it_once(tmp_path: Path) -> None:
    # small local models call memory_append again with the same note each round (and vLLM can send
    # one call twice in a message): every copy was appended, up to the 8 rounds of a turn
    note = {"name": "memory_append", "arguments": {"text": "- The wifi is Nebula."}}
    script = ScriptQueue([
        {"content": "hello", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"content": "", "tool_calls": [note, note]},
        {"content": "", "tool_calls": [note]},
        {"content": "", "tool_calls": [note, {"name": "memory_append", "arguments": {"text": "- Rex is the dog."}}]},
        {"content": "NO_REPLY"},
        {"content": "fine", "usage": {"prompt_tokens": 1660, "completion_tokens": 0, "total_tokens": 1660}},
    ])
    e = Env(tmp_path, script)
    try:
        agent = _flushing_agent(e)
        assert agent.send("hi") == "hello"
        assert agent.send("next") == "fine"
        assert agent.stats.flushes == 1 and agent.stats.notes_appended == 2
        assert (e.ws / "memory" / "2026-03-04.md").read_text() == "- The wifi is Nebula.\n\n- Rex is the dog.\n"
        answers = [json.loads(m["content"]) for m in e.server.requests[4]["body"]["messages"] if m["role"] == "tool"]
        assert [a["ok"] for a in answers] == [True] * 5
        assert sum("already appended" in a.get("note", "") for a in answers) == 3
    finally:
        e.close()


def test_a_flush_that_appends_its_silent_reply_writes_nothing(tmp_path: Path) -> None:
    # small models told "if nothing to store, reply with NO_REPLY" call memory_append("NO_REPLY"):
    # the daily log got a note 'NO_REPLY' (indexed, and shown to every later session)
    script = ScriptQueue([
        {"content": "hello", "usage": {"prompt_tokens": 1600, "completion_tokens": 0, "total_tokens": 1600}},
        {"content": "", "tool_calls": [{"name": "memory_append", "arguments": {"text": " NO_REPLY\n"}},
                                       {"name": "memory_append", "arguments": {"text": "HEARTBEAT_OK"}}]},
        {"content": "NO_REPLY"},
        {"content": "fine", "usage": {"prompt_tokens": 1660, "completion_tokens": 0, "total_tokens": 1660}},
    ])
    e = Env(tmp_path, script)
    try:
        agent = _flushing_agent(e)
        assert agent.send("hi") == "hello"
        assert agent.send("next") == "fine"
        assert agent.stats.flushes == 1 and agent.stats.notes_appended == 0
        assert not (e.ws / "memory").exists()
        answers = [json.loads(m["content"]) for m in e.server.requests[2]["body"]["messages"] if m["role"] == "tool"]
        assert [a["ok"] for a in answers] == [False, False] and "not a note" in answers[0]["error"]
    finally:
        e.close()
