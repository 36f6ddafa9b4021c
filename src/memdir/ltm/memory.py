"""``LongTermMemory``: one agent's long-term memories (R§14), the one object to use.

    from memdir.ltm import LongTermMemory
    with LongTermMemory(settings) as ltm:          # or LongTermMemory.for_memory(mem)
        ltm.store("I prefer dark mode", category="preference")
        ltm.search("which theme?")                 # hits with cosine scores
        ltm.auto_recall("what theme do I like?")   # the <relevant-memories> block, or None
        ltm.auto_capture(messages)                 # user messages only, R§14's rules

Writes (store, forget, import, reembed) hold a per-folder lock, so the duplicate check and
the insert are one step even with several processes (an MCP server and the CLI) on one agent.

Every public operation heals a damaged table (:mod:`memdir.ltm.heal`): a read or write that
fails on an unreadable file sets the table aside, rebuilds it from what still reads (and the
mirror), says so once through ``notice`` and in :attr:`LongTermMemory.recoveries`, then runs again.
"""

from __future__ import annotations

import builtins
import logging
import math
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from memdir.ltm import heal
from memdir.ltm.capture import (
    CATEGORIES,
    MAX_CAPTURES_PER_TURN,
    capture_candidates,
    detect_category,
    format_relevant_memories_context,
)
from memdir.ltm.facts import says_something_else
from memdir.ltm.results import ForgetResult, ImportReport, StoreResult
from memdir.ltm.store import (
    ID_PREFIX_RE,
    TABLE,
    UUID_RE,
    LanceTable,
    LtmError,
    MemoryRecord,
    ModelMismatchError,
    require_uuid,
)
from memdir.sessions.store import clean_text

if TYPE_CHECKING:
    from memdir.config import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")

DUPLICATE_SCORE = 0.95
DUPLICATE_CANDIDATES = 5  # near-identical memories compared by their facts (memdir.ltm.facts)
SUPERSEDE_MIN = 0.8
RECALL_MIN_SCORE = 0.1  # memory_recall tool
SEARCH_MIN_SCORE = 0.3  # `ltm search`, auto-recall
AUTO_RECALL_LIMIT = 3
AUTO_RECALL_MIN_PROMPT = 5
FORGET_SEARCH_LIMIT = 5
FORGET_MIN_SCORE = 0.7
FORGET_AUTO_SCORE = 0.9
DEFAULT_IMPORTANCE = 0.7
#: The longest memory: ``captureMaxChars``'s ceiling.  Auto-recall puts memories in every prompt, so
#: one of megabytes (a pasted file through ``memory_store``) made every later turn overflow the model.
MAX_MEMORY_CHARS = 10_000
MAX_SEARCH_LIMIT = 10_000
#: Bullets of an import embedded at a time (each batch cached, and its progress said) and written a commit.
IMPORT_EMBED_BATCH = 256
IMPORT_WRITE_BATCH = 1_000


def _check_length(text: str, where: str = "") -> None:
    if len(text) > MAX_MEMORY_CHARS:
        raise LtmError(f"{where}memory too long ({len(text)} characters, at most {MAX_MEMORY_CHARS}): "
                       "store one short statement")


def _now_ms() -> int:
    return int(time.time() * 1000)


