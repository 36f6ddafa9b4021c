"""Size and shape of a workspace: work that must grow at most in proportion to it.

Each test counts operations (comparisons, parsed lines, statements) rather than timing them, so
machine load cannot move the figures; the cliffs they guard were super-linear in the input."""

from __future__ import annotations

import json
import math
import os
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import memdir.ranking as ranking
from helpers import cli_env
from memdir.ranking import Candidate, jaccard, mmr_rerank, mmr_tokens
from memdir.sessions import store
from memdir.sessions.hook import recent_messages
from memdir.sessions.readable import read_session_lines


def _naive_mmr(cands: list[Candidate], lam: float) -> list[str]:
    """MMR as R§7.2 states it: each pick's similarity is the max over everything chosen so far."""
    scores = [c.score for c in cands]
    lo, hi = min(scores), max(scores)
    rel = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    toks = [mmr_tokens(c.snippet) for c in cands]
    remaining, chosen = list(range(len(cands))), []
    while remaining:
        best, best_val = remaining[0], -math.inf
        for i in remaining:
            sim = max((jaccard(toks[i], toks[j]) for j in chosen), default=0.0)
            val = lam * rel[i] - (1 - lam) * sim
            if val > best_val or (val == best_val and cands[i].score > cands[best].score):
                best, best_val = i, val
        chosen.append(best)
        remaining.remove(best)
    return [cands[i].id for i in chosen]


def _candidates(n: int, seed: int) -> list[Candidate]:
    rnd = random.Random(seed)
    words = [f"w{i}" for i in range(40)]
    # few distinct scores and snippets: ties in value and in similarity are exercised too
    return [Candidate(str(i), "memory/x.md", "memory", i, i, " ".join(rnd.choice(words) for _ in range(8)),
                      score=rnd.choice([0.2, 0.5, 0.5, 0.9])) for i in range(n)]


@pytest.mark.parametrize("lam", [0.0, 0.3, 0.7, 0.95])
def test_mmr_order_is_the_greedy_order(lam: float) -> None:
    for seed in range(5):
        cands = _candidates(30, seed)
        assert [c.id for c in mmr_rerank(cands, lam)] == _naive_mmr(cands, lam)


@pytest.fixture
def jaccard_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many similarities MMR computes (``[count]``), the similarity itself unchanged."""
    calls = [0]

    def counting(a: frozenset[str], b: frozenset[str]) -> float:
        calls[0] += 1
        return jaccard(a, b)

    monkeypatch.setattr(ranking, "jaccard", counting)
    return calls


def test_mmr_compares_each_pair_of_candidates_at_most_once(jaccard_calls: list[int]) -> None:
    """A pool of k candidates costs at most k(k-1)/2 similarities.  Each pick recomputed every
    remaining candidate's similarity to every chosen one (k³/6 in all): 200 candidates
    (``maxResults`` 50, hybrid) took 11 s, 400 took 100 s; now 0.2 s and 0.9 s."""
    k = 80
    mmr_rerank(_candidates(k, 1), 0.7)
    assert jaccard_calls[0] <= k * (k - 1) // 2


def test_mmr_reorders_at_most_two_pools_of_candidates(jaccard_calls: list[int]) -> None:
    """A candidate pool grows past 200 to hold a larger ``maxResults`` (``--max-results 1000``: up
    to 2,000 candidates, 28 s of MMR); MMR reorders the best 400 by score, as many as any search
    had before, and the rest follow in score order."""
    from memdir.ranking import MMR_MAX_CANDIDATES

    cands = _candidates(500, 3)
    out = mmr_rerank(cands, 0.0)
    by_score = sorted(cands, key=lambda c: -c.score)
    assert MMR_MAX_CANDIDATES == 400 and jaccard_calls[0] <= 400 * 399 // 2  # (all 500: 124,750)
    assert sorted(c.id for c in out) == sorted(c.id for c in cands)
    assert [c.id for c in out[400:]] == [c.id for c in by_score[400:]]
    assert [c.id for c in out[:400]] == [c.id for c in mmr_rerank(by_score[:400], 0.0)]


def _count_json_parses(monkeypatch: pytest.MonkeyPatch) -> Callable[[], int]:
    """Count ``json.loads`` calls from now on: how much of a transcript a reader parsed."""
    calls = 0
    real = json.loads

    def counting(text: Any, *args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        return real(text, *args, **kwargs)

    monkeypatch.setattr(json, "loads", counting)
    return lambda: calls


def test_reading_the_end_of_a_long_transcript_parses_only_the_lines_asked_for(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``memory_get sessions/x.jsonl --from N`` parsed every JSON line before ``N`` and dropped
    them: the last lines of a million-message transcript took 3 s; now the lines asked for."""
    sessions = tmp_path / "sessions"
    sessions.mkdir()
    n = 3000
    lines = [json.dumps({"type": "message", "message": {"role": "user" if i % 2 else "assistant",
                                                        "content": f"message {i}"}}) for i in range(1, n + 1)]
    (sessions / "s.jsonl").write_text("\n".join(lines) + "\n")
    parsed = _count_json_parses(monkeypatch)
    text = read_session_lines("sessions/s.jsonl", sessions, n - 2, 3)
    assert text.splitlines() == [f"Assistant: message {n - 2}", f"User: message {n - 1}", f"Assistant: message {n}"]
    assert parsed() <= 3
    assert read_session_lines("sessions/s.jsonl", sessions, 2, 2).splitlines() == [
        "Assistant: message 2", "User: message 3"]
    assert read_session_lines("sessions/s.jsonl", sessions, n + 5, 2) == ""
    assert read_session_lines("sessions/s.jsonl", sessions, 10**30, 10**30) == ""  # past what islice takes
    assert read_session_lines("sessions/s.jsonl", sessions, n, 10**30) == f"Assistant: message {n}"


