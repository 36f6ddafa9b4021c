"""Discovery (R§2) and safe memory_get resolution (R§10.2, vectors 46-48, hostile paths)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from memdir.api import Memory
from memdir.workspace import PathError, discover, is_memory_path


def paths(ws: Path, extra=None):
    return [f.path for f in discover(ws, extra).files]


def test_discovery_roots_memory_dir_and_extra_paths(make_workspace, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "m", "memory.md": "alt", "memory/a.md": "a", "memory/sub/b.md": "b",
                         "memory/notes.txt": "no", "memory/UPPER.MD": "no", "NOTES.md": "no"})
    team = tmp_path / "team"
    (team / "deep").mkdir(parents=True)
    (team / "deep" / "t.md").write_text("t")
    single = tmp_path / "one.md"
    single.write_text("one")
    got = paths(ws, [team, single, tmp_path / "missing"])
    assert got == ["MEMORY.md", "memory.md", "memory/a.md", "memory/sub/b.md", "../team/deep/t.md", "../one.md"]
    issues = discover(ws, [tmp_path / "missing"]).issues
    assert any("additional memory path missing" in i for i in issues)


def test_symlinks_are_never_followed(make_workspace, tmp_path: Path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("secret")
    ws = make_workspace({"memory/a.md": "a"})
    os.symlink(outside / "secret.md", ws / "memory" / "link.md")
    os.symlink(outside, ws / "memory" / "linkdir")
    os.symlink(outside / "secret.md", ws / "MEMORY.md")
    extra_link = tmp_path / "extra-link"
    os.symlink(outside, extra_link)
    assert paths(ws, [extra_link]) == ["memory/a.md"]


def test_a_symlinked_memory_md_is_reported_skipped_and_its_target_can_be_listed(make_workspace, tmp_path: Path):
    """A MEMORY.md linked in from elsewhere (a dotfiles repo) is still not followed, but no longer
    skipped in silence: status lists it with what to do instead, and doing that indexes it."""
    from memdir.workspace import discover

    dotfiles = tmp_path / "dotfiles"
    dotfiles.mkdir()
    (dotfiles / "MEMORY.md").write_text("# kept elsewhere\n")
    ws = make_workspace({"memory/a.md": "a"})
    os.symlink(dotfiles / "MEMORY.md", ws / "MEMORY.md")
    found = discover(ws)
    assert [f.path for f in found.files] == ["memory/a.md"]
    assert [(s.path, "symlink" in s.error and "extraPaths" in s.error) for s in found.skipped] == [("MEMORY.md", True)]
    assert paths(ws, [dotfiles / "MEMORY.md"]) == ["memory/a.md", "../dotfiles/MEMORY.md"]


def test_symlinked_memory_dir_is_not_walked(make_workspace, tmp_path: Path):
    real = tmp_path / "real"
    real.mkdir()
    (real / "x.md").write_text("x")
    ws = make_workspace({"MEMORY.md": "m"})
    os.symlink(real, ws / "memory")
    assert paths(ws) == ["MEMORY.md"]


def test_a_symlinked_memory_folder_or_extra_path_is_reported_skipped(make_workspace, tmp_path: Path):
    """Not followed, as before, but no longer in silence: a memory/ folder linked in from a synced
    drive, or a link listed in extraPaths, indexed nothing without a word."""
    from memdir.workspace import discover

    real = tmp_path / "real"
    real.mkdir()
    (real / "x.md").write_text("x")
    ws = make_workspace({"MEMORY.md": "m"})
    os.symlink(real, ws / "memory")
    os.symlink(real, tmp_path / "extra-link")
    found = discover(ws, [tmp_path / "extra-link"])
    assert [f.path for f in found.files] == ["MEMORY.md"]
    assert [(s.path, "symlink" in s.error) for s in found.skipped] == [("memory", True), ("../extra-link", True)]
    assert "extraPaths" in found.skipped[0].error
    assert paths(ws, [real]) == ["MEMORY.md", "../real/x.md"]  # what the message advises


def test_overlapping_extra_paths_are_deduplicated(make_workspace, tmp_path: Path):
    ws = make_workspace({"memory/a.md": "a"})
    assert paths(ws, [ws / "memory", ws / "memory" / "a.md"]) == ["memory/a.md"]


def test_empty_workspace_reports_issue(make_workspace):
    ws = make_workspace()
    found = discover(ws)
    assert found.files == [] and found.issues[0].startswith("no memory files found")


@pytest.mark.parametrize("rel,ok", [
    ("MEMORY.md", True), ("memory.md", True), ("memory/a/b.md", True), ("./memory/x.md", True),
    ("memory", False), ("Memory/x.md", False), ("notes/memory/x.md", False), ("DREAMS.md", False),
    (".memory/x.md", False),  # OpenClaw's leading-dot quirk says True; memdir refuses it
])
def test_v46_is_memory_path(rel, ok):
    assert is_memory_path(rel) is ok


@pytest.fixture
def mem(make_workspace, keyword_config, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "line 1\nline 2\nline 3", "memory/a.md": "alpha", "memory/notes.txt": "t"})
    extra = tmp_path / "team"
    extra.mkdir()
    (extra / "shared.md").write_text("team notes")
    cfg = {**keyword_config, "memorySearch": {**keyword_config["memorySearch"], "extraPaths": [str(extra)]}}
    with Memory(ws, config=cfg) as m:
        yield m


def test_v47_memory_get_resolution(mem: Memory):
    for bad in ("NOTES.md", "../x.md", "memory/notes.txt"):
        with pytest.raises(PathError):
            mem.get(bad)
    assert mem.get("memory/../MEMORY.md").path == "MEMORY.md"
    assert mem.get(str(mem.workspace / "memory" / "a.md")).as_dict() == {"text": "alpha", "path": "memory/a.md"}
    assert mem.get("memory/missing.md").as_dict() == {"text": "", "path": "memory/missing.md"}
    with pytest.raises(PathError, match="path required"):
        mem.get("   ")
    assert mem.get(str(mem.settings.extra_paths[0] / "shared.md")).text == "team notes"


def test_errors_are_named(mem: Memory):
    with pytest.raises(PathError, match="not allowed"):
        mem.get("NOTES.md")
    with pytest.raises(PathError, match="not a Markdown file"):
        mem.get("memory/notes.txt")
    with pytest.raises(PathError, match="NUL"):
        mem.get("memory/a.md\x00.md")


@pytest.mark.parametrize("from_line,lines,expected", [
    (2, 1, "line 2"), (10, 5, ""), (0, 0, "line 1\nline 2\nline 3"), (-5, 2, "line 1\nline 2"),
    (3, None, "line 3"),
])
def test_v48_slicing(mem: Memory, from_line, lines, expected):
    assert mem.get("MEMORY.md", from_line=from_line, lines=lines).text == expected


def test_hostile_paths_never_read_outside(mem: Memory, tmp_path: Path):
    secret = tmp_path / "secret.md"
    secret.write_text("TOP SECRET")
    ws = mem.workspace
    os.symlink(secret, ws / "memory" / "link.md")
    os.symlink(tmp_path, ws / "memory" / "dirlink")
    (ws / ".memory").mkdir()
    (ws / ".memory" / "x.md").write_text("hidden")
    hostile = [
        "../secret.md", "../../secret.md", str(secret), "/etc/passwd", "memory/../../secret.md",
        "memory/link.md", "memory/dirlink/secret.md", ".memory/x.md", "memory/\x00../secret.md",
        "memory/..\\..\\secret.md", "~/secret.md", "memory//../../secret.md",
        str(mem.settings.extra_paths[0]) + "/../secret.md",
    ]
    for raw in hostile:
        try:
            text = mem.get(raw).text
        except PathError:
            continue
        assert "TOP SECRET" not in text and "hidden" not in text, raw


def test_symlinked_intermediate_directory_is_refused(mem: Memory, tmp_path: Path):
    outside = tmp_path / "elsewhere"
    (outside).mkdir()
    (outside / "x.md").write_text("outside")
    os.symlink(outside, mem.workspace / "memory" / "sub")
    with pytest.raises(PathError, match="symlink"):
        mem.get("memory/sub/x.md")


def test_directory_named_like_markdown_is_refused(mem: Memory):
    (mem.workspace / "memory" / "folder.md").mkdir()
    with pytest.raises(PathError, match="not a file"):
        mem.get("memory/folder.md")


def test_a_folder_swapped_for_a_symlink_after_the_check_is_not_read_through(mem: Memory, tmp_path: Path,
                                                                           monkeypatch: pytest.MonkeyPatch):
    """memory_get checked the path, then opened it by name: a folder replaced by a symlink to
    outside in between (TOCTOU) made it read the outside file.  The read now walks down from the
    root one folder at a time without following symlinks."""
    import shutil

    import memdir.workspace as workspace

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("TOP SECRET")
    sub = mem.workspace / "memory" / "sub"
    sub.mkdir()
    (sub / "x.md").write_text("inside")
    checked = workspace.resolve_readable

    def check_then_swap(*args, **kwargs):
        resolved = checked(*args, **kwargs)
        shutil.rmtree(sub)
        os.symlink(outside, sub)
        return resolved

    monkeypatch.setattr(workspace, "resolve_readable", check_then_swap)
    with pytest.raises(PathError, match=r"symlinks are not followed: memory/sub$"):
        mem.get("memory/sub/x.md")
    extra = mem.settings.extra_paths[0]
    (extra / "deep").mkdir()
    (extra / "deep" / "x.md").write_text("team")
    sub = extra / "deep"  # the folder the next check swaps
    with pytest.raises(PathError, match="symlinks are not followed"):
        mem.get(str(extra / "deep" / "x.md"))


def test_an_extra_folder_named_like_markdown_is_readable_as_it_is_indexed(make_workspace, keyword_config,
                                                                          tmp_path: Path):
    """extraPaths ``notes.md`` that is a folder: discovery walked and indexed it, but memory_get took
    it for a file by its suffix and refused every search result under it ("path not allowed")."""
    folder = tmp_path / "notes.md"
    folder.mkdir()
    (folder / "a.md").write_text("- the kiwi plan\n")
    ws = make_workspace({"MEMORY.md": "- base\n"})
    cfg = {"memorySearch": {**keyword_config["memorySearch"], "extraPaths": [str(folder)]}}
    with Memory(ws, config=cfg) as mem:
        [hit] = mem.search("kiwi").results
        assert (hit.path, mem.get(hit.path).text) == ("../notes.md/a.md", "- the kiwi plan\n")
        with pytest.raises(PathError, match="not a file"):
            mem.get(str(folder))


def test_a_file_name_with_a_backslash_is_read_as_it_is_indexed(mem: Memory, tmp_path: Path):
    """memory_get took every backslash for a separator (an agent on Windows writes them), so
    ``memory/a\\b.md``, a valid name here and indexed as such, read as missing.  The name as
    given wins when it is an allowed file; a backslash still never leads out of the roots."""
    ws = mem.workspace
    (ws / "memory" / "a\\b.md").write_text("- backslash note\n")
    (ws / "memory" / "sub").mkdir()
    (ws / "memory" / "sub" / "c.md").write_text("- nested note\n")
    (ws / "memory\\..\\MEMORY.md").write_text("not memory: a file in the workspace root\n")
    mem.sync()
    assert "memory/a\\b.md" in [f.path for f in discover(ws).files]
    assert mem.get("memory/a\\b.md").as_dict() == {"text": "- backslash note\n", "path": "memory/a\\b.md"}
    assert mem.get("memory\\sub\\c.md").text == "- nested note\n"
    assert mem.get("memory\\..\\MEMORY.md").as_dict() == {"text": "line 1\nline 2\nline 3", "path": "MEMORY.md"}
    with pytest.raises(PathError, match="not allowed"):
        mem.get("memory\\..\\..\\secret.md")


def test_a_name_stored_in_nfd_is_read_when_asked_in_nfc(mem: Memory, tmp_path: Path):
    """A note named in NFD (``e`` + combining accent: macOS, some archives) came back from an agent
    in NFC and read as missing; the other normal form is tried when only it exists, and is still
    held to the allowed roots."""
    import unicodedata

    ws = mem.workspace
    nfd = unicodedata.normalize("NFD", "memory/café-réunion.md")
    nfc = unicodedata.normalize("NFC", nfd)
    assert nfd != nfc
    (ws / nfd).write_text("- the crème brûlée vote\n")
    mem.sync()
    [hit] = [h for h in mem.search("brûlée vote").results if h.path.endswith(".md") and "caf" in h.path]
    assert hit.path == nfd
    assert mem.get(nfc).as_dict() == {"text": "- the crème brûlée vote\n", "path": nfd}
    assert mem.get(nfd).text == "- the crème brûlée vote\n"
    (ws / nfc).write_text("- its NFC twin\n")  # both exist: each name reads its own file
    assert mem.get(nfc).text == "- its NFC twin\n" and mem.get(nfd).text == "- the crème brûlée vote\n"
    outside = tmp_path / unicodedata.normalize("NFD", "dehors-é.md")
    outside.write_text("secret\n")
    with pytest.raises(PathError, match="not allowed"):
        mem.get(f"memory/../../{unicodedata.normalize('NFC', outside.name)}")
    assert mem.get(unicodedata.normalize("NFC", "memory/absent-é.md")).text == ""


def test_a_path_whose_parts_are_in_different_normal_forms_is_read_in_either_form(mem: Memory, tmp_path: Path):
    """A folder named in NFD (made on macOS and synced) holding a note named in NFC (appended on
    Linux) was missing when an agent asked for the path in NFC or in NFD, as neither whole form
    exists; each missing part is matched in its folder by its NFC, still below the allowed roots."""
    import os
    import unicodedata

    ws = mem.workspace
    folder = ws / "memory" / unicodedata.normalize("NFD", "projets-été")
    folder.mkdir(parents=True)
    (folder / unicodedata.normalize("NFC", "réunion.md")).write_text("- the lynx survey moves to June\n")
    mem.sync()
    [hit] = mem.search("lynx survey").results
    for form in ("NFC", "NFD"):
        asked = unicodedata.normalize(form, "memory/projets-été/réunion.md")
        assert mem.get(f"{asked}#L1").as_dict() == {"text": "- the lynx survey moves to June", "path": hit.path}
    assert mem.get(unicodedata.normalize("NFC", "memory/projets-été/absent.md")).text == ""
    # a symlinked folder is not listed for the other form: refused as any symlink
    (ws / "outside-é").mkdir()
    (ws / "outside-é" / unicodedata.normalize("NFD", "secret-é.md")).write_text("secret\n")
    os.symlink(ws / "outside-é", ws / "memory" / "link-é")
    with pytest.raises(PathError, match="symlink"):
        mem.get(unicodedata.normalize("NFC", "memory/link-é/secret-é.md"))
