"""``Memory``: the Python API over one agent's workspace and index.

    from memdir import Memory
    with Memory("~/agent-workspace") as mem:
        mem.sync()
        for hit in mem.search("what did we decide about the API?").results:
            print(hit.path, hit.start_line, hit.snippet)

A ``Memory`` is safe to share between threads: store access is serialised and ``sync`` takes
the index's writer lock, which also keeps other processes from writing at the same time.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from memdir.embeddings.registry import DISABLED, ProviderSelection, select_provider
from memdir.lock import LockTimeout
from memdir.search import SearchResponse, run_search
from memdir.settings_cache import SnapshotConfig
from memdir.stores import Store, open_store
from memdir.workspace import PathError, discover, read_lines, resolve_readable

if TYPE_CHECKING:  # imported where used: pydantic and the indexer are not needed to answer a search
    from memdir.config import LoadedConfig, Settings
    from memdir.sync import Indexer, Progress, SyncReport

log = logging.getLogger(__name__)

SearchMode = Literal["hybrid", "keyword", "vector"]
SEARCH_MODES = ("hybrid", "keyword", "vector")


class MemdirError(RuntimeError):
    """memdir could not do what was asked; the message says why."""


class IndexOwnershipError(MemdirError):
    """The configured index file belongs to another workspace."""


@dataclass
class GetResult:
    text: str
    path: str

    def as_dict(self) -> dict[str, str]:
        return {"text": self.text, "path": self.path}


class Memory:
    """One agent's memory: its workspace files, its index and its embedding provider."""

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        agent_id: str | None = None,
        config: str | os.PathLike[str] | Mapping[str, Any] | Settings | LoadedConfig | None = None,
        state_dir: str | os.PathLike[str] | None = None,
        provider: Any = None,
    ):
        if isinstance(config, SnapshotConfig):  # the CLI's remembered settings (memdir.settings_cache)
            self.loaded: Any = config
            self.settings: Any = config.settings
            self._init_parts(provider)
            return
        from memdir.config import LoadedConfig, Settings, load_config

        if isinstance(config, LoadedConfig):
            loaded = config
        elif isinstance(config, Settings):
            loaded = LoadedConfig(config, {}, None)
        elif isinstance(config, Mapping):
            loaded = load_config(workspace=workspace, agent_id=agent_id, state_dir=state_dir, overrides=config)
        else:
            loaded = load_config(config_path=config, workspace=workspace, agent_id=agent_id, state_dir=state_dir)
        self.loaded = loaded
        self.settings = loaded.settings
        self._init_parts(provider)

    def _init_parts(self, provider: Any) -> None:
        self._provider_override = provider
        self._selection: ProviderSelection | None = None
        self._store: Store | None = None
        self._indexer: Indexer | None = None
        self._long_term: Any = None

    # -- lazily built parts ------------------------------------------------------------------
    @property
    def workspace(self) -> Path:
        return self.settings.workspace_path

    @property
    def index_path(self) -> Path:
        return self.settings.index_path

    @property
    def selection(self) -> ProviderSelection:
        if self._selection is None:
            if self._provider_override is not None:
                override = self._provider_override
                self._selection = ProviderSelection(override, getattr(override, "id", "custom"))
            else:
                self._selection = select_provider(self.settings.memory_search)
        return self._selection

    @property
    def store(self) -> Store:
        if self._store is None:
            store = open_store(self.settings)
            self._check_owner(store)
            self._store = store
        return self._store

    def _check_owner(self, store: Store) -> None:
        meta = store.read_meta()
        owner = (meta or {}).get("workspace")
        if owner and owner != str(self.workspace):
            store.close()
            raise IndexOwnershipError(
                f"index {self.index_path} belongs to workspace {owner}, not {self.workspace}; "
                "give this workspace its own agent id (--agent NAME) or index path (store.path)"
            )

    @property
    def indexer(self) -> Indexer:
        if self._indexer is None:
            from memdir.sync import Indexer

            sel = self.selection
            transient = sel.provider is None and sel.requested not in ("none", "off", "fts-only")
            self._indexer = Indexer(self.settings, self.store, sel.provider, provider_transiently_missing=transient,
                                    extra_sources=self._extra_sources())
        return self._indexer

    def _extra_sources(self) -> list[Any]:
        ms = self.settings.memory_search
        if "sessions" not in ms.sources:
            return []
        from memdir.sessions.source import SessionsSource

        return [SessionsSource(self.settings.sessions_dir, delta_bytes=ms.sync.sessions.delta_bytes,
                               delta_messages=ms.sync.sessions.delta_messages)]

    @property
    def long_term(self) -> Any:
        """This agent's long-term memory (:class:`memdir.ltm.LongTermMemory`; needs ``memdir[lancedb]``)."""
        if self._long_term is None:
            from memdir.ltm.memory import LongTermMemory

            self._long_term = LongTermMemory.for_memory(self)
        return self._long_term

    # -- operations --------------------------------------------------------------------------
    def sync(self, *, force: bool = False, progress: Progress | None = None, reason: str = "api",
             deadline: float | None = None, lock_timeout: float | None = None) -> SyncReport:
        """Bring the index up to date with the files (a full rebuild with ``force``).

        When embedding fails and ``memorySearch.fallback`` names another provider, memdir switches
        to it once (R§5.1) and rebuilds the index with it; the switch is recorded in the report,
        in ``status`` and in search responses.
        """
        kwargs = {"progress": progress, "deadline": deadline, "lock_timeout": lock_timeout}
        log.info("sync (%s%s): %s -> %s", reason, ", full" if force else "", self.workspace, self.index_path)
        try:
            report = self.indexer.sync(force=force, reason=reason, **kwargs)
        except LockTimeout:
            raise
        except Exception as exc:
            if not self._switch_to_fallback(exc):
                raise
            return self._rebuild_after_fallback(reason, exc, kwargs)
        if report.embedding_error is not None and self._switch_to_fallback(report.embedding_error):
            return self._rebuild_after_fallback(reason, report.embedding_error, kwargs)
        self._warn_keyword_only(report)
        return report

    def _warn_keyword_only(self, report: SyncReport) -> None:
        """Say where it happens that a provider was asked for but the index gets keywords only."""
        sel = self.selection
        if sel.provider is None and sel.requested not in DISABLED and sel.unavailable_reason:
            why = "; ".join(line.strip() for line in sel.unavailable_reason.splitlines() if line.strip())
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

    def search(self, query: str, *, max_results: int | None = None, min_score: float | None = None,
               explain: bool = False, sync: bool | None = None, mode: SearchMode = "hybrid") -> SearchResponse:
        """Search memory; a dirty index is synced first within ``sync.searchBudgetMs``.

        ``mode``: ``"hybrid"`` (keywords and vectors, as configured), ``"keyword"`` (BM25 only:
        the query is not embedded) or ``"vector"`` (embeddings only; an error when no embedding
        provider is available).
        """
        if mode not in SEARCH_MODES:
            raise ValueError(f"unknown search mode {mode!r} (expected one of {', '.join(SEARCH_MODES)})")
        ms = self.settings.memory_search
        stale, sync_error = False, None
        do_sync = ms.sync.on_search if sync is None else sync
        if do_sync:
            try:
                stale = self._sync_for_search()
            except Exception as exc:  # a failed sync never fails the search: answer from what is indexed
                stale, sync_error = True, f"sync before search failed: {exc}"
        sel = self.selection
        provider = sel.provider
        label = (provider.id, provider.model) if provider else ("none", "fts-only")
        meta = self.store.read_meta() or {}
        if provider is not None and meta.get("model") not in (None, provider.model):
            provider = None  # the index still holds another model's vectors: keywords only
        cfg = ms
        if mode == "keyword":
            provider = None
        elif mode == "vector":
            if provider is None:
                raise MemdirError("vector search needs embeddings, and none are available: "
                                  + (sel.unavailable_reason or "the index was built with another model")
                                  .splitlines()[0])
            cfg = ms.model_copy(deep=True)
            cfg.query.hybrid.enabled = False  # run_search: vectors only, keyword hits left out
        response = run_search(
            self.store, cfg, query, provider=provider, workspace=self.workspace, max_results=max_results,
            min_score=min_score, explain=explain, provider_label=label, timezone=self.settings.user_timezone,
        )
        if mode == "vector" and response.mode == "hybrid":
            response.mode = "vector"
        if sel.fallback_from:
            response.fallback = {"from": sel.fallback_from, "reason": sel.fallback_reason or ""}
        elif sel.provider is None and sel.unavailable_reason and response.fallback is None:
            response.warnings.append(sel.unavailable_reason)
        response.stale = response.stale or stale
        if sync_error:
            response.warnings.append(sync_error)
        return response

    def _sync_for_search(self) -> bool:
        """Read-your-writes: index changed files before searching; ``True`` if that was cut short."""
        budget = self.settings.memory_search.sync.search_budget_ms / 1000
        if self.store.read_meta() is None:
            deadline = None  # first search on an empty index: build it (R§6 bootstrap)
        else:
            changed, gone = self.indexer.dirty_files()
            if not changed and not gone:
                return False
            deadline = time.monotonic() + budget
        try:
            report = self.sync(reason="search", deadline=deadline, lock_timeout=0 if deadline else None)
        except LockTimeout:
            return True
        return report.incomplete

    def get(self, path: str, *, from_line: int | None = None, lines: int | None = None) -> GetResult:
        """Read a memory file (or a slice of it); raises :class:`PathError` naming the problem."""
        resolved = resolve_readable(path, self.workspace, self.settings.extra_paths)
        return GetResult(read_lines(resolved, from_line, lines), resolved.rel)

    def append_daily(self, text: str, *, date: Any = None) -> str:
        """Append ``text`` to today's ``memory/YYYY-MM-DD.md`` (user timezone); returns that path.

        Append-only and safe with concurrent writers (threads and processes): see
        :mod:`memdir.daily`.  The next :meth:`search` sees the entry, because the file's size
        changed and searches index dirty files first.
        """
        from memdir.daily import append_daily

        return append_daily(self.workspace, text, date=date, timezone=self.settings.user_timezone)

    def status(self, *, deep: bool = False) -> dict[str, Any]:
        """What is indexed, what is stale, and which parts (FTS, vectors, provider) work."""
        ms = self.settings.memory_search
        found = discover(self.workspace, self.settings.extra_paths)
        exists = self.index_path.exists()
        store = self.store if exists else None
        counts = store.counts_by_source() if store else {}
        meta = (store.read_meta() if store else None) or {}
        dirty_files: list[str] = []
        removed: list[str] = []
        if store:
            changed, gone = self.indexer.dirty_files()
            dirty_files = [f.path for f in changed]
            removed = [p for p, _ in gone]
        out: dict[str, Any] = {
            "agentId": self.settings.agent_id,
            "workspace": str(self.workspace),
            "indexPath": str(self.index_path),
            # what names the index: "workspace" (no agent id chosen), "agent" or "path" (store.path)
            "indexKey": self.settings.index_key,
            "indexExists": exists,
            "sources": list(ms.sources),
            "extraPaths": [str(p) for p in self.settings.extra_paths],
            "files": sum(f for f, _ in counts.values()),
            "chunks": sum(c for _, c in counts.values()),
            "scannedFiles": len(found.files),
            "sourceCounts": [
                {"source": s, "files": counts.get(s, (0, 0))[0], "chunks": counts.get(s, (0, 0))[1]}
                for s in ms.sources
            ],
            "dirty": bool(dirty_files or removed) or not exists,
            "dirtyFiles": dirty_files[:50],
            "removedFiles": removed[:50],
            "requestedProvider": ms.provider,
            "indexedWith": {k: meta.get(k) for k in ("provider", "model", "vectorDims", "builtAt")} if meta else None,
            "issues": list(found.issues),
        }
        sel = self.selection
        out["provider"] = sel.provider.id if sel.provider else "none"
        out["model"] = sel.provider.model if sel.provider else "fts-only"
        out["mode"] = sel.mode
        if sel.fallback_from:
            out["fallback"] = {"from": sel.fallback_from, "reason": sel.fallback_reason}
        if sel.unavailable_reason:
            out["providerUnavailableReason"] = sel.unavailable_reason
        if store:
            holder = self.indexer.lock.holder()
            out["writer"] = holder
            backend = store.describe()
            out["store"] = {k: v for k, v in backend.items() if k not in ("fts", "vector")}
            out["fts"] = {"enabled": True, **backend["fts"]}
            out["vector"] = {"enabled": ms.store.vector.enabled, "available": True, "vectors": store.vector_count(),
                             "dims": store.vec_dims(), **backend["vector"]}
            out["cache"] = {"enabled": ms.cache.enabled, "entries": store.cache_count(),
                            "maxEntries": ms.cache.max_entries}
        if deep:
            if store is not None and "sqlite" in out.get("store", {}):
                out["sqlite"] = out["store"]["sqlite"]
            else:
                from memdir import db

                out["sqlite"] = db.binding_name()
            out["embeddingProbe"] = self._probe_embeddings()
        return out

    def _probe_embeddings(self) -> dict[str, Any]:
        sel = self.selection
        if sel.provider is None:
            return {"ok": False, "error": sel.unavailable_reason or "No embedding provider available (FTS-only mode)"}
        t0 = time.perf_counter()
        try:
            vec = sel.provider.embed_batch(["ping"])[0]
            return {"ok": True, "dims": len(vec), "ms": round((time.perf_counter() - t0) * 1000, 1)}
        except Exception as exc:
            return {"ok": False, "error": str(exc)}

    # -- lifecycle ---------------------------------------------------------------------------
    def close(self) -> None:
        if self._long_term is not None:
            self._long_term.close()
            self._long_term = None
        if self._store is not None:
            self._store.close()
            self._store = None
        self._indexer = None
        if self._selection is not None and self._selection.provider is not None:
            try:
                self._selection.provider.close()
            except Exception:
                pass

    def __enter__(self) -> Memory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["GetResult", "IndexOwnershipError", "Memory", "PathError"]
