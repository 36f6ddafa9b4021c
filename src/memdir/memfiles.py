"""The one writer of memory files: ``<workspace>/memory/*.md``.

Everything that writes memory goes through here — :func:`memdir.daily.append_daily` (the
``memory_append`` tool, :meth:`memdir.Memory.append_daily`, the agent loop), the
pre-compaction flush and the session-memory hook.  The guarantees:

* **Confined.**  Writes go through a directory descriptor for ``<ws>/memory`` opened with
  ``O_DIRECTORY | O_NOFOLLOW`` and a file name that must be a plain ``*.md`` name, so a
  symlinked ``memory/`` folder, a symlinked target file or a name with a slash or ``..`` can
  never redirect a write elsewhere.  The target must be a regular file.
* **Append-only.**  Appends open the file with ``O_APPEND`` and never truncate, seek or rewrite:
  existing entries are never touched.  New files are created with ``O_EXCL``, so an existing
  file is never overwritten.
* **Locked and whole.**  Each append takes an exclusive ``flock``, so "how does the file end?"
  and the write happen as one step among cooperating writers (threads and processes), and
  writes the whole entry in one ``write`` call (a short write is finished, not dropped).
* **Durable.**  Entries are ``fsync``-ed before returning unless the caller opts out.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import re
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from memdir.atomic_write import hold_temp, writer_gone
from memdir.errors import MemdirError
from memdir.lock import busy_holder, flock_within
from memdir.reading import GIT_CRYPT_MAGIC, encrypted_note, note_encoding
from memdir.workspace import MEMORY_DIR

_SAFE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*\.md$")
_LEADING_BLANK_LINES = re.compile(r"\A(?:[ \t]*\n)+")
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


class MemoryFileError(MemdirError, ValueError):
    """A write to a memory file was refused or failed; the message says why."""


class UnsafeMemoryPath(OSError, MemoryFileError):
    """A write would leave ``<ws>/memory/`` or go through a symlink; nothing was written."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


def _check_name(name: str) -> None:
    if not _SAFE_NAME.match(name) or ".." in name:
        raise UnsafeMemoryPath(errno.EINVAL, f"refusing to write {name!r}: not a plain .md file name")


def normalise_entry(text: str) -> str:
    """Entry text as whole lines: ``\\r\\n``/``\\r`` become ``\\n``, leading blank lines and
    trailing blanks go, one final ``\\n``.  Blank text and NUL bytes are refused."""
    if not isinstance(text, str):
        raise MemoryFileError("text must be a string")
    body = _LEADING_BLANK_LINES.sub("", text.replace("\r\n", "\n").replace("\r", "\n").rstrip())
    if "\x00" in body:
        raise MemoryFileError("text contains a NUL byte")
    try:
        body.encode("utf-8")
    except UnicodeEncodeError as exc:  # bytes read with surrogateescape, or a lone surrogate
        raise MemoryFileError(f"text is not valid UTF-8 (at character {exc.start + 1})") from None
    if not body.strip():
        raise MemoryFileError("text required")
    return body + "\n"


