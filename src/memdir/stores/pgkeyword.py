"""Keyword search for :mod:`memdir.stores.postgres`: BM25 over two ``tsvector`` columns.

The columns mirror SQLite's two FTS5 columns (exact words, and word stems), so both backends
rank alike:

* ``tsv`` — every token, unstemmed (``simple``): exact words, numbers, identifiers, CJK;
* ``tsv_stem`` — word stems.  With the default ``english`` configuration, memdir's own: the
  stems SQLite's ``stems`` column holds (:func:`memdir.textutil.stem_text`: each note stemmed in
  its own language, Latin words of three letters or more, no stop word dropped), looked up with
  the stems SQLite's query looks up (:func:`memdir.query.stemmed_terms`), so both backends find
  the same notes and score them alike.  Any other configuration (``german``, ``simple``…) is
  PostgreSQL's own: its stems and stop words.

A query is a set of *phrases*: each keyword term on ``tsv`` (Hangul as a prefix, CJK and
identifiers as phrases), and each Latin word again on ``tsv_stem``; a note with the exact word
matches both and ranks above one that shares only the stem.

**Ranking is BM25 with FTS5's formula** (k1 = 1.2, b = 0.75, ``idf = ln((N − n + 0.5) / (n +
0.5))`` floored at 1e-6, summed over phrases), not ``ts_rank_cd``:

* tf — ``ts_rank_cd`` with unit weights and no normalisation, for one phrase, *is* its number
  of occurrences (cover density of a single lexeme or phrase);
* n (document frequency) — counted over the matching rows in the same statement (a window
  ``count(*) FILTER``), so search needs no term-statistics table that every write would update;
* N and the average length — kept per index generation (``indexes.n_docs``/``total_len``),
  updated by each write; a document's length counts both columns' tokens, as FTS5's does.

``ts_rank_cd`` (cover density, length-normalised) is kept as an alternative for measurement.
:func:`keyword_scores` scores chosen chunks with the same figures: document frequencies come
from the last search with the same terms (cached per generation *version*, which every write
bumps) or from a count over the GIN index, term frequencies from the chunks' own rows.
"""

from __future__ import annotations

import math
import re
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from memdir import query
from memdir.stemming import english_word, is_latin_word
from memdir.textutil import fts_text, has_han_or_kana, has_hangul, latin_fold_table, stem, stem_text

K1, B = 1.2, 0.75
#: Separators: everything but letters and digits (``_`` too, as for ``unicode61``: PostgreSQL's
#: parser splits ``user_id`` in two as well, but :func:`doc_length` counted it as one word).
_NON_WORD = re.compile(r"[\W_]+")
#: How :func:`pg_text` and :func:`stem_column` spell an index's text; an index built with another
#: spelling is rebuilt (:meth:`memdir.stores.postgres.PostgresStore.rebuild_reason`).  2: Latin
#: letters lose their diacritics, and ``_`` is a separator in the stored document lengths.  3: the
#: ``english`` stems column holds memdir's stems, as SQLite's does.
TEXT_FORM = 3
#: The text search configuration whose stems column holds memdir's own stems (the default).
MEMDIR_STEMS_CONFIG = "english"


def memdir_stems(ts_config: str) -> bool:
    """Whether ``ts_config`` (``textSearchConfig``) means memdir's stems, as SQLite indexes them.

    PostgreSQL's ``english`` configuration stemmed every token, identifiers and numbers included,
    dropped stop words and stemmed German or French notes by English rules, where SQLite stems
    Latin words only, each note in its own language: "users" found a note saying only
    ``user_id`` on PostgreSQL, "kunde" one saying "Kunden" on SQLite alone, and stop words
    scored lower."""
    return ts_config.rpartition(".")[2] == MEMDIR_STEMS_CONFIG


def stem_column(text: str, ts_config: str) -> tuple[str, str]:
    """``(configuration, text)`` whose ``to_tsvector`` is a chunk's ``tsv_stem``."""
    if memdir_stems(ts_config):
        return "simple", pg_text(stem_text(text))
    return ts_config, pg_text(text)


