"""Replacing a small file whole, so that a reader or a crash sees the old file or the new one.

Used for files memdir writes itself (the session store, the long-term memory mirror, derived
model files): the bytes go to a temporary file beside the target, are flushed to disk, and the
temporary file is renamed over the target (atomic on POSIX and on Windows' same volume).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import stat
import tempfile
from pathlib import Path

#: (folder, prefix) pairs this process has already swept for dead writers' temporary files.
_swept: set[tuple[str, str]] = set()


def replace_file(path: Path, data: bytes, *, prefix: str | None = None, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` whole; the temporary file (``prefix``, else ``.<name>.``, then the
    writer's pid) never stays, nor does one a killed writer left (see :func:`remove_dead_temps`).

    The file is private (``0600``, as the temporary file is made) unless ``mode`` is given: then
    it keeps the permissions of the file it replaces, or gets a new file's (``mode`` less the
    umask).  Why: a note in a group-shared workspace (umask 002) came out readable by its writer
    alone, and the rest of the group's indexes skipped it ("Permission denied")."""
    start = _fitting(prefix or f".{path.name}.")
    if (str(path.parent), start) not in _swept:  # once per process: a folder of transcripts can be long
        _swept.add((str(path.parent), start))
        remove_dead_temps(path.parent, start)
    while True:
        try:
            fd, tmp = tempfile.mkstemp(prefix=f"{start}{os.getpid()}-", suffix=".tmp", dir=path.parent)
        except OSError as exc:  # a read-only folder: it named the temporary file ('.out.md.4242-hbsgimf0.tmp')
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        if hold_temp(fd, tmp):
            break
    try:
        if mode is not None:
            try:
                bits = stat.S_IMODE(os.stat(path).st_mode)
            except OSError:
                bits = mode & ~umask()
            try:
                os.fchmod(fd, bits)
            except OSError as exc:
                # a file system that keeps no Unix modes (FAT, exFAT: a USB drive) refuses any it
                # cannot show, EPERM (FUSE: ENOSYS), and the export or mirror failed for a mode
                # it gives every file anyway
                if exc.errno not in (errno.EPERM, errno.ENOSYS, errno.EOPNOTSUPP):
                    raise
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
            os.replace(tmp, path)  # (still held: see hold_temp)
    except BaseException as exc:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(exc, OSError) and exc.filename is None:
            # a write's or flush's error names no file: "[Errno 28] No space left on device" alone did
            # not say which (sessions.json at a chat's start, an ltm export's --out)
            raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from exc
        raise


#: What :func:`replace_file` adds to its prefix: the pid (at most 7 digits on Linux), ``-``, 8
#: random characters and ``.tmp``.
_TEMP_TAIL_BYTES = 20
#: The longest file name most file systems take.
NAME_MAX = 255


def _fitting(start: str) -> str:
    """``start`` cut (at a character) so that a temporary name made from it fits a file name: a
    file whose name is itself 234 to 255 bytes long (``ltm export --out`` to such a name, 118 'ü')
    could not be written at all, "[Errno 36] File name too long" naming the file asked for."""
    room = NAME_MAX - _TEMP_TAIL_BYTES - 1  # (its final ".")
    raw = os.fsencode(start)
    if len(raw) <= room + 1:
        return start
    cut = raw[:room]
    try:
        cut.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.start >= len(cut) - 3:  # a character cut in two at the end
            cut = cut[:exc.start]
    return os.fsdecode(cut) + "."


def umask() -> int:
    """This process's umask, read without setting it (``os.umask`` sets it for every thread while
    it is read) where Linux shows it."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as fh:
            for line in fh:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    old = os.umask(0o022)
    os.umask(old)
    return old


def hold_temp(fd: int, name: str, dir_fd: int | None = None) -> bool:
    """Hold an ``flock`` on a temporary file just made (``fd``, at ``name``) until it is closed, so
    that :func:`writer_gone` knows it is being written; ``False`` when another process removed it
    in the instant before (``fd`` closed: make another).

    Why: a temporary file's name carries its writer's pid, and a container sharing the folder (a
    workspace or state folder on a shared volume) has pids of its own: it took the writer for dead
    and removed the file under it, and the write failed ("cannot write memory/x.md: No such file
    or directory; nothing was kept": 613 of 900 notes, three containers writing at once)."""
    import time

    deadline = time.monotonic() + 1.0
    while True:  # (at once but for a sweep testing the lock that instant; never a wait without end)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() >= deadline:
                break  # (someone else keeps it locked: the name check below still tells if it is ours)
            time.sleep(0.001)
        except OSError:  # a file system without locks: the pid alone tells, as before
            return True
    try:
        named = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except OSError:
        named = None
    held = os.fstat(fd)
    if named is not None and (named.st_dev, named.st_ino) == (held.st_dev, held.st_ino):
        return True
    os.close(fd)
    return False


def writer_gone(pid: int, name: str, dir_fd: int | None = None) -> bool:
    """Whether the writer of temporary file ``name`` (made by process ``pid``) is gone: no such
    process here, and no process holds the file's lock (one of another pid namespace: see
    :func:`hold_temp`)."""
    if process_alive(pid):
        return False
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0),
                     dir_fd=dir_fd)
    except OSError:
        return True  # (gone already, or a link or folder: as before)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError:
        return True
    finally:
        os.close(fd)
    return True


def remove_dead_temps(folder: Path, prefix: str, suffixes: tuple[str, ...] = (".tmp",)) -> None:
    """Delete the ``<prefix><pid>-…<suffix>`` files and folders in ``folder`` whose writer (``pid``)
    is no longer running.

    Why: a writer killed (SIGKILL, power cut) between creating its temporary file and renaming
    it left the file for ever, one more per kill: in the workspace's ``memory/`` folder for the
    long-term memory mirror, in the sessions folder for ``sessions.json``, 40-90 MB in the model
    cache for a saved model graph."""
    try:
        names = os.listdir(folder)
    except OSError:
        return
    for name in names:
        pid = name[len(prefix):].split("-", 1)[0]
        path = Path(folder) / name
        if not (name.startswith(prefix) and name.endswith(suffixes) and pid.isdigit()) or not writer_gone(
                int(pid), str(path)):
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(OSError):
                path.unlink()


def temps_of(prefix: str, tail: str) -> list[str]:
    """The paths beside ``prefix`` whose names are its name followed by what the regular expression
    ``tail`` matches whole: the temporary files memdir names after a file, and nothing else.

    Why: a ``glob(prefix + "*")`` took in any name that begins so: agent 'ops''s index is
    ``ops.sqlite``, and its rebuild's leftovers ``ops.sqlite.tmp-*`` matched agent
    'ops.sqlite.tmp-x''s index (``ops.sqlite.tmp-x.sqlite``), its lock and its WAL, which
    agent ops's next sync deleted, in use or not."""
    import re

    folder, name = os.path.split(prefix)
    try:
        names = os.listdir(folder or ".")
    except OSError:
        return []
    whole = re.compile(re.escape(name) + f"(?:{tail})")
    return [os.path.join(folder, entry) for entry in names if whole.fullmatch(entry)]


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user counts as alive: not ours to judge); a
    writer's pid in a temporary file's name tells whether the file may still be written."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (OSError, OverflowError):  # (EPERM: another user's)
        return True
    return True