def test_thousands_of_skipped_files_are_named_twenty_at_a_time(make_workspace, run_cli) -> None:
    """5,000 FIFOs posing as notes printed 5,000 warnings at every ``memdir index`` and 5,000
    status lines; now the first 20 and one line counting the rest.  ``--json`` keeps them all."""
    ws = make_workspace({"MEMORY.md": "# Prefs\nThe launch codename is Bluebird.\n"})
    (ws / "memory").mkdir()
    for i in range(300):
        os.mkfifo(ws / "memory" / f"pipe{i:03d}.md")
    env = {"MEMDIR_PROVIDER": "none"}
    index = run_cli("index", "-w", str(ws), env=env)
    assert index.returncode == 0, index.stderr
    warnings = [line for line in index.stderr.splitlines() if line.startswith("warning: ")]
    assert len(warnings) == 21 and "pipe000.md" in warnings[0]
    assert warnings[-1] == "warning: … and 280 more skipped files (all of them: memdir status --json)"
    text = run_cli("status", "-w", str(ws), env=env).stdout
    assert "  … and 280 more skipped files" in text and text.count("a FIFO") == 20
    listed = json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)["skipped"]
    assert len(listed) == 300


@pytest.mark.parametrize("block", [1, 7, 64, 1 << 16])
def test_records_read_from_the_end_are_the_records_read_from_the_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, block: int) -> None:
    """Blank, torn and non-object lines, a line longer than a block, a byte order mark, CRLF,
    U+2028 and a byte that is not UTF-8: the same records, in reverse order, for any block size."""
    monkeypatch.setattr(store, "_TAIL_BLOCK", block)
    rnd = random.Random(block)
    lines = [b'\xef\xbb\xbf{"type": "session"}', b"", b"  ", b"[1, 2]", b'{"torn": ', b'{"a": "caf\xe9"}\r',
             json.dumps({"long": "x" * 300}).encode(), json.dumps({"sep": "a\u2028b"}).encode()]
    lines += [json.dumps({"n": i, "pad": "y" * rnd.randrange(40)}).encode() for i in range(60)]
    rnd.shuffle(lines)
    for ending in (b"\n", b""):
        path = tmp_path / f"t{len(ending)}.jsonl"
        path.write_bytes(b"\n".join(lines) + ending)
        forward = [record for _, record in store.iter_records(path)]
        assert list(store.records_from_end(path)) == forward[::-1] and len(forward) >= 60
    assert list(store.records_from_end(tmp_path / "missing.jsonl")) == []
    (tmp_path / "empty.jsonl").write_bytes(b"")
    assert list(store.records_from_end(tmp_path / "empty.jsonl")) == []