def pg_text(text: str) -> str:
    """What the text search parser sees: CJK spaced, punctuation made a separator, Latin letters
    without their diacritics, as FTS5's ``unicode61`` reads text.

    PostgreSQL's ``simple`` configuration keeps accents, so on PostgreSQL "cafe" found no note
    saying "café" (nor "resume" one saying "résumé", "Muller" one saying "Müller"), and "café" no
    note saying "cafe", where SQLite finds them."""
    text = fts_text(text)
    if not text.isascii():
        text = text.translate(latin_fold_table())
    return _NON_WORD.sub(" ", text)


def doc_length(text: str) -> int:
    """Tokens in both keyword columns, as FTS5 counts a row's length over its two columns."""
    return len(pg_text(text).split()) + len(stem_text(text).split())


@dataclass(frozen=True)
class Phrase:
    column: str  # "tsv" or "tsv_stem"
    sql: str  # a tsquery expression with %s placeholders
    params: tuple[Any, ...]
    #: The same text as a tsvector (same parameters): its one lexeme, when it has one, is looked up
    #: among the generation's frequent lexemes.  ``None``: never pruned (a prefix query).
    lexemes: str | None = None


def phrases(terms: Sequence[str], ts_config: str, pg_text: Any) -> list[Phrase]:
    """The exact phrase of every term, then the stem phrase of every Latin word (one per stem)."""
    out: list[Phrase] = []
    clean = list(dict.fromkeys(t.replace('"', "").strip().lower() for t in terms if t and t.strip()))
    for term in clean:
        spelt = pg_text(term).strip()  # as the column holds it: "à가" (a Latin letter with its accent)
        # never matched the prefix of "a가", found by the same search on SQLite
        if has_hangul(term) and not has_han_or_kana(term) and spelt and " " not in spelt:
            out.append(Phrase("tsv", "to_tsquery('simple', quote_literal(%s) || ':*')", (spelt,)))
        else:
            out.append(Phrase("tsv", "phraseto_tsquery('simple', %s)", (pg_text(term),), "to_tsvector('simple', %s)"))
    if memdir_stems(ts_config):
        # the stems SQLite's query looks up (:func:`memdir.query.fts5_phrases`), in the same order
        stems = dict.fromkeys(pg_text(s) for s in (query.stemmed_terms(list(terms)) if query.STEMMING else []))
        out.extend(Phrase("tsv_stem", "phraseto_tsquery('simple', %s)", (s,), "to_tsvector('simple', %s)")
                   for s in stems if s.strip())
        return out
    seen: set[str] = set()
    for term in clean:
        # without its accents, as the column holds the notes' words (:func:`pg_text`): "café" had no
        # stem phrase, and found no note saying "cafés"
        word = (english_word(term) if is_latin_word(term) else None) or term
        key = stem(word)
        if key and key not in seen:
            seen.add(key)
            out.append(Phrase("tsv_stem", "plainto_tsquery(%s::regconfig, %s)", (ts_config, word),
                              "to_tsvector(%s::regconfig, %s)"))
    return out


#: Below this many chunks every phrase is kept (a small index is ranked in a few ms anyway), as in SQLite.
PRUNE_MIN_ROWS = 2000
#: Frequent lexemes are counted again once this share of the generation's chunks has been rewritten.
RECOUNT_CHURN = 0.05


def frequent_sql(ps: list[Phrase], ix: int) -> tuple[str, list[Any]] | None:
    """Which phrases are certainly in at least half of generation ``ix``'s chunks, with a lower bound
    on their document frequency: ``(phrase index, bound)`` rows.

    BM25's IDF is floored at 1e-6 from half the documents on (``ln((N - n + 0.5) / (n + 0.5)) <= 0``),
    so such a phrase changes no score by more than ~2e-6, yet matching it visits most rows: like
    SQLite, memdir leaves it out of the match.  ``frequent_lexemes`` holds the lexemes found in at
    least half of the chunks when last counted; ``churn`` counts the chunks written or deleted since,
    so ``ndoc - churn`` is a lower bound that stays true between counts.
    """
    values, params = [], []
    for i, ph in enumerate(ps):
        if ph.lexemes is not None:
            values.append(f"({i}, '{ph.column}', {ph.lexemes}, {ph.sql})")
            params += [*ph.params, *ph.params]
    if not values:
        return None
    sql = (f"SELECT p.i, f.ndoc - ix.churn FROM (VALUES {', '.join(values)}) AS p(i, col, v, q) "
           "JOIN indexes ix ON ix.id = %s JOIN frequent_lexemes f ON f.index_id = ix.id AND f.col = p.col "
           "AND length(p.v) = 1 AND numnode(p.q) = 1 AND f.lexeme = (tsvector_to_array(p.v))[1] "
           "WHERE ix.frequent_at IS NOT NULL AND ix.n_docs >= %s AND f.ndoc - ix.churn >= ix.n_docs / 2.0")
    return sql, [*params, ix, PRUNE_MIN_ROWS]


