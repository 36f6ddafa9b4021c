"""Which files are memory (R§2) and how ``memory_get`` reads them safely (R§10.2).

Discovery never follows a symlink and never writes.  Reads through :func:`resolve_readable`
accept only memory paths and configured extra paths, reject any symlink on the way below the
allowed root, and name the real error instead of a catch-all "path required".
"""

from __future__ import annotations

import bisect
import errno
import math
import os
import re
import stat
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from memdir.errors import MemdirError
from memdir.reading import MAX_NOTE_BYTES, NotRegularFile, decode_note, kind_of, open_beneath, read_regular

ROOT_FILES = ("MEMORY.md", "memory.md")
MEMORY_DIR = "memory"


@dataclass(frozen=True, slots=True)
class FileEntry:
    """One discovered file: workspace-relative path (``/`` separators), absolute path, stat."""

    path: str
    abs_path: str
    source: str
    #: Not the bare mtime: the file's :func:`change_stamp` (what the index stores as ``mtime``).
    mtime_ns: int
    size: int
    #: The allowed root it was found under (``abs_path`` is below it): the indexer reads it from
    #: there without following a symlink (:func:`memdir.reading.read_beneath`); ``""``: by path.
    root: str = ""
    #: Its stamp may yet be given to another edit (see :func:`unsettled`).
    unsettled: bool = False

    @property
    def stored_stamp(self) -> int:
        """What the index records for it: its stamp, or for an :attr:`unsettled` one a value no
        stamp of a coarse file system takes, so the next sync reads it again."""
        return self.mtime_ns ^ 1 if self.unsettled else self.mtime_ns


#: Values a signed 64-bit integer column holds.
_INT64_SPAN = 1 << 64


def times(st: os.stat_result) -> tuple[int, int]:
    """A file's mtime and ctime, in nanoseconds."""
    return st.st_mtime_ns, st.st_ctime_ns


