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
from datetime import date
from pathlib import Path
from typing import Any

_SESSION_KEY = re.compile(r"^session_(\d+)$")
_DATE_TIME = re.compile(r"^\s*(?P<time>\d{1,2}:\d{2}\s*[ap]m)\s+on\s+(?P<day>\d{1,2})\s+(?P<month>[A-Za-z]+),?\s+"
                        r"(?P<year>\d{4})\s*$", re.IGNORECASE)
_DIA_ID = re.compile(r"D\s*(\d+)\s*:\s*(\d+)", re.IGNORECASE)


def dia_key(raw: Any) -> tuple[int, int] | None:
    """``"D3:12"`` → (3, 12): a turn's id and an evidence id compare by their numbers, so ``D3:012``,
    ``d3:12`` and ``D3: 12`` (written by other converters) name the same turn."""
    m = _DIA_ID.fullmatch(str(raw).strip())
    return (int(m.group(1)), int(m.group(2))) if m else None


class LocomoError(ValueError):
    """The input is not in LoCoMo's format; the message says where."""


_MONTHS = ("january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december")


def parse_session_date(raw: Any, where: str) -> tuple[date, str]:
    """``"1:56 pm on 8 May, 2023"`` → (2023-05-08, ``"1:56 pm"``); a month may be shortened to
    any of its beginnings of 3 letters or more (``Sept`` was refused: strptime knows ``Sep``)."""
    m = _DATE_TIME.match(str(raw or ""))
    if not m:
        raise LocomoError(f"{where}: cannot read the session date {raw!r} (expected e.g. '1:56 pm on 8 May, 2023')")
    word = m["month"].lower()
    months = [n for n, name in enumerate(_MONTHS, start=1) if len(word) >= 3 and name.startswith(word)]
    if len(months) != 1:
        raise LocomoError(f"{where}: unknown month {m['month']!r} in {raw!r} (English names, e.g. May, Sept)")
    try:
        day = date(int(m["year"]), months[0], int(m["day"]))
    except ValueError:
        raise LocomoError(f"{where}: there is no such day as {raw!r}") from None
    return day, " ".join(m["time"].split())


def turn_line(turn: dict[str, Any]) -> str:
    """One dialogue turn as one Markdown list item (line breaks inside a turn become spaces)."""
    text = " ".join(str(turn.get("text") or "").split())
    caption = " ".join(str(turn.get("blip_caption") or "").split())
    if caption:
        text = f"{text} [shares a photo: {caption}]".strip()
    return f"- {turn.get('speaker', '?')}: {text}"


def sample_name(sample: Any, index: int) -> str:
    """The folder a sample is written to (``conv-26`` → ``26``)."""
    sample_id = str(sample.get("sample_id") or "") if isinstance(sample, dict) else ""
    if not sample_id or not isinstance(sample.get("conversation"), dict):
        raise LocomoError(f"sample {sample_id or f'#{index + 1}'}: expected 'sample_id' and a 'conversation' object")
    name = sample_id.removeprefix("conv-")
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
        raise LocomoError(f"sample {sample_id!r}: not usable as a folder name (letters, digits, . _ -)")
    return name


