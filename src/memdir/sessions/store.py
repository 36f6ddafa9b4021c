"""Session store: JSONL transcripts plus ``sessions.json`` metadata (R§8, R§11.4).

Layout: ``<sessions_dir>/<sessionId>.jsonl`` (one JSON record per line) and
``<sessions_dir>/sessions.json`` (an object keyed by session key ``agent:<id>:<rest>``).

Crash safety is the point of this module:

* a transcript append is one ``write`` of one whole line on an ``O_APPEND`` descriptor, under an
  exclusive ``flock``, followed by ``fsync``; a record that was cut by a crash can only be the
  last line, readers skip it, and the next append starts on a fresh line so the torn bytes never
  glue themselves to a good record;
* ``sessions.json`` is rewritten through a temp file, ``fsync`` and ``os.replace`` under a lock
  file, so readers see either the old or the new version, never half of one.
"""

from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import stat
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict

from memdir.atomic_write import replace_file
from memdir.errors import MemdirError
from memdir.lock import LockTimeout, busy_holder, flock_within
from memdir.reading import NotRegularFile, kind_of
from memdir.tools import chat_type_from_session_key, parse_session_key
from memdir.workspace import APPLE_DOUBLE_PREFIX, apple_double, is_transcript_name

log = logging.getLogger(__name__)

SESSIONS_FILE = "sessions.json"
RESET_MARKER = ".reset."
T = TypeVar("T")


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


def now_ms() -> int:
    return int(time.time() * 1000)


# --- session keys ---------------------------------------------------------------------------


# Parsing is shared with the tools (citations in auto mode) and the session-start context, so
# a key means the same chat type everywhere: see memdir.tools.parse_session_key.


def session_key(agent_id: str, rest: str = "main") -> str:
    """Build a session key; a ``rest`` that already is a full key is returned unchanged."""
    if parse_session_key(rest) is not None:
        return rest
    return f"agent:{agent_id}:{rest}"


# --- sessions.json entries ------------------------------------------------------------------


class SessionEntry(BaseModel):
    """One ``sessions.json`` value. Unknown fields written by other tools are kept verbatim."""

    model_config = ConfigDict(extra="allow", populate_by_name=True, alias_generator=_camel)

    session_id: str
    session_file: str | None = None
    updated_at: int | None = None
    total_tokens: int | None = None
    total_tokens_fresh: bool | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    context_tokens: int | None = None
    compaction_count: int | None = None
    memory_flush_at: int | None = None
    memory_flush_compaction_count: int | None = None
    memory_flush_context_hash: str | None = None
    chat_type: str | None = None
    model: str | None = None
    model_provider: str | None = None

    def to_json(self) -> dict[str, Any]:
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


# --- transcripts ----------------------------------------------------------------------------


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def append_record(path: str | os.PathLike[str], record: Mapping[str, Any]) -> None:
    """Append one JSON record as one line, atomically with respect to other appenders.

    If the file's last byte is not a newline (a previous writer died mid-line) a newline is
    written first, so the torn fragment stays an isolated, skippable line.  A string holding a lone
    surrogate (a model reply cut inside an emoji's ``\\ud83d\\ude00`` pair, stdin read with
    ``surrogateescape``) has no UTF-8 form, so that record is written with ``\\u`` escapes instead:
    the message is kept, and reads back as it was sent.  A write that fails part-way (a full disk, a
    file size limit) is cut back, so the file is as it was, and the error names it.
    """
    try:
        line = json.dumps(record, ensure_ascii=False, separators=(",", ":")).encode("utf-8") + b"\n"
    except UnicodeEncodeError:
        line = json.dumps(record, separators=(",", ":")).encode("ascii") + b"\n"
    try:
        fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK, 0o600)
    except OSError as exc:
        # (said "[Errno 40] Too many levels of symbolic links" for one link, "[Errno 21]" for a folder)
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise NotRegularFile(exc.errno, "a symbolic link, not a regular file: memdir does not write through "
                                            "it; remove it or put the file itself there", str(path)) from None
        if exc.errno == errno.EISDIR:
            raise NotRegularFile(exc.errno, "a directory, not a regular file", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):  # a FIFO took the record into its pipe and lost it
            raise NotRegularFile(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(path))
        _lock_within(fd, path)
        size = os.fstat(fd).st_size
        if size > 0 and os.pread(fd, 1, size - 1) != b"\n":
            line = b"\n" + line
        try:
            _write_all(fd, line)
            os.fsync(fd)
        except BaseException as exc:
            # Cut back to the size before (still under the flock, so nothing else landed after it):
            # a full disk or a file size limit left the record's first bytes as a torn last line.
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            if isinstance(exc, OSError) and exc.filename is None:  # name the file: "[Errno 28] ..." alone said nothing
                raise OSError(exc.errno, f"{exc.strerror or exc}; the record was not written", str(path)) from exc
            raise
    finally:
        os.close(fd)  # closing releases the flock


