#!/usr/bin/env python3
"""Long-term memory recall through the agent loop: 50 planted preferences/facts, a fresh session.

Session 1: the user states 50 preferences and facts, one per turn, to the reference agent loop
(``memdir.agent.Agent``) against the scripted chat server on loopback; auto-capture
(``longTermMemory.autoCapture = true``) decides what to store.  Session 2 (a new session key,
nothing in its context): the user asks one question about each fact, worded differently; we
read the request the model received and count the questions whose ``<relevant-memories>``
block holds the planted fact (auto-recall: top 3, score ≥ 0.3).

Reported: captured (of 50), recalled (of 50, and of those captured), and the same recall when
the 50 facts are stored directly (no capture step), per cut-off.  Embedded model, real LanceDB.

    python bench/ltm_recall.py [--json out.json] [--min-score 0.3]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memdir.agent import Agent, AgentOptions, ChatClient, MemoryIndexBackend
from memdir.api import Memory
from memdir.ltm.capture import escape_memory_text
from memdir.sessions.store import SessionStore
from memdir.testing.chat_server import ScriptedChatServer

PLANTED: list[tuple[str, str]] = [
    ("I prefer dark mode in every editor I use", "Which colour theme should my editor have?"),
    ("I'm allergic to peanuts", "Is there any food I must avoid?"),
    ("My sister's name is Amelia", "What is my sister called?"),
    ("I live in Lisbon", "Which city do I live in?"),
    ("I prefer tea over coffee in the morning", "What do I like to drink when I wake up?"),
    ("My email is jordan.k@example.org", "What's my e-mail address?"),
    ("We decided to use PostgreSQL for the billing service", "Which database did we pick for billing?"),
    ("I always want answers in British English", "Which spelling conventions should replies follow?"),
    ("My dog is called Biscuit", "What's the name of my dog?"),
    ("I hate long meetings after 4pm", "How do I feel about late afternoon meetings?"),
    ("My favourite programming language is Rust", "Which language do I enjoy coding in most?"),
    ("I work at a small robotics startup", "Where am I employed?"),
    ("Remember that the staging server restarts every night at 2am", "When does staging reboot?"),
    ("I need my reports as PDF, never as Word files", "What file format do my reports have to be in?"),
    ("My birthday is on the 14th of March", "When is my birthday?"),
    ("I prefer window seats on flights", "Aisle or window when I fly?"),
    ("We decided to release on Tuesdays only", "On which weekday do we ship releases?"),
    ("I'm a vegetarian", "Do I eat meat?"),
    ("My phone number is +351912345678", "How can someone call me?"),
    ("I like to run 10 km every Saturday", "What do I do for exercise on weekends?"),
    ("My manager is Priya Raman", "Who is my boss?"),
    ("I never use semicolons in JavaScript", "What's my style on semicolons in JS code?"),
    ("I prefer pytest over unittest", "Which Python test framework do I like?"),
    ("My laptop is a ThinkPad X1 Carbon", "What computer do I use?"),
    ("I want commit messages in the imperative mood", "How should commit messages be written?"),
    ("My timezone is Europe/Lisbon", "What time zone am I in?"),
    ("We decided to deprecate the v1 API in June", "When will the old API version be retired?"),
    ("I love hiking in the Alps", "What outdoor activity do I enjoy in the mountains?"),
    ("I'm based in the Porto office on Mondays", "Where do I work at the start of the week?"),
    ("Keep in mind that I am colour blind", "Is there anything about my eyesight to consider for charts?"),
    ("My favourite band is Radiohead", "Which musicians do I like best?"),
    ("I prefer short answers with code first", "How should responses be structured for me?"),
    ("My partner's name is Sam", "What's my partner called?"),
    ("I always deploy with Terraform", "Which infrastructure tool do I use for deployments?"),
    ("I hate being called by my full name Jonathan", "How should you address me?"),
    ("My car is a blue Volvo estate", "What car do I drive?"),
    ("We decided to use Kafka for the event bus", "What is our event bus built on?"),
    ("I'm learning Japanese", "Which language am I studying?"),
    ("My daughter goes to Escola Azul", "What school does my daughter attend?"),
    ("I prefer tabs for indentation", "Tabs or spaces?"),
    ("I need two-factor authentication on every account", "What's my rule for account security?"),
    ("My home wifi network is named Gondor", "What's my wifi SSID?"),
    ("I like jazz while I program", "What music do I listen to while coding?"),
    ("My GitHub username is jkowalski", "What's my handle on GitHub?"),
    ("I always book hotels with a gym", "What do I look for in a hotel?"),
    ("My favourite food is ramen", "What dish do I love most?"),
    ("We decided that code reviews need two approvals", "How many approvals does a pull request need?"),
    ("I want invoices sent on the first of the month", "When should invoices go out?"),
    ("My cat is allergic to chicken", "What can't my cat eat?"),
    ("I prefer Vim keybindings everywhere", "Which editor key bindings do I use?"),
]


def in_block(body: dict[str, Any], fact: str) -> int | None:
    """The fact's rank in the recall block of the request's last user message, or ``None``."""
    content = str(body["messages"][-1]["content"])
    if not content.startswith("<relevant-memories>"):
        return None
    block = content.split("</relevant-memories>")[0]
    for line in block.splitlines():
        if line[:1].isdigit() and escape_memory_text(fact) in line:
            return int(line.split(".")[0])
    return None


def run(tmp: Path, *, capture: bool, min_score: float | None) -> dict[str, Any]:
    bodies: list[dict[str, Any]] = []

    def responder(body: dict[str, Any]) -> dict[str, Any]:
        bodies.append(body)
        return {"content": "OK."}

    ws = tmp / ("ws-capture" if capture else "ws-direct")
    ws.mkdir()
    config = {"memorySearch": {"provider": "none"}, "longTermMemory": {"enabled": True, "autoCapture": capture}}
    with ScriptedChatServer(responder) as server, Memory(ws, state_dir=tmp / ws.name, config=config) as memory:
        client = ChatClient(server.url, "scripted")
        store = SessionStore(memory.settings.sessions_dir)
        ltm = memory.long_term
        if min_score is not None:
            import memdir.ltm.memory as ltm_memory

            ltm_memory.SEARCH_MIN_SCORE = min_score

        def agent(key: str) -> Agent:
            return Agent(client=client, backend=MemoryIndexBackend(memory, "UTC"), store=store, session_key=key,
                         workspace=ws, options=AgentOptions.from_settings(memory.settings), long_term=ltm)

        if capture:
            first = agent("agent:main:plant")
            for fact, _ in PLANTED:
                first.send(fact)
        else:
            for fact, _ in PLANTED:
                ltm.store(fact, source="bench")
        stored = {r.text for r in ltm.list()}
        captured = [fact for fact, _ in PLANTED if fact in stored]
        fresh = agent("agent:main:ask")
        ranks: list[int | None] = []
        sizes: list[int] = []
        for fact, question in PLANTED:
            fresh.send(question)
            ranks.append(in_block(bodies[-1], fact))
            content = str(bodies[-1]["messages"][-1]["content"])
            block = content.split("</relevant-memories>")[0] if content.startswith("<relevant-memories>") else ""
            sizes.append(sum(1 for line in block.splitlines() if line[:1].isdigit()))
        client.close()
        recalled = [r for r in ranks if r is not None]
        misses = [q for (f, q), r in zip(PLANTED, ranks, strict=True) if r is None]
        return {
            "planted": len(PLANTED), "stored": len(captured), "activeMemories": len(stored),
            "notStored": [f for f, _ in PLANTED if f not in stored],
            "recalledTop3": len(recalled), "recalledTop1": sum(1 for r in recalled if r == 1),
            "recalledOfStored": f"{sum(1 for (f, _), r in zip(PLANTED, ranks, strict=True) if r and f in stored)}"
                                f"/{len(captured)}",
            "blocksInjected": fresh.stats.recalled, "meanMemoriesPerBlock": round(sum(sizes) / len(sizes), 2),
            "missedQuestions": misses,
        }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path)
    ap.add_argument("--min-score", type=float, default=None, help="auto-recall cut-off (default R§14's 0.3)")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        report = {"autoCapture": run(Path(tmp), capture=True, min_score=args.min_score),
                  "directStore": run(Path(tmp), capture=False, min_score=args.min_score)}
    print(json.dumps(report, indent=2, ensure_ascii=False))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, ensure_ascii=False))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
