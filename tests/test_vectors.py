"""The in-process vector matrix: same answers as a brute-force scan of SQLite, through writes by
other connections, rebuilds, a trimmed change log and a writer killed with SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from helpers import cli_env
from memdir.api import Memory
from memdir.bench.speed import SyntheticProvider
from memdir.query import keyword_terms
from memdir.stores import vectors as vecs
from memdir.stores.base import ChunkRow
from memdir.stores.sqlite import SqliteStore

DIMS = 16


def _rows(path: str, n: int, seed: int, windows: int = 1) -> list[ChunkRow]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        w = windows if i % 2 else 1
        vec = rng.standard_normal(DIMS * w).astype(np.float32)
        out.append(ChunkRow(f"{path}#{seed}#{i}", path, "memory", i + 1, i + 1, f"h{seed}-{i}", "m",
                            f"text {path} {i}", vec.tolist()))
    return out


def brute_force(store: SqliteStore, q: np.ndarray, k: int) -> list[tuple[str, float]]:
    """The reference: every stored vector read back from SQLite, best window per chunk."""
    qn = q / np.linalg.norm(q)
    scored = []
    for cid, blob in store.conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL"):
        m = np.frombuffer(blob, dtype="<f4").reshape(-1, DIMS)
        scored.append((cid, float(np.max((m / np.linalg.norm(m, axis=1, keepdims=True)) @ qn))))
    scored.sort(key=lambda x: -x[1])
    return scored[:k]


def _same(store: SqliteStore, reference: SqliteStore, queries: np.ndarray, k: int = 7) -> None:
    for q in queries:
        got = [(h.id, h.score) for h in store.vector_search(q.tolist(), k)]
        want = brute_force(reference, q, k)
        assert [g[0] for g in got] == [w[0] for w in want]
        assert np.allclose([g[1] for g in got], [w[1] for w in want], atol=1e-5)


def test_a_warm_matrix_follows_another_writer(tmp_path: Path):
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    queries = np.random.default_rng(99).standard_normal((5, DIMS)).astype(np.float32)
    with writer.transaction():
        for f in range(6):
            writer.replace_file(f"f{f}.md", "memory", f"hash{f}", 1, 1, _rows(f"f{f}.md", 20, f, windows=3))
    _same(reader, writer, queries)
    assert reader.matrix.loads == 1 and reader.matrix.max_windows == 3

    with writer.transaction():  # edit one file, delete another, add a third: a small delta
        writer.replace_file("f1.md", "memory", "hash1b", 2, 2, _rows("f1.md", 5, 101))
        writer.delete_file("f2.md", "memory")
        writer.replace_file("f9.md", "memory", "hash9", 1, 1, _rows("f9.md", 8, 9, windows=2))
    _same(reader, writer, queries)
    assert reader.matrix.loads == 1 and reader.matrix.updates >= 1  # followed the log, no reload
    assert not any(h.path == "f2.md" for q in queries for h in reader.vector_search(q.tolist(), 200))

    with writer.rebuild() as fresh, fresh.transaction():  # a full rebuild is a new epoch: reload
        fresh.replace_file("g.md", "memory", "g", 1, 1, _rows("g.md", 12, 42))
    _same(reader, writer, queries)
    assert reader.matrix.loads == 2
    assert {h.path for h in reader.vector_search(queries[0].tolist(), 50)} == {"g.md"}
    writer.close()
    reader.close()


def test_a_reader_behind_a_trimmed_log_reloads(tmp_path: Path, monkeypatch):
    monkeypatch.setattr(vecs, "LOG_SLACK", 4)
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    q = np.random.default_rng(5).standard_normal((3, DIMS)).astype(np.float32)
    with writer.transaction():
        writer.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", 10, 1))
    _same(reader, writer, q)
    for round_ in range(30):
        with writer.transaction():
            writer.replace_file("a.md", "memory", f"a{round_}", 1, 1, _rows("a.md", 10, 100 + round_))
            vecs.trim_log(writer.conn, writer.vector_count())
    lo = writer.conn.execute("SELECT min(seq) FROM vec_log").fetchone()[0]
    assert lo > reader.matrix.seq + 1  # the reader's place in the log is gone
    _same(reader, writer, q)
    assert reader.matrix.loads == 2
    writer.close()
    reader.close()


def test_vectors_are_stored_once(tmp_path: Path):
    store = SqliteStore(tmp_path / "idx.sqlite")
    with store.transaction():
        store.replace_file("a.md", "memory", "a", 1, 1, _rows("a.md", 3, 1))
    tables = {name for (name,) in store.conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    assert not any(t.startswith("chunks_vec") for t in tables)
    assert store.describe()["vector"]["path"] == "matrix"
    store.close()


_SYNC_LOOP = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from memdir.api import Memory
    from memdir.bench.speed import SyntheticProvider
    ws = Path(sys.argv[1])
    with Memory(ws, provider=SyntheticProvider()) as mem:
        i = 0
        while True:  # keep rewriting files and syncing until killed
            for d in range(1, 41):
                (ws / "memory" / f"2025-03-{d % 28 + 1:02d}.md").write_text(
                    "\\n".join(f"- round {i} item {j} note{d}" for j in range(40 + i % 7)) + "\\n")
            mem.sync()
            print("synced", i, flush=True)
            i += 1
""")


