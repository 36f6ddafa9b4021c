"""``Memory``: the Python API over one agent's workspace and index.

    from memdir import Memory
    with Memory("~/agent-workspace") as mem:
        mem.sync()
        for hit in mem.search("what did we decide about the API?").results:
            print(hit.path, hit.start_line, hit.snippet)

A ``Memory`` is safe to share between threads: store access is serialised and ``sync`` takes
the index's writer lock, which also keeps other processes from writing at the same time.
``close`` lets calls in progress in other threads finish first (a sync stops before its next
file; up to :data:`CLOSE_WAIT_SECONDS` in all); a call made after it raises
:class:`~memdir.errors.MemoryClosed` instead of opening the index again.

The index heals itself: a damaged index file is moved aside and rebuilt from the Markdown files
(on open, and whenever an operation runs into a damage error), ``notice`` is told once with the
paths, and a state folder that cannot be written still answers searches read-only.
"""

from __future__ import annotations

import atexit
import datetime as dt
import functools
import logging
import math
import os
import sys
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Self, TypeVar

from memdir.embeddings.base import one_line
from memdir.embeddings.registry import DISABLED, NO_PROVIDER, ProviderSelection, select_provider
from memdir.errors import (
    IndexFromNewerMemdir,
    IndexOwnershipError,
    MemdirError,
    MemoryClosed,
    StoreError,
    holds_nothing,
    owned_by_other,
    ownership_message,
)
from memdir.lock import LockTimeout
from memdir.search import SearchResponse, run_search
from memdir.settings_cache import SnapshotConfig, with_value
from memdir.stores import Store, open_store, unapplied_settings
from memdir.stores.base import (
    OWNER_FOLDER_STATE,
    OWNER_STATE,
    RECOVERED_STATE,
    SEARCH_ANSWER_SECONDS,
    SKIPPED_STATE,
    bounded_answers,
)
from memdir.upkeep import STATUS_CHECK_MAX_BYTES, IndexUpkeep, writable_again

if TYPE_CHECKING:  # imported where used: pydantic and the indexer are not needed to answer a search
    from memdir.config import LoadedConfig, Settings
    from memdir.ltm.memory import LongTermMemory
    from memdir.sync import Indexer, Progress, SyncReport
    from memdir.workspace import PathError

log = logging.getLogger(__name__)

SearchMode = Literal["hybrid", "keyword", "vector"]
SEARCH_MODES = ("hybrid", "keyword", "vector")


#: How long :meth:`Memory.close` waits for calls in progress in other threads (a search takes
#: milliseconds; a sync stops before its next file, after the batch being embedded).
CLOSE_WAIT_SECONDS = 10.0
#: How long it waits first for a first index being built in the background to stop.
BOOTSTRAP_WAIT_SECONDS = 5.0
#: The same wait at interpreter exit, where giving up aborts the process (below): a batch being
#: embedded on a machine loaded many times over its cores took longer than the 15 s of a close.
EXIT_WAIT_SECONDS = 120.0

F = TypeVar("F", bound=Callable[..., Any])

#: What indexing and searching use of a ``provider`` passed to :class:`Memory` (``close`` is optional).
PROVIDER_MEMBERS = ("id", "model", "provider_key", "max_input_bytes", "dims", "embed_batch", "embed_query")


def _log_notice(message: str) -> None:
    log.warning("%s", message)


def _contained(notice: Callable[[str], None]) -> Callable[[str], None]:
    """A host's ``notice`` whose own failure (a closed log file, a bug) is logged, not raised in
    the middle of the heal or wait it reports on, which it used to fail."""
    @functools.wraps(notice)
    def tell(message: str) -> None:
        try:
            notice(message)
        except Exception:
            log.warning("%s (the notice callback failed on it)", message, exc_info=True)
    return tell


#: Every ``Memory`` of this process not yet collected (plain references: no callbacks).
_MEMORIES: list[weakref.ref[Memory]] = []


def _close_busy_at_exit() -> None:
    """At interpreter exit, close every ``Memory`` whose work still runs in another thread (a
    first index built in the background, a watcher's or a session start's sync): a daemon thread
    still inside the embedding model when the interpreter finished aborted the whole process
    ("terminate called without an active exception", exit status 134).  Closing stops the sync
    before its next file and waits for it (see :meth:`Memory.close`)."""
    for ref in list(_MEMORIES):
        mem = ref()
        if mem is not None and not mem._closed and mem._busy():
            try:
                mem._close(bootstrap_wait=EXIT_WAIT_SECONDS, calls_wait=EXIT_WAIT_SECONDS)
            except Exception as exc:  # exiting anyway: say so, do not stop the other closes
                log.warning("closing %s at exit failed: %s", mem.workspace, exc)


atexit.register(_close_busy_at_exit)


def _forget_other_threads_calls() -> None:
    """In a forked child only the forking thread exists: the calls other threads had in progress
    will never end here (``close`` waited for them in vain, at exit too)."""
    me = threading.get_ident()
    for ref in _MEMORIES:
        mem = ref()
        if mem is not None:
            mem._calls = {me: mem._calls[me]} if me in mem._calls else {}
            mem._calls_changed = threading.Condition()
            if not mem._init_lock._is_owned():  # type: ignore[attr-defined]  (held by a thread gone here)
                mem._init_lock = threading.RLock()
            if not mem._long_term_lock._is_owned():  # type: ignore[attr-defined]
                mem._long_term_lock = threading.RLock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_other_threads_calls)


def _call(method: F) -> F:
    """A public ``Memory`` call: refused once closed, and waited for by :meth:`Memory.close`."""
    @functools.wraps(method)
    def wrapper(self: Memory, *args: Any, **kwargs: Any) -> Any:
        with self._in_call():
            return method(self, *args, **kwargs)

    return wrapper  # type: ignore[return-value]


@dataclass
class GetResult:
    text: str
    path: str
    #: No file at ``path``: it reads as ``""`` (R§10.2, the tools' payload is the same), but the
    #: CLI says so, for a mistyped name printed nothing at all.
    missing: bool = False

    def as_dict(self) -> dict[str, str]:
        return {"text": self.text, "path": self.path}


def _check_limits(max_results: Any, min_score: Any) -> None:
    """``search``'s ``max_results``/``min_score`` as numbers, or an error naming the argument (a
    string was "invalid literal for int() with base 10", a list "int() argument must be ...")."""
    for name, value in (("max_results", max_results), ("min_score", min_score)):
        if value is not None and (isinstance(value, bool) or not hasattr(type(value), "__float__")):  # (NumPy's too)
            raise TypeError(f"{name} must be a number, not {type(value).__name__}")
    if not isinstance(min_score, int | None) and math.isnan(min_score):  # NaN: the floor would become 0, all pass
        raise ValueError("min_score must be a number (0 to 1), not NaN")
    if not isinstance(max_results, int | None) and not math.isfinite(max_results):
        raise ValueError(f"max_results must be a whole number, not {max_results}")


def _check_wait(name: str, value: Any, unit: str) -> None:
    """A bound that is ``None`` (none) or a number: NaN waited as if unbounded."""
    if value is None:
        return
    if isinstance(value, bool) or not hasattr(type(value), "__float__"):
        raise TypeError(f"{name} must be {unit} or None, not {type(value).__name__}")
    if math.isnan(value):
        raise ValueError(f"{name} must be {unit} or None, not NaN")


