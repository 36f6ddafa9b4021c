"""FTS5's BM25 ranking computed from postings held in process, for a warm store.

``ORDER BY bm25(…)`` makes FTS5 score every row matching the OR of the query's phrases, one aux
call per row (at 100k generated chunks most of a 35 ms query), and count each phrase's rows
again for its IDF.  A long-lived process (MCP server, agent loop, a reused :class:`Memory`) asks
about the same words again and again: here each phrase's postings (dense document numbers and
frequencies in its column) are read once from FTS5's own index through ``fts5vocab``
``instance`` rows, so tokenisation and case folding are FTS5's, and a query is a few NumPy
passes over them.  The figures are FTS5's exactly (``fts5_aux.c``): the same inputs (row count
and token total from the averages record, document lengths from ``<fts>_docsize``, each
phrase's row count and per-row frequency), the same operations in the same order, summed phrase
by phrase in query order; ties ranked by rowid, as FTS5's sorter returns them.

Everything held is valid for one index generation (the change log's position: every write of a
chunk moves it, in the writer's transaction), so rows written by another process are never
ranked from old postings.  When the index moves on by a few writes (an agent appending a note,
a transcript growing), the rows the log names are read again (sizes, text) and each phrase held
is brought up to date the next time a query uses it: rows rewritten or gone are taken out, the
new rows' frequencies come from FTS5's own tokenizer (:class:`memdir.stores.fts_scores.FtsScorer`).
Before, every write dropped everything and the searches after it loaded each word again.  A new
epoch (a full rebuild), a log trimmed past what is held, or many changed rows drop it all; a
phrase not used for ``MAX_PENDING`` writes is read again when next used.  Nothing is written to
disk; a process that has not ranked at this generation before uses FTS5 (a one-shot CLI is never
slower), the second query at a generation loads what it needs, and starts a warm-up that reads
the most common words ahead while the store is idle (:mod:`memdir.stores.kw_warmup`).

Reading a word is one pass over its instances in ``fts5vocab`` whatever the columns asked
(:func:`read_docs`): a query wants most words in both columns (``text`` and, stemmed, ``stems``),
and a word that is its own stem is read once for both.  Frequencies are held in one byte (5
bytes a posting, not 8: the same memory holds 60% more).

A word's first read is what a fresh process's slow searches spend their time on (``bench/
p95_breakdown.py``: 77-85% of the slowest twentieth's extra time at 10k and 100k chunks), and
walking its instances is the floor of it.  Measured and dropped (thread CPU, bench corpora):
``MATCH`` row ids are 3x cheaper but carry no frequencies, and none of the bench queries' common
words has every frequency 1 (``cnt = doc``); ``NEAR("w" "w")`` matches every row with ``w``;
``bm25()`` per row is 5x slower; one ``group_concat`` of column-tagged ids saves 9%, ``char()``
packing costs 1.8x; a 1 GB ``mmap`` or a 64 MB page cache change nothing (the pages are in the OS
cache: CPU-bound); exact MaxScore-style pruning of unread common phrases (an upper bound of
``idf·(k1+1)`` each) was provable for 24 of 78 such queries at 10k, leaving a median of 567
candidates to count in text; reading words on a second connection in parallel gained nothing on
two shared cores.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, NamedTuple

from memdir.db import rows_in
from memdir.stores.fts_scores import K1, B

if TYPE_CHECKING:
    import numpy as np

_VOCAB_I = "memdir_kw_instances"
#: Postings kept (phrases' rows and words' positions; ~5 bytes each: ~80 MB) before the least
#: recently used phrases are dropped.
MAX_ENTRIES = 16_000_000
#: Rows changed since the held generation that are patched in rather than everything read again:
#: at least this many, or this share of the index.
PATCH_MIN_ROWS = 2_000
PATCH_MAX_SHARE = 0.05
#: Writes remembered for phrases not used since (each costs a row map of the index's size).
MAX_PENDING = 32
#: A phrase of several words (an identifier: ``inc 4242``) found in at most this many rows is
#: counted in their text, not read from its words' positions (``inc`` alone: 200k positions,
#: 35-50 ms at 100k chunks, for an ID in 3 rows).
FEW_ROWS = 200

#: ``(held generation, new generation) → (changed rowids, {rowid: text} of those that exist now)``,
#: or ``None`` when the change log cannot say (trimmed, another epoch).
RowsSince = Callable[[Any, Any], "tuple[list[int], dict[int, str]] | None"]
#: ``rowids → {rowid: chunk text}`` of those that exist.
Texts = Callable[[list[int]], "dict[int, str]"]
#: ``word → the columns it occurs in now`` (``None``: not known).
Columns = Callable[[str], "frozenset[str] | None"]
#: ``(phrase specs, {rowid: text}) → {rowid: [frequency of each phrase]}`` (FTS5's tokenizer).
Frequencies = Callable[[list[tuple[str, list[str], bool]], dict[int, str]], dict[int, list[int]]]


def _ints(text: str | None) -> np.ndarray:
    import numpy as np

    if not text:
        return np.zeros(0, dtype=np.int64)
    # parsed in C (text mode of fromstring): ~10× faster than splitting into Python strings,
    # which was a third of loading a common word's postings at 100k chunks
    return np.fromstring(text, dtype=np.int64, sep=",")


def compact_counts(counts: np.ndarray) -> np.ndarray:
    """Frequencies held in one byte each when they fit (nearly always): a held posting is then 5
    bytes, not 8, and the same memory holds 60% more of them.  Exact either way (small integers)."""
    import numpy as np

    if counts.size and float(counts.max()) > 255:
        return counts.astype(np.float32)
    return counts.astype(np.uint8)


def rows_and_counts(rowids: np.ndarray, starts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(row numbers, frequencies)`` from where a phrase starts (a row's rowid once per occurrence,
    in rowid order), against the sorted ``rowids`` held."""
    import numpy as np

    if not starts.size:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint8)
    starts = np.sort(starts, kind="stable")
    first = np.concatenate(([True], starts[1:] != starts[:-1]))
    docs = starts[first]
    counts = np.diff(np.append(np.flatnonzero(first), starts.size))
    rows = np.searchsorted(rowids, docs)
    if rows.size and (rows[-1] >= rowids.size or not np.array_equal(rowids[rows], docs)):
        raise LookupError("postings name rows the document sizes do not")  # never expected
    # held compactly (exact: frequencies are small integers); scored in doubles like FTS5
    return rows.astype(np.int32), compact_counts(counts)


