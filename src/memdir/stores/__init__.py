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


def postgres_agent_key(settings: Settings) -> str:
    """The agent's key in PostgreSQL's shared tables: it follows the SQLite file's naming (the chosen
    agent id, else a name derived from the workspace, so two workspaces never share an index)."""
    return settings.index_path.stem if settings.index_key == "workspace" else settings.agent_id


def unapplied_settings(settings: Settings) -> list[str]:
    """What the configured store does not do of the settings given (said by index, search and status).

    ``store.fts.tokenizer = "trigram"`` shapes a SQLite index alone: on PostgreSQL a part of a
    word ("ebra", "UserAccount" inside getUserAccountById), which SQLite's trigram index finds,
    found nothing, and nothing said why."""
    store_cfg = settings.memory_search.store
    if store_cfg.driver == "postgres" and store_cfg.fts.tokenizer == "trigram":
        return ['store.fts.tokenizer = "trigram" applies to SQLite indexes only: PostgreSQL matches whole '
                'words, so a part of a word (a substring) finds nothing; remove the setting, or keep this '
                'index in SQLite (store.driver = "sqlite") to match substrings']
    return []


def open_store(settings: Settings, *, readonly: bool = False, notice: Callable[[str], None] | None = None,
               driver: str | None = None) -> Store:
    """The configured store for one agent's index (created on first use unless ``readonly``).

    A damaged index is set aside on open and ``notice`` told once (the next sync rebuilds it);
    an index that cannot be written (a read-only state folder; a PostgreSQL read replica or
    read-only role) gives a read-only store (``store.readonly``).  ``driver`` overrides
    ``store.driver`` (``memdir migrate`` opens both backends of one agent).
    """
    store_cfg = settings.memory_search.store
    if (driver or store_cfg.driver) == "postgres":
        from memdir.stores.pgconn import require_psycopg, resolve_dsn

        require_psycopg()
        from memdir.stores.postgres import PostgresStore

        pg = store_cfg.postgres
        return PostgresStore.open(resolve_dsn(store_cfg.dsn), postgres_agent_key(settings), notice=notice,
                                  readonly=readonly, schema=pg.db_schema, pool_size=pg.pool_size,
                                  text_search_config=pg.text_search_config,
                                  hnsw_min_vectors=pg.hnsw_min_vectors, ranking=pg.ranking,
                                  vector_enabled=store_cfg.vector.enabled)
    from memdir.stores.sqlite import SqliteStore

    return SqliteStore.open(settings.index_path, notice=notice, fts_tokenizer=store_cfg.fts.tokenizer,
                            vector_enabled=store_cfg.vector.enabled, extension_path=store_cfg.vector.extension_path,
                            readonly=readonly)


__all__ = ["ChunkRow", "FileRows", "Hit", "Store", "open_store", "postgres_agent_key", "unapplied_settings"]
