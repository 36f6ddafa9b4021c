"""``ltm import`` in bulk on a real LanceDB: thousands of bullets, lists of alike facts, progress."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ltm_fakes import AxisProvider, axis, near
from memdir.config import load_config
from memdir.ltm import LongTermMemory

pytest.importorskip("lancedb")


def make(tmp_path: Path, provider: Any = None, *, ltm: dict | None = None) -> LongTermMemory:
    ws = tmp_path / "ws"
    ws.mkdir(parents=True, exist_ok=True)
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id="main",
                           overrides={"longTermMemory": ltm or {}}).settings
    return LongTermMemory(settings, provider=provider or AxisProvider())


@pytest.mark.parametrize("store_in_memory", [True, False])
def test_a_list_of_alike_facts_is_imported_side_by_side(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                        store_in_memory: bool) -> None:
    """Each bullet without an id was stored as ``ltm store`` does, so each one superseded the bullet
    before it when they scored ≥ 0.8 in one category: 'server web-1 has IP 10.0.0.1' … 'web-4 …
    10.0.0.4' (a change of digits is a correction) kept web-4 alone, three facts gone from search
    and recall.  The bullets of one file stand side by side; a memory stored before is still
    superseded by a bullet that corrects it, and a bullet written twice is still one memory."""
    servers = [f"Server web-{i} has IP 10.0.0.{i}" for i in range(1, 5)]
    vectors = {text: near(0.97 - 0.02 * i, 2, 10 + i) for i, text in enumerate(servers)}  # 0.85-0.94 apart
    vectors |= {"The billing service uses Postgres": axis(0),  # stored before the import
                "The auth service uses Postgres": near(0.85, 0, 9)}
    if not store_in_memory:  # a store too big to read whole is searched a bullet at a time
        monkeypatch.setattr("memdir.ltm.bulk.IN_MEMORY_FLOATS", 0)
    with make(tmp_path, AxisProvider(vectors)) as ltm:
        old = ltm.store("The billing service uses Postgres", category="fact").record
        lines = [f"- [fact] {text}" for text in servers] + ["- [fact] The auth service uses Postgres",
                                                            f"- [fact] {servers[0]}"]
        report = ltm.import_markdown("\n".join(lines))
        assert len(report.created) == 5 and len(report.duplicates) == 1
        active = {r.text for r in ltm.list()}
        assert active == set(servers) | {"The auth service uses Postgres"}
        gone = ltm.get(old.id)
        assert gone is not None and gone.superseded_by == report.created[4]
        assert ltm.get(gone.superseded_by).text == "The auth service uses Postgres"


def test_an_import_says_which_memories_it_superseded(tmp_path: Path) -> None:
    """A bullet that supersedes a memory stored before takes it out of search and recall; the
    import said 'Imported: 1 created …' and nothing of it (``ltm store`` names it).  The report
    lists them (``superseded``, and ', 1 superseded (ltm list --all)' on the summary line)."""
    provider = AxisProvider({"We deploy on Fridays": axis(0), "We deploy on Thursdays now": near(0.85)})
    with make(tmp_path, provider) as ltm:
        old = ltm.store("We deploy on Fridays", category="decision").record
        report = ltm.import_markdown("- [decision] We deploy on Thursdays now\n")
        assert report.superseded == [old.id] and report.as_dict()["superseded"] == [old.id]
        again = ltm.import_markdown("- [decision] We deploy on Thursdays now\n")
        assert again.duplicates and again.superseded == []


@pytest.mark.parametrize("scoring", ["cosine", "openclaw"])
def test_an_import_skips_what_a_store_would(tmp_path: Path, scoring: str) -> None:
    """The bullets are compared in memory with the store's own scale: with ``scoring = openclaw``
    (1/(1+d²)) cosine 0.974 is a duplicate and 0.97 is not, as for ``ltm store``."""
    provider = AxisProvider({"a": axis(0), "b": near(0.974), "c": near(0.97, 0, 2), "d": near(0.96, 0, 3)})
    with make(tmp_path, provider, ltm={"scoring": scoring, "supersede": False}) as ltm:
        ltm.store("a", category="fact")
        report = ltm.import_markdown("- [fact] b\n- [fact] c\n- [fact] d\n")
        kept = {r.text for r in ltm.list()}
        assert kept == ({"a", "c", "d"} if scoring == "openclaw" else {"a"})
        assert len(report.duplicates) == (1 if scoring == "openclaw" else 3)


def test_thousands_of_bullets_are_written_in_a_few_commits(tmp_path: Path) -> None:
    """Each bullet was a LanceDB commit of its own, after one or two searches: 2,000 bullets took
    83 s with an instant embedder (300: 10 s), each a table version.  They are written 1,000 a
    commit (2,000: ~2 s, 10,000: ~3.5 s), duplicates of the file itself still found."""
    lines = [f"- [fact] The user's fact number {i} is F{i}" for i in range(1500)]
    with make(tmp_path) as ltm:
        report = ltm.import_markdown("\n".join(lines + lines[:10]))
        assert len(report.created) == 1500 and len(report.duplicates) == 10
        assert len(ltm.list()) == 1500
        assert ltm.table.table().version <= 6  # created, two batches, compaction: not one per bullet
        again = ltm.import_markdown("\n".join(lines))  # a run stopped halfway, run again: nothing twice
        assert not again.created and len(again.duplicates) == 1500


def test_a_long_import_says_how_far_it_is(tmp_path: Path, make_workspace, run_cli) -> None:
    """``memdir ltm import`` of thousands of bullets said nothing until the end (the local model
    embedding them for minutes); it prints progress lines on stderr, as ``memdir index`` does (a
    bar on a terminal), and none with --json, whose stdout is the report alone."""
    ws = make_workspace({}, name="bulk-ws")
    cfg = tmp_path / "memdir.json"
    cfg.write_text('{"memorySearch": {"provider": "none"}}')
    base = ("--workspace", str(ws), "--config", str(cfg))
    bullets = tmp_path / "bullets.md"
    bullets.write_text("".join(f"- Fact {i}: the user's item {i} is colour {i * 7 % 11}\n" for i in range(40)))
    every_call = {"MEMDIR_PROGRESS_INTERVAL": "0"}
    done = run_cli("ltm", "import", str(bullets), *base, env=every_call, check=True, timeout=300)
    assert done.stdout.startswith("Imported: 40 created")
    assert "ltm import: 40/40 memories embedded" in done.stderr
    assert "ltm import: 40/40 memories written" in done.stderr
    quiet = run_cli("ltm", "import", str(bullets), "--json", *base, env=every_call, check=True, timeout=300)
    assert "ltm import:" not in quiet.stderr
    # ltm reembed (every memory embedded again after a change of model) as well
    again = run_cli("ltm", "reembed", *base, env=every_call, check=True, timeout=300)
    assert again.stdout.startswith("Re-embedded 40 memories")
    assert "ltm reembed: 40/40 memories embedded" in again.stderr


def test_the_json_of_ltm_list_imports_back_exactly(tmp_path: Path) -> None:
    """``ltm list --all --json`` (each memory to the millisecond, superseded ones with who replaced
    them) given to ``ltm import`` was read as Markdown: every line 'not understood', nothing
    imported.  It is read as JSON, and JSON Lines too, and restores every field."""
    import json

    provider = AxisProvider({"I prefer dark mode": axis(0), "I now prefer light mode": near(0.85)})
    with make(tmp_path / "a", provider) as ltm:
        ltm.store("I prefer dark mode", category="preference", importance=0.25)
        ltm.store("I now prefer light mode", category="preference")
        ltm.store("The deploy window is Friday 14:00", category="decision", importance=0.9)
        before = [r.as_dict() for r in ltm.list(include_superseded=True)]
    assert any("supersededBy" in m for m in before)
    with make(tmp_path / "b", AxisProvider(provider.vectors)) as ltm:
        report = ltm.import_markdown(json.dumps(before, indent=2))
        assert len(report.created) == 3
        assert [r.as_dict() for r in ltm.list(include_superseded=True)] == before
    with make(tmp_path / "c", AxisProvider(provider.vectors)) as ltm:
        ltm.import_markdown("\n".join(json.dumps(m) for m in before))
        assert [r.as_dict() for r in ltm.list(include_superseded=True)] == before


def test_the_json_of_ltm_export_imports_its_memories(tmp_path: Path) -> None:
    """``ltm export --json`` writes ``{"path", "memories", "text"}``, the text being the export's
    Markdown: read as one memory (this branch's JSON import), it became a single memory holding
    every bullet.  Its text is read as the export it is."""
    import json

    with make(tmp_path / "a") as ltm:
        ltm.store("I prefer dark mode", category="preference")
        ltm.store("The deploy window is Friday", category="decision")
        before = [(r.id, r.text, r.category) for r in ltm.list()]
        document = json.dumps({"path": None, "memories": 2, "text": ltm.export()}, indent=2)
    with make(tmp_path / "b") as ltm:
        assert len(ltm.import_markdown(document).created) == 2
        assert [(r.id, r.text, r.category) for r in ltm.list()] == before


@pytest.mark.parametrize(("text", "error"), [
    ('{"text": "one"}\n{"text": "two"}\n{"text": "three",}\n', "line 3: not valid JSON"),
    ('[\n  {"text": "one"},\n  {"text": "two", "importance": "high"}\n]', 'line 3: "importance" is "high"'),
    ('{"text": "one"}\n{"id": "x", "text": "two"}\n', 'line 2: "id" "x" is not a memory id'),
    ('{"text": "one"}\n["two"]\n', "line 2: a memory is a JSON object"),
    ('{"text": "one", "createdAt": 1.5e12}\n', r'line 1: "createdAt" is 1500000000000.0, not a whole number'),
])
def test_a_bad_json_line_is_named_and_nothing_is_imported(tmp_path: Path, text: str, error: str) -> None:
    from memdir.ltm import LtmError

    with make(tmp_path) as ltm:
        with pytest.raises(LtmError, match=error):
            ltm.import_markdown(text)
        assert ltm.list() == []


def test_a_file_of_no_memories_is_no_import(tmp_path: Path, make_workspace, run_cli) -> None:
    """A file memdir reads no memory from (prose, a CSV) said 'Imported: 0 created, 0 updated, 0
    unchanged, 0 duplicates', exit 0, as if it had worked, and listed every line number in one
    line (10,000 lines: 58 KB); it fails naming the first few lines and the formats it reads."""
    ws = make_workspace({}, name="none-ws")
    cfg = tmp_path / "memdir.json"
    cfg.write_text('{"memorySearch": {"provider": "none"}}')
    notes = tmp_path / "notes.csv"
    notes.write_text("".join(f"{i},the user likes item {i}\n" for i in range(500)))
    done = run_cli("ltm", "import", str(notes), "--workspace", str(ws), "--config", str(cfg))
    assert done.returncode == 1 and done.stdout == ""
    assert "holds no memory memdir can read (lines 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, … (500 lines) not" in done.stderr
    assert "nothing imported" in done.stderr and len(done.stderr) < 400


def test_a_utf16_export_imports_back(tmp_path: Path, make_workspace, run_cli) -> None:
    """Windows PowerShell 5's ``memdir ltm export > ltm.md`` writes UTF-16 with a byte order mark,
    which ``ltm import`` refused as 'not valid UTF-8 (at byte 1)'; it is read as UTF-16 (as notes
    are), and UTF-16 that does not decode is named so."""
    import codecs

    ws = make_workspace({}, name="utf16-ws")
    cfg = tmp_path / "memdir.json"
    cfg.write_text('{"memorySearch": {"provider": "none"}}')
    base = ("--workspace", str(ws), "--config", str(cfg))
    export = tmp_path / "ltm.md"
    text = "# Long-term memory\r\n\r\n- [fact] The café opens at 8\r\n"
    export.write_bytes(codecs.BOM_UTF16_LE + text.encode("utf-16-le"))
    done = run_cli("ltm", "import", str(export), *base, check=True, timeout=300)
    assert done.stdout.startswith("Imported: 1 created")
    assert "The café opens at 8" in run_cli("ltm", "list", *base, check=True).stdout
    export.write_bytes(codecs.BOM_UTF16_LE + "- [fact] x".encode("utf-16-le") + b"\x00\xd8")
    bad = run_cli("ltm", "import", str(export), *base)
    assert bad.returncode == 1 and "is not valid UTF-16 (at byte 23); nothing imported" in bad.stderr


def test_importing_the_edited_mirror_applies_it_without_a_copy(tmp_path: Path) -> None:
    """The mirror edited by hand, then given to ``ltm import`` (the README: an edited file can be
    imported): its edits reached the store, and then the mirror was moved aside as edited, 'apply
    it with `memdir ltm import …edited-…`', which had just been done, leaving a stale copy beside
    the notes.  A mirror holding the very text imported is replaced without a copy or a warning."""
    with make(tmp_path, ltm={"mirror": {"enabled": True}}) as ltm:
        ltm.store("I prefer dark mode", category="preference")
        ltm.store("We deploy on Fridays", category="decision")
        mirror = tmp_path / "ws" / "memory" / "long-term.md"
        mirror.write_text(mirror.read_text().replace("dark mode", "light mode") + "- [fact] My cat is Tom\n")
        report = ltm.import_markdown(mirror.read_text())
        assert len(report.updated) == 1 and len(report.created) == 1 and report.warnings == []
        assert [p.name for p in mirror.parent.iterdir()] == ["long-term.md"]
        assert "I prefer light mode" in mirror.read_text() and "My cat is Tom" in mirror.read_text()
        mirror.write_text(mirror.read_text().replace("light mode", "no mode"))  # an edit not imported
        ltm.store("I like tea", category="preference")
        assert len(list(mirror.parent.glob("long-term.md.edited-*"))) == 1


def test_an_import_that_writes_nothing_still_brings_the_mirror_up_to_date(tmp_path: Path) -> None:
    """An import killed after its last batch was written and before the mirror was (kill -9 in
    the compaction between), run again, found every bullet stored, wrote nothing and so left the
    mirror without those memories for good; the same after the mirror was turned on.  Every
    import regenerates the mirror."""
    lines = "\n".join(f"- [fact] The user's fact number {i} is F{i}" for i in range(30))
    with make(tmp_path) as ltm:  # the memories written, the mirror not (as a killed run leaves them)
        assert len(ltm.import_markdown(lines).created) == 30
    with make(tmp_path, ltm={"mirror": {"enabled": True}}) as ltm:
        again = ltm.import_markdown(lines)
        assert not again.created and len(again.duplicates) == 30
        mirror = (tmp_path / "ws" / "memory" / "long-term.md").read_text()
        assert mirror.count("\n- ") == 30


def test_a_tiny_importance_survives_export_and_import(tmp_path: Path) -> None:
    """An importance below 0.0001 was exported as 'importance: 1e-05', which import did not read:
    the memory came back under a new id, '(id: …, importance: 1e-05)' part of its text, at 0.7.
    It is written in digits ('0.00001'), and an export written before is read too."""
    from memdir.ltm.markdown import parse

    with make(tmp_path / "a") as ltm:
        kept = ltm.store("I barely care about fonts", importance=0.00001).record
        text = ltm.export()
    assert "importance: 0.00001)" in text
    with make(tmp_path / "b") as ltm:
        assert ltm.import_markdown(text).created == [kept.id]
        back = ltm.get(kept.id)
        assert back is not None and back.text == kept.text and back.importance == pytest.approx(0.00001)
    old = parse(f"- 2026-01-12 [fact] Tabs (id: {kept.id}, importance: 1e-05)")[0][0]
    assert (old.text, old.id, old.importance) == ("Tabs", kept.id, 0.00001)


def test_an_export_imported_into_its_own_store_changes_nothing(tmp_path: Path) -> None:
    """A memory holding indented lines ('Steps:\\n  - build\\n    - test') came back from its
    export flush left: import stripped each continuation line whole, not the two spaces export
    adds, so restoring an export into its own store 'updated' each such memory to altered text."""
    texts = ["Release steps:\n  - build\n    - run the tests\n  - tag", "a\n\n    indented b", "plain"]
    with make(tmp_path) as ltm:
        for text in texts:
            ltm.store(text, category="fact")
        report = ltm.import_markdown(ltm.export())
        assert (report.created, report.updated, len(report.unchanged)) == ([], [], 3)
        assert sorted(r.text for r in ltm.list()) == sorted(texts)
