"""A damaged long-term memory table heals: set aside, rebuilt from what still reads, said once.

Real LanceDB tables in temp folders, damaged the way disks do it (a data file or the newest
manifest overwritten with garbage), then used through LongTermMemory, the tools and the CLI.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from helpers import cli_env
from ltm_fakes import AxisProvider, axis
from memdir.config import load_config
from memdir.ltm import LongTermMemory, LtmError, heal
from memdir.tools import call_tool

pytest.importorskip("lancedb")

TEXTS = ["The user's cat is named Miso", "The user lives in Lisbon", "The user prefers tea over coffee"]


def make(tmp_path: Path, provider: Any = None, *, ltm: dict | None = None, notices: list[str] | None = None
         ) -> LongTermMemory:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id="main",
                           overrides={"longTermMemory": ltm or {}}).settings
    return LongTermMemory(settings, provider=provider or AxisProvider({t: axis(i) for i, t in enumerate(TEXTS)}),
                          notice=notices.append if notices is not None else None)


def stored(tmp_path: Path, **kwargs: Any) -> tuple[Path, dict[str, str]]:
    """Three memories stored one by one (one data file each); the store folder and text → id."""
    with make(tmp_path, **kwargs) as ltm:
        ids = {t: ltm.store(t, category="fact").record.id for t in TEXTS}
        return ltm.db_path, ids


def data_files(db: Path) -> list[Path]:
    """The table's data files, oldest first: the i-th holds the i-th memory stored."""
    return sorted((db / "memories.lance" / "data").iterdir(), key=lambda p: p.stat().st_mtime_ns)


def garble(path: Path) -> None:
    path.write_bytes(os.urandom(100))


def aside_folders(db: Path) -> list[Path]:
    return sorted(db.glob("memories.lance.damaged-*"))


def zero_fill(path: Path) -> None:
    """What a crash on ext4 or xfs leaves of a file written just before: its length, all zeros."""
    path.write_bytes(b"\0" * path.stat().st_size)


@pytest.mark.parametrize("damage", [garble, zero_fill])
def test_damaged_data_file_keeps_the_readable_rows_and_store_works(tmp_path: Path,
                                                                   damage: Callable[[Path], None]) -> None:
    # zero-filled at its length, Lance said "Invalid input, file does not appear to be a Lance file"
    # (a ValueError, taken for a bad query): every command failed with it, unhealed
    db, ids = stored(tmp_path)
    damage(data_files(db)[1])  # the second memory's fragment
    notices: list[str] = []
    with make(tmp_path, notices=notices) as ltm:
        hits = ltm.search(TEXTS[0], min_score=0.9)
        assert [h.id for h in hits] == [ids[TEXTS[0]]]
        assert [r.id for r in ltm.list()] == [ids[TEXTS[0]], ids[TEXTS[2]]]
        assert len(notices) == 1 and "recovered 2 of 3 memories" in notices[0]
        [aside] = aside_folders(db)
        assert str(aside) in notices[0]
        assert len(list((aside / "data").iterdir())) == 3  # nothing deleted: the damaged table is kept whole
        assert ltm.store("The dog is Rex", category="fact").action == "created"
        assert len(ltm.list()) == 3 and ltm.recoveries[0]["lostFragments"] == 1
    with make(tmp_path, notices=notices) as again:  # another process: no second recovery, stats tell
        st = again.stats()
        assert len(notices) == 1 and st["total"] == 3
        assert st["recovery"]["recovered"] == 2 and st["recovery"]["expected"] == 3
    assert not any(p.name.startswith(heal.REBUILD_PREFIX) for p in db.iterdir())


