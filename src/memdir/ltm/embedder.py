"""Embeddings for long-term memory: memdir's own providers behind a small SQLite cache.

The provider is whatever memdir is configured with (the embedded local MiniLM by default, any
remote provider otherwise; R§18.12: OpenClaw's plugin only spoke to OpenAI).  Vectors are
cached as the core index caches them — keyed by provider id, model, provider key and the
SHA-256 of the text, stored as float32 blobs — in ``embedding-cache.sqlite`` beside the LanceDB
table, so re-embedding (``ltm reembed``) and the capture step after a recalled turn cost
nothing for text seen before.  Query embeddings (some providers embed queries differently) are
cached under a separate hash.  The cache is a plain ``sqlite3`` file, independent of the core
index, and losing it loses nothing.
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import stat
import threading
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from memdir.db import create_private, enable_wal
from memdir.stores.base import lru_stamp
from memdir.stores.sqlite_health import is_damage_error

log = logging.getLogger(__name__)
T = TypeVar("T")

#: Cache rows kept (least recently used pruned first); MiniLM rows are ~1.6 KB each.
DEFAULT_CACHE_ENTRIES = 20_000
_PRUNE_EVERY = 200


#: Every cache of this process, so a forked child can leave the parent's connections alone.
_CACHES: weakref.WeakSet[EmbeddingCache] = weakref.WeakSet()
#: Connections a forked child inherited: never used there (SQLite: a connection must not cross
#: ``fork()``) nor closed (that could checkpoint on the parent's behalf), kept for the child's life.
_INHERITED: list[sqlite3.Connection] = []


def _after_fork_in_child() -> None:
    """A forked child opens its own connection to each cache, and a write another thread of the
    parent had under way at the fork (holding the cache's lock) does not hold it here for ever."""
    for cache in list(_CACHES):
        cache._lock = threading.Lock()
        if cache._conn is not None:
            _INHERITED.append(cache._conn)
            cache._conn = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def text_hash(text: str, kind: str = "doc") -> str:
    """The core's chunk hash for documents; queries are salted so both kinds can be cached."""
    data = text if kind == "doc" else f"query\x00{text}"
    return hashlib.sha256(data.encode("utf-8")).hexdigest()


class EmbeddingCache:
    """``(provider, model, provider_key, hash) → float32 vector`` in one SQLite file."""

    def __init__(self, path: Path, max_entries: int = DEFAULT_CACHE_ENTRIES):
        self.path = path
        self.max_entries = max_entries
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        #: Set once the cache's folder is found read-only: the cache is left alone from then on.
        self._off = False
        # The first write checks the size too: counting only this process's writes, a command
        # run per prompt (``memdir ltm search`` caches each query) never reached a prune.
        self._puts = _PRUNE_EVERY
        _CACHES.add(self)

    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            try:
                mode = os.lstat(self.path).st_mode
            except FileNotFoundError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                # SQLite said "disk I/O error" (a FIFO) or "unable to open database file" (a folder)
                # twice a command, for ever: read as a failing disk, and nothing said what to remove;
                # a link was followed, the cache made and written wherever it pointed
                from memdir.reading import kind_of

                self._off = True  # said once, then left alone for the rest of the process
                kind = "a symbolic link" if stat.S_ISLNK(mode) else kind_of(mode)
                raise OSError(f"{self.path} is {kind}, not a regular file: remove it (memdir makes the cache again)")
            create_private(self.path)  # cached vectors of the memories' text
            conn = sqlite3.connect(self.path, check_same_thread=False, timeout=10)
            try:
                enable_wal(conn, 10)  # several stores opening one new cache at once (threads, agents)
                conn.execute(
                    "CREATE TABLE IF NOT EXISTS embedding_cache(provider TEXT NOT NULL, model TEXT NOT NULL, "
                    "provider_key TEXT NOT NULL, hash TEXT NOT NULL, embedding BLOB NOT NULL, dims INTEGER, "
                    "updated_at INTEGER NOT NULL, PRIMARY KEY(provider, model, provider_key, hash))"
                )
                conn.execute("CREATE INDEX IF NOT EXISTS idx_cache_updated ON embedding_cache(updated_at)")
            except BaseException:
                conn.close()  # (it stayed open, its file held, until collected: a read-only mount stayed busy)
                raise
            self._conn = conn
        return self._conn

    def get(self, key: tuple[str, str, str], hashes: Sequence[str]) -> dict[str, np.ndarray]:
        """Cached vectors of ``hashes``; an unreadable cache counts as empty (see :meth:`_guarded`)."""
        if not hashes:
            return {}
        rows = self._guarded("read", lambda: self._read(key, hashes), [])
        found = {h: vec for h, blob, dims in rows if (vec := _cached_vector(blob, dims)) is not None}
        if found:  # the LRU touch is a write: a read-only or full store still uses the hits
            self._guarded("update", lambda: self._touch(key, list(found)), None)
        return found

    def _read(self, key: tuple[str, str, str], hashes: Sequence[str]) -> list[tuple[str, Any, Any]]:
        with self._lock:
            marks = ",".join("?" * len(hashes))
            return self._db().execute(
                f"SELECT hash, embedding, dims FROM embedding_cache WHERE provider = ? AND model = ? "
                f"AND provider_key = ? AND hash IN ({marks})", (*key, *hashes)).fetchall()

    def _touch(self, key: tuple[str, str, str], hashes: list[str]) -> None:
        with self._lock:
            db = self._db()
            marks = ",".join("?" * len(hashes))
            db.execute(
                f"UPDATE embedding_cache SET updated_at = ? WHERE provider = ? AND model = ? AND provider_key = ? "
                f"AND hash IN ({marks})", (lru_stamp(db), *key, *hashes))
            db.commit()

    def _guarded(self, what: str, op: Callable[[], T], default: T) -> T:
        """Run a cache operation; if SQLite or the disk fails, go on without the cache.

        The cache only saves embedding calls: a cache file that is damaged, read-only or on a full
        disk must not make every store and search of long-term memory fail.  A damaged file is
        deleted (the next call starts a new one); any other failure is left for next time.
        """
        if self._off:
            return default
        try:
            return op()
        except (sqlite3.Error, OSError) as exc:
            from memdir.stores.sqlite_health import folder_refused

            if folder_refused(self.path.parent, os.W_OK | os.X_OK) is not None:
                # a read-only store (a read-only mount or state folder) is searched as it is: every
                # 'ltm search' and memory_recall printed two warnings that the cache "failed"
                self._off = True
                log.debug("long-term memory embedding cache %s: its folder is read-only (%s)", what, exc)
                return default
            log.warning("long-term memory embedding cache %s failed (%s): continuing without it", what, exc)
            if is_damage_error(exc):
                self._discard()
            return default

    def _discard(self) -> None:
        self.close()
        for suffix in ("", "-wal", "-shm"):
            try:
                os.unlink(f"{self.path}{suffix}")
            except OSError:
                pass

    def put(self, key: tuple[str, str, str], items: dict[str, np.ndarray]) -> None:
        if items:
            self._guarded("write", lambda: self._write(key, items), None)

    def _write(self, key: tuple[str, str, str], items: dict[str, np.ndarray]) -> None:
        with self._lock:
            db = self._db()
            now = lru_stamp(db)
            db.executemany(
                "INSERT OR REPLACE INTO embedding_cache(provider, model, provider_key, hash, embedding, dims, "
                "updated_at) VALUES (?, ?, ?, ?, ?, ?, ?)",
                [(*key, h, np.asarray(v, dtype="<f4").tobytes(), len(v), now) for h, v in items.items()])
            self._puts += len(items)
            if self._puts >= _PRUNE_EVERY:
                self._puts = 0
                (count,) = db.execute("SELECT COUNT(*) FROM embedding_cache").fetchone()
                if count > self.max_entries:
                    db.execute("DELETE FROM embedding_cache WHERE rowid IN (SELECT rowid FROM embedding_cache "
                               "ORDER BY updated_at ASC, rowid ASC LIMIT ?)", (count - self.max_entries,))
            db.commit()

    def count(self) -> int:
        if not self.path.exists():
            return 0
        with self._lock:
            return int(self._db().execute("SELECT COUNT(*) FROM embedding_cache").fetchone()[0])

    def close(self) -> None:
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None


class Embedder:
    """A provider plus the cache: ``documents(texts)`` and ``query(text)`` return unit float32 vectors."""

    def __init__(self, provider: Any, cache: EmbeddingCache | None, *, expected_dims: int | None = None):
        self.provider = provider
        self.cache = cache
        self.expected_dims = expected_dims

    @property
    def key(self) -> tuple[str, str, str]:
        p = self.provider
        return (str(p.id), str(p.model), str(getattr(p, "provider_key", "")))

    @property
    def identity(self) -> dict[str, str]:
        """What the table records, so vectors from another model are never compared with these."""
        provider, model, pkey = self.key
        return {"provider": provider, "model": model, "providerKey": pkey}

    def documents(self, texts: Sequence[str]) -> list[np.ndarray]:
        return self._embed(list(texts), "doc")

    def query(self, text: str) -> np.ndarray:
        return self._embed([text], "query")[0]

    def _embed(self, texts: list[str], kind: str) -> list[np.ndarray]:
        hashes = [text_hash(t, kind) for t in texts]
        found = self.cache.get(self.key, sorted(set(hashes))) if self.cache is not None else {}
        missing = [i for i, h in enumerate(hashes) if h not in found]
        if missing:
            todo = [texts[i] for i in missing]
            if kind == "query" and len(todo) == 1:
                raw = [self.provider.embed_query(todo[0])]
            else:
                raw = self.provider.embed_batch(todo)
            fresh = {hashes[i]: _unit(v) for i, v in zip(missing, raw, strict=True)}
            found.update(fresh)
            if self.cache is not None:
                self.cache.put(self.key, fresh)
        out = [found[h] for h in hashes]
        for vec in out:
            self._check_dims(vec)
        return out

    def _check_dims(self, vec: np.ndarray) -> None:
        if self.expected_dims is not None and vec.size != self.expected_dims:
            from memdir.ltm.store import LtmError

            raise LtmError(
                f"longTermMemory.embedding.dimensions is {self.expected_dims} but {self.key[0]}/{self.key[1]} "
                f"produces {vec.size}-dimensional vectors")

    def close(self) -> None:
        if self.cache is not None:
            self.cache.close()


def _cached_vector(blob: Any, dims: Any) -> np.ndarray | None:
    """A cache row's vector, or ``None`` (a miss, embedded again and the row replaced) when its
    bytes are not ``dims`` finite floats of some length.  Trusted, a damaged row failed every store
    and search of its text ("buffer size must be a multiple of element size"), a short one was
    "a table of 384-dimensional vectors, but the model makes 100: run ltm reembed", and one holding
    NaN made a search "No matches." and a store a bare Lance error."""
    if not isinstance(blob, bytes) or not blob or len(blob) % 4 or (isinstance(dims, int) and len(blob) != 4 * dims):
        return None
    vec = np.frombuffer(blob, dtype="<f4").astype(np.float32)
    if not np.isfinite(vec).all() or not vec.any():
        return None
    return vec


def _unit(vector: Sequence[float]) -> np.ndarray:
    arr = np.asarray(vector, dtype=np.float32)
    arr = np.where(np.isfinite(arr), arr, 0.0).astype(np.float32)
    norm = float(np.linalg.norm(arr))
    if norm < 1e-10:
        from memdir.ltm.store import LtmError

        raise LtmError("the embedding provider returned a zero vector; it cannot be stored or compared")
    return arr / norm
