"""Live sync (R§6, SPEC §4): watch the memory files and keep the index in step while running.

A :class:`Watcher` runs two threads beside a :class:`memdir.api.Memory`:

* the *watch* thread (``watchfiles``: inotify on Linux, FSEvents on macOS, one descriptor for
  the whole tree) listens to the workspace root, every folder under ``memory/`` and the extra
  paths, and the sessions folder when sessions are a source.  Folders are watched one by one,
  never recursively, so :data:`memdir.workspace.IGNORED_DIRS` (``.git``, ``node_modules``,
  ``.venv``, …) cost nothing however big they are (OpenClaw ran out of descriptors: R§18.9).
  When a folder appears or disappears the watch set is rebuilt and a sync rescans everything
  (a file written straight into a new folder can land before its watch exists); a root that
  is deleted is awaited through its nearest existing parent and picked up when it comes back.
  Each time the watches are (re)established the index is compared with the files once, so a
  change made while nothing was watching yet (just after :meth:`Watcher.start`, or while the
  watch set was being rebuilt) is not missed.  Where the OS's file events cannot serve (its
  watch limits reached, a name that is not UTF-8, which watchfiles cannot take) the folders are
  polled every :data:`POLL_DELAY_MS` instead, and the watcher says so once; they are polled too
  where watchfiles would poll by itself (WSL 2, ``WATCHFILES_FORCE_POLLING``), by memdir, which
  never follows a symlink (:meth:`Watcher._poll`).
* the *sync* thread runs ``memory.sync(reason="watch")`` ``watchDebounceMs`` after the last
  change (and at most 5 debounces after the first one, so a file appended every second is still
  indexed), every ``intervalMinutes``, and whenever :meth:`Watcher.sync_soon` asks.  A sync that
  fails (a full disk, a provider down, a damaged file being healed) is tried again on its own,
  :data:`RETRY_FIRST_SECONDS` later and twice as long each time up to :data:`RETRY_MAX_SECONDS`:
  without that, an edit made while the disk was full stayed unindexed until the next edit.
  :meth:`Watcher.stop` ends a sync under way before its next file (:func:`stop_requested`).

Nothing here writes to the workspace; failures are reported as events and never stop watching.
"""

from __future__ import annotations

import math
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from memdir.errors import MemdirError, MemoryClosed
from memdir.workspace import (
    MEMORY_DIR,
    ROOT_FILES,
    display_path,
    evicted_note,
    fs_name,
    is_ignored_below,
    is_ignored_dir,
    is_transcript_name,
    listed_memory_dir,
    text_name,
    valid_name,
)

Event = dict[str, Any]

_CHANGE_NAMES = {1: "added", 2: "modified", 3: "deleted"}
#: Seconds before a failed sync is tried again (doubled after each failure in a row, up to the max).
RETRY_FIRST_SECONDS = 2.0
RETRY_MAX_SECONDS = 60.0
#: The interval sync's shortest and longest period.
MIN_INTERVAL_SECONDS = 1.0
MAX_INTERVAL_SECONDS = 7 * 86400.0
#: How often the folders are scanned for changes when the OS refuses file watches (milliseconds).
POLL_DELAY_MS = 1000
#: The share of one CPU polling may take: where a scan costs more than this share of
#: :data:`POLL_DELAY_MS` (5,000 notes: ~40 ms a scan, 4% of a CPU for as long as the watcher ran,
#: on WSL 2 by default) the folders are scanned less often (there: every ~4 s; a search still
#: syncs first), at most every :data:`POLL_MAX_SECONDS`.
POLL_CPU_SHARE = 0.01
POLL_MAX_SECONDS = 30.0
#: How often watchfiles' loop looks for the changes its inotify thread gathered, and at the stop
#: event (milliseconds): it sleeps this long between looks, whether or not anything changed.  At
#: 30 ms an idle watcher woke 33 times a second (a laptop's CPU kept out of its deep sleep states
#: for days by ``memdir mcp``); at 250 a change reaches the debounce at most half a second later,
#: which ``watchDebounceMs`` (1500 ms) dwarfs, and :meth:`Watcher.stop` waits at most this long.
WATCH_STEP_MS = 250

#: In a watcher's sync thread, ``event`` is that watcher's stop event (see :func:`stop_requested`).
_sync_thread = threading.local()