def _one_warning(reasons: str) -> str:
    """Why embeddings are unavailable as one line: ``auto`` lists a reason per provider, a line and
    a blank line each, which a search printed as nine lines of notes."""
    return "; ".join(line.strip().removesuffix(".") for line in reasons.splitlines() if line.strip())


def _selection_words(selection: ProviderSelection) -> str:
    """The embedding provider chosen, and why, as ``-v`` logs it in one line.  Why: ``-v`` named
    the config file and the index but not the model, so a user asking why searches ignored the
    OpenAI key they set (``auto`` took the local model first; a fallback after a refused key) had
    only ``status`` to ask."""
    chosen = selection.provider
    if chosen is None:
        return (f"embeddings: none, keyword search only (requested {selection.requested}: "
                f"{_one_warning(selection.unavailable_reason or NO_PROVIDER)})")
    words = f"embeddings: {chosen.id}, model {chosen.model} (requested {selection.requested}"
    if selection.fallback_from is not None:
        words += f"; the fallback, as {selection.fallback_from} failed: {_one_warning(selection.fallback_reason or '')}"
    elif selection.skipped:
        words += f"; passed over: {_one_warning(chr(10).join(selection.skipped))}"
    return words + ")"


def _file_stamp(path: Path | None) -> tuple[int, int, int, int] | None:
    """What changes when a file is edited or replaced (``None``: no such file)."""
    if path is None:
        return None
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino


def _index_file_there(path: Path) -> bool:
    """Whether an index file may be at ``path``: one in a folder this user cannot enter counts, so
    that opening it says whose folder it is (``Path.exists`` raised "[Errno 13] Permission denied")."""
    try:
        path.stat()
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError:
        return True
    return True


def _importable(module: str) -> bool:
    """Whether ``module`` can be imported, found without importing it (an optional extra's package)."""
    import importlib.util

    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def _holds_other_vectors(meta: dict[str, Any], provider: Any) -> bool:
    """The index's vectors are not this provider's: another model, or the same name with another
    provider key (a model re-exported to the same path, other numerics, another endpoint)."""
    return provider is not None and (meta.get("model") not in (None, provider.model)
                                     or meta.get("providerKey") not in (None, provider.provider_key))


def _stale_model_note(meta: dict[str, Any], provider: Any) -> str:
    """Why searches use keywords only: the index holds another model's vectors."""
    if meta.get("model") == provider.model:
        held = f"vectors of another version of {provider.id}/{provider.model} (its files, settings or endpoint changed)"
    elif meta.get("provider") == "none":  # ("the index holds none/fts-only vectors" said it had some)
        held = (f"no vectors, not {provider.id}/{provider.model}'s (it was built for keywords only: provider none, "
                "or no embeddings could be made then)")
    else:
        held = (f"{meta.get('provider')}/{meta.get('model')} vectors, not {provider.id}/{provider.model}'s "
                "(built by a fallback, or the model changed)")
    return f"the index holds {held}: searches use keywords only until the next index run rebuilds it"



def _readonly_why(store: Any) -> str:
    """Why ``store`` was opened read-only, in words: for want of room SQLite says only "disk I/O
    error", which ``sync`` raised and ``status`` showed as it is."""
    why = store.readonly_reason or "opened read-only"
    if getattr(store, "readonly_for_space", False):
        why += " (is the disk full, or a file size limit reached?)"
    return why

