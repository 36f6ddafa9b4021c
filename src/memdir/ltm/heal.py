"""A damaged long-term memory table is set aside and rebuilt from what can still be read.

The LanceDB table is the source of truth for these memories (unlike the SQLite index of the
Markdown notes, nothing else can regenerate it), so a table whose files fail to read — a data
file, a deletion file or the newest manifest overwritten, truncated or gone — must neither stay
broken (every command, ``store`` included, failed on it forever) nor be thrown away.

**Detecting.**  :func:`is_damage` tells LanceDB's I/O errors (``LanceError(IO)``: a short or
missing file, a garbled manifest) from ordinary failures (a bad filter, a schema mismatch, a
model change: ``ValueError`` or :class:`LtmError`).  Before anything moves, :func:`table_problem`
confirms the damage by reading the whole table on a fresh connection: a write that failed for
another reason (disk full, read-only folder) finds the table readable and is re-raised as it is.

**Salvaging** (:func:`salvage`), never writing to the damaged folder: each manifest version is
opened through a *shadow* folder (copies of the manifests up to that version, symbolic links to
the data), so a garbled newest manifest hides only itself.  From the newest version that opens,
rows are read per fragment: LanceDB's row ids are ``fragment << 32 | offset`` and a filter on
``_rowid`` skips the fragments outside its range, so ranges of fragments are bisected down to the
unreadable ones.  When rows are still missing, earlier versions fill in (at most as many rows as
are missing, never a row of a fragment the newest version still reads: those rows were deleted
or updated since; a row from before a ``reembed`` keeps its text and is embedded again with the
current model).  Then the Markdown mirror, when it is this store's: memories it lists that
are still missing are restored with their ids, dates and categories, re-embedded.

**Swapping**, under ``ltm.lock`` so that one process recovers and the others wait, then use the
new table.  The new table is built in ``.ltm-rebuild-<time>-<pid>/new`` beside the store and
read back; ``READY.json`` is written then, and only then does :func:`finish_rebuilds` rename the
damaged ``memories.lance`` to ``memories.lance.damaged-<UTC time>`` and the new table into its
place.  A process killed at any point leaves either the damaged table in place with an
unfinished build (deleted by the next process; the damage is found and recovered again), or a
``READY.json`` whose renames the next process completes: every memdir operation first finishes
such a rebuild under the lock, before it reads or creates a table.  Nothing is deleted but the
build folder: the damaged table stays beside the store for a person (or a later tool) to look at.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from memdir.atomic_write import replace_file
from memdir.errors import without_source_location
from memdir.ltm.store import TABLE, LtmError, MemoryRecord, TableDamaged, _record

TABLE_DIR = f"{TABLE}.lance"
DAMAGED_INFIX = ".damaged-"
REBUILD_PREFIX = ".ltm-rebuild-"
READY = "READY.json"
RECOVERY_FILE = "recovery.json"
#: Earlier versions read for rows the newest one lost (each read is ~1 ms for a small table).
MAX_EARLIER_VERSIONS = 200
#: Fragment ids are u32; ``(2**31) << 32`` is the largest row id an i64 filter literal can bound.
_FRAGMENT_SPACE = 1 << 31
#: Bisection queries at most: each unreadable fragment costs about 2 × 31 (halvings down to it).
MAX_BISECT_QUERIES = 4000
_DAMAGE_MARKERS = ("lanceerror(io)", "lanceerror(corrupt", "corrupt file", "not found:")
#: What Lance says (as a ``ValueError``) of a data file whose first bytes are not its magic number.
_NOT_LANCE = "does not appear to be a lance file"


def is_damage(exc: BaseException) -> bool:
    """Whether ``exc`` says a file of the table is unreadable (not a bad query, not a model change)."""
    if isinstance(exc, TableDamaged):
        return True
    if isinstance(exc, ValueError) and _NOT_LANCE in str(exc).lower():
        # a data file zero-filled at its length (a crash on ext4 or xfs): Lance calls it invalid input
        return True
    if isinstance(exc, (LtmError, ValueError, PermissionError)):
        return False
    if not isinstance(exc, (RuntimeError, OSError)):
        return False
    text = str(exc).lower()
    return any(m in text for m in _DAMAGE_MARKERS)


def _connect(folder: Path) -> Any:
    import lancedb

    return lancedb.connect(str(folder), read_consistency_interval=timedelta(0))


def table_problem(db_path: Path) -> str | None:
    """The first line of the error reading the whole table on a fresh connection, or ``None``
    when it reads (or there is no table)."""
    if not (db_path / TABLE_DIR).exists():
        return None
    try:
        table = _connect(db_path).open_table(TABLE)
        if not table.schema.names:  # a zero-filled newest manifest: read as "version 0", no columns
            return "the newest version of the table holds no columns (its manifest is damaged)"
        table.to_arrow()
    except Exception as exc:
        if is_damage(exc):
            return first_line(exc)
        return None
    return None


def first_line(exc: BaseException) -> str:
    return without_source_location((str(exc).strip().splitlines() or [type(exc).__name__])[0])


# --- reading what is left ---------------------------------------------------------------------


def manifest_versions(table_dir: Path) -> list[tuple[int, Path]]:
    """``(version, manifest file)``, newest first; both of Lance's naming schemes (V2 names count down)."""
    found = []
    try:
        entries = list((table_dir / "_versions").iterdir())
    except OSError:
        return []
    for path in entries:
        if path.suffix != ".manifest":
            continue
        try:
            number = int(path.stem)
        except ValueError:
            continue
        version = (2**64 - 1 - number) if number >= 2**63 else number
        found.append((version, path))
    found.sort(key=lambda vp: -vp[0])
    return found


