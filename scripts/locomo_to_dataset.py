#!/usr/bin/env python3
"""Turn LoCoMo's ``locomo10.json`` into a ``memdir bench quality`` dataset.

LoCoMo (Maharana et al., "Evaluating Very Long-Term Conversational Memory of LLM Agents",
ACL 2024; data licensed CC BY-NC 4.0) is ten long conversations between two people over many
sessions, with questions whose evidence is given as dialogue ids (``D3:12`` = session 3, turn
12).  Download ``data/locomo10.json`` from the authors' repository (snap-research/locomo), then:

    python scripts/locomo_to_dataset.py locomo10.json my-locomo            # all ten conversations
    python scripts/locomo_to_dataset.py locomo10.json my-locomo --samples conv-26,conv-30
    memdir bench quality my-locomo --mode all

Output, one folder per conversation (``conv-26`` → ``26/``):

* ``workspace/memory/YYYY-MM-DD.md`` — each session is written to the daily log of its date:
  ``# YYYY-MM-DD``, ``## Session N, <time>``, then one line per turn, ``- Speaker: text``, a
  shared photo as its caption in brackets (``[shares a photo: …]``).  Sessions on the same day
  share one file, in session order.
* ``queries.jsonl`` — one question a line: ``id`` (``26/q<index in the qa list>``), ``query``,
  ``category`` (1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop, 5 adversarial), ``answer``
  (``adversarial_answer`` for category 5), and ``relevant``: the ``{path, line}`` of each
  evidence turn.  Questions whose evidence names no turn of the conversation are left out.

This is the layout of the development split the project benchmarks on (five conversations,
``../shared/data/locomo-dev`` in the project's own workspace).  Standard library only.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from datetime import date, datetime
from pathlib import Path
from typing import Any

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_TIME = re.compile(r"^\s*(?P<time>\d{1,2}:\d{2}\s*[ap]m)\s+on\s+(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]+),?\s+"
                        r"(?P<year>\d{4})\s*$", re.IGNORECASE)
_DIA_ID = re.compile(r"D(\d+):(\d+)")


class LocomoError(ValueError):
    """The input is not in LoCoMo's format; the message says where."""


def parse_session_date(raw: str, where: str) -> tuple[date, str]:
    """``"1:56 pm on 8 May, 2023"`` → (2023-05-08, ``"1:56 pm"``)."""
    m = _DATE_TIME.match(raw or "")
    if not m:
        raise LocomoError(f"{where}: cannot read the session date {raw!r} (expected e.g. '1:56 pm on 8 May, 2023')")
    for fmt in ("%d %B %Y", "%d %b %Y"):
        try:
            day = datetime.strptime(f"{m['day']} {m['month']} {m['year']}", fmt).date()
            return day, " ".join(m["time"].split())
        except ValueError:
            continue
    raise LocomoError(f"{where}: unknown month in {raw!r}")


def turn_line(turn: dict[str, Any]) -> str:
    """One dialogue turn as one Markdown list item (line breaks inside a turn become spaces)."""
    text = " ".join(str(turn.get("text") or "").split())
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return f"- {turn.get('speaker', '?')}: {text}"


def convert_sample(sample: dict[str, Any], out: Path) -> tuple[int, int, int]:
    """Write one conversation; returns (daily files, questions kept, questions dropped)."""
    sample_id = str(sample.get("sample_id") or "")
    conversation = sample.get("conversation")
    if not sample_id or not isinstance(conversation, dict):
        raise LocomoError(f"sample {sample_id or '?'}: expected 'sample_id' and a 'conversation' object")
    name = sample_id.removeprefix("conv-")
    sessions = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.match(key)))
    days: dict[date, list[str]] = {}
    where: dict[str, tuple[str, int]] = {}  # dia_id -> (path, line)
    for n in sessions:
        turns = conversation[f"session_{n}"]
        if not turns:
            continue
        day, time = parse_session_date(conversation.get(f"session_{n}_date_time", ""), f"{sample_id} session {n}")
        lines = days.setdefault(day, [f"# {day.isoformat()}", ""])
        if len(lines) > 2:
            lines.append("")
        lines += [f"## Session {n}, {time}", ""]
        rel = f"memory/{day.isoformat()}.md"
        for turn in turns:
            lines.append(turn_line(turn))
            if turn.get("dia_id"):
                where[str(turn["dia_id"]).strip()] = (rel, len(lines))
    memory = out / name / "workspace" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for day, lines in days.items():
        (memory / f"{day.isoformat()}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")

    kept = dropped = 0
    with (out / name / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i, qa in enumerate(sample.get("qa") or []):
            evidence = qa.get("evidence") or []
            ids = [f"D{s}:{t}" for item in evidence for s, t in _DIA_ID.findall(str(item))]
            relevant: list[dict[str, Any]] = []
            for dia in ids:
                if dia in where and {"path": where[dia][0], "line": where[dia][1]} not in relevant:
                    relevant.append({"path": where[dia][0], "line": where[dia][1]})
            if not relevant:
                dropped += 1
                continue
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            fh.write(json.dumps({"id": f"{name}/q{i}", "query": qa.get("question", ""),
                                 "category": qa.get("category"), "answer": str(answer), "relevant": relevant},
                                ensure_ascii=False) + "\n")
            kept += 1
    return len(days), kept, dropped


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     epilog="See the module docstring for the layout written.")
    parser.add_argument("locomo_json", type=Path, help="LoCoMo's locomo10.json")
    parser.add_argument("out", type=Path, help="dataset folder to create (must not exist or be empty)")
    parser.add_argument("--samples", help="comma-separated sample ids to keep (e.g. conv-26,conv-30)")
    args = parser.parse_args(argv)
    try:
        data = json.loads(args.locomo_json.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        print(f"locomo_to_dataset: cannot read {args.locomo_json}: {exc}", file=sys.stderr)
        return 1
    if not isinstance(data, list):
        print(f"locomo_to_dataset: {args.locomo_json} is not LoCoMo's format (expected a list of samples)",
              file=sys.stderr)
        return 1
    if args.out.exists() and any(args.out.iterdir()):
        print(f"locomo_to_dataset: {args.out} is not empty; choose a new folder", file=sys.stderr)
        return 1
    wanted = {s.strip() for s in args.samples.split(",")} if args.samples else None
    try:
        for sample in data:
            if wanted is not None and sample.get("sample_id") not in wanted:
                continue
            files, kept, dropped = convert_sample(sample, args.out)
            print(f"{sample['sample_id']}: {files} daily logs, {kept} questions"
                  + (f" ({dropped} without usable evidence left out)" if dropped else ""))
    except LocomoError as exc:
        print(f"locomo_to_dataset: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
