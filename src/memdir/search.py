"""The search pipeline (R§7): keyword and vector candidates, merge, decay, MMR, floor, rescue.

Differences from OpenClaw, each fixing a reported problem:
* keyword terms are the question's content words OR-ed together (stop words dropped), so
  natural-language questions match notes that share only some of their words;
* BM25 maps to ``r/(1+r)`` (never the v2 "everything scores 1.0" clamp), and the fusion
  divides the raw BM25 by the best of the candidate pool, so every question's best keyword
  match weighs the same against cosine (``Tuning.text_norm``);
* chunks are half OpenClaw's size (200/40 tokens) and a memory-file result is widened to 1600
  characters of whole lines around its chunk, never over lines a better result shows: results
  hold what a 400-token chunk did, centred on what matched (``Tuning.expand_chars``); a
  transcript's result likewise over whole messages of its own transcript, cited by JSONL line;
* strong hits are *rescued* into spare result slots below the 0.35 floor: keyword hits that
  contain every content word of the query or score at least ``RESCUE_TEXT_SCORE`` on BM25 (the
  floor otherwise drops exact name/ID/date hits: R§18.3; on LoCoMo this lifts hybrid recall@6
  from 0.772 to 0.793), and vector hits with a cosine of at least ``RESCUE_VECTOR_SCORE`` (so a
  paraphrase is found with a small local model; neutral on LoCoMo), and the chunks of a period
  the question names when it is small enough to be pooled whole ("what did I do yesterday?");
* a slow or failing query embedding falls back to keyword results within a time budget, and
  the response says so;
* every candidate is scored on *both* signals before the merge (a keyword-only hit gets its
  real cosine, a vector-only hit its real BM25), with fusion weights measured per embedding
  model (:data:`memdir.ranking.MODEL_WEIGHTS`);
* a question that names a date or period (:mod:`memdir.dates`) prefers chunks of that period;
* a note whose file name (its title in Obsidian, Logseq, Foam, Dendron) the question names, or
  which holds every word of the question, is a keyword candidate even when its text never says it;
* an explicit ``min_score`` is strict: nothing below it is rescued.
"""

from __future__ import annotations

import bisect
import os
import re
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import date, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from memdir import ranking
from memdir.dates import GRACE_DAYS, Period, Periods, file_date, query_periods
from memdir.embeddings.base import EmbeddingProvider, is_zero, one_line
from memdir.indexing_switches import INDEXING
from memdir.query import extract_keywords, keyword_terms, match_form, normalise_query
from memdir.ranking import Candidate, Tuning, apply_decay, memory_timestamp, mmr_rerank, model_weights, rrf_scores
from memdir.settings_cache import candidate_count
from memdir.stores.base import Hit, Store
from memdir.textutil import LazyPattern, cut_text
from memdir.timezones import resolve_timezone

if TYPE_CHECKING:
    from concurrent.futures import Future, ThreadPoolExecutor

    from memdir.config import MemorySearchConfig

T = TypeVar("T")

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
    #: Milliseconds per stage; ``embed`` is how long the search *waited* for the query embedding,
    #: which is computed while the keyword search runs.
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


def truncate_snippet(text: str, limit: int = SNIPPET_MAX_CHARS, terms: Sequence[str] = (), *,
                     needles: list[tuple[str, ...]] | None = None) -> str:
    """A chunk's text cut to ``limit`` characters: its head, or, when lines past the head hold
    query ``terms`` (:func:`memdir.query.keyword_terms`) the head has none of, the run of whole
    lines that shows the most of them.  A 700-character snippet of an 800-character chunk left
    out the chunk's last lines: a search for a fact on one of them cited its lines but showed
    only the lines above it (a bullet near the end of a group of MEMORY.md).  ``needles`` are
    ``terms``' forms (:func:`_needles`) when the caller made them once for several snippets."""
    if len(text) <= limit:
        return text
    if needles is None and terms:
        needles = _needles(terms)
    if needles:
        if "\n" in text:
            text = _focused(text, limit, needles)
        if len(text) > limit and not 0 <= text.find("\n") <= limit:  # a line longer than the snippet leads it
            text = _within_line(text, limit, needles)
    return cut_text(text, limit)


def _needles(terms: Sequence[str]) -> list[tuple[str, ...]]:
    """Each query term's forms to look for in a snippet: its words and their stems, lower case."""
    from memdir.textutil import stem, word_runs

    needles: list[tuple[str, ...]] = []
    for term in terms:
        words = word_runs(match_form(term)) or [match_form(term)]
        needles.append(tuple(dict.fromkeys(s for w in words for s in (w, stem(w)) if s)))
    return needles


def _matched_places(text: str) -> tuple[str, list[int], list[int]]:
    """:func:`match_form` of ``text``, made character by character (with the marks and joiners
    that continue one), and for each of its characters where in ``text`` the character it comes
    from starts and ends."""
    from memdir.textutil import continues_character

    parts: list[str] = []
    starts: list[int] = []
    ends: list[int] = []
    i, n = 0, len(text)
    while i < n:
        j = i + 1
        while j < n and continues_character(text[j - 1], text[j]):
            j += 1
        part = match_form(text[i:j])
        parts.append(part)
        starts.extend([i] * len(part))
        ends.extend([j] * len(part))
        i = j
    return "".join(parts), starts, ends


