"""Keeping the SQLite index usable: damage detection, moving a damaged file aside, read-only opens.

The index is derived data: when SQLite reports it damaged ("database disk image is malformed",
"file is not a database"), when its metadata is not valid JSON or when one of its tables is
gone, the file is moved aside as ``<index>.corrupt-<time>`` (kept for inspection, never
deleted), an empty index takes its place and the next sync rebuilds it from the Markdown files.
Embeddings are expensive, so whatever rows of the old embedding cache can still be read are
copied into the new file first.

A verdict is only ever acted on after SQLite itself confirms it on a fresh connection under the
writer lock, so a transient error or a race with another process never throws a good index
away.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import stat
import time
from pathlib import Path
from typing import Any

from memdir import db
from memdir.errors import IndexDamaged

#: Phrases SQLite uses for a damaged file (SQLITE_CORRUPT, SQLITE_NOTADB) or a broken schema.
DAMAGE_MARKERS = (
    "database disk image is malformed",
    "file is not a database",
    "file is encrypted or is not a database",
    "malformed database schema",
    "database corruption",
    "vtable constructor failed",
    "no such table: chunks",
    "no such table: main.chunks",
    "no such table: files",
    "no such table: meta",
    "fts5: corrupt",
    "sqlite_corrupt",
    # Text that is not UTF-8 (the Python binding's words): memdir writes only UTF-8, so a flipped
    # byte in a stored path or hash; every sync that read it failed until the index was rebuilt.
    "could not decode to utf-8",
)
#: SQLITE_CORRUPT and SQLITE_NOTADB (primary result codes).
_DAMAGE_CODES = {11, 26}
READONLY_MARKERS = ("attempt to write a readonly database", "readonly database", "read-only file system",
                    "unable to open database file", "permission denied")

#: Tables a built index must have (a missing one means the file was tampered with).  The embedding
#: cache is not one: it is created with the first cached vector (a keyword-only index has none).
REQUIRED_TABLES = ("meta", "files", "chunks")



def is_damage_error(exc: BaseException) -> bool:
    # UnicodeDecodeError: the binding could not decode a value or SQLite's own error message (which
    # quotes a damaged schema entry), so "malformed database schema" reached no one.
    if isinstance(exc, IndexDamaged | UnicodeDecodeError):
        return True
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int) and code & 0xFF in _DAMAGE_CODES:
        return True
    text = str(exc).lower()
    return any(m in text for m in DAMAGE_MARKERS)


def is_readonly_error(exc: BaseException) -> bool:
    if isinstance(exc, PermissionError) or getattr(exc, "errno", None) == 30:  # EROFS
        return True
    text = str(exc).lower()
    return any(m in text for m in READONLY_MARKERS)


#: What SQLite says when it cannot write for want of space: ENOSPC is "database or disk is full"; creating
#: or growing the WAL index (``-shm``) on a full disk, or past a file size limit, is "disk I/O error".
NO_SPACE_MARKERS = ("database or disk is full", "disk i/o error")
_NO_SPACE_ERRNOS = {errno.ENOSPC, errno.EFBIG, getattr(errno, "EDQUOT", errno.ENOSPC)}


def is_unwritable_error(exc: BaseException) -> bool:
    """Opening for writing failed because nothing can be written (read-only, or no space left): the
    index as it is can still be read, so searches go on with what it holds (not for damage, which
    callers test first)."""
    if is_readonly_error(exc) or getattr(exc, "errno", None) in _NO_SPACE_ERRNOS:
        return True
    text = str(exc).lower()
    return any(m in text for m in NO_SPACE_MARKERS)


def user_name(uid: int) -> str:
    """``name (uid N)``, or ``uid N`` for a uid with no account (a container's)."""
    try:
        import pwd

        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except (ImportError, KeyError):
        return f"uid {uid}"


def unwritable_file(path: Path) -> str | None:
    """Why this user cannot update the index although its folder may be writable: the index, its
    write-ahead log (``-wal``), its shared memory (``-shm``) or its writer lock (``.lock``) is a
    file this user cannot write, typically one left by memdir run as another user (root).
    ``None`` when each can be written.

    Why: SQLite only says "attempt to write a readonly database" or "unable to open database
    file", which names neither the file nor what to do; and a ``-wal`` this user cannot read
    hides the index's latest writes, so its searches are stale.
    """
    for suffix in ("", "-wal", "-shm", ".lock"):
        name = f"{path}{suffix}"
        if suffix in ("-wal", "-shm"):
            # SQLite never opens these through a link (nor as a folder), and said only "unable to open
            # database file" for each update, the index stale for ever
            try:
                mode = os.lstat(name).st_mode
            except OSError:
                mode = None
            if mode is not None and not stat.S_ISREG(mode):
                from memdir.reading import kind_of

                kind = "a symbolic link" if stat.S_ISLNK(mode) else kind_of(mode)
                return (f"{name} is {kind}, not a regular file: SQLite does not open the index's "
                        f"{'write-ahead log' if suffix == '-wal' else 'shared memory'} through it; remove it "
                        "(SQLite makes the file again)")
        try:
            st = os.stat(name)
        except OSError:
            continue
        if os.access(name, os.W_OK):
            continue
        if _on_read_only_mount(name):  # no mode or owner change can help (a container's ro mount, a CD)
            return (f"{name} is on a file system mounted read-only: remount it read-write, or choose a writable "
                    "state folder (--state-dir, MEMDIR_STATE_DIR, stateDir; or memorySearch.store.path)")
        readable = "" if os.access(name, os.R_OK) else " or read"
        also = " (what was written last may be missing from searches)" if suffix == "-wal" and readable else ""
        if st.st_uid == os.geteuid():  # this user's own file, made read-only
            return f"{name} is read-only (mode {stat.S_IMODE(st.st_mode):o}){also}: make it writable (chmod u+rw)"
        return (f"{name} belongs to {user_name(st.st_uid)} and this user, {user_name(os.geteuid())}, cannot "
                f"write{readable} it{also}: run memdir as that user, or give the index's files to this one (chown)")
    if not all(os.path.exists(f"{path}{suffix}") for suffix in ("-wal", "-shm")):
        # the files can be written but not the folder, where SQLite makes the -wal and -shm: it said
        # only "attempt to write a readonly database"
        why = folder_refused(path.parent, os.W_OK | os.X_OK)
        if why is not None:
            return f"{why} (the index's write-ahead log is made there)"
    return None


def folder_refused(folder: Path, need: int = os.X_OK) -> str | None:
    """Why this user cannot use ``folder`` as ``need`` says (``os.X_OK`` to reach what is in it; with
    ``os.R_OK`` or ``os.W_OK`` to list or write it): the first folder on the way it cannot enter, or
    the folder itself, with its owner and the fix, or its read-only mount.  ``None`` when it can, or
    when a folder on the way is not there (yet: it is made when it is written).

    Why: a folder memdir run as root (``sudo memdir index``) made private failed every later
    command of the user with Python's bare "[Errno 13] Permission denied: '<index>'", naming neither
    the folder nor its owner nor the fix."""
    for here in (*reversed(folder.parents), folder):
        try:
            st = os.stat(here)
        except OSError:
            return None
        want = need if here == folder else os.X_OK
        if not stat.S_ISDIR(st.st_mode) or os.access(here, want):
            continue
        if want & os.W_OK and _on_read_only_mount(str(here)):
            return f"{here} is on a file system mounted read-only"
        doing = next(verb for bit, verb in ((os.X_OK, "enter"), (os.R_OK, "read"), (os.W_OK, "write"))
                     if want & bit and not os.access(here, bit))
        if st.st_uid == os.geteuid():
            return f"this user cannot {doing} its own folder {here} (mode {stat.S_IMODE(st.st_mode):o}): chmod u+rwx it"
        return (f"{here} belongs to {user_name(st.st_uid)} and this user, {user_name(os.geteuid())}, cannot "
                f"{doing} it: run memdir as that user, or give the folder to this one (chown -R)")
    return None


def _on_read_only_mount(name: str) -> bool:
    """Whether ``name`` lies on a file system mounted read-only.  Why: a state folder on a read-only
    mount (a container's ``:ro`` volume, ``mount -o remount,ro``) was said to be "read-only (mode
    644): make it writable (chmod u+rw)", which a chmod cannot fix (it fails there too)."""
    try:
        return bool(os.statvfs(name).f_flag & getattr(os, "ST_RDONLY", 1))
    except (OSError, AttributeError):  # no statvfs (Windows)
        return False


def first_line(exc: BaseException) -> str:
    if isinstance(exc, UnicodeDecodeError):
        return f"database disk image is malformed (text that is not UTF-8: {exc})"
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def open_failure(exc: BaseException) -> str:
    """:func:`first_line` of an error opening a database, with the cause SQLite leaves out when the
    process has (next to) no file descriptor left: it says only "unable to open database file",
    which read as a permissions problem (a long-running host with many files open, a low ``ulimit -n``)."""
    message = first_line(exc)
    if "unable to open database" in message and _out_of_descriptors():
        return f"{message}: too many open files (the process's limit, ulimit -n, is reached)"
    return message


def _out_of_descriptors(needed: int = 8) -> bool:
    """Whether this process cannot open ``needed`` more files (a database takes up to four: the file,
    its WAL, its shared memory, a journal; a failed open may have closed its own already)."""
    fds: list[int] = []
    try:
        while len(fds) < needed:
            fds.append(os.open(os.devnull, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0)))
    except OSError as err:
        return err.errno in (errno.EMFILE, errno.ENFILE)
    finally:
        for fd in fds:
            os.close(fd)
    return False


