"""Index backends behind one seam (:class:`memdir.stores.base.Store`).

``open_store(settings)`` picks the backend from ``memorySearch.store.driver``; the sync engine
and the search pipeline only ever see the :class:`Store` protocol.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from memdir.stores.base import ChunkRow, FileRows, Hit, Store

if TYPE_CHECKING:
    from memdir.config import Settings


def open_store(settings: Settings, *, readonly: bool = False) -> Store:
    """The configured store for one agent's index (created on first use unless ``readonly``)."""
    store_cfg = settings.memory_search.store
    from memdir.stores.sqlite import SqliteStore

    return SqliteStore(settings.index_path, fts_tokenizer=store_cfg.fts.tokenizer,
                       vector_enabled=store_cfg.vector.enabled, extension_path=store_cfg.vector.extension_path,
                       readonly=readonly)


__all__ = ["ChunkRow", "FileRows", "Hit", "Store", "open_store"]
