"""One bad file never blocks the rest: each is skipped, listed in ``status`` and retried next sync.

Real files on a real file system, the CLI as a subprocess: a name that is not UTF-8, a file the
indexing user cannot read, folders nested 1,100 deep, and a FIFO posing as a note.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env
from memdir.api import Memory
from memdir.workspace import PathError, discover, read_regular
from unprivileged import give_away, run_cli_as_user, shared_scratch

NONE = {"MEMDIR_PROVIDER": "none"}


def status(run_cli, ws: Path) -> dict:
    out = run_cli("status", "--json", "-w", str(ws), env=NONE)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def search_paths(run_cli, ws: Path, query: str) -> list[str]:
    out = run_cli("search", query, "--json", "-w", str(ws), env=NONE)
    assert out.returncode == 0, out.stderr
    return [r["path"] for r in json.loads(out.stdout)["results"]]


def test_a_file_name_that_is_not_utf8_is_skipped_and_named(make_workspace, run_cli):
    ws = make_workspace({"MEMORY.md": "# Prefs\nThe launch codename is Bluebird.\n",
                         "memory/2026-01-02.md": "Ordered a walnut desk for the studio.\n"})
    bad = os.path.join(os.fsencode(ws / "memory"), b"caf\xe9-notes.md")
    with open(bad, "wb") as fh:
        fh.write(b"Latin-1 named note about zeppelins.\n")

    index = run_cli("index", "-w", str(ws), env=NONE)
    assert index.returncode == 0, index.stderr
    assert "skipped memory/caf\\xe9-notes.md: file name is not valid UTF-8" in index.stderr
    st = status(run_cli, ws)
    assert st["files"] == 2 and st["scannedFiles"] == 2
    assert {"path": "memory/caf\\xe9-notes.md", "error": "file name is not valid UTF-8"} in [
        {k: s[k] for k in ("path", "error")} for s in st["skipped"]]
    assert search_paths(run_cli, ws, "walnut desk") == ["memory/2026-01-02.md"]
    assert search_paths(run_cli, ws, "Bluebird codename") == ["MEMORY.md"]
    text = run_cli("status", "-w", str(ws), env=NONE)
    assert "Skipped files" in text.stdout and "memory/caf\\xe9-notes.md" in text.stdout


def test_an_unreadable_changed_file_does_not_block_the_sync():
    """The indexing user cannot read one changed note: the others are indexed, it is listed and
    retried.  Under root the CLI runs as ``nobody`` (root reads a chmod 000 file regardless)."""
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        (ws / "memory").mkdir(parents=True)
        (ws / "memory" / "a.md").write_text("Alpha note: the boiler was serviced in March.\n")
        (ws / "memory" / "b.md").write_text("Beta note: renew the passport before June.\n")
        state.mkdir()
        give_away(root)
        first = run_cli_as_user(state, "index", "-w", str(ws), "--config", _none_config(root))
        assert first.returncode == 0, first.stderr

        (ws / "memory" / "a.md").write_text("Alpha note rewritten: the boiler leaks again.\n")
        (ws / "memory" / "c.md").write_text("Gamma note: the cat's vet is Dr Okafor.\n")
        give_away(ws)
        os.chmod(ws / "memory" / "a.md", 0)

        second = run_cli_as_user(state, "index", "-w", str(ws), "--config", _none_config(root))
        assert second.returncode == 0, second.stderr
        assert "skipped memory/a.md: Permission denied" in second.stderr
        st = json.loads(run_cli_as_user(state, "status", "--json", "-w", str(ws),
                                        "--config", _none_config(root)).stdout)
        assert [(s["path"], s["error"]) for s in st["skipped"]] == [("memory/a.md", "Permission denied")]
        found = json.loads(run_cli_as_user(state, "search", "Okafor vet", "--json", "-w", str(ws),
                                           "--config", _none_config(root)).stdout)
        assert [r["path"] for r in found["results"]] == ["memory/c.md"]
        # the old text of the unreadable note is kept, not deleted
        old = json.loads(run_cli_as_user(state, "search", "boiler serviced", "--json", "--no-sync", "-w", str(ws),
                                         "--config", _none_config(root)).stdout)
        assert [r["path"] for r in old["results"]] == ["memory/a.md"]

        os.chmod(ws / "memory" / "a.md", 0o644)  # fixed: the next sync picks it up
        third = run_cli_as_user(state, "index", "-w", str(ws), "--config", _none_config(root))
        assert third.returncode == 0 and "skipped" not in third.stderr
        st = json.loads(run_cli_as_user(state, "status", "--json", "-w", str(ws),
                                        "--config", _none_config(root)).stdout)
        assert st["skipped"] == [] and st["files"] == 3
        leaks = json.loads(run_cli_as_user(state, "search", "boiler leaks", "--json", "-w", str(ws),
                                           "--config", _none_config(root)).stdout)
        assert [r["path"] for r in leaks["results"]] == ["memory/a.md"]


def test_a_search_says_which_notes_it_may_not_read():
    """With MEMORY.md of mode 000 and memory/sub of mode 000 a search answered "No matches." without
    a word (only status and index named them), which an agent reads as nothing in memory."""
    with shared_scratch() as root:
        ws = root / "ws"
        (ws / "memory" / "sub").mkdir(parents=True)
        (ws / "MEMORY.md").write_text("- The vet is Dr Okafor.\n")
        (ws / "memory" / "sub" / "a.md").write_text("- Dr Okafor moved to Leeds.\n")
        (ws / "memory" / "b.md").write_text("- The boiler was serviced in March.\n")
        (root / "state").mkdir()
        args = ("--json", "-w", str(ws), "--config", _none_config(root))
        give_away(root)
        os.chmod(ws / "MEMORY.md", 0)
        os.chmod(ws / "memory" / "sub", 0)
        for _ in range(2):  # the sync that skips them, then one with nothing changed
            found = json.loads(run_cli_as_user(root / "state", "search", "Okafor", *args).stdout)
            assert found["results"] == []
            assert ("could not read MEMORY.md, memory/sub (permission denied): results may miss what is there "
                    "(memdir status lists the files skipped)") in found["warnings"] or \
                ("could not read memory/sub, MEMORY.md (permission denied): results may miss what is there "
                 "(memdir status lists the files skipped)") in found["warnings"], found["warnings"]
        os.chmod(ws / "MEMORY.md", 0o644)
        os.chmod(ws / "memory" / "sub", 0o755)
        found = json.loads(run_cli_as_user(root / "state", "search", "Okafor", *args).stdout)
        assert len(found["results"]) == 2 and not any("could not read" in w for w in found.get("warnings", []))


def _none_config(root: Path) -> str:
    cfg = root / "memdir.json"
    if not cfg.exists():
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        os.chmod(cfg, 0o644)
    return str(cfg)


def _deep_tree(base: Path, depth: int) -> Path:
    folder = base
    folder.mkdir(parents=True, exist_ok=True)
    for _ in range(depth):  # os.makedirs recurses once per level too
        folder = folder / "d"
        folder.mkdir()
    return folder


def _remove_deep(base: Path) -> None:
    """``shutil.rmtree`` recurses once per level: list the chain once, then remove it bottom-up."""
    chain = [base]
    while True:
        subs = [e.path for e in os.scandir(chain[-1]) if e.is_dir(follow_symlinks=False)]
        if not subs:
            break
        chain.append(Path(subs[0]))
    for folder in reversed(chain):
        for e in os.scandir(folder):
            if not e.is_dir(follow_symlinks=False):
                os.unlink(e.path)
        os.rmdir(folder)


def test_folders_nested_1100_deep_are_walked_without_recursion(make_workspace, run_cli):
    ws = make_workspace({"MEMORY.md": "# Top\nShallow note about hydrangeas.\n"})
    try:
        deepest = _deep_tree(ws / "memory", 1100)
        (deepest / "bottom.md").write_text("The deepest note mentions a narwhal.\n")
        st = status(run_cli, ws)
        assert st["scannedFiles"] == 2
        index = run_cli("index", "-w", str(ws), env=NONE)
        assert index.returncode == 0, index.stderr
        hits = search_paths(run_cli, ws, "narwhal")
        assert len(hits) == 1 and hits[0].startswith("memory/d/d/") and hits[0].endswith("/bottom.md")
        assert hits[0].count("/") == 1101
        assert status(run_cli, ws)["files"] == 2
    finally:
        _remove_deep(ws / "memory")


def test_a_fifo_is_refused_before_it_is_opened(make_workspace, run_cli):
    ws = make_workspace({"MEMORY.md": "# Prefs\nPrefers oolong tea.\n", "memory/ok.md": "Fixed the gutter.\n"})
    os.mkfifo(ws / "memory" / "x.md")
    os.mkfifo(ws / "memory.md")

    got = run_cli("get", "memory/x.md", "-w", str(ws), env=NONE, timeout=60)  # used to block forever
    assert got.returncode == 1 and "not a file: memory/x.md" in got.stderr and "FIFO" in got.stderr
    index = run_cli("index", "-w", str(ws), env=NONE, timeout=60)
    assert index.returncode == 0, index.stderr
    st = status(run_cli, ws)
    assert st["files"] == 2
    skipped = {s["path"]: s["error"] for s in st["skipped"]}
    assert skipped == {"memory.md": "a FIFO, not a regular file", "memory/x.md": "a FIFO, not a regular file"}
    assert search_paths(run_cli, ws, "oolong") == ["MEMORY.md"]


def test_read_regular_refuses_special_files_without_blocking(tmp_path: Path):
    fifo = tmp_path / "f.md"
    os.mkfifo(fifo)
    with pytest.raises(OSError, match="FIFO"):
        read_regular(fifo)
    with pytest.raises(OSError, match="directory"):
        read_regular(tmp_path)
    with pytest.raises(OSError, match="character device"):
        read_regular("/dev/null")
    link = tmp_path / "link.md"
    (tmp_path / "real.md").write_text("r")
    os.symlink(tmp_path / "real.md", link)
    with pytest.raises(OSError):
        read_regular(link)


def test_a_file_swapped_for_a_fifo_after_discovery_is_skipped_by_the_sync(make_workspace, keyword_config):
    ws = make_workspace({"memory/a.md": "Apple note.\n", "memory/b.md": "Banana note.\n"})
    with Memory(ws, config=keyword_config) as mem:
        real_list = mem.indexer.list_files

        def list_then_swap():
            found = real_list()
            (ws / "memory" / "a.md").unlink()
            os.mkfifo(ws / "memory" / "a.md")
            return found

        mem.indexer.list_files = list_then_swap
        report = mem.sync()
        assert report.indexed == 1
        assert report.skipped == [{"path": "memory/a.md", "error": "a FIFO, not a regular file"}]
        mem.indexer.list_files = real_list
        assert [r.path for r in mem.search("banana").results] == ["memory/b.md"]
        with pytest.raises(PathError, match="FIFO"):
            mem.get("memory/a.md")


def test_discovery_skips_vcs_and_dependency_folders(make_workspace, tmp_path: Path):
    ws = make_workspace({"memory/a.md": "a", "memory/.git/x.md": "git", "memory/node_modules/p/README.md": "npm",
                         "memory/sub/.venv/y.md": "venv", "memory/sub/keep.md": "k"})
    team = tmp_path / "team"
    (team / "node_modules").mkdir(parents=True)
    (team / "node_modules" / "z.md").write_text("z")
    (team / "t.md").write_text("t")
    assert [f.path for f in discover(ws, [team]).files] == ["memory/a.md", "memory/sub/keep.md", "../team/t.md"]


def test_get_as_a_subprocess_never_hangs_on_a_fifo_extra_path(make_workspace, state_dir, tmp_path: Path):
    """memory_get through an extraPaths folder: same refusal, and the process exits."""
    ws = make_workspace({"MEMORY.md": "m"})
    team = tmp_path / "team"
    team.mkdir()
    os.mkfifo(team / "pipe.md")
    cfg = tmp_path / "cfg.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "extraPaths": [str(team)]}}))
    out = subprocess.run([sys.executable, "-m", "memdir", "get", str(team / "pipe.md"), "-w", str(ws),
                          "--config", str(cfg)], capture_output=True, text=True, timeout=60,
                         env=cli_env(state_dir))
    assert out.returncode == 1 and "FIFO" in out.stderr


def test_a_note_too_large_to_read_is_skipped_and_named(make_workspace, run_cli, keyword_config):
    """A sparse 10 GB ``memory/huge.md`` was read whole into memory by the indexer and by
    ``memory_get`` (and one appended to faster than it was read never finished).  Notes over
    64 MiB are skipped by the index, refused by ``memory_get``, each with the reason."""
    from memdir.reading import MAX_NOTE_BYTES, NoteTooLarge

    ws = make_workspace({"MEMORY.md": "- the kiwi plan\n"})
    huge = ws / "memory" / "huge.md"
    huge.parent.mkdir()
    with open(huge, "wb") as fh:
        fh.truncate(10 << 30)  # sparse: no disk used
    out = run_cli("-w", str(ws), "index", "--json", env={"MEMDIR_PROVIDER": "none"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["indexed"] == 1
    assert report["skipped"] == [{"path": "memory/huge.md",
                                  "error": "10,240 MiB, larger than the 64 MiB a note may be"}]
    got = run_cli("-w", str(ws), "get", "memory/huge.md", env={"MEMDIR_PROVIDER": "none"})
    assert got.returncode == 1 and "larger than the 64 MiB a note may be" in got.stderr, got.stderr
    assert huge.stat().st_size == 10 << 30

    # a file appended to faster than it is read: os.read never says EOF
    grown = ws / "memory" / "grown.md"
    grown.write_bytes(b"x" * 1024)
    reads = iter([b"x" * (1 << 20)] * ((MAX_NOTE_BYTES >> 20) + 2))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(os, "read", lambda fd, n: next(reads, b""))
        with pytest.raises(NoteTooLarge, match="grew past the 64 MiB"):
            read_regular(grown)


def test_a_session_transcript_over_the_note_limit_stays_readable(make_workspace):
    """The note size limit is for Markdown notes: a long session transcript (tool output, pasted
    files) is read by memory_get as the indexer reads it, whatever its size."""
    from memdir.reading import MAX_NOTE_BYTES

    ws = make_workspace({"MEMORY.md": "- base\n"})
    cfg = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                            "experimental": {"sessionMemory": True}}}
    with Memory(ws, config=cfg) as mem:
        folder = mem.settings.sessions_dir
        folder.mkdir(parents=True)
        message = {"type": "message", "timestamp": 1_700_000_000_000, "message": {"role": "user", "content": "kiwi"}}
        with open(folder / "a.jsonl", "w") as fh:
            fh.write(json.dumps(message) + "\n")
            fh.write(json.dumps({"type": "custom", "pad": "x" * MAX_NOTE_BYTES}) + "\n")
        assert mem.get("sessions/a.jsonl", from_line=1, lines=1).text == "User: kiwi"


def test_a_folder_swapped_for_a_symlink_after_discovery_brings_nothing_into_the_index(
        make_workspace, keyword_config, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Discovery skips symlinks, but the indexer then opened each listed file by its path: a folder
    replaced by a symlink to outside between the listing and the read had the outside file
    indexed, and searchable.  Each file is now read from its root, no folder followed."""
    import shutil

    import memdir.sync as sync_mod

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "x.md").write_text("- walrus TOP SECRET\n")
    ws = make_workspace({"MEMORY.md": "- base walrus\n", "memory/sub/x.md": "- walrus inside\n"})
    listed = sync_mod.discover

    def list_then_swap(*args, **kwargs):
        found = listed(*args, **kwargs)
        if (ws / "memory" / "sub").is_dir() and not (ws / "memory" / "sub").is_symlink():
            shutil.rmtree(ws / "memory" / "sub")
            os.symlink(outside, ws / "memory" / "sub")
        return found

    monkeypatch.setattr(sync_mod, "discover", list_then_swap)
    with Memory(ws, config=keyword_config) as mem:
        report = mem.sync()
        assert report.skipped == [{"path": "memory/sub/x.md", "error": "memory/sub is a symlink (not followed)"}]
        texts = [r.snippet for r in mem.search("walrus", max_results=10).results]
    assert texts and not any("SECRET" in t for t in texts), texts
