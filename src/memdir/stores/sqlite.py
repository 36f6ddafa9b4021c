"""The SQLite index (the default store): schema (R§4), per-file writes, keyword and vector
queries, embedding cache, and the atomic full rebuild.

Tables: ``meta``, ``files``, ``chunks`` (text + float32 embedding blob: the only copy of a chunk's
vectors), ``chunks_fts`` (FTS5), ``vec_log`` (which chunks gained or lost vectors, so an
in-process matrix can follow: :mod:`memdir.stores.vectors`) and ``embedding_cache``.  Everything
here is derived from the Markdown files and can be rebuilt.  Chunk ids and text hashes (64-hex
SHA-256) are stored as their 32 bytes (:func:`hex_key`) and handed out as the same strings.
:class:`SqliteStore` implements :class:`memdir.stores.base.Store`; see there for the contract.

A full rebuild is built in a temporary database beside the index (``<index>.tmp-<id>``) and
copied into the live file within one transaction: the index file is never renamed, so a live
reader's WAL or shared-memory file can never be paired with a new database.  The one exception
is a *damaged* index, which :meth:`SqliteStore.recover` moves aside (see
:mod:`memdir.stores.sqlite_health`); :meth:`SqliteStore.open` does that on open, and callers do
it when a damage error surfaces later.
"""

from __future__ import annotations

import json
import math
import os
import threading
import time
import weakref
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memdir import db
from memdir.atomic_write import temps_of
from memdir.errors import IndexDamaged, StoreError
from memdir.lock import FileWriterLock
from memdir.query import fts5_phrases, match_phrases, trigram_phrases
from memdir.stores import sqlite_health as health
from memdir.stores import vectors as vecs
from memdir.stores.base import ChunkRow, Hit, lru_stamp
from memdir.stores.sqlite_lifecycle import REBUILD_TEMP, SQLITE_FILES, SqliteLifecycle
from memdir.stores.vector_sidecar import remove_leftovers as remove_sidecar_leftovers
from memdir.stores.vector_sidecar import remove_newer as remove_newer_sidecar
from memdir.stores.vector_sidecar import sidecar_path
from memdir.textutil import LazyPattern, fts_text, fts_values, stem_counts, stem_text

if TYPE_CHECKING:
    import numpy as np

META_KEY = "memory_index_meta_v1"
STATE_PREFIX = "memdir:"
SCHEMA_VERSION = 1
_CHUNK_COLUMNS = ("id, path, source, start_line, end_line, hash, model, text, embedding, updated_at, ts, "
                  "date_start, date_end")
#: The vector a chunk holds for a cache entry ``e`` that is only a reference (an empty blob):
#: the embedding cache keeps no second copy of vectors that live chunks hold.
_HELD = ("SELECT c.embedding FROM {db}chunks c WHERE c.hash = e.hash AND c.embedding IS NOT NULL "
         "AND c.model = e.model AND length(c.embedding) = e.dims * 4 LIMIT 1")
#: A cache entry of a text some chunk holds now (what ``memdir migrate`` copies): the rest, texts no
#: note holds any more, went into PostgreSQL's shared cache as its newest entries, and the next prune
#: (``cache.maxEntries``) evicted the other agents' entries for them.
_IN_USE = "(e.hash, e.model) IN (SELECT hash, model FROM chunks)"  # (one pass: a list SQLite makes once)
_HIT_COLUMNS = "c.id, c.path, c.source, c.start_line, c.end_line, c.text, c.ts, c.date_start, c.date_end"


def to_blob(vector: Sequence[float]) -> bytes:
    import numpy as np  # NumPy is imported when vectors are touched: a keyword search never needs it

    return np.asarray(vector, dtype="<f4").tobytes()


def from_blob(blob: bytes | None) -> np.ndarray:
    import numpy as np

    if not blob:
        return np.zeros(0, dtype=np.float32)
    return np.frombuffer(blob, dtype="<f4")


def sound_vector(blob: bytes | None, width: int) -> np.ndarray | None:
    """``blob``'s floats when they can be a stored vector: whole vectors of ``width`` floats (any
    whole number of floats when ``width`` is unknown), all finite; ``None`` for damaged bytes.

    Why: :meth:`SqliteStore.export_files` handed ``memdir migrate`` a vector with a NaN as it was
    (PostgreSQL took it as 0 and kept it in the team's cache, where no rebuild replaced it), and one
    of 4k+1 bytes stopped the migration with NumPy's "buffer size must be a multiple of element size".
    """
    import numpy as np

    if not blob or len(blob) % (4 * max(1, width)):
        return None
    vector = from_blob(blob)
    return vector if np.isfinite(vector).all() else None


def max_cosine(blob: bytes, q: np.ndarray) -> float | None:
    """Cosine of ``q`` (unit length) with the best of the vectors concatenated in ``blob``."""
    import numpy as np

    if not blob or len(blob) % (4 * q.size):
        return None
    m = np.frombuffer(blob, dtype="<f4").reshape(-1, q.size)
    norms = np.linalg.norm(m, axis=1)
    norms[norms == 0] = 1.0
    sims = (m @ q) / norms
    # a window holding NaN or infinity (a damaged blob) has no direction: 0, as in the matrix
    return float(np.max(np.where(np.isfinite(sims), sims, 0.0)))


def bm25_to_score(rank: float) -> float:
    """FTS5 bm25 (more negative = better) → (0, 1): ``r/(1+r)`` with ``r = −rank`` (R§7 [v4.12])."""
    if rank is None or not math.isfinite(rank):
        return 0.001
    if rank < 0:
        r = -rank
        return r / (1 + r)
    return 1 / (1 + rank)


#: The embedding cache and the indexes only vectors need, created when the first vector is cached
#: (:func:`ensure_cache`): a keyword-only index never has them.  Each table or index costs a page
#: even when empty (five of them were 40 KB, 2% of a 1k-chunk keyword-only index).
_CACHE_SCHEMA = """
CREATE TABLE IF NOT EXISTS {db}embedding_cache(
    provider TEXT NOT NULL, model TEXT NOT NULL, provider_key TEXT NOT NULL,
    hash TEXT NOT NULL, embedding BLOB NOT NULL, dims INTEGER NOT NULL,
    updated_at INTEGER NOT NULL, PRIMARY KEY(provider, model, provider_key, hash));
CREATE INDEX IF NOT EXISTS {db}idx_cache_updated ON embedding_cache(updated_at);
CREATE INDEX IF NOT EXISTS {db}idx_cache_hash ON embedding_cache(hash);
CREATE INDEX IF NOT EXISTS {db}idx_chunks_hash ON chunks(hash) WHERE embedding IS NOT NULL;
"""


def has_cache(conn: Any, schema: str = "main") -> bool:
    """Whether the index (or an attached one) has an embedding cache table at all."""
    return conn.execute(f"SELECT 1 FROM {schema}.sqlite_master WHERE type = 'table' AND name = 'embedding_cache'"
                        ).fetchone() is not None


def ensure_cache(conn: Any, schema: str = "main") -> None:
    """Create the embedding cache (and the index of chunks holding vectors) if missing: inside the
    caller's transaction, so a rolled-back write leaves no empty table behind."""
    if not has_cache(conn, schema):
        for stmt in _CACHE_SCHEMA.format(db=f"{schema}.").split(";"):
            if stmt.strip():
                conn.execute(stmt)


def _copy_cache(conn: Any, schema: str) -> None:
    """Copy an attached index's embedding cache, references resolved to the vectors its chunks hold;
    hashes as this index stores them (an index before schema 4 kept them as hex text).  No cache
    (or an empty one) creates none here."""
    if not has_cache(conn, schema) or conn.execute(
            f"SELECT NOT EXISTS (SELECT 1 FROM {schema}.embedding_cache)").fetchone()[0]:
        return
    ensure_cache(conn)
    conn.create_function("memdir_hex_key", 1, lambda v: hex_key(v) if isinstance(v, str) else v, deterministic=True)
    conn.execute(
        f"INSERT OR IGNORE INTO embedding_cache SELECT * FROM (SELECT e.provider, e.model, e.provider_key, "
        f"memdir_hex_key(e.hash), "
        f"CASE WHEN length(e.embedding) > 0 THEN e.embedding ELSE ({_HELD.format(db=schema + '.')}) END AS emb, "
        f"e.dims, e.updated_at FROM {schema}.embedding_cache e) WHERE length(emb) > 0")


def _columns(conn: Any, schema: str, table: str) -> list[tuple[Any, ...]]:
    return [tuple(row[1:]) for row in conn.execute(f"PRAGMA {schema}.table_info({table})")]


def _same_tables(conn: Any, schema: str, tables: Sequence[str]) -> None:
    """Make each of ``tables`` in the live index again as the attached ``schema`` has it (with its
    indexes), where their columns differ: an index a newer memdir wrote (a column more) failed
    every rebuild's copy ("table main.files has 6 columns but 5 values were supplied") for ever."""
    for table in tables:
        live = _columns(conn, "main", table)
        if not live or live == _columns(conn, schema, table):
            continue
        conn.execute(f"DROP TABLE main.{table}")
        # unqualified, as sqlite_master keeps it: created in main; the table before its indexes
        for (sql,) in conn.execute(f"SELECT sql FROM {schema}.sqlite_master WHERE tbl_name = ? AND sql IS NOT NULL "
                                   "ORDER BY type != 'table'", (table,)).fetchall():
            conn.execute(sql)


#: FTS5's pending-terms limit while a rebuild's shadow is filled (see :meth:`SqliteStore._bulk_begin`).
BULK_FTS_HASH_BYTES = 8 << 20