def count_frequent_sql(ix: int, column: str) -> tuple[str, tuple[Any, ...]]:
    """Insert the lexemes of ``column`` found in at least half of generation ``ix``'s chunks."""
    return ("INSERT INTO frequent_lexemes(index_id, col, lexeme, ndoc) SELECT %s, %s, word, ndoc FROM ts_stat(%s) "
            "WHERE ndoc >= (SELECT n_docs FROM indexes WHERE id = %s) / 2.0",
            (ix, column, f"SELECT {column} FROM chunks WHERE index_id = {int(ix)}", ix))


def search_sql(ps: list[Phrase], scope_sql: str, scope_arg: Any, ranking: str, limit: int,
               cols: str) -> tuple[str, list[Any]]:
    """One statement: match, score, keep the best ``limit``, fetch their rows.

    Returns ``cols`` of each hit, its score, then the document frequency of every phrase.

    BM25 runs in two passes so its cost stays near a boolean match per row: every matching row
    is scored with tf = 1 per phrase it contains (``@@`` is cheap; ``ts_rank_cd`` is not), which
    also yields the exact document frequencies; the best ``PREFILTER`` of those are scored again
    with their true term frequencies.  A row outside that pool would need a far higher tf than the
    rows inside it to overtake them, and the pool is several times the result count.
    """
    n = len(ps)
    params: list[Any] = [p for ph in ps for p in ph.params] + [scope_arg]
    qcols = ", ".join(f"{ph.sql} AS q{i}" for i, ph in enumerate(ps))
    match = " OR ".join(f"c.{ph.column} @@ q.q{i}" for i, ph in enumerate(ps))
    head = (f"WITH q AS MATERIALIZED (SELECT {qcols}), ix AS MATERIALIZED (SELECT id, n_docs, total_len "
            f"FROM indexes WHERE id = {scope_sql}), ")
    if ranking == "ts_rank_cd":
        # PostgreSQL's cover density over the exact column, length-normalised (1), into (0, 1) (32).
        exact = " || ".join(f"q.q{i}" for i, ph in enumerate(ps) if ph.column == "tsv") or "''::tsquery"
        flags = ", ".join(f"coalesce((c.{ph.column} @@ q.q{i})::int, 0) AS b{i}" for i, ph in enumerate(ps))
        dfs = ", ".join(f"sum(b{i}) OVER () AS n{i}" for i in range(n))
        body = (f"m AS (SELECT c.id, ts_rank_cd(c.tsv, {exact}, 1|32)::float8 AS score, {flags} FROM chunks c, q, ix "
                f"WHERE c.index_id = ix.id AND ({match})), s AS (SELECT m.*, {dfs} FROM m ORDER BY score DESC, "
                f"m.id LIMIT %s) ")
        params.append(int(limit))
    else:
        # Pass 1 — which phrase each matching row contains, straight from the GIN index (one bitmap scan
        # per phrase, reading id, length and place), giving exact document frequencies and a tf = 1 score.
        hits = " UNION ALL ".join(f"SELECT c.id, c.doc_len, c.source, c.path, c.start_line, {i} AS i FROM chunks c, "
                                  f"q, ix WHERE c.index_id = ix.id AND c.{ph.column} @@ q.q{i}"
                                  for i, ph in enumerate(ps))
        norm = f"({K1} * (1 - {B} + {B} * {{dl}} / greatest(ix.total_len::float8 / greatest(ix.n_docs, 1), 1)))"
        idf = "greatest(ln(greatest((ix.n_docs - st.n + 0.5)::float8 / (st.n + 0.5), 1e-9)), 1e-6)"
        per = ", ".join(f"coalesce((SELECT idf FROM w WHERE i = {i}), 0) AS idf{i}, "
                        f"coalesce((SELECT n FROM w WHERE i = {i}), 0) AS n{i}" for i in range(n))
        # Pass 2 — the best PREFILTER rows again, with their true term frequencies.
        tfs = [f"coalesce(ts_rank_cd('{{1,1,1,1}}', c.{ph.column}, q.q{i}, 0), 0)::float8" for i, ph in enumerate(ps)]
        dl = norm.format(dl="c.doc_len")
        full = " + ".join(f"(CASE WHEN {tf} > 0 THEN wi.idf{i} * {tf} * {K1 + 1} / ({tf} + {dl}) ELSE 0 END)"
                          for i, tf in enumerate(tfs))
        body = (f"hits AS ({hits}), st AS (SELECT i, count(*) AS n FROM hits GROUP BY i), "
                f"w AS (SELECT st.i, st.n, {idf} AS idf FROM st, ix), wi AS (SELECT {per}), "
                f"p AS (SELECT h.id, h.source, h.path, h.start_line, sum(w.idf) * {K1 + 1} / "
                f"(1 + {norm.format(dl='h.doc_len')}) AS pre FROM hits h JOIN w USING (i), ix GROUP BY h.id, "
                f"h.doc_len, h.source, h.path, h.start_line, ix.n_docs, ix.total_len ORDER BY pre DESC, "
                f"{TIES.format(t='h')} LIMIT %s), "
                f"s AS (SELECT p.id, p.source, p.path, p.start_line, wi.*, {full} AS score FROM p JOIN chunks c ON "
                f"c.index_id = (SELECT id FROM ix) AND c.id = p.id, q, ix, wi ORDER BY score DESC, "
                f"{TIES.format(t='p')} LIMIT %s) ")
        params += [max(PREFILTER, 4 * int(limit)), int(limit)]
    ties = TIES.format(t="c") if ranking != "ts_rank_cd" else "c.id"
    sql = (head + body + f"SELECT {cols}, s.score, {', '.join(f's.n{i}' for i in range(n))} FROM s "
           f"JOIN chunks c ON c.index_id = (SELECT id FROM ix) AND c.id = s.id ORDER BY s.score DESC, {ties}")
    return sql, params