def convert_sample(sample: dict[str, Any], out: Path, notes: list[str] | None = None) -> tuple[int, int, int]:
    """Write one conversation; returns (daily files, questions kept, questions dropped); what was
    kept only in part (evidence naming no turn, a turn id used twice) is added to ``notes``."""
    sample_id = str(sample.get("sample_id") or "")
    name = sample_name(sample, 0)
    conversation = sample["conversation"]
    notes = [] if notes is None else notes
    sessions = sorted(int(m.group(1)) for key in conversation if (m := _SESSION_KEY.match(key)))
    days: dict[date, list[str]] = {}
    where: dict[tuple[int, int], tuple[str, int]] = {}  # dia id -> (path, line)
    reused: set[str] = set()
    for n in sessions:
        turns = conversation[f"session_{n}"]
        if not turns:
            continue
        if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
            raise LocomoError(f"{sample_id} session {n}: expected a list of turns (objects with speaker, dia_id, text)")
        day, time = parse_session_date(conversation.get(f"session_{n}_date_time", ""), f"{sample_id} session {n}")
        lines = days.setdefault(day, [f"# {day.isoformat()}", ""])
        if len(lines) > 2:
            lines.append("")
        lines += [f"## Session {n}, {time}", ""]
        rel = f"memory/{day.isoformat()}.md"
        for turn in turns:
            lines.append(turn_line(turn))
            key = dia_key(turn.get("dia_id") or "")
            if key is not None:
                if key in where:  # the later turn wins, as before, but it is said
                    reused.add(f"D{key[0]}:{key[1]}")
                where[key] = (rel, len(lines))
    memory = out / name / "workspace" / "memory"
    memory.mkdir(parents=True, exist_ok=True)
    for day, lines in days.items():
        (memory / f"{day.isoformat()}.md").write_text("\n".join(lines) + "\n", encoding="utf-8")

    kept = dropped = partial = 0
    qas = sample.get("qa") or []
    if not isinstance(qas, list) or not all(isinstance(qa, dict) for qa in qas):
        raise LocomoError(f"{sample_id}: 'qa' must be a list of question objects")
    with (out / name / "queries.jsonl").open("w", encoding="utf-8") as fh:
        for i, qa in enumerate(qas):
            evidence = qa.get("evidence") or []
            if isinstance(evidence, str):  # one id, or "D1:3; D2:5", not in a list
                evidence = [evidence]
            ids = [(int(s), int(t)) for item in evidence for s, t in _DIA_ID.findall(str(item))]
            relevant: list[dict[str, Any]] = []
            for dia in ids:
                if dia in where and {"path": where[dia][0], "line": where[dia][1]} not in relevant:
                    relevant.append({"path": where[dia][0], "line": where[dia][1]})
            if not relevant:
                dropped += 1
                continue
            if any(dia not in where for dia in ids):
                partial += 1
            answer = qa.get("answer", qa.get("adversarial_answer", ""))
            fh.write(json.dumps({"id": f"{name}/q{i}", "query": qa.get("question", ""),
                                 "category": qa.get("category"), "answer": str(answer), "relevant": relevant},
                                ensure_ascii=False) + "\n")
            kept += 1
    if partial:
        notes.append(f"{partial} question(s) kept with only the evidence that names a turn of the conversation")
    if reused:
        notes.append(f"turn id(s) {', '.join(sorted(reused))} used twice: evidence points at the later turn")
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
    wanted = {s.strip() for s in args.samples.split(",") if s.strip()} if args.samples else None
    try:
        # Checked before anything is written: two samples of one name wrote into one folder (the
        # second's questions over the first's, their daily logs merged), and a --samples name
        # that is not in the file wrote nothing and said nothing.
        names = [sample_name(sample, i) for i, sample in enumerate(data)]
        ids = [str(sample["sample_id"]) for sample in data]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            raise LocomoError(f"two samples would be written to one folder: {', '.join(twice)}")
        if wanted is not None:
            unknown = sorted(w for w in wanted if w not in ids and f"conv-{w}" not in ids)
            if unknown:
                raise LocomoError(f"no sample {', '.join(unknown)} in {args.locomo_json} (it has {', '.join(ids)})")
        for sample, sample_id in zip(data, ids, strict=True):
            if wanted is not None and sample_id not in wanted and sample_id.removeprefix("conv-") not in wanted:
                continue
            notes: list[str] = []
            files, kept, dropped = convert_sample(sample, args.out, notes)
            print(f"{sample_id}: {files} daily logs, {kept} questions"
                  + (f" ({dropped} without usable evidence left out)" if dropped else ""))
            for note in notes:
                print(f"  note: {note}")
    except LocomoError as exc:
        print(f"locomo_to_dataset: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
