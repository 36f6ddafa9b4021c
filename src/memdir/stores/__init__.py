"""Index backends behind one seam (:class:`memdir.stores.base.Store`).

``open_store(settings)`` picks the backend from ``memorySearch.store.driver``; the sync engine
and the search pipeline only ever see the :class:`Store` protocol.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from memdir.stores.base import ChunkRow, FileRows, Hit, Store

if TYPE_CHECKING:
    from memdir.config import Settings


def open_store(settings: Settings, *, readonly: bool = False, notice: Callable[[str], None] | None = None) -> Store:
    """The configured store for one agent's index (created on first use unless ``readonly``).

    A damaged index is set aside on open and ``notice`` told once (the next sync rebuilds it);
    a state folder that cannot be written gives a read-only store (``store.readonly``).
    """
    store_cfg = settings.memory_search.store
    from memdir.stores.sqlite import SqliteStore

    return SqliteStore.open(settings.index_path, notice=notice, fts_tokenizer=store_cfg.fts.tokenizer,
                            vector_enabled=store_cfg.vector.enabled, extension_path=store_cfg.vector.extension_path,
                            readonly=readonly)


__all__ = ["ChunkRow", "FileRows", "Hit", "Store", "open_store"]