def stop_requested() -> bool:
    """Whether this thread is a watcher's sync thread and its watcher is being stopped.

    Why: the sync it runs then ends before its next file (what it committed stays; a rebuild
    leaves the index as it was).  Without it, stopping during a first build with a model (Ctrl-C
    on ``memdir watch``) waited the full join timeout and left the sync running behind it."""
    stop = getattr(_sync_thread, "event", None)
    return stop is not None and stop.is_set()


def _is_dir(path: str) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def _existing_ancestor(path: Path) -> Path:
    probe = path
    while not _is_dir(str(probe)) and probe != probe.parent:
        probe = probe.parent
    return probe


def folders_under(root: str) -> list[str]:
    """``root`` and every folder below it, iteratively, skipping symlinks and ignored folders."""
    out, stack = [], [root]
    while stack:
        folder = stack.pop()
        out.append(folder)
        name = os.path.basename(folder)
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False) and not is_ignored_dir(entry.name, name):
                            stack.append(entry.path)
                    except OSError:
                        continue
        except OSError:
            continue
    return out


#: ``MEMORY.md`` and ``memory.md`` in lower case.
_ROOT_NAMES = frozenset(name.lower() for name in ROOT_FILES)


def _case_named(path: str, anchor: str) -> bool:
    """Whether ``path`` is ``anchor`` spelt in another case, in the same folder: on a folder that
    ignores case (exFAT, FAT, an SMB share) the OS names a change by the name the file has there,
    so an edit of ``Memory.md``, which is indexed as ``MEMORY.md``, or a ``Memory/`` folder made
    there, were not the workspace's memory to the watcher and waited for the next search."""
    return path != anchor and path.lower() == anchor.lower() and os.path.dirname(path) == os.path.dirname(anchor)


class WatchPlan:
    """Which folders to watch for one workspace, and which changed paths matter."""

    def __init__(self, workspace: Path, extra_paths: list[Path], sessions_dir: Path | None):
        self.workspace = str(workspace)
        self.memory_dir = str(workspace / MEMORY_DIR)
        self.extra_dirs = [str(p) for p in extra_paths if p.suffix != ".md"]
        self.extra_files = {str(p) for p in extra_paths if p.suffix == ".md"}
        self.sessions_dir = str(sessions_dir) if sessions_dir else None
        #: Paths whose appearance or disappearance changes what is watched.
        self.anchors = {self.workspace, self.memory_dir, *self.extra_dirs,
                        *(str(Path(p).parent) for p in self.extra_files)}
        if self.sessions_dir:
            self.anchors.add(self.sessions_dir)
        self.trees = [self.memory_dir, *self.extra_dirs]

    def folders(self) -> list[str]:
        """Every folder to watch right now (missing roots: their nearest existing parent), except
        those this process may not read (the OS refuses to watch them; one made readable again is
        seen through its parent's watch) and those whose name is not UTF-8 (watchfiles cannot
        take it, and failed the whole watch set every second; their notes cannot be indexed)."""
        found: set[str] = set()
        # watched by the name the workspace lists (Memory/ where case is ignored): through FUSE
        # (exFAT, FAT) each name is a node of its own, and the watch of memory/ saw no edit made
        # in Memory/, the name every editor and file manager uses there
        listed = str(listed_memory_dir(Path(self.workspace)))
        self.trees = [listed, *self.extra_dirs]
        for anchor in {*self.anchors, listed}:
            if _is_dir(anchor):
                found.add(anchor)
            else:
                found.add(str(_existing_ancestor(Path(anchor))))
        for tree in self.trees:
            if _is_dir(tree):
                found.update(folders_under(tree))
        return sorted(f for f in found if valid_name(f) and os.access(f, os.R_OK))

    def _under(self, path: str, root: str) -> str | None:
        if path == root or not path.startswith(root + os.sep):
            return None
        return path[len(root) + 1:]

    def _ignored(self, rel: str, tree: str) -> bool:
        return is_ignored_below(rel.split(os.sep)[:-1], os.path.basename(tree))

    def file_matters(self, path: str) -> bool:
        """A memory file, an extra file or a session transcript (whether or not it still exists)."""
        parent, name = os.path.split(path)
        evicted = evicted_note(name)  # a placeholder of a note (iCloud's, Nextcloud's): the note's own change
        if evicted is not None:
            name, path = evicted, os.path.join(parent, evicted)
        if path in self.extra_files:
            return True
        if parent == self.workspace and name.lower() in _ROOT_NAMES:  # any case: see _case_named
            return True
        for tree in self.trees:
            rel = self._under(path, tree)
            if rel is not None and name.endswith(".md") and not self._ignored(rel, tree):
                return True
        return bool(self.sessions_dir and parent == self.sessions_dir and is_transcript_name(name))

    def folder_matters(self, path: str, watched: set[str]) -> bool:
        """A watched folder went away, or a folder appeared that should be watched."""
        if path in watched:
            return True
        if path in self.anchors or any(a.startswith(path + os.sep) for a in self.anchors):
            return True
        if _case_named(path, self.memory_dir):
            return True
        if not _is_dir(path):
            return False
        for tree in self.trees:
            rel = self._under(path, tree)
            if rel is not None and not is_ignored_below(rel.split(os.sep), os.path.basename(tree)):
                return True
        return False

    def display_root(self) -> str:
        return display_path(self.workspace)

    def display(self, path: str) -> str:
        rel = Path(os.path.relpath(path, self.workspace)).as_posix()
        return text_name(rel) or rel