def _shadow(table_dir: Path, manifests: list[Path], root: Path) -> Path:
    """A folder holding a table that is ``table_dir`` as of the newest of ``manifests``."""
    shadow = root / TABLE_DIR
    (shadow / "_versions").mkdir(parents=True)
    for entry in table_dir.iterdir():
        if entry.name != "_versions":
            os.symlink(entry.resolve(), shadow / entry.name)
    for manifest in manifests:
        shutil.copyfile(manifest, shadow / "_versions" / manifest.name)
    return root


def _rows(table: Any) -> list[dict[str, Any]]:
    return table.search().with_row_id(True).limit(None).to_arrow().to_pylist()


def _ids_in(table: Any, lo: int, hi: int) -> list[dict[str, Any]]:
    """``id`` and ``_rowid`` of the rows of fragments ``lo``..``hi - 1``.

    Only a scan of a variable-width column skips the fragments outside a ``_rowid`` range
    (measured with LanceDB 0.40: selecting a fixed-width column reads every fragment), so the
    range scan reads ids alone and :func:`read_by_fragment` takes the whole rows by row id.
    """
    where = f"_rowid >= {lo << 32} AND _rowid <= {(hi << 32) - 1}"
    return table.search().with_row_id(True).where(where).select(["id"]).limit(None).to_arrow().to_pylist()


def read_by_fragment(table: Any) -> tuple[list[dict[str, Any]], set[int], int]:
    """Every row that reads, the fragment ids that read, and how many fragments did not.

    Ranges of fragment ids are bisected: a range whose scan fails is halved until the failing
    fragments stand alone; the rows of the others are then taken whole, fragment by fragment.
    Each row keeps its ``_rowid``.
    """
    try:
        rows = _rows(table)
        return rows, _fragments_of(rows), 0
    except Exception as exc:
        if not is_damage(exc):
            raise
    try:  # a range past any real fragment must read (as nothing) if ranges skip fragments at all
        _ids_in(table, _FRAGMENT_SPACE - 1, _FRAGMENT_SPACE)
    except Exception as exc:
        if not is_damage(exc):
            raise
        return [], set(), 1
    found: dict[int, list[int]] = {}
    lost = 0
    budget = MAX_BISECT_QUERIES

    def visit(lo: int, hi: int) -> None:
        nonlocal lost, budget
        if budget <= 0:
            lost += 1
            return
        budget -= 1
        try:
            part = _ids_in(table, lo, hi)
        except Exception as exc:
            if not is_damage(exc):
                raise
            if hi - lo == 1:
                lost += 1
                return
            mid = (lo + hi) // 2
            visit(lo, mid)
            visit(mid, hi)
            return
        for row in part:
            found.setdefault(int(row["_rowid"]) >> 32, []).append(int(row["_rowid"]))

    visit(0, _FRAGMENT_SPACE)
    rows: list[dict[str, Any]] = []
    readable: set[int] = set()
    for fragment, row_ids in sorted(found.items()):
        try:
            rows.extend(table.take_row_ids(row_ids).with_row_id().to_arrow().to_pylist())
        except Exception as exc:  # another file of the fragment (a column added later) is damaged
            if not is_damage(exc):
                raise
            lost += 1
            continue
        readable.add(fragment)
    return rows, readable, lost


