"""Keeping a ``Memory``'s index fresh and healthy while it is used (mixed into :class:`memdir.api.Memory`).

* Read-your-writes: a search first indexes what changed, within ``sync.searchBudgetMs``, and
  waits that long at most for a sync already running (a watcher's, another process's).
* A first full index never blocks a search for minutes: while one is being built (here, in
  another thread or in another process) a search answers at once from what is built so far,
  marked stale, saying how far along it is (``<index>.progress``).
* Healing: an operation that runs into a damaged index has it set aside and rebuilt from the
  Markdown files, then runs once more; a search that finds nothing in an index holding chunks
  checks the file first, so a damaged index never answers "no matches".
* Watching: :meth:`IndexUpkeep.watch` starts a :class:`memdir.watch.Watcher`.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from memdir.errors import IndexDamaged, IndexOwnershipError, holds_nothing, owned_by_other, ownership_message
from memdir.lock import LockTimeout, resume_advice
from memdir.stores.base import OWNER_FOLDER_STATE, OWNER_STATE, SKIPPED_STATE

if TYPE_CHECKING:
    from memdir.config import Settings
    from memdir.search import SearchResponse
    from memdir.stores import Store
    from memdir.sync import Indexer, SyncReport
    from memdir.watch import Watcher

T = TypeVar("T")

#: Full checks read every page (``PRAGMA quick_check``, ~300 MB/s here): ``status`` runs one on
#: indexes up to this size (any size with ``--deep``): under two seconds ...
STATUS_CHECK_MAX_BYTES = 512 * 1024 * 1024
#: ... and a search that found nothing in an index holding chunks, up to this size (~0.2 s).
SEARCH_CHECK_MAX_BYTES = 64 * 1024 * 1024


def writable_again(store: Store) -> bool:
    """Whether a store that went read-only on a full disk could be opened writable again."""
    retry = getattr(store, "retry_writable", None)
    return bool(retry is not None and retry())


class IndexUpkeep:
    """The freshness and healing half of ``Memory``; see the module docstring."""

    settings: Settings
    notice: Callable[[str], None]
    first_index_wait: float | None
    recoveries: list[dict[str, Any]]
    watcher: Any
    _store: Store | None
    _bootstrap: threading.Thread | None
    _bootstrap_error: BaseException | None
    _checked_ok: Any
    _text_checked: Any
    _init_lock: threading.RLock

    if TYPE_CHECKING:
        store: Store
        indexer: Indexer
        index_path: Path
        workspace: Path

        def sync(self, *, reason: str = "api", deadline: float | None = None,
                 lock_timeout: float | None = None) -> SyncReport: ...

        def _check_open(self) -> None: ...

    def _note_recovery(self, store: Store) -> None:
        info = getattr(store, "recovery", None)
        if info and (not self.recoveries or self.recoveries[-1] is not info):
            self.recoveries.append(info)

    def _healing(self, op: Callable[[], T]) -> T:
        """Run ``op``; if it hits a damaged index, set the index aside (rebuilt by the next sync)
        and run ``op`` once more."""
        try:
            return op()
        except Exception as exc:
            store = self._store
            if store is None or not store.is_damage(exc):
                raise
            problem = store.check() or str(exc)
            store.recover(problem, notice=self.notice)
            self._note_recovery(store)
            self._checked_ok = None
        return op()

    def _verify(self, store: Store, response: SearchResponse) -> None:
        """Never answer "no matches" from a damaged index: a search that failed inside the store,
        or found nothing in an index that has chunks, checks the file (at most once per file
        version) and raises the damage so :meth:`_healing` rebuilds."""
        damage = getattr(store, "damage", None)
        if damage:
            raise IndexDamaged(damage)
        if response.results or store.readonly:
            return
        version = store.change_token()
        if version is None:
            return
        if version == self._checked_ok or store.chunk_count() == 0:
            return
        problem = store.check(thorough=True, max_bytes=SEARCH_CHECK_MAX_BYTES)
        if problem:
            raise IndexDamaged(problem)
        self._checked_ok = version

    def _reread_textless(self, store: Store) -> bool:
        """After a search that found nothing: whether notes the index listed without their text
        were read again (search once more).  Why: an index restored in place under a running
        watcher (``cp -a backup/. ~/.memdir/``) kept the rows of 50 notes and none of their text,
        and every search for their words answered "No matches.", the index calling itself clean.
        Once per index version; a search of a writable SQLite index only."""
        textless = getattr(store, "textless_files", None)
        if textless is None or store.readonly:
            return False
        version = store.change_token()
        if version is None or version == self._text_checked:
            return False
        self._text_checked = version
        if not textless():
            return False
        budget = self.settings.memory_search.sync.search_budget_ms / 1000
        self.indexer.check_text = True
        try:
            report = self.sync(reason="search", deadline=time.monotonic() + budget, lock_timeout=budget)
        except LockTimeout:
            return False
        finally:
            self.indexer.check_text = False
        return report.indexed > 0

    def _flag_moved_lines(self, store: Store, response: SearchResponse, advice: str) -> None:
        """A search that did not index changed notes first (``sync=False``, ``--no-sync``, a sync cut
        short, a read-only index, a note the sync could not read again) cites lines as they were
        indexed: a note edited since may have moved them, and its results then pointed at other
        lines without a word.  Such results' notes are named (all of them: an agent must know which
        results to doubt), with ``advice``, and the response is ``stale`` (one ``stat`` per note a
        result comes from)."""
        from memdir.workspace import change_stamp, fs_name

        paths = list(dict.fromkeys(r.path for r in response.results if r.source == "memory"))
        if not paths:
            return
        try:
            rows = store.file_rows("memory", paths)
        except Exception:  # the results stand; the search says only that it may be stale
            response.stale = True
            return
        moved = []
        base = os.path.join(self.workspace, "")  # (joined once: this runs on every such search)
        for path in paths:
            row = rows.get((path, "memory"))
            try:
                # an indexed path is text: with an ASCII file-system encoding (LC_ALL=C PYTHONUTF8=0)
                # not the OS's name, and 'notes/été.md' failed the whole search with a codec error
                st = os.lstat(fs_name(path if os.path.isabs(path) else base + path))
            except OSError:
                st = None
            if row is None or st is None or row[1:] != (change_stamp(st), st.st_size):
                moved.append(path)
        if moved:
            response.stale = True
            response.warnings.append(
                f"{', '.join(moved)} changed since indexed: results from there may cite moved lines ({advice})")

    def _readonly_note(self) -> str:
        return (f"the index {self.store.location} could not be updated ({self.store.readonly_reason or 'read-only'}); "
                "searching what it already holds")

    def _sync_for_search(self) -> tuple[bool, list[str], Store | None]:
        """Read-your-writes: index changed files before searching.

        Returns ``(stale, notes, partial)``: ``stale`` when that was cut short, notes for the
        response, and while a first index is being built a read-only view of what it holds so far.
        """
        store = self.store
        self.indexer.follow_replaced_index()
        if store.readonly and not writable_again(store):
            # A read-only index (a read replica, a read-only state folder) is stale only when the
            # files have moved on since it was written: then say why it could not catch up.
            changed, gone = self.indexer.dirty_files(reuse=True)
            return (True, [self._readonly_note()], None) if changed or gone else (False, [], None)
        budget = self.settings.memory_search.sync.search_budget_ms / 1000
        meta = store.read_meta()
        if meta is None:
            return self._first_index()
        from memdir.index_identity import newer_version, newer_version_words

        newer = newer_version(meta, store)
        if newer is not None:  # (no sync of this memdir's may write it: not waited for, nor said as a rebuild)
            return True, [newer_version_words(store.location, newer)], None
        changed, gone = self.indexer.dirty_files(reuse=True)
        if not changed and not gone:
            listing = [s.as_dict() for s in self.indexer.listing_skipped]
            starved = _starved(listing)
            if starved:  # memory/ could not be listed: "no changes" was no answer
                return True, starved, None
            unreadable = _refused(listing)
            if unreadable:
                return False, unreadable, None
            why = self.indexer.settings_rebuild_reason(meta)
            if why is None:
                return False, [], None
            return self._rebuild_for_settings(why, budget, older=self.indexer.version_reason(meta, store) is not None)
        deadline = time.monotonic() + budget
        try:
            # Wait for a sync already running (the watcher's, another process's) within the budget.
            report = self.sync(reason="search", deadline=deadline, lock_timeout=budget)
        except LockTimeout:
            # a stopped holder is named as such (it waits for a resume); any other, as busy
            return True, self._stopped_writer() or [self._busy_note(budget, len(changed) + len(gone))], None
        starved = _starved(report.skipped)
        notes = starved + _refused(report.skipped)
        if report.incomplete:  # ("stale": true, and not a word of why)
            notes.insert(0, f"the sync before this search ran out of its time (sync.searchBudgetMs = "
                            f"{budget * 1000:g} ms) after indexing {report.indexed} of the changed files: the next "
                            "search, `memdir index` or the watcher indexes the rest")
        return report.incomplete or bool(starved), notes, None

    def _busy_note(self, budget: float, changed: int) -> str:
        """Why a search answered from the index as it was: another sync held the writer lock for
        longer than the search may wait ("stale": true said nothing of it)."""
        from memdir.lock import is_this_process, writer_words

        holder = self.indexer.lock.holder()
        who = ("a sync of this process (its watcher, or another thread)" if is_this_process(holder)
               else writer_words(holder))
        return (f"{changed} changed file(s) not indexed: {who} was writing the index for longer than a search waits "
                f"(sync.searchBudgetMs = {budget * 1000:g} ms); results come from the index as it was")

    def _stopped_writer(self) -> list[str]:
        """Why a search that gave up waiting for the writer lock is stale, when its holder is stopped
        (Ctrl-Z, SIGSTOP): the changed notes wait for it until it is resumed, where the bare "may be
        stale" read as a moment's lag and named nobody (``status`` alone said who)."""
        from memdir.lock import holder_of

        holder = holder_of(self.indexer.lock)
        if not holder.get("stopped"):
            return []
        return [f"pid {holder['pid']} is writing the index but is stopped (Ctrl-Z or SIGSTOP), so the changed files "
                f"wait for it: {resume_advice(holder['pid'])}"]

    def _rebuild_for_settings(self, why: str, budget: float, *, older: bool = False
                              ) -> tuple[bool, list[str], Store | None]:
        """The settings changed in a way the index must be rebuilt for (chunk size, tokenizer, ...)
        while no note did: rebuild before searching, as a sync would for an edited note, saying why
        when that takes more than a second; the old index serves other readers meanwhile.

        ``older``: an older memdir wrote the index, which no setting explains ("the settings
        changed (chunker changed (13 → 18))" sent a user upgraded under a running watcher to
        their config, while that watcher rebuilt the index back after every search)."""
        from memdir.index_identity import OLDER_STILL_RUNNING

        said = (f"the index {self.store.location} was written by an older memdir ({why}): rebuilding it before "
                f"searching; {OLDER_STILL_RUNNING}" if older else
                f"the settings changed ({why}): rebuilding the index {self.store.location} before searching")
        timer = threading.Timer(1.0, self.notice, args=(said,))
        timer.daemon = True
        timer.start()
        try:
            report = self.sync(reason="search", lock_timeout=budget)
        except LockTimeout:  # another sync is writing it (perhaps rebuilding it already)
            return True, [f"the index is to be rebuilt ({why}) and another sync is writing it now: "
                          "results come from the index as it was"], None
        finally:
            timer.cancel()
        return report.incomplete, [], None

    def _refused_by_build(self) -> list[str]:
        """:func:`_refused` for what the first build skipped (kept in the index's state)."""
        skipped = self.store.get_state(SKIPPED_STATE)
        return _refused([s for s in skipped if isinstance(s, dict)] if isinstance(skipped, list) else [])

    def _first_index(self) -> tuple[bool, list[str], Store | None]:
        """No index yet: build it (waiting ``first_index_wait``), or report a build in progress."""
        from memdir.lock import pid_words, stamped_pid
        from memdir.progress import describe_progress, read_progress

        lock = self.indexer.lock
        thread = self._bootstrap
        if thread is None or not thread.is_alive():
            if thread is not None and self._bootstrap_error is not None:
                error, self._bootstrap, self._bootstrap_error = self._bootstrap_error, None, None
                raise error
            # (a build that ended is no answer: still no index, so another writer is building it.
            # A forked child saw its parent's background build as ended, and answered at once
            # from the empty index: no results, not stale, no word of a build)
            thread = self._bootstrap = None
            if lock.acquire(0):
                lock.release()
                if self.first_index_wait is None:
                    self._build_first_index_now()
                    return False, self._refused_by_build(), None
                thread = self._bootstrap = threading.Thread(target=self._bootstrap_run, name="memdir-first-index",
                                                            daemon=True)
                thread.start()
        if thread is not None:
            thread.join(self.first_index_wait)
            if not thread.is_alive():
                self._bootstrap = None
                if self._bootstrap_error is not None:
                    error, self._bootstrap_error = self._bootstrap_error, None
                    raise error
                return False, self._refused_by_build(), None
        elif self.first_index_wait:
            # Another thread or process is building it: a long-running host gives it a moment.
            deadline = time.monotonic() + self.first_index_wait
            while time.monotonic() < deadline and lock.holder() is not None:
                time.sleep(0.05)
            if self.store.read_meta() is not None:
                return False, [], None
        # The builder claims the index for its workspace right after taking the lock: give it a
        # moment, so a search from another workspace is refused rather than told "being built".
        owner = None
        deadline = time.monotonic() + 2.0
        while owner is None and time.monotonic() < deadline and lock.holder() is not None:
            owner = self.store.get_state(OWNER_STATE) or (self.store.read_meta() or {}).get("workspace")
            if owner is None:
                time.sleep(0.02)
        if owned_by_other(owner, str(self.workspace), lambda: self.store.get_state(OWNER_FOLDER_STATE)):
            raise IndexOwnershipError(ownership_message(self.store.location, owner, str(self.workspace),
                                                        empty=holds_nothing(self.store)), owner)
        holder = lock.holder() or {}
        progress = read_progress(self.index_path) or {}
        if progress.get("pid") != stamped_pid(holder) or progress.get("workspace") != str(self.workspace):
            progress = {}
        progress = {**progress, "pid": holder.get("pid")}  # (the pid this namespace knows the writer by)
        partial = None
        if progress.get("temp"):
            try:
                from memdir.stores.sqlite import SqliteStore

                partial = SqliteStore(Path(progress["temp"]), readonly=True,
                                      fts_tokenizer=self.settings.memory_search.store.fts.tokenizer,
                                      vector_enabled=self.settings.memory_search.store.vector.enabled)
            except Exception:
                partial = None
        elif isinstance(progress.get("generation"), int) and hasattr(self.store, "reading_build"):
            try:  # PostgreSQL: the generation being written, as committed so far
                partial = self.store.reading_build(progress["generation"])
            except Exception:
                partial = None
        # (pid 1 of another container sharing the state folder is not this search's own pid 1)
        who = pid_words(holder) if holder.get("pid") not in (None, "") else None
        note = (f"the index is being built ({describe_progress(progress, who)}); "
                + ("results so far are partial" if partial else "results will appear when it is done"))
        if holder.get("stopped"):  # (and never will, until it is resumed)
            note += f"; but pid {holder['pid']} is stopped (Ctrl-Z or SIGSTOP): {resume_advice(holder['pid'])}"
        return True, [note], partial

    def _build_first_index_now(self) -> None:
        """Build the first index in this thread; if that takes more than a second, say why the
        search is slow (once) instead of hanging silently."""
        timer = None
        if not self.recoveries:  # after a recovery, the recovery message has said it already
            timer = threading.Timer(1.0, self.notice, args=(
                f"no index yet for {self.workspace}: building it before searching ({self.store.location}; "
                "later searches use it)",))
            timer.daemon = True
            timer.start()
        try:
            self.sync(reason="search")
        finally:
            if timer is not None:
                timer.cancel()

    def _bootstrap_run(self) -> None:
        try:
            self.sync(reason="search")
        except BaseException as exc:
            self._bootstrap_error = exc

    def watch(self, *, on_event: Callable[[dict[str, Any]], None] | None = None, debounce_ms: int | None = None,
              interval_minutes: float | None = None, sync_at_start: bool = False, files: bool = True) -> Watcher:
        """Keep the index in step with the files from now on (until :meth:`close`).

        Changes to memory files, extra paths and (with the sessions source) transcripts are
        synced ``sync.watchDebounceMs`` after the last one, and every ``sync.intervalMinutes``;
        returns the :class:`memdir.watch.Watcher` (``state()``, ``stop()``).  ``files``: ``False``
        runs only the interval sync.

        ``on_event`` is called (in the watcher's thread) with each event as a dict: ``{"event":
        "watching" | "change" | "sync" | "error", "time", ...}``; ``debounce_ms`` and
        ``interval_minutes`` (0 or less: no interval sync) override the settings (``None``: as
        configured); ``sync_at_start`` syncs once at the start.  A watcher already running is
        returned as it is, these arguments left unused.
        """
        from memdir.watch import Watcher

        with self._init_lock:
            self._check_open()
            if self.watcher is None or not self.watcher.running:
                self.watcher = Watcher(self, on_event=on_event, debounce_ms=debounce_ms,
                                       interval_minutes=interval_minutes, sync_at_start=sync_at_start,
                                       files=files).start()
            return self.watcher

    def start_live_sync(self, on_event: Callable[[dict[str, Any]], None] | None = None) -> Watcher | None:
        """What a long-running host (``memdir mcp``, the agent loop) starts: a watcher when
        ``sync.watch`` is on, an interval sync when ``sync.intervalMinutes`` is set; ``None``
        when neither is configured.  ``on_event``: as :meth:`watch`'s."""
        cfg = self.settings.memory_search.sync
        if not cfg.watch and not (cfg.interval_minutes and cfg.interval_minutes > 0):
            return None
        if self.store.readonly:
            if not getattr(self.store, "readonly_for_space", False):
                self.notice(f"not watching: {self._readonly_note()}")
                return None
            # a full disk is often freed again: watch anyway, and the watcher's syncs (tried again
            # on their own after a failure) index what changed once there is room
            self.notice(f"{self._readonly_note()}; watching, and indexing again once there is room")
        return self.watch(on_event=on_event, files=cfg.watch)


def _refused(skipped: list[dict[str, str]]) -> list[str]:
    """A note for the notes and folders this user may not read (a ``chmod 000``, a file of another
    user's), else none.  Why: with MEMORY.md or memory/ unreadable a search answered "No matches."
    without a word (only ``status`` and ``index`` named them), which an agent reads as nothing in
    memory."""
    names = [s["path"] for s in skipped if any(m in s.get("error", "") for m in ("Permission denied",
                                                                                "Operation not permitted"))]
    if not names:
        return []
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return [f"could not read {shown} (permission denied): results may miss what is there (memdir status lists "
            "the files skipped)"]


def _starved(skipped: list[dict[str, str]]) -> list[str]:
    """A note for the files and folders a sync could not open for want of file descriptors (a
    long-running host with many files open), else none.  Why: the search answered "no results",
    not stale and without a word, for a note written just before it, which an agent reads as
    nothing in memory; a file skipped for good (a name that is not UTF-8) is left to ``status``."""
    names = [s["path"] for s in skipped if "Too many open files" in s.get("error", "")]
    if not names:
        return []
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return [f"could not open {shown}: too many open files (the process's limit, ulimit -n, is reached); results "
            "may miss what changed there since the last sync"]