def _within_line(text: str, limit: int, needles: list[tuple[str, ...]]) -> str:
    """``text`` (led by a line longer than ``limit``) from a little before the place where the
    most query terms lie within ``limit`` characters of one another, when its first ``limit``
    characters show fewer of them: a paragraph saved as one long line showed only its first 700
    characters, whatever matched further on."""
    import re

    from memdir.textutil import character_cut

    low = match_form(text)
    if len(low) == len(text):
        hits = sorted((m.start(), m.end(), i) for i, forms in enumerate(needles) for form in forms
                      for m in re.finditer(re.escape(form), low))
    else:  # matching changed the length (ß as ss, NFD, a soft hyphen): places found in it, mapped back
        low, starts, ends = _matched_places(text)
        hits = sorted((starts[m.start()], ends[m.end() - 1], i) for i, forms in enumerate(needles)
                      for form in forms for m in re.finditer(re.escape(form), low) if m.end() > m.start())
    if not hits:
        return text
    head = len({i for _, end, i in hits if end <= limit})
    best, most, last = 0, head, 0
    counts: dict[int, int] = {}
    b = 0
    for a, (start, _, _) in enumerate(hits):  # hits a..b-1: those ending within limit of hit a
        # a hit longer than the limit never joined the window: the next one's starts at itself
        # (from the hit before it, the window held a hit it had left, and the snippet raised
        # ValueError: a query word of 800 characters twice in a line, or one of 6 under a tool's
        # character budget of 5)
        b = max(b, a)
        while b < len(hits) and hits[b][1] - start <= limit:
            counts[hits[b][2]] = counts.get(hits[b][2], 0) + 1
            b += 1
        if len(counts) > most:
            best, most, last = a, len(counts), b - 1
        if b > a:
            counts[hits[a][2]] -= 1
            if not counts[hits[a][2]]:
                del counts[hits[a][2]]
    if most == head:
        return text
    first, end = hits[best][0], max(e for _, e, _ in hits[best:last + 1])
    start = max(0, min(first - (limit - (end - first)) // 2, len(text) - limit))  # the hits centred
    space = text.find(" ", start, first)
    if 0 <= space < start + 40:  # begin with a whole word
        start = space + 1
    elif start:  # or at least a whole character
        start = character_cut(text, start)
    return text[start:]


def _focused(text: str, limit: int, needles: list[tuple[str, ...]]) -> str:
    """The lines of ``text`` a snippet of ``limit`` characters shows: from the first line on,
    unless a later run of whole lines within ``limit`` holds more of the query's terms
    (``needles``: each counted once, as a word or its stem); then the earliest such run."""
    lines = text.split("\n")
    found = _terms_per_line(text, lines, needles)
    if not any(found):
        return text

    # a window of whole lines slid down the chunk (each line in and out once: a chunk of
    # thousands of short lines under a large chunking.tokens costs no more than its length)
    counts = [0] * len(needles)  # how many lines of the window hold each term
    held, size, end = 0, -1, 0  # terms held, the window's characters, its end (exclusive)
    best, most, stop = 0, -1, 1
    for first in range(len(lines)):
        if end < first:  # the window was empty: a line longer than the limit
            end, size = first, -1
        elif first:  # line first-1 leaves the window
            size -= len(lines[first - 1]) + 1
            for i in found[first - 1]:
                counts[i] -= 1
                held -= counts[i] == 0
        while end < len(lines) and size + len(lines[end]) + 1 <= limit:
            size += len(lines[end]) + 1
            for i in found[end]:
                held += counts[i] == 0
                counts[i] += 1
            end += 1
        if (first == 0 or found[first]) and held > most:  # a run worth more starts on a line holding a term
            best, most, stop = first, held, max(end, first + 1)
    end = stop
    if best == 0:
        return text
    size = sum(len(line) + 1 for line in lines[best:end]) - 1
    while best > 0 and size + len(lines[best - 1]) + 1 <= limit:  # room left: the lines above it
        best -= 1
        size += len(lines[best]) + 1
    return "\n".join(lines[best:end])


def _terms_per_line(text: str, lines: list[str], needles: list[tuple[str, ...]]) -> list[set[int]]:
    """Which query terms (indexes into ``needles``) each line of ``text`` holds: each form is
    looked for once in the whole text (a snippet is cut for every result of every search)."""
    found: list[set[int]] = [set() for _ in lines]
    low = match_form(text)
    if len(low) != len(text):  # matching changed the length (a rare letter, NFD): line by line
        for n, line in enumerate(lines):
            low_line = match_form(line)
            found[n] = {i for i, forms in enumerate(needles) if any(f in low_line for f in forms)}
        return found
    starts, at = [0], 0
    for line in lines[:-1]:
        at += len(line) + 1
        starts.append(at)
    for i, forms in enumerate(needles):
        for form in forms:
            at = low.find(form)
            while at >= 0:
                found[bisect.bisect_right(starts, at) - 1].add(i)
                at = low.find(form, at + 1)
    return found


_embed_pool: ThreadPoolExecutor | None = None
_daemon_pool: _DaemonPool | None = None


class _DaemonPool:
    """A few daemon threads running query embeddings of providers that are not a model of this
    process (a host's own ``provider=``, a remote API).  Why: a ThreadPoolExecutor's workers are
    joined when the interpreter exits, so a host's provider that never answered (the search had
    long given up on it and answered with keywords) kept the process from exiting until it did.
    A model running in this process stays on the executor: a daemon thread still inside it when
    the interpreter finished aborted the process."""

    def __init__(self, workers: int, name: str) -> None:
        import queue
        import threading

        self._jobs: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...], dict[str, Any]]] = \
            queue.SimpleQueue()
        self._workers, self._name, self._started = workers, name, 0
        self._lock = threading.Lock()

    def submit(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Future[Any]:
        import threading
        from concurrent.futures import Future

        future: Future[Any] = Future()
        self._jobs.put((future, fn, args, kwargs))
        with self._lock:
            if self._started < self._workers:
                threading.Thread(target=self._work, name=f"{self._name}_{self._started}", daemon=True).start()
                self._started += 1
        return future

    def _work(self) -> None:
        while True:
            future, fn, args, kwargs = self._jobs.get()
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args, **kwargs))
                except BaseException as exc:
                    future.set_exception(exc)
            del future, fn, args, kwargs  # an idle thread holds no query's vector


def _forget_embed_pool() -> None:
    """In a forked child: the pool's threads were the parent's, so work queued on it never ran
    (every hybrid search waited out its budget, then answered with keywords only)."""
    global _embed_pool, _daemon_pool
    _embed_pool = None
    _daemon_pool = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_embed_pool)


class _InlineEmbedding:
    """A query embedding computed on the caller's thread when the search asks for it.

    For a model already loaded in this process the embedding is CPU work competing with the
    keyword search for the same cores: overlapping them on a pool thread bought nothing on two
    cores and cost the thread hop and GIL hand-offs (a warm hybrid search was ~1 ms slower and
    used more CPU than embedding right after the keyword pass)."""

    def __init__(self, provider: EmbeddingProvider, query: str) -> None:
        self._provider, self._query = provider, query

    def result(self, timeout: float | None = None) -> list[float]:
        return self._provider.embed_query(self._query)