def probe(conn: Any, *, fts_expected: bool) -> str | None:
    """Cheap checks (a few pages): schema readable, a built index has its tables and valid meta."""
    try:
        names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")}
        if "meta" not in names:
            return None  # nothing built yet
        rows = conn.execute("SELECT key, value FROM meta").fetchall()
    except Exception as exc:
        if is_damage_error(exc):
            return first_line(exc)
        raise
    if not rows:
        return None
    for key, value in rows:
        try:
            json.loads(value)
        except (TypeError, ValueError) as exc:
            return f"index metadata ({key}) is not valid JSON: {exc}"
    missing = [t for t in REQUIRED_TABLES if t not in names]
    if fts_expected and "chunks_fts" not in names:
        missing.append("chunks_fts")
    if missing:
        return f"index table{'s' if len(missing) > 1 else ''} missing: {', '.join(missing)}"
    return None


def has_fts5(conn: Any) -> bool:
    try:
        return any(row[0] == "ENABLE_FTS5" for row in conn.execute("PRAGMA compile_options"))
    except Exception:
        return False


def quick_check(conn: Any, *, full: bool = False) -> str | None:
    """``PRAGMA quick_check``: every page read once; ``None`` when SQLite says "ok".

    ``full``: ``PRAGMA integrity_check`` instead, which also finds rows out of their key's order
    and indexes that disagree with their table (a damaged key is listed by a scan but never found
    by a lookup: a sync deleted that file's row again on every run, and the index stayed "dirty"
    for ever), then every stored text is decoded (:func:`undecodable_text`)."""
    pragma = "integrity_check" if full else "quick_check"
    try:
        rows = conn.execute(f"PRAGMA {pragma}").fetchall()
        if rows and rows[0][0] == "ok":
            return undecodable_text(conn) if full else None
    except Exception as exc:
        if is_damage_error(exc):
            return first_line(exc)
        raise
    lines = [ln.strip() for r in rows for ln in str(r[0]).splitlines()]
    lines = [ln for ln in lines if ln and not ln.startswith("***")]
    if not lines:
        return f"database disk image is malformed ({pragma} failed)"
    more = f"; {len(lines) - 1} more problems" if len(lines) > 1 else ""
    return f"database disk image is malformed ({pragma}: {lines[0]}{more})"


