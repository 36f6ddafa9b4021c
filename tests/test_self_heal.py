"""The index heals itself: damaged files are moved aside and rebuilt from the Markdown files.

Each case damages a real SQLite index the way disks and people do (truncation, garbage in the
header, in page 1, everywhere or 64 KB mid-file, invalid JSON in the meta row, a dropped FTS
table), then runs the real CLI: the search answers with the right note, says once what happened
and where the damaged file went, and ``index`` / ``index --force`` succeed.
"""

from __future__ import annotations

import hashlib
import json
import random
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.query import keyword_terms

NONE = {"MEMDIR_PROVIDER": "none"}
N_FILES = 120


def notes() -> dict[str, str]:
    filler = "The weekly review covered budgets, hiring and the roadmap in some detail. " * 12
    return {f"memory/2026-01-{i:03d}.md": f"# Day {i}\n\nToday's codeword is kiwi{i}x.\n\n{filler}\n"
            for i in range(N_FILES)}


def _garbage(n: int, seed: int) -> bytes:
    return random.Random(seed).randbytes(n)


def truncate(p: Path) -> None:
    with open(p, "r+b") as fh:
        fh.truncate(p.stat().st_size // 2)


def garbage_header(p: Path) -> None:
    with open(p, "r+b") as fh:
        fh.write(_garbage(100, 1))


def garbage_page1(p: Path) -> None:
    with open(p, "r+b") as fh:
        fh.seek(100)
        fh.write(_garbage(3996, 2))


def whole_garbage(p: Path) -> None:
    p.write_bytes(_garbage(p.stat().st_size, 3))


def garbage_mid_file(p: Path) -> None:
    with open(p, "r+b") as fh:
        fh.seek((p.stat().st_size // 2) & ~4095)
        fh.write(_garbage(65536, 4))


def bad_meta(p: Path) -> None:
    with sqlite3.connect(p) as conn:
        conn.execute("UPDATE meta SET value = '{\"provider\": ' WHERE key = 'memory_index_meta_v1'")


def dropped_fts(p: Path) -> None:
    with sqlite3.connect(p) as conn:
        conn.execute("DROP TABLE chunks_fts")


CASES: dict[str, Callable[[Path], None]] = {
    "truncated": truncate, "garbage-header": garbage_header, "garbage-page1": garbage_page1,
    "whole-garbage": whole_garbage, "garbage-mid-file": garbage_mid_file, "bad-meta-json": bad_meta,
    "dropped-fts-table": dropped_fts,
}


@pytest.fixture
def built(make_workspace, state_dir) -> tuple[Path, Path]:
    ws = make_workspace(notes())
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        assert mem.sync().indexed == N_FILES
        index = mem.index_path
    assert index.stat().st_size > 256 * 1024 and not Path(f"{index}-wal").exists()
    return ws, index


def corrupt_copies(index: Path) -> list[Path]:
    return sorted(p for p in index.parent.iterdir() if ".corrupt-" in p.name and not p.name.endswith("-wal"))


@pytest.mark.parametrize("case", list(CASES))
def test_each_kind_of_damage_is_healed_and_search_still_answers(case, built, run_cli):
    ws, index = built
    CASES[case](index)

    found = run_cli("search", "kiwi77x", "--json", "-w", str(ws), env=NONE)
    assert found.returncode == 0, found.stderr
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-01-077.md"]
    st = run_cli("status", "--json", "-w", str(ws), env=NONE)
    assert st.returncode == 0, st.stderr
    said = found.stderr + st.stderr
    # said once, naming the index and where the damaged file went
    assert said.count("was damaged") == 1, said
    moved = corrupt_copies(index)
    assert len(moved) == 1 and f"moved it aside to {moved[0]}" in said and str(index) in said
    status = json.loads(st.stdout)
    # Damage the search itself ran into is rebuilt by that search; damage only status's full check
    # finds (64 KB of garbage the query never read) is set aside there and rebuilt by the next sync.
    assert status["files"] in (0, N_FILES) and status["recovered"]["corruptPath"] == str(moved[0])

    again = run_cli("index", "-w", str(ws), env=NONE)
    assert again.returncode == 0 and "was damaged" not in again.stderr, again.stderr
    status = json.loads(run_cli("status", "--json", "-w", str(ws), env=NONE).stdout)
    assert status["files"] == N_FILES and status["dirty"] is False and status["skipped"] == []
    forced = run_cli("index", "--force", "-w", str(ws), env=NONE)
    assert forced.returncode == 0, forced.stderr
    assert "full reindex, 120 indexed" in forced.stdout
    assert len(corrupt_copies(index)) == 1


def test_index_force_heals_a_garbage_file(built, run_cli):
    ws, index = built
    whole_garbage(index)
    forced = run_cli("index", "--force", "-w", str(ws), env=NONE)
    assert forced.returncode == 0, forced.stderr
    assert "full reindex, 120 indexed" in forced.stdout and "file is not a database" in forced.stderr


def test_status_no_longer_says_all_is_well_on_a_damaged_index(built, run_cli):
    ws, index = built
    garbage_mid_file(index)
    st = run_cli("status", "--json", "-w", str(ws), env=NONE)
    assert st.returncode == 0, st.stderr
    status = json.loads(st.stdout)
    assert status["recovered"]["corruptPath"] == str(corrupt_copies(index)[0])
    problem = status["recovered"]["problem"]
    assert problem.startswith("database disk image is malformed") and "\n" not in problem and len(problem) < 300
    assert status["files"] == 0 and status["syncPending"] is True
    text = run_cli("status", "-w", str(ws), env=NONE)
    assert "Dirty: yes" in text.stdout
    assert "; rebuilt from the Markdown files by the next index or search" in text.stdout
    # rebuilt: the record stays, in the past tense (it said "by the next index or search" for ever)
    assert run_cli("index", "-w", str(ws), env=NONE).returncode == 0
    text = run_cli("status", "-w", str(ws), env=NONE).stdout
    assert "Dirty: no" in text and "by the next index or search" not in text
    assert "; it has been rebuilt from the Markdown files since" in text


class HashProvider:
    """Deterministic 16-dim vectors from a hash; counts what it is asked to embed."""

    id, model, provider_key, max_input_bytes = "hash", "hash-16", "hash-key", 8000
    dims = 16

    def __init__(self) -> None:
        self.embedded = 0

    def _vec(self, text: str) -> list[float]:
        d = hashlib.sha256(text.encode()).digest()
        return [(b - 127.5) / 128 for b in d[:16]]

    def embed_query(self, text: str) -> list[float]:
        return self._vec(text)

    def embed_batch(self, texts):
        self.embedded += len(texts)
        return [self._vec(t) for t in texts]

    def close(self) -> None:
        pass


@pytest.mark.parametrize("case", ["bad-meta-json", "dropped-fts-table"])
def test_the_embedding_cache_survives_a_recovery(case, make_workspace):
    ws = make_workspace(notes())
    provider = HashProvider()
    with Memory(ws, provider=provider) as mem:
        first = mem.sync()
        assert first.embedded > 0
        index = mem.index_path
    paid = provider.embedded
    CASES[case](index)
    told: list[str] = []
    with Memory(ws, provider=provider, notice=told.append) as mem:
        report = mem.sync()
        assert report.full and report.indexed == N_FILES
        assert provider.embedded == paid, "the rebuild re-embedded text the old cache held"
        assert mem.recoveries[0]["salvagedCacheEntries"] == mem.store.cache_count() > 0
        assert len(told) == 1 and "kept" in told[0] and "cached embeddings" in told[0]
        # (hash vectors carry no meaning: look at the keyword side of the rebuilt index)
        assert [h.path for h in mem.store.keyword_search(keyword_terms("kiwi5x"), 3)] == ["memory/2026-01-005.md"]


def test_the_embedding_cache_is_salvaged_from_a_truncated_index(make_workspace):
    """SQLite refuses a file shorter than its header says; memdir reads the surviving pages
    through a copy with the page count corrected."""
    ws = make_workspace(notes())
    provider = HashProvider()
    with Memory(ws, provider=provider) as mem:
        mem.sync()
        index, cached = mem.index_path, mem.store.cache_count()
    truncate(index)
    with Memory(ws, provider=provider, notice=lambda m: None) as mem:
        before = provider.embedded
        report = mem.sync()
        salvaged = mem.recoveries[0]["salvagedCacheEntries"]
        assert 0 < salvaged <= cached and report.indexed == N_FILES
        assert provider.embedded - before == cached - salvaged  # only what was lost is embedded again
    assert not list(index.parent.glob("*.salvage"))


def test_cached_vectors_of_the_wrong_size_are_embedded_again(make_workspace, run_cli, state_dir):
    """An embedding-cache entry whose bytes do not hold its ``dims`` floats (a damaged page, a
    hand edit) is a miss: once, a blob of 4k+1 bytes failed every ``index --force`` with NumPy's
    "buffer size must be a multiple of element size", and a short one put a vector of the wrong
    width into the index."""
    ws = make_workspace({"MEMORY.md": "# Notes\n\n- The zebra enclosure needs a new gate.\n",
                         "memory/2026-01-12.md": "- Lunch with Dana about the quarterly budget.\n"})
    assert run_cli("-w", str(ws), "index").returncode == 0  # the embedded model
    index = next((state_dir / "memory").glob("*.sqlite"))
    with sqlite3.connect(index) as conn:
        entries = conn.execute("SELECT count(*) FROM embedding_cache WHERE dims = 384").fetchone()[0]
        assert entries >= 2
        # every other entry one float and a byte long, the rest 25 floats where 384 are due
        conn.execute("UPDATE embedding_cache SET embedding = CASE WHEN rowid % 2 THEN randomblob(5) "
                     "ELSE randomblob(100) END")
    conn.close()
    out = run_cli("-w", str(ws), "index", "--force", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["embedded"] == entries  # every damaged entry was embedded again
    with sqlite3.connect(index) as conn:
        widths = {n for (n,) in conn.execute("SELECT length(embedding) FROM chunks")}
    conn.close()
    assert widths == {384 * 4}
    found = run_cli("-w", str(ws), "search", "striped animal pen", "--mode", "vector", "--files")
    assert found.returncode == 0 and found.stdout.splitlines()[0] == "MEMORY.md"


def test_a_notice_callback_that_raises_does_not_fail_the_heal_it_reports(built, caplog):
    """A host's ``notice`` that raised (a closed log file) failed the search whose damaged index
    was being healed: the message is logged instead and the search answers."""
    ws, index = built
    whole_garbage(index)
    told: list[str] = []

    def broken(message: str) -> None:
        told.append(message)
        raise ValueError("I/O operation on closed file")

    with caplog.at_level("WARNING", logger="memdir"), \
            Memory(ws, config={"memorySearch": {"provider": "none"}}, notice=broken) as mem:
        assert [r.path for r in mem.search("kiwi77x").results] == ["memory/2026-01-077.md"]
    assert told and "was damaged" in told[0]
    assert any("the notice callback failed on it" in r.getMessage() and "was damaged" in r.getMessage()
               for r in caplog.records)


def test_a_damaged_index_in_a_folder_that_cannot_be_written_says_so():
    """A damaged index whose folder this user may not write (a read-only state folder) failed search,
    status and index with "[Errno 13] Permission denied: 'x.sqlite' -> 'x.sqlite.corrupt-…'"."""
    from unprivileged import give_away, run_cli_as_user, shared_scratch

    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        (root / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        give_away(root)
        args = ("-w", str(ws), "--config", str(root / "memdir.json"))
        assert run_cli_as_user(state, "index", *args).returncode == 0
        (index,) = (state / "memory").glob("*.sqlite")
        with open(index, "r+b") as fh:
            fh.write(b"garbage in the header!")
        damaged = index.read_bytes()
        (state / "memory").chmod(0o500)
        try:
            for command in (("search", "otter"), ("status",), ("index",)):
                out = run_cli_as_user(state, *command, *args)
                assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
                assert (f"the index {index} is damaged (file is not a database) and cannot be moved aside to be "
                        f"rebuilt: this user cannot write its own folder {state / 'memory'} (mode 500)") in out.stderr
            assert index.read_bytes() == damaged and not list((state / "memory").glob("*.corrupt-*"))
        finally:
            (state / "memory").chmod(0o700)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_a_stored_vector_holding_nan_or_infinity_still_lets_its_note_be_found(make_workspace, run_cli, state_dir,
                                                                            bad):
    """A vector whose bytes were damaged inside its blob (SQLite sees nothing wrong) scored NaN, and
    a NaN fused score dropped the note from every search, its exact keywords included; the embedding
    cache (whose entries point at these vectors) handed the same NaN to ``index --force``, so no
    rebuild healed it.  Such a vector scores 0 and is embedded again by a rebuild."""
    import struct

    ws = make_workspace({"MEMORY.md": "# Notes\n\n- The zebra enclosure needs a new gate.\n",
                         "memory/2026-01-12.md": "- Lunch with Dana about the quarterly budget.\n"})
    assert run_cli("-w", str(ws), "index").returncode == 0  # the embedded model
    index = next((state_dir / "memory").glob("*.sqlite"))
    with sqlite3.connect(index) as conn:
        conn.execute("UPDATE chunks SET embedding = ? WHERE path = 'MEMORY.md'",
                     (struct.pack("<384f", 0.1, bad, *[0.05] * 382),))
    conn.close()
    found = run_cli("-w", str(ws), "search", "zebra enclosure gate", "--files")
    assert found.returncode == 0, found.stderr
    assert found.stdout.splitlines()[:1] == ["MEMORY.md"]
    out = run_cli("-w", str(ws), "index", "--force", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["embedded"] >= 1  # the damaged vector was not taken from the cache
    with sqlite3.connect(index) as conn:
        (blob,) = conn.execute("SELECT embedding FROM chunks WHERE path = 'MEMORY.md'").fetchone()
    conn.close()
    assert all(x == x and abs(x) != float("inf") for x in struct.unpack("<384f", blob))
    found = run_cli("-w", str(ws), "search", "striped animal pen", "--mode", "vector", "--files")
    assert found.returncode == 0 and found.stdout.splitlines()[0] == "MEMORY.md"
