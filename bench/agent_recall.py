#!/usr/bin/env python3
"""Agent recall benchmark: does the flush/compaction/hook pipeline keep what the user said?

A deterministic 300-turn conversation is driven through the reference agent loop
(``memdir.agent.Agent``) against a scripted OpenAI-compatible server on loopback
(``memdir.testing.chat_server.FactKeeperModel``).  The user states N facts ("Remember that …")
at fixed turns among filler talk; the scripted model writes them to ``memory/YYYY-MM-DD.md``
only when the pre-compaction flush asks it to, and carries them through compaction summaries.
At the end the user types ``/new`` (the session-memory hook saves the tail), and a *fresh*
session asks one question per fact.

Reported: flushes, compactions, files written, facts on disk, and recall — how many facts the
backend's ``memory_search`` returns in its top 6 for the question, and how many answers of the
agent (model → memory_search tool → reply) contain the fact.  The model is scripted, so this
measures the plumbing and the retrieval backend, not an LLM's judgement.

    python bench/agent_recall.py                       # FTS-only index (no embeddings)
    python bench/agent_recall.py --provider local      # the lead's embedded model, if configured
    python bench/agent_recall.py --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memdir.agent import Agent, AgentOptions, ChatClient, MemoryIndexBackend
from memdir.api import Memory
from memdir.sessions.flush import FlushSettings
from memdir.sessions.store import SessionStore
from memdir.testing.chat_server import FactKeeperModel, ScriptedChatServer

# (statement, question, answer substring)
FACTS: list[tuple[str, str, str]] = [
    ("Remember that my sister Alice lives in Lisbon.", "Where does my sister Alice live?", "Lisbon"),
    ("Remember that the staging database listens on port 6543.",
     "Which port does the staging database listen on?", "6543"),
    ("Remember that my dentist appointment is on March 19.", "When is my dentist appointment?", "March 19"),
    ("Remember that the project codename is Bluebird.", "What is the project codename?", "Bluebird"),
    ("Remember that I prefer tabs over spaces in Go code.", "Do I prefer tabs or spaces in Go code?", "tabs"),
    ("Remember that the office wifi network is called Nebula.", "What is the office wifi network called?",
     "Nebula"),
    ("Remember that our cat Miso is allergic to chicken.", "What is our cat Miso allergic to?", "chicken"),
    ("Remember that the quarterly budget cap is 42000 euros.", "What is the quarterly budget cap?", "42000"),
    ("Remember that Priya owns the billing service rollout.", "Who owns the billing service rollout?", "Priya"),
    ("Remember that the release train leaves every second Thursday.", "How often does the release train leave?",
     "Thursday"),
]

TOPICS = ["the migration plan", "flaky integration tests", "the on-call rotation", "API pagination",
          "the logging pipeline", "the mobile release", "dependency upgrades", "the design review"]


def filler(turn: int) -> str:
    topic = TOPICS[turn % len(TOPICS)]
    return (f"Turn {turn}: some thoughts on {topic}. We looked at the dashboards again, compared notes with the "
            f"team and agreed to revisit {topic} after the next sync; nothing decided yet, just thinking aloud "
            f"about trade-offs, timelines and who should review the follow-up work.")


def plan_turns(turns: int, n_facts: int) -> dict[int, int]:
    """Fact index by turn: spread over the conversation, the last one close to the end."""
    n = min(n_facts, len(FACTS))
    return {int(5 + i * (turns - 15) / max(1, n - 1)): i for i in range(n)}


def run(args: argparse.Namespace) -> dict[str, object]:
    root = Path(args.dir or tempfile.mkdtemp(prefix="memdir-agent-recall-"))
    ws, state = root / "ws", root / "state"
    ws.mkdir(parents=True, exist_ok=True)
    now = [datetime(2026, 3, 4, 9, 0, tzinfo=UTC)]
    model = FactKeeperModel()
    memory = Memory(ws, state_dir=state, config={"memorySearch": {"provider": args.provider}})
    backend = MemoryIndexBackend(memory, timezone="UTC")
    store = SessionStore(memory.settings.sessions_dir)
    options = AgentOptions(
        context_window=args.context_window, keep_recent_turns=args.keep_turns, timezone="UTC",
        flush=FlushSettings(reserve_tokens_floor=args.reserve, soft_threshold_tokens=args.soft))
    by_turn = plan_turns(args.turns, args.facts)
    facts = [FACTS[i] for i in sorted(by_turn.values())]
    t0 = time.perf_counter()
    with ScriptedChatServer(model) as server:
        client = ChatClient(server.url, "fact-keeper")
        agent = Agent(client=client, backend=backend, store=store, session_key="agent:main:main", workspace=ws,
                      options=options, clock=lambda: now[0])
        for turn in range(args.turns):
            now[0] += timedelta(minutes=5)
            text = FACTS[by_turn[turn]][0] if turn in by_turn else filler(turn)
            agent.send(text)
        now[0] += timedelta(minutes=5)
        agent.send("/new")
        conversation = asdict(agent.stats)
        entry = store.get("agent:main:main")

        # A fresh session asks about every fact.
        fresh = Agent(client=client, backend=backend, store=store, session_key="agent:main:recall", workspace=ws,
                      options=options, clock=lambda: now[0])
        rows = []
        for statement, question, answer in facts:
            fact_text = statement.removeprefix("Remember that ").rstrip(".")
            hits = backend.search(question, max_results=6)
            rank = next((i + 1 for i, h in enumerate(hits[:6]) if fact_text in h["snippet"]), None)
            reply = fresh.send(question)
            on_disk = [p.name for p in sorted((ws / "memory").glob("*.md")) if fact_text in p.read_text()]
            rows.append({"fact": fact_text, "question": question, "on_disk": on_disk, "search_rank": rank,
                         "answer_ok": answer in reply, "reply": reply})
        client.close()
        requests = len(server.requests)
    memory.close()
    files = sorted(p.name for p in (ws / "memory").glob("*.md"))
    daily = [f for f in files if len(f) == len("2026-03-04.md")]
    return {
        "workdir": str(root),
        "settings": {"turns": args.turns, "facts": len(facts), "contextWindow": args.context_window,
                     "reserveTokensFloor": args.reserve, "softThresholdTokens": args.soft,
                     "flushThreshold": args.context_window - args.reserve - args.soft,
                     "compactionThreshold": args.context_window - args.reserve, "keepRecentTurns": args.keep_turns,
                     "provider": args.provider},
        "flushes": conversation["flushes"],
        "silentFlushes": conversation["silent_flushes"],
        "compactions": conversation["compactions"],
        "notesAppended": conversation["notes_appended"],
        "flushTurns": conversation["flush_turns"],
        "compactionTurns": conversation["compaction_turns"],
        "factTurns": sorted(by_turn),
        "hookFiles": conversation["hook_files"],
        "filesWritten": files,
        "dailyLogs": daily,
        "finalCompactionCount": entry.compaction_count if entry else None,
        "factsOnDisk": sum(1 for r in rows if r["on_disk"]),
        "recallAt6": sum(1 for r in rows if r["search_rank"]),
        "agentAnswersCorrect": sum(1 for r in rows if r["answer_ok"]),
        "modelRequests": requests,
        "scriptedModelCalls": model.calls,
        "seconds": round(time.perf_counter() - t0, 2),
        "perFact": rows,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--turns", type=int, default=300)
    p.add_argument("--facts", type=int, default=10)
    p.add_argument("--context-window", type=int, default=8000)
    p.add_argument("--reserve", type=int, default=2000)
    p.add_argument("--soft", type=int, default=1000)
    p.add_argument("--keep-turns", type=int, default=2)
    p.add_argument("--provider", default="none", help="memorySearch.provider for the index (default: none)")
    p.add_argument("--dir", default=None, help="work directory (default: a new temp dir, kept for inspection)")
    p.add_argument("--json", default=None, help="also write the result as JSON to this file")
    args = p.parse_args(argv)
    result = run(args)
    n = result["settings"]["facts"]
    print(f"turns={args.turns} facts={n} contextWindow={args.context_window} "
          f"flushAt={result['settings']['flushThreshold']} compactAt={result['settings']['compactionThreshold']}")
    print(f"flushes={result['flushes']} (silent {result['silentFlushes']})  compactions={result['compactions']}  "
          f"notes appended={result['notesAppended']}")
    print(f"facts stated at turns {result['factTurns']}; flush before turns {result['flushTurns']}; "
          f"compaction before turns {result['compactionTurns']}")
    print(f"files written={len(result['filesWritten'])}: {', '.join(result['filesWritten'])}")
    print(f"facts on disk={result['factsOnDisk']}/{n}  memory_search recall@6={result['recallAt6']}/{n}  "
          f"agent answers correct={result['agentAnswersCorrect']}/{n}")
    for row in result["perFact"]:
        flag = "ok " if row["search_rank"] else "MISS"
        print(f"  {flag} rank={row['search_rank']!s:>4}  disk={','.join(row['on_disk']) or '-':<32} {row['fact']}")
    print(f"model requests={result['modelRequests']}  seconds={result['seconds']}  workdir={result['workdir']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
