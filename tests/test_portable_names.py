"""Names at the limits of file systems and other platforms' names: the index's own files beside a
long index name, Windows paths in the config, workspace paths with odd characters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env


def _cli(state_dir: Path, ws: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memdir", "--workspace", str(ws), *args],
                          capture_output=True, text=True, timeout=120, env=cli_env(state_dir))


def test_a_store_path_too_long_for_the_files_beside_it_is_refused_by_name(make_workspace, tmp_path: Path):
    """An index name of 242 bytes fits the file system, but the first build's
    ``….sqlite.tmp-<id>`` did not: 'Memory index failed: [Errno 36] File name too long'."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    index = tmp_path / ("é" * 117 + ".sqlite")  # 241 bytes
    (ws / "memdir.toml").write_text(f'[memorySearch]\nprovider = "none"\nstore.path = "{index}"\n')
    out = _cli(tmp_path / "state", ws, "index")
    assert out.returncode != 0
    assert "names an index file of 241 bytes; at most 215" in out.stderr, out.stderr
    assert "Errno" not in out.stderr and not index.exists()


def test_the_longest_store_path_allowed_builds_rebuilds_and_searches(make_workspace, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    index = tmp_path / ("é" * 104 + ".sqlite")  # 215 bytes
    (ws / "memdir.toml").write_text(f'[memorySearch]\nprovider = "none"\nstore.path = "{index}"\n')
    state = tmp_path / "state"
    for args in (("index",), ("index", "--force"), ("search", "heron")):
        out = _cli(state, ws, *args)
        assert out.returncode == 0, (args, out.stderr)
    assert "MEMORY.md" in out.stdout and index.is_file()


def test_a_file_replaced_whole_may_have_the_longest_name_a_file_system_takes(tmp_path: Path):
    """``ltm export --out`` (and the long-term memory mirror) write through a temporary file named
    ``.<name>.<pid>-<random>.tmp``: to a name of 234 to 255 bytes it failed "File name too long"."""
    import memdir.atomic_write as aw
    from memdir.atomic_write import replace_file

    target = tmp_path / ("ü" * 126 + ".md")  # 255 bytes
    replace_file(target, b"first\n")
    assert target.read_bytes() == b"first\n" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]
    # a temporary file a killed writer left under that (shortened) name is swept by the next writer
    dead = tmp_path / f".{'ü' * 116}.4194303-abcdefgh.tmp"  # as cut to fit: 234 bytes before the pid
    dead.write_bytes(b"half")
    aw._swept.clear()
    replace_file(target, b"second\n", mode=0o666)
    assert target.read_bytes() == b"second\n" and sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_ltm_export_to_a_name_of_255_bytes(make_workspace, tmp_path: Path):
    import pytest

    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "x\n", "memdir.toml": '[memorySearch]\nprovider = "none"\n'
                                                            "[longTermMemory]\nenabled = true\n"})
    state = tmp_path / "state"
    assert _cli(state, ws, "ltm", "store", "The heron prefers the weir").returncode == 0
    out_file = tmp_path / ("ü" * 126 + ".md")
    out = _cli(state, ws, "ltm", "export", "--out", str(out_file))
    assert out.returncode == 0, out.stderr
    assert "heron prefers the weir" in out_file.read_text()


def test_extra_paths_written_on_windows(make_workspace, tmp_path: Path):
    """``notes\\team`` (a config copied from Windows) named no folder, its notes were searched
    nowhere; ``C:\\Users\\me\\notes`` was 'missing (<workspace>/C:\\Users\\me\\notes)', a path
    nobody wrote, without a word of why."""
    ws = make_workspace({"MEMORY.md": "x\n", "notes/team/a.md": "The avocet wades at dawn.\n"})
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n'
                                    'extraPaths = ["notes\\\\team", "C:\\\\Users\\\\me\\\\notes"]\n')
    state = tmp_path / "state"
    index = _cli(state, ws, "index")
    assert index.returncode == 0, index.stderr
    assert "notes\\team" not in index.stderr
    assert ("'C:' is a Windows drive, which names no folder here; give the path where that drive is mounted "
            "(under WSL: /mnt/c/Users/me/notes)") in index.stderr
    out = _cli(state, ws, "search", "avocet")
    assert out.returncode == 0 and out.stdout.split()[1] == "notes/team/a.md:1-2", out.stdout
    got = _cli(state, ws, "get", "notes\\team\\a.md")
    assert got.returncode == 0 and got.stdout == "The avocet wades at dawn.\n", got.stderr


def test_a_backslash_in_an_extra_path_that_exists_as_written_is_a_name(make_workspace, tmp_path: Path):
    ws = make_workspace({"MEMORY.md": "x\n", "notes\\team/a.md": "The stilt wades.\n",
                         "notes/team/b.md": "The stilt sleeps.\n"})
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\nextraPaths = ["notes\\\\team"]\n')
    out = _cli(tmp_path / "state", ws, "search", "stilt")
    assert out.returncode == 0 and [line.split()[1] for line in out.stdout.splitlines()
                                    if line[:1].isdigit()] == ["notes\\team/a.md:1-2"], out.stdout