def _embeds_in_process(provider: EmbeddingProvider) -> bool:
    """True when the provider runs a model already loaded here (no network, no load to wait for)."""
    return bool(getattr(provider, "loaded_in_process", False))


def submit_query_embedding(provider: EmbeddingProvider, query: str,
                           budget_s: float | None = None) -> Future[list[float]] | _InlineEmbedding:
    """Start embedding the query on the pool, so the keyword search runs while the model does
    (a remote call, or a model still loading, which the search's time budget may give up on);
    a model already loaded in process embeds on the caller's thread when asked.

    A provider whose ``embed_query`` takes a ``timeout`` (the remote ones) is given ``budget_s``:
    a call the search stopped waiting for must not go on, retries and all, for minutes (the pool
    thread held a one-shot CLI search open until it ended, long after the answer was printed)."""
    if _embeds_in_process(provider):
        return _InlineEmbedding(provider, query)
    global _embed_pool, _daemon_pool
    pool: ThreadPoolExecutor | _DaemonPool
    if hasattr(provider, "loaded_in_process"):  # a model of this process (still loading): see _DaemonPool
        from concurrent.futures import ThreadPoolExecutor  # not needed by a keyword search

        if _embed_pool is None:
            _embed_pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="memdir-embed")
        pool = _embed_pool
    else:
        if _daemon_pool is None:
            _daemon_pool = _DaemonPool(2, "memdir-embed-call")
        pool = _daemon_pool
    if budget_s is not None and _takes_timeout(provider):
        return pool.submit(provider.embed_query, query, timeout=max(budget_s, 0.001))
    return pool.submit(provider.embed_query, query)


def _takes_timeout(provider: EmbeddingProvider) -> bool:
    """Whether ``provider.embed_query`` accepts ``timeout=`` (seconds for the whole call)."""
    import inspect

    try:
        return "timeout" in inspect.signature(provider.embed_query).parameters
    except (TypeError, ValueError):
        return False


def embed_query_with_budget(provider: EmbeddingProvider, query: str, budget_s: float) -> list[float]:
    """Embed the query, giving up after ``budget_s`` (a remote call is bounded by it too)."""
    return submit_query_embedding(provider, query, budget_s).result(timeout=budget_s)


