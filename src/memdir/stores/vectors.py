"""Vector search over an in-process matrix kept in step with the SQLite index.

Why not sqlite-vec: its ``vec0`` KNN was 13× slower than a NumPy scan of the same vectors at
100k chunks (48-68 ms vs 4-5 ms), and it kept a second copy of every vector in the index file.
The vectors now live once, in ``chunks.embedding`` (float32, one or more per chunk: one per model
window); this module holds a normalised float32 matrix of them per open store, and a scan is one
matrix-vector product.

Keeping the matrix in step (any process may write the index): every write that adds or removes a
chunk with a vector appends ``(chunk rowid, alive)`` to ``vec_log`` in the same transaction, and a
full rebuild gives the index a new ``vectors_epoch``.  Before a search the matrix compares its
``(epoch, last seq)`` with the database: equal, nothing to do; a few new log entries, apply them
(rows appended to a small side matrix, deleted rows masked); a new epoch, or a log trimmed past
what the matrix has seen, reload.  The log is written in the same transaction as the rows it
describes, so a crash at any moment leaves the two consistent, and the matrix is never trusted
beyond what the database says.
"""

from __future__ import annotations

import os
import time
import zlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from memdir.db import rows_in

if TYPE_CHECKING:  # NumPy is imported by the methods that use it: writes and keyword searches never do
    import numpy as np

EPOCH_KEY = "vectors_epoch"
#: Log entries kept beyond the vector count before the oldest are trimmed (a reader that fell
#: further behind reloads).
LOG_SLACK = 20_000
#: Rows in the side matrix (appended since the last load) before it is merged into the main one.
MERGE_FRACTION = 0.1
#: Side blocks (one per refresh that found new vectors) before they are merged into one.  Each
#: costs every search and every refresh a pass of its own: 5,000 one-row blocks (a long-lived
#: server, one small edit between searches) took a 100k-row search from 6 to 50 ms.
MAX_SIDE_BLOCKS = 16
#: From this many vector rows the matrix is held as int8, one scale per row (a quarter of the
#: memory, and of the bytes each scan reads), scanned by NumKong's int8 dot products, and the
#: best candidates are re-scored exactly from the stored float32 vectors.  Below it, float32.
QUANT_MIN_ROWS = 20_000
#: Candidate rows kept from the int8 scan per wanted row, for the exact re-scoring.
RESCORE_FACTOR = 4

SCHEMA = """
CREATE TABLE IF NOT EXISTS vec_log(seq INTEGER PRIMARY KEY, chunk INTEGER NOT NULL, alive INTEGER NOT NULL);
"""


def new_epoch(conn: Any) -> None:
    """Mark every loaded matrix stale (a full rebuild, a new schema): call inside a transaction."""
    # JSON like every meta value (the health probe treats a meta value that is not JSON as damage)
    conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (EPOCH_KEY, f'"{os.urandom(16).hex()}"'))
    conn.execute("DELETE FROM vec_log")


def log_changes(conn: Any, chunk_rowids: Sequence[int], alive: bool) -> None:
    """Record chunks written (``alive``) or removed, in the writer's transaction: the vector matrix
    follows the log, and caches of keyword statistics use its position as the index's version."""
    if chunk_rowids:
        flag = 1 if alive else 0
        conn.executemany("INSERT INTO vec_log(chunk, alive) VALUES (?, ?)", [(int(r), flag) for r in chunk_rowids])


