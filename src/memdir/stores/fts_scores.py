"""FTS5's own BM25 for a few chosen chunks, without FTS5 scanning the index once per chunk.

``bm25(chunks_fts)`` restricted with ``rowid IN (…)`` runs one FTS5 cursor per id, and each
cursor counts every row containing every phrase again (FTS5 needs that count, ``nHit``, for the
IDF): scoring 24 candidates cost twice as much as the whole search (57 vs 26 ms at 10k chunks).
The hybrid merge needs these complete scores for every candidate, so they are computed here with
FTS5's formula (``fts5_aux.c``: k1 = 1.2, b = 0.75, IDF floored at 1e-6, document length over all
columns) from the same inputs FTS5 uses:

* ``N`` and the total token count: the index's averages record (``<fts>_data`` row 1);
* each document's length: ``<fts>_docsize``;
* each phrase's document count: one ``count(*)`` per phrase over the index (no ranking);
* each phrase's frequency in each candidate: the candidates' column values are tokenised by the
  same FTS5 tokenizer in a scratch in-memory table and read back through ``fts5vocab``
  ``instance`` rows (so tokenisation, case folding and diacritics are FTS5's, not a copy).

The result equals what FTS5's ``bm25()`` returns for those rows (tests compare them).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from memdir.stemming import DEFAULT_LANGUAGE, detect_language, has_camel_case
from memdir.stores import kw_text
from memdir.textutil import stem_word

K1 = 1.2
B = 0.75
_SCRATCH = "memdir_kw_scratch"
_VOCAB = "memdir_kw_vocab"


def read_varints(blob: bytes) -> list[int]:
    """SQLite varints (big-endian 7-bit groups; the 9th byte carries 8 bits) in ``blob``."""
    out: list[int] = []
    i, n = 0, len(blob)
    while i < n:
        value = 0
        for j in range(9):
            byte = blob[i]
            i += 1
            if j == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if not byte & 0x80:
                break
        out.append(value)
    return out


def _clear(conn: Any) -> None:
    conn.execute(f"INSERT INTO temp.{_SCRATCH}({_SCRATCH}) VALUES ('delete-all')")


def _phrase_tokens(conn: Any, phrases: Sequence[str]) -> list[list[str]]:
    """Each phrase's text tokenised by the scratch table's (= the index's) tokenizer, in order."""
    _clear(conn)
    conn.executemany(f"INSERT INTO temp.{_SCRATCH}(rowid, text, stems) VALUES (?, ?, '')",
                     [(i + 1, p) for i, p in enumerate(phrases)])
    toks: list[list[tuple[int, str]]] = [[] for _ in phrases]
    for term, doc, offset in conn.execute(f"SELECT term, doc, offset FROM temp.{_SCRATCH}_i"):
        toks[doc - 1].append((offset, term))
    return [[t for _, t in sorted(x)] for x in toks]


class FtsScorer:
    """Scores chosen rows of one FTS5 table (``text`` + ``stems`` columns) as FTS5's bm25 would."""

    def __init__(self, conn: Any, table: str, tokenize: str, text_value: Callable[[str], str],
                 stems_value: Callable[[str], str], stem_counts: Callable[[str, set[str]], dict[str, int]] | None,
                 generation: Callable[[], Any] | None = None):
        self.conn = conn
        self.table = table
        #: The ``text`` column FTS5 indexed for a chunk (tokenised here by FTS5 itself).
        self.text_value = text_value
        #: The ``stems`` column; and, where one stem is one token (``unicode61``, not trigrams), how
        #: often each wanted stem occurs in it, counted in Python: stemming whole candidates to feed
        #: FTS5 cost more than the rest of the scoring.
        self.stems_value = stems_value
        self.stem_counts = stem_counts
        #: Phrase document counts, valid while ``generation()`` (the index's write position) is unchanged.
        self.generation = generation
        self._counts: dict[tuple[str, str], int] = {}
        #: The columns each word counted from ``fts5vocab`` occurs in (same validity as ``_counts``).
        self._columns: dict[str, frozenset[str]] = {}
        #: ``term → {column: rows}`` handed over by a keyword warm-up for common terms (same validity).
        self._known: dict[str, dict[str, int]] = {}
        self._counted_at: Any = None
        self.tokenize = tokenize
        self._scratch = False
        self._vocab = False
        #: The last :meth:`phrase_specs` asked and answered (a hybrid search asks twice alike).
        self._specs_memo: tuple[tuple[tuple[str, str], ...], list[tuple[str, list[str], bool]]] | None = None

    def _ensure_scratch(self) -> None:
        if not self._scratch:
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_SCRATCH} USING fts5(text, stems, "
                              f"content='', tokenize='{self.tokenize}')")
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_SCRATCH}_i USING fts5vocab(temp, "
                              f"{_SCRATCH}, instance)")
            self._scratch = True

    def totals(self) -> tuple[int, float]:
        """``(rows, average document length over all columns)`` from the averages record."""
        row = self.conn.execute(f"SELECT block FROM {self.table}_data WHERE id = 1").fetchone()
        nums = read_varints(row[0]) if row and row[0] else [0]
        n_rows = max(1, nums[0])
        return n_rows, sum(nums[1:]) / n_rows

    def scores(self, phrases: Sequence[tuple[str, str]], docs: dict[int, str]) -> dict[int, float]:
        """FTS5 ``bm25()`` (negative, lower is better) of each row in ``docs`` (rowid → chunk text)
        matching at least one phrase; rows matching none are left out, as FTS5 would."""
        if not phrases or not docs:
            return {}
        conn = self.conn
        self._ensure_scratch()
        conn.execute("SAVEPOINT memdir_kw_scores")  # one read snapshot; the scratch work in one transaction
        try:
            return self._scores(phrases, docs)
        finally:
            conn.execute("RELEASE memdir_kw_scores")

    def doc_count(self, col: str, quoted: str) -> int:
        """Rows where the phrase occurs in the column (FTS5's ``nHit``), remembered per index state."""
        return self.doc_counts([(col, quoted)])[0]

    def doc_counts(self, phrases: Sequence[tuple[str, str]]) -> list[int]:
        """:meth:`doc_count` of each phrase; the index state is checked once for all of them.

        A one-token phrase's count is read from ``fts5vocab`` (``col`` rows: documents per term and
        column), which walks the term's document list without FTS5's MATCH machinery (about 4x
        faster than ``count(*)``, the same figure); other phrases are counted by a MATCH.
        """
        if self.generation is not None:
            now = self.generation()
            if now != self._counted_at:
                self._counts, self._columns, self._known, self._counted_at = {}, {}, {}, now
        missing = [p for p in dict.fromkeys(phrases) if p not in self._counts]
        if missing:
            found = self._vocab_counts(missing)
            for key in missing:
                hits = found.get(key)
                if hits is None:
                    col, quoted = key
                    (hits,) = self.conn.execute(f"SELECT count(*) FROM {self.table} WHERE {self.table} MATCH ?",
                                                (f"{col} : {quoted}",)).fetchone()
                found[key] = int(hits)
            if self.generation is not None:
                if len(self._counts) > 50_000:
                    self._counts.clear()
                    self._columns.clear()
                self._counts.update(found)
            return [found[p] if p in found else self._counts[p] for p in phrases]
        return [self._counts[p] for p in phrases]

    def adopt_counts(self, generation: Any, known: dict[str, dict[str, int]]) -> bool:
        """Take ``term → {column: rows}`` as a warm-up read it from ``fts5vocab`` at ``generation``,
        if that is the index's generation now (call inside the caller's read snapshot): counting
        those terms then reads nothing.  A long-lived process would otherwise walk a common term's
        document list once more for each new query word (a third of a settled search's first-run
        excess at 10k chunks), though the warm-up has read every count already."""
        if self.generation is None or generation is None:
            return False
        now = self.generation()
        if now != generation:
            return False
        if now != self._counted_at:
            self._counts, self._columns, self._counted_at = {}, {}, now
        self._known = known
        return True

    def held_counts(self) -> int:
        """Terms whose counts a warm-up handed over (``status``)."""
        return len(self._known)

    def columns(self, term: str) -> frozenset[str] | None:
        """The columns ``term`` occurs in at the index's current state, if a count read them."""
        if self.generation is None or not self._columns or self.generation() != self._counted_at:
            return None
        return self._columns.get(term)

    def _vocab_counts(self, phrases: Sequence[tuple[str, str]]) -> dict[tuple[str, str], int]:
        """Counts of the one-token, non-prefix phrases of a ``unicode61`` index from ``fts5vocab``."""
        if self.tokenize != "unicode61":
            return {}
        single: dict[str, list[tuple[str, str]]] = {}
        for col, quoted in phrases:
            if quoted.endswith("*"):
                continue
            tokens = kw_text.simple_tokens(quoted.strip('"').replace('""', '"'))
            if tokens is not None and len(tokens) == 1:
                single.setdefault(tokens[0], []).append((col, quoted))
        if not single:
            return {}
        out: dict[tuple[str, str], int] = {}
        for term, keys in single.items():
            per_col = self._known.get(term)
            if per_col is None:
                self._ensure_vocab()
                per_col = dict(self.conn.execute(f"SELECT col, doc FROM temp.{_VOCAB} WHERE term = ?", (term,)))
            if self.generation is not None:
                self._columns[term] = frozenset(c for c, n in per_col.items() if n)
            for col, quoted in keys:
                out[(col, quoted)] = int(per_col.get(col, 0))
        return out

    def _ensure_vocab(self) -> None:
        if not self._vocab:
            self.conn.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS temp.{_VOCAB} USING fts5vocab(main, "
                              f"{self.table}, col)")
            self._vocab = True

    def phrase_specs(self, phrases: Sequence[tuple[str, str]]) -> list[tuple[str, list[str], bool]]:
        """``(column, tokens, prefix)`` per phrase, tokenised as FTS5 does (in Python when simple)."""
        key = tuple(phrases)
        memo = self._specs_memo
        if memo is None or memo[0] != key:
            memo = self._specs_memo = (key, self._phrase_specs(phrases))
        return [(col, list(tokens), prefix) for col, tokens, prefix in memo[1]]

    def _phrase_specs(self, phrases: Sequence[tuple[str, str]]) -> list[tuple[str, list[str], bool]]:
        bodies = [q.rstrip("*").strip('"') for _, q in phrases]
        simple = [None if self.stem_counts is None else kw_text.simple_tokens(b) for b in bodies]
        if any(t is None for t in simple):
            self._ensure_scratch()
            simple = _phrase_tokens(self.conn, bodies)
        return [(col, list(tokens or []), quoted.endswith("*"))
                for (col, quoted), tokens in zip(phrases, simple, strict=True)]

    def _scores(self, phrases: Sequence[tuple[str, str]], docs: dict[int, str]) -> dict[int, float]:
        conn = self.conn
        n_rows, avgdl = self.totals()
        idf = []
        for hits in self.doc_counts(phrases):
            value = math.log((n_rows - hits + 0.5) / (hits + 0.5))
            idf.append(value if value > 0 else 1e-6)
        freqs = self.frequencies(self.phrase_specs(phrases), docs)
        rowids = list(docs)
        sizes = dict(conn.execute(
            f"SELECT id, sz FROM {self.table}_docsize WHERE id IN ({','.join('?' * len(rowids))})", rowids))
        out: dict[int, float] = {}
        for r in rowids:
            length = sum(read_varints(sizes[r])) if sizes.get(r) else 0
            out_r = bm25_sum(idf, freqs[r], length, avgdl)
            if out_r is not None:
                out[r] = out_r
        return out

    def frequencies(self, specs: list[tuple[str, list[str], bool]], docs: dict[int, str]) -> dict[int, list[int]]:
        """Each row's frequency of each phrase (``phrase_specs``), as FTS5 would count it."""
        freqs = self._fast_freqs(specs, docs)
        slow = {r: t for r, t in docs.items() if r not in freqs}
        if slow:
            freqs.update(self._scratch_freqs(specs, slow))
        return freqs

    def _fast_freqs(self, specs: list[tuple[str, list[str], bool]], docs: dict[int, str]) -> dict[int, list[int]]:
        """Phrase frequencies counted in Python, for the simple texts (:mod:`memdir.stores.kw_text`)."""
        if self.stem_counts is None or any(prefix or not tokens for _, tokens, prefix in specs):
            return {}
        if any(col == "stems" and len(tokens) != 1 for col, tokens, _ in specs):
            return {}
        stems = {tokens[0] for col, tokens, _ in specs if col == "stems"}
        out: dict[int, list[int]] = {}
        for r, text in docs.items():
            if not kw_text.is_simple(text):
                continue
            low = text.lower()
            if stems and (detect_language(text) != DEFAULT_LANGUAGE or has_camel_case(text)):
                continue  # counted below, in its own language, CamelCase words' parts too
            counted = kw_text.stem_counts(low, stems, stem_word) if stems else {}
            out[r] = [counted.get(tokens[0], 0) if col == "stems" else kw_text.phrase_count(low, tokens)
                      for col, tokens, _ in specs]
        return out

    def _scratch_freqs(self, specs: list[tuple[str, list[str], bool]], docs: dict[int, str]) -> dict[int, list[int]]:
        """Phrase frequencies from FTS5's own tokenizer: the texts go through a scratch table."""
        conn = self.conn
        self._ensure_scratch()
        rowids = list(docs)
        _clear(conn)
        stems = {tokens[0] for col, tokens, prefix in specs if col == "stems" and len(tokens) == 1 and not prefix}
        counted = self.stem_counts is not None and stems and all(
            len(tokens) == 1 and not prefix for col, tokens, prefix in specs if col == "stems")
        conn.executemany(f"INSERT INTO temp.{_SCRATCH}(rowid, text, stems) VALUES (?, ?, ?)",
                         [(r, self.text_value(docs[r]), "" if counted else self.stems_value(docs[r]))
                          for r in rowids])
        positions: dict[tuple[int, str, str], set[int]] = {}
        wanted = sorted({t for _, tokens, prefix in specs if not prefix for t in tokens})
        marks = ",".join("?" * len(wanted))
        rows = conn.execute(f"SELECT doc, col, term, offset FROM temp.{_SCRATCH}_i WHERE term IN ({marks})",
                            wanted).fetchall() if wanted else []
        for _col, tokens, prefix in specs:
            if prefix and tokens:
                start = tokens[-1]
                rows += [(d, c, start, o) for d, c, t, o in conn.execute(
                    f"SELECT doc, col, term, offset FROM temp.{_SCRATCH}_i WHERE term >= ? AND term < ?",
                    (start, start + "\U0010ffff"))]
        for doc, col, term, offset in rows:
            positions.setdefault((doc, col, term), set()).add(offset)
        if counted:  # one position per occurrence is all a one-word phrase's frequency needs
            assert self.stem_counts is not None
            for r in rowids:
                for stem, n in self.stem_counts(docs[r], stems).items():
                    positions[(r, "stems", stem)] = set(range(n))
        return {r: [_phrase_freq(positions, r, col, tokens) for col, tokens, _ in specs] for r in rowids}


def bm25_sum(idf: Sequence[float], freqs: Sequence[int], length: int, avgdl: float) -> float | None:
    """FTS5's ``bm25()`` of one row from its phrase frequencies; ``None`` when no phrase occurs."""
    norm = K1 * (1 - B + B * length / avgdl) if avgdl else K1
    total, matched = 0.0, False
    for w, freq in zip(idf, freqs, strict=True):
        if freq:
            matched = True
            total += w * (freq * (K1 + 1)) / (freq + norm)
    return -total if matched else None


def _phrase_freq(positions: dict[tuple[int, str, str], set[int]], doc: int, col: str, tokens: list[str]) -> int:
    """Occurrences of the token sequence in one column of one document."""
    if not tokens:
        return 0
    first = positions.get((doc, col, tokens[0]))
    if not first:
        return 0
    if len(tokens) == 1:
        return len(first)
    rest = [positions.get((doc, col, t)) for t in tokens[1:]]
    if any(not r for r in rest):
        return 0
    return sum(1 for p in first if all(p + i + 1 in r for i, r in enumerate(rest)))  # type: ignore[operator]