class _BulkLoad:
    """What a rebuild's shadow store tracks while it is filled: the files written so far, and the
    rowid the next chunk gets (SQLite's own choice, ``max(rowid) + 1``, known without asking it,
    so that a file's rows are written by one ``executemany``)."""

    __slots__ = ("next_rowid", "written")

    def __init__(self, next_rowid: int) -> None:
        self.written: set[tuple[str, str]] = set()
        self.next_rowid = next_rowid


def hex_key(value: str) -> bytes | str:
    """How the index stores a chunk id or a text hash: a 64-hex one (SHA-256, what
    :func:`memdir.chunking.chunk_id` and ``sha256_text`` make) as its 32 bytes, half the size in
    the tables and in their indexes (at 10k chunks, ids and hashes were 2 MB of an 18 MB
    keyword-only index); any other value as it is."""
    if len(value) == 64:
        try:
            key = bytes.fromhex(value)
        except ValueError:
            return value
        if len(key) == 32 and key.hex() == value:  # not upper case, no spaces: the same string back
            return key
    return value


def hex_str(stored: bytes | str) -> str:
    """The id or hash a stored value stands for (the inverse of :func:`hex_key`)."""
    return stored.hex() if isinstance(stored, bytes) else stored


def _hit(row: Sequence[Any], score: float) -> Hit:
    """A :class:`Hit` from a row selected with ``_HIT_COLUMNS``."""
    return Hit(hex_str(row[0]), row[1], row[2], row[3], row[4], row[5], score, row[6], row[7], row[8])


#: Forks this process descends from (moved in a forked child: see :meth:`_UseLock.__enter__`).
_FORKS = [0]
#: The open stores of this process, so that a fork can leave the child no used connection.
_STORES: weakref.WeakSet[SqliteStore] = weakref.WeakSet()
#: Stores whose lock the forking thread holds across ``fork()``: no thread is inside their connection.
_IDLE_AT_FORK: list[SqliteStore] = []


def _before_fork() -> None:
    """Take the lock of every store no thread is using (never wait: a fork is not held up)."""
    for store in list(_STORES):
        if not store.lock.owned() and store.lock.acquire(blocking=False):
            _IDLE_AT_FORK.append(store)


def _after_fork_in_parent() -> None:
    while _IDLE_AT_FORK:
        _IDLE_AT_FORK.pop().lock.release()


def _after_fork_in_child() -> None:
    """Close the connections the parent left idle; the child's first use opens its own.

    Why: SQLite counts the locks of every connection of a process to one file together, and
    the kernel's locks are not inherited, so a child keeping the parent's connection open took
    no shared lock on the index with its own (with the parent gone, another process could
    checkpoint and delete the WAL under it).  Closed here, no thread being inside them, they
    give their counts back (the parent's own locks are the parent's: closing cannot release or
    checkpoint for it).  A connection a parent thread was using at the fork is left unused."""
    _FORKS[0] += 1
    while _IDLE_AT_FORK:
        store = _IDLE_AT_FORK.pop()
        try:
            store.conn.close()
        except Exception:
            pass
        store.lock.release()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_parent=_after_fork_in_parent,
                        after_in_child=_after_fork_in_child)


class _UseLock:
    """The store's re-entrant lock, remembering when it was last let go: a background warm-up reads
    only while no search has used the store for a moment (:mod:`memdir.stores.kw_warmup`).
    ``on_use`` runs whenever a thread takes it first (not when it takes it again inside)."""

    __slots__ = ("_depth", "_forks", "_lock", "last_release", "on_use")

    def __init__(self, on_use: Callable[[], None] | None = None) -> None:
        self._lock = threading.RLock()
        self._depth = 0
        self._forks = _FORKS[0]
        self.last_release = time.monotonic()
        self.on_use = on_use

    def __enter__(self) -> _UseLock:
        if self._forks != _FORKS[0]:
            # A forked child: held by one of the parent's other threads, which do not exist here,
            # the lock would stay held forever; it starts over (unless the forking thread holds it).
            self._forks = _FORKS[0]
            if not self._lock._is_owned():  # type: ignore[attr-defined]
                self._lock, self._depth = threading.RLock(), 0
        self._lock.acquire()
        self._depth += 1
        if self._depth == 1 and self.on_use is not None:
            try:
                self.on_use()
            except BaseException:
                self.__exit__()
                raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if not self._depth:
            self.last_release = time.monotonic()
        self._lock.release()

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()

    def owned(self) -> bool:
        """Whether the calling thread holds the lock."""
        return bool(self._lock._is_owned())  # type: ignore[attr-defined]

    def idle_for(self) -> float:
        """Seconds since the lock was last let go (0 while someone holds it)."""
        return 0.0 if self._depth else time.monotonic() - self.last_release


#: Connections a forked child inherited from its parent: never used (SQLite: a connection must
#: not be carried across ``fork()``).  Those no thread was using at the fork were closed by
#: :func:`_after_fork_in_child`; one a parent thread was inside is kept open, unused, for the
#: life of the child (closing it could wait for ever on its mutex).
_INHERITED: list[Any] = []



#: A keyword token as FTS5's ``unicode61`` cuts them, near enough to tell whether words leave (an
#: underscore parts words there, as any other character that is no letter or digit).
_TOKEN: Any = LazyPattern(r"[^\W_]+")


def _words_leave(old: Sequence[tuple[str, str]], new: Sequence[tuple[str, str]]) -> bool:
    """Whether some word of a file's old keyword values (text and stems) is in none of its new
    ones: an edit that removes words (a password edited away) rather than adds them (an append)."""
    kept = {w for values in new for col in values for w in _TOKEN.findall(col.lower())}
    return any(w not in kept for values in old for col in values for w in _TOKEN.findall(col.lower()))


