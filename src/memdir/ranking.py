"""Combining and re-ranking hits: hybrid merge (R§7.9), temporal decay (R§7.1), MMR (R§7.2)."""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from memdir.stores.base import Hit
from memdir.textutil import LazyPattern

DAY_MS = 86_400_000
#: A file modified before this (1980-01-02 UTC) keeps no date: the Nix store gives every file the
#: time 1, reproducible tar and zip builds 0 or zip's first day (1980-01-01, local time), and an
#: archive unpacked with its times keeps them; no note was written then.
NO_MTIME_BEFORE_MS = 315_619_200_000
#: A daily log: ``memory/YYYY-MM-DD.md`` (R§7.1), or ``memory/YYYY-MM-DD-<slug>.md`` as the session
#: hook names its files (OpenClaw's pattern misses those, so with decay on a year-old session
#: summary kept its full score as if evergreen while that day's log decayed to nothing).
_DATED = re.compile(r"(?:^|/)memory/(\d{4})-(\d{2})-(\d{2})(?:-[^/]*)?\.md$")
_ASCII_TOKEN = re.compile(r"[a-z0-9_]+")
_CJK_CHAR: Any = LazyPattern("[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")


@dataclass
class Candidate:
    """One chunk while it is being ranked; the per-signal figures feed ``explain``."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    snippet: str
    vector_score: float = 0.0
    text_score: float = 0.0
    score: float = 0.0
    in_vector: bool = False
    in_keyword: bool = False
    decay: float = 1.0
    rank_before_mmr: int | None = None
    rescued: bool = False
    ts: int | None = None
    extra: dict[str, object] = field(default_factory=dict)
    date_start: str | None = None
    date_end: str | None = None
    #: Whether the chunk falls in a period the question names (see :mod:`memdir.dates`).
    in_period: bool = False
    #: ... in one small enough that all its chunks joined the pool ("yesterday", "on 2024-03-02").
    in_pooled_period: bool = False
    #: Why a chunk below the floor was returned anyway (``None`` when it passed the floor).
    rescue_reason: str | None = None
    #: The keyword figure the weighted fusion used (``text_score``'s BM25 over the pool's best with
    #: ``Tuning.text_norm = "max"``), so ``explain`` adds up to the score; ``None`` under RRF.
    text_fused: float | None = None

    @classmethod
    def from_hit(cls, h: Hit) -> Candidate:
        return cls(h.id, h.path, h.source, h.start_line, h.end_line, h.text, ts=h.ts,
                   date_start=h.date_start, date_end=h.date_end)


@dataclass
class Tuning:
    """Ranking choices that are not user settings, each one switchable for ablations in ``bench``.

    The defaults are what leave-one-conversation-out cross-validation chose (docs/benchmarks.md).
    """

    #: Look up the missing signal for every candidate (a keyword-only hit gets its real cosine,
    #: a vector-only hit its real BM25) before fusing.
    complete: bool = True
    #: ``weighted`` (vw·cosine + tw·bm25) or ``rrf`` (reciprocal rank fusion, k = ``rrf_k``).
    fusion: str = "weighted"
    rrf_k: int = 60
    #: Read dates in the question; chunks of a named period get ``score × (1 + date_boost)``
    #: (1.0: a chunk of the period counts double, i.e. the period is *preferred*, not required).
    dates: bool = True
    date_boost: float = 1.0
    #: A named period small enough (≤ the candidate pool) joins the pool whole.
    period_pool: bool = True
    #: How BM25 enters the fusion: ``max`` (``r / max r`` over the candidate pool, so the best
    #: keyword match of every question weighs 1 whatever its absolute BM25) or ``ratio``
    #: (``r/(1+r)`` as stored, R§7).
    text_norm: str = "max"
    #: The last ``fresh_slots`` results go to the best candidates from files (days) that no
    #: better result comes from (measured for multi-hop questions, not chosen: 0 = off).
    fresh_slots: int = 0
    #: A daily-log result is widened by whole lines, alternately below and above its chunk,
    #: while it stays within this many characters (1600: what a 400-token chunk holds; 0 = off),
    #: and a candidate whose lines a better widened result already shows is skipped (a curated
    #: file's within its section, a transcript's over whole messages of that transcript).
    expand_chars: int = 1600
    #: Widening stops at lines a better result of the same file already shows, and a chunk's
    #: first or last lines that such a result shows (its carried overlap) are trimmed off.
    expand_disjoint: bool = True


#: The tuning :func:`memdir.search.run_search` uses; ``bench cv`` swaps it for ablations.
TUNING = Tuning()

#: Fusion weights ``(vector, text)`` per embedding model, chosen by leave-one-conversation-out
#: cross-validation on LoCoMo dev (docs/benchmarks.md, "Fusion per model").  A model not listed
#: gets OpenClaw's 0.7/0.3 (tuned for large API models); a configured ``vectorWeight`` /
#: ``textWeight`` always wins.
MODEL_WEIGHTS: dict[str, tuple[float, float]] = {
    "all-MiniLM-L6-v2-int8": (0.7, 0.3),
}
DEFAULT_WEIGHTS = (0.7, 0.3)


def model_weights(model: str | None) -> tuple[float, float]:
    """Default ``(vector, text)`` weights for an embedding model (OpenClaw's 0.7/0.3 if unknown)."""
    if model:
        name = model.rsplit("/", 1)[-1]
        for key in (model, name):
            if key in MODEL_WEIGHTS:
                return MODEL_WEIGHTS[key]
    return DEFAULT_WEIGHTS


def rrf_scores(cands: Sequence[Candidate], k: int) -> dict[str, float]:
    """Reciprocal rank fusion over the vector and text rankings of the pool, scaled into [0, 1]."""
    out = dict.fromkeys((c.id for c in cands), 0.0)
    for key in (lambda c: c.vector_score, lambda c: c.text_score):
        ranked = sorted((c for c in cands if key(c) > 0), key=lambda c: -key(c))
        for rank, c in enumerate(ranked, start=1):
            out[c.id] += 1.0 / (k + rank)
    top = 2.0 / (k + 1)
    return {cid: v / top for cid, v in out.items()}


def merge_hybrid(vector: Sequence[Hit], keyword: Sequence[Hit], vector_weight: float,
                 text_weight: float) -> list[Candidate]:
    """Union by chunk id, ``score = vw·vector + tw·text``; a keyword snippet replaces a vector one."""
    by_id: dict[str, Candidate] = {}
    for h in vector:
        by_id[h.id] = Candidate(h.id, h.path, h.source, h.start_line, h.end_line, h.text,
                                vector_score=h.score, in_vector=True, ts=h.ts)
    for h in keyword:
        existing = by_id.get(h.id)
        if existing is not None:
            existing.text_score = h.score
            existing.in_keyword = True
            if h.text:
                existing.snippet = h.text
        else:
            by_id[h.id] = Candidate(h.id, h.path, h.source, h.start_line, h.end_line, h.text,
                                    text_score=h.score, in_keyword=True, ts=h.ts)
    out = list(by_id.values())
    for c in out:
        c.score = vector_weight * c.vector_score + text_weight * c.text_score
    return out


def decay_multiplier(age_days: float, half_life_days: float) -> float:
    """``exp(−ln2/halfLife · max(0, age))``; a bad half-life disables decay."""
    if not math.isfinite(half_life_days) or half_life_days <= 0:
        return 1.0
    return math.exp(-(math.log(2) / half_life_days) * max(0.0, age_days))


def dated_path_ms(path: str) -> int | None:
    norm = path.replace("\\", "/")
    while norm.startswith("./"):
        norm = norm[2:]
    m = _DATED.search(norm)
    if not m:
        return None
    try:
        d = datetime(int(m.group(1)), int(m.group(2)), int(m.group(3)), tzinfo=UTC)
    except ValueError:
        return None
    return int(d.timestamp() * 1000)


def is_evergreen(path: str, source: str) -> bool:
    norm = path.replace("\\", "/").removeprefix("./")
    if source != "memory":
        return False
    # "Dated" here is the file-name pattern, not a valid date: memory/2026-02-30.md falls back to mtime.
    return norm in ("MEMORY.md", "memory.md") or (norm.startswith("memory/") and not _DATED.search(norm))


def memory_timestamp(path: str, source: str, workspace: Path,
                     source_timestamp: Callable[[str, str], int | None] | None = None) -> int | None:
    """When a hit's content was written, for decay: dated file name, evergreen, or mtime (none for a
    placeholder time before :data:`NO_MTIME_BEFORE_MS`)."""
    dated = dated_path_ms(path)
    if dated is not None:
        return dated
    if is_evergreen(path, source):
        return None
    if source_timestamp is not None:
        ts = source_timestamp(path, source)
        if ts is not None:
            return ts
    try:
        mtime = int(os.stat(workspace / path).st_mtime * 1000)
    except OSError:
        return None
    # (aged from then, such a note kept 2^-680 of its score with a 30-day half-life: 0, under every other)
    return mtime if mtime >= NO_MTIME_BEFORE_MS else None


def apply_decay(cands: list[Candidate], half_life_days: float, now_ms: int,
                timestamp: Callable[[str, str], int | None]) -> None:
    cache: dict[tuple[str, str], int | None] = {}
    for c in cands:
        key = (c.source, c.path)
        if c.ts:
            ts: int | None = c.ts  # the chunk knows when it was written (transcripts)
        else:
            if key not in cache:
                cache[key] = timestamp(c.path, c.source)
            ts = cache[key]
        if ts is None:
            continue
        c.decay = decay_multiplier(max(0, now_ms - ts) / DAY_MS, half_life_days)
        c.score *= c.decay


def mmr_tokens(text: str) -> frozenset[str]:
    """ASCII word tokens plus every CJK character and bigrams of adjacent CJK characters."""
    low = text.lower()
    tokens = set(_ASCII_TOKEN.findall(low))
    prev_end = -2
    prev_char = ""
    for m in _CJK_CHAR.finditer(low):
        ch = m.group(0)
        tokens.add(ch)
        if m.start() == prev_end:
            tokens.add(prev_char + ch)
        prev_end, prev_char = m.end(), ch
    return frozenset(tokens)


def jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    if not a and not b:
        return 1.0
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


#: MMR reorders at most this many of the best candidates: two full candidate pools (200 each), as
#: many as any search had before a pool could grow past 200 to hold a larger maxResults.
MMR_MAX_CANDIDATES = 400


def mmr_rerank(cands: list[Candidate], lam: float) -> list[Candidate]:
    """Greedy maximal marginal relevance over the candidates (the caller cuts to maxResults).

    Each remaining candidate's highest similarity to the chosen ones is kept and raised as each
    is chosen: recomputed against all of them at every step, 400 candidates (maxResults 50 and
    the default multiplier, both signals) took ~10 s a search.  It is quadratic still: past
    :data:`MMR_MAX_CANDIDATES` (``--max-results 1000``: 2,000 candidates, 28 s) the best of them by
    score are reordered and the rest follow in score order."""
    if len(cands) > MMR_MAX_CANDIDATES:
        ranked = sorted(cands, key=lambda c: -c.score)  # (stable: the caller's order among equals)
        return mmr_rerank(ranked[:MMR_MAX_CANDIDATES], lam) + ranked[MMR_MAX_CANDIDATES:]
    if len(cands) <= 1:
        return list(cands)
    lam = min(1.0, max(0.0, lam))
    if lam >= 1.0:
        return sorted(cands, key=lambda c: -c.score)
    scores = [c.score for c in cands]
    lo, hi = min(scores), max(scores)
    rel = [1.0 if hi == lo else (s - lo) / (hi - lo) for s in scores]
    toks = [mmr_tokens(c.snippet) for c in cands]
    remaining = list(range(len(cands)))
    most_like = [0.0] * len(cands)  # each candidate's highest Jaccard to a chosen one
    chosen: list[int] = []
    while remaining:
        best, best_val = remaining[0], -math.inf
        for i in remaining:
            val = lam * rel[i] - (1 - lam) * most_like[i]
            if val > best_val or (val == best_val and cands[i].score > cands[best].score):
                best, best_val = i, val
        chosen.append(best)
        remaining.remove(best)
        for i in remaining:
            most_like[i] = max(most_like[i], jaccard(toks[i], toks[best]))
    return [cands[i] for i in chosen]