def _fragments_of(rows: list[dict[str, Any]]) -> set[int]:
    return {int(r["_rowid"]) >> 32 for r in rows}
def _identity(schema: Any) -> dict[str, str]:
    from memdir.ltm.store import _META_PREFIX

    out = {}
    for k, v in (schema.metadata or {}).items():
        key = k.decode() if isinstance(k, bytes) else str(k)
        if key.startswith(_META_PREFIX):
            out[key[len(_META_PREFIX):]] = v.decode() if isinstance(v, bytes) else str(v)
    return out


def _made_by(schema: Any) -> tuple[dict[str, str], int | None]:
    """The model identity and vector width of a table version."""
    dims = int(schema.field("vector").type.list_size) if "vector" in schema.names else None
    return _identity(schema), dims


@dataclass
class Salvage:
    """What :func:`salvage` read from a damaged table."""

    records: list[MemoryRecord] = field(default_factory=list)
    identity: dict[str, str] = field(default_factory=dict)
    dims: int | None = None
    expected: int | None = None  # rows of the version read (``None``: no version opened)
    version: int | None = None
    newest_version: int | None = None
    from_earlier: int = 0
    lost_fragments: int = 0


def salvage(table_dir: Path, work: Path, *, keep_ids: set[str] | None = None) -> Salvage:
    """Every row that still reads from the damaged table at ``table_dir`` (see the module doc).

    ``keep_ids``: the active memories the mirror lists; when given, a row of an earlier version
    that is active but not listed there was forgotten since and is not brought back.
    """
    versions = manifest_versions(table_dir)
    out = Salvage(newest_version=versions[0][0] if versions else None)
    readable: set[int] = set()
    rows: list[dict[str, Any]] = []
    start = len(versions)
    for i, (version, _) in enumerate(versions[:MAX_EARLIER_VERSIONS]):
        try:
            table = _connect(_shadow(table_dir, [m for _, m in versions[i:]], work / f"v{version}")).open_table(TABLE)
            schema = table.schema
            if not schema.names:  # a zero-filled manifest opens as an empty "version 0": no version at all
                continue
            expected = int(table.count_rows())
            rows, readable, out.lost_fragments = read_by_fragment(table)
        except Exception:  # this manifest (or what it names) does not open: try the one before
            continue
        out.version, out.expected = version, expected
        out.identity, out.dims = _made_by(schema)
        start = i + 1
        break
    have = {str(r["id"]) for r in rows}
    missing = (out.expected or 0) - len(rows)
    for version, _ in versions[start:start + MAX_EARLIER_VERSIONS]:
        if missing <= 0:
            break
        try:
            manifests = [m for v, m in versions if v <= version]
            table = _connect(_shadow(table_dir, manifests, work / f"v{version}")).open_table(TABLE)
            older, _, _ = read_by_fragment(table)
            other_model = out.version is not None and _made_by(table.schema) != (out.identity, out.dims)
        except Exception:
            continue
        candidates = [r for r in older if str(r["id"]) not in have and int(r["_rowid"]) >> 32 not in readable
                      and (keep_ids is None or str(r["id"]).lower() in keep_ids or r.get("supersededBy"))]
        candidates.sort(key=lambda r: (keep_ids is not None and str(r["id"]).lower() not in keep_ids,
                                       -int(r.get("createdAt") or 0)))
        for row in candidates[:missing]:
            if other_model:  # before a reembed: the text is kept, the vector is made again by the rebuild
                row["vector"] = None
            rows.append(row)
            have.add(str(row["id"]))
            out.from_earlier += 1
            missing -= 1
    out.records = [_record(r) for r in rows]
    return out