class SqliteStore(SqliteLifecycle):
    """A connection to one index file, safe to share between threads (calls are serialised)."""

    def __init__(self, path: Path, *, fts_tokenizer: str = "unicode61", vector_enabled: bool = True,
                 extension_path: str | None = None, readonly: bool = False, page_size: int | None = None,
                 auto_vacuum: bool = False):
        self.path = Path(path)
        self.new_page_size = page_size or db.PAGE_SIZE
        self.new_auto_vacuum = auto_vacuum
        self.fts_tokenizer = fts_tokenizer
        self.vector_enabled = vector_enabled
        self.extension_path = extension_path
        self.readonly = readonly
        #: Why a writable open fell back to read-only (``None`` when writable or asked read-only).
        self.readonly_reason: str | None = None
        self.location = str(self.path)
        self.lock = _UseLock(self._on_use)
        #: The process that opened :attr:`conn` (a forked child opens its own).
        self._pid = os.getpid()
        _STORES.add(self)
        self.fts_error: str | None = None
        self.matrix = vecs.VectorMatrix()
        self._scorer: Any = None
        self._postings: Any = None
        #: The keyword warm-up of a long-lived process (:mod:`memdir.stores.kw_warmup`), once started.
        self._warmup: Any = None
        #: The first damage error a search ran into (the caller then recovers the index).
        self.damage: str | None = None
        #: What :meth:`recover` did last: ``{"problem", "corruptPath", "salvagedCacheEntries"}``.
        self.recovery: dict[str, Any] | None = None
        self._identity: tuple[int, int] | None = None
        #: Set while this store is a rebuild's shadow being filled (:meth:`_bulk_begin`).
        self._bulk: _BulkLoad | None = None
        #: ``((connection, data_version, total_changes), vec_log state)`` (see :meth:`_log_state`).
        self._state_memo: tuple[Any, tuple[str | None, int, int]] | None = None
        #: ``(epoch, last seq, that entry's mark)`` of the change log when last read (:meth:`_check_history`).
        self._log_mark: tuple[str | None, int, Any] | None = None
        #: ``(the same key, every file's row)`` of the last :meth:`file_rows` of all files.
        self._rows_memo: tuple[Any, dict[tuple[str, str], tuple[str, int, int]]] | None = None
        #: ``((terms, stemming), phrases)`` of the last :meth:`_phrases`.
        self._phrases_memo: tuple[Any, list[tuple[str, str]]] | None = None
        #: ``(generation, {rowid: hit columns}, {chunk id: rowid})``: rows :meth:`_hits_by_rowid`
        #: read at that generation.
        self._hit_rows: tuple[Any, dict[int, tuple[Any, ...]], dict[str, int]] = (None, {}, {})
        self._open()

    def _open(self) -> None:
        # A new connection (first open, reopen, recovery): warm state read through the old one goes.
        self._stop_warmup()
        self._scorer = None
        self._postings = None
        self._state_memo = self._log_mark = None
        self._hit_rows = (None, {}, {})
        super()._open()
        self._pid = os.getpid()
        self.matrix = vecs.VectorMatrix(sidecar_path(self.path), save=not self.readonly)

    def _on_use(self) -> None:
        """Before a thread uses the connection: in a forked child, open one of its own; and roll
        back a transaction that a call interrupted (a Ctrl-C between its BEGIN or SAVEPOINT and
        its end) left open: it held an old read snapshot (searches never saw another write) and
        failed every later write ("cannot start a transaction within a transaction")."""
        if self._pid != os.getpid():
            _INHERITED.append(self.conn)
            self._warmup = None  # its thread is the parent's
            self._open()
            return
        try:
            stray = self._bulk is None and self.conn.in_transaction  # (a rebuild's shadow stays in one)
        except Exception:  # closed: the call says so itself
            return
        if stray:
            self._forget_state()
            self.conn.execute("ROLLBACK")

    # -- small state kept beside the index ---------------------------------------------------
    def get_state(self, key: str) -> Any:
        with self.lock:
            try:
                row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (STATE_PREFIX + key,)).fetchone()
            except Exception as exc:
                if "no such table" in str(exc):
                    return None
                raise
        try:
            return json.loads(row[0]) if row else None
        except ValueError:
            return None

    def set_state(self, key: str, value: Any) -> None:
        if value is None:
            self.conn.execute("DELETE FROM meta WHERE key = ?", (STATE_PREFIX + key,))
        else:
            self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)",
                              (STATE_PREFIX + key, json.dumps(value, sort_keys=True)))

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Close the connection and let go of everything held warm at once (postings, vectors,
        rows): the store's parts refer to one another (the scorer's and warm-up's callbacks, the
        lock's), so without this they lingered until the cyclic GC ran, and a process opening one
        ``Memory`` after another held several indexes' worth (14 MiB more at 10k chunks in
        ``bench speed``'s search process)."""
        self._stop_warmup(wait=True)
        with self.lock:
            try:
                self.conn.close()
            except Exception:
                pass
            self._scorer = self._postings = self._state_memo = self._phrases_memo = None
            self._hit_rows = (None, {}, {})
            self.matrix = vecs.VectorMatrix()

    @contextmanager
    def transaction(self) -> Iterator[Any]:
        with self.lock:
            if self._bulk is not None:
                # A rebuild's shadow being filled: already in the bulk load's transaction.  No
                # savepoint: FTS5 writes out its pending terms at every one.  A failure fails the
                # whole build, whose shadow is discarded once its embedding cache is salvaged.
                yield self.conn
                return
            self.conn.execute("BEGIN IMMEDIATE")
            try:
                yield self.conn
            except BaseException as exc:
                self._forget_state()  # a rolled-back write leaves total_changes moved all the same
                try:
                    self.conn.execute("ROLLBACK")
                except Exception:
                    pass
                if isinstance(exc, db.binding().Error) and not health.is_damage_error(exc):
                    # e.g. a full disk: say which file, and that the last commit is intact
                    raise StoreError(f"writing the index {self.path} failed: {health.first_line(exc)}; "
                                     "nothing of this change was kept") from exc
                raise
            else:
                self.conn.execute("COMMIT")

    def _bulk_begin(self) -> None:
        """Fill this (new, private) store as a rebuild's shadow: one long transaction committed only
        when :meth:`publish` is asked (a commit per batch was ~10% of a keyword-only build), no
        deletes for files not written yet, and no change log (the swap starts a new one)."""
        with self.lock:
            self.conn.execute("BEGIN IMMEDIATE")
            if self.fts_available:
                # FTS5 writes its pending terms out as a new segment whenever they pass 'hashsize'
                # (1 MB by default), and merges segments as they pile up: with 8 MB a 10k-chunk
                # build writes a few large segments (FTS5's inserts took 20% less CPU).
                # A setting, not content: :meth:`_bulk_end` removes it before the swap.
                self.conn.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('hashsize', ?)",
                                  (BULK_FTS_HASH_BYTES,))
            self._bulk = _BulkLoad(self._next_rowid())

    def _next_rowid(self) -> int:
        """The rowid SQLite gives the next chunk inserted without one."""
        return int(self.conn.execute("SELECT coalesce(max(rowid), 0) + 1 FROM chunks").fetchone()[0])

    def publish(self) -> None:
        """Commit what a rebuild's shadow holds so far: a search during a first build reads it, and
        a killed build keeps the embeddings it paid for.  Elsewhere every write commits at once."""
        with self.lock:
            if self._bulk is not None and self.conn.in_transaction:
                self.conn.execute("COMMIT")
                self.conn.execute("BEGIN IMMEDIATE")

    def _bulk_end(self) -> None:
        """Commit the bulk load; after a failure too, for the embeddings a failed build paid for
        (:meth:`cleanup_leftovers` copies the shadow's cache; its rows are discarded)."""
        with self.lock:
            if self._bulk is None:
                return
            self._bulk = None
            if self.fts_available:
                # back to FTS5's default for the live index (the table FTS5 reads its settings from)
                self.conn.execute("DELETE FROM chunks_fts_config WHERE k = 'hashsize'")
            if self.conn.in_transaction:
                self.conn.execute("COMMIT")

    def ensure_schema(self) -> None:
        c = self.conn
        with self.lock:
            c.executescript(
                """
                CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS files(
                    path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory', hash TEXT NOT NULL,
                    mtime INTEGER NOT NULL, size INTEGER NOT NULL, PRIMARY KEY(path, source)) WITHOUT ROWID;
                CREATE TABLE IF NOT EXISTS chunks(
                    id TEXT PRIMARY KEY, path TEXT NOT NULL, source TEXT NOT NULL DEFAULT 'memory',
                    start_line INTEGER NOT NULL, end_line INTEGER NOT NULL, hash TEXT NOT NULL,
                    model TEXT NOT NULL, text TEXT NOT NULL, embedding BLOB, updated_at INTEGER NOT NULL,
                    ts INTEGER, date_start TEXT, date_end TEXT);
                CREATE INDEX IF NOT EXISTS idx_chunks_path ON chunks(source, path);
                """
            )
            c.executescript(vecs.SCHEMA)
            self._drop_legacy_vec_table()
            cols = {row[1] for row in c.execute("PRAGMA table_info(chunks)")}
            for col, kind in (("ts", "INTEGER"), ("date_start", "TEXT"), ("date_end", "TEXT")):
                if col not in cols:  # an index written before these columns existed
                    c.execute(f"ALTER TABLE chunks ADD COLUMN {col} {kind}")
            c.execute("CREATE INDEX IF NOT EXISTS idx_chunks_date ON chunks(date_start, date_end)")
            try:
                c.execute(self._fts_ddl("chunks_fts"))
                self.fts_error = None
            except Exception as exc:
                self.fts_error = f"FTS5 unavailable: {exc}"
            # Last: the first row in ``meta`` makes the health probe expect every table, so a
            # process killed before the keyword table existed left an index the next open called
            # damaged ("index table missing: chunks_fts") and moved aside as ``.corrupt-*``.
            if c.execute("SELECT 1 FROM meta WHERE key = ?", (vecs.EPOCH_KEY,)).fetchone() is None:
                with self.transaction():
                    vecs.new_epoch(c)

    def _drop_legacy_vec_table(self) -> None:
        """Indexes written before the in-process matrix kept a second copy of every vector in a
        sqlite-vec ``chunks_vec`` table: drop it (dropping needs the extension that defines it)."""
        if self.conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'chunks_vec'").fetchone() is None:
            return
        state = db.load_vec(self.conn, self.extension_path)
        if state.available:
            with self.transaction() as c:
                c.execute("DROP TABLE chunks_vec")

    def _fts_ddl(self, name: str) -> str:
        """The keyword index: only the token index, not a second copy of every chunk's text (which
        ``chunks.text`` holds).  Rows are deleted with FTS5's ``'delete'`` command and the values
        :func:`fts_values` derives from ``chunks.text`` (``contentless_delete=1`` was tried: FTS5
        then never subtracts deleted rows from its row and token totals, so BM25 drifted with
        every edit away from what a clean rebuild ranks)."""
        tok = "trigram case_sensitive 0" if self.fts_tokenizer == "trigram" else "unicode61"
        return f"CREATE VIRTUAL TABLE IF NOT EXISTS {name} USING fts5(text, stems, content='', tokenize='{tok}')"

    def _fts_secure_delete(self, on: bool = True) -> None:
        """Have FTS5 take a deleted row's words out of its segments (its ``secure-delete`` option,
        SQLite 3.42+), or only add a marker hiding them (``on=False``).  Why: a note deleted or a
        line edited away kept its words (a password, an address) readable in the index file until
        FTS5 merged that segment, which for a note indexed long ago could be never.  It is asked
        for only where words leave the index (:func:`_words_leave`): it made every sync of an
        edited note 3x slower at 10k chunks (64 against 19 ms of CPU), and the common edit, an
        append, leaves every word it re-indexes in the index anyway.  Inside a write transaction;
        read each time, as another process's deletion may have set it since."""
        if db.binding().sqlite_version_info < (3, 42, 0):
            return  # (an older FTS5 cannot read a table once the option is set)
        c = self.conn
        held = c.execute("SELECT 1 FROM chunks_fts_config WHERE k = 'secure-delete' AND v = 1").fetchone() is not None
        if held != on:
            c.execute("INSERT INTO chunks_fts(chunks_fts, rank) VALUES ('secure-delete', ?)", (int(on),))

    @property
    def fts_available(self) -> bool:
        return self.fts_error is None

    def writer_lock(self) -> FileWriterLock:
        return FileWriterLock(self.path)

    def describe(self) -> dict[str, Any]:
        if not self.vector_enabled:
            vector: dict[str, Any] = {"path": "disabled", "why": "store.vector.enabled is false"}
        else:
            vector = {"path": "matrix", "why": "vectors scanned as one in-process float32 matrix (NumPy), kept "
                                               "in step with the index by its change log",
                      "warm": self.matrix.describe()}
        return {"backend": "sqlite", "location": self.location, "sqlite": db.binding_name(),
                "fts": {"available": self.fts_available, "error": self.fts_error, "tokenizer": self.fts_tokenizer,
                        # phrase document counts kept for pruning and complete scores (this process)
                        "warm": {"phraseCounts": len(self._scorer._counts) if self._scorer else 0,
                                 "termCounts": self._scorer.held_counts() if self._scorer else 0,
                                 "postings": self._postings.describe() if self._postings else None,
                                 "warmup": self._warmup.describe() if self._warmup else None}},
                "vector": vector}

    # -- meta --------------------------------------------------------------------------------
    def read_meta(self) -> dict[str, Any] | None:
        with self.lock:
            try:
                row = self.conn.execute("SELECT value FROM meta WHERE key = ?", (META_KEY,)).fetchone()
            except Exception as exc:
                if "no such table: meta" in str(exc) and not self._has_tables():
                    return None  # an empty file (read-only open of an index never built)
                self._mark(exc)
                raise
        if not row:
            return None
        try:
            meta = json.loads(row[0])
        except ValueError as exc:
            self.damage = f"index metadata is not valid JSON: {exc}"
            raise health.IndexDamaged(f"{self.damage} ({self.path})") from exc
        return meta if isinstance(meta, dict) else None

    def _has_tables(self) -> bool:
        return self.conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] > 0

    def write_meta(self, meta: dict[str, Any]) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO meta(key, value) VALUES(?, ?)", (META_KEY, json.dumps(meta, sort_keys=True))
        )

    # -- files -------------------------------------------------------------------------------
    def file_rows(self, source: str | None = None,
                  paths: Sequence[str] | None = None) -> dict[tuple[str, str], tuple[str, int, int]]:
        """``{(path, source): (hash, mtime_ns, size)}`` for every indexed file (see the protocol).

        Every file's row is kept while the index is unchanged (the key of :meth:`_log_state`):
        read-your-writes asks for them before every search, and reading 600 rows cost a 10k-chunk
        search about 1 ms.  The dict is shared: callers only read it.
        """
        sql = "SELECT path, source, hash, mtime, size FROM files"
        args: tuple[Any, ...] = ()
        if source:
            sql += " WHERE source = ?"
            args = (source,)
        with self.lock:
            if paths is None and not source:
                key = self._change_key()
                memo = self._rows_memo
                if memo is not None and memo[0] == key:
                    return memo[1]
                rows = {(p, s): (h, m, z) for p, s, h, m, z in self.conn.execute(sql, args)}
                self._rows_memo = (key, rows)
                return rows
            if paths is None:
                return {(p, s): (h, m, z) for p, s, h, m, z in self.conn.execute(sql, args)}
            sql += (" AND" if source else " WHERE") + " path IN ({marks})"
            return {(p, s): (h, m, z) for p, s, h, m, z in db.rows_in(self.conn, sql, list(paths), args)}

    def touch_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int) -> None:
        """Record a new stat for a file whose content did not change."""
        self.conn.execute(
            "UPDATE files SET hash = ?, mtime = ?, size = ? WHERE path = ? AND source = ?",
            (file_hash, mtime_ns, size, path, source),
        )

    def replace_file(self, path: str, source: str, file_hash: str, mtime_ns: int, size: int,
                     chunks: Sequence[ChunkRow]) -> None:
        """Replace every row of one file (call inside :meth:`transaction`)."""
        c = self.conn
        # single-window chunks hold their vector themselves: their cache entries become references
        held = [(hex_key(ch.hash), ch.model, 4 * len(ch.embedding)) for ch in chunks
                if ch.embedding is not None and len(ch.embedding) and ch.windows == 1]
        bulk = self._bulk
        fts = [ch.fts or fts_values(ch.text) for ch in chunks] if self.fts_available else []
        if bulk is None or (path, source) in bulk.written:
            self._delete_file_rows(path, source, keep={(h, m) for h, m, _ in held}, replaced_by=fts)
            if bulk is not None:
                bulk.next_rowid = self._next_rowid()
        now = int(time.time() * 1000)
        # a generator: each vector's blob is made as its row is written, never all of a file's at once
        values = ((hex_key(ch.id), ch.path, ch.source, ch.start_line, ch.end_line, hex_key(ch.hash), ch.model, ch.text,
                   to_blob(ch.embedding) if ch.embedding is not None and len(ch.embedding) else None, now, ch.ts,
                   ch.date_start, ch.date_end) for ch in chunks)
        rowids: list[int] = []
        if bulk is not None:
            # The rowids SQLite would give (nothing else writes the shadow), in one call: a call
            # per row was ~10% of a keyword-only build.  A plain INSERT: ids name their file, whose
            # old rows are gone (a file written twice was deleted above), and were OR REPLACE ever
            # to replace a row, that row's keyword entries would be left behind.
            bulk.written.add((path, source))
            rowids = list(range(bulk.next_rowid, bulk.next_rowid + len(chunks)))
            bulk.next_rowid += len(chunks)
            c.executemany(f"INSERT INTO chunks(rowid, {_CHUNK_COLUMNS}) "
                          "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                          ((r, *v) for r, v in zip(rowids, values, strict=True)))
        else:
            for v in values:
                cur = c.execute(f"INSERT OR REPLACE INTO chunks({_CHUNK_COLUMNS}) "
                                "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", v)
                rowids.append(int(cur.lastrowid))
        if held and has_cache(c):
            c.executemany("UPDATE embedding_cache SET embedding = x'' WHERE hash = ? AND model = ? AND dims * 4 = ? "
                          "AND length(embedding) > 0", held)
        if self.fts_available:
            # FTS rows share the chunk's rowid, so a file's rows are deleted by key, not by a scan.
            c.executemany("INSERT INTO chunks_fts(rowid, text, stems) VALUES (?,?,?)",
                          [(rid, *values) for rid, values in zip(rowids, fts, strict=True)])
        if bulk is None:
            vecs.log_changes(c, rowids, alive=True)
        c.execute(
            "INSERT OR REPLACE INTO files(path, source, hash, mtime, size) VALUES (?,?,?,?,?)",
            (path, source, file_hash, mtime_ns, size),
        )

    def _delete_file_rows(self, path: str, source: str, keep: set[tuple[str, str]] | frozenset = frozenset(),
                          replaced_by: Sequence[tuple[str, str]] | None = None) -> None:
        """Delete one file's rows; ``replaced_by``: the keyword values of the rows that replace them
        in this transaction (``None``: the file is gone)."""
        c = self.conn
        # Cache entries that only pointed at these chunks' vectors get the vectors back (``keep``:
        # the ones the file's new chunks will hold again).
        gone = [(blob, h, m, len(blob)) for h, m, blob in c.execute(
            "SELECT hash, model, embedding FROM chunks WHERE path = ? AND source = ? AND embedding IS NOT NULL",
            (path, source)) if (h, m) not in keep]
        if gone and has_cache(c):
            c.executemany("UPDATE embedding_cache SET embedding = ? WHERE hash = ? AND model = ? AND dims * 4 = ? "
                          "AND length(embedding) = 0", gone)
        vecs.log_changes(c, [r for (r,) in c.execute(
            "SELECT rowid FROM chunks WHERE path = ? AND source = ?", (path, source))], alive=False)
        if self.fts_available:
            rows = c.execute("SELECT rowid, text FROM chunks WHERE path = ? AND source = ?", (path, source)).fetchall()
            old = [(rid, *fts_values(text)) for rid, text in rows]
            if old:
                self._fts_secure_delete(replaced_by is None or _words_leave([v[1:] for v in old], replaced_by))
            c.executemany("INSERT INTO chunks_fts(chunks_fts, rowid, text, stems) VALUES ('delete', ?, ?, ?)", old)
        c.execute("DELETE FROM chunks WHERE path = ? AND source = ?", (path, source))

    def delete_file(self, path: str, source: str) -> None:
        """Forget a file.  A row that a scan lists but its key does not find is a damaged key
        (``PRAGMA quick_check`` misses it): said, so that the index is rebuilt, instead of
        "1 removed" on every sync for ever."""
        self._delete_file_rows(path, source)
        if self.conn.execute("DELETE FROM files WHERE path = ? AND source = ?", (path, source)).rowcount == 0 \
                and self.conn.execute("SELECT 1 FROM files WHERE path || '' = ? AND source || '' = ?",  # a scan
                                      (path, source)).fetchone():
            raise IndexDamaged(f"database disk image is malformed (the row of {path} cannot be found by its key)")

    def textless_files(self) -> set[tuple[str, str]]:
        """Files the index lists as indexed, not empty, that have no chunk: a note of blank lines
        (which has none), or an index whose pages are of two versions (a backup's copy put over it
        in place while a watcher held it open, or beside a ``-wal`` it did not come with), where
        every note indexed since the backup kept its row and lost its text."""
        with self.lock:
            rows = self.conn.execute("SELECT path, source FROM files f WHERE size > 0 AND NOT EXISTS "
                                     "(SELECT 1 FROM chunks c WHERE c.source = f.source AND c.path = f.path)"
                                     ).fetchall()
        return {(p, s) for p, s in rows}

    def paths_missing_vectors(self) -> set[tuple[str, str]]:
        with self.lock:
            rows = self.conn.execute("SELECT DISTINCT path, source FROM chunks WHERE embedding IS NULL").fetchall()
        return {(p, s) for p, s in rows}

    # -- vectors -----------------------------------------------------------------------------
    def vec_dims(self) -> int | None:
        """Width of the stored vectors: the index identity's, else the first stored vector's."""
        meta = self.read_meta() or {}
        if meta.get("vectorDims"):
            return int(meta["vectorDims"])
        with self.lock:
            row = self.conn.execute(
                "SELECT length(embedding) FROM chunks WHERE embedding IS NOT NULL LIMIT 1").fetchone()
        return int(row[0]) // 4 if row and row[0] else None

    def _generation(self) -> tuple[str | None, int] | None:
        """Where the index's change log stands: any write moves it (``None`` without a log)."""
        state = self._log_state()
        return None if state is None else (state[0], state[2])

    def _log_state(self) -> tuple[str | None, int, int] | None:
        """:func:`vecs.state` as this connection sees it now (``None`` without a log).

        A search asked for it four times, two queries each: it is read again only when ``PRAGMA
        data_version`` (moved by another connection's commit, stable within a read snapshot) or
        this connection's ``total_changes`` (its own writes) moved since it was last read.  Writes
        neither shows (a page copy into this file, a rolled-back write) call :meth:`_forget_state`.
        """
        try:
            key = self._change_key()
            memo = self._state_memo
            if memo is not None and memo[0] == key:
                return memo[1]
            state = vecs.state(self.conn)
            self._check_history(state)
        except db.binding().OperationalError:
            return None
        # read after the key: a commit in between is newer than the key, and the key moved with it
        self._state_memo = (key, state)
        return state

    def _check_history(self, state: tuple[str | None, int, int]) -> None:
        """Drop what is held warm when the change log is not the one it was read from.

        Everything held warm (the vector matrix, the rows of hits, the keyword postings and counts)
        is valid for a position of the log, and followed from it by the entries after it.  An
        index restored from a backup (sqlite3's ``.restore``, a copy over the file) while a server
        had it open went back to an earlier position of the same epoch, and the writes after
        brought it to the old position again by another history: a warm search answered with a
        note deleted since, its old text and path.  So the entry at the position last seen must
        still be there as it was (its chunk and that chunk's id, which names its text)."""
        epoch, lo, hi = state
        seen, self._log_mark = self._log_mark, (epoch, hi, vecs.entry_mark(self.conn, hi) if hi else None)
        if seen is None or seen[0] != epoch or seen[1] < lo or not seen[1]:  # a new epoch, trimmed: reloaded anyway
            return
        if seen[1] <= hi and vecs.continues(self.conn, seen[1], seen[2]):
            return
        self._stop_warmup()
        self._scorer = self._postings = self._phrases_memo = self._rows_memo = None
        self._hit_rows = (None, {}, {})
        self.matrix = vecs.VectorMatrix(sidecar_path(self.path), save=not self.readonly)

    def _change_key(self) -> tuple[Any, int, int]:
        """What moves with any write this connection can see: another connection's commit
        (``PRAGMA data_version``) or its own (``total_changes``)."""
        conn = self.conn
        return (conn, conn.execute("PRAGMA data_version").fetchone()[0], conn.total_changes)

    def _forget_state(self) -> None:
        """Drop what :meth:`_log_state` and :meth:`file_rows` remember (after writes
        ``data_version`` does not show)."""
        self._state_memo = None
        self._rows_memo = None

    def _fresh_matrix(self, dims: int) -> vecs.VectorMatrix | None:
        """The in-process matrix brought up to date (``None`` for an index without a change log)."""
        self.conn.execute("SAVEPOINT memdir_vectors")  # the log position and the rows: one snapshot
        try:
            state = self._log_state()
            if state is None:  # a read-only index written before vec_log existed
                return None
            self.matrix.refresh(self.conn, dims, state)
        except db.binding().OperationalError:
            return None
        finally:
            self.conn.execute("RELEASE memdir_vectors")
        return self.matrix

    def vector_search(self, query: Sequence[float], limit: int) -> list[Hit]:
        """Nearest chunks by cosine similarity (a chunk scores its best window), from the matrix."""
        try:
            return self._vector_search(query, limit)
        except Exception as exc:
            self._mark(exc)
            raise

    def _vector_search(self, query: Sequence[float], limit: int) -> list[Hit]:
        import numpy as np

        q = np.asarray(query, dtype=np.float32)
        if not q.size or not np.any(q) or limit <= 0 or not self.vector_enabled:
            return []
        with self.lock:
            self.conn.execute("SAVEPOINT memdir_vector_search")  # the matrix and the rows: one snapshot
            try:
                matrix = self._fresh_matrix(int(q.size))
                generation = None
                if matrix is None:
                    matrix = vecs.VectorMatrix()
                    matrix._load(self.conn, int(q.size), None, 0)
                else:
                    generation = self._generation()
                scored = matrix.search(q, limit, lambda rowids: self._exact_cosines(q, rowids))
                return self._hits_by_rowid(scored, generation)
            finally:
                self.conn.execute("RELEASE memdir_vector_search")

    def _exact_cosines(self, q: np.ndarray, rowids: Sequence[int]) -> dict[int, float]:
        """Best-window cosine of each chunk, from its stored float32 vector(s)."""
        import numpy as np

        qn = q / (np.linalg.norm(q) or 1.0)
        out: dict[int, float] = {}
        for rowid, blob in db.rows_in(
                self.conn, "SELECT rowid, embedding FROM chunks WHERE rowid IN ({marks}) AND embedding IS NOT NULL",
                list(rowids)):
            sim = max_cosine(blob, qn)
            if sim is not None:
                out[rowid] = sim
        return out

    def vector_scores(self, query: Sequence[float], ids: Sequence[str]) -> dict[str, float]:
        """Cosine of each given chunk (best window), from the same matrix :meth:`vector_search` scans."""
        import numpy as np

        q = np.asarray(query, dtype=np.float32)
        wanted = list(dict.fromkeys(ids))
        if not q.size or not np.any(q) or not wanted or not self.vector_enabled:
            return {}
        out: dict[str, float] = {}
        with self.lock:
            self.conn.execute("SAVEPOINT memdir_vector_scores")  # the ids, the matrix, the rows: one snapshot
            try:
                matrix = self._fresh_matrix(int(q.size))
                by_rowid = self._rowids(wanted, None if matrix is None else self._generation())
                if matrix is not None and not matrix.quantized:
                    return {by_rowid[r]: s for r, s in matrix.scores(q, list(by_rowid)).items()}
                # an int8 matrix is for finding candidates; exact scores come from the stored vectors
                for rowid, sim in self._exact_cosines(q, list(by_rowid)).items():
                    out[by_rowid[rowid]] = sim
            finally:
                self.conn.execute("RELEASE memdir_vector_scores")
        return out

    #: Chunk rows :meth:`_hits_by_rowid` keeps per generation before it starts over (their text
    #: included: a few MB at most).
    HIT_ROWS_MAX = 5_000

    def _hits_by_rowid(self, scored: list[tuple[int, float]], generation: Any = None) -> list[Hit]:
        """Hits for ``(rowid, score)`` pairs, in their order.  ``generation``: the index generation
        read in the caller's read snapshot, which this must run in too.  A chunk's row is the same
        while the generation is (every write of a chunk moves it), so the rows read are kept for
        it: a long-lived process ranks the same chunks again and again, and reading them was a
        tenth of a warm search's own work."""
        if not scored:
            return []
        held, rows, ids = self._hit_rows
        if generation is None or self._bulk is not None:  # a rebuild's shadow logs no writes
            rows, ids = {}, {}
        elif held != generation or len(rows) > self.HIT_ROWS_MAX:
            rows, ids = {}, {}
            self._hit_rows = (generation, rows, ids)
        missing = [rowid for rowid, _ in scored if rowid not in rows]
        if missing:
            marks = ",".join("?" * len(missing))
            for r in self.conn.execute(f"SELECT c.rowid, {_HIT_COLUMNS} FROM chunks c WHERE c.rowid IN ({marks})",
                                       missing):
                cid = hex_str(r[1])
                rows[r[0]] = (cid, *r[2:])
                ids[cid] = r[0]
        return [Hit(*rows[rid][:6], score, *rows[rid][6:]) for rid, score in scored if rid in rows]

    def _rowids(self, wanted: Sequence[str], generation: Any) -> dict[int, str]:
        """``{rowid: chunk id}`` of the chunks with these ids; ``generation`` as for
        :meth:`_hits_by_rowid`, whose rows name most of them (the candidates it just returned)."""
        held, _rows, ids = self._hit_rows
        if generation is not None and held == generation and self._bulk is None:
            found = {ids[i]: i for i in wanted if i in ids}
            if len(found) == len(wanted):
                return found
        return {rowid: hex_str(cid) for rowid, cid in db.rows_in(
            self.conn, "SELECT rowid, id FROM chunks WHERE id IN ({marks})", [hex_key(i) for i in wanted])}

    # -- keyword -----------------------------------------------------------------------------
    def keyword_search(self, terms: Sequence[str], limit: int) -> list[Hit]:
        """BM25 over ``chunks_fts`` for any of ``terms``, each quoted (never FTS5 syntax).

        Phrases found in at least half of the chunks are left out of the MATCH: FTS5 gives them an
        IDF of 1e-6, so they change no score by more than ~2e-6, but every chunk containing one
        would be ranked (at 100k generated chunks that was most of the 150 ms a query took).
        """
        phrases = self._phrases(terms)
        if not self.fts_available or limit <= 0 or not phrases:
            return []
        with self.lock:
            try:
                # one read snapshot: the phrase counts, the generation and the postings
                self.conn.execute("SAVEPOINT memdir_kw_search")
                try:
                    useful = self._useful_phrases(phrases)
                    warm = self._warm_keyword_search(useful, limit)
                finally:
                    self.conn.execute("RELEASE memdir_kw_search")
                if warm is not None:
                    return warm
                match = match_phrases(useful)
                # Rank inside FTS5 first, then read the few winning rows: joining first made SQLite fetch
                # every matching chunk's text before sorting.
                rows = self.conn.execute(
                    f"SELECT {_HIT_COLUMNS}, f.rank FROM (SELECT rowid, bm25(chunks_fts) AS rank FROM chunks_fts "
                    "WHERE chunks_fts MATCH ? ORDER BY rank LIMIT ?) f JOIN chunks c ON c.rowid = f.rowid "
                    "ORDER BY f.rank",
                    (match, int(limit)),
                ).fetchall()
            except Exception as exc:
                self._mark(exc)
                raise
        return [_hit(r, bm25_to_score(r[9])) for r in rows]

    #: Rank from in-process postings once warm (a switch for benches that time FTS5 alone).
    WARM_KEYWORD = True

    def _warm_postings_apply(self) -> bool:
        """Whether warm postings may rank here: FTS5's ``unicode61`` tokens (not trigrams), not
        switched off."""
        return self.fts_tokenizer == "unicode61" and self.WARM_KEYWORD

    def _warm_keyword_search(self, phrases: list[tuple[str, str]], limit: int) -> list[Hit] | None:
        """The same ranking from postings held in process (:mod:`memdir.stores.kw_postings`), when
        this process has searched this index generation before; ``None``: let FTS5 rank.  Called
        inside a read snapshot, so the generation checked is the one the postings are read at."""
        if not self._warm_postings_apply():
            return None
        generation = self._generation()
        postings = self._keyword_postings()
        if not postings.ready(generation):
            return None
        # a second search: this process is no one-shot CLI, the common words are worth reading ahead
        self.start_warmup()
        scorer = self._keyword_scorer()
        n_rows, avgdl = scorer.totals()
        try:
            ranked = postings.top(scorer.phrase_specs(phrases), n_rows, avgdl, int(limit))
        except LookupError:  # postings and document sizes disagree (never seen): start over, FTS5 ranks
            self._postings = None
            return None
        return self._hits_by_rowid([(rowid, bm25_to_score(rank)) for rowid, rank in ranked], generation)

    def _phrases(self, terms: Sequence[str]) -> list[tuple[str, str]]:
        """:func:`fts5_phrases` of ``terms``, remembered for the last terms: a hybrid search asks
        for the same ones twice (its keyword search, then the candidates' scores), and stemming
        them was a few per cent of its own work."""
        from memdir import query

        key = (tuple(terms), query.STEMMING)
        memo = self._phrases_memo
        if memo is None or memo[0] != key:
            phrases = fts5_phrases(list(terms))
            if self.fts_tokenizer == "trigram":
                phrases = trigram_phrases(phrases)
            memo = self._phrases_memo = (key, phrases)
        return list(memo[1])

    def _keyword_postings(self) -> Any:
        if self._postings is None:
            from memdir.stores.kw_postings import KeywordPostings

            self._postings = KeywordPostings(
                self.conn, "chunks_fts", rows_since=self._rows_since,
                frequencies=lambda specs, docs: self._keyword_scorer().frequencies(specs, docs),
                columns=lambda term: self._keyword_scorer().columns(term),
                texts=lambda ids: dict(db.rows_in(self.conn, "SELECT rowid, text FROM chunks WHERE rowid IN ({marks})",
                                                  ids)))
        return self._postings

    #: Start a keyword warm-up in long-lived processes (a switch for benches and tests).
    WARMUP = True
    #: The workspace whose memory notes the warm-up measures for widening (set by
    #: :class:`memdir.api.Memory`; ``None``: no notes).
    notes_root: Path | None = None
    #: The folder of the session transcripts it measures too (``None``: the source is off).
    sessions_root: Path | None = None

    def start_warmup(self) -> bool:
        """Read the postings of the most common words ahead, in a background thread (once per
        connection): for a process that will search again (the MCP server, an agent loop, a
        reused :class:`memdir.Memory`), never for a one-shot CLI search.  Whether one runs or ran."""
        with self.lock:
            if self._warmup is not None:
                return True
            if (not self.WARMUP or not self._warm_postings_apply() or not self.fts_available
                    or self._bulk is not None or not self.path.is_file()):
                return False
            from memdir.stores.kw_warmup import Warmup

            self._keyword_postings()

            def current() -> bool:  # not stopped, not replaced (a reopen or recovery stops it)
                return self._warmup is warmup and not warmup.stopping

            def adopt(generation: Any, rowids: Any, sizes: Any) -> bool:
                with self.lock._lock:  # not counted as use: the warm-up's own
                    postings = self._postings
                    if not current() or postings is None:
                        return False
                    if postings.generation not in (None, generation):
                        # held for another state of the index: brought to the state now, as the
                        # next search would (a patch keeps the phrases held)
                        self.conn.execute("SAVEPOINT memdir_kw_warmup")
                        try:
                            now = self._generation()
                            if now != generation:
                                return False
                            postings.follow(now)
                        finally:
                            self.conn.execute("RELEASE memdir_kw_warmup")
                    return postings.adopt_rows(generation, rowids, sizes)

            def add(generation: Any, rowids: Any, loaded: Any, budget: int) -> tuple[str, int, int]:
                with self.lock._lock:
                    if not current() or self._postings is None:
                        return "stale", 0, 0
                    return self._postings.add_phrases(generation, rowids, loaded, budget)

            def held(key: Any) -> bool:
                postings = self._postings
                return postings is not None and key in postings._phrases

            def counts(generation: Any, known: dict[str, dict[str, int]]) -> bool:
                with self.lock._lock:
                    if not current():
                        return False
                    self.conn.execute("SAVEPOINT memdir_kw_warmup")
                    try:
                        return self._keyword_scorer().adopt_counts(generation, known)
                    finally:
                        self.conn.execute("RELEASE memdir_kw_warmup")

            warmup = Warmup(self.path, "chunks_fts", adopt, add, held, self.lock.idle_for, adopt_counts=counts,
                            notes_root=lambda: self.notes_root, sessions_root=lambda: self.sessions_root)
            self._warmup = warmup
            warmup.start()
            return True

    def _stop_warmup(self, wait: bool = False) -> None:
        """Stop the warm-up; ``wait`` for its thread (up to 5 s: it may be waiting for :attr:`lock`,
        and once it has it, it takes nothing more: it is no longer the store's warm-up)."""
        warmup, self._warmup = getattr(self, "_warmup", None), None
        if warmup is not None:
            warmup.stop(timeout=5.0 if wait else 0.0)

    def _rows_since(self, old: Any, new: Any) -> tuple[list[int], dict[int, str]] | None:
        """Chunks written or removed between two generations of one epoch (from the change log),
        with the text of those that exist now; ``None`` when the log no longer reaches back."""
        changed = vecs.changed_chunks(self.conn, old[1], new[1])
        if changed is None:
            return None
        return changed, dict(db.rows_in(self.conn, "SELECT rowid, text FROM chunks WHERE rowid IN ({marks})",
                                        changed))

    #: Below this many chunks every phrase is kept (FTS5 ranks a small index in a few ms anyway).
    PRUNE_MIN_ROWS = 2000

    def _useful_phrases(self, phrases: list[tuple[str, str]]) -> list[tuple[str, str]]:
        """The phrases whose IDF FTS5 does not floor at 1e-6 (at least the rarest one)."""
        scorer = self._keyword_scorer()
        n_rows, _ = scorer.totals()
        if n_rows < self.PRUNE_MIN_ROWS or len(phrases) < 2:
            return phrases
        counts = scorer.doc_counts(phrases)
        # idf = log((N - n + 0.5) / (n + 0.5)) <= 0  <=>  n >= N / 2; a phrase in no chunk matches nothing
        keep = [p for p, n in zip(phrases, counts, strict=True) if 0 < n < n_rows / 2]
        found = [(p, n) for p, n in zip(phrases, counts, strict=True) if n > 0]
        return keep or ([min(found, key=lambda pc: pc[1])[0]] if found else phrases)

    def _keyword_scorer(self) -> Any:
        if self._scorer is None:
            from memdir.stores.fts_scores import FtsScorer

            tok = "trigram case_sensitive 0" if self.fts_tokenizer == "trigram" else "unicode61"
            counts = stem_counts if self.fts_tokenizer != "trigram" else None  # trigrams: stems are no tokens
            self._scorer = FtsScorer(self.conn, "chunks_fts", tok, fts_text, stem_text, counts, self._generation)
        return self._scorer

    def keyword_scores(self, terms: Sequence[str], ids: Sequence[str]) -> dict[str, float]:
        """BM25 of the given chunks for ``terms`` (the same figure :meth:`keyword_search` gives), 0 if none.

        Computed by :class:`memdir.stores.fts_scores.FtsScorer` (FTS5's formula and tokenizer, one
        count per phrase, kept while the index is unchanged) for exactly these rows: ``bm25()`` with
        ``rowid IN (…)`` re-ran the match per rowid, and one MATCH over the ids' rowid range ranks
        every match in between (most of a large index when the candidates are spread out).
        """
        wanted = list(dict.fromkeys(ids))
        phrases = self._phrases(terms)
        if not wanted:
            return {}
        out = dict.fromkeys(wanted, 0.0)
        if not self.fts_available or not phrases:
            return out
        with self.lock:
            scorer = self._keyword_scorer()
            if self._warm_keyword_scores(phrases, wanted, out):
                return out
            for i in range(0, len(wanted), 400):
                part = wanted[i : i + 400]
                marks = ",".join("?" * len(part))
                rows = [(rowid, hex_str(cid), text) for rowid, cid, text in self.conn.execute(
                    f"SELECT rowid, id, text FROM chunks WHERE id IN ({marks})", [hex_key(i) for i in part])]
                ranks = scorer.scores(phrases, {rowid: text for rowid, _, text in rows})
                for rowid, cid, _ in rows:
                    if rowid in ranks:
                        out[cid] = bm25_to_score(ranks[rowid])
        return out

    def _warm_keyword_scores(self, phrases: list[tuple[str, str]], wanted: list[str], out: dict[str, float]) -> bool:
        """Fill ``out`` from the warm postings, when this generation's are loaded (False: not done)."""
        if not self._warm_postings_apply() or self._postings is None:
            return False
        self.conn.execute("SAVEPOINT memdir_kw_scores_warm")  # the generation and the rows: one snapshot
        try:
            generation = self._generation()
            if not self._postings.warm(generation):
                return False
            scorer = self._keyword_scorer()
            specs = scorer.phrase_specs(phrases)
            # phrases no search has loaded (common ones are pruned from searches) are counted in
            # these rows' text instead: FTS5's figures all the same (FtsScorer's tokenizer)
            missing = [i for i, spec in enumerate(specs) if not self._postings.held(spec)]
            by_rowid: dict[int, str] = {}
            texts: dict[int, str] = {}
            if missing:
                for rowid, cid, text in db.rows_in(
                        self.conn, "SELECT rowid, id, text FROM chunks WHERE id IN ({marks})",
                        [hex_key(i) for i in wanted]):
                    by_rowid[rowid] = hex_str(cid)
                    texts[rowid] = text
            else:  # the texts are not needed
                by_rowid = self._rowids(wanted, generation)
            n_rows, avgdl = scorer.totals()
            direct: dict[int, tuple[int, dict[int, int]]] = {}
            if missing and texts:
                hits = scorer.doc_counts([phrases[i] for i in missing])
                freqs = scorer.frequencies([specs[i] for i in missing], texts)
                if any(r not in freqs for r in texts):
                    return False
                direct = {i: (hits[k], {r: f[k] for r, f in freqs.items() if f[k]}) for k, i in enumerate(missing)}
            try:
                ranks = self._postings.scores(specs, n_rows, avgdl, list(by_rowid), direct)
            except LookupError:
                self._postings = None
                return False
            for rowid, rank in ranks.items():
                out[by_rowid[rowid]] = bm25_to_score(rank)
            return True
        finally:
            self.conn.execute("RELEASE memdir_kw_scores_warm")

    def chunks_in_period(self, start: str, end: str, limit: int) -> list[Hit]:
        """Chunks whose ``date_start..date_end`` overlaps ``start..end``, in file and line order."""
        if limit <= 0:
            return []
        with self.lock:
            rows = self.conn.execute(
                f"SELECT {_HIT_COLUMNS} FROM chunks c WHERE c.date_start <= ? AND c.date_end >= ? "
                "ORDER BY c.path, c.start_line LIMIT ?", (end, start, int(limit))).fetchall()
        return [_hit(r, 0.0) for r in rows]

    def first_chunks(self, paths: Sequence[str]) -> list[Hit]:
        """The first chunk of each memory file in ``paths``, in path order, score 0."""
        if not paths:
            return []
        with self.lock:
            rows = list(db.rows_in(
                self.conn, f"SELECT {_HIT_COLUMNS} FROM chunks c WHERE c.source = 'memory' AND c.path IN ({{marks}}) "
                "AND c.start_line = (SELECT min(d.start_line) FROM chunks d WHERE d.path = c.path "
                "AND d.source = c.source)", sorted(set(paths))))
        return sorted((_hit(r, 0.0) for r in rows), key=lambda h: (h.path, h.end_line))

    # -- embedding cache ---------------------------------------------------------------------
    def cache_get(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> dict[str, np.ndarray]:
        """Cached vectors by chunk hash, looked up 400 at a time (R§5.4): float32 arrays over the
        stored bytes (read-only), so a big file's cached vectors take no more room than on disk."""
        import numpy as np

        wanted = list(dict.fromkeys(hashes))
        out: dict[str, np.ndarray] = {}
        with self.lock:
            if not has_cache(self.conn):
                return out
            for i in range(0, len(wanted), 400):
                part = wanted[i : i + 400]
                marks = ",".join("?" * len(part))
                # an empty entry is a reference: a chunk with that text holds the vector
                held = _HELD.format(db="")
                for h, blob, dims in self.conn.execute(
                    f"SELECT e.hash, CASE WHEN length(e.embedding) > 0 THEN e.embedding ELSE ({held}) END, e.dims "
                    f"FROM embedding_cache e WHERE e.provider = ? AND e.model = ? AND e.provider_key = ? "
                    f"AND e.hash IN ({marks})",
                    (provider, model, provider_key, *map(hex_key, part)),
                ):
                    # An entry whose bytes do not hold ``dims`` floats (a damaged or hand-edited file)
                    # is a miss, re-embedded: trusted, it stopped every rebuild (NumPy refuses a blob of
                    # 4k+1 bytes) or put a vector of the wrong width in the index.
                    if not isinstance(blob, bytes | bytearray) or not isinstance(dims, int) or dims <= 0 \
                            or len(blob) != 4 * dims:
                        continue
                    vector = from_blob(blob)
                    if not np.isfinite(vector).all():  # NaN or infinity: damaged bytes, re-embedded too
                        continue
                    out[hex_str(h)] = vector
        return out

    def cache_put(self, provider: str, model: str, provider_key: str,
                  items: dict[str, Sequence[float] | np.ndarray]) -> None:
        if not any(len(v) for v in items.values()):
            return
        ensure_cache(self.conn)
        now = lru_stamp(self.conn)
        # a generator: one blob at a time, not a second copy of a big file's vectors
        self.conn.executemany(
            "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, updated_at) "
            "VALUES (?,?,?,?,?,?,?)",
            ((provider, model, provider_key, hex_key(h), to_blob(v), len(v), now) for h, v in items.items() if len(v)))

    def cache_touch(self, provider: str, model: str, provider_key: str, hashes: Iterable[str]) -> None:
        """Mark cache hits as recently used, so pruning drops the least recently used first."""
        if not has_cache(self.conn):
            return
        now = lru_stamp(self.conn)
        self.conn.executemany(
            "UPDATE embedding_cache SET updated_at = ? WHERE provider = ? AND model = ? AND provider_key = ? "
            "AND hash = ?",
            [(now, provider, model, provider_key, hex_key(h)) for h in hashes],
        )

    def cache_prune(self, max_entries: int | None) -> int:
        if not max_entries or not has_cache(self.conn):
            return 0
        (count,) = self.conn.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()
        excess = count - int(max_entries)
        if excess <= 0:
            return 0
        self.conn.execute(
            "DELETE FROM embedding_cache WHERE rowid IN "
            "(SELECT rowid FROM embedding_cache ORDER BY updated_at ASC, rowid ASC LIMIT ?)",
            (excess,),
        )
        return excess

    def cache_count(self) -> int:
        with self.lock:
            if not has_cache(self.conn):
                return 0
            return int(self.conn.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0])

    # -- counts ------------------------------------------------------------------------------
    def counts_by_source(self) -> dict[str, tuple[int, int]]:
        with self.lock:
            files = dict(self.conn.execute("SELECT source, COUNT(*) FROM files GROUP BY source").fetchall())
            chunks = dict(self.conn.execute("SELECT source, COUNT(*) FROM chunks GROUP BY source").fetchall())
        return {s: (int(files.get(s, 0)), int(chunks.get(s, 0))) for s in set(files) | set(chunks)}

    def chunk_count(self) -> int:
        with self.lock:
            return int(self.conn.execute("SELECT COUNT(*) FROM chunks").fetchone()[0])

    def vector_count(self) -> int:
        with self.lock:
            return int(self.conn.execute("SELECT COUNT(*) FROM chunks WHERE embedding IS NOT NULL").fetchone()[0])

    # -- full rebuild ------------------------------------------------------------------------
    def _temp_prefix(self) -> str:
        return str(self.path) + ".tmp-"

    @contextmanager
    def rebuild(self) -> Iterator[SqliteStore]:
        """Build into ``<index>.tmp-<id>`` (seeded with the live cache), then :meth:`swap_from` it."""
        temp_path = Path(self._temp_prefix() + os.urandom(6).hex())
        fresh: SqliteStore | None = None
        try:
            # Inside the try: on a full disk even creating the schema fails, and the temp file must go.
            # the index's own page size: the swap then copies the shadow in page by page
            (page_size,) = self.conn.execute("PRAGMA page_size").fetchone()
            fresh = SqliteStore(temp_path, fts_tokenizer=self.fts_tokenizer, vector_enabled=self.vector_enabled,
                                extension_path=self.extension_path, page_size=int(page_size), auto_vacuum=True)
            # A scratch file until swapped in (a crash discards it): no syncs to disk while building.
            fresh.conn.execute("PRAGMA synchronous = OFF")
            with fresh.transaction() as c:
                c.execute("ATTACH DATABASE ? AS live", (str(self.path),))
                _copy_cache(c, "live")
            fresh.conn.execute("DETACH DATABASE live")
            fresh._bulk_begin()
            yield fresh
            fresh._bulk_end()
            # FTS5's segment merges left free pages behind (5-10% of a keyword-only index): the
            # page copy would copy them too
            fresh.conn.execute("PRAGMA incremental_vacuum").fetchall()  # (one step frees one page)
            fresh.close()
            self.swap_from(temp_path)
        except BaseException as exc:
            if fresh is not None:
                try:
                    fresh._bulk_end()
                except Exception:  # e.g. a full disk: what was published is kept
                    pass
                fresh.close()
                self.cleanup_leftovers()  # keeps the embeddings this failed build already paid for
            if not isinstance(exc, Exception):
                raise
            cause = exc.__cause__ if isinstance(exc, StoreError) and exc.__cause__ is not None else exc
            if not isinstance(cause, db.binding().Error) or health.is_damage_error(cause):
                raise
            raise StoreError(f"rebuilding the index {self.path} failed: {health.open_failure(cause)} (writing "
                             f"{temp_path}); the index as it was is unchanged") from cause
        finally:
            if fresh is not None:
                fresh.close()
            for suffix in ("", "-wal", "-shm", "-journal"):
                try:
                    os.unlink(str(temp_path) + suffix)
                except FileNotFoundError:
                    pass

    def adopt_cache(self, other: Path) -> int:
        """Copy the embedding cache of the index ``other`` (this workspace's under an earlier path)
        into this one; the number of entries this index holds more.  An index that cannot be read
        gives nothing: it only saves embedding again."""
        before = self.cache_count()
        try:
            with self.transaction() as c:
                c.execute("ATTACH DATABASE ? AS moved", (str(other),))
                _copy_cache(c, "moved")
        except Exception:  # (damaged, another version's, locked: embedded again, as without it)
            pass
        finally:
            try:
                self.conn.execute("DETACH DATABASE moved")
            except Exception:
                pass
        return self.cache_count() - before

    def cleanup_leftovers(self) -> None:
        """Delete temp databases a crashed rebuild left behind, keeping their new embeddings."""
        for leftover in temps_of(self._temp_prefix(), REBUILD_TEMP):
            try:
                with self.transaction() as c:
                    c.execute("ATTACH DATABASE ? AS leftover", (leftover,))
                    _copy_cache(c, "leftover")
            except Exception:
                pass
            finally:
                try:
                    self.conn.execute("DETACH DATABASE leftover")
                except Exception:
                    pass
        for leftover in temps_of(self._temp_prefix(), REBUILD_TEMP + SQLITE_FILES):
            try:
                os.unlink(leftover)
            except OSError:  # gone, or not ours to remove (a folder of that name failed every command)
                pass
        remove_sidecar_leftovers(sidecar_path(self.path))

    def optimize(self) -> None:
        """Trim the change log (once a sync, not per file: counting the chunks reads an index).
        SQLite's own indexes and FTS5's segments are maintained as rows are written."""
        with self.transaction() as c:
            vecs.trim_log(c)
        self._truncate_wal()

    def _truncate_wal(self) -> None:
        """Checkpoint and empty the write-ahead log, if no reader holds it now (then the next
        sync's try does).  Why: the log keeps every page a write made, deleted text's included, and
        a long-lived process (memdir mcp, watch) kept it open: a note deleted an hour before was
        still spelt out in ``<index>-wal`` (only the last connection's close removes it).  A sync
        already waits for its pages to reach the log; the checkpoint writes them once more."""
        with self.lock:
            try:
                (wait,) = self.conn.execute("PRAGMA busy_timeout").fetchone()
                self.conn.execute("PRAGMA busy_timeout = 0")  # a search elsewhere: not waited for
                try:
                    self.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
                finally:
                    self.conn.execute(f"PRAGMA busy_timeout = {int(wait)}")
            except Exception:  # (read-only, or busy: the log is emptied another time)
                pass

    def export_files(self, only: Collection[tuple[str, str]] | None = None,
                     ) -> Iterator[tuple[str, str, str, int, int, list[ChunkRow]]]:
        with self.lock:
            files = self.conn.execute(
                "SELECT path, source, hash, mtime, size FROM files ORDER BY source, path").fetchall()
        if only is not None:
            files = [f for f in files if (f[0], f[1]) in only]
        # a chunk of several windows stores them concatenated: its window count is its length over the
        # index's width (from the identity, else the shortest stored vector, which is one window)
        dims = int((self.read_meta() or {}).get("vectorDims") or 0)
        if not dims:
            with self.lock:
                (shortest,) = self.conn.execute(
                    "SELECT MIN(length(embedding)) FROM chunks WHERE length(embedding) > 0").fetchone()
            dims = int(shortest or 0) // 4
        for path, source, fhash, mtime, size in files:
            with self.lock:
                rows = self.conn.execute(
                    "SELECT id, path, source, start_line, end_line, hash, model, text, embedding, ts, date_start, "
                    "date_end FROM chunks WHERE path = ? AND source = ? ORDER BY start_line, id",
                    (path, source)).fetchall()
            chunks = []
            for r in rows:
                # a damaged vector is left out, as searches score it 0 and the cache misses it: the
                # chunk then counts as missing its vector, embedded again by the next sync
                vector = sound_vector(r[8], dims)
                chunks.append(ChunkRow(hex_str(r[0]), r[1], r[2], r[3], r[4], hex_str(r[5]), r[6], r[7],
                                       vector, r[9], r[10], r[11],  # (float32: a list takes 8 times the memory)
                                       max(1, len(vector) // dims) if vector is not None and dims else 1))
            yield path, source, fhash, int(mtime), int(size), chunks

    def export_cache_count(self) -> int:
        with self.lock:
            if not has_cache(self.conn):
                return 0
            return int(self.conn.execute(f"SELECT count(*) FROM embedding_cache e WHERE {_IN_USE}").fetchone()[0])

    def export_cache(self) -> Iterator[tuple[str, str, str, str, np.ndarray]]:
        with self.lock:
            if not has_cache(self.conn):
                return
            # The order first, then the vectors a page at a time: all fetched at once, they took as
            # much memory again as on disk before the first was written to the target
            order = [r for (r,) in self.conn.execute(
                f"SELECT rowid FROM embedding_cache e WHERE {_IN_USE} ORDER BY updated_at, rowid")]
        for start in range(0, len(order), 200):
            page = order[start:start + 200]
            with self.lock:
                # an empty entry is a reference to a chunk holding the vector: export the vector itself
                rows = self.conn.execute(
                    "SELECT e.provider, e.model, e.provider_key, e.hash, CASE WHEN length(e.embedding) > 0 "
                    f"THEN e.embedding ELSE ({_HELD.format(db='')}) END, e.dims FROM embedding_cache e "
                    f"WHERE e.rowid IN ({','.join('?' * len(page))}) ORDER BY e.updated_at, e.rowid", page).fetchall()
            for p, m, k, h, blob, dims in rows:
                # an entry :meth:`cache_get` would not return (damaged bytes) is no entry to copy
                vector = sound_vector(blob, dims) if isinstance(dims, int) and dims > 0 else None
                if vector is not None and len(vector) == dims:
                    yield p, m, k, hex_str(h), vector

    def swap_from(self, fresh_path: Path) -> None:
        """Replace this index's contents with another index file's, in one transaction.

        Readers keep seeing the old rows until COMMIT (WAL); a crash before COMMIT leaves the
        old index untouched.  The file itself is never renamed, so no reader's WAL or shared
        memory file can be mixed up with the new database.

        The pages are copied by SQLite's backup API (one step: one write transaction, which also
        bumps the schema version so other connections re-read the schema): copying row by row
        re-inserted every row into every B-tree of the live file, 10% of a keyword-only build at
        100k chunks.  Copied row by row instead: files of different page sizes (which the backup
        cannot copy into a WAL database), and an index with an embedding cache, which the row copy
        writes first, at the front of the file, where a salvage finds it after the file lost its
        end (in the shadow, cache pages are spread among the chunks written with them).
        """
        c = self.conn
        with self.lock:
            src = db.connect(fresh_path)
            try:
                (src_page,) = src.execute("PRAGMA page_size").fetchone()
                (own_page,) = c.execute("PRAGMA page_size").fetchone()
                cached = has_cache(src) and src.execute("SELECT EXISTS (SELECT 1 FROM embedding_cache)").fetchone()[0]
                by_pages = src_page == own_page and not cached
                if by_pages:
                    # a new vector epoch and an empty change log, as the row copy writes them
                    src.execute("BEGIN IMMEDIATE")
                    vecs.new_epoch(src)
                    src.execute("COMMIT")
                    src.backup(c)
            finally:
                src.close()
                self._forget_state()  # the page copy moves neither data_version nor total_changes here
            if not by_pages:
                self._copy_rows_from(fresh_path)
            remove_newer_sidecar(sidecar_path(self.path))  # (it describes the index just replaced)
            self._truncate_wal()

    def _copy_rows_from(self, fresh_path: Path) -> None:
        """:meth:`swap_from` table by table, in one transaction."""
        c = self.conn
        c.execute("ATTACH DATABASE ? AS fresh", (str(fresh_path),))
        try:
            c.execute("BEGIN IMMEDIATE")
            try:
                _same_tables(c, "fresh", ("files", "embedding_cache", "meta", "chunks"))
                if has_cache(c, "fresh"):
                    ensure_cache(c)
                for table in ("files", "embedding_cache", "meta"):
                    if table == "embedding_cache" and not has_cache(c, "fresh"):
                        if has_cache(c):
                            c.execute("DELETE FROM main.embedding_cache")
                        continue
                    c.execute(f"DELETE FROM main.{table}")
                    c.execute(f"INSERT INTO main.{table} SELECT * FROM fresh.{table}")
                c.execute("DELETE FROM main.chunks")
                c.execute(f"INSERT INTO main.chunks(rowid, {_CHUNK_COLUMNS}) "
                          f"SELECT rowid, {_CHUNK_COLUMNS} FROM fresh.chunks")
                # The fresh keyword index is copied table by table (FTS5 keeps it in ordinary
                # shadow tables): no re-tokenising, and a contentless table could not be read back.
                ddl = c.execute("SELECT sql FROM fresh.sqlite_master WHERE name = 'chunks_fts'").fetchone()
                c.execute("DROP TABLE IF EXISTS main.chunks_fts")
                if ddl:
                    c.execute(ddl[0].replace("CREATE VIRTUAL TABLE chunks_fts",
                                             "CREATE VIRTUAL TABLE main.chunks_fts", 1))
                    for (shadow,) in c.execute("SELECT name FROM fresh.sqlite_master WHERE type = 'table' "
                                               "AND name LIKE 'chunks\\_fts\\_%' ESCAPE '\\'").fetchall():
                        c.execute(f"DELETE FROM main.{shadow}")
                        c.execute(f"INSERT INTO main.{shadow} SELECT * FROM fresh.{shadow}")
                vecs.new_epoch(c)
                c.execute("COMMIT")
            except BaseException:
                self._forget_state()
                c.execute("ROLLBACK")
                raise
        finally:
            c.execute("DETACH DATABASE fresh")
