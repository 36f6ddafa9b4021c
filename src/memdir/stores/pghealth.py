"""Checking and healing a PostgreSQL index (mixed into :class:`memdir.stores.postgres.PostgresStore`).

An agent's index is derived data, as in SQLite, but the server keeps the pages safe: what goes
wrong here is the server reporting a damaged page or index (SQLSTATE ``XX001``/``XX002``), one
of memdir's tables dropped by hand, or an agent's rows no longer agreeing with each other
(BM25 statistics that drifted from the chunks, chunks without their file row, vectors without
their chunk).  :meth:`PgHealth.check` finds these — cheaply (the tables exist, the live
generation's metadata is an object) or thoroughly (every row of the agent's live generation is
read and cross-checked) — and :meth:`PgHealth.recover` sets the damaged generation aside: under
the writer lock, after confirming the problem, it publishes an empty live generation in one
transaction and deletes the old one's rows; the next sync rebuilds from the Markdown files.
The embedding cache is a table of its own, shared by all agents, so nothing is re-embedded.

A store opened against a read replica (hot standby) or with a role that may not write is
read-only: searches work, and writes are refused up front with the reason.
"""

from __future__ import annotations

import threading
import time
from contextlib import AbstractContextManager
from typing import TYPE_CHECKING, Any

from memdir.errors import IndexDamaged, StoreError
from memdir.lock import LockTimeout, WriterStopped, holder_of, wait_for_writer, writer_words
from memdir.stores.base import RECOVERED_STATE
from memdir.stores.pgschema import TABLES  # one of them missing is damage no rebuild can mend

if TYPE_CHECKING:
    from memdir.stores.pgconn import AdvisoryWriterLock, Database

#: How long healing waits for another writer (seconds): one holding the lock that long is a long
#: rebuild (which replaces the damaged generation anyway), or stopped or hung; a search that met the
#: damage used to wait for it for ever.  A stopped holder on this host is given up on sooner
#: (:func:`memdir.lock.wait_for_writer`).
RECOVER_LOCK_WAIT = 60.0

#: data_corrupted, index_corrupted (a damaged page or index), undefined_table (a table dropped by hand).
DAMAGE_SQLSTATES = ("XX001", "XX002", "42P01")


def first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