@pytest.mark.parametrize("damage", [garble, zero_fill])
def test_damaged_newest_manifest_reads_the_version_before(tmp_path: Path, damage: Callable[[Path], None]) -> None:
    # zero-filled, the manifest opened as an empty "version 0" of no columns: every command failed
    # with Lance's "internal error … Dataset version 0 does not have a transaction file", unhealed
    db, _ = stored(tmp_path)
    damage(heal.manifest_versions(db / "memories.lance")[0][1])
    notices: list[str] = []
    with make(tmp_path, notices=notices) as ltm:
        assert [r.text for r in ltm.list()] == TEXTS[:2]  # the last store lived only in that manifest
        info = ltm.recoveries[0]
        assert info["version"] == info["newestVersion"] - 1
        assert "the newest 1 version(s) were unreadable" in notices[0]
        assert ltm.store(TEXTS[2], category="fact").action == "created"


def test_the_mirror_restores_what_the_table_lost(tmp_path: Path) -> None:
    mirror = {"mirror": {"enabled": True}}
    db, ids = stored(tmp_path, ltm=mirror)
    for path in data_files(db):
        garble(path)  # no row of the table reads any more
    provider = AxisProvider({t: axis(i) for i, t in enumerate(TEXTS)})
    with make(tmp_path, provider, ltm=mirror) as ltm:
        result = call_tool(ltm, "memory_recall", {"query": TEXTS[1]})
        assert result.payload["memories"][0]["id"] == ids[TEXTS[1]]
        [warning] = result.payload["warnings"]
        assert "recovered 3 of 3 memories (3 from the mirror)" in warning
        assert {r.id: r.text for r in ltm.list()} == {v: k for k, v in ids.items()}
        assert [r.category for r in ltm.list()] == ["fact"] * 3
        for text in TEXTS:  # re-embedded with the configured model: each finds itself
            assert [(h.id, round(h.score or 0, 3)) for h in ltm.search(text, min_score=0.9)] == [(ids[text], 1.0)]
        assert "warnings" not in call_tool(ltm, "memory_recall", {"query": TEXTS[1]}).payload  # said once
        assert all(ids[t] in ltm.mirror_path.read_text() for t in TEXTS)


def test_a_mirror_bullet_with_an_impossible_date_is_still_restored(tmp_path: Path) -> None:
    """A date edited by hand into the mirror (2026-02-30) failed the whole recovery with "day is
    out of range for month"; that memory is restored as of now, the others with their days."""
    mirror = {"mirror": {"enabled": True}}
    db, ids = stored(tmp_path, ltm=mirror)
    path = tmp_path / "ws" / "memory" / "long-term.md"
    lines = path.read_text().splitlines(keepends=True)
    first = next(i for i, line in enumerate(lines) if TEXTS[0] in line)
    lines[first] = "- 2026-02-30 " + lines[first].split(" ", 2)[2]
    path.write_text("".join(lines))
    for data in data_files(db):
        garble(data)
    with make(tmp_path, ltm=mirror) as ltm:
        assert {r.id: r.text for r in ltm.list()} == {v: k for k, v in ids.items()}
        assert ltm.recoveries and ltm.recoveries[0]["recovered"] == 3


def test_errors_that_are_no_damage_recover_nothing(tmp_path: Path) -> None:
    db, _ = stored(tmp_path)
    with make(tmp_path) as ltm:
        with pytest.raises(LtmError, match="Invalid memory ID format"):
            ltm.forget("nope!")
        with pytest.raises(LtmError, match="importance"):
            ltm.store("x", importance=3)
        with pytest.raises(ValueError) as bad_filter:  # a bad query inside LanceDB itself
            ltm.table.table().search().where("nonexistent = 3").to_list()
        assert not heal.is_damage(bad_filter.value)
        mismatch = make(tmp_path, AxisProvider(model="axis-2"))
        with pytest.raises(LtmError, match="configured model"):
            mismatch.search(TEXTS[0])
        mismatch.close()
        assert len(ltm.list()) == 3 and ltm.recoveries == []
    assert aside_folders(db) == [] and not (db / heal.RECOVERY_FILE).exists()