def covers_all_keywords(text: str, keywords: list[str]) -> bool:
    low = match_form(text)  # as the index matched (a note's "İstanbul" or NFD "café" covers "istanbul", "cafe")
    return bool(keywords) and all(match_form(k) in low for k in keywords)


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
    timezone: str | None = None,
    tuning: Tuning | None = None,
    sessions_dir: Path | None = None,
    vector_dims: int | None = None,
) -> SearchResponse:
    """``vector_dims``: the width of the index's vectors; a query vector of another width (the
    provider's model changed behind its name) is not compared with them: keywords answer."""
    tune = tuning or ranking.TUNING
    cleaned = normalise_query(query or "")
    qcfg = cfg.query
    hybrid = qcfg.hybrid
    max_n = qcfg.max_results if max_results is None else max(0, int(max_results))
    explicit_floor = min_score is not None
    floor = qcfg.min_score if min_score is None else min(1.0, max(0.0, float(min_score)))
    candidates = candidate_count(max_n, hybrid.candidate_multiplier)
    response = SearchResponse([], "hybrid" if provider else "fts-only", *provider_label)
    if not cleaned or max_n <= 0:
        return response
    timings = response.timings_ms
    now = now_ms if now_ms is not None else int(time.time() * 1000)
    # The query embedding (ONNX or a remote call, both outside the GIL) runs while the keyword
    # search does: a hybrid search then waits for the longer of the two, not for their sum.
    embedding: Future[list[float]] | _InlineEmbedding | None = None
    if provider is not None:
        t_submit = time.perf_counter()
        # (the model reads the question's letters as typed, as it read the notes': not folded)
        as_typed = cleaned if cleaned.isascii() else normalise_query(query or "", fold=False)
        embedding = submit_query_embedding(provider, as_typed, qcfg.embed_timeout_ms / 1000)

    periods: list[Period] = []
    if tune.dates:
        def user_today() -> date:  # called only for a question whose period needs it
            return datetime.fromtimestamp(now / 1000, resolve_timezone(timezone)[0]).date()

        periods = query_periods(cleaned, user_today)

    t0 = time.perf_counter()
    keyword_hits: list[Hit] = []
    terms = keyword_terms(cleaned)
    use_keywords = bool(terms) and store.fts_available and (hybrid.enabled or provider is None)
    # The keyword index could not answer (no FTS5, or it failed): vectors alone rank, as in R§7.8
    # [v4.12], not a fusion whose text side is 0 for every note (a perfect match scored 0.7).
    keywords_down = not store.fts_available
    if use_keywords:
        try:
            keyword_hits = store.keyword_search(terms, candidates)
        except Exception as exc:  # never let a query reach the user as an FTS error
            response.warnings.append(f"keyword search failed: {exc}")
            use_keywords, keywords_down = False, True
    elif not store.fts_available:
        response.warnings.append(store.fts_error or "FTS unavailable")
    if use_keywords and getattr(store, "fts_tokenizer", None) == "trigram":
        _warn_short_terms(terms, response.warnings)
    timings["keyword"] = (time.perf_counter() - t0) * 1000

    vector_hits: list[Hit] = []
    qvec: list[float] | None = None
    if embedding is not None:
        asked = "hybrid" if hybrid.enabled else "vector"
        t1 = time.perf_counter()
        try:
            # the budget counts from the embedding's start; "embed" is what the search waited for it
            qvec = embedding.result(timeout=max(0.0, qcfg.embed_timeout_ms / 1000 - (t1 - t_submit)))
            timings["embed"] = (time.perf_counter() - t1) * 1000
            if is_zero(qvec):
                qvec = None
            elif vector_dims and len(qvec) != vector_dims:
                response.mode = "fts-only"
                response.fallback = {"from": asked, "reason": (
                    f"the query vector has {len(qvec)} dimensions, the index's vectors {vector_dims} (did the "
                    "model change behind its name?); keywords only until the index is rebuilt")}
                qvec = None
            else:
                t2 = time.perf_counter()
                vector_hits = store.vector_search(qvec, candidates)
                timings["vector"] = (time.perf_counter() - t2) * 1000
        except TimeoutError:  # concurrent.futures' own since Python 3.11
            response.mode = "fts-only"
            response.fallback = {"from": asked, "reason": f"query embedding exceeded {qcfg.embed_timeout_ms} ms"}
        except Exception as exc:
            response.mode = "fts-only"
            response.fallback = {"from": asked, "reason": f"query embedding failed: {one_line(exc)}"}
        if response.mode == "fts-only" and not use_keywords:
            # a vector-only search whose query could not be embedded answers from keywords (and
            # says so) rather than with nothing
            t4 = time.perf_counter()
            use_keywords = bool(terms) and store.fts_available
            if use_keywords:
                try:
                    keyword_hits = store.keyword_search(terms, candidates)
                except Exception as exc:
                    response.warnings.append(f"keyword search failed: {exc}")
                    use_keywords = False
            timings["keyword"] += (time.perf_counter() - t4) * 1000

    keyword_only = provider is None or response.mode == "fts-only"
    vector_only = not keyword_only and (not hybrid.enabled or keywords_down)
    if keyword_only:
        weights = (0.0, 1.0)
        qvec = None
    elif vector_only:
        weights = (1.0, 0.0)
        keyword_hits, use_keywords = [], False
    else:
        weights = hybrid_weights(hybrid, provider_label[1])

    t3 = time.perf_counter()
    pool = _pool(vector_hits, keyword_hits)
    pooled: list[Period] = []
    titled: list[str] = []
    try:
        if periods and tune.period_pool:
            pooled = _add_period_chunks(store, pool, periods, candidates)
        if use_keywords:
            titled = _add_titled_chunks(store, pool, terms, candidates)
        _complete(store, pool, terms if use_keywords else None, qvec, complete_all=tune.complete)
    except Exception as exc:  # a lookup that fails leaves the scores the searches gave
        response.warnings.append(f"score lookup failed: {exc}")
    if titled:
        # a note named by the question (or whose name holds all of it) matches it as well as the
        # best keyword match does: its name is its title in Obsidian, Logseq, Foam and Dendron
        best = max(TITLE_TEXT_SCORE, *(c.text_score for c in pool.values()))
        for cid in titled:
            pool[cid].text_score = best
            pool[cid].extra["name"] = True  # (explain: matched by its name)
    cands = list(pool.values())
    if tune.fusion == "rrf" and not keyword_only and not vector_only:
        fused = rrf_scores(cands, tune.rrf_k)
        for c in cands:
            c.score = fused[c.id]
    else:
        # keyword-only scores stay r/(1+r): the floor and minScore keep their meaning there
        text = _text_signal(cands, tune.text_norm if not keyword_only else "ratio")
        for c in cands:
            c.text_fused = text[c.id]
            c.score = weights[0] * c.vector_score + weights[1] * c.text_fused
    if periods:
        named, pooled_named = Periods(periods), Periods(pooled)
        for c in cands:
            c.in_period = named.covers(c.date_start, c.date_end)
            if c.in_period:
                c.score *= 1.0 + tune.date_boost
                c.in_pooled_period = pooled_named.covers(c.date_start, c.date_end)
    timings["merge"] = (time.perf_counter() - t3) * 1000

    if hybrid.temporal_decay.enabled:
        # a chunk of the period the question names is not aged: asked about March of last year, its
        # notes scored 0.004 (×2 for the period, ×0.002 for 270 days) under any recent note
        apply_decay([c for c in cands if not c.in_period], hybrid.temporal_decay.half_life_days, now,
                    lambda p, s: memory_timestamp(p, s, workspace, source_timestamp))
    # equal scores (the same line in two notes) in path order, as OpenClaw sorts: the pool's order
    # is the index's row order, which an edit or a rebuild changes
    cands.sort(key=lambda c: (-c.score, c.source, c.path, c.start_line))
    for i, c in enumerate(cands):
        c.rank_before_mmr = i
    if hybrid.mmr.enabled:
        cands = mmr_rerank(cands, hybrid.mmr.lambda_)
        # MMR puts a diverse candidate under the floor before better ones; widened first, its lines
        # hid a returned result of the same note it was never returned in place of: those that pass
        # the floor are widened (and returned) first, each in MMR's order
        cands = [c for c in cands if c.score >= floor] + [c for c in cands if c.score < floor]

    # Widening reads notes, so a candidate is widened only when the choice below reaches it (in
    # rank order, each against the ones before it): none after the last one that can be returned.
    shown_so_far = _Shown()
    shown_so_far.mixed = sessions_dir is not None and len({c.source for c in cands}) > 1

    def widen(items: Iterable[Candidate]) -> Iterator[tuple[Candidate, bool]]:
        if tune.expand_chars <= 0:
            return ((c, True) for c in items)
        return _widen(items, tune.expand_chars, workspace, disjoint=tune.expand_disjoint,
                      sessions_dir=sessions_dir, state=shown_so_far)

    ranked = _Replayable(widen(cands))
    chosen: list[Candidate] = []
    above = sum(1 for c in cands if c.score >= floor)  # widening never changes a score
    for c, shown in ranked if above else ():
        if c.score >= floor:
            above -= 1
            if shown:
                chosen.append(c)
        if not above or len(chosen) == max_n:
            break
    if len(chosen) < max_n and not explicit_floor:
        _rescue([c for c in cands if c.score < floor], widen, chosen, max_n, cleaned, keyword_only, cands, weights)
    chosen = chosen[:max_n]
    if tune.fresh_slots > 0 and len(chosen) == max_n:
        chosen = _fresh_files(chosen, [c for c, shown in ranked if shown], tune.fresh_slots,
                              floor if explicit_floor else 0.0)
    info = {"weights": weights, "periods": periods, "floor": floor, "fusion": tune.fusion,
            "textNorm": tune.text_norm, "needles": _needles(terms) if terms else None}
    response.results = [_result(c, explain, info) for c in chosen]
    return response