class PgHealth:
    """``check``, ``is_damage`` and ``recover`` for one agent's live generation."""

    agent: str
    schema: str
    location: str
    readonly: bool
    readonly_reason: str | None
    recovery: dict[str, Any] | None
    _local: threading.local

    db: Database

    if TYPE_CHECKING:  # provided by PostgresStore
        def _conn(self) -> AbstractContextManager[Any]: ...
        def writer_lock(self) -> AdvisoryWriterLock: ...
        def _drop_generation(self, ix: int) -> None: ...
        def _forget_stats(self) -> None: ...

    def is_damage(self, exc: BaseException) -> bool:
        return isinstance(exc, IndexDamaged) or getattr(exc, "sqlstate", None) in DAMAGE_SQLSTATES

    def check(self, *, thorough: bool = False, max_bytes: int | None = None) -> str | None:
        """What is wrong with this agent's index, or ``None``.  Cheap (two catalog and row lookups)
        unless ``thorough``: then every row of the live generation is read and cross-checked, when
        its estimated size is at most ``max_bytes`` (``None``: whatever its size)."""
        try:
            with self._conn() as c, c.transaction():
                if getattr(self._local, "conn", None) is None:  # one snapshot: a concurrent write is all or nothing
                    c.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                missing = [t for (t,) in c.execute("SELECT t FROM unnest(%s::text[]) t WHERE to_regclass("
                                                   "format('%%I.%%I', %s::text, t)) IS NULL",
                                                   (list(TABLES), self.schema))]
                if missing:
                    return f"memdir's table {', '.join(missing)} is missing from schema {self.schema!r}"
                row = c.execute("SELECT id, jsonb_typeof(meta), n_docs, total_len FROM indexes WHERE agent = %s "
                                "AND state = 'live'", (self.agent,)).fetchone()
                if row is None:
                    return None  # nothing built yet
                ix, kind, n_docs, total_len = int(row[0]), row[1], int(row[2]), int(row[3])
                if kind not in (None, "object"):
                    return f"the index metadata (generation {ix}) is a JSON {kind}, not an object"
                if n_docs < 0 or total_len < 0:
                    return (f"the keyword statistics of generation {ix} are negative ({n_docs} chunks, "
                            f"{total_len} tokens)")
                if not thorough or (max_bytes is not None and self._estimated_bytes(c, n_docs) > max_bytes):
                    return None
                return self._cross_check(c, ix, n_docs, total_len)
        except Exception as exc:
            if self.is_damage(exc):
                return first_line(exc)
            raise

    def _estimated_bytes(self, c: Any, n_docs: int) -> float:
        """This agent's share of the chunk and vector tables (by its chunk count)."""
        row = c.execute("SELECT pg_table_size(format('%%I.chunks', %(s)s::text)) + pg_table_size(format("
                        "'%%I.vectors', %(s)s::text)), greatest((SELECT reltuples FROM pg_class WHERE oid = "
                        "to_regclass(format('%%I.chunks', %(s)s::text))), (SELECT sum(n_docs) FROM indexes), 1)",
                        {"s": self.schema}).fetchone()
        return float(row[0]) * n_docs / float(row[1])

    @staticmethod
    def _cross_check(c: Any, ix: int, n_docs: int, total_len: int) -> str | None:
        """Read every row of generation ``ix`` (a damaged page raises) and check they agree."""
        chunks, length, _chars, no_file, no_vector = c.execute(
            "SELECT count(*), coalesce(sum(c.doc_len), 0), coalesce(sum(length(c.text) + length(c.tsv) "
            "+ length(c.tsv_stem)), 0), count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM files f WHERE "
            "f.index_id = c.index_id AND f.path = c.path AND f.source = c.source)), count(*) FILTER (WHERE "
            "c.embedded AND NOT EXISTS (SELECT 1 FROM vectors v WHERE v.index_id = c.index_id AND "
            "v.chunk_id = c.id)) FROM chunks c WHERE c.index_id = %s", (ix,)).fetchone()
        if (int(chunks), int(length)) != (n_docs, total_len):
            return (f"the keyword statistics of generation {ix} do not match its chunks ({n_docs} chunks and "
                    f"{total_len} tokens recorded, {chunks} and {length} found)")
        if no_file:
            return f"{no_file} chunks of generation {ix} have no file row"
        if no_vector:
            return f"{no_vector} chunks of generation {ix} are marked embedded but have no vector"
        orphans, bad_dims = c.execute(
            "SELECT count(*) FILTER (WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.index_id = v.index_id "
            "AND c.id = v.chunk_id)), count(*) FILTER (WHERE vector_dims(v.embedding) <> v.dims) FROM vectors v "
            "WHERE v.index_id = %s", (ix,)).fetchone()
        if orphans:
            return f"{orphans} vectors of generation {ix} belong to no chunk"
        if bad_dims:
            return f"{bad_dims} vectors of generation {ix} do not have the dimensions recorded for them"
        return None

    def recover(self, problem: str, *, notice: Any = None) -> dict[str, Any] | None:
        """Replace the damaged live generation with an empty one (the next sync rebuilds it).

        Under the writer lock, and only when a thorough check confirms a problem: returns what was
        done, or ``None`` when another process already replaced the generation or the check finds
        it sound after all (a transient error never throws an index away).
        """
        if self.readonly:
            raise StoreError(f"the index {self.location} is damaged ({problem}) and cannot be rebuilt: "
                             f"{self.readonly_reason or 'it was opened read-only'}")
        lock = self.writer_lock()
        if not lock.acquire(0):
            if notice is not None:
                notice(f"waiting for {writer_words(lock.holder())} to finish writing {self.location}")
            try:
                wait_for_writer(lock, RECOVER_LOCK_WAIT, self.location)
            except LockTimeout as exc:
                why = (str(exc) if isinstance(exc, WriterStopped) else
                       f"{writer_words(holder_of(lock))} has held its writer lock for {RECOVER_LOCK_WAIT:g} s")
                raise LockTimeout(f"the index {self.location} is damaged ({problem}) and was not rebuilt: {why}; "
                                  "try again when it is done (its next sync rebuilds it)") from exc
        try:
            confirmed = self.check(thorough=True)
            if confirmed is None:
                return None
            recreated = "is missing from schema" in confirmed and self.db.recreate_schema()
            if recreated:
                confirmed = f"memdir's schema {self.schema!r} was dropped"
            elif "is missing from schema" in confirmed:
                raise StoreError(f"the index {self.location} cannot be rebuilt: {confirmed} (dropped by hand?); "
                                 f'restore it, or drop the schema (DROP SCHEMA "{self.schema}" CASCADE) and memdir '
                                 "re-creates it and rebuilds every agent's index from its files")
            from psycopg.types.json import Jsonb

            from memdir.stores.postgres import json_in

            info: dict[str, Any] = {"problem": confirmed, "indexPath": self.location, "droppedGeneration": None,
                                    "at": int(time.time() * 1000)}
            with self._conn() as c, c.transaction():
                old = c.execute("SELECT id FROM indexes WHERE agent = %s AND state = 'live' FOR UPDATE",
                                (self.agent,)).fetchone()
                if old is not None:
                    info["droppedGeneration"] = int(old[0])
                    c.execute("UPDATE indexes SET state = 'retired' WHERE id = %s", (old[0],))
                new = c.execute("INSERT INTO indexes(agent, state, ts_config, built_by) SELECT %s, 'live', "
                                "ts_config, 'recovery' FROM indexes WHERE id = %s RETURNING id",
                                (self.agent, info["droppedGeneration"])).fetchone()
                if new is not None:
                    c.execute("INSERT INTO index_state(index_id, key, value) VALUES (%s, %s, %s)",
                              (new[0], RECOVERED_STATE, Jsonb(json_in(info))))
            if info["droppedGeneration"] is not None:
                self._drop_generation(info["droppedGeneration"])
            self._forget_stats()
            self.recovery = info
            if notice is not None and recreated:
                notice(f"{confirmed}: re-created it, and rebuilding {self.location} from the Markdown files")
            elif notice is not None:
                notice(f"the index {self.location} was damaged ({confirmed}); dropped its rows (generation "
                       f"{info['droppedGeneration']}) and rebuilding it from the Markdown files (the embedding "
                       "cache is kept: nothing is embedded again)")
            return info
        finally:
            lock.release()