def test_a_config_file_saved_as_utf16_by_windows_is_read(make_workspace, tmp_path: Path):
    """Windows PowerShell's ``>`` and Notepad's "Unicode" write UTF-16 with a byte order mark:
    such a memdir.toml was refused, "not UTF-8 text (byte 0: b'\\xff'); is it the right file?"."""
    ws = make_workspace({"MEMORY.md": "The ruff displays.\n"})
    state = tmp_path / "state"
    for bom, encoding in ((b"\xff\xfe", "utf-16-le"), (b"\xfe\xff", "utf-16-be")):
        (ws / "memdir.toml").write_bytes(bom + '[memorySearch]\r\nprovider = "none"\r\n'.encode(encoding))
        out = _cli(state, ws, "config", "show")
        assert out.returncode == 0, out.stderr
        assert [line.split()[1] for line in out.stdout.splitlines()
                if line.startswith("memorySearch.provider ")] == ['"none"']
    (ws / "memdir.toml").write_bytes(b"\xff\xfe[\x00\xd8")  # half a surrogate pair: still named
    out = _cli(state, ws, "config", "show")
    assert out.returncode != 0 and "is not UTF-16-LE text (byte 4: b'\\xd8')" in out.stderr, out.stderr


def test_a_file_replaced_whole_on_a_file_system_without_unix_modes(tmp_path: Path):
    """FAT (a USB stick) refuses a chmod to a mode it cannot show (EPERM; through FUSE ENOSYS):
    ``ltm export --out /media/usb/x.md`` and the long-term memory mirror in a workspace there
    failed '[Errno 38] Function not implemented' for a mode every file there has anyway."""
    from helpers import FatFolder
    from memdir.atomic_write import replace_file

    fat = FatFolder(tmp_path / "fat.img", tmp_path / "usb")
    try:
        target = fat.root / "export.md"
        replace_file(target, b"# Long-term memory\n", mode=0o666)
        replace_file(target, b"# Long-term memory, again\n", mode=0o666)
        assert target.read_bytes() == b"# Long-term memory, again\n"
        assert [p.name for p in fat.root.iterdir()] == ["export.md"]
    finally:
        fat.close()


@pytest.mark.parametrize(("before", "after"), [
    (b"- first\r\n- second\r\n", b"- first\r\n- second\r\n- third\r\n  more\r\n"),  # Windows
    (b"- first\r\n- second", b"- first\r\n- second\r\n- third\r\n  more\r\n"),  # (no final line end)
    (b"- first\r- second\r", b"- first\r- second\r- third\r  more\r"),  # classic Mac
    (b"- first\n- second\n", b"- first\n- second\n- third\n  more\n"),
])
def test_an_entry_is_appended_in_the_line_ends_of_its_note(make_workspace, before: bytes, after: bytes):
    """Appended in ``\\n`` to a log saved on Windows, the note had mixed line ends; to a classic Mac
    one, the ``\\n`` after its last ``\\r`` made a ``\\r\\n``."""
    from memdir.memfiles import append_memory_file

    ws = make_workspace({})
    (ws / "memory").mkdir()
    (ws / "memory" / "2026-01-02.md").write_bytes(before)
    append_memory_file(ws, "2026-01-02.md", "- third\n  more", blank_line=False)
    assert (ws / "memory" / "2026-01-02.md").read_bytes() == after


def test_an_entry_appended_to_a_windows_utf16_note_keeps_its_line_ends(make_workspace):
    from memdir.memfiles import append_memory_file

    ws = make_workspace({})
    (ws / "memory").mkdir()
    note = ws / "memory" / "2026-01-02.md"
    note.write_bytes("\ufeff- first\r\n".encode("utf-16-le"))
    append_memory_file(ws, "2026-01-02.md", "- second")
    assert note.read_bytes().decode("utf-16") == "- first\r\n\r\n- second\r\n"


@pytest.mark.parametrize(("setting", "shown"), [
    ('[longTermMemory]\ndbPath = "D:\\\\memdir"', "longTermMemory.dbPath = 'D:\\\\memdir'"),
    ('[memorySearch]\nstore.path = "C:\\\\memdir\\\\index.sqlite"',
     "memorySearch.store.path = 'C:\\\\memdir\\\\index.sqlite'"),
])
def test_a_windows_path_for_a_file_memdir_writes_is_refused(make_workspace, tmp_path: Path, setting: str, shown: str):
    """Taken as a relative path, ``D:\\memdir`` became a folder of that name in the workspace (or
    wherever memdir ran), where the state, the index or long-term memory was written, and synced
    back to Windows as a name it refuses."""
    ws = make_workspace({"MEMORY.md": "x\n"})
    (ws / "memdir.toml").write_text(setting + "\n")
    out = _cli(tmp_path / "state", ws, "index")
    assert out.returncode != 0
    assert f"{shown} in {ws / 'memdir.toml'} is a Windows path: " in out.stderr, out.stderr
    assert "give the path where that drive is mounted (under WSL: /mnt/" in out.stderr
    assert sorted(p.name for p in ws.iterdir()) == ["MEMORY.md", "memdir.toml"]


def test_a_file_extra_paths_names_that_is_not_markdown_is_named(make_workspace, tmp_path: Path):
    """``extraPaths = ["notes/Ideas.MD", "todo.txt"]``: both left out without a word."""
    ws = make_workspace({"MEMORY.md": "x\n", "notes/Ideas.MD": "The godwit.\n", "todo.txt": "The godwit.\n"})
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\nextraPaths = ["notes/Ideas.MD", "todo.txt"]\n')
    out = _cli(tmp_path / "state", ws, "index", "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["skipped"] == [
        {"path": "notes/Ideas.MD", "error": "not memory: only names ending in .md (lower case) are "
                                            "(rename it to notes/Ideas.md)"},
        {"path": "todo.txt", "error": "listed in extraPaths, but not memory: only .md files are"}]
