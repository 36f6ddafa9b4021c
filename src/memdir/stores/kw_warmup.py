"""Loading the postings of the words a search is most likely to need, before it needs them.

A warm process ranks keywords from postings it holds (:mod:`memdir.stores.kw_postings`), read
once per phrase on first use.  The first use of a common word reads tens of thousands of
postings (at 100k chunks a word in 45% of the chunks takes ~20 ms): measured over 200 distinct
queries, the queries meeting a word for the first time were the slow twentieth.  A long-lived
process (a reused :class:`memdir.Memory`, the MCP server, the agent loop) reads them ahead: the
words of each column by document frequency, most frequent first (the most costly to read cold,
and the most likely to come up), skipping those in half the rows or more (left out of every
search that has another phrase, :meth:`SqliteStore._useful_phrases`) and the rare ones (cheap to
read when asked).

It runs in a thread with its own read-only connection, one word at a time, and reads the next
word only once the store has gone unused for :data:`IDLE_SECONDS`: searches never wait for it
nor share the CPU with it.  Measured at 100k chunks with searches back to back, a warm-up that
did not wait made them slower (p95 71 vs 51 ms: two shared cores, and the GIL), so during a
burst of searches it waits, and what it reads comes in the pauses a real agent leaves between
searches.  It stops at :data:`BUDGET` postings (the cache's bound stays
:data:`~memdir.stores.kw_postings.MAX_ENTRIES`), when its time is up, or when told.

Its first step counts every term's rows per column (one pass over ``fts5vocab``, needed to pick
the words); the common terms' counts are handed to the store's scorer too, so a settled process
no longer walks a word's document list again just to count it for a new query.

Last, it measures the memory notes' line widths that widening needs (:mod:`memdir.note_lines`),
and the indexed session transcripts' messages, which a search otherwise reads on first showing
a note or a transcript (a 2.3 MB transcript: ~48 ms).

Everything it reads is tied to the index generation it read it at (the change log's position,
checked in the same read transaction): the store takes it only while that is still the
generation it holds, so a write by any process in between is never hidden; the warm-up then
starts over at the new generation (at most :data:`MAX_ROUNDS` times).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir import db
from memdir.stores import kw_postings as kp
from memdir.stores import vectors as vecs

_VOCAB_C = "memdir_warm_cols"
_VOCAB_I = "memdir_warm_instances"
#: Postings a warm-up holds at most (of the cache's MAX_ENTRIES; searches load the rest): ~64 MB.
#: At 100k generated chunks every word in 200 rows or more (and fewer than half) fits: 11.9M
#: postings, 810 words, read in ~5 s of idle time; 9M left the settled keyword p95 at 22-41 ms
#: against 14-20 ms with all of them (two runs each, a loaded machine).
BUDGET = kp.MAX_ENTRIES * 4 // 5
#: Words in fewer rows than this are left to be read when a search asks (under a millisecond).
MIN_ROWS = 200
#: Seconds a warm-up may take at most, pauses included.
MAX_SECONDS = 600.0
#: How long the store must have gone unused before the warm-up reads the next word.
IDLE_SECONDS = 0.02
#: Generations the warm-up starts over at before it gives up (an index being written all the time).
MAX_ROUNDS = 3

#: ``(generation, rowids, sizes) → whether the store holds that generation`` (under its lock;
#: a store holding an older one is first brought to the index's state, as its next search would).
AdoptRows = Callable[[Any, Any, Any], bool]
#: ``(generation, rowids, [(phrase key, rows, counts)], budget) → (status, phrases, entries taken)``:
#: ``"ok"``, ``"full"`` (budget reached) or ``"stale"`` (the store holds another generation now).
AddPhrases = Callable[[Any, Any, list[tuple[tuple[str, tuple[str, ...], bool], Any, Any]], int],
                      tuple[str, int, int]]
#: ``(generation, {term: {column: rows}}) → whether taken`` (the terms' row counts, read at that generation).
AdoptCounts = Callable[[Any, dict[str, dict[str, int]]], bool]
#: Whether a phrase is held already (a search read it first).
Held = Callable[[tuple[str, tuple[str, ...], bool]], bool]
#: Seconds since the store was last used (0 while it is).
IdleFor = Callable[[], float]


class Warmup:
    """One warm-up thread over one index file; :meth:`describe` says how far it got."""

    def __init__(self, path: Path, table: str, adopt_rows: AdoptRows, add_phrases: AddPhrases, held: Held,
                 idle_for: IdleFor | None = None, *, adopt_counts: AdoptCounts | None = None,
                 budget: int | None = None, min_rows: int | None = None, max_seconds: float | None = None,
                 idle_seconds: float | None = None, notes_root: Callable[[], Path | None] | None = None,
                 sessions_root: Callable[[], Path | None] | None = None):
        self.path = Path(path)
        self.table = table
        self.adopt_rows = adopt_rows
        self.add_phrases = add_phrases
        self.held = held
        self.adopt_counts = adopt_counts
        #: The workspace whose memory notes' line widths are measured once the words are read.
        self.notes_root = notes_root
        #: The folder of the indexed session transcripts (``None``: that source is off).
        self.sessions_root = sessions_root
        self.idle_for = idle_for
        self.idle_seconds = IDLE_SECONDS if idle_seconds is None else idle_seconds
        # the module's settings as they are now (tests and benches change them)
        self.budget = BUDGET if budget is None else budget
        self.min_rows = MIN_ROWS if min_rows is None else min_rows
        self.max_seconds = MAX_SECONDS if max_seconds is None else max_seconds
        self.state = "starting"
        self.words = 0
        self.phrases = 0
        self.entries = 0
        #: Terms whose row counts were handed to the store (those in MIN_ROWS rows or more).
        self.terms = 0
        #: Notes whose line widths were measured for widening (:mod:`memdir.note_lines`).
        self.notes = 0
        #: Session transcripts whose messages were measured for widening.
        self.transcripts = 0
        self.rounds = 0
        self.seconds = 0.0
        self.error: str | None = None
        self._stop = threading.Event()
        self._conn: Any = None
        self._thread = threading.Thread(target=self._run, name="memdir-keyword-warmup", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop and wait (a read in progress is interrupted)."""
        self._stop.set()
        conn = self._conn
        if conn is not None:
            try:
                conn.interrupt()
            except Exception:
                pass
        if timeout > 0 and self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def describe(self) -> dict[str, Any]:
        return {"state": self.state, "words": self.words, "phrases": self.phrases, "entries": self.entries,
                "terms": self.terms, "notes": self.notes, "transcripts": self.transcripts, "budget": self.budget,
                "rounds": self.rounds,
                "seconds": round(self.seconds, 2),
                **({"error": self.error} if self.error else {})}

    def _run(self) -> None:
        t0 = time.monotonic()
        try:
            self._conn = db.connect(self.path, readonly=True)
            for rounds in range(1, MAX_ROUNDS + 1):
                self.rounds = rounds
                self.state = "running"
                if self._round(t0):
                    self._notes(t0)
                    self.state = "done"
                    break
                if self._stop.wait(0.2):  # the index is being written: let the writer get on
                    break
            else:
                self.state = "gave up: the index kept changing"
        except Exception as exc:  # a warm-up is only ever a help: searches load what they need
            self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        finally:
            if self._stop.is_set() and self.state in ("starting", "running"):
                self.state = "stopped"
            elif self.error and self.state in ("starting", "running"):
                self.state = "failed"
            self.seconds = time.monotonic() - t0
            conn, self._conn = self._conn, None
            if conn is not None:
                conn.close()

    def _round(self, t0: float) -> bool:
        """Warm up at the index's current generation; ``True`` when done (budget, words or time
        used up), ``False`` when the index moved on or the store holds another generation."""
        conn = self._conn
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB_C} USING fts5vocab(main, {self.table}, col)")
        conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB_I} USING fts5vocab(main, {self.table}, "
                     "instance)")
        if not self._pause(t0):
            return True
        conn.execute("BEGIN")
        try:
            generation = _generation(conn)
            ids, hexes, lengths = conn.execute(
                f"SELECT group_concat(id), group_concat(hex(sz), ''), group_concat(length(sz)) "
                f"FROM (SELECT id, sz FROM {self.table}_docsize ORDER BY id)").fetchone()
            rowids = kp._ints(ids)
            sizes = kp.doc_lengths(hexes or "", kp._ints(lengths))
            # FTS5 keeps no per-term document counts: this walks the whole index once
            counts = conn.execute(f"SELECT term, col, doc FROM temp.{_VOCAB_C}").fetchall()
        finally:
            conn.execute("COMMIT")
        if generation is None:
            return True  # an index without a change log: nothing can be tied to a generation
        if self._stop.is_set() or not self.adopt_rows(generation, rowids, sizes):
            return self._stop.is_set()  # the index moved on meanwhile: try again shortly
        columns: dict[str, set[str]] = {}
        for term, col, docs in counts:
            if docs:
                columns.setdefault(term, set()).add(col)
        if self.adopt_counts is not None:
            # the common terms' counts (a rare term's own count is cheap to read when asked)
            common = {term for term, _, docs in counts if docs >= self.min_rows}
            known: dict[str, dict[str, int]] = {}
            for term, col, docs in counts:
                if term in common:
                    known.setdefault(term, {})[col] = docs
            if self.adopt_counts(generation, known):
                self.terms = len(known)
        by_term: dict[str, list[str]] = {}
        for term, col, _ in sorted((c for c in counts if self.min_rows <= c[2] and 2 * c[2] < rowids.size),
                                   key=lambda c: -c[2]):
            by_term.setdefault(term, []).append(col)
        del counts
        for term, cols in by_term.items():
            wanted = [c for c in cols if not self.held((c, (term,), False))]
            if not wanted:
                continue
            if not self._pause(t0):
                return True
            conn.execute("BEGIN")
            try:
                if _generation(conn) != generation:
                    return False
                docs = kp.read_docs(conn, _VOCAB_I, term, wanted, columns.get(term, set()) <= set(wanted))
            finally:
                conn.execute("COMMIT")
            loaded = [((col, (term,), False), *kp.rows_and_counts(rowids, d)) for col, d in docs.items() if d.size]
            taken, phrases, entries = self.add_phrases(generation, rowids, loaded, self.budget)
            if taken == "stale":  # the store saw a write since: start over at the new generation
                return False
            self.words += 1
            self.phrases += phrases
            self.entries += entries
            if taken == "full":
                return True
        return True

    def _notes(self, t0: float) -> None:
        """Measure the memory notes' line widths for widening, as a search would on first showing
        one (each file checked by ``lstat`` on use, so a note edited later is read again), then the
        indexed session transcripts' messages; each up to half of what its cache
        (:mod:`memdir.note_lines`) holds, never pushing out what searches read."""
        from memdir.note_lines import NOTE_LINES, TRANSCRIPT_LINES

        root = self.notes_root() if self.notes_root is not None else None
        if root is not None and not self._measure(t0, "memory", NOTE_LINES, lambda p: os.path.join(str(root), p)):
            return
        # a transcript's messages, as a search reads them on first showing one of its results
        # (a few MB of JSONL: tens of ms each, once per process)
        sessions = self.sessions_root() if self.sessions_root is not None else None
        if sessions is not None:
            self._measure(t0, "sessions", TRANSCRIPT_LINES, lambda p: os.path.join(str(sessions), os.path.basename(p)))

    def _measure(self, t0: float, source: str, cache: Any, where: Callable[[str], str]) -> bool:
        """Measure the indexed files of ``source`` into ``cache`` until half of what it holds;
        ``False``: stopped (told to, or out of time)."""
        paths = [p for (p,) in self._conn.execute("SELECT path FROM files WHERE source = ? ORDER BY path", (source,))]
        for i, path in enumerate(paths):
            if cache.lines >= cache.max_lines // 2:
                return True
            if self._stop.is_set() or (i % 16 == 0 and not self._pause(t0)):
                return False
            cache.widths(where(path))
            if source == "memory":
                self.notes += 1
            else:
                self.transcripts += 1
        return True

    def _pause(self, t0: float) -> bool:
        """Wait until the store has been idle a while; ``False``: stop (told to, or out of time)."""
        while not self._stop.is_set():
            if time.monotonic() - t0 > self.max_seconds:
                return False
            idle = self.idle_for() if self.idle_for is not None else self.idle_seconds
            if idle >= self.idle_seconds:
                return True
            self._stop.wait(self.idle_seconds - idle)
        return False


def _generation(conn: Any) -> tuple[str | None, int] | None:
    try:
        epoch, _lo, hi = vecs.state(conn)
    except db.binding().OperationalError:
        return None
    return epoch, hi
