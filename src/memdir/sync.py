"""Keeping the index in step with the files (R§6), incrementally and safely.

* Unchanged files cost one ``stat`` (size, mtime and ctime: :func:`memdir.workspace.change_stamp`);
  changed ones are hashed (SHA-256) and re-chunked only if their content differs; vanished files
  are deleted.
* Only chunks whose text is new are embedded: vectors come from the embedding cache, keyed by
  (provider, model, provider key, chunk hash).
* When the index identity changes (provider, model, key, dims, chunking, sources, tokenizer,
  extra paths) the whole index is rebuilt in a temporary database and swapped in atomically; the
  old index answers searches until then, and a crash leaves it intact.
* A provider that is only *temporarily* missing never triggers that rebuild: the index keeps
  its vectors, new text is indexed for keywords and embedded once the provider is back.
"""

from __future__ import annotations

import hashlib
import os
import stat
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memdir.build_worker import ChunkWorker, plan
from memdir.chunking import Chunk, chunk_id, embedding_windows, sha256_text
from memdir.dates import file_date
from memdir.embeddings.base import EmbeddingProvider, one_line, split_by_bytes
from memdir.embeddings.errors import EmbeddingTimeoutError
from memdir.errors import (
    IndexFromNewerMemdir,
    IndexOwnershipError,
    MemdirError,
    MemoryClosed,
    folder_identity,
    holds_nothing,
    owned_by_other,
    ownership_message,
)
from memdir.index_identity import (
    SETTINGS_KEYS,
    changed_reason,
    differs,
    newer_version,
    newer_version_words,
    settings_identity,
    settings_rebuild_reason,
    version_reason,
)
from memdir.indexing_switches import INDEXING
from memdir.lock import (
    LockTimeout,
    WriterLockLost,
    is_this_process,
    resume_advice,
    wait_for_writer,
    writer_words,
    writing_words,
)
from memdir.progress import ProgressFile
from memdir.reading import BinaryNote, binary_note, encrypted_note, read_note
from memdir.stores.base import OWNER_FOLDER_STATE, OWNER_STATE, RECOVERED_STATE, SKIPPED_STATE, ChunkRow, Store
from memdir.timezones import resolve_timezone
from memdir.workspace import (
    Discovery,
    FileEntry,
    Skipped,
    decode_note,
    discover,
    display_path,
    is_unlisted,
    restat,
    valid_name,
)

if TYPE_CHECKING:
    import numpy as np

    from memdir.config import Settings

FTS_ONLY_MODEL = "fts-only"


#: ``progress(files_done, files_total, label)``; the label is a :class:`ProgressLabel` (a str that
#: carries the chunk counts).  Typed as such, or a callback reading ``label.chunks_done``, as the
#: README shows, failed mypy where it was passed ('incompatible type "Callable[[int, int,
#: ProgressLabel], None]"'); one taking a plain str is still accepted.
Progress = Callable[[int, int, "ProgressLabel"], None]
Notice = Callable[[str], None]

#: A full rebuild of at least this many bytes of files is chunked and stemmed in a second process
#: (:mod:`memdir.build_worker`) while this one writes the index; a smaller one is over before the
#: worker would have started.
WORKER_MIN_BYTES = 2_000_000
#: Reads of the runnable-task count before :func:`free_core` calls the other cores busy.
FREE_CORE_SAMPLES = 5
#: How often a first keyword-only build commits what it wrote so far (seconds; see _full_reindex).
KEYWORD_PUBLISH_INTERVAL = 2.0
#: About how many bytes of files the worker is asked to read at a time, and how many such
#: batches it is given ahead of the one being written.
WORKER_BATCH_BYTES = 64_000
WORKER_AHEAD = 8


@dataclass
class SyncReport:
    full: bool = False
    reason: str = ""
    scanned: int = 0
    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    embedded: int = 0
    cache_hits: int = 0
    incomplete: bool = False
    deferred: int = 0
    warnings: list[str] = field(default_factory=list)
    #: Files that could not be indexed this time (``{"path", "error"}``); retried on the next sync.
    skipped: list[dict[str, str]] = field(default_factory=list)
    seconds: float = 0.0
    #: The provider error that made this sync index some text for keywords only.
    embedding_error: BaseException | None = field(default=None, repr=False)
    #: Set when the sync switched to the configured fallback provider: ``{from, to, reason}``.
    fallback: dict[str, str] | None = None

    def as_dict(self) -> dict[str, Any]:
        return {k: v for k, v in self.__dict__.items() if k != "embedding_error"}


@dataclass
class PlannedChunk:
    """A chunk about to be written: when it was written, the days it is about, what gets embedded."""

    chunk: Chunk
    ts: int | None
    date_start: str | None
    date_end: str | None
    #: The text pieces the embedder reads (one unless the chunk is longer than the model's window).
    windows: list[str]
    #: The keyword index's values for the text, when computed ahead (:mod:`memdir.build_worker`).
    fts: tuple[str, str] | None = None
    #: ``(model, chunk id)`` when the id was computed ahead for that model (:mod:`memdir.build_worker`).
    model_id: tuple[str, str] | None = None