class Memory(IndexUpkeep):
    """One agent's memory: its workspace files, its index and its embedding provider.

    ``workspace``: the folder holding ``MEMORY.md`` and ``memory/`` (``~`` expanded; ``None``:
    ``$MEMDIR_WORKSPACE``, else the current folder).  ``agent_id``: whose index and state these are
    (``None``: ``$MEMDIR_AGENT`` or the config file's, else ``main``, as ``memdir -w <workspace>``).
    ``config``: a config file's path (``None``: ``memdir.toml``/``.json``/``.json5`` in the
    workspace, then in the state folder), a dict of settings applied over that file (OpenClaw's
    camelCase keys or snake_case: ``{"memorySearch": {"provider": "none"}}``), or
    :class:`~memdir.config.Settings` / :class:`~memdir.config.LoadedConfig`, which name the workspace,
    agent and state folder themselves.  ``state_dir``: where indexes and state live (``None``:
    ``$MEMDIR_STATE_DIR``, else ``~/.memdir``).  ``provider``: an embedding provider to use instead
    of the configured one (:class:`~memdir.embeddings.base.EmbeddingProvider`; :meth:`close` leaves
    it open).  ``notice``: called with a one-line message for what memdir says once, outside any
    result (an index healed, a writer waited for); ``None``: a logged warning.
    """

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        agent_id: str | None = None,
        config: str | os.PathLike[str] | Mapping[str, Any] | Settings | LoadedConfig | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        provider: Any = None,
        notice: Callable[[str], None] | None = None,
    ):
        named = (workspace, agent_id, state_dir) != (None, None, None)
        if isinstance(config, SnapshotConfig):  # the CLI's remembered settings (memdir.settings_cache)
            self.loaded: Any = config
            self.settings: Any = config.settings
            self._init_parts(provider, notice)
            return
        from memdir.config import LoadedConfig, Settings, load_config

        if isinstance(config, LoadedConfig | Settings):
            if named:  # they name all three already: Memory(ws, config=Settings()) used the cwd
                raise TypeError("workspace, agent_id and state_dir are taken from the settings given as config: set "
                                "them there (load_config(workspace=...)), or give config as a dict or a file")
            loaded = config if isinstance(config, LoadedConfig) else LoadedConfig(config, {}, None)
        elif isinstance(config, Mapping):
            loaded = load_config(workspace=workspace, agent_id=agent_id, state_dir=state_dir, overrides=config)
        else:
            loaded = load_config(config_path=config, workspace=workspace, agent_id=agent_id, state_dir=state_dir)
        self.loaded = loaded
        self.settings = loaded.settings
        self._init_parts(provider, notice)

    def _init_parts(self, provider: Any, notice: Callable[[str], None] | None) -> None:
        # (looked up without reading them: a provider's dims may load its model; a proxy's are not known)
        kind = type(provider)
        missing = [name for name in PROVIDER_MEMBERS if provider is not None and not hasattr(kind, "__getattr__")
                   and not hasattr(kind, name) and name not in getattr(provider, "__dict__", {})]
        if missing:  # else every sync failed with "'P' object has no attribute 'max_input_bytes'", searches stale
            raise TypeError(f"provider lacks {', '.join(missing)}: an embedding provider has "
                            f"{', '.join(PROVIDER_MEMBERS)} (memdir.embeddings.base.EmbeddingProvider)")
        if notice is not None and not callable(notice):  # (a Logger): else a TypeError in the middle of a heal
            raise TypeError(f"notice must be a function taking the message, e.g. logger.warning, not "
                            f"{type(notice).__name__}")
        self._provider_override = provider
        #: The config file read, as it was then (see :meth:`_config_edited`).
        self._config_file: Path | None = getattr(self.loaded, "config_file", None)
        self._config_seen = _file_stamp(self._config_file)
        self._workspace: tuple[Any, str, Path] | None = None
        self._selection: ProviderSelection | None = None
        self._store: Store | None = None
        self._indexer: Indexer | None = None
        #: Where memdir says things once, outside any result: an index healed, a writer waited for.
        self.notice: Callable[[str], None] = _contained(notice) if notice else _log_notice
        #: How long a search waits for a *first* full index it had to start (``None``: until it is
        #: built, what a one-shot CLI search needs); long-running servers set a short wait and
        #: answer "the index is being built: 120/997 files" instead.
        self.first_index_wait: float | None = None
        #: Recoveries of a damaged index made by this Memory (``store.recovery`` records).
        self.recoveries: list[dict[str, Any]] = []
        self._init_lock = threading.RLock()
        #: Long-term memory opens on its own lock: loading LanceDB (seconds) must not hold up searches.
        self._long_term_lock = threading.RLock()
        self._bootstrap: threading.Thread | None = None
        self._bootstrap_error: BaseException | None = None
        self._checked_ok: Any = None
        self._text_checked: Any = None
        self.watcher: Any = None
        self._long_term: Any = None
        self._closed = False
        #: Calls in progress, by thread (a call may make another: a search syncs first).
        self._calls: dict[int, int] = {}
        self._calls_changed = threading.Condition()
        _MEMORIES[:] = [ref for ref in _MEMORIES if ref() is not None]
        _MEMORIES.append(weakref.ref(self))

    def _busy(self) -> bool:
        """Whether work of this Memory is running in some thread now."""
        bootstrap, watcher = self._bootstrap, self.watcher
        return bool(self._calls) or (bootstrap is not None and bootstrap.is_alive()) or bool(
            watcher is not None and watcher.syncing)

    @contextmanager
    def _in_call(self) -> Iterator[None]:
        me = threading.get_ident()
        with self._calls_changed:
            depth = self._calls.get(me, 0)
            if self._closed and not depth:
                raise MemoryClosed(self._closed_words())
            self._calls[me] = depth + 1
        try:
            yield
        except Exception as exc:
            if self._closed and not isinstance(exc, MemdirError):  # e.g. its index closed under it
                raise MemoryClosed(f"this Memory was closed during the call ({exc})") from exc
            raise
        finally:
            with self._calls_changed:
                if depth:
                    self._calls[me] = depth
                else:
                    del self._calls[me]
                    self._calls_changed.notify_all()

    def _check_open(self) -> None:
        if self._closed:
            raise MemoryClosed(self._closed_words())

    def _closed_words(self) -> str:
        """Why: a host holding many agents' Memory objects was told "this Memory is closed" and not which."""
        return f"this Memory is closed (workspace {self.workspace}, agent {self.settings.agent_id})"

    # -- lazily built parts ------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        """The workspace folder, resolved once per configured value: a search asked twice, and
        resolving costs an ``lstat`` per path component (the index was named after it at open).
        Not kept for a relative path, nor while the folder does not exist yet."""
        settings = self.settings
        held = self._workspace
        if held is not None and held[0] is settings and held[1] == settings.workspace:
            return held[2]
        path = settings.workspace_path
        kept = os.path.isabs(os.path.expanduser(settings.workspace)) and path.is_dir()  # not relative to a cwd
        self._workspace = (settings, settings.workspace, path) if kept else None
        return path

    @property
    def index_path(self) -> Path:
        return self.settings.index_path

    @property
    def selection(self) -> ProviderSelection:
        with self._init_lock:
            if self._selection is None:
                if self._provider_override is not None:
                    override = self._provider_override
                    self._selection = ProviderSelection(override, getattr(override, "id", "custom"))
                else:
                    self._selection = select_provider(self.settings.memory_search)
                    log.info("%s", _selection_words(self._selection))
            return self._selection

    @property
    def store(self) -> Store:
        with self._init_lock:
            if self._store is None:
                self._check_open()
                store = open_store(self.settings, notice=self.notice)
                try:
                    self._check_owner(store)
                except BaseException:
                    store.close()
                    raise
                if hasattr(store, "notes_root"):  # its keyword warm-up also measures the notes for widening
                    store.notes_root = self.workspace
                    if "sessions" in self.settings.memory_search.sources:
                        store.sessions_root = self.settings.sessions_dir
                self._store = store
                self._note_recovery(store)
            return self._store

    def _check_owner(self, store: Store, meta: dict[str, Any] | None = None) -> None:
        meta = store.read_meta() if meta is None else meta
        owner = (meta or {}).get("workspace") or store.get_state(OWNER_STATE)
        if owned_by_other(owner, str(self.workspace), lambda: store.get_state(OWNER_FOLDER_STATE)):
            raise IndexOwnershipError(ownership_message(store.location, owner, str(self.workspace),
                                                        empty=holds_nothing(store)), owner)

    @property
    def indexer(self) -> Indexer:
        with self._init_lock:
            if self._indexer is None:
                self._check_open()
                from memdir.sync import Indexer
                from memdir.watch import stop_requested

                sel = self.selection
                transient = sel.provider is None and sel.requested not in ("none", "off", "fts-only")
                self._indexer = Indexer(self.settings, self.store, sel.provider,
                                        provider_transiently_missing=transient,
                                        extra_sources=self._extra_sources(), notice=self.notice,
                                        closing=lambda: self._closed or stop_requested())
            return self._indexer

    def _extra_sources(self) -> list[Any]:
        ms = self.settings.memory_search
        if "sessions" not in ms.sources:
            return []
        from memdir.sessions.source import SessionsSource

        return [SessionsSource(self.settings.sessions_dir, delta_bytes=ms.sync.sessions.delta_bytes,
                               delta_messages=ms.sync.sessions.delta_messages)]

    @property
    def long_term(self) -> LongTermMemory:
        """This agent's long-term memory (:class:`memdir.ltm.LongTermMemory`; needs ``memdir[lancedb]``);
        :class:`MemoryClosed` once closed (it used to open a new store that nothing closed), and so do
        the calls of one kept from before the close.  Opened
        once: threads asking at the same time each opened their own (an embedding model loaded
        for each), and ``close`` closed only the last."""
        if self._long_term is None:
            with self._long_term_lock:
                if self._long_term is None:
                    self._check_open()
                    from memdir.ltm.memory import LongTermMemory

                    long_term = LongTermMemory.for_memory(self)
                    owner = weakref.ref(self)  # (a reference back would keep an unclosed Memory alive)
                    long_term._owner_closed = lambda: bool(getattr(owner(), "_closed", False))
                    self._long_term = long_term
        return self._long_term

    # -- operations --------------------------------------------------------------------------
    @_call
    def sync(self, *, force: bool = False, progress: Progress | None = None, reason: str = "api",
             deadline: float | None = None, lock_timeout: float | None = None) -> SyncReport:
        """Bring the index up to date with the files (a full rebuild with ``force``).

        ``progress``: called as ``progress(files_done, files_total, label)`` as files are indexed (the
        label, a ``str``, also carries ``chunks_done`` and ``chunks_planned``); ``reason`` is recorded in the
        report and the log; ``deadline`` (a :func:`time.monotonic` value) stops an incremental sync
        before its next file once passed (``report.incomplete``; the next sync goes on);
        ``lock_timeout``: seconds to wait for another writer of the index, then
        :class:`~memdir.lock.LockTimeout` (``None``: as long as that writer runs, ``0``: not at all).

        When embedding fails and ``memorySearch.fallback`` names another provider, memdir switches
        to it once (R§5.1) and rebuilds the index with it; the switch is recorded in the report,
        in ``status`` and in search responses.
        """
        _check_wait("deadline", deadline, "a time.monotonic() value")
        _check_wait("lock_timeout", lock_timeout, "a number of seconds")
        kwargs = {"progress": progress, "deadline": deadline, "lock_timeout": lock_timeout}
        log.info("sync (%s%s): %s -> %s", reason, ", full" if force else "", self.workspace, self.index_path)
        if self.store.readonly and not writable_again(self.store):
            raise MemdirError(f"the index {self.store.location} cannot be updated: {_readonly_why(self.store)}")
        try:
            report = self._healing(lambda: self.indexer.sync(force=force, reason=reason, **kwargs))
        except (LockTimeout, IndexOwnershipError, MemoryClosed, IndexFromNewerMemdir):
            raise
        except Exception as exc:
            if not self._switch_to_fallback(exc):
                raise
            return self._rebuild_after_fallback(reason, exc, kwargs)
        if report.embedding_error is not None and self._switch_to_fallback(report.embedding_error):
            return self._rebuild_after_fallback(reason, report.embedding_error, kwargs)
        self._warn_keyword_only(report)
        report.warnings.extend(unapplied_settings(self.settings))
        return report

    def _warn_keyword_only(self, report: SyncReport) -> None:
        """Say where it happens that a provider was asked for but the index gets keywords only."""
        sel = self.selection
        if sel.provider is None and sel.requested not in DISABLED and sel.unavailable_reason:
            why = _one_warning(sel.unavailable_reason)
            report.warnings.insert(0, f"building a keyword-only index (no vectors) because embeddings are "
                                      f"unavailable: {why}")

    def _switch_to_fallback(self, error: BaseException) -> bool:
        if self._provider_override is not None:
            return False
        from memdir.embeddings.registry import fallback_for

        switched = fallback_for(self.selection, self.settings.memory_search, error)
        if switched is None:
            return False
        old = self.selection.provider
        if old is not None:
            try:
                old.close()
            except Exception:
                pass
        self._selection = switched
        self._indexer = None
        return True

    def _rebuild_after_fallback(self, reason: str, error: BaseException, kwargs: dict[str, Any]) -> SyncReport:
        sel = self.selection
        report = self.indexer.sync(force=True, reason=f"{reason} (fallback)", **kwargs)
        report.fallback = {"from": sel.fallback_from or "", "to": sel.provider.id if sel.provider else "none",
                           "reason": str(error)}
        report.warnings.append(f"switched embeddings from {report.fallback['from']} to {report.fallback['to']}: "
                               f"{error}")
        return report

    @_call
    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               explain: bool = False, sync: bool | None = None, mode: SearchMode = "hybrid") -> SearchResponse:
        """Search memory for ``query``; a dirty index is synced first within ``sync.searchBudgetMs``.

        ``max_results``: at most this many results (``None``: ``query.maxResults``, 6 unless set);
        ``min_score``: drop results scoring below it, 0-1, strictly (``None``: ``query.minScore``,
        0.35 unless set, below which a strong match may still fill a spare slot); ``explain``: each
        result's ``explain`` holds its score's parts; ``sync``: whether a dirty index is synced
        first (``None``: ``sync.onSearch``, on unless set).

        ``mode``: ``"hybrid"`` (keywords and vectors, as configured), ``"keyword"`` (BM25 only:
        the query is not embedded) or ``"vector"`` (embeddings only; an error when no embedding
        provider is available).

        While a first full index is being built (here or by another process) the search does
        not wait for it: it answers from what is built so far, ``stale``, saying how far along
        the build is.
        """
        if not isinstance(query, str):  # else an AttributeError from deep inside the query parser
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown search mode {mode!r} (expected one of {', '.join(SEARCH_MODES)})")
        _check_limits(max_results, min_score)
        # A database server that stops answering (frozen, a stalled proxy) fails the search in a
        # bounded time, naming the server, instead of holding the agent's call for ever.
        with bounded_answers(SEARCH_ANSWER_SECONDS):
            return self._healing(lambda: self._search_once(query, max_results, min_score, explain, sync, mode))

    def _search_once(self, query: str, max_results: int | None, min_score: float | None, explain: bool,
                     sync: bool | None, mode: SearchMode) -> SearchResponse:
        ms = self.settings.memory_search
        stale, notes, partial = False, [], None
        do_sync = ms.sync.on_search if sync is None else sync
        store = self.store  # opening heals a damaged index (recorded in self.recoveries)
        if not do_sync and self.recoveries and not store.readonly and store.read_meta() is None:
            do_sync = True  # a damaged index was set aside: rebuild it, as promised, even without sync
        if do_sync:
            try:
                stale, notes, partial = self._sync_for_search()
            except IndexOwnershipError:
                raise
            except Exception as exc:  # a failed sync never fails the search: answer from what is indexed
                if store.is_damage(exc):
                    raise  # set aside and rebuilt by _healing, then searched again
                stale, notes = True, [f"sync before search failed: {exc}"]
        elif store.readonly:
            stale, notes = True, [self._readonly_note()]
        try:
            response = self._search_index(partial or store, query, max_results, min_score, explain, mode,
                                          verify=partial is None and bool(query.strip()))
            if do_sync and partial is None and not response.results and query.strip() and \
                    self._reread_textless(store):
                response = self._search_index(store, query, max_results, min_score, explain, mode, verify=True)
        finally:
            if partial is not None:
                partial.close()
        if not do_sync and not stale:
            why = self._rebuild_due(store)
            if why:
                stale = True
                notes.append(why)
        if partial is None and (stale or not do_sync):
            # (with sync on, the sync could not catch up: "search with sync on" sent the user in circles)
            self._flag_moved_lines(store, response, "run `memdir index`" if do_sync else
                                   "run `memdir index`, or search with sync on")
        elif partial is None and self._indexer is not None and self._indexer.kept_unread:
            self._flag_moved_lines(store, response, "it could not be indexed again: see `memdir status`")
        if not (do_sync or stale or response.results) and store.read_meta() is None:
            # never built (R§18.5): "no results" would read as "nothing there"; asked only when
            # nothing was found, so a search with results pays no second read of the meta
            stale, notes = True, ["the index has not been built yet: run `memdir index` (or search with sync on)"]
        response.stale = response.stale or stale
        response.warnings.extend(notes)
        response.warnings.extend(unapplied_settings(self.settings))
        edited = self._config_edited()
        if edited:
            response.warnings.append(edited)
        return response

    def _rebuild_due(self, store: Store) -> str | None:
        """The note for an index searched without a sync that must be rebuilt (settings that shape
        it changed, or another memdir version wrote it), else ``None``: ``--no-sync`` answered from
        chunks cut with the old settings without a word.  No provider is asked and
        :mod:`memdir.sync` stays unloaded."""
        from memdir.index_identity import newer_version, newer_version_words, settings_rebuild_reason, version_reason

        try:
            meta = store.read_meta()
            if not meta:
                return None  # never built: said apart when nothing is found
            newer = newer_version(meta, store)
            if newer is not None:  # (no rebuild of this memdir's would do: "run `memdir index`" failed)
                return newer_version_words(store.location, newer)
            why = version_reason(meta) or settings_rebuild_reason(self.settings, store, meta)
        except Exception:  # the results stand; a damaged index is found and healed by the search itself
            return None
        if why is None:
            return None
        return (f"the index must be rebuilt ({why}): its results may differ from a current index's "
                "(run `memdir index`, or search with sync on)")

    def _config_edited(self) -> str | None:
        """Once per edit: the config file changed after this ``Memory`` read it.  Settings are read
        once; a long-running ``memdir mcp`` or ``memdir chat`` went on with the old ones without a
        word (one ``stat`` per search)."""
        if self._config_file is None:
            return None
        now = _file_stamp(self._config_file)
        if now == self._config_seen:
            return None
        self._config_seen = now
        message = (f"{self._config_file} changed after memdir read it: its new settings apply once memdir is "
                   "restarted (a running memdir mcp, memdir watch or memdir chat keeps the settings it started with)")
        self.notice(message)
        return message

    def _search_index(self, store: Store, query: str, max_results: int | None, min_score: float | None,
                      explain: bool, mode: SearchMode, *, verify: bool) -> SearchResponse:
        ms = self.settings.memory_search
        sel = self.selection
        provider = sel.provider
        label = (provider.id, provider.model) if provider else ("none", "fts-only")
        meta = store.read_meta() or {}
        if verify:
            self._check_owner(store, meta)
        stale_model = _holds_other_vectors(meta, provider)
        if stale_model:
            provider = None  # the index still holds another model's vectors: keywords only
        cfg = ms
        if mode == "keyword":
            provider = None
        elif mode == "vector":
            if provider is None:
                raise MemdirError("vector search needs embeddings, and none are available: "
                                  + (sel.unavailable_reason or "the index was built with another model")
                                  .splitlines()[0])
            # run_search: vectors only, keyword hits left out (the CLI's settings may be a snapshot view)
            cfg = with_value(ms, "query.hybrid.enabled", False)
        response = run_search(
            store, cfg, query, provider=provider, workspace=self.workspace, max_results=max_results,
            min_score=min_score, explain=explain, provider_label=label, timezone=self.settings.user_timezone,
            sessions_dir=self.settings.sessions_dir if "sessions" in ms.sources else None,
            vector_dims=meta.get("vectorDims") if isinstance(meta.get("vectorDims"), int) else None,
        )
        if verify:
            self._verify(store, response)
        if mode == "vector" and response.mode == "hybrid":
            response.mode = "vector"
        if stale_model and mode != "keyword":  # e.g. built by a runtime fallback in another process
            response.warnings.append(_stale_model_note(meta, sel.provider))
        if sel.fallback_from:
            response.fallback = {"from": sel.fallback_from, "reason": sel.fallback_reason or ""}
        elif sel.provider is None and sel.unavailable_reason and response.fallback is None \
                and sel.requested not in DISABLED:  # keyword-only by choice: no note on every search
            response.warnings.append(_one_warning(sel.unavailable_reason))
        return response

    @_call
    def get(self, path: str | os.PathLike[str], *, from_line: int | None = None,
            lines: int | None = None) -> GetResult:
        """Read a memory file (or a slice of it); raises :class:`PathError` naming the problem.

        ``path``: relative to the workspace, as a search result cites it (or an absolute path inside
        it or an extra path; a :class:`~pathlib.Path` too); ``from_line``: the first line wanted,
        1-based (``None``: the first); ``lines``: how many (``None``: to the end).  A file that does
        not exist reads as ``""`` with ``missing`` set.

        With the ``sessions`` source on, ``sessions/<name>.jsonl`` (a session result's path) reads
        as the indexed ``User:``/``Assistant:`` lines of the messages on JSONL lines ``from_line``
        up to ``from_line + lines``, redacted (:mod:`memdir.sessions.readable`; OpenClaw refuses
        session paths, but a result must cite a range the agent can open).
        """
        from memdir.workspace import (  # not for search
            cited_range,
            is_session_path,
            line_number,
            read_lines,
            resolve_readable,
            session_relative,
        )

        if isinstance(path, os.PathLike):  # mem.get(Path("MEMORY.md")) was "path must be a string, not PosixPath"
            path = os.fspath(path)
        if not isinstance(path, str):  # 123 raised "'int' object has no attribute 'strip'"
            raise TypeError(f"path must be a string, not {type(path).__name__}")
        from_line, lines = line_number("from_line", from_line), line_number("lines", lines)
        path, from_line, lines = cited_range(path, from_line, lines)
        sessions = "sessions" in self.settings.memory_search.sources
        if sessions and is_session_path(path):
            from memdir.sessions.readable import read_session_lines

            text = read_session_lines(path, self.settings.sessions_dir, from_line, lines)
            return GetResult(text, session_relative(path))
        resolved = resolve_readable(self._through_workspace(path), self.workspace, self.settings.extra_paths,
                                    sessions=sessions)
        text = read_lines(resolved, from_line, lines)
        return GetResult(text, resolved.rel, missing=not text and not os.path.lexists(resolved.abs_path))

    def _through_workspace(self, path: str) -> str:
        """An absolute ``path`` spelled through the workspace as it was given (a symlink to it;
        macOS's ``/tmp``) as the same path under the resolved workspace, the root reads are
        checked against: ``get("/link/MEMORY.md")`` was "path not allowed" for ``Memory("/link")``."""
        if "\0" in path:  # refused by the reader, naming it ("~x\0" made expanduser fail "embedded null byte")
            return path
        given = os.path.normpath(os.path.expanduser(self.settings.workspace))
        wanted = os.path.normpath(os.path.expanduser(path.strip()))
        resolved = str(self.workspace)
        if given != resolved and os.path.isabs(wanted) and wanted.startswith(given.rstrip("/") + "/"):
            return resolved + wanted[len(given.rstrip("/")):]
        return path

    @_call
    def append_daily(self, text: str, *, date: dt.date | dt.datetime | str | None = None) -> str:
        """Append ``text`` to today's ``memory/YYYY-MM-DD.md`` (user timezone); returns that path.

        ``date`` picks another day's log: a ``date``, a ``datetime`` (its day in the user's
        timezone) or ``"YYYY-MM-DD"``; anything else raises :class:`~memdir.daily.DailyLogError`.

        Append-only and safe with concurrent writers (threads and processes): see
        :mod:`memdir.daily`.  The next :meth:`search` sees the entry, because the file's size
        changed and searches index dirty files first.
        """
        from memdir.daily import append_daily

        return append_daily(self.workspace, text, date=date, timezone=self.settings.user_timezone)

    @_call
    def migrate(self, to: str, *, lock_timeout: float | None = 30.0,
                progress: Progress | None = None) -> dict[str, Any]:
        """Copy this agent's index (vectors and cache included) to the other backend, ``to``.

        Nothing is re-embedded: switch ``store.driver`` to ``to`` afterwards and the next sync
        finds the index up to date.  Both indexes' writer locks are held during the copy.  A damaged
        index is set aside and rebuilt from the Markdown files first, as a search would.
        ``progress``: called as ``progress(done, total, label)``, see :func:`memdir.stores.migrate.copy_index`;
        ``lock_timeout``: seconds to wait for another writer of either index (``None``: as long as
        it runs), then :class:`~memdir.lock.LockTimeout`, nothing copied.
        """
        from memdir.stores.migrate import SourceDamaged

        _check_wait("lock_timeout", lock_timeout, "a number of seconds")  # as sync's: NaN waited for ever
        current = self.settings.memory_search.store.driver
        if to not in ("sqlite", "postgres"):
            raise MemdirError(f"unknown store driver {to!r} (expected sqlite or postgres)")
        if to == current:
            # (the README's setup exports MEMDIR_STORE_DRIVER=postgres first, and then "already on postgres"
            # read as if the SQLite index had been copied, or as if there were nothing to do)
            other = "sqlite" if to == "postgres" else "postgres"
            names = {"sqlite": "SQLite", "postgres": "PostgreSQL"}
            raise MemdirError(f'store.driver is already "{to}": migrate copies this agent\'s index from the backend '
                              f"store.driver names to the other one. To copy its {names[other]} index to "
                              f"{names[to]}, run MEMDIR_STORE_DRIVER={other} memdir migrate --to {to} (or set "
                              f'store.driver = "{other}" for it), then keep store.driver = "{to}"')
        # Checked before anything is opened: opening a missing SQLite index (the source, or the
        # target) creates an empty one, which a failed migrate used to leave behind.
        if current != "postgres" and not _index_file_there(self.index_path):
            raise MemdirError(f"nothing to migrate: {self.index_path} holds no index yet (run memdir index first)")
        source = self.store
        if getattr(source, "recovery", None) and source.read_meta() is None:
            # set aside as damaged when it was opened, saying it is being rebuilt from the Markdown
            # files: it is, then copied (migrate said "nothing to migrate … run memdir index first")
            self.sync(reason="migrate", lock_timeout=lock_timeout)
        try:
            return self._copy_index(source, to, lock_timeout, progress)
        except SourceDamaged as exc:
            if source.readonly:
                raise StoreError(f"{exc}; it cannot be rebuilt where it is: {_readonly_why(source)}") from exc
            problem = exc.problem
        # A damaged index is healed as a search heals it (set aside, its cache salvaged, rebuilt from
        # the Markdown files), then copied: the copy stopped at the damage, and no advice held (an
        # index run finds nothing changed, and reads no page of the chunks it does not change)
        source.recover(problem, notice=self.notice)
        self._note_recovery(source)
        self._checked_ok = None
        self.sync(reason="migrate", lock_timeout=lock_timeout)
        return self._copy_index(source, to, lock_timeout, progress)

    def _copy_index(self, source: Store, to: str, lock_timeout: float | None,
                    progress: Progress | None) -> dict[str, Any]:
        """:meth:`migrate`'s copy of ``source`` into the ``to`` backend, under both writer locks."""
        from memdir.stores.migrate import source_damage

        with source_damage(source):
            meta = source.read_meta()
        if meta is None:
            raise MemdirError(f"nothing to migrate: {source.location} holds no index yet (run memdir index first)")
        from memdir.index_identity import newer_version

        newer = newer_version(meta, source)
        if newer is not None:  # (its rows were read as this version lays them out, and "the next index rebuilds it")
            raise IndexFromNewerMemdir(f"the index {source.location} was written by a newer memdir ({newer}): this "
                                       "older one does not copy it; run memdir migrate with the newer memdir")
        target = open_store(self.settings, driver=to)
        try:
            if target.readonly and not writable_again(target):  # (its lock file failed: "[Errno 30] …lock")
                raise MemdirError(f"the index {target.location} cannot be updated: {_readonly_why(target)}")
            # A source this process may only read (a backup on a read-only mount) is read as searches
            # read it, without its lock, whose file cannot be made there ("[Errno 30] …lock")
            # The SQLite index's lock first: waiting for a local writer (a watcher stopped with Ctrl-Z)
            # while holding the database's lock stopped every host's syncs of the agent meanwhile, and
            # two migrates the opposite ways each held the lock the other waited for
            stores = [target] if source.readonly else [source, target] if to == "postgres" else [target, source]
            taken = []
            try:
                for store in stores:
                    lock = store.writer_lock()
                    self._migrate_lock(lock, store.location, lock_timeout)
                    taken.append(lock)
                # Whose the target is, checked under its lock (as a sync claims an index): a first build
                # of another workspace's, running or killed, has claimed it but written no meta yet,
                # and one finishing while this waited for the lock was copied over all the same
                self._check_owner(target)
                # what the copy replaces, said: the team's index of this agent was replaced without a word
                held = target.counts_by_source() if target.read_meta() is not None else {}
                target.cleanup_leftovers()
                report = self._copy_told(source, target, to, progress)
                report["replaced"] = {"files": sum(f for f, _ in held.values()),
                                      "chunks": sum(c for _, c in held.values())} if held else None
                report["warnings"] = self._stale_copy(meta, target, to)
                return report
            finally:
                for lock in reversed(taken):
                    lock.release()
        finally:
            target.close()

    def _copy_told(self, source: Store, target: Store, to: str, progress: Progress | None) -> dict[str, Any]:
        """:func:`copy_index`, its file counts also in ``<index>.progress``: ``memdir status`` said
        'Writer: pid N is indexing' the whole time a migrate ran, and how far it was nowhere."""
        from memdir.progress import ProgressFile
        from memdir.stores.migrate import copy_index

        shown = ProgressFile(self.index_path, workspace=str(self.workspace), min_interval=0.5)
        shown.start(f"copying the index to {to}")

        def tell(done: int, total: int, label: str) -> None:
            if getattr(label, "unit", "files") == "files":
                shown.update(done, total, (getattr(label, "chunks_done", 0), getattr(label, "chunks_planned", 0)))
            if progress is not None:
                progress(done, total, label)

        try:
            return copy_index(source, target, tell)
        finally:
            shown.clear()

    def _stale_copy(self, meta: dict[str, Any], target: Store, to: str) -> list[str]:
        """What makes the next sync rebuild the index just copied (it was already out of date: built
        by another memdir version, with other settings or another model), which migrate did not say:
        'the next memdir index has nothing to do' (the README) then did a full reindex."""
        from memdir.index_identity import settings_rebuild_reason, version_reason

        target.read_meta()  # (PostgreSQL's own reason compares what it read last)
        why = version_reason(meta) or settings_rebuild_reason(self.settings, target, meta)
        if why is None:
            try:
                provider = self.selection.provider
            except Exception:  # (a provider that cannot be set up here: its own commands say why)
                provider = None
            if _holds_other_vectors(meta, provider) and meta.get("provider") == "none":
                why = f"it was built for keywords only, not with {provider.id}/{provider.model}"
            elif _holds_other_vectors(meta, provider):
                why = (f"it holds {meta.get('provider')}/{meta.get('model')} vectors, not {provider.id}/"
                       f"{provider.model}'s")
        if why is None:
            return []
        return [f"the index copied was out of date here ({why}): the next memdir index on {to} rebuilds it "
                "(what the copied cache holds is not embedded again)"]

    def _migrate_lock(self, lock: Any, location: str, lock_timeout: float | None) -> None:
        """Take one of :meth:`migrate`'s writer locks, saying whom it waits for.

        Why: after 30 s it said only "another process is writing one of the indexes; try again when
        it is done": not which index, nor who, and a writer stopped with Ctrl-Z (which is never
        done) was waited for all that time and advised the same.
        """
        from memdir.lock import holder_of, wait_for_writer, writer_words

        if lock.acquire(0):
            return
        who = writer_words(holder_of(lock))
        self.notice(f"waiting for {who} to finish writing {location}")
        try:
            wait_for_writer(lock, lock_timeout, location)  # a stopped one: WriterStopped, with how to resume it
        except LockTimeout as exc:
            if type(exc) is not LockTimeout:
                raise
            raise LockTimeout(f"{writer_words(holder_of(lock))} is writing {location}, still after "
                              f"{lock_timeout:g} s: nothing was copied; try again when it is done") from None

    @_call
    def status(self, *, deep: bool = False) -> dict[str, Any]:
        """What is indexed, what is stale, and which parts (FTS, vectors, provider) work.

        The index is checked page by page up to 512 MB, and at any size with ``deep``."""
        ms = self.settings.memory_search
        from memdir.index_identity import OLDER_STILL_RUNNING, newer_version, newer_version_words
        from memdir.workspace import discover

        found = discover(self.workspace, self.settings.extra_paths)
        postgres = ms.store.driver == "postgres"
        # A database index is looked up (opening it creates nothing but memdir's schema); a file is not opened.
        exists = self.store.read_meta() is not None if postgres else _index_file_there(self.index_path)
        store = self.store if exists or postgres else None
        if store is not None and not store.readonly:
            # Status reads every page (up to 512 MB; always with --deep): "all is well" must be true.
            problem = store.check(thorough=True, max_bytes=None if deep else STATUS_CHECK_MAX_BYTES)
            if problem:
                store.recover(problem, notice=self.notice)
                self._note_recovery(store)
        counts: dict[str, tuple[int, int]] = {}
        meta: dict[str, Any] = {}
        dirty_files: list[str] = []
        removed: list[str] = []
        waiting: list[Any] = []
        rebuild: str | None = None
        skipped: dict[str, dict[str, Any]] = {s.path: s.as_dict() for s in found.skipped}
        listed: list[Any] | None = None
        if store is None:  # never built: every file is to index (the indexer would open, so create, the index)
            listed = self._listed_without_index(found)
            dirty_files = [f.path for f in listed]
        if store:
            def read() -> tuple[Any, ...]:
                changed, gone = self.indexer.dirty_files()
                return (store.counts_by_source(), store.read_meta() or {}, changed, gone,
                        store.get_state(SKIPPED_STATE), self.indexer.waiting_for_growth(changed))

            counts, meta, changed, gone, last_skipped, waiting = self._healing(read)
            # a file with no index in it (left by a first build killed before it published, or by
            # an older status) is no index: "Store: …" said built, and the next index "no index yet"
            exists = bool(meta)
            if meta and newer_version(meta, store) is None:  # (a newer memdir's index is not rebuilt: said below)
                rebuild = self.indexer.settings_rebuild_reason(meta)
            dirty_files = [f.path for f in changed]
            removed = [p for p, _ in gone]
            for item in last_skipped or []:
                if isinstance(item, dict) and item.get("path") not in skipped:
                    skipped[item["path"]] = item
        out: dict[str, Any] = {
            "agentId": self.settings.agent_id,
            "workspace": str(self.workspace),
            "indexPath": store.location if postgres and store else str(self.index_path),
            # what names the index: "workspace" (no agent id chosen), "agent" or "path" (store.path)
            "indexKey": self.settings.index_key,
            "indexExists": exists,
            # what names transcripts and long-term memory: the chosen agent id, else the workspace
            # ("legacy": agent main's state, which this workspace used before state was keyed)
            **self._state_paths(),
            "sources": list(ms.sources),
            "extraPaths": [str(p) for p in self.settings.extra_paths],
            "files": sum(f for f, _ in counts.values()),
            "chunks": sum(c for _, c in counts.values()),
            # what a sync would index: every source's files (transcripts too), none of the memory
            # files when "memory" is not a source ("Indexed: 2/1 files" counted memory files only)
            "scannedFiles": len(self.indexer.list_files()[0] if listed is None else listed),
            "sourceCounts": [
                {"source": s, "files": counts.get(s, (0, 0))[0], "chunks": counts.get(s, (0, 0))[1]}
                for s in ms.sources
            ],
            "dirty": bool(dirty_files or removed or rebuild) or not exists,
            # What it means to a user: the next search (or a watcher) syncs first; not for transcripts
            # alone that grew less than the delta thresholds, which those syncs leave for later.
            "syncPending": bool(len(dirty_files) > len(waiting) or removed or rebuild) or not exists,
            # Why the next sync rebuilds the whole index (the settings changed since it was built);
            # "Dirty: no" hid an edited chunk size or tokenizer that no search had applied yet.
            "rebuildReason": rebuild,
            "dirtyFiles": dirty_files[:50],  # the first 50; the counts are of all of them
            "removedFiles": removed[:50],
            "dirtyCount": len(dirty_files),
            "removedCount": len(removed),
            # Of dirtyCount, the transcripts grown less than sync.sessions.deltaBytes / deltaMessages
            # since they were indexed: `memdir index` indexes them, searches and the watcher wait.
            "waitingCount": len(waiting),
            # Files that look like memory but could not be indexed; retried on every sync.
            "skipped": list(skipped.values()),
            "requestedProvider": ms.provider,
            "indexedWith": {k: meta.get(k) for k in ("provider", "model", "vectorDims", "builtAt")} if meta else None,
            "issues": [*found.issues, *unapplied_settings(self.settings)],
        }
        version = self.indexer.version_reason(meta, store) if meta else None
        newer = newer_version(meta, store) if meta else None
        # What a newer memdir wrote of the index ("chunker 19; this memdir's is 18"): no sync of this one
        # updates it, so its changed files are no sync pending ("the next search … syncs them" was untrue)
        out["newerVersion"] = newer
        if newer is not None and store is not None:
            out["syncPending"] = False
            out["issues"].append(newer_version_words(store.location, newer))
        elif version and store is not None and store.readonly:
            out["issues"].append(f"the index was written by another memdir version ({version}) and cannot be "
                                 "rebuilt here (read-only): searches read it as that version indexed the notes")
        elif version:  # (already dirty: rebuildReason names the version too)
            out["issues"].append(f"the index was written by an older memdir version ({version}): the next search, "
                                 "`memdir index` or the watcher rebuilds it, reusing its cached embeddings; "
                                 f"{OLDER_STILL_RUNNING}")
        if self.settings.state_key_kind == "workspace":
            out["issues"].extend(self._left_behind())
        if self.settings.long_term_memory.enabled and not _importable("lancedb"):
            # (status said nothing of it, and every long-term memory tool call failed)
            out["issues"].append("longTermMemory.enabled, but the LanceDB extra is not installed: pip install "
                                 "'memdir[lancedb]' (memory_recall, memory_store and memory_forget fail until it is)")
        sel = self.selection
        out["provider"] = sel.provider.id if sel.provider else "none"
        out["model"] = sel.provider.model if sel.provider else "fts-only"
        out["mode"] = sel.mode
        if _holds_other_vectors(meta, sel.provider):
            out["mode"] = "fts-only"  # what searches do until a rebuild ("hybrid" said the opposite)
            out["issues"].append(_stale_model_note(meta, sel.provider))
        elif sel.provider is None and sel.requested in DISABLED and meta.get("provider") not in (None, "none"):
            # ("Dirty: no", and the next `memdir index` rebuilt it, every vector dropped)
            out["issues"].append(f"the index holds {meta.get('provider')}/{meta.get('model')} vectors, and embeddings "
                                 f"are off here (provider {sel.requested}): searches use keywords only, and the next "
                                 "`memdir index` (or sync after a note changed) rebuilds it without vectors (their "
                                 "embeddings stay in the cache)")
        if sel.fallback_from:
            out["fallback"] = {"from": sel.fallback_from, "reason": sel.fallback_reason}
        if sel.unavailable_reason:
            out["providerUnavailableReason"] = sel.unavailable_reason
        recovered = self.recoveries[-1] if self.recoveries else store.get_state(RECOVERED_STATE) if store else None
        if recovered:
            out["recovered"] = recovered
        if store is not None and store.readonly:
            out["readOnly"] = _readonly_why(store)
        if self.watcher is not None:
            out["watch"] = self.watcher.state()
        if store:
            holder = self.indexer.lock.holder()
            if holder:
                from memdir.lock import stamped_pid
                from memdir.progress import read_progress

                progress = read_progress(self.index_path) or {}
                if progress.get("pid") == stamped_pid(holder):
                    keys = ("phase", "done", "total", "chunksDone", "chunksPlanned")
                    holder = {**holder, **{k: progress.get(k) for k in keys if k in progress}}
            out["writer"] = holder
            backend = store.describe()
            out["store"] = {k: v for k, v in backend.items() if k not in ("fts", "vector")}
            out["fts"] = {"enabled": True, **backend["fts"]}
            out["vector"] = {"enabled": ms.store.vector.enabled, "available": True, "vectors": store.vector_count(),
                             "dims": store.vec_dims(), **backend["vector"]}
            out["cache"] = {"enabled": ms.cache.enabled, "entries": store.cache_count(),
                            "maxEntries": ms.cache.max_entries}
            missing = out["chunks"] - out["vector"]["vectors"]
            if sel.provider is not None and ms.store.vector.enabled and missing > 0 and not _holds_other_vectors(
                    meta, sel.provider):
                # "Mode: hybrid" and nothing else said, while an embedding failure (no onnxruntime,
                # an outage) left text that only keywords find, and searches do not retry it
                out["issues"].append(f"{missing} of {out['chunks']} chunks have no vector (embedding failed or was "
                                     "refused when they were indexed): keywords alone find them; `memdir index` tries "
                                     "again")
        if deep and postgres and store is not None:
            facts = store.describe()
            out["postgres"] = {k: facts.get(k) for k in ("server", "pgvector", "schema", "schemaVersion")}
            out["embeddingProbe"] = self._probe_embeddings()
        elif deep:
            if store is not None and "sqlite" in out.get("store", {}):
                out["sqlite"] = out["store"]["sqlite"]
            else:
                from memdir import db

                out["sqlite"] = db.binding_name()
            out["embeddingProbe"] = self._probe_embeddings()
        held, probed = meta.get("vectorDims"), out.get("embeddingProbe", {}).get("dims")
        if held and probed and held != probed and meta.get("model") == out["model"]:
            out["issues"].append(f"the provider's vectors now have {probed} dimensions, the index's {held} (did the "
                                 "model change behind its name?): searches use keywords only until it is rebuilt")
        return out

    def _listed_without_index(self, found: Any) -> list[Any]:
        """What a first sync would index, listed without opening the index: status on a workspace
        never indexed made an empty index file, and every later status called it built."""
        files = list(found.files) if "memory" in self.settings.memory_search.sources else []
        for source in self._extra_sources():
            try:
                files += source.list_files()
            except OSError as exc:  # (a sync names it as skipped)
                log.debug("%s not listed: %s", source.name, exc)
        return files

    def _state_paths(self) -> dict[str, Any]:
        s = self.settings
        out: dict[str, Any] = {"stateKey": s.state_key, "stateKeyKind": s.state_key_kind,
                               "sessionsDir": str(s.sessions_dir)}
        try:
            from memdir.ltm.settings import db_path

            out["longTermMemoryPath"] = str(db_path(s))
        except Exception as exc:  # e.g. dbPath names an unset ${VAR}: long-term memory says so when used
            out["longTermMemoryPath"] = None
            log.debug("long-term memory path unknown: %s", exc)
        return out

    def _left_behind(self) -> list[str]:
        """Status notes on state a renamed or moved workspace left under its old key."""
        from memdir.settings_cache import resolve_store_path
        from memdir.state_key import left_behind

        s = self.settings
        try:
            return left_behind(s.state_path, self.workspace, s.state_key,
                               lambda key: resolve_store_path(s.memory_search.store.path, key, s.state_path))
        except OSError as exc:  # a state folder that cannot be listed: nothing to say about it
            log.debug("state of moved workspaces not looked for: %s", exc)
            return []

    def _probe_embeddings(self) -> dict[str, Any]:
        sel = self.selection
        if sel.provider is None:
            return {"ok": False, "error": sel.unavailable_reason or "No embedding provider available (FTS-only mode)"}
        from memdir.embeddings.remote import RemoteEmbeddingProvider

        t0 = time.perf_counter()
        try:
            if isinstance(sel.provider, RemoteEmbeddingProvider):
                # bounded as a query's embedding is, retries included: a server that accepted and
                # never answered held `status --deep` for the batch timeout of each attempt (6 minutes)
                vec = sel.provider.embed_batch(["ping"], timeout=sel.provider.settings.query_timeout)[0]
            else:
                vec = sel.provider.embed_batch(["ping"])[0]
            return {"ok": True, "dims": len(vec), "ms": round((time.perf_counter() - t0) * 1000, 1)}
        except Exception as exc:
            return {"ok": False, "error": one_line(exc)}

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        """Stop the watcher, let calls in progress in other threads finish (up to
        :data:`CLOSE_WAIT_SECONDS`; a sync stops before its next file), then close the index and
        the embedding provider it made (one passed as ``provider=`` is left to the caller); calls
        made afterwards raise :class:`MemoryClosed`.  Closing twice does nothing more."""
        self._close(bootstrap_wait=BOOTSTRAP_WAIT_SECONDS, calls_wait=CLOSE_WAIT_SECONDS)

    def _close(self, *, bootstrap_wait: float, calls_wait: float) -> None:
        with self._calls_changed:
            self._closed = True
        watcher, self.watcher = self.watcher, None  # (taken, not read twice: two threads may close)
        if watcher is not None:
            watcher.stop()
        bootstrap = self._bootstrap
        if bootstrap is not None:
            bootstrap.join(bootstrap_wait)  # a first index still building in the background
        self._wait_for_calls(calls_wait)
        with self._long_term_lock:  # (after one being opened now: it is closed too)
            long_term, self._long_term = self._long_term, None
        if long_term is not None:
            long_term.close()
        store, self._store, self._indexer = self._store, None, None
        if store is not None:
            store.close()
        # (a provider passed in is the caller's, perhaps shared by several Memory objects: closing
        # it with the first left the others' searches and syncs keyword-only, "provider is closed")
        if self._selection is not None and self._selection.provider is not None and self._provider_override is None:
            try:
                self._selection.provider.close()
            except Exception:
                pass

    def _wait_for_calls(self, timeout: float) -> None:
        """Until no other thread is in a call (this one may be: closing from inside a callback)."""
        me = threading.get_ident()
        deadline = time.monotonic() + timeout
        with self._calls_changed:
            while any(thread != me for thread in self._calls):
                left = deadline - time.monotonic()
                if left <= 0:
                    log.warning("closing %s with calls still running in other threads", self.workspace)
                    return
                self._calls_changed.wait(left)

    def __reduce__(self) -> Any:
        """Refused in words: a Memory holds an open index, locks and threads, so passing one to
        ``multiprocessing`` (or ``copy``) failed with "cannot pickle '_thread.RLock' object"."""
        raise TypeError("a Memory cannot be pickled or copied (it holds an open index, locks and threads): "
                        "make one in each process, Memory(...) with the same arguments")

    def __enter__(self) -> Self:  # (a host's subclass stays itself in its with block)
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GetResult", "IndexOwnershipError", "Memory", "PathError"]


def __getattr__(name: str) -> Any:
    # PathError lives with discovery (memdir.workspace), which a search does not import
    if name == "PathError":
        from memdir.workspace import PathError

        return PathError
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name, obj=sys.modules[__name__])


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
