"""One writer per SQLite index: an advisory ``flock`` on ``<index>.lock``.

The kernel drops an ``flock`` when its holder dies, so a crashed or killed writer never leaves
a stale lock behind (the recovery is automatic); the file keeps the holder's pid and start time
only so ``status`` can say who is writing.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import socket
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from memdir.errors import MemdirError

# flock is per open file description, not per thread: two threads of one process must also
# exclude each other, so each index path gets a process-wide thread lock taken first.
_THREAD_LOCKS: dict[str, threading.Lock] = {}
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_THREAD_LOCKS_GUARD = threading.Lock()


def _thread_lock(path: Path) -> threading.Lock:
    with _THREAD_LOCKS_GUARD:
        return _THREAD_LOCKS.setdefault(str(path), threading.Lock())


def _forget_thread_locks() -> None:
    """In a forked child: the parent's thread locks may have been held by threads that do not
    exist here (a watcher's sync), and would never be released; the child starts with its own."""
    global _THREAD_LOCKS_GUARD, _abandoned, _abandoned_guard
    _THREAD_LOCKS_GUARD = threading.Lock()
    _THREAD_LOCKS.clear()
    _abandoned, _abandoned_guard = 0, threading.Lock()  # (their threads are not in the child)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_thread_locks)


def thread_wait(timeout: float | None) -> float:
    """``timeout`` as :meth:`threading.Lock.acquire` takes it: ``-1`` (forever) for ``None``, else
    0 to :data:`threading.TIMEOUT_MAX` (``lock_timeout=math.inf``, "wait as long as it takes", raised
    OverflowError "timestamp out of range"); NaN is a :class:`ValueError` (its deadline was never
    reached: the wait for a held lock never ended)."""
    if timeout is None:
        return -1
    if math.isnan(timeout):
        raise ValueError("a lock timeout must be a number of seconds or None, not NaN")
    return min(max(0.0, timeout), threading.TIMEOUT_MAX)


class LockTimeout(MemdirError, TimeoutError):
    """Another process holds the index's writer lock (a :class:`MemdirError`, and a TimeoutError as
    before: ``sync(lock_timeout=...)`` raised it past a host's ``except MemdirError``)."""


class WriterStopped(LockTimeout):
    """The holder of the lock waited for is stopped (Ctrl-Z, SIGSTOP): the message says how to resume it."""


class WriterLockLost(LockTimeout):
    """The lock file was deleted or replaced while held, and another process took the new one:
    the sync stops before its next write (what it committed stays)."""


def is_stopped(pid: object) -> bool:
    """Whether process ``pid`` of this host is stopped (Ctrl-Z, SIGSTOP, a debugger): a writer
    stopped while it holds the lock never releases it until it is resumed.  ``False`` when that
    cannot be told (no such process, no ``/proc``)."""
    if not isinstance(pid, int) or pid <= 0:
        return False
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            raw = fh.read()
    except OSError:
        return False
    # "pid (comm) S ...": the name may hold spaces and parentheses, the state follows the last ")"
    state = raw[raw.rfind(b")") + 2:raw.rfind(b")") + 3]
    return state in (b"T", b"t")


_pid_space: str | None = None
_boot_id: str | None = None


def boot_id() -> str:
    """The running kernel's boot id (the host name where there is none to read): the same for
    every container of one machine, another on another machine or after a reboot."""
    global _boot_id
    if _boot_id is None:
        try:
            with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as fh:
                _boot_id = fh.read().strip()
        except OSError:
            _boot_id = socket.gethostname()
    return _boot_id


def pid_space() -> str:
    """Where this process's pid names it: the kernel's boot id and this pid namespace.

    Why: a lock's holder is known by its pid, and a container sharing the state folder has pids of
    its own: memdir as each container's pid 1 took another container's writer for itself ("a sync
    of this process was writing the index", no word while it waited), and a stopped process of
    this container with the holder's pid number for the holder."""
    global _pid_space
    if _pid_space is None:
        import zlib

        try:
            ns = os.readlink("/proc/self/ns/pid")
        except OSError:
            ns = ""
        # (8 hex digits: short enough for a PostgreSQL writer's application name)
        _pid_space = f"{zlib.crc32(f'{boot_id()}/{ns}'.encode()):08x}"
    return _pid_space


def pid_here(holder: dict[str, Any]) -> bool:
    """Whether ``holder``'s pid names a process this one can see (this machine, this pid
    namespace); one that does not say (an older memdir's lock) is taken to be of this host's."""
    space = holder.get("pids")
    if isinstance(space, str) and space:
        return space == pid_space()
    host = holder.get("host")
    return not host or host == socket.gethostname()


def is_this_process(holder: dict[str, Any] | None) -> bool:
    """Whether ``holder`` is this very process (a thread of it holds the lock), not another with
    the same pid number in another container."""
    return bool(holder) and holder.get("pid") == os.getpid() and pid_here(holder)  # type: ignore[union-attr]


def stamped_pid(holder: dict[str, Any]) -> object:
    """The pid ``holder`` wrote for itself (what its progress file names), where :meth:`FileWriterLock.holder`
    gave the pid this namespace knows it by."""
    return holder.get("stampedPid", holder.get("pid"))


def pid_words(holder: dict[str, Any]) -> str:
    """``pid 123``, ``pid 123 on host h`` or ``pid 1 in another container or pid namespace``."""
    pid, host = holder.get("pid"), holder.get("host")
    if pid_here(holder):  # (a pid `ps` and `kill` here know, whatever host name its container has)
        return f"pid {pid}"
    if host and host != socket.gethostname():
        return f"pid {pid} on host {host}"
    return f"pid {pid} in another container or pid namespace"


def resume_advice(pid: object) -> str:
    """What to do about a writer :func:`is_stopped` says is stopped."""
    return f"resume it with `kill -CONT {pid}` (or `fg` in its terminal) or end it"


#: Waits given up on that may still be queued in the kernel: each keeps a thread and a descriptor
#: until the lock's holder lets go.  Past this many, a wait polls instead of queueing: a holder
#: stopped for hours (Ctrl-Z, SIGSTOP) otherwise left one of each per ``memory_append`` a
#: long-lived server was asked for, until it ran out of descriptors.
MAX_ABANDONED_WAITS = 8
_abandoned = 0
_abandoned_guard = threading.Lock()


def flock_within(fd: int, seconds: float) -> bool:
    """Take ``fd``'s exclusive ``flock``, waiting at most ``seconds``; ``False`` when the time is up.

    Why not block: a holder stopped (Ctrl-Z, SIGSTOP) or hung made every later writer wait for
    ever, without a word.  Why not poll: a waiter that sleeps between tries loses the lock to a
    busy writer every time; the wait stays in the kernel's queue, in a helper thread on a
    duplicate of ``fd`` (same open file, so the same lock), and is abandoned after the time is
    up (a lock it takes later is let go as its descriptor closes).  With
    :data:`MAX_ABANDONED_WAITS` of them still queued, this wait polls.
    """
    global _abandoned
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except BlockingIOError:
        pass
    with _abandoned_guard:
        queue = _abandoned < MAX_ABANDONED_WAITS
    if not queue:
        return _poll_flock(fd, seconds)
    dup = os.dup(fd)
    done, failed, given_up = threading.Event(), [], []

    def wait() -> None:
        global _abandoned
        try:
            fcntl.flock(dup, fcntl.LOCK_EX)
        except OSError as exc:
            failed.append(exc)
        finally:
            os.close(dup)
            with _abandoned_guard:
                done.set()
                if given_up:
                    _abandoned -= 1

    threading.Thread(target=wait, name="memdir-flock-wait", daemon=True).start()
    if not done.wait(seconds):
        with _abandoned_guard:
            if not done.is_set():
                given_up.append(True)
                _abandoned += 1
                return False
    if failed:
        raise failed[0]
    return True


def _poll_flock(fd: int, seconds: float) -> bool:
    """:func:`flock_within` by trying again every few milliseconds (no thread, no descriptor)."""
    deadline = time.monotonic() + seconds
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(0.01)


def flock_holder(fd: int) -> int | None:
    """The pid holding an ``flock`` on ``fd``'s file, from ``/proc/locks``; ``None`` when that
    cannot be told (no ``/proc``, a holder in another pid namespace, released meanwhile)."""
    try:
        st = os.fstat(fd)
        key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
        with open("/proc/locks", encoding="ascii", errors="replace") as fh:
            for line in fh:
                # "1: FLOCK  ADVISORY  WRITE 1234 fe:00:2203701 0 EOF" (a waiter's line has "->")
                parts = line.split()
                if len(parts) >= 6 and parts[1] == "FLOCK" and parts[5] == key and parts[4].isdigit():
                    return int(parts[4]) or None
    except (OSError, ValueError):
        pass
    return None


def busy_holder(fd: int) -> str:
    """Who keeps ``fd``'s file locked, and what to do about it, for an error message."""
    pid = flock_holder(fd)
    if pid is None:
        return "another process holds its lock (is it stopped, with Ctrl-Z or SIGSTOP, or hung?)"
    if is_stopped(pid):
        return f"pid {pid} holds its lock but is stopped (Ctrl-Z or SIGSTOP): {resume_advice(pid)}"
    return f"pid {pid} holds its lock (is it hung? end it if it does not finish)"


def writer_words(holder: dict[str, Any] | None) -> str:
    """Who holds a writer lock, for messages: ``another memdir process (pid 123)`` (``on host h``
    for another host's).  A lock that does not say who (a holder killed between taking and
    stamping it, a database lock taken by a client other than memdir) is named as such rather
    than as "pid ?"."""
    holder = holder or {}
    if holder.get("pid") not in (None, ""):
        return f"another memdir process ({pid_words(holder)})"
    if holder.get("backendPid"):
        return f"a PostgreSQL client that is not memdir (server backend pid {holder['backendPid']})"
    return "another process (the lock does not say which)"


def _give_to_folder_owner(fd: int, folder: Path) -> None:
    """Run as root in another user's state folder (``sudo memdir index``): the lock file goes to
    that user, as SQLite does with the ``-wal`` and ``-shm``; a root-owned one made every later
    run as the user fail ("Permission denied: …lock")."""
    try:
        owner, mine = os.stat(folder), os.fstat(fd)
        if owner.st_uid != 0 and mine.st_uid == 0:
            os.fchown(fd, owner.st_uid, owner.st_gid)
    except OSError:
        pass


def _is_file_at(fd: int, path: Path) -> bool:
    """Whether ``fd`` is the file ``path`` names now (not one deleted or replaced since it was opened)."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return False
    held = os.fstat(fd)
    return (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino)


#: Seconds between looks at whether a writer waiting for the lock should give up (``between``).
LOCK_WAIT_SLICE = 0.25
#: How long a writer waits for one that is stopped (Ctrl-Z, SIGSTOP) before it gives up and says
#: so: a stopped process never releases the lock, and `memdir index` used to wait for it for ever.
STOPPED_WRITER_WAIT = 10.0


class _Lock(Protocol):
    def acquire(self, timeout: float | None = None) -> bool: ...
    def held_here(self) -> bool: ...
    def holder(self) -> dict[str, Any] | None: ...


def holder_of(lock: _Lock) -> dict[str, Any]:
    """``lock.holder()``, ``{}`` when nobody or it cannot be told."""
    try:
        return lock.holder() or {}
    except Exception:  # (a database lock's holder is a query; the wait goes on without it)
        return {}


def writing_words(lock: _Lock, location: str) -> str:
    """``another process is writing <location>``, for a writer lock not taken in time, or, when the
    writer is in this process, that.  Why: a host with two ``Memory`` objects open on one index (a
    server opening one a request) was told "another process is writing", and looked for one."""
    if lock.held_here():
        return (f"another sync in this process is writing {location} (another thread's, a watcher's, or that of "
                "another Memory open on the same index)")
    return f"another process is writing {location}"


def wait_for_writer(lock: _Lock, timeout: float | None, location: str, *,
                    between: Callable[[], None] | None = None) -> None:
    """Take ``lock``, waiting up to ``timeout`` seconds (``None``: as long as its holder runs), in
    slices with ``between()`` after each (it may raise to stop waiting).  Raises
    :class:`LockTimeout` when the time is up, or when the holder has been stopped for
    :data:`STOPPED_WRITER_WAIT` seconds, saying how to resume it."""
    deadline = None if timeout is None else time.monotonic() + timeout
    stopped_since: float | None = None
    look_at = time.monotonic()
    while True:
        left = LOCK_WAIT_SLICE if deadline is None else min(LOCK_WAIT_SLICE, deadline - time.monotonic())
        if lock.acquire(max(0.0, left)):
            return
        if between is not None:
            between()
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            raise LockTimeout(writing_words(lock, location))
        if now >= look_at and not lock.held_here():  # (about once a second)
            look_at = now + 1.0
            holder = holder_of(lock)
            stopped_since = (now if stopped_since is None else stopped_since) if holder.get("stopped") else None
            if stopped_since is not None and now - stopped_since >= STOPPED_WRITER_WAIT:
                raise WriterStopped(f"pid {holder['pid']} holds the writer lock of {location} but is stopped (Ctrl-Z "
                                  f"or SIGSTOP), so it cannot finish: {resume_advice(holder['pid'])}, then try again")


class FileWriterLock:
    def __init__(self, index_path: Path):
        self.path = Path(str(index_path) + ".lock")
        self._fd: int | None = None
        self._thread_lock: threading.Lock | None = None

    def acquire(self, timeout: float | None = None) -> bool:
        """Take the lock; wait up to ``timeout`` seconds (``None`` = forever, 0 = don't wait)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        thread_lock = _thread_lock(self.path)  # looked up each time: a forked child has its own
        if not thread_lock.acquire(timeout=thread_wait(timeout)):
            return False
        fd, taken = None, False
        try:
            while True:
                if fd is None:
                    fd = self._open()
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    if deadline is not None and time.monotonic() >= deadline:
                        return False
                    time.sleep(0.05)
                    continue
                except OSError as exc:  # (a bare "[Errno 37] No locks available" named nothing)
                    raise OSError(f"cannot lock {self.path}: {exc.strerror or exc} (does its file system support "
                                  "file locks? an NFS mount without a lock service does not; keep the state folder "
                                  "on a local disk: --state-dir or MEMDIR_STATE_DIR)") from exc
                if _is_file_at(fd, self.path):
                    break
                # The file was deleted or replaced since it was opened: a lock on it excludes nobody
                # (the next writer opens the file at the path), so the one at the path is taken.
                os.close(fd)
                fd = None
                if deadline is not None and time.monotonic() >= deadline:
                    return False
            self._stamp(fd)
            self._fd, self._thread_lock, taken = fd, thread_lock, True
            return True
        finally:
            # Not taken (timed out, failed, or a Ctrl-C in the wait above): give everything back;
            # a thread lock left held would make every later sync of this process wait forever.
            if not taken:
                if fd is not None:
                    os.close(fd)  # (drops the flock too)
                thread_lock.release()

    def still_held(self) -> bool:
        """Whether this holder still excludes other writers; checked before each write.

        Why: a lock file deleted or replaced while held (``rm -rf`` of the state folder, a cleanup
        script, a sync tool restoring it) leaves this lock on a file without a name, and the next
        writer takes the new file's at once.  When the file at the path is not ours, its lock is
        taken now without waiting; ``False`` when another process already holds it.
        """
        fd = self._fd
        if fd is None:
            return False
        new = None
        try:
            if _is_file_at(fd, self.path):
                return True
            new = self._open()
            fcntl.flock(new, fcntl.LOCK_EX | fcntl.LOCK_NB)
            if not _is_file_at(new, self.path):  # replaced again meanwhile: nothing sure to hold
                return False
            self._stamp(new)
            self._fd, new = new, None
        except OSError:  # (BlockingIOError: another writer has it; or the folder is gone or unusable)
            return False
        finally:
            if new is not None:
                os.close(new)
        os.close(fd)
        return True

    def _open(self) -> int:
        """The lock file, never through a symlink: taking the lock empties the file, and a link
        planted at its name (an index path in a cloned repository's config) emptied its target."""
        self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # the index's folder: private
        flags = os.O_RDWR | os.O_CREAT | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0) | _NOFOLLOW
        try:
            fd = os.open(self.path, flags, 0o644)
        except OSError as exc:
            if exc.errno == errno.ELOOP and os.path.islink(self.path):
                raise OSError(f"the writer lock {self.path} is a symbolic link: memdir does not write through it; "
                              "remove it") from exc
            if exc.errno == errno.EISDIR:  # (said "[Errno 21] Is a directory" and nothing of what to do)
                raise OSError(f"the writer lock {self.path} is a directory, not a regular file: remove it "
                              "(memdir makes the file again)") from exc
            raise
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            os.close(fd)
            from memdir.reading import kind_of

            raise OSError(f"the writer lock {self.path} is {kind_of(mode)}, not a regular file: remove it")
        if os.geteuid() == 0:
            _give_to_folder_owner(fd, self.path.parent)
        return fd

    @staticmethod
    def _stamp(fd: int) -> None:
        """Say who holds the lock (for ``status``); only a courtesy: on a full disk the lock is held
        without it (the failed write made every sync fail with a bare "No space left on device")."""
        try:
            os.ftruncate(fd, 0)
            who = {"pid": os.getpid(), "since": time.time(), "host": socket.gethostname(), "pids": pid_space()}
            os.pwrite(fd, json.dumps(who).encode(), 0)
        except OSError:
            pass

    def release(self) -> None:
        fd, thread_lock, self._fd, self._thread_lock = self._fd, self._thread_lock, None, None
        if fd is not None:
            try:
                os.ftruncate(fd, 0)
                fcntl.flock(fd, fcntl.LOCK_UN)
            finally:
                os.close(fd)
                if thread_lock is not None:
                    thread_lock.release()

    def held_here(self) -> bool:
        """Whether a thread of this process holds the lock (or is taking it)."""
        return _thread_lock(self.path).locked()

    def holder(self) -> dict[str, float] | None:
        """Who holds the lock right now, or ``None`` if nobody does."""
        try:  # (non-blocking: opening a FIFO planted at that name waited for a writer for ever)
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | _NOFOLLOW)
        except OSError:
            return None
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return None  # (never taken: see _open)
            try:
                fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
                fcntl.flock(fd, fcntl.LOCK_UN)
                return None
            except BlockingIOError:
                raw = os.read(fd, 4096)
                try:
                    who = json.loads(raw or b"{}")
                except ValueError:
                    return {}
                if not isinstance(who, dict):
                    return {}
                if not pid_here(who) and (seen := flock_holder(fd)):
                    # a container's writer seen from its host (or a parent pid namespace): the
                    # kernel names it by this namespace's pid, which `ps` and `kill` here know (the
                    # pid it wrote, "stampedPid", is the one its progress file names)
                    who.update(pid=seen, pids=pid_space(), stampedPid=who.get("pid"))
                if pid_here(who) and is_stopped(who.get("pid")):  # (not a stopped process of this
                    who["stopped"] = True  # container that has the number of another's writer)
                return who
        finally:
            os.close(fd)

    def __enter__(self) -> FileWriterLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
