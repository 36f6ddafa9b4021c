"""Damage that ``PRAGMA quick_check`` does not see is still found, and healed by the next sync.

A flipped byte in a key (a row a scan lists but no lookup finds) or in a stored text (not UTF-8
any more) leaves every page readable.  Before, each sync failed the same way for ever ("1
removed" on every run with ``status`` dirty, or "Could not decode to UTF-8"), and ``status
--deep`` said all was well or failed without healing.  Each case patches the bytes of one row of
the ``files`` table in a real index, then runs the real CLI.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.stores.sqlite import to_blob
from test_cache_refs import HashProvider, _notes

NONE = {"MEMDIR_PROVIDER": "none"}
N_FILES = 10


def _built(make_workspace) -> tuple[Path, Path]:
    ws = make_workspace({f"memory/2026-01-{i:03d}.md": f"# Day {i}\n\nThe codeword is kiwi{i}x.\n"
                         for i in range(N_FILES)})
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        assert mem.sync().indexed == N_FILES
        index = mem.index_path
    assert not Path(f"{index}-wal").exists()
    return ws, index


def _patch_files_page(index: Path, old: bytes, new: bytes) -> None:
    """Replace ``old`` by ``new`` (as long) in the page of the ``files`` table (small: one page)."""
    assert len(old) == len(new)
    with sqlite3.connect(index) as conn:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_master WHERE name = 'files'").fetchone()
        (page,) = conn.execute("PRAGMA page_size").fetchone()
    conn.close()
    data = bytearray(index.read_bytes())
    start = (root - 1) * page
    at = data.index(old, start, start + page)
    data[at : at + len(old)] = new
    index.write_bytes(bytes(data))


def _a_files_hash(index: Path) -> bytes:
    with sqlite3.connect(index) as conn:
        (value,) = conn.execute("SELECT hash FROM files WHERE path = 'memory/2026-01-004.md'").fetchone()
    conn.close()
    return value.encode() if isinstance(value, str) else bytes(value)


def _damage_key(index: Path) -> None:
    # 005 -> 00x: the row now sorts after 009 but sits before 006
    _patch_files_page(index, b"memory/2026-01-005.md", b"memory/2026-01-00x.md")


def _damage_text(index: Path) -> None:
    value = _a_files_hash(index)
    _patch_files_page(index, value, value[:10] + b"\xff" + value[11:])


def _corrupt_copies(index: Path) -> list[Path]:
    return [p for p in index.parent.iterdir() if ".corrupt-" in p.name and not p.name.endswith("-wal")]


@pytest.mark.parametrize("damage", [_damage_key, _damage_text], ids=["key-out-of-order", "text-not-utf8"])
def test_the_next_index_heals_damage_quick_check_misses(damage, make_workspace, run_cli):
    ws, index = _built(make_workspace)
    damage(index)

    first = run_cli("index", "-w", str(ws), env=NONE)
    assert first.returncode == 0, first.stderr
    assert "Traceback" not in first.stderr and "was damaged" in first.stderr, first.stderr
    assert len(_corrupt_copies(index)) == 1
    again = run_cli("index", "-w", str(ws), env=NONE)
    assert again.returncode == 0 and "0 removed" in again.stdout and "was damaged" not in again.stderr, again
    status = json.loads(run_cli("status", "--json", "-w", str(ws), env=NONE).stdout)
    assert status["files"] == N_FILES and status["dirty"] is False
    found = run_cli("search", "kiwi5x", "--json", "-w", str(ws), env=NONE)
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-01-005.md"]


@pytest.mark.parametrize("damage", [_damage_key, _damage_text], ids=["key-out-of-order", "text-not-utf8"])
def test_status_deep_finds_damage_quick_check_misses(damage, make_workspace, run_cli):
    ws, index = _built(make_workspace)
    damage(index)

    deep = run_cli("status", "--deep", "--json", "-w", str(ws), env=NONE)
    assert deep.returncode == 0, deep.stderr
    assert "was damaged" in deep.stderr and "Traceback" not in deep.stderr, deep.stderr
    assert json.loads(deep.stdout)["recovered"]["corruptPath"] == str(_corrupt_copies(index)[0])
    assert run_cli("index", "-w", str(ws), env=NONE).returncode == 0
    status = json.loads(run_cli("status", "--deep", "--json", "-w", str(ws), env=NONE).stdout)
    assert status["files"] == N_FILES and status["dirty"] is False and len(_corrupt_copies(index)) == 1


def test_a_damaged_schema_name_that_is_not_utf8_is_healed(make_workspace, run_cli):
    """SQLite's "malformed database schema (<name>)" quotes the damaged name: not UTF-8, the binding
    raised UnicodeDecodeError instead, and every command failed with "cannot open the index"."""
    ws, index = _built(make_workspace)
    with sqlite3.connect(index) as conn:
        conn.execute("PRAGMA writable_schema = ON")
        conn.execute("UPDATE sqlite_master SET name = CAST(x'6964785fff' AS TEXT), sql = 'CREATE INDEX broken' "
                      "WHERE name = 'idx_chunks_date'")
    conn.close()

    found = run_cli("search", "kiwi5x", "--json", "-w", str(ws), env=NONE)
    assert found.returncode == 0, found.stderr
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-01-005.md"]
    assert found.stderr.count("was damaged") == 1 and "not UTF-8" in found.stderr, found.stderr
    assert len(_corrupt_copies(index)) == 1
    status = json.loads(run_cli("status", "--deep", "--json", "-w", str(ws), env=NONE).stdout)
    assert status["files"] == N_FILES and status["dirty"] is False and len(_corrupt_copies(index)) == 1


def test_a_damaged_vector_is_not_salvaged_into_the_rebuilt_index(make_workspace, tmp_path: Path):
    """A recovery keeps the embedding cache, but a vector whose bytes the damage changed (SQLite cannot
    tell) is embedded again: salvaged, it was served by every rebuild after."""
    ws = make_workspace(_notes(12))
    state = tmp_path / "state"
    with Memory(ws, provider=HashProvider(), state_dir=state) as mem:
        mem.sync()
        index = mem.index_path
        (text,) = mem.store.conn.execute("SELECT text FROM chunks WHERE path = 'memory/2026-01-05.md'").fetchone()
    with sqlite3.connect(index) as conn:
        # one bit of a float's exponent flipped (it grows by 2**64 or more), in the chunk holding
        # the vector its cache entry refers to
        (blob,) = conn.execute("SELECT embedding FROM chunks WHERE path = 'memory/2026-01-05.md'").fetchone()
        conn.execute("UPDATE chunks SET embedding = ? WHERE path = 'memory/2026-01-05.md'",
                     (blob[:3] + bytes([blob[3] ^ 0x40]) + blob[4:],))
        conn.execute("UPDATE meta SET value = '{' WHERE key = 'memory_index_meta_v1'")  # found damaged
    conn.close()

    provider = HashProvider()
    with Memory(ws, provider=provider, state_dir=state) as mem:
        report = mem.sync()
        assert mem.recoveries and mem.recoveries[-1]["salvagedCacheEntries"] == 11
        assert report.full and provider.embedded == 1
        (stored,) = mem.store.conn.execute("SELECT embedding FROM chunks WHERE path = ?", ("memory/2026-01-05.md",)
                                           ).fetchone()
        assert stored == to_blob(provider._vec(text))