def _check_wait_argument(name: str, value: Any, unit: str, *, least: float | None = None) -> None:
    """A watcher's ``debounce_ms``/``interval_minutes`` checked as the config file and ``memdir watch
    --debounce-ms`` check them: ``debounce_ms=-5`` was taken as 0, ``math.inf`` raised OverflowError
    and an ``interval_minutes`` of NaN (a config error) turned the interval sync off, quietly."""
    if value is None:
        return
    if isinstance(value, bool) or not hasattr(type(value), "__float__"):
        raise TypeError(f"{name} must be a number of {unit}, not {type(value).__name__}")
    number = value if isinstance(value, int) else float(value)  # (an int of 400 digits: no float)
    if (isinstance(number, float) and math.isnan(number)) or (
            least is not None and (number < least or number == math.inf)):
        raise ValueError(f"{name} must be a finite number of {unit}, not {value}" if least is not None
                         else f"{name} must be a number of {unit}, not NaN")


class Watcher:
    """Keeps one ``Memory``'s index in step with its files until :meth:`stop`."""

    def __init__(self, memory: Any, *, debounce_ms: int | None = None, interval_minutes: float | None = None,
                 on_event: Callable[[Event], None] | None = None, sync_at_start: bool = False,
                 files: bool = True):
        settings = memory.settings
        cfg = settings.memory_search.sync
        _check_wait_argument("debounce_ms", debounce_ms, "milliseconds, 0 or more", least=0)
        _check_wait_argument("interval_minutes", interval_minutes, "minutes (0 or less: off)")
        self.memory = memory
        # a week at most, as the interval: a 400-digit --debounce-ms failed "integer division result too large"
        wait_ms = cfg.watch_debounce_ms if debounce_ms is None else debounce_ms
        self.debounce = int(min(max(0, wait_ms), MAX_INTERVAL_SECONDS * 1000)) / 1000
        minutes = cfg.interval_minutes if interval_minutes is None else interval_minutes
        # at most one interval sync a second: 1e-9 minutes asked for ~130 syncs a second
        seconds = min(minutes, MAX_INTERVAL_SECONDS / 60) * 60 if minutes and minutes > 0 else None  # NaN: off
        self.interval = None if seconds is None else min(max(MIN_INTERVAL_SECONDS, seconds), MAX_INTERVAL_SECONDS)
        self.max_wait = max(2.0, 5 * self.debounce)
        self.on_event = on_event
        #: False: no file watching, only the interval sync (``sync.watch`` off, ``intervalMinutes`` on).
        self.files = files
        sessions = settings.sessions_dir if "sessions" in settings.memory_search.sources else None
        self.plan = WatchPlan(settings.workspace_path, settings.extra_paths, sessions)
        self._stop = threading.Event()
        #: Set once the file watches are in place (the first time, and again after each rebuild).
        self.ready = threading.Event()
        self._cond = threading.Condition()
        self._due: float | None = time.monotonic() if sync_at_start else None
        self._first: float | None = self._due
        self._reason = "start" if sync_at_start else "watch"
        self._next_interval = time.monotonic() + self.interval if self.interval else None
        self._threads: list[threading.Thread] = []
        self._watched: set[str] = set()
        self.syncing = False
        self.last_sync: dict[str, Any] | None = None
        self.last_error: str | None = None
        self.syncs = 0
        #: Set once the OS's file events cannot serve (its watch limits, a name that is not UTF-8): polled.
        self.polling = False
        #: Syncs failed in a row (reset by one that succeeds); each is tried again later on its own.
        self.failures = 0

    # -- control -----------------------------------------------------------------------------
    def start(self) -> Watcher:
        loops = [(self._sync_loop, "memdir-watch-sync")]
        if self.files:
            try:
                import watchfiles  # noqa: F401  (fail here, clearly, rather than in the thread)
            except ImportError as exc:
                raise MemdirError(f"watching needs the watchfiles package ({exc}): pip install watchfiles") from None
            loops.insert(0, (self._watch_loop, "memdir-watch"))
        for target, name in loops:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        self._stop.set()
        with self._cond:
            self._cond.notify_all()
        for thread in self._threads:
            if thread is not threading.current_thread():
                thread.join(timeout)

    def wait(self, timeout: float | None = None) -> bool:
        """Block until :meth:`stop` (True) or ``timeout`` (False)."""
        return self._stop.wait(timeout)

    @property
    def stopped(self) -> bool:
        """Whether :meth:`stop` was called (reads a flag; takes no lock, so signal handlers may ask)."""
        return self._stop.is_set()

    @property
    def running(self) -> bool:
        return any(t.is_alive() for t in self._threads) and not self._stop.is_set()

    @property
    def pending(self) -> bool:
        return self._due is not None or self.syncing

    def sync_soon(self, reason: str = "watch", delay: float | None = None) -> None:
        """Mark the index dirty and sync after ``delay`` (default: the debounce)."""
        now = time.monotonic()
        with self._cond:
            if self._first is None:
                self._first = now
            due = now + (self.debounce if delay is None else delay)
            self._due = min(due, self._first + self.max_wait)
            self._reason = reason
            self._cond.notify_all()

    def state(self) -> dict[str, Any]:
        return {"active": self.running, "files": self.files, "ready": self.ready.is_set(), "pending": self.pending,
                "debounceMs": int(self.debounce * 1000), "intervalMinutes": (self.interval or 0) / 60,
                "watchedFolders": len(self._watched), "syncs": self.syncs, "lastSync": self.last_sync,
                "lastError": self.last_error, "failures": self.failures, "polling": self.polling}

    def _emit(self, event: Event) -> None:
        if self.on_event is not None:
            try:
                self.on_event({"time": round(time.time(), 3), **event})
            except Exception:
                pass

    # -- watching ----------------------------------------------------------------------------
    def _watch_loop(self) -> None:
        import watchfiles

        while not self._stop.is_set():
            folders = self.plan.folders()
            if not folders:
                self._compare_instead()
                continue
            self._watched = set(folders)
            self._emit({"event": "watching", "folders": len(folders)})
            if self.polling or _polling_asked():
                self._poll(folders)
                continue
            established = False
            try:
                # yield_on_timeout: the generator yields (maybe an empty set) once its watches
                # exist, which is when the catch-up comparison below can no longer miss a change.
                for changes in watchfiles.watch(*folders, watch_filter=None, recursive=False, debounce=200,
                                                step=WATCH_STEP_MS,
                                                stop_event=self._stop, raise_interrupt=False, rust_timeout=500,
                                                yield_on_timeout=True, force_polling=False):
                    if not established:
                        established = True
                        self._catch_up()
                        self.ready.set()
                    if changes and self._handle(changes):
                        break  # folders appeared or vanished: watch the new set
            except FileNotFoundError:
                time.sleep(0.1)  # a folder vanished between listing and watching: list again
            except Exception as exc:
                if not self.polling and _native_watching_fails(exc):
                    self.polling = True
                    reason = str(exc).splitlines()[0].split(" about [")[0]  # (watchfiles adds the paths)
                    self.last_error = (f"file watching unavailable ({reason}); checking the folders every "
                                       f"{POLL_DELAY_MS / 1000:g} s instead (less often on a large workspace)")
                    self._emit({"event": "error", "error": self.last_error})
                    continue
                self.last_error = f"watcher failed: {exc}"
                self._emit({"event": "error", "error": self.last_error})
                self._stop.wait(1.0)

    def _poll(self, folders: list[str]) -> None:
        """Look at ``folders`` every :data:`POLL_DELAY_MS` (less often where a look costs more than
        :data:`POLL_CPU_SHARE` of a CPU) and handle what changed, until the folders to watch change
        or the watcher stops.

        Why not watchfiles' own polling (which it also chooses by itself on WSL 2 and with
        ``WATCHFILES_FORCE_POLLING``): it follows symlinks.  An Emacs lock ``.#note.md`` (a link to
        nowhere) was reported deleted at every poll, a sync a second for as long as the note was
        open, and a symlink loop in a watched folder failed the whole watch every second: no edit
        was indexed by the watcher.  Here entries are looked at, never followed, as discovery does."""
        started = time.thread_time()
        previous = _listing(folders)
        cost = time.thread_time() - started
        self._catch_up()
        self.ready.set()
        while not self._stop.wait(min(max(POLL_DELAY_MS / 1000, cost / POLL_CPU_SHARE), POLL_MAX_SECONDS)):
            started = time.thread_time()
            current = _listing(folders)
            changes = _changes(previous, current)
            cost = time.thread_time() - started
            previous = current
            if changes and self._handle(changes):
                return

    def _compare_instead(self) -> None:
        """Nothing watchfiles can watch (a workspace whose path is not UTF-8, which it cannot take,
        or none of its folders readable): compare the index with the files every poll period
        instead, and say so once.  Before, such a watcher watched nothing without a word."""
        if not self.polling:
            self.polling = True
            why = "its path is not UTF-8" if not valid_name(self.plan.workspace) else "no folder of it is readable"
            self.last_error = (f"cannot watch {self.plan.display_root()} ({why}): comparing the index with the files "
                               f"every {POLL_DELAY_MS / 1000:g} s instead")
            self._emit({"event": "error", "error": self.last_error})
        started = time.thread_time()
        self._catch_up()
        cost = time.thread_time() - started
        self.ready.set()
        self._stop.wait(min(max(POLL_DELAY_MS / 1000, cost / POLL_CPU_SHARE), POLL_MAX_SECONDS))

    def _catch_up(self) -> None:
        """Sync soon if the files changed while nothing was watching them, or the settings since the
        index was built (a chunk size edited before ``memdir mcp`` started: the watcher's first
        sync rebuilds, not the first search)."""
        try:
            indexer = self.memory.indexer
            changed, gone = indexer.dirty_files()
            meta = None if changed or gone else self.memory.store.read_meta()
            rebuild = meta is not None and indexer.settings_rebuild_reason(meta) is not None
        except Exception as exc:  # the sync that follows a real change will report it
            self.last_error = f"could not compare the index with the files: {exc}"
            return
        if changed or gone or rebuild:
            self.sync_soon("watch")

    def _handle(self, changes: set[tuple[Any, str]]) -> bool:
        restart = False
        relevant = False
        for change, text in sorted(changes, key=lambda c: c[1]):
            path = fs_name(text)  # watchfiles gives UTF-8 text; with an ASCII file-system encoding, not the OS's name
            kind = _CHANGE_NAMES.get(int(change), "modified")
            if self.plan.folder_matters(path, self._watched):
                restart = True
                relevant = True
                self._emit({"event": "folder", "change": kind, "path": self.plan.display(path)})
            elif self.plan.file_matters(path):
                relevant = True
                self._emit({"event": "change", "change": kind, "path": self.plan.display(path)})
        if relevant:
            self.sync_soon("watch")
        return restart

    # -- syncing -----------------------------------------------------------------------------
    def _sync_loop(self) -> None:
        _sync_thread.event = self._stop
        while not self._stop.is_set():
            with self._cond:
                now = time.monotonic()
                reason = None
                if self._due is not None and now >= self._due:
                    reason, self._due, self._first = self._reason, None, None
                elif self._next_interval is not None and now >= self._next_interval:
                    reason = "interval"
                if reason is None:
                    wake = [t for t in (self._due, self._next_interval) if t is not None]
                    # capped: intervalMinutes = inf (or 1e308, or a huge debounce) was an OverflowError
                    # that ended this thread, and the watcher never synced again
                    self._cond.wait(min(max(0.01, min(wake) - now), threading.TIMEOUT_MAX) if wake else None)
                    continue
                if self.interval:
                    self._next_interval = now + self.interval
                self.syncing = True
            try:
                self._run_sync(reason)
            finally:
                self.syncing = False

    def _retry_later(self, delay: float) -> None:
        """Sync again ``delay`` seconds from now unless a change asks sooner."""
        now = time.monotonic()
        with self._cond:
            if self._due is None:
                self._first, self._due, self._reason = now, now + delay, "retry"
            self._cond.notify_all()

    def _run_sync(self, reason: str) -> None:
        try:
            report = self.memory.sync(reason=reason)
        except Exception as exc:
            if self._stop.is_set() or isinstance(exc, MemoryClosed):
                return  # cut short by stop() or close(): not a failure, and nothing to try again
            self.failures += 1
            # (the power capped first: 2 ** 1024 overflowed a float and ended this thread for good)
            delay = min(RETRY_MAX_SECONDS, RETRY_FIRST_SECONDS * 2 ** min(self.failures - 1, 32))
            self.last_error = f"sync failed ({reason}): {exc}"
            self._retry_later(delay)
            self._emit({"event": "error", "reason": reason, "error": str(exc), "retryInSeconds": delay})
            return
        self.syncs += 1
        self.failures = 0
        self.last_error = None
        self.last_sync = {"reason": reason, "at": int(time.time() * 1000), "indexed": report.indexed,
                          "removed": report.removed, "seconds": round(report.seconds, 3)}
        self._emit({"event": "sync", "reason": reason, "full": report.full, "indexed": report.indexed,
                    "removed": report.removed, "unchanged": report.unchanged, "chunks": report.chunks,
                    "skipped": report.skipped, "seconds": round(report.seconds, 3)})