def change_stamp(st: os.stat_result) -> int:
    """What the index compares, with the size, to tell a file changed without reading it: its
    mtime, plus its ctime when the two differ.

    Why not the mtime alone: it can be set back or forward (``touch -d``, ``cp -p``, ``rsync -t``
    from a machine whose clock is ahead, an editor or sync tool that restores it), and an edit that
    kept the size then looked unchanged for good.  The ctime moves with every write, rename, chmod
    and ``utime`` and cannot be set by hand, so a change to either shows; a file written and left
    alone has both equal and keeps the stamp earlier indexes stored.  A change that leaves the
    content as it was only costs a re-hash.

    Folded into a signed 64-bit integer, what SQLite and PostgreSQL store: a file dated past 2262
    (``touch -d 3000-01-01``; ext4 keeps dates to 2446) overflowed it, and every sync failed."""
    mtime, ctime = times(st)
    stamp = mtime if ctime == mtime else mtime + ctime
    return (stamp + _INT64_SPAN // 2) % _INT64_SPAN - _INT64_SPAN // 2


#: Timestamps that are whole multiples of this come from a file system that keeps them coarsely
#: (FAT: 2 s, HFS+: 1 s, exFAT: 10 ms, some network shares); Linux's own keep nanoseconds.
COARSE_TICK_NS = 10_000_000


def unsettled(st: os.stat_result, listed_ns: int) -> bool:
    """Whether a file stat'ed after ``listed_ns`` has a coarse stamp whose tick may still be open:
    an edit later in the same tick that keeps the size gives the same stamp, and the index, which
    read the content before it, would keep the old text for good (git's "racily clean" files).

    A tick may still be open from :data:`RELIST_MARGIN_NS` before ``listed_ns`` to
    :data:`FUTURE_TICK_NS` after it (a clock a few seconds fast, or set back): an mtime set far
    ahead (``touch -d 2037-01-01``, ``rsync -t`` from a machine whose clock ran a year fast) is no
    tick an edit made now falls in, and such a file was read again by every sync, ``memdir status``
    calling the index dirty for good (the ctime, which the kernel sets, still catches a same-tick
    edit of it)."""
    mtime, ctime = times(st)
    if mtime % COARSE_TICK_NS or ctime % COARSE_TICK_NS:
        return False
    return any(listed_ns - RELIST_MARGIN_NS <= t <= listed_ns + FUTURE_TICK_NS for t in (mtime, ctime))


#: How far after a listing a coarse stamp is still taken for a tick that may be open (see
#: :func:`unsettled`): a day, past any clock merely running fast or set back.
FUTURE_TICK_NS = 86_400 * 10**9


@dataclass
class Discovery:
    files: list[FileEntry] = field(default_factory=list)
    issues: list[str] = field(default_factory=list)
    #: Memory-looking files that cannot be indexed (bad name, not a regular file, unreadable folder).
    skipped: list[Skipped] = field(default_factory=list)
    #: Workspace-relative files and folders that exist but could not be looked at (permission
    #: denied, I/O error): whether their notes are still there is unknown, so a sync keeps what it
    #: indexed from them instead of removing it (see :func:`is_unlisted`).
    unlisted: list[str] = field(default_factory=list)
    #: ``(path, (inode, ctime_ns))`` of every folder whose listing made ``files``, each taken before
    #: it was listed; ``None`` when the listing cannot be reused (see :func:`restat`).
    folders: list[tuple[str, tuple[int, int]]] | None = None
    #: ``time.time_ns()`` when the listing started.
    started_ns: int = 0


def rel_path(workspace: Path, abs_path: Path) -> str:
    return Path(os.path.relpath(abs_path, workspace)).as_posix()


#: Folders never walked or watched (R§6): VCS data, dependency trees, virtualenvs, caches, and
#: where tools keep deleted, superseded or half-copied notes under their own names (Obsidian's
#: ``.trash``, Syncthing's ``.stversions``, Dropbox's ``.dropbox.cache``, rsync's ``.~tmp~`` of
#: ``--delay-updates``): walked, a note deleted in Obsidian or overwritten by a sync was still
#: found by every search, its old text cited.
IGNORED_DIRS = frozenset({".git", "node_modules", ".pnpm-store", ".venv", "venv", ".tox", "__pycache__",
                          ".trash", ".stversions", ".dropbox.cache", ".~tmp~",
                          # MEGA's and Resilio Sync's local rubbish and archive of deleted and
                          # overwritten files, Logseq's (and Samba's) recycle bin, VS Code's Local
                          # History, and the trash a file manager keeps on a shared or removable
                          # drive (macOS, Windows, Synology, QNAP; XDG's .Trash-<uid> below)
                          ".debris", ".sync", ".recycle", ".history", ".trashes", "$recycle.bin", "#recycle",
                          "@recycle"})

#: Note apps' own settings, kept inside the vault they serve: Obsidian's ``.obsidian/`` (or the
#: ``.obsidian-mobile``-style folder its "Override config folder" names), Foam's ``.foam/``.  Walked,
#: the README and changelog of each plugin installed from its repository, and Foam's note templates
#: (``${FOAM_TITLE}`` placeholders), were found as the user's notes.  A folder that extraPaths
#: lists itself is walked (a user who wants Foam's templates searched lists ``.foam/templates``).
APP_CONFIG_DIRS = (".obsidian", ".foam")

#: Folders ignored only inside a folder of the given name: Logseq keeps the earlier versions of
#: its pages in ``logseq/bak/`` and ``logseq/version-files/`` (a ``bak/`` of one's own is notes).
IGNORED_SUBDIRS = frozenset({("logseq", "bak"), ("logseq", "version-files")})


def is_ignored_dir(name: str, parent: str = "") -> bool:
    """Whether a folder ``name`` (inside a folder named ``parent``) is never walked nor watched."""
    low = name.lower()
    return (low in IGNORED_DIRS or (low.startswith(".trash-") and low[len(".trash-"):].isdigit())
            or low.startswith(APP_CONFIG_DIRS) or (parent.lower(), low) in IGNORED_SUBDIRS)


def is_ignored_below(parts: list[str], parent: str) -> bool:
    """Whether the folders ``parts`` (each inside the one before, the first inside a folder named
    ``parent``) pass through an ignored one."""
    for part in parts:
        if is_ignored_dir(part, parent):
            return True
        parent = part
    return False


def display_path(path: str) -> str:
    """A path as text that can always be printed and stored: undecodable bytes become ``\\xNN``."""
    return os.fsencode(path).decode("utf-8", "backslashreplace")


def valid_name(path: str) -> bool:
    try:
        path.encode("utf-8")
        return True
    except UnicodeEncodeError:  # surrogate-escaped bytes: the name is not valid UTF-8
        return False


#: Whether this Python decodes file names as UTF-8: always, but under a C/POSIX locale with UTF-8
#: mode turned off (``PYTHONUTF8=0``), where it is ASCII and every other byte a surrogate escape.
FS_UTF8 = sys.getfilesystemencoding().lower().replace("-", "").replace("_", "") == "utf8"


def text_name(name: str) -> str | None:
    """A listed name (as ``os`` functions give it) as the UTF-8 text the index stores, or ``None``
    when its bytes are not UTF-8.  Why: with an ASCII file-system encoding, ``café.md`` came as
    surrogate escapes and was skipped as "file name is not valid UTF-8", its notes never found."""
    if FS_UTF8:
        return name if valid_name(name) else None
    try:
        return os.fsencode(name).decode("utf-8")
    except UnicodeDecodeError:
        return None


def fs_name(text: str) -> str:
    """The inverse of :func:`text_name`: a path given as text, as ``os`` functions take it (the
    same string but with an ASCII file-system encoding; a name already escaped is kept)."""
    if FS_UTF8:
        return text
    try:
        os.fsencode(text).decode("utf-8")
        # already the OS's name of UTF-8 bytes: a Latin-1 file-system encoding (LC_ALL=
        # de_DE.ISO-8859-1) read a folder été from the OS (getcwd, --workspace, a path argument)
        # as 'Ã©tÃ©', which encoded again named a folder that does not exist
        return text
    except UnicodeError:  # text (not the OS's name): its UTF-8 bytes as the OS spells them
        pass
    try:
        return os.fsdecode(text.encode("utf-8"))
    except UnicodeEncodeError:
        return text


def _errname(exc: OSError) -> str:
    return exc.strerror or errno.errorcode.get(exc.errno or 0, str(exc))


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file that looks like memory but cannot be indexed; retried on every sync."""

    path: str
    error: str
    #: Stays so until the folder holding it changes (a symlink): a listing may be reused meanwhile.
    lasting: bool = False

    def as_dict(self) -> dict[str, str]:
        return {"path": self.path, "error": self.error}


def _walk(folder: str, rel: str, issues: list[str], skipped: list[Skipped], unlisted: list[str],
          folders: list[tuple[str, tuple[int, int]]] | None = None) -> Iterator[tuple[str, str, os.stat_result]]:
    """``(abs, rel, stat)`` of regular ``*.md`` files under ``folder``, depth first, sorted.

    Iterative, so folders nested thousands deep cannot exhaust the recursion limit; each folder
    is listed and closed before its subfolders are entered, so open descriptors stay bounded.
    Symlinks and :data:`IGNORED_DIRS` are skipped; ``.md`` names that are not valid UTF-8 or not
    regular files, and symlinks to notes or folders, are reported in ``skipped``, folders and
    files that cannot be looked at also in ``unlisted``.  Paths stay strings: on 10,000 files,
    building ``Path`` objects cost more than all the ``stat`` calls together.  The subfolders entered are
    added to ``folders`` with their stat, taken before they are listed.
    """
    stack: list[tuple[list[os.DirEntry[str]], int, str]] = []
    pending: tuple[str, str] | None = (folder, rel)
    templates: set[str] = set()  # Obsidian vaults' template folders met on the way (absolute)
    while True:
        if pending is not None:
            path, prefix = pending
            pending = None
            try:
                with os.scandir(path) as it:
                    entries = sorted(it, key=lambda e: e.name)
                if _listed(entries, OBSIDIAN_CONFIG):
                    templates.update(obsidian_templates(path))
            except OSError as exc:
                # one that vanished since its parent was listed (a git checkout, an rm -r under way)
                # is simply gone: it was reported "not readable: No such file or directory", and
                # status kept saying so after the sync
                if _still_there(exc):
                    issues.append(f"memory directory not accessible ({display_path(path)}): {_errname(exc)}")
                    skipped.append(Skipped(display_path(prefix.rstrip("/")), f"folder not readable: {_errname(exc)}"))
                    unlisted.append(prefix.rstrip("/"))
                entries = []
            stack.append((entries, 0, prefix))
        if not stack:
            return
        entries, i, prefix = stack[-1]
        if i >= len(entries):
            stack.pop()
            continue
        stack[-1] = (entries, i + 1, prefix)
        entry = entries[i]
        try:
            if entry.is_symlink():
                _say_linked(entry, prefix, skipped)
                continue
            if entry.is_dir(follow_symlinks=False):
                if not is_ignored_dir(entry.name, os.path.basename(os.path.dirname(entry.path))) \
                        and not (templates and entry.path in templates):
                    if folders is not None:
                        try:
                            folders.append((entry.path, _folder_id(os.lstat(entry.path))))
                        except OSError:  # listed below as before; this listing is just never reused
                            folders.append((entry.path, (-1, sys.maxsize)))
                    pending = (entry.path, f"{prefix}{entry.name}/")
                continue
            if not entry.name.endswith(".md"):
                evicted = evicted_note(entry.name)
                if evicted is not None and not _listed(entries, evicted):
                    _keep_evicted(prefix + evicted, skipped, unlisted, _evicted_by(entry.name))
                elif entry.name[-3:].lower() == ".md" and not entry.name.startswith(APPLE_DOUBLE_PREFIX):
                    skipped.append(_upper_case_md(prefix, entry.name))
                continue
            name = text_name(prefix + entry.name)
            if name is None:
                skipped.append(Skipped(display_path(prefix + entry.name), "file name is not valid UTF-8"))
                continue
            st = entry.stat(follow_symlinks=False)
            if not stat.S_ISREG(st.st_mode):
                skipped.append(Skipped(name, f"{kind_of(st.st_mode)}, not a regular file"))
                continue
            if entry.name.startswith(APPLE_DOUBLE_PREFIX) and apple_double(entry.path):
                continue
            if entry.name.startswith(EMACS_LOCK_PREFIX) and st.st_size <= _EMACS_LOCK_MAX and _emacs_lock(entry.path):
                continue
            merging = _mergetool_copy(entry.name)
            if merging is not None and _listed(entries, merging[0]):
                skipped.append(Skipped(name, f"git mergetool's {merging[1]} copy of {prefix}{merging[0]}, not indexed "
                                             "(git removes it when the merge is done; delete it if git mergetool "
                                             "was stopped)", lasting=True))
                continue
            yield entry.path, name, st
        except OSError as exc:
            if _still_there(exc):  # (one deleted since its folder was listed is gone, not unreadable)
                issues.append(f"{display_path(entry.path)} not readable ({_errname(exc)})")
                skipped.append(Skipped(display_path(prefix + entry.name), _errname(exc)))
                unlisted.append(prefix + entry.name)


#: An Obsidian vault's settings folder, and its files that name the vault's template folder: the
#: core Templates plugin's (``{"folder": "Templates"}``) and Templater's (``templates_folder``).
OBSIDIAN_CONFIG = ".obsidian"
_TEMPLATE_SETTINGS = (("templates.json", "folder"), ("plugins/templater-obsidian/data.json", "templates_folder"))


def obsidian_templates(vault: str) -> list[str]:
    """The template folders the Obsidian vault at ``vault`` names in its settings (absolute).

    Why: a template is boilerplate and placeholders (``# {{date}}``, ``## Gratitude``, ``<%
    tp.date.now() %>``), not memory: the daily template answered "gratitude" and "what did I learn"
    above every daily note written from it.  A folder outside the vault, or the vault itself, is
    never one; a settings file that cannot be read or parsed names none."""
    import json

    out = []
    for name, key in _TEMPLATE_SETTINGS:
        head = _head(os.path.join(vault, OBSIDIAN_CONFIG, name), 1 << 16)
        try:
            folder = json.loads(head or b"null").get(key) if head else None
        except (ValueError, AttributeError):
            continue
        if not isinstance(folder, str):
            continue
        below = os.path.normpath(folder.strip().strip("/"))
        if below not in ("", ".") and not below.startswith(("..", "/")):
            out.append(os.path.join(vault, below))
    return out


def _upper_case_md(prefix: str, name: str) -> Skipped:
    """A note named ``2026-01-02.MD`` (a Windows tool's, or one renamed on a Mac): as in OpenClaw
    only ``.md`` in lower case is memory, and such a daily log was searched nowhere without a word."""
    return Skipped(display_path(prefix + name), f"not memory: only names ending in .md (lower case) are "
                                                f"(rename it to {display_path(name[:-3])}.md)", lasting=True)


#: macOS writes a file's metadata beside it as ``._<name>`` where the volume cannot hold it (a
#: network share, a USB drive, a tar or zip made on a Mac): AppleDouble, or AppleSingle, binary.
APPLE_DOUBLE_PREFIX = "._"
_APPLE_MAGIC = (b"\x00\x05\x16\x07", b"\x00\x05\x16\x00")


def _head(path: str, size: int) -> bytes | None:
    """The first ``size`` bytes of the regular file ``path`` (never through a symlink); ``None``
    when it cannot be read (the indexer's own read says why)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0))
    except OSError:
        return None
    try:
        return os.read(fd, size) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        return None
    finally:
        os.close(fd)


def apple_double(path: str) -> bool:
    """Whether ``path`` (a ``._note.md``) is macOS's metadata of ``note.md``, by its magic number.

    Taken for a note, each one's binary was indexed: searches for "Safari" or "Mac OS X" cited
    ``memory/._note.md`` with a snippet of NUL bytes, one such file beside every note copied from a
    Mac.  A file of that name that is a note (no magic) is indexed as any other."""
    return _head(path, 4) in _APPLE_MAGIC


#: Emacs locks a file it edits with ``.#<name>``: a symlink to ``user@host.pid:boot``, or where the
#: file system has no symlinks (exFAT, FAT, many SMB shares) a regular file holding that text.
EMACS_LOCK_PREFIX = ".#"
_EMACS_LOCK_MAX = 1024
_EMACS_LOCK = re.compile(rb"[^\s@]+@\S+\.\d+(?::\d+)?\s*")


def _emacs_lock(path: str) -> bool:
    """Whether ``path`` (a ``.#note.md`` regular file) is Emacs's lock of ``note.md``, by its text.

    Taken for a note, one was indexed for as long as the note was open in Emacs: a search cited
    ``memory/.#note.md`` with ``user@host.4242:1700000000`` as its snippet.  A file of that name
    holding anything else is indexed as any other."""
    head = _head(path, _EMACS_LOCK_MAX + 1)
    return head is not None and _EMACS_LOCK.fullmatch(head) is not None


#: ``git mergetool`` writes the versions of a conflicted ``note.md`` beside it while the merge tool
#: runs: ``note_BASE_<pid>.md``, ``note_LOCAL_<pid>.md``, ``note_REMOTE_<pid>.md`` and
#: ``note_BACKUP_<pid>.md`` (the note with its conflict markers).
_MERGETOOL_COPY = re.compile(r"(.+)_(BACKUP|BASE|LOCAL|REMOTE)_\d+\.md", re.DOTALL)


def _mergetool_copy(name: str) -> tuple[str, str] | None:
    """The note a ``git mergetool`` temporary file named ``name`` is a version of, and which one.

    Why: under ``memory/`` they are Markdown like any note, so for as long as the merge tool was
    open (and for good after it was killed, or with ``mergetool.keepTemporaries``) each conflicted
    daily log was indexed four more times: every search answered its lines from the base, ours,
    theirs and the backup as well, the base's with text the merge had replaced.  Only a name
    beside the note it copies is one (the caller checks): ``plan_LOCAL_2.md`` alone is a note."""
    m = _MERGETOOL_COPY.fullmatch(name)
    if m is None:
        return None
    return m[1] + ".md", {"BACKUP": "backup", "BASE": "base", "LOCAL": "local", "REMOTE": "remote"}[m[2]]


def _say_linked(entry: os.DirEntry[str], prefix: str, skipped: list[Skipped]) -> None:
    """Name a symlink to a note or to a folder among the skipped files: never followed, it was
    left out without a word, and a note moved to a synced drive and linked back (or a folder of
    notes linked in) silently vanished from every search.

    Told apart by name, never by following the link (its target may be on a network mount that
    hangs): ``*.md`` is a note, a name without an extension a folder, anything else is no note.
    Hidden names are left alone: Emacs's lock files (``.#note.md``, links to nowhere), a shared
    ``.obsidian`` linked in."""
    name = entry.name
    if name.startswith(".") or is_ignored_dir(name):
        return
    folder = not name.endswith(".md")
    if folder and os.path.splitext(name)[1]:
        return
    what = "folder" if folder else "file"
    skipped.append(Skipped(text_name(prefix + name) or display_path(prefix + name),
                           f"a symlink (not followed: keep the {what} itself here, or list the {what} it points "
                           "to in extraPaths)", lasting=True))


#: What iCloud Drive leaves of a file it evicted to save space ("Optimize Mac Storage"): ``.<name>.icloud``.
ICLOUD_PLACEHOLDER = ".icloud"
#: What Nextcloud's and ownCloud's desktop clients leave of a file whose local copy was freed
#: (virtual files, suffix mode): ``<name>.nextcloud`` / ``<name>.owncloud``, by whom.
SUFFIX_PLACEHOLDERS = {".nextcloud": "Nextcloud", ".owncloud": "ownCloud"}


def evicted_note(name: str) -> str | None:
    """The note a placeholder named ``name`` stands for (iCloud's ``.trip.md.icloud``, Nextcloud's
    ``trip.md.nextcloud``: ``trip.md``)."""
    if name.startswith(".") and name.endswith(".md" + ICLOUD_PLACEHOLDER) and len(name) > len(".md.icloud") + 1:
        return name[1:-len(ICLOUD_PLACEHOLDER)]
    for suffix in SUFFIX_PLACEHOLDERS:
        if name.endswith(".md" + suffix) and len(name) > len(".md" + suffix):
            return name[:-len(suffix)]
    return None


def _evicted_by(placeholder: str) -> str:
    """Which tool left ``placeholder`` (a name :func:`evicted_note` knows)."""
    return SUFFIX_PLACEHOLDERS.get(os.path.splitext(placeholder)[1], "iCloud")


def _placeholder_of(folder: Path, name: str) -> str | None:
    """The name of a placeholder that stands for the missing note ``folder/name``, if one is there."""
    for placeholder in (f".{name}{ICLOUD_PLACEHOLDER}", *(name + suffix for suffix in SUFFIX_PLACEHOLDERS)):
        if os.path.lexists(folder / placeholder):
            return placeholder
    return None


def _listed(entries: list[os.DirEntry[str]], name: str) -> bool:
    """Whether ``name`` is among a folder's ``entries`` (sorted by name)."""
    i = bisect.bisect_left(entries, name, key=lambda e: e.name)
    return i < len(entries) and entries[i].name == name


def _keep_evicted(rel: str, skipped: list[Skipped], unlisted: list[str], by: str = "iCloud") -> None:
    """A note iCloud evicted (or Nextcloud freed) is not deleted (it is downloaded when opened):
    what the index holds of it is kept, as for a note that cannot be read now, and said.  Its
    removal dropped the user's note from every search until it happened to be opened on this
    machine again."""
    name = text_name(rel)
    if name is None:
        return
    skipped.append(Skipped(name, f"evicted by {by} (only its placeholder is on this disk): what the index holds "
                                 "of it is kept until it is downloaded again"))
    unlisted.append(name)


def _still_there(exc: OSError) -> bool:
    """Whether what failed to be looked at may still hold notes (not deleted, or replaced by a file,
    in the middle of the listing)."""
    return exc.errno not in (errno.ENOENT, errno.ENOTDIR)


def _folder_id(st: os.stat_result) -> tuple[int, int]:
    """What changes when a folder's entries change: its ctime (also set by a chmod), and its inode
    (a folder replaced by another)."""
    return st.st_ino, st.st_ctime_ns


#: A listing is reused only while its folders last changed longer ago than this before it was taken:
#: two changes to a folder within one timestamp tick (a jiffy; 1-2 s on FAT and some network file
#: systems) leave the same ctime, so a folder changed that recently is listed again.
RELIST_MARGIN_NS = 3_000_000_000


def discover(workspace: Path, extra_paths: list[Path] | None = None) -> Discovery:
    """List memory files: MEMORY.md, memory.md, memory/**/*.md, then extraPaths (R§2)."""
    found = Discovery(started_ns=time.time_ns())
    # The folders are recorded (stat before listing) so that restat() can reuse this listing;
    # only for the common case: no extraPaths, nothing skipped, no issues.
    folders: list[tuple[str, tuple[int, int]]] | None = None if extra_paths else []
    if folders is not None:
        try:
            folders.append((str(workspace), _folder_id(os.stat(workspace))))
        except OSError:
            folders = None
    candidates: list[tuple[str, str, os.stat_result, str]] = []
    base = str(workspace)
    absent: set[str] = set()  # canonical names not there, in lower case
    for name in ROOT_FILES:
        p = workspace / name
        try:
            st = os.lstat(p)
        except FileNotFoundError:
            absent.add(name.lower())
            placeholder = _placeholder_of(workspace, name)
            if placeholder is not None:
                _keep_evicted(name, found.skipped, found.unlisted, _evicted_by(placeholder))
            continue
        except OSError as exc:
            found.issues.append(f"{p} not readable ({_errname(exc)})")
            found.skipped.append(Skipped(name, _errname(exc)))
            found.unlisted.append(name)
            continue
        if stat.S_ISREG(st.st_mode):
            candidates.append((str(p), name, st, base))
        elif stat.S_ISLNK(st.st_mode):
            # never followed (a link could lead anywhere), but said: a user who keeps MEMORY.md in
            # a dotfiles repo and links it in would otherwise wonder why it is never found
            found.skipped.append(Skipped(name, "a symlink (not followed: keep the file itself in the workspace, "
                                               "or list the file it points to in extraPaths)", lasting=True))
        else:
            found.skipped.append(Skipped(name, f"{kind_of(st.st_mode)}, not a regular file"))
    mem_dir = workspace / MEMORY_DIR
    top = _top_names(workspace)  # listed once for the checks below
    try:
        st = os.lstat(mem_dir)
        if stat.S_ISDIR(st.st_mode):
            mem_dir, st = _as_listed_folder(mem_dir, st, top)
            if folders is not None:
                folders.append((str(mem_dir), _folder_id(st)))
            candidates.extend((*c, base) for c in _walk(str(mem_dir), MEMORY_DIR + "/", found.issues, found.skipped,
                                                        found.unlisted, folders))
        elif stat.S_ISLNK(st.st_mode):  # said, as for MEMORY.md: a folder linked in from a synced drive
            found.skipped.append(Skipped(MEMORY_DIR, "a symlink (not followed: keep the folder itself in the "
                                                     "workspace, or list the folder it points to in extraPaths)",
                                         lasting=True))
    except FileNotFoundError:
        absent.add(MEMORY_DIR)
    except OSError as exc:
        found.issues.append(f"memory directory not accessible ({mem_dir}): {_errname(exc)}")
        found.unlisted.append(MEMORY_DIR)
    candidates = _without_case_aliases(candidates, top)
    found.skipped.extend(_case_variants(top, absent))
    found.skipped.extend(_conflict_copies(top))
    for extra in extra_paths or []:
        try:
            st = os.lstat(extra)
        except FileNotFoundError:
            placeholder = _placeholder_of(extra.parent, extra.name) if extra.name.endswith(".md") else None
            if placeholder is not None:
                _keep_evicted(rel_path(workspace, extra), found.skipped, found.unlisted, _evicted_by(placeholder))
            else:
                found.issues.append(f"additional memory path missing ({extra}){_windows_path_hint(extra)}")
            continue
        except OSError as exc:
            found.issues.append(f"additional memory path not accessible ({extra}): {exc.strerror}")
            found.unlisted.append(rel_path(workspace, extra))
            continue
        if stat.S_ISLNK(st.st_mode):
            found.skipped.append(Skipped(display_path(rel_path(workspace, extra)),
                                         f"a symlink in extraPaths (not followed: list {_link_target(extra)} instead)"))
            continue
        if stat.S_ISDIR(st.st_mode):
            # the workspace itself (``"."``) lists ``notes/x.md``, not ``./notes/x.md``: the path
            # memory_get gives back, and the one every other extra folder's notes are cited by
            below = rel_path(workspace, extra)
            candidates.extend((*c, str(extra)) for c in _walk(str(extra), "" if below == "." else below + "/",
                                                              found.issues, found.skipped, found.unlisted))
        elif stat.S_ISREG(st.st_mode) and extra.name.endswith(".md"):
            if valid_name(str(extra)):
                candidates.append((str(extra), rel_path(workspace, extra), st, str(extra.parent)))
                below = rel_path(workspace, extra.parent)
                found.skipped.extend(_conflict_copies(_top_names(extra.parent), extra.name,
                                                      "" if below == "." else below + "/",
                                                      f"extraPaths lists {extra.name}, not it"))
            else:
                found.skipped.append(Skipped(display_path(rel_path(workspace, extra)), "file name is not valid UTF-8"))
        elif extra.name.endswith(".md"):
            found.skipped.append(Skipped(display_path(rel_path(workspace, extra)),
                                         f"{kind_of(st.st_mode)}, not a regular file"))
        elif stat.S_ISREG(st.st_mode):
            # a file extraPaths names itself (notes/Ideas.MD, todo.txt) was left out without a word
            shown = display_path(rel_path(workspace, extra))
            found.skipped.append(_upper_case_md("", shown) if extra.name[-3:].lower() == ".md" else Skipped(
                shown, "listed in extraPaths, but not memory: only .md files are", lasting=True))
    seen: set[tuple[int, int]] = set()
    for abs_path, rel, st, root in candidates:
        identity = (st.st_dev, st.st_ino)  # same file reached twice (overlapping extraPaths)
        if identity in seen:
            continue
        seen.add(identity)
        found.files.append(FileEntry(rel, abs_path, "memory", change_stamp(st), st.st_size, root,
                                     unsettled(st, found.started_ns)))
    if not found.files:
        found.issues.insert(0, f"no memory files found in {workspace}")
    if folders is not None and not found.issues and all(s.lasting for s in found.skipped):
        found.folders = folders
    return found


def _link_target(link: Path) -> str:
    """Where the symlink ``link`` points, as a path to list in extraPaths (read from the link
    itself, never followed: its target may be on a mount that hangs); "what it points to" when it
    cannot be read.  Why: a vault linked in (``~/Obsidian`` to a synced drive's folder) was only
    told to "list what it points to instead"."""
    try:
        return display_path(os.path.normpath(os.path.join(link.parent, os.readlink(link))))
    except OSError:
        return "what it points to"


#: ``C:\\Users\\me\\notes`` or ``D:/notes`` in extraPaths, joined to the workspace as a relative path.
_DRIVE_PATH = re.compile(r"(?:^|/)([A-Za-z]):[\\/](.*)$", re.DOTALL)


def _windows_path_hint(extra: Path) -> str:
    """What to say of a missing extra path written as on Windows: ``C:\\Users\\me\\notes`` was
    said to be missing as ``<workspace>/C:\\Users\\me\\notes``, a path no one wrote."""
    m = _DRIVE_PATH.search(str(extra))
    if m is None:
        return ""
    rest = m[2].replace("\\", "/").strip("/")
    return (f": '{m[1]}:' is a Windows drive, which names no folder here; give the path where that "
            f"drive is mounted (under WSL: /mnt/{m[1].lower()}/{rest})")


def no_notes_hint(workspace: Path) -> str:
    """What to say when a workspace holds no memory file at all.

    ``memdir --workspace ~/notes index`` on a folder of ordinary notes (``ideas.md``, ``todo.md``)
    indexed nothing and searches answered "No matches." without a word: only MEMORY.md, memory.md
    and memory/ are memory.  This names the notes that are there and how to include them.
    """
    others = [n for n in _top_names(workspace)
              if n.lower().endswith(".md") and not n.startswith(".") and n not in ROOT_FILES]
    where = display_path(str(workspace))
    said = (f"no memory files in {where}: memdir indexes MEMORY.md, memory.md and memory/**/*.md there, "
            "plus what memorySearch.extraPaths lists")
    if not others:
        return said + " (memdir append writes today's memory/YYYY-MM-DD.md)"
    named = ", ".join(display_path(n) for n in others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
    return (f"{said}; to index its other notes ({named}) too, set extraPaths = [\".\"] under [memorySearch] "
            "in a memdir.toml there")


def _top_names(workspace: Path) -> list[str]:
    """The names at the workspace's top, sorted (none when it cannot be listed: the checks below
    only add advice, and a workspace that cannot be listed is reported elsewhere)."""
    try:
        with os.scandir(workspace) as it:
            return sorted(e.name for e in it)
    except OSError:
        return []


def _as_listed_folder(mem_dir: Path, st: os.stat_result, top: list[str]) -> tuple[Path, os.stat_result]:
    """The ``memory/`` folder found by that name, as the workspace lists it (``Memory/`` where the
    folder ignores case), so its notes are the same paths as the ones an extra folder (``"."``)
    walks: through FUSE (exFAT, FAT) each name has an inode of its own, and ``memory/x.md`` and
    ``Memory/x.md`` were indexed as two notes, every search answering each twice."""
    if not top or MEMORY_DIR in top:
        return mem_dir, st
    spelt = [n for n in top if n.lower() == MEMORY_DIR]
    if len(spelt) == 1:
        try:
            again = os.lstat(mem_dir.parent / spelt[0])
            if stat.S_ISDIR(again.st_mode):
                return mem_dir.parent / spelt[0], again
        except OSError:
            pass
    return mem_dir, st


def listed_memory_dir(workspace: Path) -> Path:
    """The workspace's ``memory/`` folder by the name the workspace lists it under (see
    :func:`_as_listed_folder`); ``workspace/memory`` when it is not a folder."""
    mem_dir = workspace / MEMORY_DIR
    try:
        st = os.lstat(mem_dir)
    except OSError:
        return mem_dir
    return _as_listed_folder(mem_dir, st, _top_names(workspace))[0] if stat.S_ISDIR(st.st_mode) else mem_dir


def _without_case_aliases(candidates: list[tuple[str, str, os.stat_result, str]],
                          top: list[str]) -> list[tuple[str, str, os.stat_result, str]]:
    """``candidates`` less a root file found only because the folder ignores case: where it does
    (exFAT, FAT, an SMB share, APFS reached over sshfs), ``MEMORY.md`` and ``memory.md`` both open
    the one file there, and a FUSE file system gives each name an inode of its own, so the
    ``(st_dev, st_ino)`` check did not see them as one: the note was indexed twice and every
    search answered each of its chunks twice.  The name the folder lists is kept (``MEMORY.md``
    when it lists neither, as for ``Memory.md``); both are kept where both are listed (a
    case-sensitive folder holding two files), or when the folder cannot be listed.

    A root file kept that the folder lists in another case (``Memory.md``) is stat'ed and read by
    that name: through FUSE each name has its own cached attributes, and an edit of
    ``Memory.md`` (the name the user and the watcher see) left ``MEMORY.md``'s stale for a second,
    so the sync the edit started found the note unchanged, and nothing synced it again."""
    roots = [c for c in candidates if c[1] in ROOT_FILES]
    if not roots or not top:
        return candidates
    listed = [c for c in roots if c[1] in top]
    if len(roots) > 1 and len(listed) < len(roots):
        alias = {c[1] for c in roots} - {c[1] for c in (listed or roots[:1])}
        candidates = [c for c in candidates if c[1] not in alias]
    out = []
    for abs_path, rel, st, base in candidates:
        spelt = [n for n in top if n.lower() == rel.lower()] if rel in ROOT_FILES and rel not in top else []
        if len(spelt) == 1:
            try:
                named = os.path.join(os.path.dirname(abs_path), spelt[0])
                again = os.lstat(named)
                if stat.S_ISREG(again.st_mode):
                    abs_path, st = named, again
            except OSError:
                pass
        out.append((abs_path, rel, st, base))
    return out


def _case_variants(top: list[str], absent: set[str]) -> list[Skipped]:
    """``Memory/``, ``Memory.md``…: named like a memory file or folder but for case.  A workspace
    made on macOS, whose file system ignores case, has them indexed there; here they were left out
    without a word.  Said when the memory name itself is missing, or listed beside them (two
    entries of one name but for case: this folder does not ignore case).  Not when the memory name
    is found but not listed: then the folder ignores case, and this is that file, indexed.

    Why beside too: ``memdir append`` (or the session hook) made ``memory/`` next to a ``Memory/``
    synced from a Mac, and from then on ``Memory/``'s notes were left out without a word."""
    folded = [name.lower() for name in top]
    said = []
    for name, low in zip(top, folded, strict=True):
        if low not in ("memory.md", MEMORY_DIR) or name in ROOT_FILES or name == MEMORY_DIR:
            continue
        if low in absent or folded.count(low) > 1:
            canonical = MEMORY_DIR + "/" if low == MEMORY_DIR else "MEMORY.md"
            there = [n for n in top if n in ROOT_FILES or n == MEMORY_DIR if n.lower() == low]
            advice = f"merge it into {there[0]}{'/' if there[0] == MEMORY_DIR else ''}" if there else \
                f"rename it to {canonical}"
            said.append(Skipped(display_path(name), f"not memory: names are case-sensitive here ({advice})"))
    return said


def _conflict_copies(names: list[str], note: str = "MEMORY.md", below: str = "",
                     why: str = "at the top of the workspace only MEMORY.md is") -> list[Skipped]:
    """The copies of ``MEMORY.md`` (or of the extra file ``note``, among the ``names`` of its
    folder, ``below`` the workspace) a sync tool made when two machines changed it (Syncthing's
    ``MEMORY.sync-conflict-20260112-093000-ABCDEFG.md``, Dropbox's and Nextcloud's
    ``MEMORY (conflicted copy 2026-01-12).md``, iCloud Drive's ``MEMORY 2.md``, Google Drive's
    ``MEMORY (1).md``): not memory, so what the other machine wrote was left out of every search
    without a word."""
    stem = note[:-len(".md")].lower()
    numbered = re.compile(re.escape(stem) + r"(?: [2-9]| [1-9]\d| \([1-9]\d?\))\.md", re.IGNORECASE)
    advice = f", not indexed ({why}): merge what it holds into {note}"
    copies = []
    for name in names:
        if name == note or name in ROOT_FILES or not name.lower().startswith(stem) or not name.endswith(".md"):
            continue
        if "conflict" in name[len(stem):].lower():
            what = f"a sync tool's conflict copy of {note}"
        elif numbered.fullmatch(name):
            what = f"a copy of {note} (iCloud's or Google Drive's name for a conflicting version)"
        else:
            continue
        copies.append(Skipped(display_path(below + name), what + advice, lasting=True))
    return copies


def is_unlisted(path: str, unlisted: list[str]) -> bool:
    """Whether the indexed ``path`` is, or is below, one of a listing's :attr:`Discovery.unlisted`."""
    return any(path == u or path.startswith(u + "/") for u in unlisted)


def restat(listing: Discovery) -> list[FileEntry] | None:
    """The files of an earlier :func:`discover` with their stat taken now, without listing folders
    again, when that gives what :func:`discover` would: no folder it listed has changed since
    (same inode and ctime; a file added, removed or renamed changes its folder's), none changed
    within :data:`RELIST_MARGIN_NS` before that listing, and every file is still a regular file.
    ``None`` otherwise: list again.

    Why: read-your-writes runs this before every search; re-stat'ing the known files costs a
    fraction of listing and sorting the folders again.  A file whose stamp and size are the
    listing's, and that was settled then, is the listing's entry itself (it stays settled: the
    window only closes as time goes on): building a new entry for each of 600 files cost a 10k-chunk
    search more than its own ranking.
    """
    if listing.folders is None:
        return None
    now = time.time_ns()
    limit = listing.started_ns - RELIST_MARGIN_NS
    lstat, is_regular = os.lstat, stat.S_ISREG
    try:
        for path, ident in listing.folders:
            if ident[1] >= limit or _folder_id(lstat(path)) != ident:
                return None
        files = []
        for f in listing.files:
            st = lstat(f.abs_path)
            if not is_regular(st.st_mode):
                return None
            stamp = change_stamp(st)
            if stamp == f.mtime_ns and st.st_size == f.size and not f.unsettled:
                files.append(f)
            else:
                files.append(FileEntry(f.path, f.abs_path, f.source, stamp, st.st_size, f.root, unsettled(st, now)))
    except OSError:
        return None
    return files


def is_memory_path(rel: str) -> bool:
    """``MEMORY.md``, ``memory.md`` or ``memory/...`` (case-sensitive).

    Unlike OpenClaw, leading dots are not stripped: ``.memory/x.md`` is not a memory path.
    """
    norm = rel.strip().replace("\\", "/")
    while norm.startswith("./"):
        norm = norm[2:]
    return norm in ROOT_FILES or (norm.startswith("memory/") and len(norm) > len("memory/"))


#: How a session search result names its transcript; readable only with the ``sessions`` source on
#: (:mod:`memdir.sessions.readable`).
SESSIONS_PREFIX = "sessions/"


def is_session_path(raw: str) -> bool:
    """A path ``memory_get`` hands to the session reader when the ``sessions`` source is on: under
    ``sessions/`` (``./`` before it allowed, as for memory paths) and not Markdown (a
    ``sessions/x.md`` extraPath stays a memory file)."""
    text = session_relative(raw)
    return text.replace("\\", "/").startswith(SESSIONS_PREFIX) and not text.endswith(".md")


#: What ``/new``/``/reset`` (``.reset.``) and a deletion (``.deleted.``) append to a transcript's name.
ARCHIVE_MARKERS = (".reset.", ".deleted.")


def is_transcript_name(name: str, *, archived: bool = True) -> bool:
    """``<id>.jsonl``, or with ``archived`` one set aside by ``/new``, ``/reset`` or a deletion:
    ``<id>.jsonl.reset.<time>`` / ``<id>.jsonl.deleted.<time>`` (R§3 [v4.12]: still indexed)."""
    if name.endswith(".jsonl"):
        return len(name) > len(".jsonl")
    if not archived:
        return False
    for marker in ARCHIVE_MARKERS:
        head, sep, tail = name.partition(".jsonl" + marker)
        if sep and head and tail:
            return True
    return False


def session_relative(raw: str) -> str:
    """``raw`` stripped, without any leading ``./`` (``./sessions/x.jsonl`` is ``sessions/x.jsonl``)."""
    text = (raw or "").strip()
    while text.startswith("./"):
        text = text[2:].lstrip("/")
    return text


class PathError(MemdirError, ValueError):
    """A path memory_get refuses or cannot read; the message says which and why."""


@dataclass(frozen=True, slots=True)
class ResolvedPath:
    abs_path: Path
    rel: str
    root: Path
    #: The root is a configured extra folder, itself refused as a symlink (the workspace, or the
    #: folder holding an extra file, may be reached through one).
    root_nofollow: bool = False


def _allowed_root(absolute: Path, rel: str, workspace: Path, extra_paths: list[Path]) -> Path | None:
    """The allowed root ``absolute`` (``rel`` to the workspace, normalised) is below, if any."""
    if rel in ROOT_FILES or (rel.startswith(MEMORY_DIR + "/") and len(rel) > len(MEMORY_DIR) + 1):
        return workspace
    # An extra path is a file when it is asked for itself, a folder when something below it is
    # (not by its suffix: discovery walks a folder named ``notes.md`` too).
    for extra in extra_paths:
        if absolute == extra:
            return extra.parent
        if extra in absolute.parents:
            return extra
    return None


def resolve_readable(raw: str, workspace: Path, extra_paths: list[Path], *, sessions: bool = False) -> ResolvedPath:
    """Check a requested path against the allowed roots without touching anything outside them;
    ``sessions``: the refusal also names session transcripts (only then readable)."""
    text = (raw or "").strip()
    if not text:
        raise PathError("path required")
    if "\x00" in text:
        raise PathError("invalid path: contains a NUL byte")
    text = fs_name(text)
    # A backslash is a separator to an agent on Windows, but a file name character here: the name
    # as given wins when it is an allowed file (``memory/a\b.md`` is indexed under that name).
    spellings = [text, text.replace("\\", "/")] if "\\" in text else [text]
    for spelling in spellings:
        candidate = Path(os.path.expanduser(spelling))
        absolute = Path(os.path.normpath(candidate if candidate.is_absolute() else workspace / candidate))
        rel = rel_path(workspace, absolute)
        root = _allowed_root(absolute, rel, workspace, extra_paths)
        if root is not None and (spelling is spellings[-1] or os.path.lexists(absolute)):
            break
    # (not allowed as spelled: an extra folder named in the other form, see Settings.extra_paths; a
    # path longer than any the OS opens names no file in any form, and a hostile one of 80,000 marks
    # took 17 s to put in NFC and NFD)
    if not text.isascii() and len(text) < PATH_MAX and (root is None or not os.path.lexists(absolute)):
        absolute, rel, root = _other_normal_form(spellings, absolute, rel, root, workspace, extra_paths)
    if root is None:
        also = ", session transcripts as sessions/<name>.jsonl" if sessions else ""
        raise PathError(
            f"path not allowed: {text} (memory_get reads MEMORY.md, memory.md, memory/**/*.md{also} "
            "and configured extraPaths only)"
        )
    if rel in ROOT_FILES and root == workspace:
        rel = _root_as_listed(workspace, rel)
        absolute = workspace / rel
    if absolute.suffix != ".md":
        if absolute.suffix.lower() == ".md":  # ("not a Markdown file" of a .MD note read as nonsense)
            raise PathError(f"not memory: {text} (only names ending in .md, in lower case, are memory: "
                            f"rename it to {absolute.stem}.md)")
        raise PathError(f"not a Markdown file: {text} (only .md files are memory)")
    # No symlink anywhere from the allowed root down to the file (fixes PRs #68597/#80331).
    probe = root
    for part in absolute.relative_to(root).parts if absolute != root else ():
        probe = probe / part
        try:
            st = os.lstat(probe)
        except FileNotFoundError:
            break  # missing: reported as empty text by the reader
        except OSError as exc:
            raise PathError(f"cannot access {rel_path(workspace, probe)}: {exc.strerror}") from exc
        if stat.S_ISLNK(st.st_mode):
            raise PathError(f"symlinks are not followed: {rel_path(workspace, probe)}")
    nofollow = root != workspace and root in extra_paths
    if nofollow:
        try:
            if stat.S_ISLNK(os.lstat(root).st_mode):
                raise PathError(f"symlinks are not followed: {root}")
        except FileNotFoundError:
            pass
    return ResolvedPath(absolute, text_name(rel) or rel, root, nofollow)


def _root_as_listed(workspace: Path, rel: str) -> str:
    """``memory.md`` asked for where the folder ignores case and lists ``MEMORY.md`` (or the other
    way round): the name the folder lists, which searches cite, not a second name for the note."""
    other = ROOT_FILES[1] if rel == ROOT_FILES[0] else ROOT_FILES[0]
    if not os.path.lexists(workspace / other):  # (one lstat: where case is kept, nothing more)
        return rel
    top = _top_names(workspace)
    return other if rel not in top and other in top else rel


def _other_normal_form(spellings: list[str], absolute: Path, rel: str, root: Path | None, workspace: Path,
                       extra_paths: list[Path]) -> tuple[Path, str, Path | None]:
    """The same path in another Unicode normal form when only that one exists: a name written in
    NFD (macOS, some editors and archives) comes back from an agent in NFC (``café`` typed, or
    re-encoded by the model), and was "missing".  Checked against the allowed roots as any path."""
    import unicodedata

    for form in ("NFC", "NFD"):
        for spelling in spellings:
            other = unicodedata.normalize(form, spelling)
            if other == spelling:
                continue
            candidate = Path(os.path.expanduser(other))
            found = Path(os.path.normpath(candidate if candidate.is_absolute() else workspace / candidate))
            found_rel = rel_path(workspace, found)
            found_root = _allowed_root(found, found_rel, workspace, extra_paths)
            if found_root is not None and os.path.lexists(found):
                return found, found_rel, found_root
    # a path whose parts are in different forms (a folder made on macOS, a note in it on Linux)
    found_below = None if root is None else _matching_entries(absolute, root)
    if found_below is not None:
        found_rel = rel_path(workspace, found_below)
        if _allowed_root(found_below, found_rel, workspace, extra_paths) == root:
            return found_below, found_rel, root
    return absolute, rel, root


def _matching_entries(absolute: Path, root: Path) -> Path | None:
    """``absolute`` with each part below ``root`` that does not exist replaced by the entry of its
    folder that is the same name in NFC, if there is one: a folder named in NFD (made on macOS and
    synced) holding a note named in NFC (written on Linux) was missing in either form.  Stops at a
    symlink (refused by the caller), so no folder outside the root is listed."""
    import unicodedata

    try:
        parts = absolute.relative_to(root).parts
    except ValueError:
        return None
    probe = root
    for part in parts:
        step = probe / part
        if not os.path.lexists(step):
            want = unicodedata.normalize("NFC", part)
            try:
                if not stat.S_ISDIR(os.lstat(probe).st_mode):
                    return None
                with os.scandir(probe) as entries:
                    name = next((e.name for e in entries if unicodedata.normalize("NFC", e.name) == want), None)
            except OSError:
                return None
            if name is None:
                return None
            step = probe / name
        probe = step
    return probe


def read_allowed(path: str | os.PathLike[str], rel: str, *, dir_fd: int | None = None,
                 refuse: Callable[[str], PathError] = PathError, limit: int | None = MAX_NOTE_BYTES) -> bytes | None:
    """The bytes ``memory_get`` reads at an allowed path (``rel``, as the caller names it), or
    ``None`` for a missing file (R§10.2); anything but a regular file, a symlink included, or a
    file over ``limit`` bytes is refused with ``refuse(message)``."""
    try:
        return read_regular(path, dir_fd=dir_fd, limit=limit)
    except FileNotFoundError:
        return None
    except NotRegularFile as exc:
        raise refuse(f"not a file: {rel} ({exc.strerror})") from exc
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise refuse(f"symlinks are not followed: {rel}") from exc
        if exc.errno == errno.EISDIR:
            raise refuse(f"not a file: {rel}") from exc
        raise refuse(f"cannot read {rel}: {exc.strerror}") from exc


#: Longest path Linux opens (``PATH_MAX``, with its NUL).
PATH_MAX = 4096


def read_resolved(resolved: ResolvedPath) -> bytes | None:
    """The bytes at a path :func:`resolve_readable` allowed (``None``: missing), its folders opened
    one at a time from its root, never through a symlink (:func:`memdir.reading.open_beneath`).

    Why: that check looks at the path, and opening it by name later follows whatever is there
    then; a folder swapped for a symlink in between (TOCTOU) would let the read leave the root.
    """
    if len(os.fsencode(resolved.abs_path)) >= PATH_MAX:  # as os.open of the whole path says (a walk would not)
        raise PathError(f"cannot read {resolved.rel}: {os.strerror(errno.ENAMETOOLONG)}")
    *folders, name = resolved.abs_path.relative_to(resolved.root).parts
    shown = resolved.rel.split("/")
    try:
        fd = open_beneath(resolved.root, folders, root_nofollow=resolved.root_nofollow)
    except FileNotFoundError:
        return None
    except OSError as exc:
        depth = len(exc.filename.split("/")) if exc.filename else 0
        where = "/".join(shown[: len(shown) - len(folders) - 1 + depth]) if depth else str(resolved.root)
        if exc.errno == errno.ELOOP:
            raise PathError(f"symlinks are not followed: {where}") from exc
        raise PathError(f"cannot access {where}: {_errname(exc)}") from exc
    try:
        return read_allowed(name, resolved.rel, dir_fd=fd)
    finally:
        os.close(fd)


def line_number(name: str, value: object) -> int | None:
    """``from_line``/``lines`` of :meth:`memdir.api.Memory.get` as an integer (a float is truncated,
    as the tools do); anything else is a ``TypeError``/``ValueError`` naming the parameter, not
    "cannot convert float NaN to integer"."""
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(type(value), "__float__"):  # (NumPy's numbers too)
        raise TypeError(f"{name} must be an integer, not {type(value).__name__}")
    if not isinstance(value, int) and not math.isfinite(value):
        raise ValueError(f"{name} must be a finite number, not {value}")
    return int(value)


#: The lines of ``path#L5`` or ``path#L5-L7`` (:func:`memdir.tools.format_citation`), after the last ``#``.
_CITED_LINES = re.compile(r"#L(\d+)(?:-L(\d+))?")


def _cited_name(path: str) -> tuple[str, str, str | None] | None:
    """``(path, first, last)`` of a citation of a note or a transcript: what fullmatching
    ``(.+\\.(?:md|jsonl[^#/]*))#L(\\d+)(?:-L(\\d+))?`` gives, found by position.  The pattern
    tried each ``.jsonl`` in the path, each scanning to the next ``#`` or ``/``: a 120 KB path of
    ``.jsonl`` (a hostile ``memory_get``) held the call 29 s, 360 KB five minutes."""
    cut = path.rfind("#")
    lines = _CITED_LINES.fullmatch(path, cut) if cut > 0 else None
    if lines is None:
        return None
    name = path[:cut]
    head_end = name.find("\n")  # what comes before the extension holds no line end
    head_end = len(name) if head_end < 0 else head_end
    if name.endswith(".md") and 0 < len(name) - 3 <= head_end:
        return name, lines[1], lines[2]
    after = max(name.rfind("#"), name.rfind("/")) + 1  # a transcript's suffix holds no "#" or "/"
    at = name.find(".jsonl", max(1, after - 6))
    return (name, lines[1], lines[2]) if 0 < at <= head_end else None


def _cited_line(digits: str) -> int:
    """A citation's line number; one of more digits than any file has lines is a line past its end
    (``int`` of 4,301 digits or more raised "Exceeds the limit (4300 digits) for integer string
    conversion; use sys.set_int_max_str_digits()", advice for a Python programmer)."""
    return int(digits) if len(digits) <= 18 else 10**18


def cited_range(path: str, from_line: int | None, lines: int | None) -> tuple[str, int | None, int | None]:
    """A citation ``memory_search`` gave (``memory/x.md#L5-L7``) as its path and lines, which
    ``from``/``lines`` given too override: an agent handing one back to ``memory_get`` was told
    "not a Markdown file".  Any other path is returned as it is."""
    m = _cited_name(path.strip()) if "#L" in path else None
    if m is None:
        return path, from_line, lines
    first, last = _cited_line(m[1]), _cited_line(m[2] or m[1])
    if from_line is None and lines is None:
        return m[0], first, max(1, last - first + 1)
    return m[0], from_line, lines


def read_lines(resolved: ResolvedPath, from_line: int | None = None, lines: int | None = None) -> str:
    """File text, or a 1-based slice of it; a missing file reads as ``""`` (R§10.2)."""
    raw = read_resolved(resolved)
    if raw is None:
        return ""
    text = decode_note(raw)
    if not from_line and not lines:
        return text
    all_lines = text.split("\n")
    start = max(1, int(from_line or 1))
    count = max(1, int(len(all_lines) if lines is None else lines))  # R§10.2: `lines ?? total`, so 0 is one line
    return "\n".join(all_lines[start - 1 : start - 1 + count])