def _warn_short_terms(terms: list[str], warnings: list[str]) -> None:
    """Say which words a ``trigram`` keyword index cannot match (``store.fts.tokenizer``): a
    trigram needs three characters, so "AI", "v2" or the Korean "에러" silently matched nothing
    (Han and Kana are spaced out in the index, and match)."""
    from memdir.textutil import has_han_or_kana

    short = [t for t in terms if len(t.replace(" ", "")) < 3 and not has_han_or_kana(t)]
    if short:
        warnings.append(f"the trigram keyword index cannot match words shorter than 3 characters "
                        f"({', '.join(short[:5])}); store.fts.tokenizer = \"unicode61\" (the default) can")


def hybrid_weights(hybrid: Any, model: str | None) -> tuple[float, float]:
    """Configured ``(vectorWeight, textWeight)``, else the default measured for this model."""
    vw, tw = hybrid.vector_weight, hybrid.text_weight
    if vw is None or tw is None:
        return model_weights(model)
    return float(vw), float(tw)


def _pool(vector: list[Hit], keyword: list[Hit]) -> dict[str, Candidate]:
    """The union of both signals' candidates by chunk id; a keyword snippet replaces a vector one."""
    pool: dict[str, Candidate] = {}
    for h in vector:
        c = pool.setdefault(h.id, Candidate.from_hit(h))
        c.vector_score, c.in_vector = h.score, True
    for h in keyword:
        c = pool.get(h.id)  # most are vector hits too: no candidate made to be thrown away
        if c is None:
            c = pool[h.id] = Candidate.from_hit(h)
        c.text_score, c.in_keyword = h.score, True
        if h.text:
            c.snippet = h.text
    return pool


#: Years before its latest past one an any-year period ("on March 5", "in June") is looked up in,
#: and how many such lookups a search makes at most.
ANY_YEAR_POOL_YEARS = 10
ANY_YEAR_LOOKUPS = 60


def _add_period_chunks(store: Store, pool: dict[str, Candidate], periods: list[Period], limit: int) -> list[Period]:
    """Every chunk of a named period joins the pool, if the period is small enough to hold at most
    ``limit`` chunks (a period as wide as "2023" would say nothing about which ones matter); the
    periods that did.  A period named twice is looked up once (a question repeating "last week"
    10,000 times made 10,000 lookups).  A period of any year ("on January 8th", "in March") is
    looked up in its latest past year and the :data:`ANY_YEAR_POOL_YEARS` before it, all its
    chunks together held to ``limit``: it was never looked up, so "what did I do on January
    8th?", which shares no word with that day's log, found nothing by keywords, where "on 8
    January 2025" found it."""
    pooled = []
    distinct: dict[tuple[date, date, bool], Period] = {}
    for p in periods:
        distinct.setdefault((p.start, p.end, p.any_year), p)
    lookups = 0
    for p in distinct.values():
        found: dict[str, Hit] = {}
        for back in range(ANY_YEAR_POOL_YEARS + 1 if p.any_year else 1):
            year = p.years_earlier(back) if back else p
            if year is None:
                continue
            if p.any_year and (lookups := lookups + 1) > ANY_YEAR_LOOKUPS:
                break  # a question naming hundreds of days without a year: this one is not pooled
            start, end = year.iso(GRACE_DAYS)
            found.update((h.id, h) for h in store.chunks_in_period(start, end, limit + 1))
            if len(found) > limit:
                break
        if len(found) <= limit and not (p.any_year and lookups > ANY_YEAR_LOOKUPS):
            pooled.append(p)
            for h in found.values():
                pool.setdefault(h.id, Candidate.from_hit(h))
    return pooled


#: The keyword score of a note found by its name when no note matched the question's words
#: better: a strong match, returned in a spare slot when its text is far from the question's
#: meaning (hybrid search scored ``Meeting with Carol.md`` 0.3 for "Carol", under the floor).
TITLE_TEXT_SCORE = RESCUE_TEXT_SCORE
#: A date that opens a note's name (a daily log, the session hook's ``2026-01-12-api-design.md``,
#: Logseq's ``2026_01_12``), and the 32-hex page id Notion's export ends each name with.
_NAME_DATE: Any = LazyPattern(r"^\d{4}[-_.]\d{2}[-_.]\d{2}(?:[-_. T]+|$)")
_NOTION_ID: Any = LazyPattern(r"\s+[0-9a-f]{32}$")
_ORDINAL: Any = LazyPattern(r"\d+(?:st|nd|rd|th)")
_TITLES: dict[str, frozenset[str]] = {}


def _word(word: str) -> str:
    """A word of a title or a question as they are compared: its stem, without accents (a note
    named ``Café.md`` is the question's "cafe")."""
    from memdir.textutil import stem

    form = match_form(word)
    return stem(form) or form


def title_words(path: str) -> frozenset[str]:
    """The words (stemmed, lower case) of the title a note's file name gives it: ``pages/Meeting
    with Carol.md`` {meet, carol}, Dendron's ``proj.memdir.design.md``, Logseq's ``Infra___K8s.md``
    and ``Infra%2FK8s.md``; none for ``MEMORY.md`` or a name that is a date (a daily log)."""
    words = _TITLES.get(path)
    if words is not None:
        return words
    from urllib.parse import unquote

    from memdir.dates import CALENDAR_WORDS, path_date

    name = path.rsplit("/", 1)[-1]
    title = "" if path in ("MEMORY.md", "memory.md") or not name.endswith(".md") else unquote(name[:-3])
    title = _NAME_DATE.sub("", _NOTION_ID.sub("", title)).replace("_", " ")
    # a dated name's weekday and month are its date's (every "2026-11-30 Monday.md" was a page
    # named "Monday"), as an ordinal is ("Nov 30th, 2026.md")
    calendar = CALENDAR_WORDS if title and path_date(path) is not None else frozenset()
    words = frozenset(_word(w) for term in (keyword_terms(title) if title else ()) for w in term.split()
                      if not (w.isdigit() or w in calendar or _ORDINAL.fullmatch(w)))
    if len(_TITLES) > 200_000:
        _TITLES.clear()
    _TITLES[path] = words
    return words


#: ``(the file rows it was made of, {title word: [path, ...]})``, replaced whole (threads search at once).
_TITLE_INDEX: list[tuple[Any, dict[str, list[str]]]] = [(None, {})]


