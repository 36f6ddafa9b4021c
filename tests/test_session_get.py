"""``memory_get`` opens a session search result: ``sessions/<name>.jsonl`` with the result's JSONL
lines reads the indexed, redacted ``User:``/``Assistant:`` lines of those messages, only with the
``sessions`` source on, and only a regular file directly in the agent's sessions folder."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from helpers import cli_env
from memdir.api import Memory
from memdir.config import load_config
from memdir.sessions.transcript import session_document
from memdir.tools import call_tool
from memdir.workspace import PathError

SESSIONS = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                             "experimental": {"sessionMemory": True}}}
MEMORY_ONLY = {"memorySearch": {"provider": "none"}}
SECRET = "sk-live0123456789abcdefghijklmnop"
TODAYS_REFUSAL = ("path not allowed: {} (memory_get reads MEMORY.md, memory.md, memory/**/*.md "
                  "and configured extraPaths only)")


def _message(role: str, text: str, n: int) -> str:
    return json.dumps({"type": "message", "timestamp": 1_714_557_600_000 + n * 1000,
                       "message": {"role": role, "content": [{"type": "text", "text": text}]}})


def _transcript(texts: list[str]) -> str:
    """A session header on line 1, then the messages, a tool record after every third one (so
    JSONL lines and message numbers differ)."""
    out = [json.dumps({"type": "session", "id": "s", "timestamp": "2024-05-01T10:00:00Z"})]
    for i, text in enumerate(texts, start=1):
        out.append(_message("user" if i % 2 else "assistant", text, i))
        if i % 3 == 0:
            out.append(json.dumps({"type": "toolResult", "output": f"tool output {i}"}))
    return "\n".join(out) + "\n"


@pytest.fixture
def ws(make_workspace: Callable[..., Path]) -> Path:
    return make_workspace({"MEMORY.md": "# Long-term\nThe user likes tea.\n",
                           "memory/2024-05-01.md": "# 2024-05-01\n- lunch\n"})


@pytest.fixture
def sessions_dir(ws: Path, state_dir: Path) -> Path:
    d = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    d.mkdir(parents=True)
    return d


def _get(ws: Path, state: Path, path: str, config: dict[str, Any] = SESSIONS, **kw: Any) -> str:
    with Memory(ws, state_dir=state, config=config) as mem:
        got = mem.get(path, **kw)
        assert got.path == path
        return got.text


def test_a_session_result_opens_at_its_own_lines(ws: Path, state_dir: Path, sessions_dir: Path) -> None:
    texts = [f"we talked about the weather and the garden for a while ({i})" for i in range(1, 41)]
    texts[20] = "the zeppelin tour was booked for June"
    texts[21] = f"noted; the booking key is OPENAI_API_KEY={SECRET}"
    t = sessions_dir / "s1.jsonl"
    t.write_text(_transcript(texts), encoding="utf-8")
    assert SECRET in t.read_text(encoding="utf-8")
    with Memory(ws, state_dir=state_dir, config=SESSIONS) as mem:
        mem.sync(reason="test")
        hit = next(r for r in mem.search("zeppelin", max_results=6, min_score=0).results if r.source == "sessions")
        assert hit.path == "sessions/s1.jsonl"
        got = mem.get(hit.path, from_line=hit.start_line, lines=hit.end_line - hit.start_line + 1)
    assert got.path == hit.path
    shown = got.text.split("\n")
    assert hit.snippet.count("\n") > 2 and hit.snippet in got.text  # the snippet's messages, as shown
    assert "User: the zeppelin tour was booked for June" in shown  # message 21 (odd: user)
    assert len(shown) > 1  # the widened range: neighbouring messages too
    # exactly the indexed (redacted) lines of the messages on the result's JSONL lines
    doc = session_document(t)
    indexed = doc.text.split("\n")
    want = [indexed[i] for i, n in enumerate(doc.line_map) if hit.start_line <= n <= hit.end_line]
    assert shown == want and SECRET not in got.text


def test_secrets_are_redacted_as_indexed(ws: Path, state_dir: Path, sessions_dir: Path) -> None:
    t = sessions_dir / "s1.jsonl"
    t.write_text(_transcript(["hello", f"the key is OPENAI_API_KEY={SECRET}", "and the token --token abc123"]),
                 encoding="utf-8")
    assert SECRET in t.read_text(encoding="utf-8")
    with Memory(ws, state_dir=state_dir, config=SESSIONS) as mem:
        whole = mem.get("sessions/s1.jsonl").text
    assert SECRET not in whole and "abc123" not in whole
    assert whole.split("\n") == ["User: hello", "Assistant: the key is OPENAI_API_KEY=sk-liv…mnop",
                                  "User: and the token --token ***"]
    assert whole == session_document(t).text  # what the index holds for it


def test_range_is_messages_on_jsonl_lines_from_up_to_from_plus_lines(ws: Path, state_dir: Path,
                                                                     sessions_dir: Path) -> None:
    # line 1 header, 2 m1, 3 m2, 4 m3, 5 tool, 6 m4, 7 m5, 8 m6, 9 tool
    (sessions_dir / "s.jsonl").write_text(_transcript([f"m{i}" for i in range(1, 7)]), encoding="utf-8")

    def get(**kw: Any) -> list[str]:
        return _get(ws, state_dir, "sessions/s.jsonl", **kw).split("\n")

    assert get() == ["User: m1", "Assistant: m2", "User: m3", "Assistant: m4", "User: m5", "Assistant: m6"]
    assert get(from_line=3, lines=3) == ["Assistant: m2", "User: m3"]  # lines 3, 4, 5 (5 is a tool record)
    assert get(from_line=4, lines=3) == ["User: m3", "Assistant: m4"]  # lines 4, 5, 6
    assert get(from_line=5, lines=1) == [""]  # a tool record only: no text
    assert get(from_line=7) == ["User: m5", "Assistant: m6"]  # to the end
    assert get(lines=3) == ["User: m1", "Assistant: m2"]  # from line 1: header, m1, m2
    assert get(from_line=1, lines=1) == [""]  # the header is never shown
    assert get(from_line=99) == [""]
    assert get(from_line=4, lines=0) == ["User: m3"]  # R§10.2: `lines ?? to the end`, at least one line
    assert get(from_line=0, lines=0) == get()  # neither given: the whole transcript
    # "./" before it names the same transcript, as for memory paths, and the answer names it plainly
    with Memory(ws, state_dir=state_dir, config=SESSIONS) as mem:
        got = mem.get("./sessions/s.jsonl", from_line=3, lines=3)
    assert (got.text, got.path) == ("Assistant: m2\nUser: m3", "sessions/s.jsonl")


def test_every_surface_returns_the_text(ws: Path, state_dir: Path, sessions_dir: Path, tmp_path: Path,
                                        run_cli: Callable[..., Any]) -> None:
    (sessions_dir / "s.jsonl").write_text(_transcript([f"m{i}" for i in range(1, 7)]), encoding="utf-8")
    with Memory(ws, state_dir=state_dir, config=SESSIONS) as mem:
        ok = call_tool(mem, "memory_get", {"path": "sessions/s.jsonl", "from": 3, "lines": "5"}).payload
        missing = call_tool(mem, "memory_get", {"path": "sessions/nope.jsonl"}).payload
        memory_missing = call_tool(mem, "memory_get", {"path": "memory/1999-01-01.md"}).payload
        bad = call_tool(mem, "memory_get", {"path": "sessions/../s.jsonl"}).payload
    assert ok == {"text": "Assistant: m2\nUser: m3\nAssistant: m4\nUser: m5", "path": "sessions/s.jsonl"}
    assert missing == {"text": "", "path": "sessions/nope.jsonl"}  # as a missing memory file reads
    assert memory_missing == {"text": "", "path": "memory/1999-01-01.md"}
    assert bad["disabled"] is True and bad["text"] == "" and "sessions source on" in bad["error"]

    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps(SESSIONS))
    got = run_cli("get", "sessions/s.jsonl", "--from", "3", "--lines", "5", "-w", str(ws), "--config", str(cfg))
    assert got.returncode == 0, got.stderr
    assert got.stdout == "Assistant: m2\nUser: m3\nAssistant: m4\nUser: m5\n"
    js = run_cli("get", "sessions/s.jsonl", "--from", "6", "--json", "-w", str(ws), "--config", str(cfg))
    assert json.loads(js.stdout) == {"text": "Assistant: m4\nUser: m5\nAssistant: m6", "path": "sessions/s.jsonl"}
    off = run_cli("get", "sessions/s.jsonl", "-w", str(ws))  # the default config: no sessions source
    assert off.returncode == 1 and TODAYS_REFUSAL.format("sessions/s.jsonl") in off.stderr
    assert "Traceback" not in off.stderr


def test_sessions_source_off_refuses_as_before(ws: Path, state_dir: Path, sessions_dir: Path) -> None:
    (sessions_dir / "s.jsonl").write_text(_transcript(["hello"]), encoding="utf-8")
    assert _get(ws, state_dir, "sessions/s.jsonl") == "User: hello"
    for path in ("sessions/s.jsonl", "sessions/../s.jsonl", "sessions/nope.jsonl"):
        with pytest.raises(PathError) as err:
            _get(ws, state_dir, path, MEMORY_ONLY)
        assert str(err.value) == TODAYS_REFUSAL.format(path)
    with Memory(ws, state_dir=state_dir, config=MEMORY_ONLY) as mem:
        payload = call_tool(mem, "memory_get", {"path": "sessions/s.jsonl"}).payload
    assert payload["error"] == TODAYS_REFUSAL.format("sessions/s.jsonl") and payload["text"] == ""


def _refused(ws: Path, state: Path, path: str) -> str:
    with pytest.raises(PathError) as err:
        _get(ws, state, path)
    message = str(err.value)
    assert "sessions source on" in message and str(state) not in message  # no state paths leak
    return message


def test_paths_outside_the_sessions_folder_are_refused(ws: Path, state_dir: Path, sessions_dir: Path) -> None:
    (sessions_dir / "s.jsonl").write_text(_transcript(["inside"]), encoding="utf-8")
    (sessions_dir.parent / "x.jsonl").write_text(_transcript(["one level up"]), encoding="utf-8")
    (sessions_dir / "a").mkdir()
    (sessions_dir / "a" / "b.jsonl").write_text(_transcript(["in a subfolder"]), encoding="utf-8")
    (sessions_dir / "notes.txt").write_text(_transcript(["not a transcript"]), encoding="utf-8")
    (sessions_dir / "sessions.json").write_text("{}", encoding="utf-8")
    assert _get(ws, state_dir, "sessions/s.jsonl") == "User: inside"  # the folder is right
    assert "path not allowed: sessions/../x.jsonl" in _refused(ws, state_dir, "sessions/../x.jsonl")
    assert "path not allowed: sessions/a/b.jsonl" in _refused(ws, state_dir, "sessions/a/b.jsonl")
    assert "path not allowed" in _refused(ws, state_dir, "sessions/a\\b.jsonl")
    assert "path not allowed" in _refused(ws, state_dir, "sessions/..")
    assert "not a session transcript" in _refused(ws, state_dir, "sessions/notes.txt")
    assert "not a session transcript" in _refused(ws, state_dir, "sessions/sessions.json")
    assert "not a session transcript" in _refused(ws, state_dir, "sessions/.jsonl")
    assert "NUL" in _refused(ws, state_dir, "sessions/s.jsonl\x00")
    # an absolute path is not a session path, even to the transcript itself
    for path in ("/etc/passwd", str(sessions_dir / "s.jsonl"), "../state/x.jsonl"):
        with pytest.raises(PathError) as err:
            _get(ws, state_dir, path)
        assert str(err.value).startswith(f"path not allowed: {path} (") and "sessions/<name>.jsonl" in str(err.value)
    assert _get(ws, state_dir, "MEMORY.md", from_line=2) == "The user likes tea.\n"  # memory files still read


def test_symlinked_and_special_files_are_refused(ws: Path, state_dir: Path, sessions_dir: Path,
                                                tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "t.jsonl").write_text(_transcript(["private"]), encoding="utf-8")
    os.symlink(elsewhere / "t.jsonl", sessions_dir / "link.jsonl")
    assert "symlinks are not followed: sessions/link.jsonl" in _refused(ws, state_dir, "sessions/link.jsonl")
    (sessions_dir / "d.jsonl").mkdir()
    assert "not a file: sessions/d.jsonl" in _refused(ws, state_dir, "sessions/d.jsonl")
    os.mkfifo(sessions_dir / "f.jsonl")  # never waited on
    assert "not a file: sessions/f.jsonl" in _refused(ws, state_dir, "sessions/f.jsonl")
    assert _get(ws, state_dir, "sessions/nope.jsonl") == ""  # missing: empty, as a missing memory file

    # the sessions folder itself a symlink to a folder holding a transcript: followed, as indexing
    # follows it (the transcripts search cites must open), while a symlinked transcript never is
    os.rename(sessions_dir, tmp_path / "moved")
    os.symlink(elsewhere, sessions_dir)
    assert _get(ws, state_dir, "sessions/t.jsonl") == "User: private"
    os.symlink(elsewhere / "t.jsonl", elsewhere / "link.jsonl")
    assert "symlinks are not followed: sessions/link.jsonl" in _refused(ws, state_dir, "sessions/link.jsonl")
    os.unlink(sessions_dir)
    assert _get(ws, state_dir, "sessions/t.jsonl") == ""  # no sessions folder yet: nothing to read
    sessions_dir.write_text("not a folder")
    assert "not a folder" in _refused(ws, state_dir, "sessions/t.jsonl")


def test_the_mcp_server_reads_a_session_path(ws: Path, state_dir: Path, sessions_dir: Path, tmp_path: Path) -> None:
    (sessions_dir / "s.jsonl").write_text(_transcript([f"m{i}" for i in range(1, 7)]), encoding="utf-8")
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps(SESSIONS))
    params = StdioServerParameters(
        command=sys.executable, args=["-m", "memdir", "mcp", "--workspace", str(ws), "--config", str(cfg)],
        env=cli_env(state_dir))

    async def run() -> tuple[dict[str, Any], dict[str, Any]]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            ok = await session.call_tool("memory_get", {"path": "sessions/s.jsonl", "from": 6, "lines": 2})
            bad = await session.call_tool("memory_get", {"path": "sessions/a/s.jsonl"})
            return json.loads(ok.content[0].text), json.loads(bad.content[0].text)

    ok, bad = asyncio.run(asyncio.wait_for(run(), 90))
    assert ok == {"text": "Assistant: m4\nUser: m5", "path": "sessions/s.jsonl"}
    assert bad["text"] == "" and "sessions source on" in bad["error"]