def test_the_session_hook_reads_only_the_end_of_a_long_transcript(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The hook keeps the last 15 messages: it parsed every line of the transcript for them
    (a million messages: 4.7 s); now it reads from the end until it has them."""
    path = tmp_path / "s.jsonl"
    texts = [f"message {i}" for i in range(3000)]
    records = [{"type": "message", "message": {"role": "user" if i % 2 else "assistant", "content": t}}
               for i, t in enumerate(texts)]
    records[-2] = {"type": "message", "message": {"role": "user", "content": "/new"}}  # a command: not kept
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    parsed = _count_json_parses(monkeypatch)
    got = recent_messages(path, 15)
    assert parsed() < 100
    kept = [f"{r['message']['role']}: {r['message']['content']}" for r in records if r["message"]["content"] != "/new"]
    assert got == kept[-15:]
    assert recent_messages(path, 0) == kept  # no limit: every message, in order


def test_append_reads_no_more_of_stdin_than_a_note_may_hold(make_workspace, state_dir: Path) -> None:
    """``yes | memdir append -`` read stdin until memory ran out; now at most a note's limit
    (64 MiB; 1,000 bytes here), then one usage error, and nothing is appended."""
    ws = make_workspace({"MEMORY.md": "# Prefs\n"})
    code = ("import sys, memdir.reading as r; r.MAX_NOTE_BYTES = 1000; from memdir.cli import main; "
            "sys.exit(main(['append', '-', '--json', '-w', sys.argv[1]]))")
    out = subprocess.run([sys.executable, "-c", code, str(ws)], input="word " * 1000, capture_output=True,
                         text=True, env=cli_env(state_dir), timeout=60)
    assert out.returncode == 2, out.stderr
    assert "the note on stdin is larger than" in out.stderr and json.loads(out.stdout)["error"]["kind"] == "usage"
    assert not (ws / "memory").exists()
    fits = subprocess.run([sys.executable, "-c", code, str(ws)], input="word " * 100, capture_output=True,
                          text=True, env=cli_env(state_dir), timeout=60)
    assert fits.returncode == 0, fits.stderr
    assert json.loads(fits.stdout)["appended"] is True


def test_ltm_import_reads_no_more_than_an_import_may_hold(tmp_path: Path, state_dir: Path) -> None:
    """``memdir ltm import /dev/zero`` (or ``- < /dev/zero``) read until memory ran out; now at most
    a note's limit (64 MiB; 1,000 bytes here), then one error line, and nothing imported."""
    pytest.importorskip("lancedb")
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n')
    big = tmp_path / "big.md"
    big.write_text("- The user keeps notes about " + "bees " * 300 + "\n")
    code = ("import sys, memdir.reading as r; r.MAX_NOTE_BYTES = 1000; from memdir.cli import main; "
            "sys.exit(main(['-w', sys.argv[1], 'ltm', 'import', *sys.argv[2:]]))")
    out = subprocess.run([sys.executable, "-c", code, str(ws), "-"], input=big.read_text(), capture_output=True,
                         text=True, env=cli_env(state_dir), timeout=120)  # (a file is read the same way)
    assert out.returncode == 1, out.stderr
    assert "stdin holds more than 1,000 bytes, the most an import may be; nothing was imported" in out.stderr
    latin = tmp_path / "latin.md"
    latin.write_bytes(b"- caf\xe9 latte\n")
    out = subprocess.run([sys.executable, "-c", code, str(ws), str(latin)], capture_output=True, text=True,
                         env=cli_env(state_dir), timeout=120)
    assert out.returncode == 1 and f"ltm import: {latin} is not valid UTF-8 (at byte 6)" in out.stderr
