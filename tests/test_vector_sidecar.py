"""The int8 matrix (large indexes) and its sidecar file: exact re-scored answers, a second process
maps the file instead of reading SQLite, and a stale, damaged or half-written file is never used."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memdir.stores import vector_sidecar
from memdir.stores import vectors as vecs
from memdir.stores.base import ChunkRow
from memdir.stores.sqlite import SqliteStore

DIMS = 48


def _rows(path: str, n: int, seed: int, windows: int = 1) -> list[ChunkRow]:
    rng = np.random.default_rng(seed)
    return [ChunkRow(f"{path}#{seed}#{i}", path, "memory", i + 1, i + 1, f"h{seed}-{i}", "m", f"text {path} {i}",
                     rng.standard_normal(DIMS * (windows if i % 3 == 0 else 1)).astype(np.float32).tolist())
            for i in range(n)]


def _exact(store: SqliteStore, q: np.ndarray, k: int) -> list[tuple[str, float]]:
    qn = q / np.linalg.norm(q)
    scored = []
    for cid, blob in store.conn.execute("SELECT id, embedding FROM chunks WHERE embedding IS NOT NULL"):
        m = np.frombuffer(blob, dtype="<f4").reshape(-1, DIMS)
        scored.append((cid, float(np.max((m / np.linalg.norm(m, axis=1, keepdims=True)) @ qn))))
    scored.sort(key=lambda x: (-x[1], x[0]))
    return scored[:k]


@pytest.fixture
def int8(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(vecs, "QUANT_MIN_ROWS", 1)


def _filled(path: Path, files: int = 8) -> SqliteStore:
    store = SqliteStore(path)
    with store.transaction():
        for f in range(files):
            store.replace_file(f"f{f}.md", "memory", f"h{f}", 1, 1, _rows(f"f{f}.md", 60, f, windows=2))
    return store


def test_int8_matrix_answers_with_exact_scores(tmp_path: Path, int8: None):
    store = _filled(tmp_path / "idx.sqlite")
    queries = np.random.default_rng(1).standard_normal((12, DIMS)).astype(np.float32)
    overlap = 0
    for q in queries:
        got = [(h.id, h.score) for h in store.vector_search(q.tolist(), 6)]
        want = _exact(store, q, 6)
        exact = dict(_exact(store, q, 10_000))
        assert all(abs(exact[cid] - score) < 1e-5 for cid, score in got)  # re-scored from float32
        assert [s for _, s in got] == sorted((s for _, s in got), reverse=True)
        overlap += len({c for c, _ in got} & {c for c, _ in want})
    assert store.matrix.quantized and store.matrix.describe()["int8"]
    assert overlap >= 0.95 * 6 * len(queries)
    ids = [h.id for h in store.vector_search(queries[0].tolist(), 30)][::3]
    scores = store.vector_scores(queries[0].tolist(), ids)
    exact = dict(_exact(store, queries[0], 10_000))
    assert set(scores) == set(ids) and all(abs(scores[c] - exact[c]) < 1e-5 for c in ids)
    store.close()


def test_a_second_store_maps_the_sidecar_and_follows_the_log(tmp_path: Path, int8: None):
    path = tmp_path / "idx.sqlite"
    first = _filled(path)
    q = np.random.default_rng(2).standard_normal(DIMS).astype(np.float32)
    want = [h.id for h in first.vector_search(q.tolist(), 8)]
    side = vector_sidecar.sidecar_path(path)
    assert side.is_file() and first.matrix.loads == 1

    second = SqliteStore(path)
    assert [h.id for h in second.vector_search(q.tolist(), 8)] == want
    assert second.matrix.from_sidecar and second.matrix.loads == 0

    with first.transaction():  # another writer: one file replaced, one gone
        first.replace_file("f1.md", "memory", "h1b", 2, 2, _rows("f1.md", 30, 77))
        first.delete_file("f2.md", "memory")
    third = SqliteStore(path)  # a new process: the sidecar is behind, the log brings it up to date
    got = [h for h in third.vector_search(q.tolist(), 400)]
    assert third.matrix.from_sidecar and third.matrix.loads == 0 and third.matrix.updates == 1
    assert not any(h.path == "f2.md" for h in got)
    assert {h.id for h in got if h.path == "f1.md"} <= {r.id for r in _rows("f1.md", 30, 77)}
    assert len({h.id for h in third.vector_search(q.tolist(), 8)} & {c for c, _ in _exact(first, q, 8)}) >= 7

    with first.rebuild() as fresh, fresh.transaction():  # a new epoch: the old file is not used
        fresh.replace_file("g.md", "memory", "g", 1, 1, _rows("g.md", 40, 9))
    fourth = SqliteStore(path)
    assert {h.path for h in fourth.vector_search(q.tolist(), 20)} == {"g.md"}
    assert not fourth.matrix.from_sidecar and fourth.matrix.loads == 1
    for s in (first, second, third, fourth):
        s.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "garbage", "empty"])
def test_a_damaged_sidecar_is_rebuilt_not_trusted(tmp_path: Path, int8: None, damage: str):
    path = tmp_path / "idx.sqlite"
    first = _filled(path)
    q = np.random.default_rng(3).standard_normal(DIMS).astype(np.float32)
    want = [h.id for h in first.vector_search(q.tolist(), 8)]
    side = vector_sidecar.sidecar_path(path)
    data = bytearray(side.read_bytes())
    if damage == "flip":
        data[-5] ^= 0x55
    elif damage == "truncate":
        data = data[: len(data) - 100]
    elif damage == "garbage":
        data = bytearray(b"not a sidecar" * 10)
    else:
        data = bytearray()
    side.write_bytes(bytes(data))
    second = SqliteStore(path)
    assert [h.id for h in second.vector_search(q.tolist(), 8)] == want
    assert not second.matrix.from_sidecar and second.matrix.loads == 1
    third = SqliteStore(path)  # the rebuilt file is good again
    assert [h.id for h in third.vector_search(q.tolist(), 8)] == want and third.matrix.from_sidecar
    for s in (first, second, third):
        s.close()


def test_a_sidecar_whose_header_claims_a_later_position_is_not_used(tmp_path: Path, int8: None):
    """The header is JSON outside the arrays' CRC: one bit flipped in a digit of its log position
    ('480' → '488', '0' and '8' differ by one bit) made a process take the file as reflecting writes
    it never saw, and those writes' vectors were never applied: a note written since was found by
    no vector search.  The position must be the last log entry the file records."""
    import json

    path = tmp_path / "idx.sqlite"
    first = _filled(path)
    first.vector_search(np.ones(DIMS).tolist(), 3)  # the sidecar, at the log's position now
    side = vector_sidecar.sidecar_path(path)
    with first.transaction():
        first.replace_file("new.md", "memory", "hn", 2, 2, _rows("new.md", 8, 99))
    first.close()
    data = side.read_bytes()
    start = len(vector_sidecar.MAGIC) + 4
    n = int.from_bytes(data[len(vector_sidecar.MAGIC):start], "little")
    header = json.loads(data[start:start + n])
    old = json.dumps(header).encode()
    header["seq"] += 8
    new = json.dumps(header).encode()
    assert len(new) == len(old) == n
    side.write_bytes(data[:start] + new + data[start + n:])
    second = SqliteStore(path)
    probe = _rows("new.md", 8, 99)[4]
    got = second.vector_search(probe.embedding, 3)
    assert got and got[0].id == probe.id
    assert not second.matrix.from_sidecar
    second.close()


def test_a_writer_killed_mid_write_leaves_no_usable_half_file(tmp_path: Path, int8: None):
    path = tmp_path / "idx.sqlite"
    first = _filled(path)
    q = np.random.default_rng(4).standard_normal(DIMS).astype(np.float32)
    want = [h.id for h in first.vector_search(q.tolist(), 8)]
    side = vector_sidecar.sidecar_path(path)
    side.unlink()
    # a process that dies (SIGKILL) while writing: only its temp file remains
    code = ("import os, sys; f = open(sys.argv[1] + '.tmp-%d-abcd' % os.getpid(), 'wb'); "
            "f.write(b'MEMDIR-VEC8-2\\n' + b'x' * 1000); f.flush(); os.kill(os.getpid(), 9)")
    proc = subprocess.run([sys.executable, "-c", code, str(side)], check=False)
    assert proc.returncode == -9
    leftovers = list(tmp_path.glob("idx.sqlite.vec8.tmp-*"))
    assert len(leftovers) == 1 and not side.exists()
    second = SqliteStore(path)
    assert [h.id for h in second.vector_search(q.tolist(), 8)] == want and not second.matrix.from_sidecar
    assert side.is_file()
    second.cleanup_leftovers()
    assert not list(tmp_path.glob("idx.sqlite.vec8.tmp-*"))  # its writer is dead: removed
    own = Path(f"{side}.tmp-{os.getpid()}-live")
    own.write_bytes(b"x")
    vector_sidecar.remove_leftovers(side)
    assert own.exists()  # a live writer's temp file is left alone
    own.unlink()
    first.close()
    second.close()


def test_small_indexes_keep_float32(tmp_path: Path):
    store = _filled(tmp_path / "idx.sqlite", files=2)
    store.vector_search(np.ones(DIMS).tolist(), 3)
    assert not store.matrix.quantized
    assert not vector_sidecar.sidecar_path(store.path).exists()
    store.close()


def test_a_sidecar_from_another_history_of_a_restored_index_is_not_used(tmp_path: Path, int8: None):
    """An index restored from a backup, then written to, can reach the change-log position a
    sidecar written for the *other* history names (same rebuild epoch): its rows are not used."""
    import shutil

    path = tmp_path / "idx.sqlite"
    side = vector_sidecar.sidecar_path(path)
    _filled(path).close()
    shutil.copy(path, tmp_path / "backup.sqlite")

    one = SqliteStore(path)  # history A: f1 rewritten, and a sidecar saved at its position
    with one.transaction():
        one.replace_file("f1.md", "memory", "h1a", 2, 2, _rows("f1.md", 30, 77))
    side.unlink(missing_ok=True)
    one.vector_search(np.ones(DIMS).tolist(), 3)
    one.close()
    assert side.is_file()

    shutil.copy(tmp_path / "backup.sqlite", path)  # the backup comes back; history B: f3 rewritten
    two = SqliteStore(path)
    with two.transaction():
        two.replace_file("f3.md", "memory", "h3b", 2, 2, _rows("f3.md", 30, 88))
    two.close()

    third = SqliteStore(path)
    for probe in (_rows("f1.md", 60, 1, windows=2)[5], _rows("f3.md", 30, 88)[7]):  # one of each history's notes
        q = np.asarray(probe.embedding[:DIMS], dtype=np.float32)
        got = [h.id for h in third.vector_search(q.tolist(), 8)]
        assert got[0] == probe.id
        assert got == [c for c, _ in _exact(third, q, 8)]
    assert not third.matrix.from_sidecar and third.matrix.loads == 1
    third.close()
    fourth = SqliteStore(path)  # the sidecar written for this history is used again
    fourth.vector_search(np.ones(DIMS).tolist(), 3)
    assert fourth.matrix.from_sidecar
    fourth.close()


def test_a_warm_store_notices_its_index_restored_from_a_backup_and_written_again(tmp_path: Path):
    """An index restored from a backup under a running server (sqlite3's ``.restore``) went back to an
    earlier change-log position of the same epoch, and the next writes brought it to the old position
    by another history (the same rowids too): the warm matrix and the rows of hits it held were
    taken as current, and a search answered with a note deleted since, its text and path."""
    import sqlite3

    path = tmp_path / "idx.sqlite"
    one = _filled(path)
    with sqlite3.connect(path) as live, sqlite3.connect(tmp_path / "backup.sqlite") as backup:
        live.backup(backup)
    with one.transaction():
        one.replace_file("gone.md", "memory", "hg", 2, 2, _rows("gone.md", 5, 77))
    q = np.asarray(_rows("gone.md", 5, 77)[2].embedding, dtype=np.float32)
    assert one.vector_search(q.tolist(), 3)[0].path == "gone.md"  # held warm from here
    with sqlite3.connect(tmp_path / "backup.sqlite") as backup, sqlite3.connect(path) as live:
        backup.backup(live)
    two = SqliteStore(path)  # another process writes another note at the same log positions
    with two.transaction():
        two.replace_file("other.md", "memory", "ho", 2, 2, _rows("other.md", 5, 88))
    two.close()
    for probe in (q, np.asarray(_rows("other.md", 5, 88)[3].embedding, dtype=np.float32)):
        got = one.vector_search(probe.tolist(), 5)
        assert "gone.md" not in {h.path for h in got}
        assert [h.id for h in got] == [c for c, _ in _exact(one, probe, 5)]
    one.close()


def test_the_sidecar_is_private_as_the_index(tmp_path: Path, int8: None):
    """The index is made 0600 (its text and embeddings are the notes'); its int8 sidecar of the same
    vectors came out 0644 under the usual umask 022."""
    old = os.umask(0o022)
    try:
        store = _filled(tmp_path / "idx.sqlite")
        store.vector_search(np.ones(DIMS, dtype=np.float32).tolist(), 3)
        store.close()
    finally:
        os.umask(old)
    side = vector_sidecar.sidecar_path(tmp_path / "idx.sqlite")
    assert side.is_file() and side.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "idx.sqlite").stat().st_mode & 0o777 == 0o600


def test_a_newer_memdirs_sidecar_is_not_replaced(tmp_path: Path, int8: None):
    """An older memdir (a process started before an upgrade, or one downgraded to) took a newer
    memdir's .vec8 for no sidecar, read every vector out of SQLite and replaced the file with its
    own, which the newer one then did again: each process of either paid the full read."""
    path = tmp_path / "idx.sqlite"
    first = _filled(path)
    q = np.random.default_rng(5).standard_normal(DIMS).astype(np.float32)
    want = [h.id for h in first.vector_search(q.tolist(), 8)]
    side = vector_sidecar.sidecar_path(path)
    newer = side.read_bytes().replace(vector_sidecar.MAGIC, b"MEMDIR-VEC8-9\n", 1)  # a newer memdir's format
    side.write_bytes(newer)
    second = SqliteStore(path)
    assert [h.id for h in second.vector_search(q.tolist(), 8)] == want
    assert not second.matrix.from_sidecar and second.matrix.loads == 1
    assert side.read_bytes() == newer  # left to the memdir that wrote it
    with second.rebuild() as fresh, fresh.transaction():  # until this memdir rebuilds the index (a downgrade)
        fresh.replace_file("g.md", "memory", "g", 1, 1, _rows("g.md", 40, 9))
    third = SqliteStore(path)
    assert {h.path for h in third.vector_search(q.tolist(), 8)} == {"g.md"}
    assert side.read_bytes().startswith(vector_sidecar.MAGIC)  # its own sidecar again
    for s in (first, second, third):
        s.close()