def _title_index(rows: Any) -> dict[str, list[str]]:
    """The memory notes by each word of their titles, remade when the files' rows are not the
    very ones it was made of (SQLite's are kept while the index is unchanged): a search at 10,000
    notes went through every name (7 ms)."""
    made_of, index = _TITLE_INDEX[0]
    if made_of is not rows:
        index = {}
        for path, source in rows:
            if source == "memory":
                for w in title_words(path):
                    index.setdefault(w, []).append(path)
        _TITLE_INDEX[0] = (rows, index)
    return index


def _add_titled_chunks(store: Store, pool: dict[str, Candidate], terms: list[str], limit: int) -> list[str]:
    """The first chunk of each note whose name is named by the question (all its title's words are
    among the question's) or holds the whole question, added to the pool; their ids.

    Why: a page's title in Obsidian, Logseq, Foam and Dendron is its file name, which its text
    rarely repeats: "Carol" or "meeting with Carol" found nothing of ``Meeting with Carol.md``,
    "sourdough" nothing of Logseq's ``pages/Sourdough.md``.  When more than ``limit`` names
    hold the whole question (a word every page is named with), those say nothing and are left."""
    asked = frozenset(_word(w) for term in terms for w in term.split())
    if not asked:
        return []
    named: list[str] = []
    within: list[str] = []
    index = _title_index(store.file_rows())
    for path in {p for w in asked for p in index.get(w, ())}:
        words = title_words(path)
        if words <= asked:
            named.append(path)
        elif asked <= words:
            within.append(path)
        if len(named) > limit and len(within) > limit:
            break
    paths = sorted([*(named if len(named) <= limit else ()), *(within if len(within) <= limit else ())])
    ids = []
    for h in store.first_chunks(paths) if paths else ():
        pool.setdefault(h.id, Candidate.from_hit(h))
        ids.append(h.id)
    return ids


def _complete(store: Store, pool: dict[str, Candidate], terms: list[str] | None, qvec: list[float] | None,
              *, complete_all: bool) -> None:
    """Give candidates the signal they are missing: their real BM25 and cosine (cheap lookups by id)."""
    fresh = [c for c in pool.values() if not c.in_vector and not c.in_keyword]
    need_text = [c.id for c in pool.values() if not c.in_keyword and (complete_all or c in fresh)]
    need_vec = [c.id for c in pool.values() if not c.in_vector and (complete_all or c in fresh)]
    if terms and need_text:
        for cid, score in store.keyword_scores(terms, need_text).items():
            pool[cid].text_score = score
    if qvec is not None and need_vec:
        for cid, score in store.vector_scores(qvec, need_vec).items():
            pool[cid].vector_score = score


def _text_signal(cands: list[Candidate], norm: str) -> dict[str, float]:
    """The keyword figure fused per candidate: ``r/(1+r)`` as stored, or BM25 over the pool's best."""
    if norm != "max":
        return {c.id: c.text_score for c in cands}
    raw = {c.id: (c.text_score / (1.0 - c.text_score) if c.text_score < 1.0 else 1e9) for c in cands}
    top = max(raw.values(), default=0.0)
    return {cid: (r / top if top > 0 else 0.0) for cid, r in raw.items()}


class _Shown:
    """What :func:`_widen` has shown so far (line spans per file) and the line widths it read:
    shared by the widenings of one search, so a rescued result is widened against the results
    chosen before it."""

    def __init__(self) -> None:
        self.costs: dict[str, Sequence[int]] = {}
        self.messages: dict[str, tuple[Sequence[int], Sequence[int]]] = {}
        self.spans: dict[tuple[str, str], list[tuple[int, int]]] = {}
        # the text shown so far, folded (:func:`_fold`), by source: with transcripts searched beside
        # notes, a result repeating only what a better one shows is not shown (:func:`_repeats`)
        self.texts: dict[str, list[str]] = {"memory": [], "sessions": []}
        #: candidates of both sources are ranked: only then is the text shown kept and compared (a
        #: transcript's is read from its file)
        self.mixed = False


def _widen(cands: Iterable[Candidate], chars: int, workspace: Path, *, disjoint: bool,
           sessions_dir: Path | None = None, state: _Shown | None = None) -> Iterator[tuple[Candidate, bool]]:
    """Each candidate in turn with whether it is still shown: a memory-file candidate widened to
    about ``chars`` characters of whole lines around its chunk, so small chunks rank precisely
    but a result still holds its context; a transcript's (in ``sessions_dir``) likewise over
    whole neighbouring messages of its own file; ``False`` for one whose own lines a better
    (widened) candidate already shows.  A generator: what is never asked for is never read.

    Every candidate asked for counts as shown from then on: ask only for those to be returned."""
    from memdir.note_lines import NOTE_LINES, TRANSCRIPT_LINES

    state = state or _Shown()
    costs, messages, shown = state.costs, state.messages, state.spans
    root = str(workspace)
    for c in cands:
        if state.mixed and _repeats(c, state.texts):
            yield c, False  # the same turns, shown by a better result of the other source
            continue
        if c.source == "sessions" and sessions_dir is not None and INDEXING["widen_sessions"]:
            if c.path not in messages:
                messages[c.path] = TRANSCRIPT_LINES.messages(os.path.join(sessions_dir, os.path.basename(c.path)))
            if messages[c.path][1]:  # its spans count messages, not JSONL lines: a key of their own
                kept = _widen_messages(c, *messages[c.path], chars, shown.setdefault(("messages", c.path), []),
                                       disjoint=disjoint)
                if kept and state.mixed:
                    _remember_text(c, state.texts, workspace, sessions_dir)
                yield c, kept
                continue
        spans = shown.setdefault((c.source, c.path), [])
        own = range(c.start_line, c.end_line + 1)
        seen = sum(1 for n in own if _covered(n, spans)) if spans else 0
        if seen == len(own):
            yield c, False  # shown by a better result already
            continue
        curated = c.source == "memory" and _by_sections(c.path)
        if c.source == "memory" and (not curated or INDEXING["widen_sections"]):
            if c.path not in costs:
                costs[c.path] = NOTE_LINES.widths(os.path.join(root, c.path))
            taken = spans if disjoint else []
            if disjoint and seen:  # a chunk's carried overlap is shown already: keep its new lines
                c.start_line, c.end_line = _trim_shown(c, c.start_line, c.end_line, spans)
            if curated:  # a section is a topic: its result grows within it, never into the next one
                top, bottom = NOTE_LINES.section(os.path.join(root, c.path), c.start_line, c.end_line)
                taken = [*taken, (top - 1, top - 1), (bottom + 1, bottom + 1)]
            c.start_line, c.end_line = _grow(costs[c.path], c.start_line, c.end_line, chars, taken)
        spans.append((c.start_line, c.end_line))
        if state.mixed and sessions_dir is not None:
            _remember_text(c, state.texts, workspace, sessions_dir)
        yield c, True