def trim_log(conn: Any, chunks: int | None = None) -> None:
    """Keep the log about as long as the index (readers that fell behind the trimmed part reload).

    ``chunks`` defaults to the number of chunk rows, counted only once the log is long enough to
    matter.  (It was ``max(rowid)``, which every rewrite of the last file raises: after weeks of
    edits it counted every chunk ever written, and the log was never trimmed.)"""
    row = conn.execute("SELECT (SELECT min(seq) FROM vec_log), (SELECT max(seq) FROM vec_log)").fetchone()
    if not row or row[0] is None or row[1] - row[0] <= LOG_SLACK:
        return
    if chunks is None:
        (chunks,) = conn.execute("SELECT count(*) FROM chunks").fetchone()
    if row[1] - row[0] > chunks + LOG_SLACK:
        conn.execute("DELETE FROM vec_log WHERE seq < ?", (row[1] - chunks - LOG_SLACK // 2,))


def changed_chunks(conn: Any, after: int, upto: int) -> list[int] | None:
    """Chunk rowids the log names in ``(after, upto]`` (written or removed), or ``None`` when the
    log was trimmed past ``after`` (a reader that far behind reads everything again)."""
    (lo,) = conn.execute("SELECT min(seq) FROM vec_log").fetchone()
    if upto > after and (lo is None or lo > after + 1):
        return None
    rows = conn.execute("SELECT DISTINCT chunk FROM vec_log WHERE seq > ? AND seq <= ?", (after, upto)).fetchall()
    return sorted(int(r) for (r,) in rows)


#: Log entries a saved matrix records of the history it reflects (:func:`log_tail`).
TAIL = 16


def _blob_crc(blob: bytes | None) -> int | None:
    return zlib.crc32(blob) if blob else None


def log_tail(conn: Any, upto: int) -> list[list[Any]]:
    """The last :data:`TAIL` log entries up to ``upto`` as ``[seq, chunk, alive, CRC of the chunk's
    vectors now]``: what a matrix saved at ``upto`` reflects (read in the same snapshot)."""
    rows = conn.execute("SELECT seq, chunk, alive FROM vec_log WHERE seq <= ? ORDER BY seq DESC LIMIT ?",
                        (upto, TAIL)).fetchall()
    blobs = dict(rows_in(conn, "SELECT rowid, embedding FROM chunks WHERE rowid IN ({marks})",
                         sorted({c for _, c, _ in rows})))
    return [[int(s), int(c), int(a), _blob_crc(blobs.get(c))] for s, c, a in reversed(rows)]


def tail_matches(conn: Any, tail: Any, seq: int, lo: int) -> bool:
    """Whether the index went through the history ``tail`` records (:func:`log_tail` at ``seq``):
    the same log entries, and the same vectors for chunks not written since.  An index restored
    from a backup and written to again reaches ``seq`` by other writes, and fails."""
    try:
        entries = [(int(s), int(c), int(a), None if h is None else int(h)) for s, c, a, h in tail]
    except (TypeError, ValueError):
        return False
    if not entries:  # saved right after a rebuild (same epoch): nothing happened before it
        return seq == 0
    if entries[-1][0] != seq:  # the header's position (outside the CRC) is where its history ends
        return False
    kept = [e for e in entries if e[0] >= lo]
    if not kept:  # trimmed: cannot be checked
        return False
    logged = {s: (c, a) for s, c, a in rows_in(
        conn, "SELECT seq, chunk, alive FROM vec_log WHERE seq IN ({marks})", [e[0] for e in kept])}
    if any(logged.get(s) != (c, a) for s, c, a, _ in kept):
        return False
    chunks = sorted({e[1] for e in kept})
    since = {c for (c,) in rows_in(conn, "SELECT DISTINCT chunk FROM vec_log WHERE seq > ? AND chunk IN ({marks})",
                                   chunks, (seq,))}
    still = [c for c in chunks if c not in since]
    blobs = dict(rows_in(conn, "SELECT rowid, embedding FROM chunks WHERE rowid IN ({marks})", still))
    recorded = {c: h for _, c, _, h in kept}
    return all(_blob_crc(blobs.get(c)) == recorded[c] for c in still)


def state(conn: Any) -> tuple[str | None, int, int]:
    """``(epoch, first seq kept, last seq)`` of the database as this connection sees it now."""
    row = conn.execute("SELECT value FROM meta WHERE key = ?", (EPOCH_KEY,)).fetchone()
    lo, hi = conn.execute("SELECT (SELECT min(seq) FROM vec_log), (SELECT max(seq) FROM vec_log)").fetchone()
    return (row[0] if row else None), int(lo or 0), int(hi or 0)


def entry_mark(conn: Any, seq: int) -> tuple[Any, ...] | None:
    """The log entry at ``seq`` as ``(chunk rowid, alive, that chunk's id now)``, ``None`` if there
    is none: what tells two histories that reached the same position apart (the id names the text)."""
    row = conn.execute("SELECT v.chunk, v.alive, c.id FROM vec_log v LEFT JOIN chunks c ON c.rowid = v.chunk "
                       "WHERE v.seq = ?", (int(seq),)).fetchone()
    return None if row is None else tuple(row)


def continues(conn: Any, seq: int, mark: tuple[Any, ...] | None) -> bool:
    """Whether the log holds the entry :func:`entry_mark` saw at ``seq``: the same chunk and change,
    and the same chunk id unless a later entry wrote that chunk again (a note edited since)."""
    now = entry_mark(conn, seq)
    if now is None or mark is None:
        return now == mark
    if now[:2] != mark[:2]:
        return False
    return now[2] == mark[2] or conn.execute("SELECT EXISTS (SELECT 1 FROM vec_log WHERE chunk = ? AND seq > ?)",
                                             (now[0], int(seq))).fetchone()[0] == 1


def quantize(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """int8 rows and each row's scale (``row ≈ scale × int8 row``): one scale per row keeps
    small components of every vector (a shared scale would crush them)."""
    import numpy as np

    scale = np.abs(rows).max(axis=1) / 127.0
    scale[scale == 0] = 1.0
    return np.rint(rows / scale[:, None]).astype(np.int8), scale.astype(np.float32)


def int8_dots(matrix: np.ndarray, q8: np.ndarray) -> np.ndarray | None:
    """``matrix @ q8`` for int8 rows with NumKong's SIMD kernels (VNNI where the CPU has it:
    about 10x NumPy's float32 product here), ``None`` when NumKong is not installed."""
    try:
        import numkong
    except ImportError:  # pragma: no cover - a core dependency; the float32 matrix still works
        return None
    import numpy as np

    return np.asarray(numkong.cdist(q8[None, :], matrix, metric="dot"), dtype=np.float64).ravel()


def can_quantize() -> bool:
    try:
        import numkong  # noqa: F401
    except ImportError:  # pragma: no cover
        return False
    return True


class _Block:
    """Rows of unit vectors with the chunk rowid of each row; ``dead`` masks removed chunks."""

    __slots__ = ("chunks", "dead", "matrix", "scale")

    def __init__(self, matrix: np.ndarray, chunks: np.ndarray, scale: np.ndarray | None = None):
        import numpy as np

        self.matrix = matrix
        self.chunks = chunks
        #: int8 blocks: each row's scale (float32 blocks: ``None``)
        self.scale = scale
        self.dead = np.zeros(len(chunks), dtype=bool)


def _unit_rows(blobs: Sequence[bytes], dims: int) -> tuple[np.ndarray, np.ndarray]:
    """Matrix of the (normalised) windows of each blob and, per row, the blob's index."""
    import numpy as np

    counts = np.fromiter((len(b) // (4 * dims) for b in blobs), dtype=np.int64, count=len(blobs))
    matrix = np.frombuffer(b"".join(blobs), dtype="<f4").reshape(-1, dims).astype(np.float32)
    # A stored vector holding NaN or infinity (bytes damaged inside a blob, which SQLite cannot see)
    # scored NaN, and a NaN fused score dropped its chunk from every search, keyword matches
    # included: such a row has no direction, as an all-zero one, and scores 0.
    bad = ~np.isfinite(matrix).all(axis=1)
    if bad.any():
        matrix[bad] = 0.0
    norms = np.linalg.norm(matrix, axis=1)
    norms[norms == 0] = 1.0
    matrix /= norms[:, None]
    return matrix, np.repeat(np.arange(len(blobs), dtype=np.int64), counts)


def _merged(blocks: list[_Block]) -> _Block:
    """The live rows of ``blocks`` as one block, in rowid order (a chunk's rows stay one slice:
    they are alive in one block only, since a write marks the chunk dead in every older one)."""
    import numpy as np

    alive = [~b.dead for b in blocks]
    matrix = np.concatenate([b.matrix[a] for b, a in zip(blocks, alive, strict=True)])
    chunks = np.concatenate([b.chunks[a] for b, a in zip(blocks, alive, strict=True)])
    scale = (np.concatenate([b.scale[a] for b, a in zip(blocks, alive, strict=True)])
             if blocks[0].scale is not None else None)
    order = np.argsort(chunks, kind="stable")
    return _Block(matrix[order], chunks[order], None if scale is None else scale[order])


class VectorMatrix:
    """All vectors of one index in memory, refreshed from the database before each use.

    ``sidecar`` (see :mod:`memdir.stores.vector_sidecar`) is where an int8 matrix is saved for
    the next process: a one-shot CLI maps it instead of reading every vector from SQLite.
    """

    def __init__(self, sidecar: Any = None, *, save: bool = True) -> None:
        self.dims: int | None = None
        self.epoch: str | None = None
        self.seq = -1
        self.blocks: list[_Block] = []
        self.max_windows = 1
        self.loads = 0
        self.load_ms = 0.0
        self.updates = 0
        self.sidecar = sidecar
        self.save_sidecar = save
        self.from_sidecar = False

    @property
    def quantized(self) -> bool:
        return any(b.scale is not None for b in self.blocks)

    # -- keeping in step ----------------------------------------------------------------------
    def refresh(self, conn: Any, dims: int, now: tuple[str | None, int, int] | None = None) -> None:
        """Bring the matrix to what ``conn`` sees (call inside one read, under the store's lock);
        ``now``: :func:`state` already read in that read."""
        epoch, lo, hi = state(conn) if now is None else now
        if self.dims == dims and epoch == self.epoch and hi == self.seq:
            return
        if (self.dims is None and self.sidecar is not None and self._from_sidecar(conn, dims, epoch, lo, hi)
                and self.seq == hi):
            return
        rows = self.rows
        behind = hi - self.seq
        if self.dims != dims or epoch != self.epoch or self.seq < lo - 1 or behind > max(1000, rows // 4):
            self._load(conn, dims, epoch, hi)
        else:
            self._apply(conn, dims, hi)

    def _from_sidecar(self, conn: Any, dims: int, epoch: str | None, lo: int, hi: int) -> bool:
        from memdir.stores import vector_sidecar

        got = vector_sidecar.read(self.sidecar, dims=dims, epoch=epoch, lo=lo, hi=hi)
        if got is None:
            return False
        matrix, scale, chunks, seq, most, tail = got
        if not tail_matches(conn, tail, seq, lo):
            return False
        self.blocks = [_Block(matrix, chunks, scale)] if len(chunks) else []
        self.max_windows, self.dims, self.epoch, self.seq = most, dims, epoch, seq
        self.from_sidecar = True
        return True

    def _load(self, conn: Any, dims: int, epoch: str | None, seq: int) -> None:
        import numpy as np

        t0 = time.perf_counter()
        width = 4 * dims
        where = "embedding IS NOT NULL AND length(embedding) > 0 AND length(embedding) % ? = 0"
        (total,) = conn.execute(f"SELECT coalesce(sum(length(embedding)), 0) FROM chunks WHERE {where}",
                                (width,)).fetchone()
        n_rows = int(total) // width
        small = n_rows < QUANT_MIN_ROWS or not can_quantize()
        # Filled batch by batch, so loading never holds every blob and the matrix at once (peak RSS).
        matrix = np.empty((n_rows, dims), dtype=np.float32 if small else np.int8)
        scale = None if small else np.empty(n_rows, dtype=np.float32)
        chunks = np.empty(n_rows, dtype=np.int64)
        pos, most = 0, 1
        cur = conn.execute(f"SELECT rowid, embedding FROM chunks WHERE {where} ORDER BY rowid", (width,))
        while True:
            batch = cur.fetchmany(2048)
            if not batch:
                break
            part, which = _unit_rows([b for _, b in batch], dims)
            n = min(len(part), n_rows - pos)  # cannot overflow inside the caller's read snapshot; never do
            if scale is None:
                matrix[pos : pos + n] = part[:n]
            else:
                matrix[pos : pos + n], scale[pos : pos + n] = quantize(part[:n])
            chunks[pos : pos + n] = np.asarray([r for r, _ in batch], dtype=np.int64)[which[:n]]
            pos += n
            most = max(most, max(len(b) // width for _, b in batch))
        matrix, chunks = matrix[:pos], chunks[:pos]
        self.blocks = [_Block(matrix, chunks, None if scale is None else scale[:pos])] if pos else []
        self.max_windows = most
        self.dims, self.epoch, self.seq = dims, epoch, seq
        self.loads += 1
        self.from_sidecar = False
        self.load_ms = (time.perf_counter() - t0) * 1000
        self._save(conn)

    def _save(self, conn: Any) -> None:
        if self.sidecar is None or not self.save_sidecar or not self.quantized or len(self.blocks) != 1:
            return
        from memdir.stores import vector_sidecar

        b = self.blocks[0]
        vector_sidecar.write(self.sidecar, b.matrix, b.scale, b.chunks, epoch=self.epoch, seq=self.seq,
                             max_windows=self.max_windows, tail=log_tail(conn, self.seq))

    def _apply(self, conn: Any, dims: int, seq: int) -> None:
        import numpy as np

        changes = conn.execute("SELECT chunk, alive FROM vec_log WHERE seq > ? AND seq <= ? ORDER BY seq",
                               (self.seq, seq)).fetchall()
        touched = list(dict.fromkeys(chunk for chunk, _ in changes))
        for block in self.blocks:  # every touched chunk's old rows go; live ones come back below
            block.dead = block.dead | np.isin(block.chunks, touched)
        if touched:
            found: dict[int, bytes] = dict(rows_in(
                conn, "SELECT rowid, embedding FROM chunks WHERE rowid IN ({marks}) AND embedding IS NOT NULL",
                touched))
            ids = sorted(r for r in touched if found.get(r) and len(found[r]) % (4 * dims) == 0)
            if ids:
                blobs = [found[r] for r in ids]
                matrix, which = _unit_rows(blobs, dims)
                scale = None
                if self.quantized:
                    matrix, scale = quantize(matrix)
                self.blocks.append(_Block(matrix, np.asarray(ids, dtype=np.int64)[which], scale))
                self.max_windows = max(self.max_windows, *(len(b) // (4 * dims) for b in blobs))
        self.seq = seq
        self.updates += 1
        if len(self.blocks) > 1 and sum(len(b.chunks) for b in self.blocks[1:]) > MERGE_FRACTION * self.rows + 64:
            self._merge()
            self._save(conn)
        elif len(self.blocks) > 1 + MAX_SIDE_BLOCKS:  # the main block (and its saved copy) stays as it is
            self.blocks = [self.blocks[0], _merged(self.blocks[1:])]

    def _merge(self) -> None:
        self.blocks = [_merged(self.blocks)]

    @property
    def rows(self) -> int:
        return sum(int(len(b.chunks) - b.dead.sum()) for b in self.blocks)

    # -- search -------------------------------------------------------------------------------
    def search(self, query: np.ndarray, limit: int,
               rescore: Callable[[list[int]], dict[int, float]] | None = None) -> list[tuple[int, float]]:
        """The ``limit`` best chunks ``(rowid, cosine)``; a chunk scores its best window.

        An int8 matrix gives candidates only: ``rescore`` (exact cosines of chunk rowids, from the
        stored float32 vectors) decides among the ``RESCORE_FACTOR`` × more best rows it found.
        """
        import numpy as np

        q = self._unit(query)
        if q is None or limit <= 0:
            return []
        want = limit * self.max_windows
        sims_parts, chunk_parts = [], []
        approximate = False
        for b in self.blocks:
            if not len(b.chunks):
                continue
            if b.scale is not None:
                approximate = True
                dots = int8_dots(b.matrix, quantize(q[None, :])[0][0])
                if dots is None:
                    raise RuntimeError("an int8 vector matrix needs NumKong")
                s = dots * b.scale  # proportional to the cosine (the query's own scale is shared)
                if b.dead.any():
                    s[b.dead] = -np.inf
                sims_parts.append(s)
                chunk_parts.append(b.chunks)
                continue
            s = np.einsum("ij,j->i", b.matrix, q)  # single-threaded SIMD: BLAS threads fought over 2 cores
            if b.dead.any():
                s[b.dead] = -np.inf
            sims_parts.append(s)
            chunk_parts.append(b.chunks)
        if not sims_parts:
            return []
        sims = sims_parts[0] if len(sims_parts) == 1 else np.concatenate(sims_parts)
        chunks = chunk_parts[0] if len(chunk_parts) == 1 else np.concatenate(chunk_parts)
        if approximate:
            want *= RESCORE_FACTOR
        # The k best chunks have their best windows among the k × (most windows) best rows.
        want = min(len(sims), want)
        top = np.argpartition(-sims, want - 1)[:want] if 0 < want < len(sims) else np.arange(len(sims))
        top = top[np.argsort(-sims[top], kind="stable")]
        out: dict[int, float] = {}
        for i in top:
            score = float(sims[i])
            if score == -np.inf:
                break
            out.setdefault(int(chunks[i]), score)
            if len(out) >= limit and not approximate:
                break
        if approximate:
            if rescore is None:
                raise ValueError("an int8 matrix needs exact re-scoring")
            exact = rescore(list(out))
            return sorted(exact.items(), key=lambda kv: (-kv[1], kv[0]))[:limit]
        return list(out.items())

    def scores(self, query: np.ndarray, rowids: Sequence[int]) -> dict[int, float]:
        """Cosine (best window) of the given chunks that have vectors (float32 matrices only)."""
        import numpy as np

        q = self._unit(query)
        out: dict[int, float] = {}
        if q is None or not rowids:
            return out
        wanted = np.unique(np.asarray(list(rowids), dtype=np.int64))
        for b in self.blocks:
            # blocks are in rowid order: each wanted chunk's rows are one slice
            lo = np.searchsorted(b.chunks, wanted, side="left")
            hi = np.searchsorted(b.chunks, wanted, side="right")
            # the rows of every slice in order (an arange per chunk was most of this call)
            size = hi - lo
            idx = np.repeat(lo - np.cumsum(size) + size, size) + np.arange(int(size.sum()))
            idx = idx[~b.dead[idx]]
            if not len(idx):
                continue
            for chunk, score in zip(b.chunks[idx].tolist(), (b.matrix[idx] @ q).tolist(), strict=True):
                if score > out.get(chunk, -2.0):
                    out[chunk] = score
        return out

    def _unit(self, query: np.ndarray) -> np.ndarray | None:
        import numpy as np

        q = np.asarray(query, dtype=np.float32)
        if self.dims is None or q.size != self.dims:
            return None
        norm = float(np.linalg.norm(q))
        return q / norm if norm > 0 else None

    def describe(self) -> dict[str, Any]:
        return {"rows": self.rows, "dims": self.dims, "loads": self.loads, "lastLoadMs": round(self.load_ms, 1),
                "updates": self.updates, "bytes": sum(b.matrix.nbytes for b in self.blocks),
                "int8": self.quantized, "fromSidecar": self.from_sidecar}