#: Rows re-scored with true term frequencies (at least four times the result count).
PREFILTER = 200
#: Chunks of equal score in reading order (each file's lines in order, files by name, as Python sorts
#: them): by chunk id, a hash, equal scores came in no order a reader knows, and not in SQLite's,
#: whose index returns them in the order it wrote them (a fresh build: the same).
TIES = '{t}.source COLLATE "C", {t}.path COLLATE "C", {t}.start_line'


def _term(_alias: str, tf: str, df: str, doc_len: str) -> str:
    """One phrase's BM25 contribution in SQL (FTS5's formula; ``ix`` supplies N and the total length)."""
    norm = f"({K1} * (1 - {B} + {B} * {doc_len} / greatest(ix.total_len::float8 / greatest(ix.n_docs, 1), 1)))"
    return (f"(CASE WHEN {tf} > 0 THEN greatest(ln(greatest((ix.n_docs - {df} + 0.5)::float8 / ({df} + 0.5), "
            f"1e-9)), 1e-6) * {tf} * {K1 + 1} / ({tf} + {norm}) ELSE 0 END)")


def bm25(tfs: Sequence[float], dfs: Sequence[int], doc_len: int, n_docs: int, total_len: int) -> float:
    """The BM25 of one chunk (the figure :func:`search_sql` computes), before the (0, 1) mapping."""
    avgdl = max(total_len / max(n_docs, 1), 1.0)
    norm = K1 * (1 - B + B * doc_len / avgdl)
    score = 0.0
    for tf, df in zip(tfs, dfs, strict=True):
        if tf > 0:
            idf = max(math.log(max((n_docs - df + 0.5) / (df + 0.5), 1e-9)), 1e-6)
            score += idf * tf * (K1 + 1) / (tf + norm)
    return score


class DfCache:
    """Document frequencies of recent phrases per (generation, version): exact until the next write."""

    def __init__(self, size: int = 512):
        self.size = size
        self._data: OrderedDict[tuple[Any, ...], int] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: tuple[Any, ...]) -> int | None:
        with self._lock:
            if key in self._data:
                self._data.move_to_end(key)
                return self._data[key]
        return None

    def put(self, key: tuple[Any, ...], value: int) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.size:
                self._data.popitem(last=False)
