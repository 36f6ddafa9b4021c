"""The store seam: what the sync engine and the search pipeline need from an index backend.

A store holds one agent's derived index (files, chunks, keyword index, vectors, embedding
cache) and speaks in plain rows (:class:`ChunkRow` in, :class:`Hit` out, file stats as tuples),
never in search responses or config objects.  Backends live side by side (``stores/sqlite.py``;
``stores/postgres.py`` for teams) and one conformance suite runs against each.

The contract every backend keeps:

* **Writes happen inside** :meth:`Store.transaction`: all of it commits or none of it does; a
  crash mid-transaction leaves the previous state.  Only one writer at a time per index
  (:meth:`Store.writer_lock`, which the sync engine holds for a whole sync).
* **Readers never block and never see a half-written file**: a search during a write sees the
  state before that transaction's commit.
* **A full rebuild** (:meth:`Store.rebuild`) is written into a shadow index that starts with the
  live embedding cache, and replaces the live contents in one step when the ``with`` block exits
  cleanly; if it raises, the live index is untouched and the shadow is discarded.  Searches keep
  answering from the old contents until the replacement commits.
* **Scores**: :meth:`Store.keyword_search` returns BM25-like relevance mapped into ``(0, 1)``,
  higher is better; :meth:`Store.vector_search` returns cosine similarity.  Both are ordered
  best first.  :meth:`Store.keyword_scores` / :meth:`Store.vector_scores` give the *same*
  scores for chosen chunks (0 when a chunk does not match), so the hybrid merge can score every
  candidate on both signals; they are called with a few dozen ids and must not scan the index.
* **Keyword terms** come from :func:`memdir.query.keyword_terms`: a term of several words is a
  phrase (an identifier such as ``qx 1773``).  A Latin word also matches other forms of it
  (same Snowball stem: a chunk is stemmed in its own language, :func:`memdir.textutil.stem_text`;
  a term in English and in the language the question tells, :func:`memdir.query.stemmed_terms`),
  and an exact match ranks above a stem-only one.
* **Vectors**: a chunk may hold several vectors (one per model window of its text, stored
  concatenated); its cosine is the maximum over them.
* **Connections**: a store owns its connections (SQLite: one, serialised; PostgreSQL: a pool
  shared per process) and releases them in :meth:`Store.close`.
* **Embedding cache**: keyed by (provider, model, provider key, chunk hash).  PostgreSQL shares
  one cache between every agent of a schema, so ``cache_prune`` bounds that shared cache.
* Everything in a store can be thrown away and rebuilt from the Markdown files: a store that
  finds itself damaged says so (:meth:`Store.check`, :meth:`Store.is_damage`) and
  :meth:`Store.recover` sets the damaged data aside and starts empty.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np


def lru_stamp(conn: Any) -> int:
    """The last-use time (ms) to give embedding cache entries used now (``conn``: SQLite or
    PostgreSQL): the clock's, but never before the latest one given.

    Why: entries written while the clock ran ahead (a VM resumed with a wrong date, a clock set
    right since) were stamped later than any use after it, so a prune, least recently used first,
    removed the vectors of the notes in use and kept those for good, and every rebuild embedded the
    notes again.  Two writers racing may give the same time: an order among equals.  A value no
    clock gives (past year 9999, or text in SQLite: a damaged or edited row) is left out."""
    (latest,) = conn.execute(f"SELECT MAX(updated_at) FROM embedding_cache WHERE updated_at < {_LAST_MS}").fetchone()
    now = int(time.time() * 1000)
    return latest + 1 if isinstance(latest, int) and latest >= now else now


#: 10000-01-01T00:00Z in ms: no cache entry was used later (see :func:`lru_stamp`).
_LAST_MS = 253_402_300_800_000


#: Seconds each database statement of a search waits for the server's answer before its connection
#: is closed (a frozen server or network path); more than PostgreSQL's lock wait (30 s), so a lock
#: held by another session is named as such first.
SEARCH_ANSWER_SECONDS = 45.0


class AnswerBound:
    """How long each statement of the call in progress may wait for a database server's answer.

    A server (or a proxy, a VPN) that is frozen still acknowledges packets, so neither TCP
    keepalives nor a server-side timeout end the wait: a search against it hung for ever.  The
    PostgreSQL store closes a connection whose statement outlives ``seconds`` (see
    :mod:`memdir.stores.pgconn`); once one has, the rest of the call fails at once instead of
    waiting again.  SQLite's waits are bounded by its busy timeout and ignore this.
    """

    def __init__(self, seconds: float | None):
        self.seconds = seconds
        #: The statement that went unanswered (set once one has), for the error of the next.
        self.expired: str | None = None


_ANSWER_BOUND: ContextVar[AnswerBound | None] = ContextVar("memdir_answer_bound", default=None)


def answer_bound() -> AnswerBound | None:
    """The bound of the call in progress in this thread (None: statements may wait as long as they take)."""
    return _ANSWER_BOUND.get()


@contextmanager
def bounded_answers(seconds: float | None) -> Iterator[AnswerBound]:
    """Within the block each database statement waits at most ``seconds`` for its answer (a search);
    ``None`` lifts an enclosing bound (an index build, a cleanup: legitimately minutes)."""
    bound = AnswerBound(seconds)
    token = _ANSWER_BOUND.set(bound)
    try:
        yield bound
    finally:
        _ANSWER_BOUND.reset(token)


@dataclass(frozen=True, slots=True)
class ChunkRow:
    """One chunk ready to be written: its id, location, text and (optional) vector."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    hash: str
    model: str
    text: str
    #: One vector, or several concatenated (one per model window of the text; ``windows`` says
    #: how many): a chunk's vector score is the best of its windows.  The indexer hands a float32
    #: array, the exact values written (a list of Python floats takes 8 times the memory).
    embedding: Sequence[float] | np.ndarray | None = None
    #: When the chunk's content was written (ms), if the source knows (transcripts).
    ts: int | None = None
    #: The days the chunk's content is about (ISO ``YYYY-MM-DD``, first and last), if known:
    #: from a daily file's name, dated headings or message times.
    date_start: str | None = None
    date_end: str | None = None
    windows: int = 1
    #: The keyword index's values for ``text`` (:func:`memdir.textutil.fts_values`), when they were
    #: computed ahead (by :mod:`memdir.build_worker`); ``None``: the store derives them.
    fts: tuple[str, str] | None = None