def mirror_records(mirror: Path | None, header: str, *, known: list[MemoryRecord], timezone: str | None,
                   clock: Callable[[], int]) -> list[MemoryRecord]:
    """Memories the mirror lists that ``known`` lacks (by id, else by text); vectors still to make.

    Only a mirror whose owner line is ``header``'s (this store's own) is read.
    """
    from memdir.ltm.capture import CATEGORIES, detect_category
    from memdir.ltm.markdown import DEFAULT_IMPORTANCE, MIRROR_MARK, ms_of_day, parse

    if mirror is None:
        return []
    try:
        text = mirror.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []
    owner = next((line for line in text.splitlines() if line.startswith(MIRROR_MARK)), None)
    if owner is None or owner != header:
        return []
    import uuid

    from memdir.ltm.store import UUID_RE

    ids = {r.id.lower() for r in known}
    texts = {r.text for r in known if r.active}
    items, _ = parse(text)
    out = []
    for position, item in enumerate(items):
        memory_id = item.id.lower() if item.id and UUID_RE.match(item.id) else None
        if (memory_id and memory_id in ids) or item.text in texts or item.superseded:
            continue
        category = item.category if item.category in CATEGORIES else detect_category(item.text)
        try:
            created = ms_of_day(item.date, timezone) + position if item.date else clock()
        except ValueError:  # a hand-edited impossible date (2026-02-30): recovered as of now
            created = clock()
        out.append(MemoryRecord(id=memory_id or str(uuid.uuid4()), text=item.text, category=category,
                                importance=item.importance if item.importance is not None else DEFAULT_IMPORTANCE,
                                created_at=created, source="mirror"))
        ids.add(out[-1].id)
        texts.add(item.text)
    return out


def mirror_ids(mirror: Path | None, header: str) -> set[str] | None:
    """Ids of the memories this store's mirror lists, or ``None`` without a mirror of its own."""
    from memdir.ltm.markdown import MIRROR_MARK, parse

    if mirror is None:
        return None
    try:
        text = mirror.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    if next((line for line in text.splitlines() if line.startswith(MIRROR_MARK)), None) != header:
        return None
    return {i.id.lower() for i in parse(text)[0] if i.id}


# --- rebuilding and swapping --------------------------------------------------------------------


def rebuild(db_path: Path, problem: str, *, embed: Callable[[list[str]], list[Any]],
            identity: Callable[[], dict[str, str]], mirror: Path | None, mirror_header: str,
            timezone: str | None, clock: Callable[[], int], now: datetime | None = None) -> dict[str, Any]:
    """Under ``ltm.lock``: salvage, build the new table, then swap (see the module doc); what was done.

    ``embed`` makes vectors for memories recovered without one (from the mirror) and
    ``identity()`` names the model it uses; neither is called when every vector was recovered.
    """
    from memdir.ltm.store import LanceTable

    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
    work = db_path / f"{REBUILD_PREFIX}{stamp}-{os.getpid()}"
    table_dir = db_path / TABLE_DIR
    try:
        work.mkdir(parents=True)
        got = salvage(table_dir, work / "read", keep_ids=mirror_ids(mirror, mirror_header))
        restored = mirror_records(mirror, mirror_header, known=got.records, timezone=timezone, clock=clock)
        records = got.records + restored
        need = [r for r in records if r.vector is None]
        not_restored = 0
        table_identity = dict(got.identity)
        dims = got.dims
        if need:
            made = identity()
            same_model = not table_identity.get("model") or (
                (table_identity.get("model"), table_identity.get("provider")) == (made.get("model"),
                                                                                  made.get("provider")))
            vectors = embed([r.text for r in need]) if same_model else []
            if vectors and dims is not None and int(vectors[0].size) != dims:
                vectors = []
            if vectors:
                for record, vector in zip(need, vectors, strict=True):
                    record.vector = vector
                dims = dims or int(vectors[0].size)
                table_identity = table_identity or made
            else:
                not_restored = len(need)
                records = [r for r in records if r.vector is not None]
        kept_mirror = None
        if not_restored and mirror is not None:  # the mirror is regenerated next: keep what it listed
            kept_mirror = _free_name(mirror.with_name(f"{mirror.name}.before-recovery-{stamp}"))
            shutil.copyfile(mirror, kept_mirror)
        aside = _free_name(db_path / f"{TABLE_DIR}{DAMAGED_INFIX}{stamp}")
        from_mirror = sum(1 for r in restored if r.vector is not None)
        info: dict[str, Any] = {
            "problem": problem, "dbPath": str(db_path), "setAsidePath": str(aside), "at": int(time.time() * 1000),
            "recovered": len(records), "expected": got.expected, "fromEarlierVersion": got.from_earlier,
            "fromMirror": from_mirror, "mirrorNotRestored": not_restored, "lostFragments": got.lost_fragments,
            "version": got.version, "newestVersion": got.newest_version,
            "mirrorCopy": str(kept_mirror) if kept_mirror else None,
        }
        info["message"] = recovery_message(info)
        shutil.rmtree(work / "read", ignore_errors=True)
        if records:
            built = LanceTable(work / "new")
            built.create(int(dims or 0), table_identity)
            built.add(records)
            built.close()
            count = _connect(work / "new").open_table(TABLE).to_arrow().num_rows
            if count != len(records):
                raise LtmError(f"rebuilding the long-term memory table wrote {count} of {len(records)} rows")
        replace_file(work / READY, json.dumps(info, indent=2).encode())
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    finish_rebuilds(db_path)
    return info