def _polling_asked() -> bool:
    """Whether watchfiles would poll here by itself: ``WATCHFILES_FORCE_POLLING`` set (and not to
    false), or WSL 2, whose file events miss the changes made from Windows."""
    asked = os.getenv("WATCHFILES_FORCE_POLLING")
    if asked:
        return asked.lower() not in {"false", "disable", "disabled"}
    import platform

    uname = platform.uname()
    return "microsoft-standard" in uname.release.lower() and uname.system.lower() == "linux"


#: What a poll records of an entry: a folder's kind and inode (its times change with its
#: entries, which its own listing shows, as a file event would), a file's stat besides.
_Seen = tuple[int, ...]


def _listing(folders: list[str]) -> dict[str, _Seen]:
    """What :meth:`Watcher._poll` compares: every entry of ``folders``, stat'ed without following
    a symlink (a folder that cannot be listed has none: its parent's entry shows it going)."""
    seen: dict[str, _Seen] = {}
    for folder in folders:
        try:
            with os.scandir(folder) as it:
                for entry in it:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    seen[entry.path] = ((st.st_mode, st.st_ino) if stat.S_ISDIR(st.st_mode) else
                                        (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
        except OSError:
            continue
    return seen


def _changes(before: dict[str, _Seen], after: dict[str, _Seen]) -> set[tuple[int, str]]:
    """``(change, path)`` as watchfiles gives them (1 added, 2 modified, 3 deleted)."""
    changes = {(3, path) for path in before.keys() - after.keys()}
    for path, seen in after.items():
        was = before.get(path)
        if was != seen:
            changes.add((1 if was is None else 2, path))
    return changes


#: What watchfiles says when the OS's file events cannot serve (see :func:`_native_watching_fails`).
_NATIVE_FAILURES = ("watch limit", "Too many open files", "No space left on device", "decode path")


def _native_watching_fails(exc: Exception) -> bool:
    """Whether the OS's file events cannot serve here and polling would.

    * The OS refused the watches themselves (``fs.inotify.max_user_watches`` or
      ``max_user_instances`` reached).  watchfiles' ``ignore_permission_denied`` hid that: the
      folders past the limit went unwatched without a word.
    * A name that is not UTF-8 was touched (watchfiles: 'Unable to decode path'): it fails the
      whole batch of changes holding one, and inotify reports even a listing of such a folder
      (each sync's), so the watch failed again every second.  Polling reports changes only.

    Other errors (a folder that vanished while being watched) are passing: the watch is set up
    again."""
    return not isinstance(exc, PermissionError) and any(text in str(exc) for text in _NATIVE_FAILURES)


__all__ = ["WatchPlan", "Watcher", "folders_under", "stop_requested"]