@dataclass(frozen=True, slots=True)
class Hit:
    """One search hit as a store returns it; ``score`` is in ``[0, 1]``, higher is better."""

    id: str
    path: str
    source: str
    start_line: int
    end_line: int
    text: str
    score: float
    ts: int | None = None
    date_start: str | None = None
    date_end: str | None = None


#: :meth:`Store.get_state` keys: files the last sync could not index (shown by ``status``), the
#: workspace that claimed the index before its first build finished, and the last recovery of a
#: damaged index (a backend's :meth:`Store.recover` writes it; full rebuilds carry it over).
SKIPPED_STATE, OWNER_STATE, RECOVERED_STATE = "skipped", "owner", "recovered"
#: The owning workspace's folder as :func:`memdir.errors.folder_identity` names it: the same folder
#: seen at another path (another container's mount of a shared volume), where its owner's path is not.
OWNER_FOLDER_STATE = "ownerFolder"

#: ``{(path, source): (content hash, change stamp, size)}`` of every indexed file (the stamp: mtime and
#: ctime in one number, :func:`memdir.workspace.change_stamp`; its column is named ``mtime``).
FileRows = dict[tuple[str, str], tuple[str, int, int]]


class WriterLock(Protocol):
    """One writer per index; dies with its holder (no stale locks)."""

    def acquire(self, timeout: float | None = None) -> bool:
        """Take the lock, waiting up to ``timeout`` s (``None`` forever, 0 not at all)."""
        ...

    def release(self) -> None: ...

    def still_held(self) -> bool:
        """Whether this holder still excludes every other writer (checked before each write)."""
        ...

    def holder(self) -> dict[str, Any] | None:
        """Who holds the lock now (``{"pid": …, "since": …}``), or ``None``."""
        ...

    def held_here(self) -> bool:
        """Whether a thread of this process holds the lock (or is taking it)."""
        ...