KILL_BETWEEN_RENAMES = textwrap.dedent("""
    import os, signal, sys
    real = os.rename
    def rename(src, dst):
        real(src, dst)
        if str(src).endswith("memories.lance") and ".damaged-" in str(dst):
            os.kill(os.getpid(), signal.SIGKILL)  # the damaged table is aside, the new one not yet in
    os.rename = rename
    from memdir.cli import main
    raise SystemExit(main(sys.argv[1:]))
""")


def test_cli_recovers_once_and_a_kill_between_the_renames_is_finished_later(tmp_path: Path, make_workspace,
                                                                            run_cli, state_dir: Path) -> None:
    ws = make_workspace({})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    base = ("--workspace", str(ws), "--config", str(cfg))
    for text in TEXTS:
        run_cli("ltm", "store", text, "--category", "fact", *base, check=True)
    db = next((state_dir / "ltm").iterdir())
    garble(data_files(db)[0])

    killed = subprocess.run([sys.executable, "-c", KILL_BETWEEN_RENAMES, "ltm", "search", "cat name", *base],
                            capture_output=True, text=True, timeout=120, env=cli_env(state_dir))
    assert killed.returncode == -9, killed.stderr
    assert not (db / "memories.lance").exists()
    [build] = [p for p in db.iterdir() if p.name.startswith(heal.REBUILD_PREFIX)]
    assert (build / heal.READY).exists() and (build / "new" / "memories.lance").exists()

    listed = run_cli("ltm", "list", "--json", *base, check=True)
    assert (db / "memories.lance").exists() and not build.exists()
    texts = [m["text"] for m in json.loads(listed.stdout)]
    assert TEXTS[0] not in texts and set(texts) <= set(TEXTS[1:]) and texts
    stored_now = run_cli("ltm", "store", "The dog is Rex", *base, check=True)
    assert stored_now.stdout.startswith("Stored: ") and stored_now.stderr == ""
    stats = run_cli("ltm", "stats", *base, check=True).stdout
    assert "Recovered " in stats and "set aside at" in stats


def test_cli_damaged_data_file_says_so_once_on_stderr(tmp_path: Path, make_workspace, run_cli,
                                                      state_dir: Path) -> None:
    ws = make_workspace({})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    base = ("--workspace", str(ws), "--config", str(cfg))
    run_cli("ltm", "store", TEXTS[0], *base, check=True)
    run_cli("ltm", "store", TEXTS[1], *base, check=True)
    db = next((state_dir / "ltm").iterdir())
    garble(data_files(db)[1])
    found = run_cli("ltm", "search", "cat name", "--json", *base)
    assert found.returncode == 0, found.stderr
    assert [h["text"] for h in json.loads(found.stdout)] == [TEXTS[0]]
    lines = [line for line in found.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "long-term memory store was damaged" in lines[0]
    assert "recovered 1 of 2 memories" in lines[0] and "/rustc/" not in lines[0]
    again = run_cli("ltm", "store", "The dog is Rex", "--json", *base)
    assert again.returncode == 0 and again.stderr == "" and json.loads(again.stdout)["action"] == "created"
    stats = json.loads(run_cli("ltm", "stats", "--json", *base, check=True).stdout)
    assert stats["total"] == 2 and stats["recovery"]["recovered"] == 1


def test_a_damaged_compacted_fragment_is_filled_in_from_the_version_before_compaction(tmp_path: Path) -> None:
    with make(tmp_path, AxisProvider()) as ltm:
        for i in range(33):  # the 32nd write compacts the table into one fragment
            ltm.store(f"memory number {i}", category="fact")
        db = ltm.db_path
    files = data_files(db)
    compacted = max(files[:-1], key=lambda p: p.stat().st_size)  # the last store wrote the newest file
    garble(compacted)
    notices: list[str] = []
    with make(tmp_path, AxisProvider(), notices=notices) as ltm:
        assert sorted(r.text for r in ltm.list()) == sorted(f"memory number {i}" for i in range(33))
        assert "recovered 33 of 33 memories (32 from an earlier version)" in notices[0]
