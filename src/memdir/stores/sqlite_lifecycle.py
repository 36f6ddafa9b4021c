"""Opening, checking and healing the SQLite index (the lifecycle half of :class:`SqliteStore`).

:meth:`SqliteLifecycle.open` is how every entry point (CLI, API, MCP) opens an index: it names
the path in every error ("it is a directory", "unable to open"), falls back to a read-only
connection when the state folder cannot be written (searches keep working), moves a damaged
index aside and starts an empty one that the next sync rebuilds from the Markdown files
(:func:`recover_path`, with the embedding cache salvaged), and removes a killed rebuild's temp
files when no writer is running.  The detection and salvage primitives live in
:mod:`memdir.stores.sqlite_health`.
"""

from __future__ import annotations

import errno
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from memdir import db
from memdir.atomic_write import temps_of
from memdir.errors import StoreError
from memdir.lock import FileWriterLock, wait_for_writer, writer_words
from memdir.stores import sqlite_health as health
from memdir.stores.base import RECOVERED_STATE

#: How often an index that went read-only on a full disk tries to open writable again.
SPACE_RETRY_SECONDS = 2.0
#: What follows ``<index>.tmp-`` in a rebuild's temporary database's name (its 12 hex digits), and
#: in the names of its journal files: nothing else beside an index is a rebuild's leftover.
REBUILD_TEMP = r"[0-9a-f]{12}"
SQLITE_FILES = r"(?:-wal|-shm|-journal)?"


