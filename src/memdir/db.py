"""Opening SQLite: which binding, which pragmas, whether sqlite-vec loads.

The standard ``sqlite3`` module of many Python builds (pyenv's among them) cannot load
extensions, so memdir uses ``sqlean`` (sqlean.py: a drop-in ``sqlite3`` with a recent SQLite
that can) when it is installed, and falls back to the standard module, where vector search runs
in NumPy instead.  Only one binding is ever used in a process: two bundled SQLite libraries in
one process have crashed.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

_binding: ModuleType | None = None
_binding_note = ""


def binding() -> ModuleType:
    """The DB-API module in use (``sqlean`` preferred, else ``sqlite3``)."""
    global _binding, _binding_note
    if _binding is None:
        forced = os.environ.get("MEMDIR_SQLITE_BINDING", "").strip().lower()
        if forced != "sqlite3":
            try:
                import sqlean

                _binding, _binding_note = sqlean, "sqlean.py"
            except ImportError:
                _binding_note = "sqlean.py not installed"
        if _binding is None:
            import sqlite3

            _binding = sqlite3
            _binding_note = _binding_note or "forced by MEMDIR_SQLITE_BINDING"
    return _binding


def binding_name() -> str:
    mod = binding()
    return f"{mod.__name__} (SQLite {mod.sqlite_version})"


@dataclass
class VecState:
    available: bool
    error: str | None = None
    version: str | None = None
    path: str | None = None


def load_vec(conn: Any, extension_path: str | None = None) -> VecState:
    """Load sqlite-vec into a connection; report why not when it cannot."""
    if not hasattr(conn, "enable_load_extension"):
        return VecState(False, f"the {binding().__name__} binding cannot load extensions")
    try:
        conn.enable_load_extension(True)
        if extension_path:
            conn.load_extension(extension_path)
            path = extension_path
        else:
            path = _vec_extension_path()
            conn.load_extension(path)
        conn.enable_load_extension(False)
        (version,) = conn.execute("select vec_version()").fetchone()
        return VecState(True, None, version, path)
    except ImportError:
        return VecState(False, "sqlite-vec is not installed")
    except Exception as exc:  # the loader raises the binding's own error types
        return VecState(False, f"sqlite-vec failed to load: {exc}")


def _vec_extension_path() -> str:
    """sqlite-vec's bundled extension, found without importing the package (which imports NumPy
    and the standard ``sqlite3`` module: neither belongs in a keyword search)."""
    import importlib.util

    spec = importlib.util.find_spec("sqlite_vec")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("sqlite-vec is not installed")
    return os.path.join(next(iter(spec.submodule_search_locations)), "vec0")


def is_busy(exc: BaseException) -> bool:
    """Whether ``exc`` is SQLite's "database is locked"/"busy" (any binding)."""
    text = str(exc).lower()
    return type(exc).__name__ == "OperationalError" and ("locked" in text or "busy" in text)


def enable_wal(conn: Any, timeout: float) -> None:
    """``PRAGMA journal_mode = WAL``, tried again while another connection holds a lock it needs.

    Connections switching a new database to WAL at the same moment can get SQLITE_BUSY without
    SQLite calling the busy handler (each waits on a lock the other holds): four threads opening
    one new file failed 13 times in 200 rounds.  Backing off and trying again always succeeds."""
    deadline = time.monotonic() + timeout
    delay = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode = WAL")
            return
        except Exception as exc:
            if not is_busy(exc) or time.monotonic() >= deadline:
                raise
        time.sleep(delay)
        delay = min(delay * 2, 0.05)


def rows_in(conn: Any, sql: str, ids: Sequence[Any], args: Sequence[Any] = (), size: int = 400) -> Iterator[Any]:
    """The rows of ``sql`` for every id, its ``{marks}`` standing for the placeholders of an
    ``IN (…)`` list of a few hundred ids at a time (older SQLite builds bind at most 999), after
    ``args``."""
    for i in range(0, len(ids), size):
        part = list(ids[i:i + size])
        yield from conn.execute(sql.replace("{marks}", ",".join("?" * len(part))), (*args, *part))


def file_uri(path: Path | str, query: str) -> str:
    """SQLite's ``file:`` URI for ``path`` with ``query`` (``mode=ro``...): the path percent-encoded,
    since a ``?``, ``#`` or ``%`` in it (a state folder named ``notes#2``) otherwise cut it short or
    decoded it into another path, and every read-only open failed ("unable to open database file")."""
    from urllib.parse import quote

    return f"file:{quote(Path(path).as_posix(), safe='/')}?{query}"


#: Page size of a new database (SQLite's default is 4096).
PAGE_SIZE = 8192
#: Bytes a write-ahead log keeps once checkpointed.  Without a limit SQLite reuses the file at its
#: largest: after a rebuild copied a 5 MB index in one transaction, the WAL stayed 5 MB beside it
#: for as long as a ``memdir mcp`` or ``watch`` kept the index open.
WAL_SIZE_LIMIT = 4 * 1024 * 1024


def create_private(path: Path | str) -> None:
    """Make a database file that is not there yet readable and writable by this user alone (0600),
    for SQLite to fill: its ``-wal`` and ``-shm`` then get the same mode.

    Why: an index holds the notes' text and their embeddings, and came out 0644 under the usual
    umask 022, so any local user could read notes kept in a private workspace (a 0700 folder, a
    0600 ``MEMORY.md``), where transcripts and the settings cache were already 0600."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    except OSError:
        return  # there already (or a link there), or it cannot be made: SQLite says why in its own words
    os.close(fd)


def connect(path: Path | str, *, readonly: bool = False, timeout: float = 30.0, page_size: int = PAGE_SIZE,
            auto_vacuum: bool = False) -> Any:
    """A connection with WAL, a busy timeout and rows as tuples; ``check_same_thread`` off
    because :class:`memdir.stores.sqlite.SqliteStore` serialises access itself.  ``page_size``:
    what a new database gets (a rebuild's shadow takes its index's, so it can be copied in page
    by page).  ``auto_vacuum``: a new database keeps track of its pages' parents, so that
    ``PRAGMA incremental_vacuum`` can give its free pages back (a rebuild's shadow, see
    :meth:`memdir.stores.sqlite.SqliteStore.rebuild`)."""
    mod = binding()
    if readonly:
        uri = file_uri(path, "mode=ro")
        conn = mod.connect(uri, uri=True, timeout=timeout, check_same_thread=False, isolation_level=None)
    else:
        if str(path) != ":memory:":
            create_private(path)
        conn = mod.connect(str(path), timeout=timeout, check_same_thread=False, isolation_level=None)
    conn.execute(f"PRAGMA busy_timeout = {int(timeout * 1000)}")
    if not readonly:
        # Before WAL, so that a new database takes it (an existing one keeps its own).  A chunk
        # row with a 384-d float32 vector is ~2.6 KB: one fits a 4 KiB page, three fit 8 KiB,
        # which took a 10k-chunk index with vectors from 53.6 to 40.0 MB.
        conn.execute(f"PRAGMA page_size = {int(page_size)}")
        if auto_vacuum:
            conn.execute("PRAGMA auto_vacuum = INCREMENTAL")
        enable_wal(conn, timeout)
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute(f"PRAGMA journal_size_limit = {WAL_SIZE_LIMIT}")
        # Deleted rows are zeroed where they lay (their cells, and pages left free), not only
        # unlinked: a note deleted or a line edited away (a password pasted by mistake) stayed
        # readable in the index file's bytes until SQLite happened to reuse that space.
        conn.execute("PRAGMA secure_delete = ON")
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn
