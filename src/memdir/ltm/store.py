"""The LanceDB table behind long-term memory: one per agent, rows as R§14, created lazily.

Rows: ``id`` (UUID), ``text``, ``vector`` (float32, fixed width), ``importance``, ``category``,
``createdAt`` (ms) — OpenClaw's columns — plus memdir's ``supersededBy``/``supersededAt`` (a
memory replaced by a newer one stays listed with ``--all``) and ``source`` (tool, cli,
auto-capture, import).  A table written by OpenClaw opens too: missing memdir columns are
added.  The table's schema metadata records which provider and model made the vectors, so a
change of model is refused with a clear message instead of comparing incomparable vectors.

**Scores.**  LanceDB's ``l2`` distance is the *squared* Euclidean distance; OpenClaw scores a
hit ``1/(1+d²)`` (R§14, ``scoring = "openclaw"``).  memdir's providers return unit vectors,
for which ``d² = 2 − 2·cos``: OpenClaw's auto-recall cut-off 0.3 then means ``cos ≥ −0.17``
(every memory passes) and its duplicate bar 0.95 means ``cos ≥ 0.974``.  By default memdir
scores with cosine similarity (``scoring = "cosine"``) and applies R§14's numbers to it —
recall ≥ 0.3, duplicate ≥ 0.95, forget > 0.9 / ≥ 0.7 — so the thresholds filter again.

Only ids (UUID-checked) and categories (a fixed set) ever reach a LanceDB filter; user text
never does.  Reads see other processes' writes at once (``read_consistency_interval=0``).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import time
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any

import numpy as np

from memdir.errors import MemdirError

TABLE = "memories"
UUID_RE = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$", re.IGNORECASE)
ID_PREFIX_RE = re.compile(r"^[0-9a-f-]{8,36}$", re.IGNORECASE)
_META_PREFIX = "memdir."
COMPACT_AT_FRAGMENTS = 32
#: ``optimize`` compacts and cleans up in one call; this keeps every version until the compacted
#: table has been read back (``compact_files`` alone needs ``pylance``, which lancedb does not install).
KEEP_VERSIONS_WHILE_COMPACTING = timedelta(days=36500)
#: How long a version is kept after a newer one (a reader in another process may be reading it).
KEEP_OLD_VERSIONS = timedelta(hours=1)
#: Versions older than :data:`KEEP_OLD_VERSIONS` that start a cleanup although the fragments are
#: few: a store then a forget, over and over, adds a version each and never a 2nd fragment.
CLEAN_AT_OLD_VERSIONS = 64
EXTRA_COLUMNS = {"supersededBy": "CAST(NULL AS STRING)", "supersededAt": "CAST(NULL AS BIGINT)",
                 "source": "CAST(NULL AS STRING)"}


class LtmError(MemdirError):
    """Long-term memory could not do what was asked; the message says why (a :class:`MemdirError`,
    as the rest of memdir's: ``mem.long_term.store("")`` raised it past a host's ``except MemdirError``)."""


class LtmUnavailableError(LtmError):
    """The ``lancedb`` extra is not installed."""


class TableDamaged(RuntimeError):
    """The table's newest version reads as no table at all (its manifest zero-filled or cut short):
    damage to heal (:mod:`memdir.ltm.heal`), not a table of another program."""


class ModelMismatchError(LtmError):
    """The table's vectors come from another embedding model than the configured one."""


def import_lancedb() -> Any:
    """``lancedb``, or an error that names the extra to install."""
    try:
        import lancedb
    except ImportError as exc:
        raise LtmUnavailableError(
            "long-term memory needs the LanceDB extra, which is not installed: pip install 'memdir[lancedb]' "
            f"({exc})") from None
    return lancedb


def score_from_l2(squared_distance: float) -> float:
    """R§14's score for LanceDB's ``l2`` distance: ``1/(1+d)`` (0 → 1.0, 1 → 0.5, 2.33 → 0.3003)."""
    return 1.0 / (1.0 + max(0.0, float(squared_distance)))


def score_from_cosine_distance(distance: float) -> float:
    """Cosine similarity from LanceDB's ``cosine`` distance (``1 − cos``)."""
    return 1.0 - float(distance)


@dataclass
class MemoryRecord:
    """One long-term memory (``score`` is set on search hits)."""

    id: str
    text: str
    category: str
    importance: float
    created_at: int
    superseded_by: str | None = None
    superseded_at: int | None = None
    source: str | None = None
    score: float | None = None
    #: Not compared: two records holding equal vectors in two arrays made ``==`` raise NumPy's "The
    #: truth value of an array with more than one element is ambiguous" (``rec in hits``, a host's
    #: ``assert before == after``).
    vector: np.ndarray | None = field(default=None, repr=False, compare=False)

    @property
    def active(self) -> bool:
        return not self.superseded_by

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "text": self.text, "category": self.category,
                               "importance": round(float(self.importance), 4), "createdAt": self.created_at}
        if self.superseded_by:
            out["supersededBy"] = self.superseded_by
            out["supersededAt"] = self.superseded_at
        if self.source:
            out["source"] = self.source
        if self.score is not None:
            out["score"] = round(float(self.score), 4)
        return out


def _record(row: dict[str, Any], score: float | None = None) -> MemoryRecord:
    vec = row.get("vector")
    return MemoryRecord(
        id=str(row["id"]), text=str(row["text"]), category=str(row.get("category") or "other"),
        importance=float(row.get("importance") if row.get("importance") is not None else 0.7),
        created_at=int(row.get("createdAt") or 0), superseded_by=row.get("supersededBy") or None,
        superseded_at=row.get("supersededAt"), source=row.get("source") or None, score=score,
        vector=np.asarray(vec, dtype=np.float32) if vec is not None else None)


#: The columns a memory row of this memdir has (what :meth:`LanceTable.create` makes).
KNOWN_COLUMNS = frozenset({"id", "text", "vector", "importance", "category", "createdAt", *EXTRA_COLUMNS})


def _row(r: MemoryRecord) -> dict[str, Any]:
    return {"id": r.id, "text": r.text, "vector": np.asarray(r.vector, dtype=np.float32).tolist(),
            "importance": float(r.importance), "category": r.category, "createdAt": int(r.created_at),
            "supersededBy": r.superseded_by, "supersededAt": r.superseded_at, "source": r.source}


