"""Recall over session transcripts: LoCoMo dev's conversations as an agent's JSONL transcripts.

Why: the quality bench indexes notes; an agent whose memory is mostly its chat transcripts (the
``sessions`` source) is searched over ``User: …`` / ``Assistant: …`` text built from JSONL, with
tool calls, tool results, system prompts and heartbeats around the turns.  Each LoCoMo session
becomes a transcript in the shapes memdir reads (a header record, a system message, user turns as
strings, assistant turns as text blocks, tool calls and their JSON results in pi-agent and OpenAI
shapes, heartbeat exchanges, a compaction record, a long pasted turn, a day's session split by a
``/reset``), and a question's evidence turn is its JSONL line.  Reported: R@6 / R@10 for keyword,
vector and hybrid, transcripts alone ("sessions") and with the same days as daily notes ("mixed":
an evidence line is found when its note line or its transcript line is), and in mixed mode how many
of the top 6 are a second copy of a fact already shown (the same turn in the note and transcript).

    .venv/bin/python bench/session_recall.py /work/shared/data/locomo-dev --modes keyword
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import re
import shutil
import sys
import tempfile
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memdir.bench.adapters import bench_memory, mode_overrides

_TURN = re.compile(r"^- ([^:]+): (.*)$")
_SESSION = re.compile(r"^## Session \d+, (\d{1,2}):(\d{2}) ([ap]m)$")
SYSTEM_PROMPT = ("You are a personal assistant running inside OpenClaw. ## Tooling Tool availability (filtered by "
                 "policy): read, write, edit, exec, memory_search, memory_get. ## Memory Recall Before answering "
                 "anything about prior work, decisions, dates, people, preferences, or todos: run memory_search "
                 "on MEMORY.md + memory/*.md; then use memory_get to pull only the needed lines. ## Workspace "
                 "Your working directory is /home/user/.openclaw/workspace. ## Heartbeats If you receive a "
                 "heartbeat poll and there is nothing that needs attention, reply exactly: HEARTBEAT_OK")
HEARTBEAT = ("Read HEARTBEAT.md if it exists (workspace context). Follow it strictly. Do not infer or repeat old "
             "tasks from prior chats. If nothing needs attention, reply HEARTBEAT_OK.")


def _rec(kind: str, ts: dt.datetime, **fields: Any) -> dict[str, Any]:
    return {"type": kind, "id": uuid.uuid4().hex[:8], "timestamp": ts.strftime("%Y-%m-%dT%H:%M:%S.000Z"), **fields}


def _msg(role: str, content: Any, ts: dt.datetime, **extra: Any) -> dict[str, Any]:
    return _rec("message", ts, message={"role": role, "content": content,
                                        "timestamp": int(ts.timestamp() * 1000), **extra})


def transcripts(sample: Path, out: Path) -> dict[tuple[str, int], tuple[str, int]]:
    """Write ``sample``'s days as transcripts in ``out``; ``(note path, note line) -> (transcript
    path, JSONL line)`` for every turn."""
    where: dict[tuple[str, int], tuple[str, int]] = {}
    first_speaker = None
    for n, note in enumerate(sorted((sample / "workspace" / "memory").glob("*.md"))):
        lines = note.read_text(encoding="utf-8").split("\n")
        day = dt.date.fromisoformat(note.stem)
        turns: list[tuple[int, str, str]] = []
        start = dt.datetime(day.year, day.month, day.day, 12, tzinfo=dt.UTC)
        for i, line in enumerate(lines, start=1):
            m = _SESSION.match(line)
            if m:
                hour = int(m.group(1)) % 12 + (12 if m.group(3) == "pm" else 0)
                start = start.replace(hour=hour, minute=int(m.group(2)))
            t = _TURN.match(line)
            if t:
                first_speaker = first_speaker or t.group(1)
                turns.append((i, t.group(1), t.group(2)))
        # a day's session is two transcripts when long: the first set aside by /reset
        halves = [turns[: len(turns) // 2], turns[len(turns) // 2:]] if len(turns) > 20 else [turns]
        ts = start
        for h, part in enumerate(halves):
            sid = f"{sample.name}-{n:02d}-{h}-" + uuid.uuid5(uuid.NAMESPACE_URL, f"{sample}{n}{h}").hex[:12]
            name = f"{sid}.jsonl" + (f".reset.{ts.strftime('%Y-%m-%dT%H-%M-%S')}.000Z" if h < len(halves) - 1 else "")
            recs: list[dict[str, Any]] = [
                {"type": "session", "version": 3, "id": sid, "timestamp": ts.isoformat(), "cwd": "/home/user"},
                _rec("model_change", ts, provider="openai", modelId="gpt-4.1"),
                _msg("system", SYSTEM_PROMPT, ts),
            ]
            j = 0
            while j < len(part):
                line_no, speaker, text = part[j]
                ts += dt.timedelta(seconds=40)
                if j == 4 and j + 6 < len(part):  # once a session, a pasted chat: six turns in one user message
                    pasted = part[j:j + 6]
                    body = "Here's what we said earlier:\n\n" + "\n".join(f"{s}: {t}" for _, s, t in pasted)
                    recs.append(_msg("user", body, ts))
                    for ln, _, _ in pasted:
                        where[(f"memory/{note.name}", ln)] = (name, len(recs))
                    j += 6
                    continue
                if speaker == first_speaker:
                    recs.append(_msg("user", text, ts))
                else:
                    if j % 7 == 3:  # looks it up first: a tool call and its JSON result
                        call = {"type": "toolCall", "id": f"call_{j}", "name": "memory_search",
                                "arguments": {"query": " ".join(text.split()[:4]), "maxResults": 6}}
                        recs.append(_msg("assistant", [{"type": "thinking", "thinking": "Check memory first."},
                                                       call], ts))
                        result = {"results": [{"path": "memory/2023-01-01.md", "startLine": 3, "endLine": 9,
                                               "score": 0.41, "snippet": "- nothing relevant", "source": "memory"}],
                                  "provider": "local", "mode": "hybrid"}
                        recs.append(_msg("toolResult", [{"type": "text", "text": json.dumps(result, indent=2)}], ts,
                                         toolCallId=f"call_{j}", toolName="memory_search"))
                    if j % 11 == 5:  # OpenAI shape: tool_calls and a role "tool" reply
                        recs.append(_msg("assistant", "", ts, tool_calls=[{"id": f"t{j}", "type": "function",
                                         "function": {"name": "memory_get",
                                                      "arguments": json.dumps({"path": "MEMORY.md"})}}]))
                        recs.append(_msg("tool", json.dumps({"path": "MEMORY.md", "text": ""}), ts,
                                         tool_call_id=f"t{j}"))
                    recs.append(_msg("assistant", [{"type": "text", "text": text}], ts,
                                     usage={"input": 1200, "output": 80}, stopReason="stop"))
                where[(f"memory/{note.name}", line_no)] = (name, len(recs))
                if j % 13 == 12:  # a heartbeat exchange between turns
                    recs.append(_msg("user", HEARTBEAT, ts))
                    recs.append(_msg("assistant", [{"type": "text", "text": "HEARTBEAT_OK"}], ts))
                if j == len(part) // 2 and h == 0 and n % 3 == 0:
                    recs.append(_rec("compaction", ts, summary="Summary of the conversation so far: small talk.",
                                     firstKeptEntryId=recs[-4].get("id"), tokensBefore=180000))
                j += 1
            (out / name).write_text("".join(json.dumps(r) + "\n" for r in recs), encoding="utf-8")
    return where


def run(dataset: Path, modes: list[str], samples: list[str] | None, k: int = 10) -> dict[str, Any]:
    report: dict[str, Any] = {}
    provider = None
    if set(modes) - {"keyword"}:
        from note_styles import CachedProvider  # each text embedded once per run

        from memdir.embeddings.local import LocalEmbeddingProvider

        provider = CachedProvider(LocalEmbeddingProvider())
    for mode in modes:
        for kind in ("sessions", "mixed"):
            hits = {6: 0.0, 10: 0.0}
            dup = 0
            count = 0
            for sample in sorted(p for p in dataset.iterdir() if (p / "queries.jsonl").is_file()):
                if samples and sample.name not in samples:
                    continue
                tmp = Path(tempfile.mkdtemp(prefix="memdir-sess-"))
                try:
                    ws, state = tmp / "ws", tmp / "state"
                    ws.mkdir()
                    if kind == "mixed":
                        shutil.copytree(sample / "workspace" / "memory", ws / "memory")
                    sessions = state / "agents" / "bench" / "sessions"
                    sessions.mkdir(parents=True)
                    where = transcripts(sample, sessions)
                    sources = ["memory", "sessions"] if kind == "mixed" else ["sessions"]
                    cfg = {"memorySearch": {"experimental": {"sessionMemory": True}, "sources": sources}}
                    cfg["memorySearch"] = {**cfg["memorySearch"], **mode_overrides(mode).get("memorySearch", {})}
                    mem = bench_memory(ws, state, cfg, agent_id="bench",
                                       provider=None if mode == "keyword" else provider)
                    try:
                        mem.sync(reason="bench")
                        for line in (sample / "queries.jsonl").read_text(encoding="utf-8").splitlines():
                            q = json.loads(line)
                            if q["category"] == 5 or not q["relevant"]:
                                continue
                            res = mem.search(q["query"], max_results=k, min_score=0.0, sync=False).results
                            count += 1
                            for cut in hits:
                                found = 0
                                for r in q["relevant"]:
                                    tpath, tline = where[(r["path"], r["line"])]
                                    for x in res[:cut]:
                                        if ((x.path == "sessions/" + tpath and x.start_line <= tline <= x.end_line)
                                                or (kind == "mixed" and x.path == r["path"]
                                                    and x.start_line <= r["line"] <= x.end_line)):
                                            found += 1
                                            break
                                hits[cut] += found / len(q["relevant"])
                            if kind == "mixed":  # a top-6 result whose evidence turn a better one showed
                                seen: set[tuple[str, int]] = set()
                                for x in res[:6]:
                                    got = set()
                                    for (npath, nline), (tpath, tline) in where.items():
                                        if ((x.path == npath and x.start_line <= nline <= x.end_line)
                                                or (x.path == "sessions/" + tpath
                                                    and x.start_line <= tline <= x.end_line)):
                                            got.add((npath, nline))
                                    if got and got <= seen:
                                        dup += 1
                                    seen |= got
                    finally:
                        mem.close()
                finally:
                    shutil.rmtree(tmp, ignore_errors=True)
            row = {f"R@{c}": round(v / max(count, 1), 3) for c, v in hits.items()}
            if kind == "mixed":
                row["dup@6"] = round(dup / max(count, 1), 3)
            row["questions"] = count
            report[f"{mode}/{kind}"] = row
            print(mode, kind, row, flush=True)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--modes", default="keyword,vector,hybrid")
    ap.add_argument("--samples", default="", help="comma-separated sample names (default: all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    report = run(args.dataset, args.modes.split(","), [s for s in args.samples.split(",") if s] or None)
    if args.out:
        args.out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