#: A list item's marker and a speaker's or role's label before a line's text ("- Caroline: ",
#: "user: ", "User: "): a turn a note quotes and the transcript's message of it differ only there.
_LABEL = re.compile(r"^(?:(?:[-*+]|\d+[.)])\s+)?(?:\*{0,2}[^:*\n]{1,40}\*{0,2}:\s+)?")


_HEADING_LINE = re.compile(r"^\s{0,3}#{1,6}\s")


def _fold(text: str) -> str:
    """``text`` compared as a reader would: case and runs of blanks ignored."""
    return " ".join(text.split()).casefold()


def _repeats(c: Candidate, texts: dict[str, list[str]]) -> bool:
    """Whether every line of ``c``'s chunk (a transcript's message, a note's line but its headings,
    each without its list marker and speaker label) is in what a better result of the other source
    shows.

    With the ``sessions`` source on, a conversation is often both a transcript and a note (the
    session hook's ``user: …`` lines, a chat written down in a daily log): the two copies of the
    same turns took two of the six places, each time the turns matched.  Within one source nothing
    changes (a note's own lines are handled by the spans of :func:`_widen`)."""
    other = texts["memory" if c.source == "sessions" else "sessions"]
    if not other:
        return False
    units = [_fold(_LABEL.sub("", line, count=1)) for line in c.snippet.split("\n")
             if c.source == "sessions" or not _HEADING_LINE.match(line)]  # a heading names, says nothing
    units = [u for u in units if u]
    return bool(units) and all(any(u in shown for shown in other) for u in units)


def _remember_text(c: Candidate, texts: dict[str, list[str]], workspace: Path, sessions_dir: Path) -> None:
    """Keep the folded text of the lines ``c`` shows (its widened range), for :func:`_repeats`."""
    if c.source == "sessions":
        from memdir.sessions.readable import read_session_lines

        try:
            text = read_session_lines(c.path, sessions_dir, c.start_line, c.end_line - c.start_line + 1)
        except Exception:  # (an unreadable transcript: its chunk's own text)
            text = c.snippet
        texts["sessions"].append(_fold(text))
    elif c.source == "memory":
        from memdir.note_lines import _read_text

        whole = _read_text(os.path.join(str(workspace), c.path))
        lines = whole.split("\n")[c.start_line - 1:c.end_line] if whole is not None else [c.snippet]
        texts["memory"].append(_fold("\n".join(lines)))


def _widen_messages(c: Candidate, widths: Sequence[int], jsonl: Sequence[int], chars: int,
                    spans: list[tuple[int, int]], *, disjoint: bool) -> bool:
    """Widen a transcript candidate over whole messages (``widths[i]``: the indexed text of the
    message on JSONL line ``jsonl[i]``), as :func:`_widen` does a note's lines; ``spans`` are the
    messages (1-based numbers) better results of the file show.  Its range stays on message
    lines of the file, so it cites what it shows; ``False`` if those results show it all."""
    lo = bisect.bisect_left(jsonl, c.start_line) + 1
    hi = bisect.bisect_right(jsonl, c.end_line)
    if lo > hi:
        return True  # no message of the file lies there now (rewritten since indexed): as indexed
    own = range(lo, hi + 1)
    seen = sum(1 for n in own if _covered(n, spans)) if spans else 0
    if seen == len(own):
        return False
    if disjoint and seen:
        lo, hi = _trim_shown(c, lo, hi, spans)
    lo, hi = _grow(widths, lo, hi, chars, spans if disjoint else [])
    spans.append((lo, hi))
    c.start_line, c.end_line = jsonl[lo - 1], jsonl[hi - 1]
    return True


