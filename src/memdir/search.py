"""The search pipeline (R§7): keyword and vector candidates, merge, decay, MMR, floor, rescue.

Differences from OpenClaw, each fixing a reported problem:
* keyword terms are the question's content words OR-ed together (stop words dropped), so
  natural-language questions match notes that share only some of their words;
* BM25 maps to ``r/(1+r)`` (never the v2 "everything scores 1.0" clamp);
* strong hits are *rescued* into spare result slots below the 0.35 floor: keyword hits that
  contain every content word of the query or score at least ``RESCUE_TEXT_SCORE`` on BM25 (the
  floor otherwise drops exact name/ID/date hits: R§18.3; on LoCoMo this lifts hybrid recall@6
  from 0.772 to 0.793), and vector hits with a cosine of at least ``RESCUE_VECTOR_SCORE`` (so a
  paraphrase is found with a small local model; neutral on LoCoMo);
* a slow or failing query embedding falls back to keyword results within a time budget, and
  the response says so.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memdir.embeddings.base import EmbeddingProvider, is_zero
from memdir.query import extract_keywords, keyword_terms
from memdir.ranking import Candidate, apply_decay, memory_timestamp, merge_hybrid, mmr_rerank
from memdir.settings_cache import candidate_count
from memdir.stores.base import Store

if TYPE_CHECKING:
    from memdir.config import MemorySearchConfig

SNIPPET_MAX_CHARS = 700
#: BM25 ``r/(1+r)`` of 0.6 is a rank of -1.5: several query words, or a rare one, matched.
RESCUE_TEXT_SCORE = 0.6
#: A cosine of 0.3 is far above what unrelated text scores with small models (≈0.0-0.15), but
#: at the default weights a vector-only hit needs 0.5 to pass the 0.35 floor: paraphrases that
#: share no word with their note (MiniLM: 0.31-0.48) would never be returned.
RESCUE_VECTOR_SCORE = 0.3


@dataclass
class SearchResult:
    path: str
    start_line: int
    end_line: int
    score: float
    snippet: str
    source: str
    explain: dict[str, Any] | None = None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "path": self.path,
            "startLine": self.start_line,
            "endLine": self.end_line,
            "score": round(self.score, 6),
            "snippet": self.snippet,
            "source": self.source,
        }
        if self.explain is not None:
            out["explain"] = self.explain
        return out


@dataclass
class SearchResponse:
    results: list[SearchResult]
    mode: str
    provider: str
    model: str
    fallback: dict[str, str] | None = None
    warnings: list[str] = field(default_factory=list)
    stale: bool = False
    timings_ms: dict[str, float] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "results": [r.as_dict() for r in self.results],
            "provider": self.provider,
            "model": self.model,
            "mode": self.mode,
        }
        if self.fallback:
            out["fallback"] = self.fallback
        if self.warnings:
            out["warnings"] = self.warnings
        if self.stale:
            out["stale"] = True
        return out


def truncate_snippet(text: str, limit: int = SNIPPET_MAX_CHARS) -> str:
    return text if len(text) <= limit else text[:limit]


_embed_pool: ThreadPoolExecutor | None = None


def embed_query_with_budget(provider: EmbeddingProvider, query: str, budget_s: float) -> list[float]:
    """Embed the query, giving up after ``budget_s`` (the call keeps running in the background)."""
    global _embed_pool
    if _embed_pool is None:
        _embed_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memdir-embed")
    future = _embed_pool.submit(provider.embed_query, query)
    return future.result(timeout=budget_s)


def covers_all_keywords(text: str, keywords: list[str]) -> bool:
    low = text.lower()
    return bool(keywords) and all(k in low for k in keywords)


def run_search(
    store: Store,
    cfg: MemorySearchConfig,
    query: str,
    *,
    provider: EmbeddingProvider | None,
    workspace: Path,
    max_results: int | None = None,
    min_score: float | None = None,
    explain: bool = False,
    now_ms: int | None = None,
    source_timestamp: Callable[[str, str], int | None] | None = None,
    provider_label: tuple[str, str] = ("none", "fts-only"),
) -> SearchResponse:
    cleaned = (query or "").strip()
    qcfg = cfg.query
    hybrid = qcfg.hybrid
    max_n = qcfg.max_results if max_results is None else max(0, int(max_results))
    floor = qcfg.min_score if min_score is None else min(1.0, max(0.0, float(min_score)))
    candidates = candidate_count(max_n, hybrid.candidate_multiplier)
    response = SearchResponse([], "hybrid" if provider else "fts-only", *provider_label)
    if not cleaned or max_n <= 0:
        return response
    timings = response.timings_ms

    t0 = time.perf_counter()
    keyword_hits = []
    terms = keyword_terms(cleaned)
    if terms and store.fts_available and (hybrid.enabled or provider is None):
        try:
            keyword_hits = store.keyword_search(terms, candidates)
        except Exception as exc:  # never let a query reach the user as an FTS error
            response.warnings.append(f"keyword search failed: {exc}")
    elif not store.fts_available:
        response.warnings.append(store.fts_error or "FTS unavailable")
    timings["keyword"] = (time.perf_counter() - t0) * 1000

    vector_hits = []
    if provider is not None:
        t1 = time.perf_counter()
        try:
            qvec = embed_query_with_budget(provider, cleaned, qcfg.embed_timeout_ms / 1000)
            timings["embed"] = (time.perf_counter() - t1) * 1000
            if not is_zero(qvec):
                t2 = time.perf_counter()
                vector_hits = store.vector_search(qvec, candidates)
                timings["vector"] = (time.perf_counter() - t2) * 1000
        except FutureTimeout:
            response.mode = "fts-only"
            response.fallback = {"from": "hybrid", "reason": f"query embedding exceeded {qcfg.embed_timeout_ms} ms"}
        except Exception as exc:
            response.mode = "fts-only"
            response.fallback = {"from": "hybrid", "reason": f"query embedding failed: {exc}"}

    keyword_only = provider is None or response.mode == "fts-only"
    if keyword_only:
        weights = (0.0, 1.0)
    elif not hybrid.enabled:
        weights = (1.0, 0.0)
    else:
        weights = (hybrid.vector_weight, hybrid.text_weight)
    cands = merge_hybrid(vector_hits, [] if not hybrid.enabled and not keyword_only else keyword_hits, *weights)

    if hybrid.temporal_decay.enabled:
        now = now_ms if now_ms is not None else int(time.time() * 1000)
        apply_decay(cands, hybrid.temporal_decay.half_life_days, now,
                    lambda p, s: memory_timestamp(p, s, workspace, source_timestamp))
    cands.sort(key=lambda c: -c.score)
    for i, c in enumerate(cands):
        c.rank_before_mmr = i
    if hybrid.mmr.enabled:
        cands = mmr_rerank(cands, hybrid.mmr.lambda_)

    chosen = [c for c in cands if c.score >= floor]
    if len(chosen) < max_n and (keyword_hits or vector_hits):
        keywords = extract_keywords(cleaned) or [cleaned.lower()]
        for c in cands:
            if len(chosen) >= max_n:
                break
            if c in chosen:
                continue
            strong_text = c.in_keyword and (
                c.text_score >= RESCUE_TEXT_SCORE or covers_all_keywords(c.snippet, keywords)
            )
            strong_vector = c.in_vector and c.vector_score >= RESCUE_VECTOR_SCORE
            if strong_text or strong_vector or (keyword_only and c.in_keyword and not chosen and c.score >= 0):
                c.rescued = True
                chosen.append(c)
    chosen = chosen[:max_n]
    response.results = [_result(c, explain, weights) for c in chosen]
    return response


def _result(c: Candidate, explain: bool, weights: tuple[float, float]) -> SearchResult:
    info = None
    if explain:
        info = {
            "vectorScore": round(c.vector_score, 6),
            "textScore": round(c.text_score, 6),
            "vectorWeight": round(weights[0], 6),
            "textWeight": round(weights[1], 6),
            "decay": round(c.decay, 6),
            "rankBeforeMmr": c.rank_before_mmr,
            "matched": [s for s, on in (("vector", c.in_vector), ("keyword", c.in_keyword)) if on],
            "rescued": c.rescued,
        }
    return SearchResult(c.path, c.start_line, c.end_line, c.score, truncate_snippet(c.snippet), c.source, info)