def recovery_message(info: dict[str, Any]) -> str:
    """One line: what was damaged, where it went, how much came back and from where."""
    expected = info.get("expected")
    recovered = int(info.get("recovered") or 0)
    of = f" of {expected}" if expected is not None and info.get("version") == info.get("newestVersion") else ""
    sources = [f"{info[k]} from {label}" for k, label in (("fromEarlierVersion", "an earlier version"),
                                                          ("fromMirror", "the mirror")) if info.get(k)]
    text = (f"long-term memory store was damaged ({info.get('problem')}); set aside at {info.get('setAsidePath')}; "
            f"recovered {recovered}{of} memories" + (f" ({', '.join(sources)})" if sources else ""))
    newest, version = info.get("newestVersion"), info.get("version")
    if newest is not None and version is not None and version != newest:
        text += f"; read as of version {version}: the newest {newest - version} version(s) were unreadable"
    elif version is None and newest is not None:
        text += "; no version of the table could be read"
    if info.get("mirrorNotRestored"):
        text += (f"; {info['mirrorNotRestored']} memories of the mirror were not restored (their vectors would "
                 f"come from another model): `memdir ltm reembed`, then `memdir ltm import {info.get('mirrorCopy')}`")
    return text


def _free_name(path: Path) -> Path:
    n, candidate = 1, path
    while candidate.exists() or candidate.is_symlink():
        n += 1
        candidate = path.with_name(f"{path.name}-{n}")
    return candidate


def pending(db_path: Path) -> bool:
    """Whether a build folder is there (a rebuild running, or one killed): cheap, one listing."""
    try:
        return any(name.startswith(REBUILD_PREFIX) for name in os.listdir(db_path))
    except OSError:
        return False


def finish_rebuilds(db_path: Path) -> dict[str, Any] | None:
    """Under ``ltm.lock``: complete the swap of every ready build, delete unfinished ones.

    The renames are idempotent steps, so a process killed between them is finished here by the
    next one: damaged table aside (if still in place), new table in (if not yet), record, clean up.
    """
    done = None
    try:
        names = sorted(n for n in os.listdir(db_path) if n.startswith(REBUILD_PREFIX))
    except OSError:
        return None
    live = db_path / TABLE_DIR
    for name in names:
        work = db_path / name
        try:
            info = json.loads((work / READY).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            shutil.rmtree(work, ignore_errors=True)  # killed while building: the damaged table is still in place
            continue
        aside = Path(info["setAsidePath"])
        new = work / "new" / TABLE_DIR
        if live.exists() and not aside.exists():
            os.rename(live, aside)
        if new.exists() and not live.exists():
            os.rename(new, live)
        _fsync_dir(db_path)
        replace_file(db_path / RECOVERY_FILE, json.dumps(info, indent=2).encode())
        shutil.rmtree(work, ignore_errors=True)
        done = info
    return done


def last_recovery(db_path: Path) -> dict[str, Any] | None:
    """The last recovery of this store (any process), or ``None``."""
    try:
        data = json.loads((db_path / RECOVERY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def recovery_ms(info: dict[str, Any]) -> float | None:
    """When a recovery record says the table was recovered (epoch ms), ``None`` when it does not
    say it as a time: the record is a file anyone may edit or damage, and its ``"at"`` of
    ``"abc"``, ``1e300`` or year 10000 failed ``memdir ltm stats`` with Python's bare words
    ('could not convert string to float', 'timestamp out of range for platform time_t')."""
    at = info.get("at")
    if isinstance(at, bool) or not isinstance(at, (int, float)) or not 0 < at <= _LAST_MS:
        return None
    return float(at)


#: 9999-12-31T23:59:59.999Z in ms: no recovery is recorded later.
_LAST_MS = 253_402_300_799_999


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


