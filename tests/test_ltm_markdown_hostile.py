"""The long-term memory mirror's Markdown read in linear time whatever a hostile or damaged file
holds.  Each case runs in a subprocess with a timeout, so a quadratic reading fails instead of
hanging the suite; no LanceDB needed."""

from __future__ import annotations

import json
from pathlib import Path

from helpers import python_child


def test_a_memory_bullet_with_a_long_run_of_blanks_is_read_in_linear_time(tmp_path: Path) -> None:
    """A bullet holding a long run of spaces (a pasted column layout) in an imported or edited mirror
    file was read in quadratic time: 40,000 spaces took 3 s, 150,000 about 40 s, before any memory
    was imported.  Read in a subprocess, so the old behaviour fails on the timeout, not hangs."""
    mem_id = "12345678-1234-1234-1234-123456789abc"
    doc = tmp_path / "export.md"
    doc.write_text(f"- [fact] left{' ' * 150_000}right (id: {mem_id})\n- plain{chr(9) * 150_000}x\n")
    code = ("import json, sys\nfrom memdir.ltm.markdown import parse\n"
            "items, skipped = parse(open(sys.argv[1], encoding='utf-8').read())\n"
            "print(json.dumps([[i.id, i.category, i.text[:4], i.text[-5:], len(i.text)] for i in items]))\n")
    done = python_child(code, str(doc), state_dir=tmp_path / "state")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[mem_id, "fact", "left", "right", 150_009],
                                       [None, None, "plai", "\t\t\t\tx", 150_006]]


def test_a_memory_bullet_with_a_long_importance_is_read_in_linear_time(tmp_path: Path) -> None:
    """An importance of many digits (a damaged or hostile export) was split every way between the
    pattern's two runs of digits, cubic in their number: 20,000 digits took 25 s, 60,000 five
    minutes.  Such a bullet is read as before: a text with no id when nothing closes it."""
    mem_id = "12345678-1234-1234-1234-123456789abc"
    doc = tmp_path / "export.md"
    doc.write_text(f"- [fact] open (id: {mem_id}, importance: {'7' * 100_000}\n"
                   f"- [fact] closed (id: {mem_id}, importance: 0.{'5' * 100_000})\n")
    code = ("import json, sys\nfrom memdir.ltm.markdown import parse\n"
            "items, skipped = parse(open(sys.argv[1], encoding='utf-8').read())\n"
            "print(json.dumps([[i.id, i.text[:6], len(i.text), i.importance] for i in items]))\n")
    done = python_child(code, str(doc), state_dir=tmp_path / "state")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [[None, "open (", 100_060, None], ["12345678-1234-1234-1234-123456789abc",
                                                                        "closed", 6, 0.5555555555555556]]


def test_a_mirror_whose_owner_line_is_long_and_damaged_is_judged_in_linear_time(tmp_path: Path) -> None:
    """Writing the mirror over one whose owner line holds many '" (' (damaged, or hostile) looked
    for the store it names with a backtracking regex: 24 KB took 0.84 s, 300 KB minutes.  It names
    no store, so it is another agent's mirror and left alone, as before."""
    mirror = tmp_path / "long-term.md"
    code = ("import sys\nfrom pathlib import Path\n"
            "from memdir.ltm.markdown import MIRROR_MARK, write_mirror\n"
            "mirror = Path(sys.argv[1])\n"
            "mirror.write_text(MIRROR_MARK + ' of agent \"x' + '\" (' * 100_000 + ' -->\\n- old\\n')\n"
            "ours = MIRROR_MARK + ' of agent \"main\" (/nowhere). Generated from the store -->\\n- new\\n'\n"
            "print(write_mirror(mirror, ours, mirror.with_name('state.json')))\n")
    done = python_child(code, str(mirror), state_dir=tmp_path / "state")
    assert done.returncode == 0, done.stderr
    assert "is the long-term memory mirror of another store" in done.stdout
    assert mirror.read_text().endswith("- old\n") and not list(tmp_path.glob("long-term.md.edited-*"))