def test_sigkill_during_sync_leaves_matrix_and_index_consistent(make_workspace, state_dir, tmp_path):
    files = {f"memory/2025-02-{d:02d}.md": "\n".join(f"- base {d} line {j}" for j in range(60)) for d in range(1, 28)}
    ws = make_workspace(files)
    queries = [f"round item note{d}" for d in range(1, 6)]
    with Memory(ws, provider=SyntheticProvider()) as warm:
        warm.sync()
        for q in queries:
            warm.search(q, sync=False)  # the matrix is loaded and will have to follow the writer
        proc = subprocess.Popen([sys.executable, "-c", _SYNC_LOOP, str(ws)], env=cli_env(state_dir),
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith("synced"), proc.stderr.read() if proc.stderr else ""
            for q in queries:  # reads while the writer runs: never an error
                warm.search(q, sync=False)
            time.sleep(0.15)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()

        def vector_ids(mem: Memory) -> list[list[tuple[str, int, float]]]:
            return [[(h.path, h.start_line, round(h.score, 5)) for h in mem.store.vector_search(
                SyntheticProvider().embed_query(q), 12)] for q in queries]

        with Memory(ws, provider=SyntheticProvider()) as cold:  # what SQLite holds right after the kill
            assert vector_ids(warm) == vector_ids(cold)
        warm.sync()  # finish the interrupted work
        clean_state = tmp_path / "clean-state"
        with Memory(ws, provider=SyntheticProvider(), state_dir=clean_state) as clean:
            clean.sync()
            assert vector_ids(warm) == vector_ids(clean)

            def every_score(mem: Memory) -> list[list[tuple[str, int, int, float, float]]]:
                """Every chunk's keyword and vector score for each query, in a fixed order: this data has
                many exactly equal BM25 scores, and equal scores are ordered by rowid, which differs between
                an index kept through interrupted syncs and a fresh one (so a cut-off among them may too)."""
                out = []
                for q in queries:
                    kw = {(h.path, h.start_line, h.end_line): h.score
                          for h in mem.store.keyword_search(keyword_terms(q), 10_000)}
                    vec = {(h.path, h.start_line, h.end_line): h.score
                           for h in mem.store.vector_search(SyntheticProvider().embed_query(q), 10_000)}
                    out.append(sorted((*key, round(kw.get(key, 0.0), 9), round(vec[key], 6)) for key in vec))
                return out

            assert every_score(warm) == every_score(clean)


@pytest.mark.parametrize("int8", [False, True])
def test_a_long_lived_reader_keeps_few_blocks_through_many_small_writes(tmp_path: Path, monkeypatch, int8: bool):
    # Before: each refresh that found a new vector added a block, and only side rows adding up to
    # a tenth of the matrix merged them: one small edit between searches, for weeks, left
    # thousands of one-row blocks, each a pass of its own in every search and refresh.
    if int8:
        if not vecs.can_quantize():
            pytest.skip("int8 matrices need NumKong")
        monkeypatch.setattr(vecs, "QUANT_MIN_ROWS", 100)
    path = tmp_path / "idx.sqlite"
    writer, reader = SqliteStore(path), SqliteStore(path)
    queries = np.random.default_rng(7).standard_normal((3, DIMS)).astype(np.float32)
    with writer.transaction():
        writer.replace_file("big.md", "memory", "b", 1, 1, _rows("big.md", 300, 1, windows=2))
    _same(reader, writer, queries)
    for round_ in range(80):  # a small note rewritten (its one chunk replaced), then a search
        with writer.transaction():
            writer.replace_file(f"small{round_ % 3}.md", "memory", f"s{round_}", 1, 1,
                                _rows(f"small{round_ % 3}.md", 1 + round_ % 2, 200 + round_, windows=2))
        _same(reader, writer, queries[:1])
        assert len(reader.matrix.blocks) <= 17  # the main block and vecs.MAX_SIDE_BLOCKS
    assert reader.matrix.loads == 1 and reader.matrix.quantized is int8  # kept in step, never reloaded
    _same(reader, writer, queries)
    writer.close()
    reader.close()
