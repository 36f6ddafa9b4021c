"""Reading a note the way the indexer, ``memory_get`` and search's widening all do: only a regular
file, never through a symlink, with the same line ends.

Apart from :mod:`memdir.workspace` (which files are memory) because a search reads notes too,
and should not import discovery to do so.
"""

from __future__ import annotations

import codecs
import errno
import os
import re
import stat
import sys
from collections.abc import Sequence

_KINDS = ((stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISDIR, "a directory"))


def kind_of(mode: int) -> str:
    """``"a FIFO"``, ``"a socket"``, ... for a non-regular file mode (``"not a regular file"`` otherwise)."""
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


_LONE_CR = re.compile(r"\r(?!\n)")


#: Byte order marks of UTF-16 notes (Windows PowerShell 5's ``>`` and Notepad's "Unicode" save
#: write them); neither can begin a UTF-8 text (``0xFE``/``0xFF`` are never UTF-8).
UTF16_BOMS = {codecs.BOM_UTF16_LE: "utf-16-le", codecs.BOM_UTF16_BE: "utf-16-be"}


def note_encoding(head: bytes) -> str:
    """The encoding a note starting with ``head`` (its first two bytes or more) is read and
    appended in: UTF-16 when it starts with a UTF-16 byte order mark, else UTF-8."""
    return UTF16_BOMS.get(head[:2], "utf-8")


def _as_windows_1252(exc: UnicodeError) -> tuple[str, int]:
    """Decode error handler: a byte that is not UTF-8 read as Windows-1252 (which Latin-1 is
    nearly all of).  A note saved in an old Windows or Latin-1 editor, or one pasted into from
    one, had each accented letter as U+FFFD, so ``café`` was ``caf\ufffd`` and never found."""
    if not isinstance(exc, UnicodeDecodeError):
        raise exc
    bad = exc.object[exc.start:exc.end]
    return bad.decode("cp1252", errors="replace"), exc.end


codecs.register_error("memdir-cp1252", _as_windows_1252)


def decode_note(raw: bytes) -> str:
    """A note's text with lines ending in ``\n``: a lone ``\r`` (classic Mac line ends) becomes
    ``\n``, so such a note has lines, not one long one.  ``\r\n`` is left as it is (the ``\r``
    stays on its line).  A byte order mark is not text: a UTF-8 one is dropped (it hid a heading
    on line 1 from the chunker and the dates), and a UTF-16 note is decoded as UTF-16 (read as
    UTF-8 its words were NUL-separated letters no search found).  The indexer, ``memory_get`` and
    widening all read notes through this, so their line numbers agree.  A byte that is not UTF-8
    is read as Windows-1252 (Latin-1): a note in that encoding, or with a line pasted from one,
    keeps its accented words."""
    encoding = note_encoding(raw)
    if encoding != "utf-8":
        text = raw[2:].decode(encoding, errors="replace")
    else:
        text = raw.removeprefix(codecs.BOM_UTF8).decode("utf-8", errors="memdir-cp1252")
    return _LONE_CR.sub("\n", text) if "\r" in text else text


#: What a file git-crypt encrypts starts with in a checkout that is locked (cloned, never unlocked).
GIT_CRYPT_MAGIC = b"\x00GITCRYPT\x00"


class EncryptedNote(OSError):
    """A note git-crypt keeps encrypted in this checkout: its bytes are ciphertext, not text."""


def encrypted_note(raw: bytes) -> EncryptedNote | None:
    """The error to give for a note whose bytes start ``raw`` when git-crypt encrypted it, else ``None``."""
    if not raw.startswith(GIT_CRYPT_MAGIC):
        return None
    return EncryptedNote(errno.EINVAL, "encrypted by git-crypt, whose repository is locked here (git-crypt unlock "
                                       "decrypts it)")


class BinaryNote(OSError):
    """A ``*.md`` file whose bytes are an image, a document or an archive, or nothing but NULs.

    ``kept``: what the index holds of it stays (NULs: the note's last text, which the crash that
    zeroed it left nowhere else); an image's or archive's rows go (an older memdir indexed its bytes)."""

    kept = False


#: What a binary file's first bytes are, for those a note's text never starts with.
_BINARY_MAGIC = ((b"\x89PNG\r\n\x1a\n", "PNG image"), (b"\xff\xd8\xff", "JPEG image"), (b"GIF87a", "GIF image"),
                 (b"GIF89a", "GIF image"), (b"%PDF-", "PDF document"), (b"PK\x03\x04", "zip archive (or Office file)"),
                 (b"\x1f\x8b", "gzip archive"), (b"SQLite format 3\x00", "SQLite database"), (b"\x7fELF", "program"))


