"""The PostgreSQL schema of :mod:`memdir.stores.postgres` and its migrations.

The schema is versioned: ``schema_version`` lists the migrations applied; opening a store
applies the missing ones in order, in one transaction, under a session-level advisory lock taken
before it (two hosts starting at once never race), and refuses a database newer than this memdir.  A
schema that is already current is only read, so a read replica or a read-only role can open it.
Connections, pools and the writer lock are in :mod:`memdir.stores.pgconn`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from memdir.errors import StoreError

#: pgvector 0.5.0 introduced HNSW indexes; older versions cannot serve memdir.
MIN_PGVECTOR = (0, 5, 0)
#: memdir's tables in a schema (besides ``schema_version``).
TABLES = ("indexes", "files", "chunks", "vectors", "embedding_cache", "index_state", "frequent_lexemes")


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0].strip()


def version_tuple(text: str) -> tuple[int, ...]:
    out = []
    for part in text.split("."):
        digits = "".join(ch for ch in part if ch.isdigit())
        out.append(int(digits or 0))
    return tuple(out)


# -- migrations -------------------------------------------------------------------------------

@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    apply: Callable[[Any, dict[str, Any]], None]


def _v1_tables(conn: Any, ctx: dict[str, Any]) -> None:
    """The shared tables, keyed by index generation (``indexes.id``), see stores/postgres.py."""
    conn.execute(
        """
        CREATE TABLE indexes(
            id bigserial PRIMARY KEY,
            agent text NOT NULL,
            state text NOT NULL CHECK (state IN ('building', 'live', 'retired')),
            ts_config text NOT NULL,
            meta jsonb,
            n_docs bigint NOT NULL DEFAULT 0,
            total_len bigint NOT NULL DEFAULT 0,
            created_at timestamptz NOT NULL DEFAULT now(),
            built_by text);
        CREATE UNIQUE INDEX indexes_one_live ON indexes(agent) WHERE state = 'live';
        CREATE INDEX indexes_agent ON indexes(agent);
        CREATE TABLE files(
            index_id bigint NOT NULL, path text NOT NULL, source text NOT NULL, hash text NOT NULL,
            mtime bigint NOT NULL, size bigint NOT NULL, PRIMARY KEY(index_id, path, source));
        CREATE TABLE chunks(
            index_id bigint NOT NULL, id text NOT NULL, path text NOT NULL, source text NOT NULL,
            start_line int NOT NULL, end_line int NOT NULL, hash text NOT NULL, model text NOT NULL,
            text text NOT NULL, tsv tsvector NOT NULL, doc_len int NOT NULL, embedded boolean NOT NULL,
            updated_at bigint NOT NULL, ts bigint, PRIMARY KEY(index_id, id));
        CREATE INDEX chunks_file ON chunks(index_id, path, source);
        CREATE INDEX chunks_unembedded ON chunks(index_id) WHERE NOT embedded;
        CREATE TABLE vectors(
            index_id bigint NOT NULL, chunk_id text NOT NULL, seq smallint NOT NULL DEFAULT 0,
            dims int NOT NULL, embedding vector NOT NULL, PRIMARY KEY(index_id, chunk_id, seq));
        ALTER TABLE vectors ALTER COLUMN embedding SET STORAGE PLAIN;
        CREATE TABLE embedding_cache(
            provider text NOT NULL, model text NOT NULL, provider_key text NOT NULL, hash text NOT NULL,
            dims int NOT NULL, embedding vector NOT NULL, updated_at bigint NOT NULL,
            PRIMARY KEY(provider, model, provider_key, hash));
        ALTER TABLE embedding_cache ALTER COLUMN embedding SET STORAGE PLAIN;
        CREATE INDEX embedding_cache_lru ON embedding_cache(updated_at);
        """
    )
    # With btree_gin the keyword index is keyed by (index generation, lexeme): a query for one agent
    # never walks another agent's postings.  Without it (not every server has the contrib module),
    # one GIN over the lexemes, filtered by generation afterwards.
    if ctx.get("btree_gin"):
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin(index_id, tsv)")
    else:
        conn.execute("CREATE INDEX chunks_tsv ON chunks USING gin(tsv)")


def _v2_stems_dates(conn: Any, ctx: dict[str, Any]) -> None:
    """Exact and stemmed keyword columns (as SQLite's two FTS5 columns), per-chunk dates, a write version.

    ``tsv`` now holds unstemmed tokens; rows written before keep their old vector until the
    identity change that came with this schema (index schema 2) rebuilds them.
    """
    conn.execute(
        """
        ALTER TABLE chunks ADD COLUMN tsv_stem tsvector, ADD COLUMN date_start text, ADD COLUMN date_end text;
        ALTER TABLE indexes ADD COLUMN version bigint NOT NULL DEFAULT 0;
        -- keep a chunk's row (text and both tsvectors) inline and uncompressed up to a page: phrase matches
        -- are rechecked and the best rows ranked on their tsvectors, and de-TOASTing cost more than either
        -- (measured: moving them out of line made a 10k-chunk keyword search 4x slower)
        ALTER TABLE chunks SET (toast_tuple_target = 8160);
        CREATE INDEX chunks_dates ON chunks(index_id, date_start, date_end);
        """
    )
    key = "index_id, tsv_stem" if ctx.get("btree_gin") else "tsv_stem"
    conn.execute(f"CREATE INDEX chunks_tsv_stem ON chunks USING gin({key})")


def _v3_state(conn: Any, ctx: dict[str, Any]) -> None:
    """Small JSON values kept with each generation (skipped files, owner claim, last recovery)."""
    conn.execute("CREATE TABLE index_state(index_id bigint NOT NULL, key text NOT NULL, value jsonb NOT NULL, "
                 "PRIMARY KEY(index_id, key))")


def _v4_frequent(conn: Any, ctx: dict[str, Any]) -> None:
    """Lexemes in at least half of a generation's chunks (left out of keyword matches, as SQLite does)."""
    conn.execute(
        """
        ALTER TABLE indexes ADD COLUMN churn bigint NOT NULL DEFAULT 0, ADD COLUMN frequent_at bigint;
        CREATE TABLE frequent_lexemes(index_id bigint NOT NULL, col text NOT NULL, lexeme text NOT NULL,
            ndoc bigint NOT NULL, PRIMARY KEY(index_id, col, lexeme));
        """
    )


MIGRATIONS: tuple[Migration, ...] = (
    Migration(1, "shared tables keyed by index generation; tsvector GIN; pgvector vectors; shared cache",
              _v1_tables),
    Migration(2, "exact + stemmed tsvector columns, per-chunk dates, generation write version", _v2_stems_dates),
    Migration(3, "per-generation state (skipped files, owner claim, last recovery)", _v3_state),
    Migration(4, "frequent lexemes per generation and the churn since they were counted", _v4_frequent),
)
LATEST = MIGRATIONS[-1].version


def lock_key(*parts: str) -> int:
    """A signed 64-bit advisory-lock key, the same on every host."""
    digest = hashlib.sha256("\0".join(("memdir", *parts)).encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def _extension(conn: Any) -> tuple[str, str] | None:
    row = conn.execute("SELECT e.extversion, n.nspname FROM pg_extension e JOIN pg_namespace n "
                       "ON n.oid = e.extnamespace WHERE e.extname = 'vector'").fetchone()
    return (str(row[0]), str(row[1])) if row else None


def _ensure_extension(conn: Any, readonly: str | None) -> tuple[str, str]:
    """pgvector's version and schema, creating the extension when this role may."""
    found = _extension(conn)
    if found is None:
        why = readonly
        if why is None:
            try:
                conn.execute("CREATE EXTENSION IF NOT EXISTS vector")
            except Exception as exc:
                if getattr(exc, "sqlstate", None) == "57014":  # query_canceled: the server's timeout, not the role
                    raise
                why = f"this role cannot install it ({_first_line(exc)})"
            found = _extension(conn)
        if found is None:
            raise StoreError(
                f"the pgvector extension is not installed in this database and {why}; ask an administrator "
                f"to run: CREATE EXTENSION vector; (pgvector >= {'.'.join(map(str, MIN_PGVECTOR))})")
    version, ext_schema = found
    if version_tuple(version) < MIN_PGVECTOR:
        raise StoreError(f"pgvector {version} is too old: memdir needs >= {'.'.join(map(str, MIN_PGVECTOR))} "
                         "(HNSW indexes); run ALTER EXTENSION vector UPDATE")
    return version, ext_schema


def _try_btree_gin(conn: Any) -> bool:
    if conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").fetchone():
        return True
    if not conn.execute("SELECT 1 FROM pg_available_extensions WHERE name = 'btree_gin'").fetchone():
        return False
    try:
        with conn.transaction():
            conn.execute("CREATE EXTENSION IF NOT EXISTS btree_gin")
        return True
    except Exception:
        return False


def server_readonly(conn: Any) -> str | None:
    """Why nothing may be written on this connection's server or role, or ``None``."""
    standby, ro = conn.execute("SELECT pg_is_in_recovery(), current_setting('transaction_read_only')").fetchone()
    if standby:
        return "the server is a read replica (hot standby)"
    if ro == "on":
        return "transactions are read-only for this role or database (default_transaction_read_only)"
    return None


def _may_write(conn: Any, schema: str) -> str | None:
    """Why this role may not write memdir's tables in ``schema`` (a read-only role), or ``None``."""
    row = conn.execute(
        "SELECT current_user, coalesce(bool_and(has_table_privilege(r, p)), true) FROM (SELECT to_regclass("
        "format('%%I.%%I', %s::text, t)) AS r, p FROM (VALUES ('chunks', 'INSERT'), ('chunks', 'DELETE'), "
        "('vectors', 'INSERT'), ('files', 'INSERT'), ('indexes', 'UPDATE'), ('index_state', 'INSERT'), "
        "('embedding_cache', 'INSERT')) AS w(t, p)) AS x WHERE r IS NOT NULL",  # a missing table is check()'s
        (schema,)).fetchone()
    return None if row[1] else f"role {row[0]} may not write memdir's tables in schema {schema!r} (read-only role)"


def schema_version(conn: Any, schema: str) -> int:
    """The schema's migration level, read without writing anything (0: not created yet)."""
    if conn.execute("SELECT to_regclass(format('%%I.schema_version', %s::text))", (schema,)).fetchone()[0] is None:
        return 0
    from psycopg import sql

    query = sql.SQL("SELECT coalesce(max(version), 0) FROM {}.schema_version").format(sql.Identifier(schema))
    return int(conn.execute(query).fetchone()[0])


def migrate(conn: Any, schema: str, upto: int | None = None) -> dict[str, Any]:
    """Bring ``schema`` to the latest version (or ``upto``); returns server facts for ``describe``.

    A schema already at that version is only read (no DDL, no lock): that is what lets a read
    replica or a read-only role open it, with ``facts["readonly"]`` saying why nothing may be written.
    """
    target = LATEST if upto is None else upto
    readonly = server_readonly(conn)
    pgvector, ext_schema = _ensure_extension(conn, readonly)
    current = schema_version(conn, schema)
    if current > LATEST:
        raise StoreError(f"database schema {schema!r} is at version {current}, newer than this memdir "
                         f"understands ({LATEST}): upgrade memdir")
    if current < target:
        if readonly is not None:
            state = f"is at version {current}" if current else "does not exist"
            raise StoreError(f"database schema {schema!r} {state} and this memdir needs version {target}, but "
                             f"{readonly}: run memdir once against the primary with a role that may create tables")
        btree_gin = _try_btree_gin(conn)
        try:
            current = _apply(conn, schema, ext_schema, target, {"btree_gin": btree_gin})
        except Exception as exc:
            if getattr(exc, "sqlstate", None) != "42501":  # insufficient_privilege
                raise
            raise StoreError(f"cannot create memdir's tables in schema {schema!r} ({_first_line(exc)}): run memdir "
                             "once with a role that may (CREATE on the database, or on an existing schema), or "
                             "choose a schema this role owns (store.postgres.schema)") from None
    if readonly is None and current >= LATEST:
        readonly = _may_write(conn, schema)
    btree_gin = conn.execute("SELECT 1 FROM pg_extension WHERE extname = 'btree_gin'").fetchone() is not None
    server = conn.execute("SHOW server_version").fetchone()[0]
    return {"server": f"PostgreSQL {server}", "pgvector": pgvector, "vector_schema": ext_schema,
            "btree_gin": btree_gin, "schema_version": current, "readonly": readonly}


def _apply(conn: Any, schema: str, ext_schema: str, target: int, ctx: dict[str, Any]) -> int:
    """The missing migrations, in one transaction under the schema's advisory lock; the new version.

    The lock is taken *before* the transaction: a backend that waited for an advisory lock inside
    its transaction still saw the catalog as it was before the wait (advisory locks do not apply
    catalog invalidations; a new transaction does), so when several processes created a fresh
    schema at once, all but the first failed with 'duplicate key … pg_namespace_nspname_index'.
    """
    key = lock_key("schema", schema)
    # Another host's migration may take minutes (an index over every chunk): wait for it, whatever
    # the session's lock_timeout; its own statements are bounded by that timeout.
    prev = conn.execute("SELECT current_setting('lock_timeout')").fetchone()[0]
    conn.execute("SELECT set_config('lock_timeout', '0', false)")
    try:
        conn.execute("SELECT pg_advisory_lock(%s)", (key,))
    finally:
        conn.execute("SELECT set_config('lock_timeout', %s, false)", (prev,))
    try:
        return _apply_locked(conn, schema, ext_schema, target, ctx)
    finally:
        if not conn.closed:
            conn.execute("SELECT pg_advisory_unlock(%s)", (key,))


def _apply_locked(conn: Any, schema: str, ext_schema: str, target: int, ctx: dict[str, Any]) -> int:
    from psycopg import sql

    with conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(schema)))
        set_search_path(conn, schema, ext_schema)
        conn.execute("CREATE TABLE IF NOT EXISTS schema_version(version int PRIMARY KEY, description text "
                     "NOT NULL, applied_at timestamptz NOT NULL DEFAULT now())")
        current = conn.execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()[0]
        if current > LATEST:
            raise StoreError(f"database schema {schema!r} is at version {current}, newer than this memdir "
                             f"understands ({LATEST}): upgrade memdir")
        if current == 0:
            # Tables named like memdir's but no version record: not memdir's, or its record was deleted.
            # Creating the tables would fail on the first of them with "relation … already exists".
            taken = [t for (t,) in conn.execute("SELECT t FROM unnest(%s::text[]) t WHERE to_regclass(format("
                                                "'%%I.%%I', %s::text, t)) IS NOT NULL", (list(TABLES), schema))]
            if taken:
                raise StoreError(f"schema {schema!r} already holds tables named like memdir's ({', '.join(taken)}) "
                                 "but no record of memdir's schema version: it is not memdir's, or that record "
                                 "was deleted; choose another schema (store.postgres.schema) or drop this one")
        for m in MIGRATIONS:
            if current < m.version <= target:
                m.apply(conn, ctx)
                conn.execute("INSERT INTO schema_version(version, description) VALUES (%s, %s)",
                             (m.version, m.description))
                current = m.version
    return int(current)


def set_search_path(conn: Any, schema: str, ext_schema: str) -> None:
    path = ", ".join(dict.fromkeys(f'"{s}"' for s in (schema, ext_schema, "public")))
    conn.execute("SELECT set_config('search_path', %s, false)", (path,))