class LongTermMemory:
    """Store, search and forget one agent's long-term memories; recall and capture around turns."""

    def __init__(self, settings: Settings | None = None, *, provider: Any = None, db_path: str | Path | None = None,
                 clock: Callable[[], int] | None = None, notice: Callable[[str], None] | None = None):
        """``settings`` default to memdir's defaults; ``provider`` overrides the configured embedder;
        ``db_path``: the folder of the LanceDB table (``None``: ``longTermMemory.dbPath``, else
        ``<stateDir>/ltm/<agent>``); ``clock``: milliseconds since the epoch for new memories
        (``None``: the system clock); ``notice`` is told once when a damaged table was recovered
        (default: a logged warning)."""
        from memdir.config import Settings
        from memdir.ltm import settings as ltm_settings
        from memdir.ltm.store import import_lancedb

        import_lancedb()  # fail at once, naming the extra, rather than on the first write
        self.settings = settings if settings is not None else Settings()
        self.config = self.settings.long_term_memory
        self.db_path = Path(db_path).expanduser().resolve() if db_path else ltm_settings.db_path(self.settings)
        if self.db_path.exists() and not self.db_path.is_dir():
            # (dbPath on a note failed every call with "[Errno 17] File exists" and two cache warnings)
            raise LtmError(f"long-term memory keeps its tables in a folder, and {self.db_path} is a file: point "
                           "longTermMemory.dbPath at a folder (or leave it out for <stateDir>/ltm/<agent>)")
        self.mirror_path = ltm_settings.mirror_path(self.settings)
        self._provider = provider
        self._owns_provider = provider is None
        self._embedder: Any = None
        self._checked = False
        self.table = LanceTable(self.db_path, scoring=self.config.scoring)
        self._clock = clock or _now_ms
        self.last_warnings: list[str] = []
        self.notice: Callable[[str], None] = notice or (lambda message: log.warning("%s", message))
        #: What each recovery of a damaged table did in this process (see :mod:`memdir.ltm.heal`).
        self.recoveries: list[dict[str, Any]] = []
        self._legacy_told = False
        #: Whether the ``Memory`` whose :attr:`~memdir.Memory.long_term` this is was closed since.
        self._owner_closed: Callable[[], bool] | None = None

    @classmethod
    def for_memory(cls, memory: Any, **kwargs: Any) -> LongTermMemory:
        """Long-term memory of a :class:`memdir.Memory`'s agent, sharing its embedding model when it can."""
        from memdir.ltm.settings import embedding_overridden

        provider = None
        if not embedding_overridden(memory.settings):
            provider = memory.selection.provider  # None when memory search is keyword-only
        kwargs.setdefault("notice", getattr(memory, "notice", None))
        ltm = cls(memory.settings, provider=provider, **kwargs)
        ltm._owns_provider = provider is None
        return ltm

    # -- plumbing ------------------------------------------------------------------------------
    @property
    def embedder(self) -> Any:
        if self._embedder is None:
            from memdir.ltm.embedder import Embedder, EmbeddingCache

            provider = self._provider
            if provider is None:
                from memdir.embeddings.registry import select_provider
                from memdir.ltm.settings import embedding_config

                selection = select_provider(embedding_config(self.settings))
                if selection.provider is None:
                    raise LtmError("long-term memory needs an embedding model, and none is available: "
                                   f"{selection.unavailable_reason or 'no provider'}")
                provider = self._provider = selection.provider
                self._owns_provider = True
            self.table.check_readable()  # said once, not as two warnings about the cache in it
            cache = EmbeddingCache(self.db_path / "embedding-cache.sqlite") if \
                self.settings.memory_search.cache.enabled else None
            self._embedder = Embedder(provider, cache, expected_dims=self.config.embedding.dimensions)
        return self._embedder

    def _vectors(self, texts: list[str]) -> list[Any]:
        vectors = self.embedder.documents(texts)
        self._check(len(vectors[0]) if vectors else None)
        return vectors

    def _query_vector(self, text: str) -> Any:
        vector = self.embedder.query(text)
        self._check(len(vector))
        return vector

    def _check(self, dims: int | None) -> None:
        if not self._checked:
            self.table.check_compatible(self.embedder.identity, dims)
            self._checked = True

    @contextmanager
    def _lock(self) -> Iterator[None]:
        """The store's writers' lock, waited for as long as its holder runs.

        Why: a holder stopped with Ctrl-Z or SIGSTOP (an ``ltm reembed`` in a suspended shell)
        made every later store, forget and capture (an MCP server's too) wait for ever without
        a word; now they fail after a few seconds, saying how to resume it."""
        from memdir.lock import FileWriterLock, wait_for_writer

        self.table.check_writable()
        self.db_path.mkdir(parents=True, exist_ok=True, mode=0o700)  # private, as the index's folder
        lock = FileWriterLock(self.db_path / "ltm")
        wait_for_writer(lock, None, f"the long-term memory store {self.db_path}")
        try:
            yield
        finally:
            lock.release()

    def _tell_unclaimed_legacy(self) -> None:
        """Once, when this workspace's own store has no table yet: name the memories memdir kept for
        every workspace used without an agent id before it kept them per workspace (``ltm/main``,
        which no index claims; see :func:`memdir.state_key.unclaimed_legacy_state`).  After an
        upgrade they were simply gone from list, search and recall, without a word."""
        if self._legacy_told:
            return
        self._legacy_told = True
        s = self.settings
        if s.agent_explicit or s.long_term_memory.db_path or self.db_path != s.state_path / "ltm" / s.state_key:
            return
        from memdir.settings_cache import resolve_store_path
        from memdir.state_key import LEGACY_AGENT_ID, unclaimed_legacy_state

        old = s.state_path / "ltm" / LEGACY_AGENT_ID
        if old == self.db_path or not (old / f"{TABLE}.lance").exists() or self.table.exists():
            return
        legacy_index = resolve_store_path(s.memory_search.store.path, LEGACY_AGENT_ID, s.state_path)
        if old in unclaimed_legacy_state(s.state_path, s.state_key, legacy_index):
            self.notice(f"long-term memories stored before memdir kept them per workspace are in {old} (then "
                        f"shared by every workspace used without --agent), not in this workspace's {self.db_path}: "
                        f"if they are this workspace's, mv {old} {self.db_path}")

    def _healing(self, op: Callable[[], T]) -> T:
        """Run ``op``; if it failed on a damaged table, recover the table and run ``op`` once more."""
        if self._owner_closed is not None and self._owner_closed():
            # (it reopened the table and loaded the closed Memory's embedding model again, which
            # nothing closed, where the Memory's own calls raise MemoryClosed)
            from memdir.errors import MemoryClosed

            raise MemoryClosed("this long-term memory's Memory is closed")
        self._tell_unclaimed_legacy()
        if heal.pending(self.db_path):  # a rebuild another process was killed in the middle of
            with self._lock():
                self._finish_rebuilds()
        started = time.time() * 1000
        try:
            return op()
        except Exception as exc:
            if not heal.is_damage(exc):
                self._recheck_model()
                raise
            if self._recover(exc, started) is None:
                raise
        return op()

    def _recheck_model(self) -> None:
        """After a failure: if another process re-embedded the table with another model since this
        object checked it, say so (:class:`ModelMismatchError`) instead of LanceDB's "There is no
        vector column" or cast error, which a long-running server repeated on every call."""
        if self._checked:
            self._checked = False
            try:
                self.table.close()
                self.table.check_compatible(self.embedder.identity, None)
            except LtmError:
                raise
            except Exception:  # the check itself failed: the original error says more
                return

    def _finish_rebuilds(self) -> None:
        """Under the lock: complete a rebuild a killed process left ready (before any table is made)."""
        if heal.pending(self.db_path):
            self.table.close()
            info = heal.finish_rebuilds(self.db_path)
            if info is not None:
                self._recovered(info)

    def _recover(self, exc: BaseException, started_ms: float) -> dict[str, Any] | None:
        """Set the damaged table aside and rebuild it (once for all processes: under the lock).

        ``None`` when the table reads after all and nobody recovered it meanwhile: then the error
        was no damage (a full disk, a read-only folder) and is raised as it is.
        """
        from memdir.ltm.markdown import mirror_header

        with self._lock():
            self.table.close()
            self._checked = False
            self._finish_rebuilds()
            problem = heal.table_problem(self.db_path)
            if problem is None:
                last = heal.last_recovery(self.db_path)
                return last if last and (heal.recovery_ms(last) or 0) >= started_ms - 1000 else None
            info = heal.rebuild(self.db_path, problem, embed=lambda texts: self.embedder.documents(texts),
                                identity=lambda: self.embedder.identity, mirror=self.mirror_path,
                                mirror_header=mirror_header(self.settings.agent_id, self.db_path),
                                timezone=self.settings.user_timezone, clock=self._clock)
            self._recovered(info)
            if self.mirror_path is not None:
                self._sync_mirror()
        return info

    def _recovered(self, info: dict[str, Any]) -> None:
        self.recoveries.append(info)
        self.notice(str(info.get("message") or heal.recovery_message(info)))

    # -- reading -------------------------------------------------------------------------------
    def search(self, query: str, *, limit: int = 5, min_score: float = SEARCH_MIN_SCORE) -> list[MemoryRecord]:
        """Active memories most similar to ``query`` (cosine, or R§14's scale with ``scoring=openclaw``),
        best first: at most ``limit`` of them, none scoring below ``min_score``."""
        return self._healing(lambda: self._search_once(query, limit, min_score))

    def _search_once(self, query: str, limit: int, min_score: float) -> list[MemoryRecord]:
        query = clean_text(query or "").strip()
        if not query:
            raise LtmError("query required")
        # (limit=math.inf or NaN failed "cannot convert float infinity to integer", min_score="0.5" "'>=' not
        # supported between instances of 'float' and 'str")
        if isinstance(limit, bool) or not hasattr(type(limit), "__float__") or (
                not isinstance(limit, int) and not math.isfinite(limit)):
            raise LtmError(f"limit must be a whole number of memories, not {limit!r}")
        if isinstance(min_score, bool) or not hasattr(type(min_score), "__float__") or math.isnan(float(min_score)):
            raise LtmError(f"min score must be a number, not {min_score!r}")
        if not self.table.exists():
            return []
        # LanceDB takes a 32-bit limit ("out of range integral type conversion attempted")
        limit = max(1, min(int(limit), MAX_SEARCH_LIMIT))
        return self.table.search(self._query_vector(query), limit=limit, min_score=min_score)

    # The methods below spell ``builtins.list``: in the class body ``list`` is this method, and
    # mypy read their ``list[...]`` as no type at all, so a host's code got ``Any`` from them.
    def list(self, *, include_superseded: bool = False) -> list[MemoryRecord]:
        """Every active memory, oldest first (superseded ones too with ``include_superseded``)."""
        return self._healing(lambda: self.table.all(include_superseded=include_superseded))

    def get(self, memory_id: str) -> MemoryRecord | None:
        """The memory whose id is ``memory_id``, in full (a UUID; a prefix is an :class:`LtmError`), or ``None``."""
        return self._healing(lambda: self.table.get(memory_id))

    def stats(self) -> dict[str, Any]:
        """Counts, model, folders, and the last recovery of a damaged table (``recovery``, or ``None``)."""
        return self._healing(self._stats_once)

    def _stats_once(self) -> dict[str, Any]:
        records = self.table.all(include_superseded=True)
        active = [r for r in records if r.active]
        by_category = {c: sum(1 for r in active if r.category == c) for c in CATEGORIES}
        identity = self.table.identity()
        return {"agentId": self.settings.agent_id, "dbPath": str(self.db_path), "total": len(active),
                "superseded": len(records) - len(active), "byCategory": by_category,
                "provider": identity.get("provider"), "model": identity.get("model"), "dims": self.table.dims(),
                "scoring": self.config.scoring, "autoRecall": self.config.auto_recall,
                "autoCapture": self.config.auto_capture, "enabled": self.config.enabled,
                "mirror": str(self.mirror_path) if self.mirror_path else None,
                "recovery": heal.last_recovery(self.db_path), "issue": self._model_issue(identity)}

    def _model_issue(self, held: dict[str, str]) -> str | None:
        """Why searches and stores fail until ``ltm reembed``: the table holds another model's
        vectors than the configured one (stats named the table's model alone, as if all were well,
        while every search failed), or no model can be had."""
        if not held.get("model"):
            return None
        try:
            if self._provider is None:
                from memdir.embeddings.registry import select_provider
                from memdir.ltm.settings import embedding_config

                selection = select_provider(embedding_config(self.settings))
                if selection.provider is None:
                    return ("long-term memory needs an embedding model, and none is available: "
                            f"{selection.unavailable_reason or 'no provider'}")
                self._provider, self._owns_provider = selection.provider, True
            p = self._provider
            self.table.check_compatible({"provider": str(p.id), "model": str(p.model)}, None)
        except ModelMismatchError as exc:
            return str(exc)
        except Exception as exc:  # what the next search says too
            log.debug("long-term memory model not checked: %s", exc)
        return None

    # -- writing -------------------------------------------------------------------------------
    def store(self, text: str, *, importance: float = DEFAULT_IMPORTANCE, category: str | None = None,
              source: str = "api") -> StoreResult:
        """Store a memory unless a near-identical one exists (score ≥ 0.95); supersede close ones.

        ``text``: the memory, one statement; ``importance``: 0 to 1; ``category``: one of
        preference, fact, decision, entity, other (``None``: read from the text); ``source``: what
        stored it, kept with the memory (auto-capture says ``auto-capture``)."""
        text = clean_text(text or "").strip()
        if not text:
            raise LtmError("text required")
        _check_length(text)
        category = category or detect_category(text)
        if category not in CATEGORIES:
            raise LtmError(f"unknown category {category!r} (expected one of {', '.join(CATEGORIES)})")
        importance = float(importance)
        if not 0.0 <= importance <= 1.0:
            raise LtmError(f"importance must be between 0 and 1, got {importance}")
        return self._healing(lambda: self._store_once(text, importance, category, source))

    def _store_once(self, text: str, importance: float, category: str, source: str) -> StoreResult:
        self.table.check_writable()  # before the text is embedded (its cache is in the store's folder)
        vector = self._vectors([text])[0]
        with self._lock():
            result = self._store_locked(text, vector, importance, category, source)
            if result.action == "created":
                result.warnings += self._after_write()
        return result

    def _store_locked(self, text: str, vector: Any, importance: float, category: str, source: str,
                      *, memory_id: str | None = None, created_at: int | None = None) -> StoreResult:
        near = self.table.search(vector, limit=DUPLICATE_CANDIDATES, min_score=DUPLICATE_SCORE) \
            if self.table.exists() else []
        same = next((r for r in near if not says_something_else(text, r.text)), None)
        if same is not None:
            return StoreResult("duplicate", same)
        if not self.table.exists():
            self._finish_rebuilds()  # a killed recovery's new table goes in first, never beside a fresh one
            self.table.create(int(vector.size), self.embedder.identity)
        record = MemoryRecord(id=memory_id or str(uuid.uuid4()), text=text, category=category,
                              importance=importance, created_at=created_at or self._clock(), source=source,
                              vector=vector)
        superseded: list[MemoryRecord] = []
        if self.config.supersede:
            close = self.table.search(vector, limit=10, min_score=SUPERSEDE_MIN, category=category)
            superseded = close  # ≥ 0.95 ones left here change a number, a date or a negation: corrected
        self.table.add([record])
        if superseded:
            at = self._clock()
            self.table.mark_superseded([r.id for r in superseded], record.id, at)
            for r in superseded:
                r.superseded_by, r.superseded_at = record.id, at
        record.vector = None
        return StoreResult("created", record, superseded)

    def forget(self, memory_id: str | None = None, *, query: str | None = None) -> ForgetResult:
        """Delete by ``memory_id`` (full UUID or a unique prefix of ≥ 8 characters), or by ``query`` (R§14).

        By query: the matches scoring ≥ 0.7 (top 5); exactly one, scoring > 0.9, is deleted,
        otherwise they come back as ``candidates`` to choose from.
        """
        return self._healing(lambda: self._forget_once(memory_id, query))

    def _forget_once(self, memory_id: str | None, query: str | None) -> ForgetResult:
        if memory_id:
            full = self._resolve_id(memory_id)
            if full is None:
                return ForgetResult("not_found")
            with self._lock():
                record = self.table.get(full)
                if record is None:
                    return ForgetResult("not_found")
                self.table.delete(full)
                warnings = self._purge() + self._after_write()
            return ForgetResult("deleted", record, warnings=warnings)
        if query is not None and not isinstance(query, str):  # ("'int' object has no attribute 'strip'")
            raise TypeError(f"query must be a string, not {type(query).__name__}")
        if not (query or "").strip():
            raise LtmError("Provide query or memoryId.")
        hits = self._search_once(str(query), FORGET_SEARCH_LIMIT, FORGET_MIN_SCORE)
        if not hits:
            return ForgetResult("none_matched")
        if len(hits) == 1 and (hits[0].score or 0.0) > FORGET_AUTO_SCORE:
            with self._lock():
                self.table.delete(hits[0].id)
                warnings = self._purge() + self._after_write()
            return ForgetResult("deleted", hits[0], warnings=warnings)
        return ForgetResult("candidates", candidates=hits)

    def _resolve_id(self, memory_id: str) -> str | None:
        value = str(memory_id).strip().lower()
        if UUID_RE.match(value):
            return value
        if not ID_PREFIX_RE.match(value):
            require_uuid(str(memory_id))  # raises R§14's "Invalid memory ID format"
        matches = self.table.ids_with_prefix(value)
        if len(matches) > 1:
            raise LtmError(f"memory id prefix {memory_id!r} is ambiguous: {', '.join(m[:13] for m in matches)}…")
        return matches[0] if matches else None

    # -- around a turn -------------------------------------------------------------------------
    def auto_recall(self, prompt: str) -> str | None:
        """R§14 ``before_agent_start``: the ``<relevant-memories>`` block for ``prompt``, or ``None``."""
        if not isinstance(prompt, str) or len(prompt) < AUTO_RECALL_MIN_PROMPT or not clean_text(prompt).strip():
            return None  # a blank prompt has nothing to recall by (it raised "query required")
        hits = self.search(prompt, limit=AUTO_RECALL_LIMIT, min_score=SEARCH_MIN_SCORE)
        return format_relevant_memories_context(hits) if hits else None

    def auto_capture(self, messages: Iterable[object]) -> builtins.list[StoreResult]:
        """R§14 ``agent_end``: store up to 3 user statements worth keeping (duplicates skipped).

        ``messages``: a turn's messages as a chat API has them, dicts of ``role`` and ``content`` (a
        string or a list of text blocks) or an SDK's message objects with those fields; a plain
        string is a user's text.  Only the user's messages are read."""
        texts = [clean_text(t) for t in capture_candidates(messages, self.config.capture_max_chars,
                                                             MAX_CAPTURES_PER_TURN)]
        if not texts:
            return []
        return self._healing(lambda: self._capture_once(texts))

    def _capture_once(self, texts: builtins.list[str]) -> builtins.list[StoreResult]:
        vectors = self._vectors(texts)
        results = []
        with self._lock():
            for text, vector in zip(texts, vectors, strict=True):
                results.append(self._store_locked(text, vector, DEFAULT_IMPORTANCE, detect_category(text),
                                                  "auto-capture"))
            if any(r.action == "created" for r in results):
                warnings = self._after_write()
                for r in results:
                    r.warnings += warnings
        return results

    # -- Markdown --------------------------------------------------------------------------------
    def export(self, *, include_superseded: bool = False) -> str:
        """The memories as Markdown: one dated bullet per memory with its category and id (superseded
        ones too with ``include_superseded``)."""
        from memdir.ltm.markdown import render

        return render(self.list(include_superseded=include_superseded), timezone=self.settings.user_timezone)

    def import_markdown(self, text: str, *, progress: Callable[[str, int, int], None] | None = None) -> ImportReport:
        """Apply ``text`` to the store: a Markdown file (an export, an edited mirror, or bullets a
        person wrote), or JSON (``ltm list --json``'s array, or JSON Lines: :func:`memdir.ltm.markdown.parse_json`).

        Bullets with a known id update that memory when text or category changed; bullets with an
        unknown id are restored as they are (id, date, importance, superseded state); bullets
        without an id are stored like :meth:`store` (duplicates skipped), except that the bullets
        of one file never supersede one another: a list is facts side by side ("server web-1 is
        10.0.0.1", "web-2 is 10.0.0.2"), and each superseded the one before, 1 of 4 kept.
        Nothing is deleted.  ``progress``, ``progress(stage, done, total)``, is told as the bullets
        are embedded (``"embedding"``) and written (``"writing"``).
        """
        return self._healing(lambda: self._import_once(text, progress))

    def _import_once(self, text: str, progress: Callable[[str, int, int], None] | None) -> ImportReport:
        import numpy as np

        from memdir.ltm.markdown import ms_of_day, parse_any

        items, skipped = parse_any(clean_text(text))
        report = ImportReport(skipped_lines=skipped)
        if not items:
            return report
        tz = self.settings.user_timezone
        days: list[int | None] = []  # checked before the first write: a bad line imports nothing
        for position, item in enumerate(items):
            if item.category is not None and item.category not in CATEGORIES:
                raise LtmError(f"line {item.line}: unknown category {item.category!r} "
                               f"(expected one of {', '.join(CATEGORIES)})")
            _check_length(item.text, f"line {item.line}: ")
            if item.importance is not None and not 0.0 <= item.importance <= 1.0:
                raise LtmError(f"line {item.line}: importance must be between 0 and 1, got {item.importance:g}")
            try:
                # A bullet's date has no time of day: file order breaks ties, so a restore lists alike.
                days.append(item.created_at if item.created_at is not None else
                            ms_of_day(item.date, tz) + position if item.date else None)
            except ValueError as exc:
                raise LtmError(f"line {item.line}: {exc}") from None
        # Embedded in batches, each cached as it comes: a run stopped halfway (Ctrl-C, a provider
        # down) embeds again only what it had not, and a long import can say how far it is.
        texts = [i.text for i in items]
        vectors: list[Any] = []
        for start in range(0, len(texts), IMPORT_EMBED_BATCH):
            vectors += self._vectors(texts[start:start + IMPORT_EMBED_BATCH])
            if progress is not None:
                progress("embedding", len(vectors), len(texts))
        with self._lock():
            new, changed = self._plan_import(items, np.stack(vectors), days, report)
            if new and not self.table.exists():
                self._finish_rebuilds()  # a killed recovery's new table goes in first, never beside a fresh one
                self.table.create(int(vectors[0].size), self.embedder.identity)
            # Each batch one commit, read back; a run killed between two leaves whole batches, and
            # run again finds those bullets stored (unchanged or duplicates), so nothing twice.
            for start in range(0, len(new), IMPORT_WRITE_BATCH):
                self.table.add(new[start:start + IMPORT_WRITE_BATCH])
                if progress is not None:
                    progress("writing", min(start + IMPORT_WRITE_BATCH, len(new)), len(new))
            for start in range(0, len(changed), IMPORT_WRITE_BATCH):
                self.table.replace(changed[start:start + IMPORT_WRITE_BATCH])
            for record in new:
                record.vector = None
            if report.updated:  # (an edited text's old words stayed in the store's files, as a forget's did)
                report.warnings += self._purge()
            # The mirror after every import, even one that wrote nothing: a run killed after its
            # last batch and before the mirror, run again, found every bullet stored and left the
            # mirror without them for good (as one where the mirror was turned on since).
            if report.created or report.updated or self.mirror_path is not None:
                report.warnings += self._after_write(applied=text)
        return report

    def _plan_import(self, items: builtins.list[Any], vectors: Any, days: builtins.list[int | None],
                     report: ImportReport) -> tuple[builtins.list[MemoryRecord], builtins.list[MemoryRecord]]:
        """Under the lock: what an import writes, as the bullets one by one would have (R§14's
        duplicate check against the store and the bullets before), without writing.  Returns the
        new memories and the stored ones rewritten (edited by a bullet, or superseded)."""
        from memdir.ltm.bulk import Neighbours

        near = Neighbours(self.table, vectors, scoring=self.config.scoring)
        stored = {r.id: r for r in near.records}
        new: dict[str, MemoryRecord] = {}  # by id, in file order
        position_of: dict[str, int] = {}
        at_position: dict[int, MemoryRecord] = {}  # (a duplicate of a bullet: its memory, found at once)
        changed: dict[str, MemoryRecord] = {}
        named = {i.id.lower() for i in items if i.id}  # a file's own memories are not superseded by it
        now = self._clock()
        for position, (item, vector, created) in enumerate(zip(items, vectors, days, strict=True)):
            category = item.category or detect_category(item.text)
            importance = item.importance if item.importance is not None else DEFAULT_IMPORTANCE
            key = item.id.lower() if item.id else None
            existing = changed.get(key) or new.get(key) or stored.get(key) if key else None
            if existing is not None:
                # An edited importance counts too: it was reported "unchanged" and dropped.
                if (existing.text, existing.category) == (item.text, category) and \
                        abs(float(existing.importance) - importance) <= 1e-6:
                    report.unchanged.append(existing.id)
                    continue
                existing.text, existing.category, existing.importance = item.text, category, importance
                existing.vector = vector
                if existing.id in new:  # a bullet's id twice in the file: the later one is the memory
                    near.pending[position_of[existing.id]] = False
                    near.pending[position] = existing.active
                    position_of[existing.id], at_position[position] = position, existing
                else:
                    changed[existing.id] = existing
                    near.update(existing.id, vector, category)
                report.updated.append(existing.id)
                continue
            if key is not None:
                by = item.superseded_by.lower() if item.superseded_by else None
                record = MemoryRecord(id=key, text=item.text, category=category, importance=importance,
                                      created_at=created if created is not None else self._clock(),
                                      superseded_by=by, superseded_at=(item.superseded_at or now) if by else None,
                                      source=item.source or "import", vector=vector)
                new[key], position_of[key], at_position[position] = record, position, record
                near.pending[position] = record.active
                report.created.append(key)
                continue
            same = None
            for _, hit in near.near(position, min_score=DUPLICATE_SCORE, limit=DUPLICATE_CANDIDATES):
                other = hit if isinstance(hit, MemoryRecord) else items[hit]
                if not says_something_else(item.text, other.text):
                    same = hit if isinstance(hit, MemoryRecord) else at_position[hit]
                    break
            if same is not None:
                report.duplicates.append(same.id)
                continue
            record = MemoryRecord(id=str(uuid.uuid4()), text=item.text, category=category, importance=importance,
                                  created_at=created if created is not None else self._clock(), source="import",
                                  vector=vector)
            new[record.id], position_of[record.id], at_position[position] = record, position, record
            near.pending[position] = True
            report.created.append(record.id)
            if self.config.supersede:
                for _, old in near.near(position, min_score=SUPERSEDE_MIN, limit=10, category=category, items=False):
                    if old.id in named or old.id in new:
                        continue
                    target = changed.get(old.id) or stored.get(old.id) or old
                    if target.vector is None:
                        target.vector = near.vector_of(old.id)
                    if target.vector is None:
                        target.vector = old.vector
                    target.superseded_by, target.superseded_at = record.id, now
                    changed[old.id] = target
                    near.supersede(old.id)
                    report.superseded.append(old.id)
        return list(new.values()), list(changed.values())

    def reembed(self, *, progress: Callable[[str, int, int], None] | None = None) -> int:
        """Re-embed every memory (superseded ones too) with the configured model; returns the count.
        ``progress("embedding", done, total)`` is told as the memories are embedded."""
        return self._healing(lambda: self._reembed_once(progress))

    def _reembed_once(self, progress: Callable[[str, int, int], None] | None = None) -> int:
        """Embed outside the lock (it can take minutes), then rewrite the table as it is under the
        lock: overwriting it with the rows read before lost every memory stored, and undid every
        forget, made meanwhile by another process (an MCP server, ``ltm store``)."""
        texts = list(dict.fromkeys(r.text for r in self.table.all(include_superseded=True)))
        if not texts:
            return 0
        vectors: dict[str, Any] = {}
        for start in range(0, len(texts), IMPORT_EMBED_BATCH):  # each batch cached: a rerun goes on from it
            batch = texts[start:start + IMPORT_EMBED_BATCH]
            vectors.update(zip(batch, self.embedder.documents(batch), strict=True))
            if progress is not None:
                progress("embedding", len(vectors), len(texts))
        with self._lock():
            records = self.table.all(include_superseded=True)
            if not records:
                return 0
            new = list(dict.fromkeys(r.text for r in records if r.text not in vectors))
            if new:
                vectors.update(zip(new, self.embedder.documents(new), strict=True))
            for record in records:
                record.vector = vectors[record.text]
            self.table.replace_all(records, int(records[0].vector.size), self.embedder.identity)
        self._checked = False
        return len(records)

    def sync_mirror(self) -> builtins.list[str]:
        """Regenerate the mirror file now (it is also regenerated after every change)."""

        def once() -> list[str]:
            with self._lock():
                return self._sync_mirror()

        return self._healing(once)

    def _after_write(self, applied: str | None = None) -> builtins.list[str]:
        """Under the write lock: compact the table when it has many fragments, then the mirror."""
        self._compact()
        return self._sync_mirror(applied)

    def _purge(self) -> builtins.list[str]:
        """Under the write lock, after a forget (or an import that edited a memory's text): leave
        nothing of the deleted text on disk.  A failure (a full disk) is said; the memory is
        forgotten (edited) all the same."""
        try:
            self.table.purge_deleted()
        except Exception as exc:
            log.warning("the forgotten text is still in the long-term memory store's files: %s", exc)
            return [f"the forgotten text is still in the long-term memory store's files ({exc}); the next "
                    "forget removes it"]
        return []

    def _compact(self) -> None:
        try:
            self.table.maybe_compact()
        except Exception as exc:  # a slower search later, never a lost write
            log.warning("long-term memory compaction failed: %s", exc)

    def _sync_mirror(self, applied: str | None = None) -> builtins.list[str]:
        if self.mirror_path is None:
            return []
        from memdir.ltm.markdown import mirror_header, render, write_mirror

        try:
            content = render(self.table.all(), timezone=self.settings.user_timezone,
                             header=mirror_header(self.settings.agent_id, self.db_path))
            warning = write_mirror(self.mirror_path, content, self.db_path / "mirror-state.json", applied=applied)
        except OSError as exc:  # the store changed; a mirror that cannot be written only warns
            warning = f"could not write the long-term memory mirror {self.mirror_path}: {exc}"
        if warning:
            log.warning("%s", warning)
            return [warning]
        return []

    # -- lifecycle -----------------------------------------------------------------------------
    def close(self) -> None:
        if self._embedder is not None:
            self._embedder.close()
            self._embedder = None
        if self._owns_provider and self._provider is not None:
            try:
                self._provider.close()
            except Exception:
                pass
            self._provider = None
        self.table.close()
        self._checked = False

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