@runtime_checkable
class Store(Protocol):
    """One agent's index.  Thread-safe: a store may be shared by the threads of a process."""

    #: Where the index lives, for messages and ``status`` (a file path or a redacted DSN).
    location: str

    @property
    def fts_available(self) -> bool: ...

    @property
    def fts_error(self) -> str | None: ...

    def close(self) -> None: ...

    def transaction(self) -> AbstractContextManager[Any]:
        """All writes happen in one of these: committed on a clean exit, rolled back on error."""
        ...

    def writer_lock(self) -> WriterLock: ...

    # -- meta -------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, Any] | None:
        """The index identity written by the last full build (``None`` before the first)."""
        ...

    def write_meta(self, meta: dict[str, Any]) -> None: ...

    def get_state(self, key: str) -> Any:
        """A small JSON value kept with the index (skipped files, owner claim); ``None`` if unset."""
        ...

    def set_state(self, key: str, value: Any) -> None:
        """Write one (inside :meth:`transaction`); ``None`` deletes it.  Rebuilds carry their own."""
        ...

    # -- files and chunks ---------------------------------------------------------------------
    def file_rows(self, source: str | None = None, paths: Sequence[str] | None = None) -> FileRows:
        """``{(path, source): (hash, mtime_ns, size)}`` of every indexed file (of ``source``; of
        ``paths`` only, when given: a search checks its few results' notes, not the whole table)."""
        ...

    def touch_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int) -> None:
        """Record a new stat for a file whose content did not change."""
        ...

    def replace_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int,
                     chunks: Sequence[ChunkRow]) -> None:
        """Replace every row of one file (its chunks, keyword rows and vectors)."""
        ...

    def delete_file(self, path: str, source: str) -> None: ...

    def paths_missing_vectors(self) -> set[tuple[str, str]]:
        """Files with at least one chunk stored without a vector (embedding failed earlier)."""
        ...

    # -- search -----------------------------------------------------------------------------
    def keyword_search(self, terms: Sequence[str], limit: int) -> list[Hit]:
        """Chunks matching any of ``terms`` (from :func:`memdir.query.keyword_terms`), BM25-ranked."""
        ...

    def vector_search(self, query: Sequence[float], limit: int) -> list[Hit]:
        """Nearest chunks by cosine similarity (the best of a chunk's windows)."""
        ...

    def keyword_scores(self, terms: Sequence[str], ids: Sequence[str]) -> dict[str, float]:
        """The :meth:`keyword_search` score of each chunk in ``ids`` (0.0 for a chunk that does not match)."""
        ...

    def vector_scores(self, query: Sequence[float], ids: Sequence[str]) -> dict[str, float]:
        """The :meth:`vector_search` score of each chunk in ``ids`` that has a vector."""
        ...

    def chunks_in_period(self, start: str, end: str, limit: int) -> list[Hit]:
        """Up to ``limit`` chunks whose dates overlap ``start..end`` (ISO days, inclusive), score 0."""
        ...

    def first_chunks(self, paths: Sequence[str]) -> list[Hit]:
        """The first chunk (lowest lines) of each memory file in ``paths`` that has one, score 0."""
        ...

    # -- embedding cache --------------------------------------------------------------------
    def cache_get(self, provider: str, model: str, provider_key: str,
                  hashes: Iterable[str]) -> dict[str, Sequence[float] | np.ndarray]:
        """Cached vectors by text hash (float32 arrays or lists of floats: the caller takes either)."""
        ...

    def cache_put(self, provider: str, model: str, provider_key: str,
                  items: dict[str, Sequence[float] | np.ndarray]) -> None: ...

    def cache_touch(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> None:
        """Mark entries as recently used, so pruning drops the least recently used first."""
        ...

    def cache_prune(self, max_entries: int | None) -> int:
        """Drop least recently used entries beyond ``max_entries``; returns how many."""
        ...

    def cache_count(self) -> int: ...

    # -- counts and status ------------------------------------------------------------------
    def counts_by_source(self) -> dict[str, tuple[int, int]]:
        """``{source: (files, chunks)}``."""
        ...

    def chunk_count(self) -> int: ...

    def vector_count(self) -> int: ...

    def vec_dims(self) -> int | None: ...

    def describe(self) -> dict[str, Any]:
        """Backend facts for ``status``: backend name, versions, keyword and vector paths."""
        ...

    # -- rebuild and maintenance ----------------------------------------------------------------
    def rebuild(self) -> AbstractContextManager[Store]:
        """A shadow store seeded with the live embedding cache, swapped in on a clean exit."""
        ...

    def publish(self) -> None:
        """In a rebuild's shadow: make what is written so far visible (and kept by a killed build)."""
        ...

    def cleanup_leftovers(self) -> None:
        """Remove what a crashed rebuild left behind, keeping any embeddings it paid for."""
        ...

    def optimize(self) -> None:
        """Maintenance after a sync, under the writer lock (PostgreSQL: build the HNSW index once large)."""
        ...

    # -- export (``memdir migrate`` copies an index between backends) ---------------------------
    def export_files(self, only: Collection[tuple[str, str]] | None = None,
                     ) -> Iterator[tuple[str, str, str, int, int, list[ChunkRow]]]:
        """Every indexed file (or those of ``only``, ``(path, source)`` keys) as
        ``(path, source, hash, mtime_ns, size, chunks with their vectors)``."""
        ...

    def export_cache_count(self) -> int:
        """How many entries :meth:`export_cache` holds (damaged ones included), for progress."""
        ...

    def export_cache(self) -> Iterator[tuple[str, str, str, str, Sequence[float] | np.ndarray]]:
        """The cache entries of the agent's chunk texts as ``(provider, model, provider_key, hash,
        vector)``, least recently used first: not PostgreSQL's whole cache (the team's), nor the
        entries of texts no note holds any more, which SQLite keeps until ``maxEntries``."""
        ...

    # -- health -------------------------------------------------------------------------------
    #: True when the index could only be opened read-only (nothing may be written, no sync).
    readonly: bool
    #: Why a writable open fell back to read-only, for messages.
    readonly_reason: str | None

    def check(self, *, thorough: bool = False, max_bytes: int | None = None) -> str | None:
        """What is wrong with the index (damaged, tables missing, bad meta), or ``None``;
        ``thorough`` reads all of it (skipped when it is bigger than ``max_bytes``)."""
        ...

    def change_token(self) -> Any:
        """A value that changes whenever the index's contents may have (``None`` if unknown), so a
        thorough :meth:`check` that found it sound need not run again until it does."""
        ...

    def is_damage(self, exc: BaseException) -> bool:
        """Whether an error raised by this store means the index itself is damaged."""
        ...

    def recover(self, problem: str, *, notice: Any = None) -> dict[str, Any] | None:
        """Set a damaged index aside and start empty (the next sync rebuilds); what was done, or ``None``."""
        ...