class SqliteLifecycle:
    """Mixed into :class:`memdir.stores.sqlite.SqliteStore`."""

    path: Path
    readonly: bool
    readonly_reason: str | None
    vector_enabled: bool
    extension_path: str | None
    damage: str | None
    recovery: dict[str, Any] | None
    lock: threading.RLock
    conn: Any
    _identity: tuple[int, int] | None
    #: The page size a new database file gets (an existing one keeps its own).
    new_page_size: int = db.PAGE_SIZE
    #: Whether a new database file can give free pages back (``PRAGMA incremental_vacuum``).
    new_auto_vacuum: bool = False
    #: The writable open fell back to read-only for want of space, not of permission: a full disk
    #: is often freed again, so :meth:`retry_writable` tries once more now and then.
    readonly_for_space: bool = False
    _space_retry_at: float = 0.0

    if TYPE_CHECKING:  # provided by SqliteStore
        fts_available: bool

        def ensure_schema(self) -> None: ...
        def close(self) -> None: ...
        def writer_lock(self) -> FileWriterLock: ...
        def cleanup_leftovers(self) -> None: ...
        def _temp_prefix(self) -> str: ...

    @classmethod
    def open(cls, path: Path, *, notice: Any = None, **kwargs: Any) -> Any:
        """Open the index, healing it first if it is damaged (moved aside, started empty).

        Also removes temp files a killed rebuild left behind when no writer is running.
        """
        path = Path(path)
        try:
            store = cls(path, **kwargs)
        except health.IndexDamaged as exc:
            if kwargs.get("readonly"):
                raise
            info = recover_path(path, str(exc), cls, notice=notice, fts_expected=True)
            store = cls(path, **kwargs)
            store.recovery = info
            return store
        if not store.readonly:
            problem = store.check()
            if problem is not None:
                store.recover(problem, notice=notice)
            store.cleanup_if_idle()
        return store

    def _open(self) -> None:
        """Connect (writable unless that is impossible) and create the schema."""
        blocked = health.folder_refused(self.path.parent)
        if blocked is not None:
            raise StoreError(f"cannot open the index {self.path}: {blocked}")
        if self.path.is_dir():
            raise StoreError(f"cannot open the index {self.path}: it is a directory, not an index file "
                             "(point memorySearch.store.path at a file)")
        if self.path.exists() and not self.path.is_file():  # /dev/null, a FIFO: SQLite says "disk I/O error"
            raise StoreError(f"cannot open the index {self.path}: not a regular file "
                             "(point memorySearch.store.path at a file)")
        conn = None
        # Only an index that was there before this open has something to serve read-only (a
        # rebuild's new shadow, made on a full disk, must fail, not open empty).
        existed = self.path.is_file() and self.path.stat().st_size > 0
        foreign = health.unwritable_file(self.path) if existed and not self.readonly else None
        if foreign is not None:  # (else the first write fails, saying only "readonly database")
            self.readonly, self.readonly_reason, self.readonly_for_space = True, foreign, False
        if not self.readonly:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: it holds the notes' text
                conn = db.connect(self.path, page_size=self.new_page_size, auto_vacuum=self.new_auto_vacuum)
            except Exception as exc:
                if conn is not None:
                    conn.close()
                    conn = None
                if health.is_damage_error(exc):
                    raise health.IndexDamaged(health.first_line(exc)) from exc
                readable = health.is_readonly_error(exc) or (existed and health.is_unwritable_error(exc))
                if not (readable and self.path.is_file()):
                    raise StoreError(f"cannot open the index {self.path}: {self._why_not(exc)}") from exc
                self.readonly = True
                self.readonly_reason = health.first_line(exc)
                self.readonly_for_space = not health.is_readonly_error(exc)
        if conn is None:
            try:
                conn = health.connect_readonly(self.path)
            except Exception as exc:
                if health.is_damage_error(exc):
                    raise health.IndexDamaged(health.first_line(exc)) from exc
                # a file of another user's that this one cannot read either (one memdir run as root
                # made private): its owner and the fix, not SQLite's "unable to open database file"
                why = foreign if foreign is not None else self._why_not(exc)
                raise StoreError(f"cannot open the index {self.path}: {why}") from exc
        self.conn = conn
        self._identity = health.file_identity(self.path)
        if not self.readonly:
            try:
                # A dropped table must be noticed (and the index rebuilt), not silently re-created empty.
                if health.probe(self.conn, fts_expected=health.has_fts5(self.conn)) is None:
                    self.ensure_schema()
            except Exception as exc:
                if health.is_damage_error(exc):
                    self.conn.close()
                    raise health.IndexDamaged(health.first_line(exc)) from exc
                if not health.is_readonly_error(exc) and health.is_unwritable_error(exc):
                    # a new index's schema on a full disk: "disk I/O error" alone named no file
                    self.conn.close()
                    raise StoreError(f"cannot create the index {self.path}: {health.first_line(exc)}") from exc
                if not health.is_readonly_error(exc):
                    raise
                self.readonly, self.readonly_reason = True, health.first_line(exc)

    def _why_not(self, exc: BaseException) -> str:
        """Why the index could not be opened, in words.

        Why: a state folder deleted (``rm -rf``) just as a command opened its index made SQLite
        say "disk I/O error" or "unable to open database file", which read as a full disk."""
        folder = self.path.parent
        nearest = next((p for p in (folder, *folder.parents) if os.path.lexists(p)), None)
        if nearest is not None and not nearest.is_dir():  # a file named as the state dir: "run it again" never helps
            return (f"{nearest} is not a folder, so the index's folder {folder} cannot be made (check the state "
                    "folder: --state-dir, MEMDIR_STATE_DIR, stateDir; or memorySearch.store.path)")
        advice = "choose a writable state folder: --state-dir, MEMDIR_STATE_DIR, stateDir; or memorySearch.store.path"
        if isinstance(exc, OSError) and exc.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
            # the state folder could not be made: a read-only $HOME, or a folder of another user's.
            # Said as it is, not as "was removed while it was being opened" (it never existed).
            return f"cannot create {exc.filename or folder}: {exc.strerror} ({advice})"
        if folder.is_dir() and not os.access(folder, os.W_OK | os.X_OK):  # SQLite: "unable to open database file"
            return f"its folder {folder} is not writable ({advice})"
        if not folder.is_dir():
            return (f"its folder {self.path.parent} was removed while it was being opened (was memdir's state "
                    "folder deleted?); nothing is lost: run the command again, and the index is rebuilt from "
                    "the Markdown files")
        return health.open_failure(exc)

    # -- health ------------------------------------------------------------------------------
    def is_damage(self, exc: BaseException) -> bool:
        return health.is_damage_error(exc)

    def check(self, *, thorough: bool = False, max_bytes: int | None = None) -> str | None:
        """What is wrong with the index file, or ``None``.  Cheap (a few pages) unless
        ``thorough``: then ``PRAGMA quick_check`` reads every page (~300 MB/s), when the file is
        at most ``max_bytes``; ``None`` (``status --deep``): whatever its size, and the full
        check (keys in order, indexes agreeing with their tables, text that decodes: ~30% more)."""
        if self.damage:
            return self.damage
        with self.lock:
            problem = health.probe(self.conn, fts_expected=self.fts_available)
            if problem is None and thorough:
                try:
                    size = os.path.getsize(self.path)
                except OSError:
                    size = 0
                if max_bytes is None or size <= max_bytes:
                    problem = health.quick_check(self.conn, full=max_bytes is None)
        return problem

    def change_token(self) -> Any:
        """Size and mtime of the file and its write-ahead log (``None`` when the file is gone)."""
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        try:
            wal = os.stat(f"{self.path}-wal")
            log = (wal.st_size, wal.st_mtime_ns)
        except OSError:
            log = None
        return (st.st_size, st.st_mtime_ns, log)

    def _mark(self, exc: BaseException) -> None:
        if self.damage is None and health.is_damage_error(exc):
            self.damage = health.first_line(exc)

    def replaced(self) -> bool:
        """True when the file at :attr:`path` is no longer the one this connection has open."""
        return health.file_identity(self.path) != self._identity

    def reopen(self) -> None:
        with self.lock:
            self.close()
            self.damage = None
            self._open()

    def recover(self, problem: str, *, notice: Any = None) -> dict[str, Any] | None:
        """Move the damaged index aside and start an empty one; the next sync rebuilds it.

        Returns what was done, or ``None`` when there was nothing to do (another process already
        replaced the file, or SQLite finds it healthy on a fresh connection after all).
        """
        if self.readonly:
            raise StoreError(f"the index {self.path} is damaged ({problem}) and cannot be rebuilt: "
                             f"{self.readonly_reason or 'it was opened read-only'}")
        with self.lock:
            self.close()
            info = recover_path(self.path, problem, type(self), notice=notice, fts_expected=self.fts_available,
                                identity=self._identity)
            self.damage = None
            self._open()
            if info is not None:
                self.recovery = info
        return info

    def retry_writable(self) -> bool:
        """Open the index writable again if it went read-only for want of space and there may be
        room now (tried at most every :data:`SPACE_RETRY_SECONDS`), so a long-running server
        indexes again once the disk is freed instead of serving a stale index until restarted.
        True when the index is writable now."""
        if not (self.readonly and self.readonly_for_space):
            return not self.readonly
        now = time.monotonic()
        if now < self._space_retry_at:
            return False
        self._space_retry_at = now + SPACE_RETRY_SECONDS
        with self.lock:
            old, reason = self.conn, self.readonly_reason
            self.readonly, self.readonly_for_space = False, False
            try:
                self._open()
            except Exception:
                self.conn, self.readonly, self.readonly_reason, self.readonly_for_space = old, True, reason, True
                return False
            if self.conn is not old:
                old.close()
            return not self.readonly

    def cleanup_if_idle(self) -> None:
        """Remove a killed rebuild's temp files now, unless a writer is busy (they may be its)."""
        if self.readonly or not _any_named(self._temp_prefix()):
            return
        lock = self.writer_lock()
        try:
            if not lock.acquire(0):
                return
        except OSError:
            return
        try:
            self.cleanup_leftovers()
        finally:
            lock.release()