def binary_note(raw: bytes) -> BinaryNote | None:
    """The error to give for a note whose bytes ``raw`` are no text: a known binary format (its
    magic number, and a NUL or bytes no UTF-8 text has in its first 4 KB), or NUL bytes alone (as
    a crash or power cut can leave a file being written); else ``None``.

    Why: an image or PDF saved under a ``.md`` name (an attachment renamed, a sync tool's mix-up)
    was indexed as text: a 3 KB PNG made 11 chunks of noise, each embedded and cited by searches."""
    head = raw[:4096]
    if not head.strip(b"\x00") and raw and not raw.strip(b"\x00"):
        zeroed = BinaryNote(errno.EINVAL, "holds nothing but NUL bytes (as a crash can leave a file being written): "
                                          "what the index held of it is kept, and searches find its last text; "
                                          "restore it from a backup")
        zeroed.kept = True
        return zeroed
    kind = next((k for magic, k in _BINARY_MAGIC if raw.startswith(magic)), None)
    if kind is None:
        return None
    if b"\x00" not in head:
        try:
            head.decode("utf-8")
            return None
        except UnicodeDecodeError as exc:
            if exc.start >= len(head) - 3:  # a character cut by the 4 KB: still text
                return None
    return BinaryNote(errno.EINVAL, f"a {kind}, not text (only its name ends in .md): not indexed")


class NotRegularFile(OSError):
    """A memory path that is a FIFO, socket, device or folder: refused before it is read."""


#: The most bytes a note may have: a 10 GB (sparse) ``memory/x.md`` was read whole into memory by
#: the indexer and ``memory_get``, and one appended to faster than it was read was never done.
MAX_NOTE_BYTES = 64 << 20


class NoteTooLarge(OSError):
    """A note over :data:`MAX_NOTE_BYTES`: refused (the indexer skips it, naming the reason)."""


def _too_large(size: int | None, most: int) -> NoteTooLarge:
    limit = f"the {most >> 20} MiB a note may be"
    if size is None:
        return NoteTooLarge(errno.EFBIG, f"grew past {limit} while being read")
    return NoteTooLarge(errno.EFBIG, f"{size / (1 << 20):,.0f} MiB, larger than {limit}")


def read_regular(path: str | os.PathLike[str], *, dir_fd: int | None = None,
                 limit: int | None = MAX_NOTE_BYTES) -> bytes:
    """The bytes of a regular file, refusing anything else *before* reading it.

    ``O_NONBLOCK`` makes opening a FIFO return at once instead of waiting for a writer (a FIFO
    named ``memory/x.md`` used to hang ``memdir get`` and every later MCP call); ``fstat`` on the
    open descriptor then refuses it, so a file swapped for a FIFO after discovery is caught too.
    Symlinks are never followed (``O_NOFOLLOW``).  ``dir_fd``: ``path`` is a name in that open
    folder, so a folder swapped for a symlink after it was opened cannot redirect the read.
    A file over ``limit`` bytes (``None``: no limit) raises :class:`NoteTooLarge`, before or while
    it is read.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags, dir_fd=dir_fd)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotRegularFile(errno.EINVAL, f"{kind_of(st.st_mode)}, not a regular file", str(path))
        most = sys.maxsize if limit is None else limit
        if st.st_size > most:
            raise _too_large(st.st_size, most)
        parts = []
        total = 0
        while True:
            block = os.read(fd, 1 << 20)
            if not block:
                break
            total += len(block)
            if total > most:
                raise _too_large(None, most)
            parts.append(block)
        return b"".join(parts)
    finally:
        os.close(fd)


_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)


def open_beneath(root: str | os.PathLike[str], folders: Sequence[str], *, root_nofollow: bool = False) -> int:
    """An open descriptor of the folder ``root/folders[0]/...``, each folder opened relative to the
    one above with ``O_NOFOLLOW``: what is read through it is below ``root`` whatever is swapped
    for a symlink meanwhile (a path checked, then opened by name, follows what is there then).

    ``OSError`` names the folder that failed (``filename``: the ``/``-joined ``folders`` up to it,
    ``""`` for ``root``); one that is a symlink raises ``ELOOP``.
    """
    try:
        fd = os.open(root, _DIR_FLAGS | (_NOFOLLOW if root_nofollow else 0))
    except OSError as exc:
        raise _named(exc, "", os.path.islink(root)) from exc
    for depth, name in enumerate(folders, start=1):
        try:
            below = os.open(name, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
        except OSError as exc:
            try:
                link = stat.S_ISLNK(os.stat(name, dir_fd=fd, follow_symlinks=False).st_mode)
            except OSError:
                link = False
            os.close(fd)
            raise _named(exc, "/".join(folders[:depth]), link) from exc
        os.close(fd)
        fd = below
    return fd


def _named(exc: OSError, where: str, link: bool) -> OSError:
    if link:
        return OSError(errno.ELOOP, f"{where or 'its root'} is a symlink (not followed)", where)
    return type(exc)(exc.errno, exc.strerror, where)


def read_beneath(root: str | os.PathLike[str], rel: str, *, limit: int | None = MAX_NOTE_BYTES) -> bytes:
    """:func:`read_regular` of ``root/rel`` (``/``-separated, below ``root``), its folders opened by
    :func:`open_beneath`: the indexer's read of a file discovery listed, so a folder swapped for a
    symlink after the listing cannot bring a file from outside into the index."""
    *folders, name = rel.split("/")
    fd = open_beneath(root, folders)
    try:
        return read_regular(name, dir_fd=fd, limit=limit)
    finally:
        os.close(fd)


def read_note(abs_path: str, root: str = "") -> bytes:
    """A listed note's bytes: from ``root`` by :func:`read_beneath` when ``abs_path`` is below it
    (what discovery records), else by path."""
    prefix = root if root.endswith("/") else root + "/"
    if root and abs_path.startswith(prefix):
        return read_beneath(root, abs_path[len(prefix):])
    return read_regular(abs_path)