class LanceTable:
    """The ``memories`` table in one LanceDB folder, opened on first use."""

    def __init__(self, path: Path, *, scoring: str = "cosine"):
        self.path = path
        self.scoring = scoring
        self._db: Any = None
        self._table: Any = None
        self._readable = False

    # -- opening -------------------------------------------------------------------------------
    def _connect(self) -> Any:
        if self._db is None:
            lancedb = import_lancedb()
            self.path.mkdir(parents=True, exist_ok=True, mode=0o700)  # private: LanceDB's files follow the umask
            self._db = lancedb.connect(str(self.path), read_consistency_interval=timedelta(0))
        return self._db

    def check_readable(self) -> None:
        """Raise :class:`LtmError` naming the folder, its owner and the fix when this user cannot read
        the store.  Why: a store made private by memdir run as root (``sudo memdir ltm store``) was
        listed as "No memories." and searched as "No matches.": the memories were there."""
        if not self._readable:
            from memdir.stores.sqlite_health import folder_refused

            why = folder_refused(self.path, os.R_OK | os.X_OK)
            if why is not None:
                raise LtmError(f"cannot read the long-term memory store: {why}")
            self._readable = True

    def check_writable(self) -> None:
        """The same for writing: a store this user cannot write failed with "[Errno 13] Permission
        denied: '…/ltm.lock'" after two warnings about its embedding cache."""
        from memdir.stores.sqlite_health import folder_refused

        self.check_readable()
        why = folder_refused(self.path, os.W_OK | os.X_OK)
        if why is not None:
            raise LtmError(f"cannot write the long-term memory store: {why}")

    def exists(self) -> bool:
        if self._table is not None:
            return True
        self.check_readable()
        if not self._committed():
            return False
        return TABLE in _table_names(self._connect())

    def _committed(self) -> bool:
        """Whether the table folder holds a committed version (a ``_versions/*.manifest``).

        LanceDB lists a ``memories.lance`` folder as a table as soon as it exists, and opening one
        with no version fails ("Table 'memories' was not found"): a store seen mid-creation by
        another writer, or left so by a creator killed in between, failed every call for good.
        Such a folder holds no row, so it counts as no table yet."""
        versions = self.path / f"{TABLE}.lance" / "_versions"
        try:
            return any(name.endswith(".manifest") for name in os.listdir(versions))
        except OSError:
            return False

    def _old_versions(self) -> int:
        """How many committed versions are older than :data:`KEEP_OLD_VERSIONS` (by their manifest)."""
        cutoff = time.time() - KEEP_OLD_VERSIONS.total_seconds()
        try:
            with os.scandir(self.path / f"{TABLE}.lance" / "_versions") as entries:
                return sum(1 for e in entries if e.name.endswith(".manifest") and e.stat().st_mtime <= cutoff)
        except OSError:
            return 0

    def _clear_uncommitted(self) -> None:
        """Remove a table folder with no committed version (under the writers' lock: no creator is
        running, so it is a killed one's leftover and holds no row) so the table can be created."""
        folder = self.path / f"{TABLE}.lance"
        if (folder.exists() or folder.is_symlink()) and not self._committed():
            if folder.is_dir() and not folder.is_symlink():
                shutil.rmtree(folder)
            else:
                folder.unlink()

    def table(self) -> Any | None:
        """The table, or ``None`` before the first memory is stored."""
        if self._table is None and self.exists():
            table = self._connect().open_table(TABLE)
            self._check_schema(table.schema)
            missing = {k: v for k, v in EXTRA_COLUMNS.items() if k not in table.schema.names}
            if missing:  # a table written by OpenClaw: add memdir's columns, keep every row
                table.add_columns(missing)
            self._table = table
        return self._table

    def _check_schema(self, schema: Any) -> None:
        """Refuse a ``memories`` table that holds no memories (another program's LanceDB folder
        named as ``dbPath``, a folder copied over it): it got memdir's columns added, and every
        command then failed with the bare name of a column it lacks ("memdir ltm: 'text'")."""
        import pyarrow as pa

        names = schema.names
        if not names:  # (a zero-filled newest manifest opens as a version 0 of no columns)
            raise TableDamaged(f"the newest version of the table {self.path / (TABLE + '.lance')} holds no columns "
                               "(its manifest is damaged)")
        vector = schema.field("vector").type if "vector" in names else None
        if "id" in names and "text" in names and vector is not None and pa.types.is_fixed_size_list(vector):
            return
        raise LtmError(f"the table {self.path / (TABLE + '.lance')} is not a long-term memory table (its columns: "
                       f"{', '.join(names) or 'none'}; memdir needs id, text and a vector of fixed width): it was "
                       "left as it is; set longTermMemory.dbPath to a folder of its own, or move that table aside")

    def create(self, dims: int, identity: dict[str, str]) -> Any:
        import pyarrow as pa

        schema = pa.schema([
            pa.field("id", pa.string(), nullable=False),
            pa.field("text", pa.string(), nullable=False),
            pa.field("vector", pa.list_(pa.float32(), dims)),
            pa.field("importance", pa.float32()),
            pa.field("category", pa.string()),
            pa.field("createdAt", pa.int64()),
            pa.field("supersededBy", pa.string()),
            pa.field("supersededAt", pa.int64()),
            pa.field("source", pa.string()),
        ], metadata={f"{_META_PREFIX}{k}": str(v) for k, v in identity.items()})
        self._clear_uncommitted()
        self._table = self._connect().create_table(TABLE, schema=schema, exist_ok=True)
        return self._table

    def identity(self) -> dict[str, str]:
        table = self.table()
        if table is None:
            return {}
        meta = table.schema.metadata or {}
        out = {}
        for k, v in meta.items():
            key = k.decode() if isinstance(k, bytes) else str(k)
            if key.startswith(_META_PREFIX):
                out[key[len(_META_PREFIX):]] = v.decode() if isinstance(v, bytes) else str(v)
        return out

    def dims(self) -> int | None:
        table = self.table()
        if table is None:
            return None
        return int(table.schema.field("vector").type.list_size)

    def check_compatible(self, identity: dict[str, str], dims: int | None) -> None:
        """Refuse to compare vectors from another model (or of another width)."""
        have = self.identity()
        table_dims = self.dims()
        if dims is not None and table_dims is not None and table_dims != dims:
            raise ModelMismatchError(
                f"the long-term memory table at {self.path} holds {table_dims}-dimensional vectors"
                f"{_made_by(have)}, but {identity.get('provider')}/{identity.get('model')} makes {dims}; "
                "run `memdir ltm reembed` to re-embed every memory with the current model, or set "
                "longTermMemory.dbPath to another folder")
        if have.get("model") and (have.get("model"), have.get("provider")) != (identity.get("model"),
                                                                                identity.get("provider")):
            raise ModelMismatchError(
                f"the long-term memory table at {self.path} was embedded{_made_by(have)}, but the configured model "
                f"is {identity.get('provider')}/{identity.get('model')}; run `memdir ltm reembed` to re-embed every "
                "memory with it, or configure longTermMemory.embedding to match")

    # -- reading -------------------------------------------------------------------------------
    def search(self, vector: np.ndarray, *, limit: int, min_score: float = 0.0, category: str | None = None,
               active_only: bool = True) -> list[MemoryRecord]:
        table = self.table()
        if table is None or limit <= 0:
            return []
        metric = "l2" if self.scoring == "openclaw" else "cosine"
        query = table.search(np.asarray(vector, dtype=np.float32).tolist()).distance_type(metric).limit(int(limit))
        where = []
        if active_only:
            where.append("supersededBy IS NULL")
        if category is not None:
            where.append(f"category = '{_safe_category(category)}'")
        if where:
            query = query.where(" AND ".join(where), prefilter=True)
        hits = []
        for row in query.to_list():
            distance = float(row["_distance"])
            score = score_from_l2(distance) if metric == "l2" else score_from_cosine_distance(distance)
            if score >= min_score:
                hits.append(_record(row, score))
        hits.sort(key=lambda r: -(r.score or 0.0))
        return hits

    def all(self, *, include_superseded: bool = False, with_vectors: bool = False) -> list[MemoryRecord]:
        table = self.table()
        if table is None:
            return []
        columns = [c for c in table.schema.names if with_vectors or c != "vector"]
        rows = table.to_arrow().select(columns).to_pylist()
        records = [_record(r) for r in rows]
        if not include_superseded:
            records = [r for r in records if r.active]
        records.sort(key=lambda r: (r.created_at, r.id))
        return records

    def matrix(self) -> tuple[list[MemoryRecord], np.ndarray]:
        """Every row (superseded ones too) in table order, and their vectors as one float32 matrix.

        Why: a bulk import compares each bullet with every memory; a LanceDB search a bullet (two,
        with the supersede check) cost ~30 ms each, and the vectors as Python lists several seconds."""
        table = self.table()
        if table is None:
            return [], np.zeros((0, 0), dtype=np.float32)
        data = table.to_arrow()
        rows = data.select([c for c in data.schema.names if c != "vector"]).to_pylist()
        column = data.column("vector").combine_chunks()
        width = getattr(column.type, "list_size", None) or (len(column[0]) if len(column) else 0)
        flat = np.array(column.flatten().to_numpy(zero_copy_only=False), dtype=np.float32)  # (writable)
        return [_record(r) for r in rows], flat.reshape(len(rows), width) if len(rows) else flat.reshape(0, width)

    def count(self) -> int:
        table = self.table()
        return 0 if table is None else int(table.count_rows())

    def get(self, memory_id: str) -> MemoryRecord | None:
        table = self.table()
        if table is None:
            return None
        rows = table.search().where(f"id = '{require_uuid(memory_id)}'").limit(1).to_list()
        return _record(rows[0]) if rows else None

    def ids_with_prefix(self, prefix: str) -> list[str]:
        if not ID_PREFIX_RE.match(prefix):
            return []
        low = prefix.lower()
        return [r.id for r in self.all(include_superseded=True) if r.id.lower().startswith(low)]

    # -- writing -------------------------------------------------------------------------------
    def add(self, records: list[MemoryRecord]) -> None:
        if not records:
            return
        table = self.table()
        if table is None:
            raise LtmError("internal: table not created before add")
        self._check_columns(table)
        before = table.version
        with self._no_room_said():
            table.add([_row(r) for r in records])
        self._read_back(table, before, [r.id for r in records])

    def replace(self, record: MemoryRecord | list[MemoryRecord]) -> None:
        """Rewrite memories in place (an edited text and its vector, a superseded mark) in one commit.

        A delete then an add was two commits: a crash or a full disk between them lost the memory.
        """
        records = record if isinstance(record, list) else [record]
        if not records:
            return
        table = self.table()
        if table is None:
            raise LtmError("internal: table not created before replace")
        self._check_columns(table)
        before = table.version
        with self._no_room_said():
            table.merge_insert("id").when_matched_update_all().execute([_row(r) for r in records])
        self._read_back(table, before, [r.id for r in records])

    def _check_columns(self, table: Any) -> None:
        """Refuse to write whole rows into a table with columns this memdir does not know (a newer
        memdir's): every store failed with Lance's "Append with different schema: fields did not
        match, missing=[…], location: <a Rust source path>", and a reembed rewrote the table with
        those columns emptied in every row.  Reading, forgetting and marking rows superseded, which
        leave the other columns as they are, still work."""
        unknown = [name for name in table.schema.names if name not in KNOWN_COLUMNS]
        if unknown:
            raise LtmError(f"the long-term memory table {self.path / (TABLE + '.lance')} has columns this memdir "
                           f"does not know ({', '.join(unknown)}): a newer memdir wrote it, and this older one "
                           "leaves it as it is rather than write memories without them (recall and list still "
                           "work). Upgrade memdir, or restart the process still running the older one (a "
                           "`memdir mcp` or chat started before an upgrade)")

    @contextlib.contextmanager
    def _no_room_said(self) -> Iterator[None]:
        """A write LanceDB refused for want of room said "lance error: LanceError(IO): File too large
        (os error 27), <a Rust source path>", naming neither the store nor what to check."""
        try:
            yield
        except Exception as exc:
            from memdir.errors import without_source_location
            from memdir.ltm.heal import first_line

            text = str(exc)
            if not any(m in text for m in ("os error 28", "os error 27", "os error 122", "No space left",
                                           "File too large")):
                raise
            raise LtmError(f"the long-term memory store {self.path} could not be written (is the disk full, or a "
                           f"file size limit reached?): {without_source_location(first_line(exc))}") from None

    def _read_back(self, table: Any, before: int, ids: list[str] | None) -> None:
        """Read what a write just committed (the rows ``ids``, or every row); if it does not read,
        go back to version ``before`` and fail.

        LanceDB 0.40 commits a data file cut short by a full disk or a file size limit without
        an error (measured with RLIMIT_FSIZE): the write was reported done, and the next read
        found the table damaged and the new memory gone.
        """
        from memdir.ltm.heal import first_line, is_damage

        try:
            if ids is None or not all(UUID_RE.match(i) for i in ids):  # a foreign table's ids stay out of filters
                table.to_arrow()
            else:
                quoted = ", ".join(f"'{i}'" for i in ids)  # as stored: a foreign table may use upper case
                found = table.search().where(f"id IN ({quoted})").select(["id"]).limit(len(ids)).to_list()
                if len(found) < len(set(ids)):
                    raise LtmError(f"wrote {len(ids)} rows but {len(found)} read back")
        except Exception as exc:
            if not isinstance(exc, LtmError) and not is_damage(exc):
                raise
            try:
                table.restore(before)
            except Exception:  # no room even for a manifest: the next operation heals the table
                pass
            raise LtmError(f"the long-term memory store {self.path} could not be written (is the disk full?): "
                           f"{first_line(exc)}") from None

    def delete(self, memory_id: str) -> None:
        table = self.table()
        if table is not None:
            table.delete(f"id = '{require_uuid(memory_id)}'")

    def purge_deleted(self) -> None:
        """After a forget: rewrite the table from its live rows in one commit, then remove every
        older version and the files only they used.

        Why: LanceDB deletes by marking a row deleted in its data file, and keeps each version for
        :data:`KEEP_OLD_VERSIONS` at least (until 64 of them wait, which for a rarely written store
        is never), so a forgotten memory stayed spelt out in ``memories.lance/data`` and came back
        whole from ``table.checkout(<older version>)``.  The rewrite costs a read and a write of
        the table (LanceDB does not expose rewriting the one data file that held the row: 0.05-0.1 s
        at 5,000 memories).  A reader of another process caught between two files of a version
        removed here could fail once, which the hour compaction keeps versions for avoids; none did
        in 1,225 reads beside 214 forgets."""
        old = self.table()
        if old is None:
            return
        data = old.to_arrow()  # every column as it is, an unknown newer one's too
        before = old.version
        with self._no_room_said():
            self._table = self._connect().create_table(TABLE, data=data, schema=data.schema, mode="overwrite")
        self._read_back(self._table, before, None)
        with warnings.catch_warnings():  # LanceDB's own words on the risk told above, to the user's stderr
            warnings.simplefilter("ignore", UserWarning)
            self._table.optimize(cleanup_older_than=timedelta(0))

    def mark_superseded(self, memory_ids: list[str], by: str, at_ms: int) -> None:
        table = self.table()
        if table is None or not memory_ids:
            return
        quoted = ", ".join(f"'{require_uuid(i)}'" for i in memory_ids)
        before = table.version
        table.update(where=f"id IN ({quoted})", values={"supersededBy": require_uuid(by), "supersededAt": int(at_ms)})
        self._read_back(table, before, memory_ids)

    def replace_all(self, records: list[MemoryRecord], dims: int, identity: dict[str, str]) -> None:
        """Rewrite the table with new vectors (``reembed``): one overwrite, readers see old or new."""
        import pyarrow as pa

        old = self.table()
        self._check_columns(old)
        schema = pa.schema([f if f.name != "vector" else pa.field("vector", pa.list_(pa.float32(), dims))
                            for f in old.schema], metadata={f"{_META_PREFIX}{k}": v for k, v in identity.items()})
        data = pa.Table.from_pylist([_row(r) for r in records], schema=schema)
        before = old.version
        self._table = self._connect().create_table(TABLE, data=data, schema=schema, mode="overwrite")
        self._read_back(self._table, before, None)

    def maybe_compact(self, max_fragments: int = COMPACT_AT_FRAGMENTS) -> bool:
        """Merge small fragments once there are ``max_fragments``, or once
        :data:`CLEAN_AT_OLD_VERSIONS` old versions wait to be removed; returns whether it compacted.

        Every LanceDB write adds a fragment, and a search visits each one: measured at 1,000
        memories stored one by one, a search took ~200 ms over 1,000 fragments and ~8 ms after
        compaction.  Versions older than :data:`KEEP_OLD_VERSIONS` are cleaned up with it (readers
        re-check the latest version on every query, so none still needs them).  Every version keeps
        its files until then: 200 stores each forgotten at once left 1,000 files (3.9 MB) for one
        memory when only the fragment count started a cleanup.
        """
        table = self.table()
        if table is None:
            return False
        fragments = int((table.stats().get("fragment_stats") or {}).get("num_fragments") or 0)
        if fragments < max_fragments and self._old_versions() < CLEAN_AT_OLD_VERSIONS:
            return False
        before = table.version
        table.optimize(cleanup_older_than=KEEP_VERSIONS_WHILE_COMPACTING)
        self._read_back(table, before, None)  # before old versions go: they hold the rows otherwise
        table.optimize(cleanup_older_than=KEEP_OLD_VERSIONS)
        return True

    def close(self) -> None:
        self._table = None
        self._db = None


def require_uuid(memory_id: str) -> str:
    """The id if it is UUID-shaped (R§14: deletes need one), else an error saying so."""
    value = str(memory_id or "").strip()
    if not UUID_RE.match(value):
        raise LtmError(f"Invalid memory ID format: {memory_id}")
    return value.lower()


def _safe_category(category: str) -> str:
    from memdir.ltm.capture import CATEGORIES

    if category not in CATEGORIES:
        raise LtmError(f"unknown category {category!r} (expected one of {', '.join(CATEGORIES)})")
    return category


def _made_by(identity: dict[str, str]) -> str:
    return f" by {identity.get('provider')}/{identity.get('model')}" if identity.get("model") else ""


def _table_names(db: Any) -> list[str]:
    if hasattr(db, "list_tables"):
        listed = db.list_tables()
        return list(getattr(listed, "tables", listed))
    return list(db.table_names())