def read_docs(conn: Any, vocab: str, token: str, cols: Sequence[str], alone: bool = False) -> dict[str, np.ndarray]:
    """The row of each instance of ``token`` in each of ``cols`` (one entry per occurrence), read
    in one pass over the token's instances: FTS5 walks them all whatever the column asked, so a
    word wanted in both columns (its stem is itself: ``budget``) costs one walk, not two.

    Each column's rows are picked with ``CASE`` in the aggregate, not ``WHERE col = ?`` (a third
    faster: measured at 100k chunks); ``alone``: ``cols`` are the only columns the token occurs
    in, and one column's instances need no picking at all (faster again)."""
    if len(cols) == 1 and alone:
        got = conn.execute(f"SELECT group_concat(doc) FROM temp.{vocab} WHERE term = ?", (token,)).fetchone()
    else:
        picks = ", ".join("group_concat(CASE WHEN col = ? THEN doc END)" for _ in cols)
        got = conn.execute(f"SELECT {picks} FROM temp.{vocab} WHERE term = ?", (*cols, token)).fetchone()
    return {col: _ints(text) for col, text in zip(cols, got, strict=True)}


def doc_lengths(hex_sizes: str, blob_lengths: np.ndarray) -> np.ndarray:
    """Each document's token count over all columns (FTS5's ``xColumnSize(-1)``) from its
    ``docsize`` record: the record's varints summed, decoded for all records at once."""
    import numpy as np

    buf = np.frombuffer(bytes.fromhex(hex_sizes), dtype=np.uint8).astype(np.int64)
    if not buf.size:
        return np.zeros(len(blob_lengths), dtype=np.float64)
    last = (buf & 0x80) == 0  # a varint's final byte (sizes never need SQLite's 9-byte form)
    ends = np.flatnonzero(last)
    varint = np.cumsum(last) - last  # which varint each byte belongs to
    from_end = ends[varint] - np.arange(buf.size)
    values = (buf & 0x7F) << (7 * from_end)
    record = np.repeat(np.arange(len(blob_lengths)), blob_lengths)
    return np.bincount(record, weights=values, minlength=len(blob_lengths))