@contextlib.contextmanager
def memory_dir_fd(workspace: str | os.PathLike[str], *, create_workspace: bool = True) -> Iterator[int]:
    """An ``O_DIRECTORY | O_NOFOLLOW`` descriptor for ``<ws>/memory``, created if missing.

    ``create_workspace`` also creates the workspace itself (``mkdir -p``, as the session hook
    does, R§13); without it a missing workspace is an error rather than a new folder.
    """
    ws = Path(workspace)
    folder = ws / MEMORY_DIR
    # Each failure names the folder and its cause: a read-only workspace (a container's ro mount, a
    # chmod a-w) failed the append, the hook and the flush with Python's bare "[Errno 13]
    # Permission denied: '<ws>/memory'", or named the hook's temporary file.
    if create_workspace:
        try:
            ws.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise MemoryFileError(f"cannot create the workspace {ws}: {exc.strerror}") from exc
    try:
        os.mkdir(folder, 0o777)  # as mkdir(1) and editors: the umask decides (077 private, 002 group-shared)
    except FileExistsError:
        pass
    except FileNotFoundError as exc:
        raise MemoryFileError(f"workspace does not exist: {ws}") from exc
    except OSError as exc:
        raise MemoryFileError(f"cannot create {MEMORY_DIR}/ in {ws}: {exc.strerror}") from exc
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _NOFOLLOW | _CLOEXEC)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            what = "a symlink" if os.path.islink(folder) else "not a folder"
            raise UnsafeMemoryPath(exc.errno, f"refusing to write through {MEMORY_DIR}/: it is {what}") from exc
        raise MemoryFileError(f"cannot open {folder}: {exc.strerror}") from exc
    try:
        yield fd
    finally:
        os.close(fd)