def iter_records(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(1-based line number, record)``; blank, torn or non-object lines are skipped.

    Only a regular file is read, never through a symlink, as ``memory_get`` reads one: a transcript
    swapped for a FIFO after the sync listed it made ``open`` wait for a writer forever (holding
    the index's writer lock), and one swapped for a link was read wherever it pointed.  Either
    raises :class:`OSError` (the sync reports the file as skipped); a missing file yields nothing.
    """
    fh = _open_transcript(path)
    if fh is None:
        return
    with fh:  # the generator keeps it open while yielding
        yield from parse_records(fh)


def _open_transcript(path: str | os.PathLike[str]) -> Any:
    """The transcript opened for reading (binary), or ``None`` if it is missing: see :func:`iter_records`."""
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        return None
    except OSError as exc:  # (one link said "[Errno 40] Too many levels of symbolic links")
        if exc.errno == errno.ELOOP and os.path.islink(path):
            raise NotRegularFile(exc.errno, "a symbolic link, not a regular file: memdir does not follow it; "
                                            "remove it or put the file itself there", str(path)) from None
        raise
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(errno.EINVAL, f"{kind_of(mode)}, not a regular file", str(path))
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


#: Bytes read at a time by :func:`records_from_end`.
_TAIL_BLOCK = 64 * 1024


def records_from_end(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The records of :func:`iter_records`, last first, reading the file from its end a block at a
    time: a reader that wants the last few messages (the session hook) parsed every line of a long
    transcript (4.7 s for a million messages) to keep 15."""
    fh = _open_transcript(path)
    if fh is None:
        return
    with fh:
        pos = os.fstat(fh.fileno()).st_size
        pending: list[bytes] = []  # the start of a line whose end was read already, last block first
        while pos > 0:
            step = min(_TAIL_BLOCK, pos)
            pos -= step
            fh.seek(pos)
            block = fh.read(step)
            cut = block.find(b"\n")
            if cut < 0:  # inside one long line: kept as pieces, joined once its start is found
                pending.append(block)
                continue
            lines = block[cut + 1:].split(b"\n")
            lines[-1] += b"".join(reversed(pending))
            pending = [block[:cut]]
            for raw in reversed(lines):
                yield from (record for _, record in parse_records((raw,)))
        yield from (record for _, record in parse_records((b"".join(reversed(pending)),)))


def parse_records(lines: Iterable[bytes], start: int = 1) -> Iterator[tuple[int, dict[str, Any]]]:
    """:func:`iter_records` over lines already read (split on ``\\n`` only, as a file iterates), for
    a reader that must open the file itself (``memory_get``: no symlinks, regular files only).
    ``start``: the line number of the first of ``lines`` (a reader that skipped those before it).

    A line with a byte that is not UTF-8 is read with U+FFFD in its place: one bad byte (a
    writer that cut a character, a binary paste) must not lose the whole message."""
    for lineno, raw in enumerate(lines, start=start):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8-sig", "replace"))
        except (ValueError, RecursionError):  # RecursionError: nested too deep
            continue
        if isinstance(record, dict):
            yield lineno, record


_UNWRITABLE = re.compile("[\x00\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with NUL and lone surrogates (a JSON ``"\\ud800"`` escape decodes to one) as U+FFFD.

    A lone surrogate cannot be encoded as UTF-8, so it made SQLite refuse the whole transcript and
    the hook fail to write its file; a NUL makes a Markdown file look binary to other tools."""
    return _UNWRITABLE.sub("\ufffd", text) if _UNWRITABLE.search(text) else text


def read_records(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    return [record for _, record in iter_records(path)]


def message_record(
    role: str, content: Any, *, timestamp: int | None = None, **extra: Any
) -> dict[str, Any]:
    """A pi-agent style message record: ``{"type":"message","message":{role, content}, ...}``."""
    message: dict[str, Any] = {"role": role, "content": content}
    message.update({k: v for k, v in extra.items() if v is not None})
    return {"type": "message", "timestamp": timestamp if timestamp is not None else now_ms(),
            "message": message}


def reset_suffix(when: datetime | None = None) -> str:
    """``.reset.<UTC ISO time with ':' → '-'>``: sortable, and safe on every filesystem."""
    when = (when or datetime.now(UTC)).astimezone(UTC)
    return RESET_MARKER + when.strftime("%Y-%m-%dT%H-%M-%S.") + f"{when.microsecond // 1000:03d}Z"


def list_transcripts(sessions_dir: str | os.PathLike[str], *, archived: bool = False) -> list[Path]:
    """Live transcripts (``*.jsonl``, regular files, no symlinks), sorted by name; with ``archived``
    also those ``/new`` and ``/reset`` renamed to ``*.jsonl.reset.<time>`` (or deleted ones)."""
    folder = Path(sessions_dir)
    if not folder.is_dir():
        return []
    out = []
    for entry in os.scandir(folder):
        if is_transcript_name(entry.name, archived=archived) and entry.is_file(follow_symlinks=False):
            if entry.name.startswith(APPLE_DOUBLE_PREFIX) and apple_double(entry.path):
                continue  # (macOS's metadata beside t.jsonl copied to a share: counted as a transcript)
            out.append(Path(entry.path))
    return sorted(out)


# --- the store ------------------------------------------------------------------------------


#: How long a write to the sessions store waits for another process's lock (on ``sessions.json``
#: or a transcript): writers hold it for one small write, so only a stopped or hung one this long.
SESSION_LOCK_WAIT = 30.0


def _lock_within(fd: int, path: str | os.PathLike[str]) -> None:
    """Take ``fd``'s exclusive ``flock`` within :data:`SESSION_LOCK_WAIT` seconds.

    Why: a holder stopped (Ctrl-Z, SIGSTOP) or hung made every later ``memdir chat``, hook and
    flush wait for ever, without a word; now it names the holder and what to do."""
    if not flock_within(fd, SESSION_LOCK_WAIT):
        raise LockTimeout(f"cannot write the sessions store: {path} has been locked for {SESSION_LOCK_WAIT:g} s: "
                          f"{busy_holder(fd)}; nothing was written (try again)")


def _unwritable(folder: Path, exc: OSError, blocking: Path | None = None) -> SessionStoreError | None:
    """The sessions folder cannot be written (a read-only state folder or mount, one made by
    ``sudo memdir chat``), said with the folder, its owner and the fix; ``None`` for other errors.
    Why: ``memdir chat`` failed with Python's bare "[Errno 13] Permission denied:
    '…/sessions.json.lock'"."""
    if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS):
        return None
    from memdir.stores.sqlite_health import folder_refused

    why = folder_refused(blocking or folder, os.W_OK | os.X_OK) or f"{exc.filename or folder}: {exc.strerror}"
    return SessionStoreError(f"cannot write the sessions store {folder}: {why}")


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    """Hold ``sessions.json.lock``: a regular file, never opened through a symlink.  A link planted
    at its name (a state folder restored from a backup, another user's ``/tmp`` folder) made the
    file it pointed to, outside the state folder; a directory there failed with a bare "[Errno 21]"."""
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(lock_path, flags, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP and os.path.islink(lock_path):
            raise SessionStoreError(f"cannot write the sessions store: {lock_path} is a symbolic link: memdir "
                                    "does not write through it; remove it") from None
        if exc.errno == errno.EISDIR:
            raise SessionStoreError(f"cannot write the sessions store: {lock_path} is a directory, not a regular "
                                    "file: remove it (memdir makes the file again)") from None
        raise _unwritable(lock_path.parent, exc) or exc from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise SessionStoreError(f"cannot write the sessions store: {lock_path} is {kind_of(mode)}, not a regular "
                                "file: remove it (memdir makes the file again)")
    try:
        _lock_within(fd, lock_path)
        yield
    finally:
        os.close(fd)


def _fsync_dir(folder: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class SessionStoreError(MemdirError):
    """``sessions.json`` exists but cannot be read as a JSON object of valid entries."""


@dataclass
class Rotation:
    """Result of ``/new`` or ``/reset``: the entry before, where its transcript went, the new one."""

    previous: SessionEntry | None
    rotated_file: Path | None
    current: SessionEntry


class SessionStore:
    """Transcripts and ``sessions.json`` for one agent's sessions directory."""

    def __init__(self, sessions_dir: str | os.PathLike[str]):
        self.dir = Path(sessions_dir)
        self.path = self.dir / SESSIONS_FILE
        self._lock_path = self.dir / (SESSIONS_FILE + ".lock")
        # Called with the transcript path after every append, e.g. ``SessionDeltaTracker.observe``
        # so the index's sessions source learns about growth without watching the folder.
        self.listeners: list[Callable[[Path], object]] = []

    @classmethod
    def from_settings(cls, settings: Any) -> SessionStore:
        return cls(settings.sessions_dir)

    # -- metadata ------------------------------------------------------------------------------
    def _read(self) -> dict[str, SessionEntry]:
        return self._read_all()[0]

    def _read_all(self) -> tuple[dict[str, SessionEntry], dict[str, Any]]:
        """``(entries, others)``: the session entries, and the values that are not one (no string
        ``sessionId``: another tool's bookkeeping, a half-made entry), kept to be written back."""
        try:
            raw = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return {}, {}
        except UnicodeDecodeError as exc:
            raise SessionStoreError(f"{self.path}: not UTF-8 text ({exc})") from exc
        try:
            data = json.loads(raw) if raw.strip() else {}
        except ValueError as exc:
            raise SessionStoreError(f"{self.path}: not valid JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise SessionStoreError(f"{self.path}: expected a JSON object")
        out: dict[str, SessionEntry] = {}
        others: dict[str, Any] = {}
        for key, value in data.items():
            if isinstance(value, dict) and isinstance(value.get("sessionId"), str):
                try:
                    out[key] = SessionEntry.model_validate(value)
                except ValueError as exc:  # pydantic's ValidationError; refused, so never rewritten without it
                    first = str(exc).splitlines()[1:3]
                    raise SessionStoreError(f"{self.path}: entry {key!r} is invalid: {' '.join(first)}") from exc
            else:
                others[key] = value
        return out, others

    def _write(self, entries: Mapping[str, SessionEntry], others: Mapping[str, Any] | None = None) -> None:
        """Write ``entries``, and ``others`` (values that are no session entry) under the keys
        ``entries`` does not hold: rewriting only what memdir understood deleted the rest."""
        data: dict[str, Any] = {}
        for k, v in (others or {}).items():  # (in the file's order, memdir's own entries after them)
            if k not in entries:
                data[k] = v
        data.update((k, v.to_json()) for k, v in entries.items())
        payload = json.dumps(data, indent=2, ensure_ascii=False)
        replace_file(self.path, (payload + "\n").encode("utf-8"), prefix=SESSIONS_FILE + ".tmp-")
        _fsync_dir(self.dir)

    def load(self) -> dict[str, SessionEntry]:
        """All entries; a consistent snapshot (the file is only ever replaced whole)."""
        return self._read()

    def get(self, key: str) -> SessionEntry | None:
        return self._read().get(key)

    def mutate(self, fn: Callable[[dict[str, SessionEntry]], T]) -> T:
        """Locked read-modify-write of the whole mapping; ``fn`` edits it in place."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True, mode=0o700)  # private, as the transcripts in it
        except OSError as exc:
            nearest = next((p for p in (self.dir, *self.dir.parents) if os.path.exists(p)), self.dir)
            raise _unwritable(self.dir, exc, nearest) or exc from None
        with _locked(self._lock_path):
            entries, others = self._read_all()
            result = fn(entries)
            self._write(entries, others)
            return result

    def update(self, key: str, **fields: Any) -> SessionEntry:
        """Set fields (snake_case names) on an existing entry and bump ``updatedAt``."""

        def apply(entries: dict[str, SessionEntry]) -> SessionEntry:
            if key not in entries:
                raise KeyError(f"no session entry for {key!r}")
            data = entries[key].model_dump()
            data.update(fields)
            data["updated_at"] = now_ms()
            entries[key] = SessionEntry.model_validate(data)
            return entries[key]

        return self.mutate(apply)

    # -- sessions ------------------------------------------------------------------------------
    def _new_entry(self, key: str, previous: SessionEntry | None, model: str | None) -> SessionEntry:
        session_id = str(uuid.uuid4())
        return SessionEntry(
            session_id=session_id,
            session_file=str(self.dir / f"{session_id}.jsonl"),
            updated_at=now_ms(),
            compaction_count=0,
            chat_type=chat_type_from_session_key(key),
            model=model or (previous.model if previous else None),
            model_provider=previous.model_provider if previous else None,
            context_tokens=previous.context_tokens if previous else None,
        )

    def open_session(self, key: str, *, model: str | None = None) -> SessionEntry:
        """The entry for ``key``, created (with an empty transcript) if it does not exist yet."""

        def apply(entries: dict[str, SessionEntry]) -> SessionEntry:
            entry = entries.get(key)
            if entry is not None and not self._names_a_file(entry):
                # a sessionId no transcript can be named after: started afresh, or the chat could never
                # start again to reach /new (the entry is kept in the log, not silently)
                log.warning("session %s: id %r cannot name a transcript; starting a new session", key,
                            entry.session_id)
                entry = entries[key] = self._new_entry(key, entry, model)
            if entry is None:
                entry = entries[key] = self._new_entry(key, None, model)
            return entry

        entry = self.mutate(apply)
        path = self.transcript_path(entry)
        if not path.exists():
            self.append_file(path, {"type": "session", "version": 1, "id": entry.session_id,
                                 "timestamp": now_ms(), "sessionKey": key})
        return entry

    def _names_a_file(self, entry: SessionEntry) -> bool:
        try:
            self.transcript_path(entry)
        except SessionStoreError:
            return False
        return True

    def transcript_path(self, entry: SessionEntry) -> Path:
        """The entry's transcript, always directly in this sessions folder.

        ``sessionFile`` is read from ``sessions.json`` (untrusted, and stale after the state folder
        moved): only its file name is used, and only if it names a transcript; else
        ``<sessionId>.jsonl``.  Taken as given, a ``sessionFile`` of ``~/notes.txt`` had every chat
        turn appended to that file and ``/new`` rename it away, and a ``sessionId`` of ``../x``
        wrote ``x.jsonl`` outside the folder.
        """
        if entry.session_file:
            name = Path(entry.session_file).name
            if "\x00" not in name and is_transcript_name(name):
                return self.dir / name
        name = f"{entry.session_id}.jsonl"
        if "/" in name or "\\" in name or "\x00" in name or not is_transcript_name(name):
            raise SessionStoreError(f"{self.path}: session id {entry.session_id!r} cannot name a transcript "
                                    f"file (it holds a path separator or a NUL byte)")
        return self.dir / name

    def append(self, key: str, record: Mapping[str, Any]) -> None:
        entry = self.get(key)
        if entry is None:
            entry = self.open_session(key)
        self.append_file(self.transcript_path(entry), record)

    def append_file(self, path: Path, record: Mapping[str, Any]) -> None:
        """Append to a known transcript and tell the listeners (their errors are only logged)."""
        append_record(path, record)
        for listener in self.listeners:
            try:
                listener(path)
            except Exception as exc:
                log.warning("session append listener failed for %s: %s", path, exc)

    def rotate(self, key: str, *, when: datetime | None = None, model: str | None = None) -> Rotation:
        """``/new`` and ``/reset``: move the live transcript aside and start a fresh session.

        The live file is renamed to ``<file>.reset.<ts>`` (never deleted), the entry gets a new
        sessionId and transcript, and the flush/compaction counters start over.
        """
        suffix = reset_suffix(when)

        def apply(entries: dict[str, SessionEntry]) -> Rotation:
            previous = entries.get(key)
            rotated: Path | None = None
            live: Path | None = None
            if previous is not None:
                try:
                    live = self.transcript_path(previous)
                except SessionStoreError:  # an id naming no file here: nothing to set aside, start afresh
                    live = None
                else:  # the hook reads the file that was rotated, not one sessionFile names elsewhere
                    previous = previous.model_copy(update={"session_file": str(live)})
            if live is not None and live.is_file() and RESET_MARKER not in live.name:
                rotated = live.with_name(live.name + suffix)
                os.rename(live, rotated)
            current = entries[key] = self._new_entry(key, previous, model)
            return Rotation(previous=previous, rotated_file=rotated, current=current)

        result = self.mutate(apply)
        _fsync_dir(self.dir)
        self.append_file(self.transcript_path(result.current),
                         {"type": "session", "version": 1, "id": result.current.session_id,
                          "timestamp": now_ms(), "sessionKey": key})
        return result