def recover_path(path: Path, problem: str, factory: Callable[[Path], Any], *, notice: Any = None,
                 fts_expected: bool = True, identity: tuple[int, int] | None = None) -> dict[str, Any] | None:
    """Under the writer lock: confirm the damage, move the file aside, salvage the embedding cache."""
    lock = FileWriterLock(path)
    if not lock.acquire(0):
        if notice is not None:
            holder = lock.holder() or {}
            notice(f"waiting for {writer_words(holder)} to finish writing {path}")
        wait_for_writer(lock, None, str(path))  # (not for ever for one that is stopped)
    try:
        if identity is not None and health.file_identity(path) != identity:
            return None  # another process already replaced the damaged file
        if not path.exists():
            return None
        confirmed = health.confirm(path, fts_expected=fts_expected)
        if confirmed is None:
            return None
        if not health.may_replace(path):
            raise StoreError(f"{path} is not an SQLite index ({confirmed or problem}); memdir will not move "
                             "or replace it: point memorySearch.store.path (or MEMDIR_INDEX_PATH) at a .sqlite file")
        try:
            corrupt = health.quarantine(path)
        except OSError as exc:  # a folder that cannot be written: "[Errno 13] Permission denied: 'x' -> 'x.corrupt-…'"
            why = health.folder_refused(path.parent, os.W_OK | os.X_OK) or exc.strerror or str(exc)
            raise StoreError(f"the index {path} is damaged ({confirmed or problem}) and cannot be moved aside to be "
                             f"rebuilt: {why}") from exc
        fresh = factory(path)
        try:
            with fresh.transaction() as c:
                salvaged = health.salvage_cache(corrupt, c)
                info = {"problem": confirmed or problem, "indexPath": str(path), "corruptPath": str(corrupt),
                        "salvagedCacheEntries": salvaged, "at": int(time.time() * 1000)}
                fresh.set_state(RECOVERED_STATE, info)  # so `status` in any process can say so
        finally:
            fresh.close()
        for leftover in temps_of(str(path) + ".tmp-", REBUILD_TEMP + SQLITE_FILES):
            try:
                os.unlink(leftover)
            except OSError:
                pass
        if notice is not None:
            kept = f"; kept {salvaged} cached embeddings" if salvaged else ""
            notice(f"the index {path} was damaged ({info['problem']}); moved it aside to {corrupt} and "
                   f"rebuilding it from the Markdown files{kept}")
        return info
    finally:
        lock.release()


def _any_named(prefix: str) -> bool:
    """Whether a file's path starts with ``prefix``: what ``glob(escape(prefix) + "*")`` finds, without
    compiling a pattern on every open (a cold ``memdir search`` paid 1 ms for it)."""
    folder, name = os.path.split(prefix)
    try:
        return any(entry.startswith(name) for entry in os.listdir(folder or "."))
    except OSError:
        return False