def _estimate_tokens(lines: list[str]) -> list[int]:
    """Token counts when the provider cannot count: ~3 characters a token errs on the safe side."""
    return [len(line) // 3 + 1 for line in lines]


@dataclass
class SourceDoc:
    """A file's indexable content: text, and for transcripts the map back to source lines."""

    content: str
    hash: str
    line_map: list[int] | None = None
    #: Per content line, when it was written (ms since the epoch, 0 = unknown): transcripts only.
    timestamps_ms: list[int] | None = None


def read_memory_file(entry: FileEntry) -> SourceDoc | None:
    try:
        # a FIFO or device is refused, never opened; no folder on the way from its root is followed
        raw = read_note(entry.abs_path, entry.root)
    except FileNotFoundError:
        return None  # vanished between listing and reading: not an error (R§2)
    encrypted = encrypted_note(raw) or binary_note(raw)
    if encrypted is not None:  # its ciphertext was indexed as text: searches cited binary noise
        raise encrypted
    return SourceDoc(decode_note(raw), hashlib.sha256(raw).hexdigest())


def _check_workspace_there(workspace: Path) -> None:
    """Refuse to sync a workspace folder that is gone (renamed, moved, deleted, its drive
    unmounted) while memdir runs: found empty, every note was removed from the index, and searches
    answered nothing without a word (the next start refuses it as a configuration error)."""
    try:
        if stat.S_ISDIR(os.stat(workspace).st_mode):
            return
        what = "is no longer a folder"
    except FileNotFoundError:
        what = "no longer exists (moved, renamed or deleted?)"
    except OSError as exc:
        what = f"cannot be reached ({exc.strerror or exc})"
    raise MemdirError(f"workspace {workspace} {what}: its index keeps what it holds until the folder is back; "
                      "for a moved workspace, run memdir there")


def running_tasks() -> int | None:
    """Tasks runnable at this instant, this one included (``/proc/loadavg``'s 4th field), or
    ``None`` where there is no such file."""
    try:
        with open("/proc/loadavg", encoding="ascii") as fh:
            return int(fh.read().split()[3].split("/")[0])
    except (OSError, ValueError, IndexError):
        return None


def free_core() -> bool:
    """Whether a second process would get a core of its own: this machine has two or more (that
    this process may use) and either nothing else runs right now or the last minute's load left
    one idle.  When the other cores are busy, the worker only adds its overhead (~15% more CPU
    for the same wall time, measured on 2 cores with one taken); when one is idle it halves the
    main process's CPU.  The instant count matters because the minute's average also holds this
    very process's own recent work (a bench or an agent that just indexed reads ~1 on an idle
    second core).  It is read a few times, 1 ms apart: one instant can catch a passing task (about
    1 read in 150 on an idle machine), while a core kept busy by other work shows in every read."""
    from memdir.cpus import usable_cpus

    cores = usable_cpus()  # (a CPU quota counts: under docker --cpus=1 a worker only shares the one)
    if cores < 2:
        return False
    for sample in range(FREE_CORE_SAMPLES):
        if sample:
            time.sleep(0.001)
        running = running_tasks()
        if running is None:
            break
        if running - 1 <= cores - 2:
            return True
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # Windows: no load average, assume the usual idle core
        return True
    return load <= cores - 1


@dataclass
class _Loaded:
    """A file read ahead of its turn (only its hash is kept when a worker chunked it)."""

    doc: SourceDoc | None


def _why(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    if isinstance(exc, MemoryError):  # ("MemoryError: " and nothing more)
        from memdir.errors import OUT_OF_MEMORY

        return OUT_OF_MEMORY
    return f"{type(exc).__name__}: {exc}"


#: While one large batch (a big file) is embedded, the progress callback is called at most this
#: often (seconds): a time check per run of texts the model embeds, no more.
CHUNK_PROGRESS_INTERVAL = 0.2


class ProgressLabel(str):
    """The ``label`` a :data:`Progress` callback ``progress(files_done, files_total, label)`` gets.

    A plain string, so callbacks written for file counts keep working; once chunks are known it
    reads "Indexing memory files… 3,400/25,000 chunks", and ``chunks_done`` / ``chunks_planned``
    carry those counts for programs: chunks written (inside a batch being embedded: the share of
    it embedded so far) out of the chunks of the files read so far (it grows as files are read).
    Besides the call after each batch is written, the callback is called while a large batch (one
    big file) is being embedded, with ``files_done`` unchanged, at most every
    :data:`CHUNK_PROGRESS_INTERVAL` seconds, so the counts move inside one file; that call comes
    in the middle of a write, so the callback must not use the index.
    """

    text: str
    chunks_done: int
    chunks_planned: int
    #: What ``files_done`` counts: files, but cache entries while ``memdir migrate`` copies the cache.
    unit: str

    def __new__(cls, text: str, chunks_done: int = 0, chunks_planned: int = 0, unit: str = "files") -> ProgressLabel:
        label = super().__new__(cls, f"{text} {chunks_done:,}/{chunks_planned:,} chunks" if chunks_planned else text)
        label.text, label.chunks_done, label.chunks_planned, label.unit = text, chunks_done, chunks_planned, unit
        return label


class _Tracker:
    """Sends progress to the ``<index>.progress`` file and the caller's callback: called after a
    batch is committed (a :data:`Progress`), :meth:`within` while one is being embedded."""

    def __init__(self, file: ProgressFile, callback: Progress | None) -> None:
        self.file = file
        self.callback = callback

    def __call__(self, done: int, total: int, label: str) -> None:
        label = label if isinstance(label, ProgressLabel) else ProgressLabel(label)
        chunks = (label.chunks_done, label.chunks_planned)
        self.file.update(done, total, chunks if chunks[1] else None)
        if self.callback is not None:
            self.callback(done, total, label)

    def within(self, done: int, total: int, label: ProgressLabel) -> None:
        self.file.update_chunks(label.chunks_done, label.chunks_planned)  # no commit mid-batch
        if self.callback is not None:
            self.callback(done, total, label)


def _embed_float32(provider: EmbeddingProvider, texts: list[str],
                   progress: Callable[[str, int, int], None] | None, timeout: float | None = None) -> list[np.ndarray]:
    """The provider's vectors for ``texts`` as float32 arrays (what the store writes, bit for bit).

    A provider with ``embed_matrix`` (the local model) hands over one float32 matrix, whose rows
    are used as they are; another one's lists are converted (and dropped) at once.  Only an
    ``embed_matrix`` its class defines at or below its ``embed_batch`` is used: a wrapper that
    adds its own ``embed_batch`` (a memo, a filter) and passes other names on through
    ``__getattr__`` or inheritance is never bypassed.  ``timeout`` (seconds) bounds a provider
    whose ``embed_batch`` takes one (the remote ones)."""
    import numpy as np

    kwargs: dict[str, Any] = {"progress": progress} if progress is not None else {}
    if timeout is not None and _takes(provider, "timeout"):
        kwargs["timeout"] = timeout
    matrix_owner, batch_owner = _defined_by(provider, "embed_matrix"), _defined_by(provider, "embed_batch")
    if matrix_owner is not None and batch_owner is not None and issubclass(matrix_owner, batch_owner):
        return list(provider.embed_matrix(texts, **kwargs))  # type: ignore[attr-defined]
    return [np.asarray(v, dtype=np.float32) for v in provider.embed_batch(texts, **kwargs)]


def _defined_by(obj: object, name: str) -> type | None:
    """The class in ``obj``'s MRO that defines ``name`` (``None``: only ``__getattr__`` might)."""
    return next((cls for cls in type(obj).__mro__ if name in vars(cls)), None)


def _joined(parts: list[np.ndarray]) -> np.ndarray:
    """A chunk's window vectors, one after the other (NumPy imported only when there are some)."""
    import numpy as np

    return np.concatenate(parts)


def _takes_progress(provider: EmbeddingProvider) -> bool:
    """Whether ``provider.embed_batch`` reports how far it got (``progress=``: local and remote)."""
    return _takes(provider, "progress")


def _takes(provider: EmbeddingProvider, name: str) -> bool:
    """Whether ``provider.embed_batch`` takes the keyword argument ``name``."""
    import inspect

    try:
        return name in inspect.signature(provider.embed_batch).parameters
    except (TypeError, ValueError):
        return False


class VectorWidthChanged(Exception):
    """The provider's vectors are not as wide as the ones the index (or this build) holds.

    Raised before anything of the batch is written or cached: an index must never hold vectors of
    two widths (a search can only compare one).  :meth:`Indexer.sync` answers with a full rebuild,
    as for any other change of the index identity."""

    def __init__(self, held: int, got: int) -> None:
        super().__init__(f"vector dims changed ({held} → {got})")
        self.held, self.got = held, got


#: HTTP statuses saying the request was refused for what it carried (too long an input), not
#: for who sent it or where: the one text at fault is left without a vector, not its whole batch.
REFUSED_INPUT_STATUSES = (400, 413, 422)
#: Characters of a refused text sent alone to tell "this input is refused" from "every request is".
PROBE_CHARS = 64


def _refused(exc: BaseException) -> bool:
    return getattr(exc, "status", None) in REFUSED_INPUT_STATUSES


def _embed_sparing(provider: EmbeddingProvider, texts: list[str],
                   progress: Callable[[str, int, int], None] | None, timeout: float | None = None
                   ) -> tuple[list[np.ndarray | None], BaseException | None]:
    """:func:`_embed_float32`, except that texts the provider refuses (e.g. longer than a model
    behind an OpenAI-compatible URL takes: 400/413/422) get ``None`` instead of failing the rest.

    Why: one such chunk failed its whole batch (64 chunks kept for keywords only, at every sync)
    and made every full rebuild fail, for good.  A refusal is only blamed on the inputs when a
    short piece of one of them goes through; otherwise (a wrong model name, say) it is raised as
    before.  The refused texts are then found by halving (a few requests per refused text).
    Returns the vectors (``None`` for a refused text) and the refusal, if there was one."""
    try:
        return list(_embed_float32(provider, texts, progress, timeout)), None
    except Exception as exc:
        if not _refused(exc):
            raise
        try:
            _embed_float32(provider, [min(texts, key=len)[:PROBE_CHARS]], None, timeout)
        except Exception:
            raise exc from None
        return _isolate_refused(provider, texts, timeout), exc


def _isolate_refused(provider: EmbeddingProvider, texts: list[str],
                     timeout: float | None = None) -> list[np.ndarray | None]:
    """Vectors of ``texts``, known to hold a refused one, found by halving (``None``: refused)."""
    if len(texts) == 1:
        return [None]
    out: list[np.ndarray | None] = []
    for half in (texts[: len(texts) // 2], texts[len(texts) // 2:]):
        try:
            out.extend(_embed_float32(provider, half, None, timeout))
        except Exception as exc:
            if not _refused(exc):
                raise
            out.extend(_isolate_refused(provider, half, timeout))
    return out


class Indexer:
    """Writes the index for one workspace; holds the writer lock while it does."""

    def __init__(self, settings: Settings, store: Store, provider: EmbeddingProvider | None,
                 *, provider_transiently_missing: bool = False,
                 extra_sources: Sequence[Any] = (), notice: Notice | None = None,
                 closing: Callable[[], bool] | None = None):
        self.settings = settings
        #: Whether the owner is being closed (or the watcher running this sync stopped): a sync then
        #: stops before its next file (what was committed stays; a rebuild leaves the index as it
        #: was) instead of running for minutes.
        self.closing = closing
        self.store = store
        self.provider = provider
        self.transient_missing = provider_transiently_missing
        self.extra_sources = list(extra_sources)
        self.notice = notice
        self.lock = store.writer_lock()
        # (a write per batch, an atomic rename each, was ~3% of a 10k-chunk build)
        self.progress_file = ProgressFile(Path(settings.index_path), workspace=str(settings.workspace_path),
                                          min_interval=0.5)
        self._skipped: list[Skipped] = []
        #: What the last listing could not look at (see :attr:`memdir.workspace.Discovery.unlisted`).
        self._unlisted: list[str] = []
        #: Extra sources (transcripts) whose folder could not be listed: their indexed files are kept.
        self._unlisted_sources: set[str] = set()
        #: Listed files the running sync could not read (``(path, source)``; see :meth:`_carry_over`).
        self._unread: set[tuple[str, str]] = set()
        #: Width of the vectors in the index being written (its meta's, else the first written).
        self._width: int | None = None
        #: A full build whose provider has not told its width yet: ask it once (see _learn_width).
        self._probe_width = False
        #: The embedding error that made this sync index text for keywords only, how many chunks
        #: so far, and where its warning is.
        self._failed: tuple[BaseException, int, int] | None = None
        #: The provider's token counter failed this sync (see :meth:`_windows`).
        self._uncounted = False
        #: When the running sync must end (monotonic; a sync before a search has a budget).
        self._deadline: float | None = None
        #: The last reusable listing of memory files, with what it was listed for.
        self._listing: tuple[tuple[str, tuple[str, ...]], Discovery] | None = None
        #: ``(rows, files, unlisted, changed, gone)`` of the last :meth:`dirty_files`.
        self._dirty_memo: tuple[Any, list[FileEntry], Any, list[FileEntry], list[tuple[str, str]]] | None = None
        #: The next sync, a search's or a watcher's too, looks for notes listed without their text
        #: (:meth:`_textless`), as every other sync does: set by a search that found nothing.
        self.check_text = False

    # -- identity ----------------------------------------------------------------------------
    def identity(self) -> dict[str, Any]:
        p = self.provider
        return {
            **self._settings_identity(),
            "provider": p.id if p else "none",
            "model": p.model if p else FTS_ONLY_MODEL,
            "providerKey": p.provider_key if p else None,
            "vectorDims": p.dims if p else None,
        }

    def _settings_identity(self) -> dict[str, Any]:
        """The part of :meth:`identity` that follows from the settings alone (no provider needed)."""
        return settings_identity(self.settings)

    def settings_rebuild_reason(self, meta: dict[str, Any]) -> str | None:
        """See :func:`memdir.index_identity.settings_rebuild_reason` (checked before every search)."""
        return settings_rebuild_reason(self.settings, self.store, meta)

    def rebuild_reason(self, meta: dict[str, Any] | None) -> str | None:
        """Why a full reindex is needed, or ``None`` when an incremental sync will do."""
        if meta is None:
            return "no index yet"
        ident = self.identity()
        if self.provider is None and self.transient_missing and meta.get("provider") not in (None, "none"):
            ident = {**ident, **{k: meta.get(k) for k in ("provider", "model", "providerKey", "vectorDims")}}
        for key in ("schema", "chunker", "provider", "model", "providerKey", *SETTINGS_KEYS[2:]):
            if differs(key, meta, ident, self.settings):
                return changed_reason(key, meta, ident)
        if ident.get("vectorDims") and meta.get("vectorDims") and ident["vectorDims"] != meta["vectorDims"]:
            return f"vector dims changed ({meta['vectorDims']} → {ident['vectorDims']})"
        store_reason = getattr(self.store, "rebuild_reason", None)  # a backend's own settings (PostgreSQL's)
        return store_reason() if store_reason is not None else None

    version_reason = staticmethod(version_reason)

    @property
    def model_name(self) -> str:
        if self.provider is not None:
            return self.provider.model
        meta = self.store.read_meta() or {}
        if self.transient_missing and meta.get("model"):
            return str(meta["model"])
        return FTS_ONLY_MODEL

    # -- entry points ------------------------------------------------------------------------
    def sync(self, *, force: bool = False, reason: str = "cli", progress: Progress | None = None,
             deadline: float | None = None, lock_timeout: float | None = None) -> SyncReport:
        """Bring the index up to date; ``deadline`` (monotonic) bounds an incremental sync."""
        started = time.monotonic()
        self._acquire(lock_timeout)
        try:
            self._follow_replaced_index()
            meta = self.store.read_meta()
            newer = None if force else newer_version(meta, self.store)
            if newer is not None:  # (`memdir index --force` is how a user goes back to this version)
                raise IndexFromNewerMemdir(newer_version_words(self.store.location, newer))
            self._claim(meta)  # first thing under the lock: a racing workspace is told at once
            self.store.cleanup_leftovers()
            why = "forced" if force else self.rebuild_reason(meta)
            tracked = self._tracked(progress)
            if why is None:
                try:
                    self.progress_file.start("incremental")
                    report = self._incremental(self.store, tracked, deadline, lazy=reason in ("search", "watch"))
                except VectorWidthChanged as exc:  # the provider's model changed behind its name
                    why = str(exc)
            if why is not None:
                # With a previous index to protect, an embedding failure aborts the rebuild (the old
                # index keeps serving); with nothing to lose, text is indexed for keywords anyway.
                try:
                    report = self._full_reindex(why, tracked, strict=meta is not None)
                except VectorWidthChanged as exc:  # cached vectors of the old width met new ones:
                    why = str(exc)  # now that the provider's width is known, they are left out
                    report = self._full_reindex(why, tracked, strict=meta is not None)
            else:
                cache = self.settings.memory_search.cache
                if cache.enabled and cache.max_entries and report.embedded:
                    with self.store.transaction():
                        self.store.cache_prune(cache.max_entries)
                if (report.indexed or report.removed) and not report.incomplete:
                    self.store.optimize()  # (a removal too: the SQLite WAL holds the text it removed)
            report.reason = reason if not report.full else f"{reason}: {why}"
        finally:
            try:
                self.progress_file.clear()
            finally:  # even when interrupted there (Ctrl-C): a lock left held stalls every later sync
                self.lock.release()
        report.seconds = time.monotonic() - started
        return report

    def _acquire(self, lock_timeout: float | None) -> None:
        """Take the writer lock; when that means waiting indefinitely, say for whom (once)."""
        if self.lock.acquire(0):
            return
        if lock_timeout is None and self.notice is not None:
            holder = self._writer_elsewhere()
            if holder is None:
                return  # taken meanwhile
            if holder is not False:
                stopped = (f"; it is stopped (Ctrl-Z or SIGSTOP): {resume_advice(holder['pid'])}"
                           if holder.get("stopped") else "")
                self.notice(f"waiting for {writer_words(holder)} to finish writing {self.store.location}{stopped}")
        if lock_timeout == 0:
            raise LockTimeout(writing_words(self.lock, self.store.location))
        # (a watcher stopped or a Memory closed meanwhile stops waiting: Ctrl-C on `memdir watch`
        # while another process wrote the index took 20 s to exit)
        wait_for_writer(self.lock, lock_timeout, self.store.location, between=self._stop_if_closing)

    def _writer_elsewhere(self) -> dict[str, Any] | Literal[False] | None:
        """Who holds the writer lock, to say whom a sync waits for; ``False`` when that is no news
        (threads of this process, e.g. a watcher's sync: the wait is short); ``None`` when the
        lock was free by then, and is taken now.

        Why the second looks: threads sharing one Memory hand the lock on within microseconds,
        and one looking just then saw it free, or held with no note yet, and said "waiting for
        another process (the lock does not say which)".  A holder whose note is still missing a
        moment later is told as such."""
        for look in range(3):
            if self.lock.held_here():
                return False
            holder = self.lock.holder()
            if holder is None:
                if self.lock.acquire(0):
                    return None
                continue
            if is_this_process(holder):
                return False
            if "pid" in holder or look == 2:
                return holder
            time.sleep(0.01)
        return False  # free at every look: threads of this process took turns (no other process has it)

    def _still_writer(self) -> None:
        """Before each write: stop if another process became the index's writer meanwhile (this
        one's lock file was deleted or replaced, or its database session closed: see the locks'
        ``still_held``)."""
        if not self.lock.still_held():
            how = getattr(self.lock, "how_lost", "was deleted or replaced during this sync and could not be taken "
                                                 "again (another memdir process holds it now, or its folder cannot "
                                                 "be written)")
            raise WriterLockLost(f"the writer lock of {self.store.location} {how}: this sync stopped (what it wrote "
                                 "stays; run it again)")

    def _stop_if_closing(self) -> None:
        if self.closing is not None and self.closing():
            raise MemoryClosed(f"the sync of {self.store.location} stopped: its Memory is being closed")

    def _follow_replaced_index(self) -> None:
        """Under the writer lock: if the index file was deleted (its state folder removed) or
        replaced since it was opened, open the one at its path now (a new, empty one if none).

        Why: a long-running process (a watcher, ``memdir mcp``) otherwise kept indexing into a
        file that no longer had a name, and every other process found no index."""
        replaced = getattr(self.store, "replaced", None)  # (a file-backed store only)
        if replaced is None or not replaced():
            return
        if self.notice is not None:
            self.notice(f"the index {self.store.location} was deleted or replaced while in use: opening it again")
        self.store.reopen()  # type: ignore[attr-defined]

    def follow_replaced_index(self) -> None:
        """:meth:`_follow_replaced_index` before a search, when the writer lock is free (a sync
        holding it follows the file itself): the search then sees the index at the path, and a
        missing one is built as any first index is, not by a full rebuild inside the search."""
        replaced = getattr(self.store, "replaced", None)
        if replaced is None or not replaced():
            return
        if self.store.readonly:  # (a read-only state folder has no lock to take, and nothing is written)
            self._follow_replaced_index()
            return
        try:
            if not self.lock.acquire(0):
                return
        except OSError:
            return
        try:
            self._follow_replaced_index()
        finally:
            self.lock.release()

    def _claim(self, meta: dict[str, Any] | None) -> None:
        """Check, under the writer lock, that this index is ours, and claim it if nobody has.

        Two workspaces configured with the same agent id and started together both found no
        index, and one then wrote its notes into the other's; the claim is made under the lock
        before anything is written, so the second one is refused instead.
        """
        mine = str(self.settings.workspace_path)
        owner = (meta or {}).get("workspace") or self.store.get_state(OWNER_STATE)
        folder = self.store.get_state(OWNER_FOLDER_STATE)
        if owned_by_other(owner, mine, lambda: folder):
            raise IndexOwnershipError(ownership_message(self.store.location, owner, mine,
                                                        empty=holds_nothing(self.store)), owner)
        here = folder_identity(mine)  # (recorded so another container's path to this folder is known as its)
        if not owner or (here is not None and here != folder):
            with self.store.transaction():
                if not owner:
                    self.store.set_state(OWNER_STATE, mine)
                if here is not None:
                    self.store.set_state(OWNER_FOLDER_STATE, here)

    def _tracked(self, progress: Progress | None) -> Progress:
        return _Tracker(self.progress_file, progress)

    # -- scanning ----------------------------------------------------------------------------
    def list_files(self, *, reuse: bool = False) -> tuple[list[FileEntry], list[str]]:
        """Every file to index, and the problems met listing them.

        ``reuse``: take the memory files from the last listing, re-stat'ed, while no folder in it
        has changed (:func:`memdir.workspace.restat`); the read-your-writes check before a search.
        """
        workspace, extra = self.settings.workspace_path, self.settings.extra_paths
        key = (str(workspace), tuple(str(p) for p in extra))
        last = self._listing
        reused = last[1] if reuse and last is not None and last[0] == key else None
        files = restat(reused) if reused is not None else None
        if files is not None and reused is not None:
            # a listing is reused only when it had no issues and skipped nothing but symlinks
            issues: list[str] = []
            self._skipped, self._unlisted = list(reused.skipped), []
        else:
            found = discover(workspace, extra)
            if not found.files and "memory" in self.settings.memory_search.sources:
                _check_workspace_there(workspace)
            self._listing = (key, found) if found.folders is not None else None
            files = list(found.files)
            self._skipped, self._unlisted = list(found.skipped), list(found.unlisted)
            issues = list(found.issues)
        if "memory" not in self.settings.memory_search.sources:
            files, self._skipped, self._unlisted = [], [], []
        self._unlisted_sources = set()
        for source in self.extra_sources:
            try:
                entries = source.list_files()
            except OSError as exc:  # a transcripts folder made unreadable: keep what is indexed
                reason = exc.strerror or str(exc)
                issues.append(f"{source.name} directory not accessible: {reason}")
                self._skipped.append(Skipped(source.name, f"folder not readable: {reason}"))
                self._unlisted_sources.add(source.name)
                continue
            for entry in entries:
                if valid_name(entry.path):
                    files.append(entry)
                else:  # e.g. a transcript whose name is not UTF-8: the index cannot store its path
                    self._skipped.append(Skipped(display_path(entry.path), "file name is not valid UTF-8"))
            issues.extend(source.issues())
        return files, issues

    def _source(self, name: str) -> Any:
        return next((s for s in self.extra_sources if s.name == name), None)

    def load(self, entry: FileEntry) -> SourceDoc | None:
        source = self._source(entry.source)
        return source.load(entry) if source is not None else read_memory_file(entry)

    def dirty_files(self, *, reuse: bool = False) -> tuple[list[FileEntry], list[tuple[str, str]]]:
        """Files whose stat differs from the index, and indexed paths that no longer exist
        (``reuse``: see :meth:`list_files`)."""
        files, _ = self.list_files(reuse=reuse)
        rows = self.store.file_rows()
        unlisted = (tuple(self._unlisted), frozenset(self._unlisted_sources))
        memo = self._dirty_memo
        if (memo is not None and memo[0] is rows and memo[2] == unlisted and len(memo[1]) == len(files)
                and all(a is b for a, b in zip(memo[1], files, strict=True))):
            # The same index rows and the very entries the listing gave last time (a re-stat keeps
            # an unchanged file's entry): the same answer, without comparing every file again.
            return list(memo[3]), list(memo[4])
        changed = [f for f in files if rows.get((f.path, f.source), ("", -1, -1))[1:] != (f.mtime_ns, f.size)]
        gone = self._gone(rows, files)
        self._dirty_memo = (rows, files, unlisted, changed, gone)
        return list(changed), list(gone)

    def waiting_for_growth(self, changed: list[FileEntry]) -> list[FileEntry]:
        """Of ``changed``, the indexed transcripts grown less than the delta thresholds
        (``sync.sessions``): a search's or a watcher's sync leaves them for later, ``memdir index``
        indexes them (status said "the next search or the watcher syncs them", and went on saying
        it after every search)."""
        if not self.extra_sources:
            return []
        rows = self.store.file_rows()
        out = []
        for f in changed:
            known, source = rows.get((f.path, f.source)), self._source(f.source)
            if known and source is not None and source.defer(f, known[2]):
                out.append(f)
        return out

    def _gone(self, rows: dict[tuple[str, str], Any], files: list[FileEntry]) -> list[tuple[str, str]]:
        """Indexed files the last listing did not find, but for memory files in a folder (or
        themselves) that could not be looked at: their notes were not deleted, and a folder made
        unreadable (a chmod, an unmounted share) used to drop them from the index without a word."""
        present = {(f.path, f.source) for f in files}
        return [key for key in rows if key not in present and not self._unlisted_key(key)]

    def _unlisted_key(self, key: tuple[str, str]) -> bool:
        """Whether an indexed file sits where the last listing could not look (kept, not gone)."""
        return key[1] in self._unlisted_sources or (key[1] == "memory" and is_unlisted(key[0], self._unlisted))

    @property
    def listing_skipped(self) -> list[Skipped]:
        """What the last listing skipped (a folder it could not look in, a name that is not UTF-8)."""
        return list(self._skipped)

    @property
    def kept_unread(self) -> bool:
        """Whether the last sync could not read a changed file (grown past the size limit, made
        unreadable) and kept what the index held of it: its results may cite lines that moved."""
        return bool(self._unread)

    def _textless(self, store: Store, files: list[FileEntry], rows: dict[tuple[str, str], Any]
                  ) -> set[tuple[str, str]]:
        """The notes the index lists as indexed as they are now but holds no text of, while they
        hold some: read again (see :meth:`memdir.stores.sqlite.SqliteStore.textless_files`; a
        search for their words found nothing, and nothing said the index was wrong).  Notes of
        blank lines, which have no chunk, are not."""
        self.check_text = False
        textless = getattr(store, "textless_files", None)
        found = textless() if textless is not None else set()
        if not found:
            return set()
        out = set()
        for f in files:
            key = (f.path, f.source)
            if key not in found or f.source != "memory" or rows.get(key, ("", -1, -1))[1:] != (f.mtime_ns, f.size):
                continue  # (one changed since is read again anyway)
            try:
                doc = self.load(f)
            except Exception:
                continue
            if doc is not None and doc.content.strip():
                out.add(key)
        return out

    # -- incremental -------------------------------------------------------------------------
    def _incremental(self, store: Store, progress: Progress | None, deadline: float | None,
                     *, everything: bool = False, lazy: bool = False, strict: bool | None = None) -> SyncReport:
        report = SyncReport()
        strict = everything if strict is None else strict
        held = None if everything else (store.read_meta() or {}).get("vectorDims")
        self._width = held if isinstance(held, int) and held > 0 else None
        self._probe_width = everything
        self._failed = None
        self._uncounted = False
        self._deadline = deadline
        self._unread = set()
        files, _ = self.list_files()
        report.scanned = len(files)
        rows = {} if everything else store.file_rows()
        needs_vectors = store.paths_missing_vectors() if self.provider is not None and not everything else set()
        if not everything and (not lazy or self.check_text):
            needs_vectors |= self._textless(store, files, rows)
        todo: list[FileEntry] = []
        touched: list[tuple[FileEntry, str]] = []
        for f in files:
            known = rows.get((f.path, f.source))
            if known and known[1:] == (f.mtime_ns, f.size) and (f.path, f.source) not in needs_vectors:
                report.unchanged += 1
                continue
            source = self._source(f.source)
            if lazy and known and source is not None and source.defer(f, known[2]):
                report.deferred += 1
                continue
            todo.append(f)
        gone = self._gone(rows, files)
        binary: list[tuple[str, str]] = []  # image, PDF or NULs under a .md name (BinaryNote)

        total = len(todo)
        label = "Indexing memory files…"
        if progress:
            progress(0, total, ProgressLabel(label))
        batch: list[tuple[FileEntry, SourceDoc, list[PlannedChunk]]] = []
        pending_chunks = 0
        chunks_done = chunks_planned = 0  # see ProgressLabel
        within = getattr(progress, "within", progress)
        shown = 0.0

        def embedding(n: int) -> None:
            """``n`` of the batch being written are embedded: say so now and then."""
            nonlocal shown
            now = time.monotonic()
            if now - shown >= CHUNK_PROGRESS_INTERVAL:
                shown = now
                within(done, total, ProgressLabel(label, chunks_done + n, chunks_planned))

        on_embedded = embedding if progress else None
        # One transaction per batch: with a model, batches are what it embeds at once; without one,
        # larger batches save commits (156 of them cost ~10% of a 10k-chunk keyword-only build).
        batch_chunks = 64 if self.provider is not None else 512
        done = 0
        parallel = (everything and deadline is None and sum(f.size for f in todo) >= WORKER_MIN_BYTES
                    and free_core())
        planned = self._planned_in_worker(todo) if parallel else ((f, None, None) for f in todo)
        try:
            for f, loaded, chunks in planned:
                if deadline is not None and time.monotonic() > deadline:
                    report.incomplete = True
                    break
                self._stop_if_closing()
                try:
                    doc = self.load(f) if loaded is None else loaded.doc
                except Exception as exc:  # one unreadable file never blocks the rest; retried next sync
                    report.skipped.append(Skipped(f.path, _why(exc)).as_dict())
                    if isinstance(exc, BinaryNote) and not exc.kept:  # no text: what was indexed of it goes
                        binary.append((f.path, f.source))
                    else:
                        self._unread.add((f.path, f.source))
                    continue
                if doc is None:
                    continue
                known = rows.get((f.path, f.source))
                if known and known[0] == doc.hash and (f.path, f.source) not in needs_vectors:
                    if known[1:] != (f.stored_stamp, f.size):  # (an unsettled file read again: nothing to write)
                        touched.append((f, doc.hash))
                    report.unchanged += 1
                    continue
                if chunks is None:
                    chunks = self._chunk(doc, f)
                batch.append((f, doc, chunks))
                pending_chunks += len(chunks)
                chunks_planned += len(chunks)
                if pending_chunks >= batch_chunks or len(batch) >= 200:
                    done += self._write_batch(store, batch, report, strict=strict, on_embedded=on_embedded)
                    chunks_done += pending_chunks
                    batch, pending_chunks = [], 0
                    if progress:
                        progress(done, total, ProgressLabel(label, chunks_done, chunks_planned))
        finally:
            planned.close()  # stops a worker at once, also when a write failed
        if batch:
            done += self._write_batch(store, batch, report, strict=strict, on_embedded=on_embedded)
            chunks_done += pending_chunks
        report.skipped[:0] = [s.as_dict() for s in self._skipped]
        self._still_writer()
        with store.transaction():
            for f, file_hash in touched:
                store.touch_file(f.path, f.source, file_hash, f.stored_stamp, f.size)
            if not report.incomplete:
                for path, source in gone:
                    store.delete_file(path, source)
                    report.removed += 1
            for key in binary:
                if key in rows:
                    store.delete_file(*key)
            store.set_state(SKIPPED_STATE, [{**s, "at": int(time.time() * 1000)} for s in report.skipped] or None)
        if progress:
            progress(total if not report.incomplete else done, total, ProgressLabel(label, chunks_done, chunks_planned))
        return report

    def _planned_in_worker(self, todo: list[FileEntry]) -> Iterator[tuple[FileEntry, Any, list[PlannedChunk] | None]]:
        """``(file, loaded, chunks)`` for every file of ``todo`` in order, for a large full rebuild.

        Memory files are read, chunked and stemmed by a :class:`memdir.build_worker.ChunkWorker`
        a few batches ahead of the one this process writes (``loaded``: a :class:`_Loaded`
        holding their hash; the content is not sent back).  ``None`` for both where the caller
        loads and plans the file itself: other sources (transcripts), files the worker could not
        read (the caller then reports why), and every file from the first one a failed worker did
        not answer.  Closing the generator stops the worker.
        """
        cfg = self.settings.memory_search.chunking
        batches: list[list[tuple[str, str, bool]]] = []
        size = WORKER_BATCH_BYTES
        for f in todo:
            if f.source != "memory" or self._source(f.source) is not None:
                continue
            if size >= WORKER_BATCH_BYTES:
                batches.append([])
                size = 0
            batches[-1].append((str(f.abs_path), f.root, f.path, self._curated(f)))
            size += f.size
        model = self.model_name
        worker: ChunkWorker | None = None
        try:
            worker = ChunkWorker(cfg.tokens, cfg.overlap, model, self.settings.user_timezone)
            for batch in batches[:WORKER_AHEAD]:  # small messages: never more than a pipe holds
                worker.submit(batch)
        except Exception:  # e.g. no Python to start: everything is planned here
            if worker is not None:
                worker.close()
            yield from ((f, None, None) for f in todo)
            return
        sent = min(len(batches), WORKER_AHEAD)
        replies: deque[tuple[str, list[tuple[Any, ...]]] | None] = deque()
        alive = True
        try:
            for f in todo:
                if not alive or f.source != "memory" or self._source(f.source) is not None:
                    yield f, None, None
                    continue
                if not replies:
                    try:
                        replies.extend(worker.reply())
                        if sent < len(batches):
                            worker.submit(batches[sent])
                            sent += 1
                    except Exception:  # the worker died: the remaining files are planned here
                        alive = False
                        yield f, None, None
                        continue
                answer = replies.popleft()
                if answer is None:
                    yield f, None, None
                    continue
                digest, rows = answer
                chunks = [PlannedChunk(Chunk(start, end, text, h), None, first, last, self._windows(text),
                                       (fts, stems), (model, cid))
                          for cid, start, end, text, h, first, last, fts, stems in rows]
                yield f, _Loaded(SourceDoc("", digest)), chunks
        finally:
            worker.close()

    def _chunk(self, doc: SourceDoc, entry: FileEntry) -> list[PlannedChunk]:
        """A document's chunks with their time (transcripts), days and embedding windows
        (:func:`memdir.build_worker.plan`)."""
        cfg = self.settings.memory_search.chunking
        tz = resolve_timezone(self.settings.user_timezone)[0]
        return [PlannedChunk(c, ts, first, last, self._windows(c.text))
                for c, ts, first, last in plan(doc.content, entry.path, curated=self._curated(entry),
                                               tokens=cfg.tokens, overlap=cfg.overlap,
                                               timestamps_ms=doc.timestamps_ms, line_map=doc.line_map, tz=tz)]

    @staticmethod
    def _curated(entry: FileEntry) -> bool:
        """Curated files (``MEMORY.md`` and other memory files without a date in their name) are
        chunked by their structure; daily logs and transcripts by size (R§3)."""
        return INDEXING["sections"] and entry.source == "memory" and file_date(entry.path) is None

    def _windows(self, text: str) -> list[str]:
        """The pieces of a chunk the embedder reads: the whole text, or several pieces when it is
        longer than the model's window or input limit (each is embedded; the best one counts)."""
        p = self.provider
        if p is None:
            return [text]
        pieces = [text]
        max_tokens = getattr(p, "max_tokens", None)
        if INDEXING["windows"] and isinstance(max_tokens, int) and max_tokens > 0:
            budget = max_tokens - 2  # the model's [CLS] and [SEP]
            counter = getattr(p, "count_tokens", None)
            count = counter if callable(counter) and not self._uncounted else _estimate_tokens
            try:
                pieces = embedding_windows(text, budget, count)
            except Exception:
                # The model cannot even count (a damaged model file fails to load): this used to
                # abort the whole sync, keyword index included.  Its embedding fails the same way
                # next, and that is handled (keywords only, or the old index kept); until then,
                # estimate, without loading it again for every chunk.
                self._uncounted = True
                pieces = embedding_windows(text, budget, _estimate_tokens)
        limit = p.max_input_bytes
        return [piece for w in pieces for piece in split_by_bytes(w, limit)]

    def _embed(self, store: Store, chunks: list[PlannedChunk], report: SyncReport,
               on_embedded: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
        """Vectors for these chunks' windows by text hash: cache first, then the provider for the rest
        (``on_embedded(n)``: about ``n`` of the chunks are embedded, while the provider works).

        Each vector is a float32 array, the values the store writes: a big file's chunks are
        embedded in one call, and as lists of Python floats their vectors took 8 times the room."""
        p = self.provider
        if p is None or not chunks:
            return {}
        if self._failed is not None:  # asked once this sync already: the same answer, at once
            raise self._failed[0].with_traceback(None)
        import numpy as np
        cache_on = self.settings.memory_search.cache.enabled
        by_hash = {sha256_text(w): w for c in chunks for w in c.windows}
        hashes = list(by_hash)
        found = {h: np.asarray(v, dtype=np.float32)  # already float32 from SQLite: no copy
                 for h, v in (store.cache_get(p.id, p.model, p.provider_key, hashes) if cache_on else {}).items()}
        if found and len(found) == len(hashes) and self._probe_width and not p.dims:
            self._learn_width(p, next(iter(by_hash.values())))
        want = p.dims or self._width
        if want:  # a cached vector of another width (the model changed behind its name) is a miss
            found = {h: v for h, v in found.items() if v.size == want}
        elif len({v.size for v in found.values()}) > 1:  # which width is right? the provider says
            found = {}
        report.cache_hits += len(found)
        missing = [h for h in hashes if h not in found]
        hits = list(found) if cache_on else []
        if missing:
            fresh = self._embed_missing(p, [by_hash[h] for h in missing], missing, report, chunks, len(hashes),
                                        on_embedded)
            width = self._check_width(fresh, found)
            stale = [h for h, v in found.items() if width is not None and v.size != width]
            if stale:  # cached before the width was known, and another one than the provider's
                for h in stale:
                    del found[h]
                fresh.update(self._embed_missing(p, [by_hash[h] for h in stale], stale, report, chunks,
                                                 len(hashes), None))
                self._check_width(fresh, found)
            if cache_on:
                store.cache_put(p.id, p.model, p.provider_key, fresh)
            found.update(fresh)
        else:
            self._check_width({}, found)
        if hits:
            # Touched last: a shared cache (PostgreSQL) keeps the touched rows locked until the batch
            # commits, and touched before the embedding and the write, two agents each waited to write
            # a vector the other had touched (deadlock).
            store.cache_touch(p.id, p.model, p.provider_key, hits)
        return found

    def _learn_width(self, p: EmbeddingProvider, text: str) -> None:
        """Embed one text so the provider tells its width before a full build takes cached
        vectors: a model that changed width behind its name left ``index --force`` writing the old
        vectors back from the cache when nothing new needed embedding (the searches stayed on
        keywords, advised to rebuild).  If the provider cannot answer, the cache is used as is."""
        self._probe_width = False
        try:
            p.embed_batch([text])
        except Exception:  # down or refusing: the build goes on from the cache
            pass

    def _keyword_only(self, report: SyncReport, chunks: int, exc: BaseException) -> None:
        """Remember that embedding failed, so this sync asks the provider no more (it already
        retried: each batch paid the retries again, 4 s a batch when the endpoint was down, and
        the files are embedded at the next sync anyway); one warning counts every such chunk."""
        done = self._failed[1] if self._failed is not None else 0
        msg = f"embedding failed, {done + chunks} chunks indexed for keywords only: {one_line(exc)}"
        if self._failed is None:
            report.warnings.append(msg)
            self._failed = (exc, chunks, len(report.warnings) - 1)
        else:
            report.warnings[self._failed[2]] = msg
            self._failed = (self._failed[0], done + chunks, self._failed[2])

    def _embed_missing(self, p: EmbeddingProvider, texts: list[str], hashes: list[str], report: SyncReport,
                       chunks: list[PlannedChunk], windows: int,
                       on_embedded: Callable[[int], None] | None) -> dict[str, np.ndarray]:
        """The provider's vectors for ``texts`` (whose hashes are ``hashes``), by hash; a text the
        provider refuses has none (its chunk is kept for keywords) and the report says so."""
        step = None
        if on_embedded is not None and _takes_progress(p):
            have, best = windows - len(texts), 0

            def step(_what: str, k: int, of: int) -> None:
                # windows to chunks, in proportion; ``of`` is the provider's count (a batch
                # job's requests), so the share is taken of it
                nonlocal best
                n = len(chunks) * (have + len(texts) * min(k, of) // max(of, 1)) // windows
                if n > best:
                    best = n
                    on_embedded(n)

        timeout = None
        if self._deadline is not None:  # the provider's retries must not outlast a search's budget
            timeout = self._deadline - time.monotonic()
            if timeout <= 0:
                raise EmbeddingTimeoutError(f"{p.id} embeddings not asked: the sync's time budget is spent",
                                            provider=p.id)
        vectors, refusal = _embed_sparing(p, texts, step, timeout)
        fresh = {h: v for h, v in zip(hashes, vectors, strict=True) if v is not None}
        del vectors
        report.embedded += len(fresh)
        if refusal is not None:
            msg = (f"{p.id} refused some text ({refusal}); the chunks holding it are indexed for keywords only "
                   "(a model with a shorter input limit than memdir assumes? they are tried again at the next sync)")
            if msg not in report.warnings:
                report.warnings.append(msg)
        return fresh

    def _check_width(self, fresh: dict[str, np.ndarray], found: dict[str, np.ndarray]) -> int | None:
        """The width of this batch's vectors (fresh ones decide), checked against the index's."""
        sizes = {v.size for v in fresh.values()} or {v.size for v in found.values()}
        if not sizes:
            return None
        width = max(sizes)
        if self._width is None:
            self._width = width
        elif width != self._width or len(sizes) > 1:
            raise VectorWidthChanged(self._width, width)
        return width

    def _write_batch(self, store: Store, batch: list[tuple[FileEntry, SourceDoc, list[PlannedChunk]]],
                     report: SyncReport, *, strict: bool, on_embedded: Callable[[int], None] | None = None) -> int:
        model = self.model_name
        all_chunks = [c for _, _, chunks in batch for c in chunks]
        self._still_writer()
        with store.transaction():
            try:
                vectors = self._embed(store, all_chunks, report, on_embedded)
            except VectorWidthChanged:
                raise  # nothing of this batch is written: the index is rebuilt instead
            except Exception as exc:
                if strict or self.provider is None:
                    raise
                # Keep the text searchable by keywords; the vectors are filled in on a later sync.
                vectors = {}
                if not (isinstance(exc, EmbeddingTimeoutError) and self._deadline is not None):
                    report.embedding_error = exc  # not when the sync's budget ran out: no fallback for that
                self._keyword_only(report, len(all_chunks), exc)
            for f, doc, chunks in batch:
                rows = []
                seen: set[str] = set()
                for pc in chunks:
                    c = pc.chunk
                    cid = (pc.model_id[1] if pc.model_id is not None and pc.model_id[0] == model
                           else chunk_id(f.source, f.path, c.start_line, c.end_line, c.hash, model))
                    if cid in seen:
                        # The same text on the same lines twice (slices of one long line of a repeated
                        # character): one row says it all, and a second with the same id broke the
                        # vector table's primary key and orphaned keyword rows.
                        continue
                    seen.add(cid)
                    parts = [vectors.get(sha256_text(w)) for w in pc.windows] if vectors else []
                    embedding = None
                    if parts and all(v is not None and v.size for v in parts):
                        embedding = parts[0] if len(parts) == 1 else _joined(parts)  # type: ignore[arg-type]
                    rows.append(ChunkRow(cid, f.path, f.source, c.start_line, c.end_line, c.hash, model, c.text,
                                         embedding, pc.ts, pc.date_start, pc.date_end,
                                         len(pc.windows) if embedding is not None else 1, pc.fts))
                store.replace_file(f.path, f.source, doc.hash, f.stored_stamp, f.size, rows)
                report.chunks += len(rows)
                report.indexed += 1
        return len(batch)

    # -- full reindex ------------------------------------------------------------------------
    def _full_reindex(self, why: str, progress: Progress | None, *, strict: bool = True) -> SyncReport:
        ms = self.settings.memory_search
        recovered = self.store.get_state(RECOVERED_STATE)
        with self.store.rebuild() as fresh:
            # (the file a search may read meanwhile: a database's new generation is no such file)
            self.progress_file.start("full", temp=fresh.location if hasattr(fresh, "path") else None,
                                     generation=getattr(fresh, "pinned", None))
            if recovered:
                with fresh.transaction():
                    fresh.set_state(RECOVERED_STATE, recovered)
            self._adopt_moved_cache(fresh)
            interval = self.progress_file.min_interval
            if self.provider is not None or not strict:
                # commit as progress is shown: the embeddings paid for survive a killed build, and
                # a search during a first build (no live index) reads the shadow
                self.progress_file.before_write = fresh.publish
            if self.provider is None:
                # each commit writes FTS5's pending terms out as one more segment to merge: with
                # nothing paid for to keep, a first build commits every few seconds, a rebuild
                # (the live index answers searches) once
                self.progress_file.min_interval = max(interval, KEYWORD_PUBLISH_INTERVAL)
            try:
                report = self._incremental(fresh, progress, None, everything=True, strict=strict)
            finally:
                self.progress_file.before_write = None
                self.progress_file.min_interval = interval
            report.full = True
            self._carry_over(fresh, report)
            # what the live index held and the new one does not ("0 removed" after a rebuild that
            # dropped the notes deleted since the last sync, which status had counted)
            report.removed = len(self.store.file_rows().keys() - fresh.file_rows().keys())
            ident = self.identity()
            if self.provider is not None and self.provider.dims:
                ident["vectorDims"] = self.provider.dims
            self._still_writer()  # (the rebuild is copied in next)
            with fresh.transaction():
                fresh.write_meta({**ident, "builtAt": int(time.time() * 1000)})
                fresh.set_state(OWNER_FOLDER_STATE, folder_identity(str(self.settings.workspace_path)))
                fresh.cache_prune(ms.cache.max_entries if ms.cache.enabled else None)
        return report

    def _adopt_moved_cache(self, fresh: Store) -> None:
        """A first index of a workspace keyed by its path takes the embeddings cached by the index
        it left under an earlier path (moved, renamed, or restored elsewhere with the state
        folder: :func:`memdir.state_key.moved_indexes`), so its notes are not all embedded again."""
        adopt = getattr(fresh, "adopt_cache", None)
        if (adopt is None or self.provider is None or self.settings.index_key != "workspace"
                or self.store.cache_count() or self.store.file_rows()):
            return
        from memdir.state_key import moved_indexes

        for index in moved_indexes(self.settings.index_path, self.settings.workspace_path):
            adopt(index)

    def _carry_over(self, fresh: Store, report: SyncReport) -> None:
        """Copy into a full rebuild the live index's rows of the files it could not look at now:
        those below a folder that could not be listed, and those that could not be read.

        Why: an incremental sync keeps them, but a rebuild (``memdir index --force``, a changed
        model) started from nothing, so a transient permission problem made notes vanish from
        search.  Their stamp is cleared (hash, mtime and size): the first sync that can read them
        indexes them anew, in the new build's chunking and model.  A vector is kept only when it
        is of this build's model and width; otherwise the chunk is found by its keywords until then.
        """
        if not (self._unread or self._unlisted or self._unlisted_sources):
            return  # everything was read: nothing to carry (and no need to read the old rows)
        keep = {key for key in self.store.file_rows() if key in self._unread or self._unlisted_key(key)}
        if not keep:
            return
        model, dims = self.model_name, (self.provider.dims if self.provider is not None else None)

        def fits(c: ChunkRow) -> bool:
            return c.embedding is not None and c.model == model and bool(dims) and len(c.embedding) == dims * c.windows

        kept = []
        self._still_writer()
        with fresh.transaction():
            for path, source, _hash, _mtime, _size, chunks in self.store.export_files(only=keep):
                rows = [c if fits(c) else replace(c, embedding=None, windows=1) for c in chunks]
                fresh.replace_file(path, source, "", 0, 0, rows)
                kept.append(path)
        if kept:
            report.warnings.append(
                f"kept what the previous index held of {len(kept)} file(s) that could not be read now "
                f"({', '.join(kept[:5])}{', …' if len(kept) > 5 else ''}): they are indexed anew once readable")