def _write_all(fd: int, data: bytes) -> None:
    """One ``write`` normally; a short write (disk nearly full, signal) is finished, not dropped."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        if written <= 0:
            raise MemoryFileError("write to a memory file made no progress")
        view = view[written:]


#: How much of a file's end is read to tell the line ends it uses.
_LINE_END_PROBE = 4096


def _line_end(fd: int, encoding: str = "utf-8") -> str:
    """The line end the file uses, from its last one: ``\r\n`` (Windows), a lone ``\r`` (classic
    Mac) or ``\n``.  Why: an entry appended in ``\n`` to a note saved on Windows left it with mixed
    line ends, and to a classic Mac note its ``\n`` after the last ``\r`` made one ``\r\n`` line
    end, so the blank line between entries was lost."""
    size = os.fstat(fd).st_size
    width = len("\n".encode(encoding))
    start = max(0 if width == 1 else 2, size - _LINE_END_PROBE)
    start -= (start - (0 if width == 1 else 2)) % width  # on a character of UTF-16
    try:
        tail = os.pread(fd, size - start, start).decode(encoding)
    except UnicodeDecodeError:
        return "\n"
    at = tail.rfind("\n")
    if at > 0 and tail[at - 1] == "\r":
        return "\r\n"
    return "\r" if at < 0 and "\r" in tail else "\n"


#: Files larger than this are not looked through for merge-conflict markers before an append.
_CONFLICT_PROBE = 8 * 1024 * 1024
_FENCE = re.compile(r" {0,3}(`{3,}|~{3,})")


def _unresolved_conflict(fd: int, size: int, encoding: str = "utf-8") -> int | None:
    """The line of the first ``<<<<<<<`` of a merge conflict left in the file (``<<<<<<<``, then
    ``=======``, then ``>>>>>>>``, each at a line's start and outside code fences), or ``None``.

    Why: a daily log two machines appended to, pulled with git, holds both sides between markers
    until the merge is resolved, and a note appended meanwhile was lost without a word to the
    ``git merge --abort`` or ``git checkout --theirs`` that resolves it (both put back a side as
    committed)."""
    if size > _CONFLICT_PROBE:
        return None
    text = os.pread(fd, size, 0).decode(encoding, "replace")
    if "<" * 7 not in text:
        return None
    step, start, fence = 0, 0, None
    for number, line in enumerate(text.splitlines(), 1):
        opened = _FENCE.match(line)
        if opened is not None and (fence is None or opened[1].startswith(fence)):
            fence = None if fence is not None else opened[1][0] * 3
            continue
        if fence is not None:
            continue
        if step == 0 and line.startswith("<" * 7) and line[7:8] in ("", " "):
            step, start = 1, number
        elif step == 1 and line.rstrip() == "=" * 7:
            step = 2
        elif step == 2 and line.startswith(">" * 7) and line[7:8] in ("", " "):
            return start
    return None


def _separator(fd: int, blank_line: bool, encoding: str = "utf-8", line_end: str = "\n") -> bytes:
    """What goes before the entry so it starts on its own line (after a blank line if asked), in
    the file's ``encoding`` and ``line_end``; nothing in a file that holds no text yet (empty, or
    only a UTF-16 byte order mark)."""
    size = os.fstat(fd).st_size
    if size <= (0 if encoding == "utf-8" else 2):
        return b""
    nl = line_end.encode(encoding)
    tail = os.pread(fd, 2 * len(nl), max(0, size - 2 * len(nl)))
    if not blank_line:
        return b"" if tail.endswith(nl) else nl
    if tail.endswith(nl * 2):
        return b""
    return nl if tail.endswith(nl) else nl * 2


def _reason(exc: OSError) -> str:
    """An ``OSError`` in words (``No space left on device``), without the ``[Errno 28]`` prefix."""
    return exc.strerror or str(exc)


#: How long an append waits for another writer's lock on the file: appends hold it for one write
#: and an fsync, so only a stopped (Ctrl-Z, SIGSTOP) or hung holder keeps it this long.
APPEND_LOCK_WAIT = 30.0


def _lock_for_append(fd: int, name: str) -> None:
    """Take the file's exclusive ``flock``, waiting at most :data:`APPEND_LOCK_WAIT` seconds
    (:func:`memdir.lock.flock_within`): a holder stopped mid-append made every later
    ``memdir append`` and ``memory_append`` wait for ever, without a word."""
    if not flock_within(fd, APPEND_LOCK_WAIT):
        raise MemoryFileError(f"cannot append to {MEMORY_DIR}/{name}: the file has been locked for "
                              f"{APPEND_LOCK_WAIT:g} s: {busy_holder(fd)}; nothing was written")


def _undo_append(fd: int, size: int) -> None:
    """Cut a failed append (disk full, file size limit) back to the file's size before it, so the
    log never keeps a half-written line; still under the writer's ``flock``, so no other entry
    can have landed after ``size``."""
    with contextlib.suppress(OSError):
        os.ftruncate(fd, size)


#: How many times an append opens the file again when it was replaced while the append waited.
_REPLACED_TRIES = 20


def _whose(dfd: int, name: str) -> str:
    """`` (<it> belongs to root (uid 0) …: …)`` when another user's file or ``memory/`` folder is why
    this user cannot write ``memory/<name>``, else ``""``.  Why: after one ``sudo memdir append``
    every later append of the user failed with "Permission denied" alone, naming neither the owner
    nor the fix."""
    from memdir.stores.sqlite_health import user_name

    try:
        st = os.stat(name, dir_fd=dfd, follow_symlinks=False)
        what = f"{MEMORY_DIR}/{name}"
    except FileNotFoundError:
        st, what = os.fstat(dfd), f"{MEMORY_DIR}/"
    except OSError:
        return ""
    if st.st_uid == os.geteuid():
        return ""
    return (f" ({what} belongs to {user_name(st.st_uid)}, not to this user, {user_name(os.geteuid())}: run memdir "
            "as that user, or give it to this one (chown))")


def _open_locked(dfd: int, name: str) -> int:
    """``memory/<name>`` opened for appending (created if missing) and ``flock``-ed, and still the
    file at that name once the lock is held.

    Why the last check: an editor saving by writing a new file and renaming it over the old one
    (Vim, VS Code, JetBrains, Obsidian, a sync tool), or a ``rm``, while the append waited for the
    lock (or in the instant between open and write), left the append writing into the replaced
    file, which no name reaches any more: it reported success and the entry was lost.  The file
    now at the name is opened and locked again instead."""
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC
    for _ in range(_REPLACED_TRIES):
        try:
            fd = os.open(name, flags, 0o666, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise UnsafeMemoryPath(exc.errno, f"refusing to write through a symlink: {MEMORY_DIR}/{name}") from exc
            raise MemoryFileError(f"cannot open {MEMORY_DIR}/{name} for appending: {exc.strerror}"
                                  f"{_whose(dfd, name) if exc.errno in (errno.EACCES, errno.EPERM) else ''}") from exc
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise UnsafeMemoryPath(errno.EINVAL, f"{MEMORY_DIR}/{name} is not a regular file")
            _lock_for_append(fd, name)
            try:
                now = os.stat(name, dir_fd=dfd, follow_symlinks=False)
            except FileNotFoundError:
                now = None
            if now is not None and (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                return fd
            fcntl.flock(fd, fcntl.LOCK_UN)
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
    raise MemoryFileError(f"cannot append to {MEMORY_DIR}/{name}: it was replaced {_REPLACED_TRIES} times "
                          "while the append waited; nothing was written")


def append_memory_file(
    workspace: str | os.PathLike[str],
    name: str,
    text: str,
    *,
    blank_line: bool = True,
    fsync: bool = True,
    create_workspace: bool = True,
) -> Path:
    """Append ``text`` to ``<ws>/memory/<name>`` (created if missing); returns the file's path.

    The entry is normalised to whole lines (:func:`normalise_entry`) and starts on a line of its
    own even if the file was hand-edited without a final newline; with ``blank_line`` (the
    default) it is also separated from the previous entry by a blank line, otherwise entries
    are consecutive lines.
    """
    _check_name(name)
    entry = normalise_entry(text)
    with memory_dir_fd(workspace, create_workspace=create_workspace) as dfd:
        fd = _open_locked(dfd, name)
        try:
            try:
                size = os.fstat(fd).st_size
                try:
                    # a UTF-16 log (a Windows editor's) is appended to in UTF-16: UTF-8 bytes in it
                    # read back as garbage, and the entry was lost to search and to the user's editor
                    encrypted = encrypted_note(os.pread(fd, len(GIT_CRYPT_MAGIC), 0))
                    if encrypted is not None:  # text after its ciphertext: git-crypt unlock then failed on it
                        raise MemoryFileError(f"not appended: {MEMORY_DIR}/{name} is {encrypted.strerror}, and text "
                                              "appended to it would break it; nothing was written")
                    encoding = note_encoding(os.pread(fd, 2, 0))
                    conflict = _unresolved_conflict(fd, size, encoding)
                    if conflict is not None:
                        raise MemoryFileError(
                            f"not appended: {MEMORY_DIR}/{name} holds an unresolved merge conflict (its '<<<<<<<' "
                            f"on line {conflict}), and what is appended to it now is lost to 'git merge --abort' "
                            "or 'git checkout --theirs': resolve the conflict (keep what each side wrote, remove "
                            "the marker lines) and append again; nothing was written")
                    line_end = _line_end(fd, encoding)
                    _write_all(fd, _separator(fd, blank_line, encoding, line_end)
                               + entry.replace("\n", line_end).encode(encoding))
                    if fsync:
                        os.fsync(fd)
                except BaseException as exc:  # an interrupt mid-write is cut back too
                    _undo_append(fd, size)
                    if not isinstance(exc, OSError):
                        raise
                    raise MemoryFileError(f"cannot append to {MEMORY_DIR}/{name}: {_reason(exc)}; "
                                          "nothing was written") from exc
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)
    return Path(workspace) / MEMORY_DIR / name


def create_memory_file(
    workspace: str | os.PathLike[str], stem: str, text: str, *, max_tries: int = 1000, fsync: bool = True
) -> Path:
    """Create ``<ws>/memory/<stem>.md``, or ``<stem>-2.md``, ``-3``… if taken; never overwrites.

    The file appears whole or not at all: the text is written to a hidden temporary file beside
    it (``.<stem>.md.tmp-<pid>-<random>``, which no listing takes for a note; the random part
    keeps two threads of one process, e.g. two hooks in the same minute, from sharing and
    removing each other's temporary file), then hard-linked to the
    first free name (a link never replaces a file) and the temporary name removed.  So a process
    killed mid-write leaves no cut-short memory, and the next run does not write ``-2.md`` beside
    one; the temporary file a killed process left is removed by the next create.  Where the file
    system has no hard links, the file is created in place (``O_EXCL``) as before."""
    data = text.encode("utf-8")
    with memory_dir_fd(workspace) as dfd:
        _check_name(f"{stem}.md")
        _remove_stale_temps(dfd)
        while True:
            temp = f".{stem}.md.tmp-{os.getpid()}-{secrets.token_hex(4)}"
            try:
                fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=dfd)
            except OSError as exc:  # it named the temporary file, which the user never sees
                raise MemoryFileError(f"cannot create {MEMORY_DIR}/{stem}.md: {exc.strerror}") from exc
            if hold_temp(fd, temp, dfd):  # (held until linked: a container sharing memory/ sees no pid)
                break
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
            for n in range(1, max_tries + 1):
                name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
                try:
                    os.link(temp, name, src_dir_fd=dfd, dst_dir_fd=dfd, follow_symlinks=False)
                except FileExistsError:
                    continue
                except OSError as exc:
                    if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
                        raise
                    return _create_in_place(workspace, dfd, stem, data, max_tries, fsync)
                if fsync:
                    os.fsync(dfd)
                return Path(workspace) / MEMORY_DIR / name
        except BaseException as exc:
            if not isinstance(exc, OSError):
                raise
            raise MemoryFileError(f"cannot write {MEMORY_DIR}/{stem}.md: {_reason(exc)}; nothing was kept") from exc
        finally:
            with contextlib.suppress(OSError):
                os.unlink(temp, dir_fd=dfd)
            os.close(fd)  # (and its lock, after the name is gone)
    raise FileExistsError(f"no free file name for {MEMORY_DIR}/{stem}.md after {max_tries} tries")


def _remove_stale_temps(dfd: int) -> None:
    """Remove the temporary files that killed processes left (their pid is gone), of any note.

    Why any: the next file created is rarely of the same name (the session hook's names end in
    each session's slug), so only removing the temps of the name being created left every killed
    hook's ``.<stem>.md.tmp-<pid>-<random>`` in the user's ``memory/`` folder for ever."""
    for entry in os.listdir(dfd):
        _, marker, rest = entry.rpartition(".md.tmp-")
        owner = rest.split("-", 1)[0]  # <pid>-<random>, or <pid> (older versions)
        if not (entry.startswith(".") and marker and owner.isdigit()):
            continue
        if not writer_gone(int(owner), entry, dfd):
            continue  # still running (or another user's, or another container's): its write may be under way
        with contextlib.suppress(OSError):
            os.unlink(entry, dir_fd=dfd)


def _create_in_place(workspace: str | os.PathLike[str], dfd: int, stem: str, data: bytes, max_tries: int,
                     fsync: bool) -> Path:
    """``create_memory_file`` on a file system without hard links: the first free name, written in place."""
    for n in range(1, max_tries + 1):
        name = f"{stem}.md" if n == 1 else f"{stem}-{n}.md"
        _check_name(name)
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o666, dir_fd=dfd)
        except FileExistsError:
            continue
        try:
            _write_all(fd, data)
            if fsync:
                os.fsync(fd)
        except BaseException:
            # A partial file would be taken for the memory and make the next try write -2.md.
            with contextlib.suppress(OSError):
                os.unlink(name, dir_fd=dfd)
            raise
        finally:
            os.close(fd)
        return Path(workspace) / MEMORY_DIR / name
    raise FileExistsError(f"no free file name for {MEMORY_DIR}/{stem}.md after {max_tries} tries")


__all__ = [
    "MemoryFileError", "UnsafeMemoryPath", "append_memory_file", "create_memory_file", "memory_dir_fd",
    "normalise_entry",
]