#: The text columns of memdir's own tables (a table an older index lacks is skipped).
_TEXT_COLUMNS = {"meta": ("key", "value"), "files": ("path", "source", "hash"),
                 "chunks": ("path", "source", "model", "text", "date_start", "date_end")}


def undecodable_text(conn: Any) -> str | None:
    """The first stored text that is not UTF-8, or ``None`` (SQLite never checks it; ~0.15 s for 35 MB)."""
    names = {row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    for table, cols in _TEXT_COLUMNS.items():
        if table not in names:
            continue
        # as bytes, so that one bad value is reported, not raised from the middle of the scan
        query = conn.execute(f"SELECT {', '.join(f'CAST({c} AS BLOB)' for c in cols)} FROM {table}")
        for row in query:
            for col, value in zip(cols, row, strict=True):
                try:
                    if value is not None:
                        bytes(value).decode("utf-8")
                except UnicodeDecodeError:
                    return f"database disk image is malformed (text of {table}.{col} is not UTF-8)"
    return None


def file_identity(path: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def confirm(path: Path, *, fts_expected: bool) -> str | None:
    """Re-examine the file on a fresh connection: the problem, or ``None`` if it is healthy."""
    try:
        conn = db.connect(path, readonly=True)
    except Exception as exc:
        if is_damage_error(exc):
            return first_line(exc)
        raise
    try:
        return probe(conn, fts_expected=fts_expected) or quick_check(conn, full=True)
    except Exception as exc:
        if is_damage_error(exc):
            return first_line(exc)
        raise
    finally:
        conn.close()


#: What every SQLite database file starts with.
SQLITE_MAGIC = b"SQLite format 3\x00"
#: Names an index file has (memdir's own ``<workspace>-<hash>.sqlite`` and the usual ones): with
#: these a file that is no database any more is a damaged index, not someone's document.
INDEX_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def may_replace(path: Path) -> bool:
    """Whether a file SQLite calls damaged may be moved aside for a fresh index: it is (or was)
    an SQLite database, is empty, or has an index's name.  A configured index path that points at
    someone's ``notes.txt`` is refused rather than replaced (the file would be kept, but gone
    from where its owner left it)."""
    if path.suffix.lower() in INDEX_SUFFIXES:
        return True
    try:
        with open(path, "rb") as f:
            head = f.read(len(SQLITE_MAGIC))
    except OSError:
        return False
    return not head or head == SQLITE_MAGIC


def quarantine(path: Path) -> Path:
    """Move ``path`` (and its WAL) aside as ``<path>.corrupt-<time>``; its shared memory is dropped."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = Path(f"{path}.corrupt-{stamp}")
    n = 1
    while target.exists():
        n += 1
        target = Path(f"{path}.corrupt-{stamp}-{n}")
    os.replace(path, target)
    for suffix in ("-wal", "-journal"):
        try:
            os.replace(f"{path}{suffix}", f"{target}{suffix}")
        except FileNotFoundError:
            pass
    try:
        os.unlink(f"{path}-shm")
    except FileNotFoundError:
        pass
    return target


def _untruncated_copy(corrupt: Path) -> Path | None:
    """A copy of a truncated database whose header claims only the pages the file still has.

    SQLite refuses a file shorter than its header says outright; with the page count corrected
    every page that survived can be read again.  ``None`` if the header does not allow it.
    """
    try:
        with open(corrupt, "rb") as fh:
            header = fh.read(100)
        size = corrupt.stat().st_size
    except OSError:
        return None
    if len(header) < 100 or not header.startswith(b"SQLite format 3\x00"):
        return None
    page = int.from_bytes(header[16:18], "big")
    page = 65536 if page == 1 else page
    claimed = int.from_bytes(header[28:32], "big")
    if page < 512 or page & (page - 1) or claimed * page <= size:
        return None
    copy = Path(f"{corrupt}.salvage")
    try:
        shutil.copyfile(corrupt, copy)
        with open(copy, "r+b") as fh:
            fh.seek(28)
            fh.write((size // page).to_bytes(4, "big"))
    except OSError:
        copy.unlink(missing_ok=True)
        return None
    return copy


def _read_cache(source: Path, conn: Any, batch: int) -> int:
    try:
        old = db.binding().connect(db.file_uri(source, "mode=ro&immutable=1"), uri=True,
                                   check_same_thread=False)
        # Read past schema entries that point at lost pages (a truncated file's later tables);
        # the connection is read-only, so nothing can be written through it.
        old.execute("PRAGMA writable_schema = ON")
    except Exception:
        return 0
    cols = "provider, model, provider_key, hash, embedding, dims, updated_at"
    saved = 0
    try:
        try:
            top = old.execute("SELECT max(rowid) FROM embedding_cache").fetchone()[0] or 0
        except Exception:
            return 0
        lo = 0
        while lo <= top:
            try:
                rows = old.execute(f"SELECT {cols} FROM embedding_cache WHERE rowid >= ? AND rowid < ?",
                                   (lo, lo + batch)).fetchall()
            except Exception:
                rows = []
            rows = [_held(old, r) if isinstance(r[4], bytes | bytearray) and not r[4] else r for r in rows]
            # hashes as the new index stores them (an index before schema 4 kept them as hex text)
            good = _sound([(*r[:3], _hash_key(r[3]), *r[4:]) for r in rows
                           if isinstance(r[4], bytes | bytearray) and r[5] and len(r[4]) == 4 * r[5]])
            if good:
                from memdir.stores.sqlite import ensure_cache

                ensure_cache(conn)
                conn.executemany(f"INSERT OR IGNORE INTO embedding_cache({cols}) VALUES (?,?,?,?,?,?,?)", good)
                saved += len(good)
            lo += batch
    finally:
        old.close()
    return saved


def _sound(rows: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The cache rows whose vector looks like the others of its model: finite, no one component
    holding most of its length, a length within a factor of 2 of the median of its model's vectors
    here.  Damage that changed bytes inside a vector is invisible to SQLite; salvaged, the wrong
    vector was served by every rebuild after (one flipped exponent bit dropped a note out of the
    results of a search for its own codeword).  Dropping a good one only costs its embedding again."""
    import numpy as np

    lengths: list[float | None] = []
    for row in rows:
        squares = np.frombuffer(row[4], dtype="<f4").astype(np.float64) ** 2
        total = float(squares.sum())
        lengths.append(total ** 0.5 if np.isfinite(total) and total > 0 and squares.max() <= total / 2 else None)
    medians: dict[Any, list[float]] = {}
    for row, length in zip(rows, lengths, strict=True):
        if length is not None:
            medians.setdefault((row[1], row[5]), []).append(length)
    middle = {key: float(np.median(found)) for key, found in medians.items()}
    return [row for row, length in zip(rows, lengths, strict=True)
            if length is not None and middle[(row[1], row[5])] / 2 <= length <= middle[(row[1], row[5])] * 2]


def _hash_key(value: Any) -> Any:
    from memdir.stores.sqlite import hex_key

    return hex_key(value) if isinstance(value, str) else value


def _held(old: Any, row: tuple[Any, ...]) -> tuple[Any, ...]:
    """A cache entry that is a reference (empty blob) with the vector a chunk of ``old`` holds."""
    try:
        found = old.execute("SELECT embedding FROM chunks WHERE hash = ? AND model = ? AND length(embedding) = ? "
                            "LIMIT 1", (row[3], row[1], 4 * int(row[5] or 0))).fetchone()
    except Exception:
        return row
    return (*row[:4], found[0], *row[5:]) if found else row


def salvage_cache(corrupt: Path, conn: Any, *, batch: int = 500) -> int:
    """Copy every embedding-cache row that can still be read from a damaged file into ``conn``.

    Rows are read by rowid range, so one unreadable page costs its range, not the whole cache;
    a truncated file is read through a copy with its page count corrected.
    """
    saved = _read_cache(corrupt, conn, batch)
    if saved:
        return saved
    copy = _untruncated_copy(corrupt)
    if copy is None:
        return 0
    try:
        return _read_cache(copy, conn, batch)
    finally:
        copy.unlink(missing_ok=True)


def connect_readonly(path: Path) -> Any:
    """A read-only connection that also works in a folder where SQLite cannot create its WAL
    index (``-shm``): first ``mode=ro``, then ``immutable=1`` (no locking; the folder being
    read-only, or its disk full, means nobody here can be writing it)."""
    try:
        conn = db.connect(path, readonly=True)
        conn.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return conn
    except Exception as exc:
        if not is_unwritable_error(exc):
            raise
    mod = db.binding()
    conn = mod.connect(db.file_uri(path, "mode=ro&immutable=1"), uri=True, check_same_thread=False,
                       isolation_level=None)
    conn.execute("PRAGMA temp_store = MEMORY")
    return conn