def _trim_shown(c: Candidate, lo: int, hi: int, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """``lo..hi`` (the candidate's lines, one per snippet line) without the first and last ones
    ``spans`` show already, and its snippet without them: a chunk's carried overlap that a
    better result shows is not shown twice."""
    new_lo, new_hi = _trim(lo, hi, spans)
    parts = c.snippet.split("\n")
    if len(parts) == hi - lo + 1:
        c.snippet = "\n".join(parts[new_lo - lo:len(parts) - (hi - new_hi)])
    return new_lo, new_hi


class _Replayable(Generic[T]):
    """An iterator's items produced on demand and kept, so each pass reads them from the start."""

    def __init__(self, items: Iterator[T]):
        self._items = items
        self._got: list[T] = []

    def __iter__(self) -> Iterator[T]:
        i = 0
        while True:
            if i == len(self._got):
                try:
                    self._got.append(next(self._items))
                except StopIteration:
                    return
            yield self._got[i]
            i += 1


def _covered(line: int, spans: list[tuple[int, int]]) -> bool:
    """Whether ``line`` lies in one of the ``(first, last)`` line ranges."""
    return any(a <= line <= b for a, b in spans)


def _by_sections(path: str) -> bool:
    """A curated (undated) memory file is chunked by its sections (:mod:`memdir.sync`): its result
    is widened within its section, not into the neighbouring ones."""
    return INDEXING["sections"] and file_date(path) is None


def _trim(lo: int, hi: int, spans: list[tuple[int, int]]) -> tuple[int, int]:
    """``lo..hi`` without the lines at either end that ``spans`` already cover."""
    moved = True
    while moved and lo <= hi:
        moved = False
        for a, b in spans:
            if a <= lo <= b:
                lo, moved = b + 1, True
            if a <= hi <= b:
                hi, moved = a - 1, True
    return lo, hi


def _grow(costs: Sequence[int], lo: int, hi: int, chars: int,
          shown: Sequence[tuple[int, int]] = ()) -> tuple[int, int]:
    """Lines ``lo..hi`` (1-based) grown by whole lines, alternately below and above, while the range
    stays within ``chars`` characters and off the ``(first, last)`` line ranges ``shown`` already;
    ``costs`` holds each line's weighted width plus its newline (:mod:`memdir.note_lines`).

    A side that cannot take its next line never can later (the size only grows, shown lines stay
    shown): the other side then grows alone."""
    total = len(costs)
    if hi > total:
        return lo, hi
    # the lines nearest the range that a better result shows: growth stops short of them
    top = 1 + max((min(b, lo - 1) for a, b in shown if a <= lo - 1), default=0)
    bottom = min((max(a, hi + 1) for a, b in shown if b >= hi + 1), default=total + 1) - 1
    size = sum(costs[lo - 1:hi])
    below = True
    while True:
        down = hi < bottom and size + costs[hi] <= chars
        up = lo > top and size + costs[lo - 2] <= chars
        if down and (below or not up):
            hi += 1
            size += costs[hi - 1]
        elif up:
            lo -= 1
            size += costs[lo - 1]
        else:
            return lo, hi
        below = not below


def _fresh_files(chosen: list[Candidate], cands: list[Candidate], slots: int, floor: float) -> list[Candidate]:
    """Give the last ``slots`` places to the best candidates from files no kept result comes from."""
    keep = chosen[: max(0, len(chosen) - slots)]
    seen = {(c.source, c.path) for c in keep}
    for c in cands:
        if len(keep) >= len(chosen):
            break
        if c in keep or (c.source, c.path) in seen or c.score <= 0 or c.score < floor:
            continue
        keep.append(c)
        seen.add((c.source, c.path))
    for c in chosen:
        if len(keep) >= len(chosen):
            break
        if c not in keep:
            keep.append(c)
    return keep


def _rescue(cands: Sequence[Candidate], widen: Callable[[Iterable[Candidate]], Iterator[tuple[Candidate, bool]]],
            chosen: list[Candidate], max_n: int, query: str, keyword_only: bool,
            pool: Sequence[Candidate], weights: tuple[float, float] = (1.0, 1.0)) -> None:
    """Fill spare slots below the configured floor with strong single-signal hits (see module doc).

    ``cands`` are the candidates under the floor in rank order; only those that qualify are
    widened (``widen``), each against the results before it: one that does not qualify, widened
    over a better one's lines, hid it though it was never returned itself.  ``pool`` is all of
    them, checked first so that a search no candidate can be rescued from reads no note.
    A signal weighted 0 (``vectorWeight = 0``: keywords alone rank) rescues nothing: notes it alone
    found came back at a score of 0."""
    if len(chosen) >= max_n:
        return
    taken = {c.id for c in chosen}
    by_text, by_vector = weights[1] > 0, weights[0] > 0 and not keyword_only
    if not any(c.id not in taken and ((c.text_score > 0 and by_text) or c.in_pooled_period
                                      or (c.vector_score >= RESCUE_VECTOR_SCORE and by_vector))
               for c in pool):
        return  # nothing could qualify: walking the candidates would only widen them for nothing
    keywords = extract_keywords(query) or [query.lower()]
    reasons: dict[str, str] = {}

    def qualifying() -> Iterator[Candidate]:
        for c in cands:
            reason = _rescue_reason(c, keywords, keyword_only, by_text, by_vector, chosen)
            if reason:
                reasons[c.id] = reason
                yield c

    for c, shown in widen(qualifying()):  # stops as soon as the slots are full: a later one is never widened
        if not shown:
            continue
        c.rescued, c.rescue_reason = True, reasons[c.id]
        chosen.append(c)
        if len(chosen) >= max_n:
            return


def _rescue_reason(c: Candidate, keywords: list[str], keyword_only: bool, by_text: bool, by_vector: bool,
                   chosen: list[Candidate]) -> str | None:
    """Why ``c``, under the floor, is returned in a spare slot (see :func:`_rescue`), or ``None``."""
    if c.text_score >= RESCUE_TEXT_SCORE and by_text:
        return f"keyword score {c.text_score:.2f} >= {RESCUE_TEXT_SCORE}"
    if c.text_score > 0 and by_text and covers_all_keywords(c.snippet, keywords):
        return "contains every keyword of the query"
    if c.vector_score >= RESCUE_VECTOR_SCORE and by_vector:
        return f"cosine {c.vector_score:.2f} >= {RESCUE_VECTOR_SCORE}"
    if keyword_only and c.text_score > 0 and not chosen:
        return "best keyword match (nothing passed the floor)"
    if c.in_pooled_period:
        # "what did I do yesterday?" shares no word with yesterday's log, and a small model finds it
        # no closer than any other note: the day asked about answered nothing
        return "written in the period the question names"
    return None


def _result(c: Candidate, explain: bool, info: dict[str, Any]) -> SearchResult:
    out = None
    if explain:
        weights = info["weights"]
        out = {
            "vectorScore": round(c.vector_score, 6),
            "textScore": round(c.text_score, 6),
            "vectorWeight": round(weights[0], 6),
            "textWeight": round(weights[1], 6),
            "fusion": info["fusion"],
            "textNorm": info["textNorm"],
            "decay": round(c.decay, 6),
            "rankBeforeMmr": c.rank_before_mmr,
            "matched": [s for s, on in (("vector", c.in_vector), ("keyword", c.in_keyword),
                                        ("name", bool(c.extra.get("name")))) if on],
            "rescued": c.rescued,
            "floor": info["floor"],
        }
        if c.text_fused is not None:  # what textWeight multiplied: textScore is BM25's r/(1+r) as stored
            out["textFused"] = round(c.text_fused, 6)
        if c.rescued:
            out["rescuedBecause"] = c.rescue_reason
        if c.date_start:
            out["dates"] = c.date_start if c.date_start == c.date_end else f"{c.date_start}..{c.date_end}"
        if info["periods"]:
            out["queryPeriods"] = [p.as_dict() for p in info["periods"]]
            out["inPeriod"] = c.in_period
    return SearchResult(c.path, c.start_line, c.end_line, c.score, truncate_snippet(c.snippet, needles=info["needles"]),
                        c.source, out)