class _Patch(NamedTuple):
    """One write's change to the rows: where each old row number went (-1: rewritten or gone),
    where the rows it wrote sit now, and their text (for their frequencies)."""

    moved: np.ndarray
    added_at: np.ndarray
    docs: dict[int, str]


class KeywordPostings:
    """Warm BM25 over one FTS5 table's postings, valid for one index generation."""

    def __init__(self, conn: Any, table: str, *, rows_since: RowsSince | None = None,
                 frequencies: Frequencies | None = None, columns: Columns | None = None,
                 texts: Texts | None = None):
        self.conn = conn
        self.columns = columns
        self.texts = texts
        self.table = table
        self.rows_since = rows_since
        self.frequencies = frequencies
        self.generation: Any = None
        #: Queries seen at this generation (the first one is left to FTS5).
        self.seen = 0
        self.rowids: np.ndarray | None = None  # sorted rowids of the indexed rows
        self.sizes: np.ndarray | None = None  # each row's token count over all columns
        self.norm: np.ndarray | None = None  # k1·(1 − b + b·D/avgdl) per row, as FTS5 computes it
        self.avgdl: float | None = None  # the average ``norm`` was computed with
        #: Writes patched in since the rows were read (``describe``).
        self.patched = 0
        #: phrase → (row numbers, frequencies, how many writes it has been brought through)
        self._phrases: dict[tuple[str, tuple[str, ...], bool], tuple[np.ndarray, np.ndarray, int]] = {}
        #: The writes since the rows were read, oldest first, as :class:`_Patch` (the first one is
        #: write number ``_base``): a phrase held at an older count is brought through the rest.
        self._pending: list[_Patch] = []
        self._base = 0
        self._tokens: dict[tuple[str, str, bool], tuple[np.ndarray, np.ndarray]] = {}
        self._entries = 0
        self._vocab = False

    def describe(self) -> dict[str, Any]:
        return {"rows": 0 if self.rowids is None else int(self.rowids.size), "phrases": len(self._phrases),
                "patched": self.patched, "pending": len(self._pending),
                "tokens": len(self._tokens), "entries": self._entries}

    def ready(self, generation: Any) -> bool:
        """Whether to rank in process now (call inside the caller's read snapshot)."""
        if generation is None:
            return False
        if generation != self.generation:
            if self._patch(generation):
                self.generation = generation
            else:
                self.generation, self.seen = generation, 0
                self.rowids = self.sizes = self.norm = None
                self.patched = 0
                self._forget()
        self.seen += 1
        return self.seen > 1 or self.rowids is not None

    def follow(self, generation: Any) -> None:
        """Move to ``generation`` as a search would (patched, or everything dropped), without
        counting a search (call inside the caller's read snapshot at that generation)."""
        self.ready(generation)
        self.seen -= 1

    def _forget(self) -> None:
        self._phrases, self._tokens, self._entries = {}, {}, 0
        self._pending, self._base = [], 0

    @property
    def _level(self) -> int:
        return self._base + len(self._pending)

    def _load_rows(self, avgdl: float) -> None:
        ids, hexes, lengths = self.conn.execute(
            f"SELECT group_concat(id), group_concat(hex(sz), ''), group_concat(length(sz)) "
            f"FROM (SELECT id, sz FROM {self.table}_docsize ORDER BY id)").fetchone()
        self.rowids = _ints(ids)
        self.sizes = doc_lengths(hexes or "", _ints(lengths))
        self._normalise(avgdl)

    def _normalise(self, avgdl: float) -> None:
        """``norm`` for the rows held and the index's average length now (any write moves it)."""
        import numpy as np

        assert self.sizes is not None
        if self.norm is not None and self.avgdl == avgdl and self.norm.size == self.sizes.size:
            return
        # FTS5: k1 * (1 - b + b * D / avgdl), evaluated left to right in doubles
        self.norm = K1 * (1 - B + B * self.sizes / avgdl) if avgdl else np.full(self.sizes.size, K1)
        self.avgdl = avgdl

    def _patch(self, generation: Any) -> bool:
        """Bring what is held from its generation to ``generation`` by reading only the rows written
        in between; ``False`` (nothing changed here) when everything must be read again."""
        old = self.generation
        if (self.rows_since is None or self.frequencies is None or self.rowids is None or self.sizes is None
                or old is None or generation is None or old[0] != generation[0] or generation[1] < old[1]):
            return False  # a one-shot process stops here: NumPy is never imported for it
        import numpy as np

        got = self.rows_since(old, generation)
        if got is None:
            return False
        changed, docs = got
        if len(changed) > max(PATCH_MIN_ROWS, int(PATCH_MAX_SHARE * self.rowids.size)):
            return False
        added = np.array(sorted(docs), dtype=np.int64)
        added_sizes = self._sizes_of(added)
        if added_sizes is None:
            return False
        keep = ~np.isin(self.rowids, np.asarray(changed, dtype=np.int64))
        rowids = np.concatenate((self.rowids[keep], added))
        order = np.argsort(rowids, kind="stable")
        rowids, sizes = rowids[order], np.concatenate((self.sizes[keep], added_sizes))[order]
        moved = np.full(self.rowids.size, -1, dtype=np.int64)  # old row number → new (-1: rewritten or gone)
        moved[keep] = np.searchsorted(rowids, self.rowids[keep])
        self._pending.append(_Patch(moved, np.searchsorted(rowids, added), {int(r): docs[int(r)] for r in added}))
        if len(self._pending) > MAX_PENDING:  # phrases not used since are read again when next used
            self._pending.pop(0)
            self._base += 1
        self._tokens = {}  # words' positions only serve loading new phrases: read again when needed
        self._entries = sum(rows.size for rows, _, _ in self._phrases.values())
        self.rowids, self.sizes, self.norm = rowids, sizes, None
        self.patched += 1
        return True

    def _catch_up(self, key: tuple[str, tuple[str, ...], bool],
                  held: tuple[np.ndarray, np.ndarray, int]) -> tuple[np.ndarray, np.ndarray, int] | None:
        """A phrase's postings brought through the writes since it was read or last used (``None``:
        older than the writes remembered, or a row the tokenizer said nothing about)."""
        import numpy as np

        rows, counts, level = held
        if level < self._base or self.frequencies is None:
            return None
        spec = [(key[0], list(key[1]), key[2])]
        for patch in self._pending[level - self._base:]:
            at = patch.moved[rows]
            ok = at >= 0
            rows, counts = at[ok], counts[ok]
            if patch.docs:
                freqs = self.frequencies(spec, patch.docs)
                if any(r not in freqs for r in patch.docs):
                    return None
                extra = [(int(pos), freqs[r][0]) for pos, r in zip(patch.added_at, patch.docs, strict=True)
                         if freqs[r][0] > 0]
                if extra:
                    rows = np.concatenate((rows, np.array([p for p, _ in extra], dtype=np.int64)))
                    counts = np.concatenate((counts, np.array([f for _, f in extra], dtype=np.float32)))
                    by_row = np.argsort(rows, kind="stable")
                    rows, counts = rows[by_row], counts[by_row]
        return rows.astype(np.int32), compact_counts(counts), self._level

    def _sizes_of(self, rowids: np.ndarray) -> np.ndarray | None:
        """Token counts of the given rows from ``<fts>_docsize`` (``None`` if one has no record)."""
        import numpy as np

        if not rowids.size:
            return np.zeros(0, dtype=np.float64)
        ids = [int(r) for r in rowids]
        found: dict[int, bytes] = dict(rows_in(self.conn, f"SELECT id, sz FROM {self.table}_docsize WHERE id IN "
                                               "({marks})", ids))
        if len(found) != len(ids):
            return None
        blobs = [found[r] or b"" for r in ids]
        return doc_lengths(b"".join(blobs).hex(), np.array([len(b) for b in blobs], dtype=np.int64))

    def _ensure_vocab(self) -> None:
        if not self._vocab:
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB_I} USING fts5vocab(main, "
                              f"{self.table}, instance)")
            self._vocab = True

    def _positions(self, col: str, token: str, prefix: bool) -> tuple[np.ndarray, np.ndarray]:
        """``(rowids, offsets)`` of every instance of the token (or of any token it prefixes) in
        ``col``; kept for the phrases of many words (``inc 4242``, ``inc 4243``) sharing one."""
        key = (col, token, prefix)
        got = self._tokens.get(key)
        if got is None:
            got = self._tokens[key] = self._read_positions(col, token, prefix)
            self._entries += got[0].size
        return got

    def _read_docs(self, col: str, token: str) -> np.ndarray:
        """The row of each instance of ``token`` in ``col`` (one entry per occurrence)."""
        self._ensure_vocab()
        return read_docs(self.conn, _VOCAB_I, token, [col], self._alone(token, [col]))[col]

    def _alone(self, token: str, cols: Sequence[str]) -> bool:
        """Whether ``cols`` are known to be all the columns ``token`` occurs in now."""
        known = self.columns(token) if self.columns is not None else None
        return known is not None and known <= set(cols)

    def _read_positions(self, col: str, token: str, prefix: bool) -> tuple[np.ndarray, np.ndarray]:
        self._ensure_vocab()
        if prefix:
            where, args = "term >= ? AND term < ?", (token, token + "\U0010ffff")
        else:
            where, args = "term = ?", (token,)
        if not prefix and self._alone(token, [col]):
            picks, pick_args = "group_concat(doc), group_concat(offset)", ()
        else:  # picked in the aggregate, as read_docs does (a third faster than WHERE col = ?)
            picks = "group_concat(CASE WHEN col = ? THEN doc END), group_concat(CASE WHEN col = ? THEN offset END)"
            pick_args = (col, col)
        docs, offsets = self.conn.execute(f"SELECT {picks} FROM temp.{_VOCAB_I} WHERE {where}",
                                          (*pick_args, *args)).fetchone()
        return _ints(docs), _ints(offsets)

    def _load_phrase(self, col: str, tokens: Sequence[str], prefix: bool,
                     docs: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """``(row numbers, frequencies)`` of a phrase in a column: where its tokens occur in order
        (``docs``: a one-word phrase's instances, already read)."""
        import numpy as np

        assert self.rowids is not None
        if not tokens:
            return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.uint8)
        if len(tokens) == 1 and not prefix:
            starts = self._read_docs(col, tokens[0]) if docs is None else docs  # a word's rows need no offsets
        else:
            few = self._few_rows(col, tokens, prefix)
            if few is not None:
                return few
            keys: np.ndarray | None = None
            for j, token in enumerate(tokens):
                found, offsets = self._positions(col, token, prefix and j == len(tokens) - 1)
                start = offsets - j  # where the phrase would begin
                ok = start >= 0
                k = np.unique((found[ok] << 32) | start[ok])
                keys = k if keys is None else np.intersect1d(keys, k, assume_unique=True)
            assert keys is not None
            starts = np.sort(keys >> 32)
        return rows_and_counts(self.rowids, starts)

    def _few_rows(self, col: str, tokens: Sequence[str], prefix: bool) -> tuple[np.ndarray, np.ndarray] | None:
        """A phrase's ``(row numbers, frequencies)`` when FTS5 finds it in few rows: which rows from
        its own phrase match, how often from their text by FTS5's tokenizer (``frequencies``, as
        writes are patched in); ``None``: many rows, or the two disagree (read the positions)."""
        import numpy as np

        if self.frequencies is None or self.texts is None or any('"' in t for t in tokens):
            return None
        match = f'{col} : "{" ".join(tokens)}"' + ("*" if prefix else "")
        found, = self.conn.execute(
            f"SELECT group_concat(rowid) FROM (SELECT rowid FROM {self.table} WHERE {self.table} MATCH ? LIMIT ?)",
            (match, FEW_ROWS + 1)).fetchone()
        docs = _ints(found)
        if docs.size > FEW_ROWS:
            return None
        texts = self.texts([int(r) for r in docs]) if docs.size else {}
        freqs = self.frequencies([(col, list(tokens), prefix)], texts) if texts else {}
        counts = np.array([freqs.get(int(r), [0])[0] for r in docs], dtype=np.int64)
        if len(texts) != docs.size or (counts <= 0).any():
            return None
        return rows_and_counts(self.rowids, np.repeat(np.sort(docs), counts[np.argsort(docs)]))

    def _read_together(self, keys: Sequence[tuple[str, tuple[str, ...], bool]]) -> dict[tuple[str, str], np.ndarray]:
        """The instances of the one-word phrases among ``keys`` whose word is wanted in several
        columns, each word read in one pass (:func:`read_docs`)."""
        cols: dict[str, list[str]] = {}
        for col, tokens, prefix in keys:
            if len(tokens) == 1 and not prefix and col not in cols.setdefault(tokens[0], []):
                cols[tokens[0]].append(col)
        out: dict[tuple[str, str], np.ndarray] = {}
        for token, wanted in cols.items():
            if len(wanted) > 1:
                self._ensure_vocab()
                out.update({(col, token): d for col, d in read_docs(
                    self.conn, _VOCAB_I, token, wanted, self._alone(token, wanted)).items()})
        return out

    def warm(self, generation: Any) -> bool:
        """Whether postings are loaded for this generation (a check that loads and counts nothing)."""
        return generation is not None and generation == self.generation and self.rowids is not None

    def _postings(self, phrases: Sequence[tuple[str, list[str], bool]]) -> list[tuple[np.ndarray, np.ndarray]]:
        keys = [(col, tuple(tokens), prefix) for col, tokens, prefix in phrases]
        together = self._read_together([k for k in dict.fromkeys(keys) if k not in self._phrases])
        out = []
        for key in keys:
            got = self._phrases.pop(key, None)
            if got is not None:
                self._entries -= got[0].size
                if got[2] != self._level:
                    got = self._catch_up(key, got)
            if got is None:
                docs = together.get((key[0], key[1][0])) if len(key[1]) == 1 and not key[2] else None
                got = (*self._load_phrase(key[0], key[1], key[2], docs), self._level)
            self._entries += got[0].size
            while self._entries > MAX_ENTRIES and self._phrases:  # least recently used first
                old = self._phrases.pop(next(iter(self._phrases)))
                self._entries -= old[0].size
            self._phrases[key] = got  # (re)inserted last: dicts keep insertion order
            out.append((got[0], got[1]))
        return out

    # -- filled ahead of time by a warm-up (memdir.stores.kw_warmup), under the store's lock --
    def adopt_rows(self, generation: Any, rowids: np.ndarray, sizes: np.ndarray) -> bool:
        """Take the rows a warm-up read at ``generation`` when nothing is held yet; whether what is
        held now is for ``generation`` (the warm-up's phrases may then be added)."""
        if generation is None:
            return False
        if self.generation is None or (self.generation == generation and self.rowids is None):
            self._forget()
            self.generation, self.seen = generation, 0
            self.rowids, self.sizes, self.norm, self.patched = rowids, sizes, None, 0
        return self.generation == generation and self.rowids is not None

    def add_phrases(self, generation: Any, rowids: np.ndarray,
                    loaded: Sequence[tuple[tuple[str, tuple[str, ...], bool], np.ndarray, np.ndarray]],
                    budget: int) -> tuple[str, int, int]:
        """Hold phrases a warm-up read at ``generation`` against ``rowids`` (row numbers) while that
        is still the generation held: ``("ok" | "full" | "stale", phrases taken, entries taken)``;
        ``"full"``: ``budget`` entries reached, the rest not taken; ``"stale"``: another generation
        is held, nothing taken."""
        import numpy as np

        if self.generation != generation or self.rowids is None or not (
                self.rowids is rowids or np.array_equal(self.rowids, rowids)):
            return "stale", 0, 0
        phrases = entries = 0
        for key, rows, counts in loaded:
            if key in self._phrases:
                continue
            if self._entries + rows.size > budget:
                return "full", phrases, entries
            # taken as the least recently used: a search's own loads never make way for these
            self._phrases = {key: (rows, counts, self._level), **self._phrases}
            self._entries += rows.size
            phrases, entries = phrases + 1, entries + int(rows.size)
        return "ok", phrases, entries

    @staticmethod
    def _idf(n_rows: int, hits: int) -> float:
        idf = math.log((n_rows - hits + 0.5) / (hits + 0.5))
        return idf if idf > 0.0 else 1e-6

    def top(self, phrases: Sequence[tuple[str, list[str], bool]], n_rows: int, avgdl: float,
            limit: int) -> list[tuple[int, float]]:
        """``(rowid, bm25)`` of the best ``limit`` rows matching any phrase, best (most negative) first."""
        import numpy as np

        if self.rowids is None:
            self._load_rows(avgdl)
        self._normalise(avgdl)
        assert self.rowids is not None and self.norm is not None
        score = np.zeros(self.rowids.size, dtype=np.float64)
        for rows, freqs in self._postings(phrases):
            if not rows.size:
                continue
            idf = self._idf(n_rows, rows.size)
            f = freqs.astype(np.float64)
            score[rows] += idf * ((f * (K1 + 1.0)) / (f + self.norm[rows]))
        matched = np.flatnonzero(score)
        if matched.size > limit:
            kth = np.partition(score[matched], matched.size - limit)[matched.size - limit]
            matched = matched[score[matched] >= kth]
        order = np.lexsort((matched, -score[matched]))[:limit]  # ties: lower rowid first, as FTS5
        best = matched[order]
        return [(int(r), -1.0 * float(s)) for r, s in zip(self.rowids[best], score[best], strict=True)]

    def held(self, phrase: tuple[str, list[str], bool]) -> bool:
        """Whether a phrase's postings are held (up to date, or within the writes remembered)."""
        got = self._phrases.get((phrase[0], tuple(phrase[1]), phrase[2]))
        return got is not None and got[2] >= self._base

    def scores(self, phrases: Sequence[tuple[str, list[str], bool]], n_rows: int, avgdl: float,
               rowids: Sequence[int], direct: dict[int, tuple[int, dict[int, int]]] | None = None
               ) -> dict[int, float]:
        """``bm25`` of the given rows that match any phrase (call only when :meth:`warm`).

        ``direct`` gives, by position in ``phrases``, a phrase's row count and its frequency in
        the given rows, for phrases whose postings are not held: a phrase common enough to be
        pruned from searches (in half the rows) costs more to load than to count in a few rows,
        and loading those evicted the postings searches need (measured at 100k: p95 0.4 s).
        Phrases are summed in their order, as FTS5 does, so the figures are FTS5's to the bit."""
        import numpy as np

        assert self.rowids is not None
        direct = direct or {}
        self._normalise(avgdl)
        assert self.norm is not None
        want = np.unique(np.asarray(list(rowids), dtype=np.int64))
        at = np.minimum(np.searchsorted(self.rowids, want), max(self.rowids.size - 1, 0))
        known = self.rowids[at] == want if self.rowids.size else np.zeros(want.size, dtype=bool)
        want, at = want[known], at[known]
        norm = self.norm[at]
        score = np.zeros(at.size, dtype=np.float64)
        matched = np.zeros(at.size, dtype=bool)
        held = iter(self._postings([p for i, p in enumerate(phrases) if i not in direct]))
        for i in range(len(phrases)):
            if i in direct:
                hits, counts = direct[i]
                f = np.array([counts.get(int(r), 0) for r in want], dtype=np.float64)
                here = f > 0
            else:
                rows, freqs = next(held)
                hits = rows.size
                if not hits:
                    continue
                p = np.minimum(np.searchsorted(rows, at), rows.size - 1)
                here = rows[p] == at
                f = np.where(here, freqs[p], 0).astype(np.float64)
            if not hits:
                continue
            # FTS5 adds every phrase, a phrase absent from a row included (idf × 0 = +0.0)
            score += self._idf(n_rows, hits) * ((f * (K1 + 1.0)) / (f + norm))
            matched |= here
        return {int(r): -1.0 * float(s) for r, s, m in zip(want, score, matched, strict=True) if m}
