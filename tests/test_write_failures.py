"""Writes that fail part-way (disk full, a file size limit, a read-only folder), as real subprocesses.

A full disk is simulated with ``RLIMIT_FSIZE``: Python ignores SIGXFSZ, so a write past the limit
stops short and the next one fails with EFBIG, exactly where ENOSPC would strike.
"""

from __future__ import annotations

import json
import resource
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import ReadOnlyFolder, cli_env

KEYWORD = json.dumps({"memorySearch": {"provider": "none"}})


def _limited(limit: int) -> Callable[[], None]:
    """A ``preexec_fn`` capping the size of any file the child writes."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


def _memdir(state_dir: Path, *args: str, limit: int | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "memdir", *args], capture_output=True, text=True, timeout=120,
                          env=cli_env(state_dir), preexec_fn=None if limit is None else _limited(limit))


def test_append_on_a_full_disk_leaves_the_daily_log_as_it_was(make_workspace, state_dir: Path) -> None:
    """The entry used to be written up to the limit and left there: a half line at the log's end,
    which the next append then continued."""
    ws = make_workspace({"memdir.json": KEYWORD})
    first = _memdir(state_dir, "-w", str(ws), "append", "kangaroo line before the disk filled")
    assert first.returncode == 0, first.stderr
    (log,) = (ws / "memory").glob("*.md")
    before = log.read_bytes()
    out = _memdir(state_dir, "-w", str(ws), "append", "x" * 20_000 + " platypus", limit=len(before) + 100)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "nothing was written" in lines[0] and log.name in lines[0], out.stderr
    assert "Traceback" not in out.stderr
    assert log.read_bytes() == before
    again = _memdir(state_dir, "-w", str(ws), "append", "wombat line after space was freed")
    assert again.returncode == 0, again.stderr
    after = log.read_bytes()
    assert after.startswith(before) and after[len(before):] == b"wombat line after space was freed\n"


def test_session_hook_on_a_full_disk_keeps_no_partial_file(tmp_path: Path, state_dir: Path) -> None:
    """A dated session file cut short used to stay (a truncated memory), and the next run wrote
    ``-2.md`` beside it."""
    ws = tmp_path / "ws"
    transcript = tmp_path / "s" / "abc.jsonl"
    transcript.parent.mkdir()
    records = ({"type": "message", "message": {"role": "user", "content": f"walrus {i} " * 40}} for i in range(15))
    transcript.write_text("".join(json.dumps(r) + "\n" for r in records))
    script = textwrap.dedent(f"""
        from datetime import datetime, UTC
        from memdir.sessions.hook import run_session_memory_hook
        res = run_session_memory_hook(action="new", session_key="agent:main:main", workspace={str(ws)!r},
                                      previous_entry={{"sessionId": "abc", "sessionFile": {str(transcript)!r}}},
                                      now=datetime(2026, 3, 4, 5, 6, tzinfo=UTC))
        print(res.path or "", "|", res.error or "")
    """)

    def hook(limit: int | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                              env=cli_env(state_dir), preexec_fn=None if limit is None else _limited(limit))

    failed = hook(1000)
    assert failed.returncode == 0, failed.stderr
    assert "File too large" in failed.stdout and "nothing was kept" in failed.stdout
    assert list((ws / "memory").iterdir()) == []
    ok = hook(None)
    path = Path(ok.stdout.split("|")[0].strip())
    assert path.name == "2026-03-04-0506.md", ok.stdout
    assert "walrus 14" in path.read_text()
    assert sorted(p.name for p in (ws / "memory").iterdir()) == ["2026-03-04-0506.md"]


def test_a_search_on_a_full_disk_answers_from_the_index_as_it_is(make_workspace, state_dir: Path) -> None:
    """With no room for SQLite's WAL index (``-shm``), opening the index used to fail ("cannot open
    the index: disk I/O error"), so search, status and the MCP server had nothing to serve although
    the index was whole; the index is now opened read-only, as in a read-only folder."""
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- the cassowary lives in the north\n"})
    built = _memdir(state_dir, "-w", str(ws), "index")
    assert built.returncode == 0, built.stderr
    (index,) = (state_dir / "memory").glob("*.sqlite")
    assert not Path(f"{index}-shm").exists()  # closed cleanly: the next open must create it
    before = index.read_bytes()
    found = _memdir(state_dir, "-w", str(ws), "search", "cassowary", "--json", limit=1000)
    assert found.returncode == 0, found.stderr
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["MEMORY.md"]
    status = _memdir(state_dir, "-w", str(ws), "status", "--json", limit=1000)
    assert status.returncode == 0, status.stderr
    assert json.loads(status.stdout)["files"] == 1
    said = _memdir(state_dir, "-w", str(ws), "status", limit=1000).stdout  # it said "disk I/O error" and no more
    assert "Read-only: disk I/O error (is the disk full, or a file size limit reached?); searches answer" in said
    refused = _memdir(state_dir, "-w", str(ws), "index", "--force", limit=1000)
    assert refused.returncode == 1 and len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert index.read_bytes() == before
    again = _memdir(state_dir, "-w", str(ws), "status", "--deep", "--json")
    assert json.loads(again.stdout)["issues"] == [] and json.loads(again.stdout)["dirty"] is False


def test_a_long_running_host_writes_again_once_the_disk_has_room(make_workspace, state_dir: Path) -> None:
    """A host (MCP server, agent) that opened the index read-only on a full disk used to stay
    read-only until restarted: notes written after the disk was freed were never indexed."""
    ws = make_workspace({"MEMORY.md": "- the cassowary lives in the north\n"})
    script = textwrap.dedent(f"""
        import resource, time
        from pathlib import Path
        from memdir.api import Memory
        from memdir.stores import sqlite_lifecycle
        sqlite_lifecycle.SPACE_RETRY_SECONDS = 0.0
        ws = Path({str(ws)!r})
        cfg = {{"memorySearch": {{"provider": "none"}}}}
        with Memory(ws, config=cfg, state_dir={str(state_dir)!r}) as mem:
            mem.sync()
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))  # the disk fills up
        with Memory(ws, config=cfg, state_dir={str(state_dir)!r}) as mem:
            print("full", [r.path for r in mem.search("cassowary").results], mem.store.readonly)
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            (ws / "memory").mkdir()
            (ws / "memory" / "2026-01-02.md").write_text("- a bilby was seen at dusk\\n")
            print("freed", [r.path for r in mem.search("bilby").results], mem.store.readonly)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=cli_env(state_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["full ['MEMORY.md'] True", "freed ['memory/2026-01-02.md'] False"], out.stdout


def test_an_index_that_cannot_be_written_says_the_disk_may_be_full(make_workspace, state_dir: Path) -> None:
    """SQLite reports a write past the disk's end as "disk I/O error" and nothing more: the one
    line names the usual cause, and with ``--json`` the error object says it too."""
    notes = {f"memory/2026-01-{d:02d}.md": f"- note {d} " + "quokka " * 400 + "\n" for d in range(1, 29)}
    ws = make_workspace({"memdir.json": KEYWORD, **notes})
    out = _memdir(state_dir, "-w", str(ws), "index", "--json", limit=20_000)
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "is the disk full" in lines[0], out.stderr
    assert "is the disk full" in json.loads(out.stdout)["error"]["message"]
    assert _memdir(state_dir, "-w", str(ws), "index").returncode == 0  # once there is room


def test_a_dated_memory_killed_mid_write_leaves_no_cut_short_file(tmp_path: Path) -> None:
    """The session hook's dated file appears whole or not at all: a process killed (SIGKILL)
    while writing it used to leave a cut-short ``<stem>.md``, and the next run wrote ``-2.md``
    beside it.  Now only a hidden temporary file is left, which the next create removes."""
    import signal
    import time

    ws = tmp_path / "ws"
    ws.mkdir()
    script = textwrap.dedent(f"""
        import os, sys, time
        import memdir.memfiles as mf
        real = mf._write_all
        def slow(fd, data):  # half the text, then stall until killed
            real(fd, data[: len(data) // 2])
            print("half", flush=True)
            time.sleep(60)
            real(fd, data[len(data) // 2 :])
        mf._write_all = slow
        mf.create_memory_file({str(ws)!r}, "2026-03-04-0506", "walrus " * 5000)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "half"
    proc.send_signal(signal.SIGKILL)
    proc.wait(30)
    left = sorted(p.name for p in (ws / "memory").iterdir())
    assert len(left) == 1 and left[0].startswith(f".2026-03-04-0506.md.tmp-{proc.pid}-"), left  # only the hidden temp
    time.sleep(0.05)
    from memdir.memfiles import create_memory_file

    path = create_memory_file(ws, "2026-03-04-0506", "walrus " * 5000)
    assert path.name == "2026-03-04-0506.md" and path.read_text() == "walrus " * 5000
    assert sorted(p.name for p in (ws / "memory").iterdir()) == ["2026-03-04-0506.md"]  # the stale temp is gone
    again = create_memory_file(ws, "2026-03-04-0506", "second")
    assert again.name == "2026-03-04-0506-2.md" and again.read_text() == "second"  # never overwrites


def test_a_watching_host_started_on_a_full_disk_indexes_once_there_is_room(make_workspace, state_dir: Path) -> None:
    """A host started on a full disk used to keep its watcher off, and a watcher whose sync failed
    waited for the next edit: a note written while the disk was full stayed unindexed after the
    disk was freed.  Now the watcher runs and tries a failed sync again on its own."""
    ws = make_workspace({"MEMORY.md": "- the cassowary lives in the north\n"})
    script = textwrap.dedent(f"""
        import resource, time
        from pathlib import Path
        from memdir import watch
        from memdir.api import Memory
        from memdir.stores import sqlite_lifecycle
        sqlite_lifecycle.SPACE_RETRY_SECONDS = 0.0
        watch.RETRY_FIRST_SECONDS = 0.2
        ws = Path({str(ws)!r})
        cfg = {{"memorySearch": {{"provider": "none", "sync": {{"watch": True, "watchDebounceMs": 50}}}}}}
        with Memory(ws, config=cfg, state_dir={str(state_dir)!r}) as mem:
            mem.sync()
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))  # the disk fills up
        with Memory(ws, config=cfg, state_dir={str(state_dir)!r}) as mem:
            watcher = mem.start_live_sync()
            print("watching", watcher is not None and watcher.ready.wait(10), mem.store.readonly)
            (ws / "memory").mkdir()
            (ws / "memory" / "2026-01-02.md").write_text("- a bilby was seen at dusk\\n")
            deadline = time.monotonic() + 10
            while watcher.failures == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            print("failed", watcher.failures > 0, watcher.state()["lastError"] is not None)
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            deadline = time.monotonic() + 20
            while (watcher.syncs == 0 or mem.status()["dirty"]) and time.monotonic() < deadline:
                time.sleep(0.1)
            print("freed", watcher.syncs > 0, mem.status()["dirty"], mem.store.readonly)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=cli_env(state_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["watching True True", "failed True True", "freed True False False"], \
        (out.stdout, out.stderr)
    found = _memdir(state_dir, "-w", str(ws), "search", "bilby", "--no-sync", "--json")
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-01-02.md"], found.stdout


def test_a_transcript_record_cut_short_by_a_full_disk_is_not_left_half_written(tmp_path: Path) -> None:
    """A chat turn whose transcript write hit a full disk left the record's first bytes as a torn
    last line (and said only "[Errno 27] File too large"); the file is cut back and named."""
    transcript = tmp_path / "abc.jsonl"
    script = textwrap.dedent(f"""
        import sys
        from memdir.sessions.store import append_record
        record = {{"type": "message", "message": {{"role": "user", "content": sys.argv[1]}}}}
        try:
            append_record({str(transcript)!r}, record)
        except OSError as exc:
            print("failed:", exc)
    """)

    def append(text: str, limit: int | None) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-c", script, text], capture_output=True, text=True, timeout=60,
                              preexec_fn=None if limit is None else _limited(limit))

    assert append("the first message", None).stdout == ""
    before = transcript.read_bytes()
    cut = append("walrus " * 2000, len(before) + 300)
    assert cut.returncode == 0, cut.stderr
    assert "File too large" in cut.stdout and str(transcript) in cut.stdout, cut.stdout
    assert transcript.read_bytes() == before
    assert append("the third message", None).stdout == ""
    lines = transcript.read_bytes().splitlines()
    assert len(lines) == 2 and all(json.loads(line)["type"] == "message" for line in lines)


def test_searches_on_a_full_disk_leave_no_settings_temp_files(make_workspace, state_dir: Path) -> None:
    """Each search that could not save its settings snapshot (a new pid each time) left its
    cut-short ``settings-….json.<pid>.tmp`` in the state folder's cache, removed only once a save worked."""
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- the cassowary lives in the north\n"})
    assert _memdir(state_dir, "-w", str(ws), "index").returncode == 0
    for _ in range(2):
        found = _memdir(state_dir, "-w", str(ws), "search", "cassowary", "--json", limit=200)
        assert found.returncode == 0, found.stderr
        assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["MEMORY.md"]
    assert [p.name for p in (state_dir / "cache").iterdir()] == []
    assert _memdir(state_dir, "-w", str(ws), "search", "cassowary").returncode == 0  # with room: saved
    assert [p.suffix for p in (state_dir / "cache").iterdir()] == [".json"]


def test_an_export_on_a_full_disk_names_the_file_it_could_not_write(tmp_path: Path, make_workspace,
                                                                     state_dir: Path) -> None:
    """'memdir ltm export --out' on a full disk said only "[Errno 27] File too large" (and a chat
    started on one "[Errno 28] No space left on device"): which file, it did not say."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- x\n"})
    stored = _memdir(state_dir, "-w", str(ws), "ltm", "store", "The deploy server is named kestrel " + "word " * 100)
    assert stored.returncode == 0, stored.stderr
    out = tmp_path / "export" / "ltm.md"
    out.parent.mkdir()
    failed = _memdir(state_dir, "-w", str(ws), "ltm", "export", "--out", str(out), limit=300)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == [f"memdir ltm: [Errno 27] File too large: '{out}'"], failed.stderr
    assert list(out.parent.iterdir()) == []  # nothing half-written, no temporary file


@pytest.mark.parametrize("args", [("index",), ("index", "--force")])
def test_an_index_that_cannot_be_opened_for_want_of_file_descriptors_says_so(make_workspace, state_dir: Path,
                                                                             args: tuple[str, ...]) -> None:
    """A process with (next to) no file descriptor left (a long-running host with many files open, a
    low ``ulimit -n``) failed with SQLite's "unable to open database file", read as a permissions
    problem; the line names the cause."""
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- the cassowary lives in the north\n"})
    assert _memdir(state_dir, "-w", str(ws), "index").returncode == 0
    script = textwrap.dedent("""
        import os, resource, sys
        from memdir.cli import main
        import memdir.api, memdir.config, memdir.stores.sqlite, memdir.sync, memdir.watch  # before they run out
        resource.setrlimit(resource.RLIMIT_NOFILE, (256, 256))  # (a limit of a million would take a while to fill)
        hog = []
        try:
            while True:
                hog.append(os.open(os.devnull, os.O_RDONLY))
        except OSError:
            pass
        os.close(hog.pop())  # one left
        sys.exit(main(sys.argv[1:]))
    """)
    out = subprocess.run([sys.executable, "-c", script, "-w", str(ws), *args], capture_output=True, text=True,
                         timeout=60, env=cli_env(state_dir))
    assert out.returncode == 1
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and "too many open files" in lines[0].lower(), out.stderr
    assert _memdir(state_dir, "-w", str(ws), "search", "cassowary").returncode == 0


def test_a_model_that_does_not_fit_under_a_memory_limit_is_said_to_be_out_of_memory() -> None:
    """Loading the local model under a memory limit (``ulimit -v``, a container's) failed with
    "could not load the ONNX model … (is it a valid .onnx export of a text encoder?): … std::bad_alloc",
    which sent people to re-download a model that was fine."""
    script = textwrap.dedent("""
        import resource
        import numpy, onnxruntime, tokenizers  # loaded first: the limit is for the model itself
        from memdir.embeddings.local import LocalEmbeddingProvider
        with open("/proc/self/status") as fh:
            size = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (160 << 20), resource.RLIM_INFINITY))
        try:
            LocalEmbeddingProvider().embed_query("hello")
            print("loaded")
        except Exception as exc:
            print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    if "could not load the ONNX model" not in out.stdout:  # loaded, or another allocation failed first
        pytest.skip(f"the model's load did not fail for want of memory here: {out.stdout or out.stderr}"[:300])
    assert "out of memory while loading it" in out.stdout and "is it a valid .onnx" not in out.stdout, out.stdout


def test_a_sync_on_a_full_disk_says_the_disk_may_be_full(make_workspace, state_dir: Path) -> None:
    """An index opened read-only for want of room refused each sync with SQLite's bare "disk I/O
    error" (the watcher printed it every retry, the MCP server and the API raised it); only the CLI's
    last line named the usual cause."""
    ws = make_workspace({"MEMORY.md": "- the cassowary lives in the north\n"})
    script = textwrap.dedent(f"""
        import resource
        from memdir.api import Memory
        cfg = {{"memorySearch": {{"provider": "none"}}}}
        with Memory({str(ws)!r}, config=cfg, state_dir={str(state_dir)!r}) as mem:
            mem.sync()
        resource.setrlimit(resource.RLIMIT_FSIZE, (1000, resource.RLIM_INFINITY))  # the disk fills up
        with Memory({str(ws)!r}, config=cfg, state_dir={str(state_dir)!r}) as mem:
            try:
                mem.sync(force=True)
            except Exception as exc:
                print(exc)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=cli_env(state_dir))
    assert out.returncode == 0, out.stderr
    assert "cannot be updated: disk I/O error (is the disk full, or a file size limit reached?)" in out.stdout, \
        out.stdout


def test_a_first_index_on_a_full_disk_names_the_index(make_workspace, state_dir: Path) -> None:
    """The first 'memdir index' on a full disk failed while making the new index's tables with
    "Memory index failed: disk I/O error", naming no file."""
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- the cassowary lives in the north\n"})
    out = _memdir(state_dir, "-w", str(ws), "index", limit=60_000)
    assert out.returncode == 1
    (index,) = (state_dir / "memory").glob("*.sqlite")
    assert out.stderr.strip().splitlines() == [
        f"Memory index failed: cannot create the index {index}: disk I/O error "
        "(is the disk full, or a file size limit reached?)"], out.stderr
    assert _memdir(state_dir, "-w", str(ws), "index").returncode == 0  # once there is room
    found = _memdir(state_dir, "-w", str(ws), "search", "cassowary", "--json")
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["MEMORY.md"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", [("index",), ("search", "cassowary"), ("status", "--json")])
def test_output_to_a_full_disk_is_not_said_to_be_the_commands_failure(make_workspace, state_dir: Path,
                                                                      args: tuple[str, ...]) -> None:
    """'memdir index > out.txt' on a full disk said "Memory index failed: [Errno 28] No space left on
    device" for an index that was updated, read as a full state folder; it says the output was lost."""
    ws = make_workspace({"memdir.json": KEYWORD, "MEMORY.md": "- the cassowary lives in the north\n"})
    with open("/dev/full", "w") as full:
        out = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), *args], stdout=full,
                             stderr=subprocess.PIPE, text=True, timeout=120, env=cli_env(state_dir))
    assert out.returncode == 1
    assert out.stderr.strip().splitlines()[-1] == (
        "memdir: could not write the output to stdout: No space left on device"), out.stderr
    assert "failed" not in out.stderr
    if args[0] == "index":  # it did its work
        assert json.loads(_memdir(state_dir, "-w", str(ws), "status", "--json").stdout)["files"] == 1


def test_a_search_that_could_not_open_the_notes_says_so(make_workspace, state_dir: Path) -> None:
    """A long-running host out of file descriptors answered a search for a note written just before
    it with no results, not stale and without a word (memory/ could not be listed, or the note not
    opened), which an agent reads as nothing in memory; once descriptors are free it is found."""
    ws = make_workspace({"MEMORY.md": "- the cassowary lives in the north\n"})
    script = textwrap.dedent(f"""
        import os, resource
        from pathlib import Path
        from memdir.api import Memory
        resource.setrlimit(resource.RLIMIT_NOFILE, (128, 128))
        ws = Path({str(ws)!r})
        with Memory(ws, config={{"memorySearch": {{"provider": "none"}}}}, state_dir={str(state_dir)!r}) as mem:
            mem.search("cassowary")
            (ws / "memory").mkdir()
            (ws / "memory" / "2026-03-01.md").write_text("- an emu was seen at the gate\\n")
            hog = []
            try:
                while True:
                    hog.append(os.open(os.devnull, os.O_RDONLY))
            except OSError:
                pass
            for _ in range(3):  # none left, then one, then two
                r = mem.search("emu")
                print(r.results == [], r.stale, any("too many open files" in w for w in r.warnings))
                os.close(hog.pop())
            for fd in hog:
                os.close(fd)
            print([x.path for x in mem.search("emu").results])
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env=cli_env(state_dir))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["True True True"] * 3 + ["['memory/2026-03-01.md']"], out.stdout


@pytest.mark.parametrize("headroom_mb", [5, 15])
def test_an_index_out_of_memory_says_so(make_workspace, state_dir: Path, headroom_mb: int) -> None:
    """A large note indexed under a memory limit failed with "Memory index failed: " and nothing
    more (a MemoryError has no message), or was skipped as "MemoryError: "; both say out of memory."""
    words = ("alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta")
    text = "".join(" ".join(words[(i + j) % 8] for j in range(12)) + f" {i}\n" for i in range(60_000))
    ws = make_workspace({"memdir.json": KEYWORD, "memory/2026-01-01.md": text})
    script = textwrap.dedent("""
        import resource, sys
        from memdir.cli import main
        import memdir.api, memdir.build_worker, memdir.chunking, memdir.config, memdir.stores.sqlite, memdir.sync
        with open("/proc/self/status") as fh:
            size = next(int(line.split()[1]) for line in fh if line.startswith("VmSize:")) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (int(sys.argv[1]) << 20), resource.RLIM_INFINITY))
        sys.exit(main(sys.argv[2:]))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(headroom_mb), "-w", str(ws), "index"],
                         capture_output=True, text=True, timeout=120, env=cli_env(state_dir))
    if out.returncode == 0 and "skipped" not in out.stderr:
        pytest.skip("the note was indexed within this limit here")
    assert "out of memory (is a memory limit, ulimit -v or a container's, too low for this?)" in out.stderr, out.stderr
    assert "Traceback" not in out.stderr and "MemoryError" not in out.stderr


def test_writes_into_a_read_only_workspace_name_the_folder_and_the_cause(tmp_path: Path, state_dir: Path) -> None:
    """A read-only workspace (a container's ro mount, ``chmod -R a-w``) failed an append with
    Python's bare "[Errno 13] Permission denied: '<ws>/memory'" when memory/ was still to be made
    or could not be opened, and the session hook named its temporary file
    ("…: '.2026-05-01-1200.md.tmp-…'"); each says which folder or file and why, nothing written."""
    import os

    from memdir.memfiles import MemoryFileError, append_memory_file, create_memory_file
    from memdir.sessions.hook import run_session_memory_hook

    folder = ReadOnlyFolder(tmp_path / "ro")
    root = folder.root
    bare, dated = root / "bare", root / "dated"
    try:
        for ws in (bare, dated):
            ws.mkdir()
            (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        (dated / "memory").mkdir()
        folder.lock(bare, dated, dated / "memory")

        with pytest.raises(MemoryFileError, match=rf"^cannot create memory/ in {bare}: (Read-only|Permission)"):
            append_memory_file(bare, "2026-05-01.md", "a note")
        hook = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=bare,
                                       previous_entry=None)
        assert hook is not None and hook.error is not None and hook.error.startswith(f"cannot create memory/ in {bare}")
        hook = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=root / "new",
                                       previous_entry=None)
        assert hook is not None and hook.error is not None
        assert hook.error.startswith(f"cannot create the workspace {root / 'new'}: "), hook.error
        with pytest.raises(MemoryFileError, match=r"^cannot create memory/2026-05-01-1200\.md: "):
            create_memory_file(dated, "2026-05-01-1200", "a session")
        out = _memdir(state_dir, "-w", str(bare), "append", "a note")
        assert out.returncode == 1 and out.stderr.startswith(f"memdir: cannot create memory/ in {bare}: "), out.stderr
        assert "Errno" not in out.stderr
        assert not (bare / "memory").exists() and os.listdir(dated / "memory") == []
    finally:
        folder.release()


def test_an_append_into_a_memory_folder_that_cannot_be_opened_names_it() -> None:
    """``memory/`` of mode 000 failed an append with Python's bare "[Errno 13] Permission denied"."""
    from unprivileged import give_away, run_cli_as_user, shared_scratch

    with shared_scratch() as root:
        ws = root / "ws"
        (ws / "memory").mkdir(parents=True)
        (root / "state").mkdir()
        give_away(root)
        (ws / "memory").chmod(0)
        out = run_cli_as_user(root / "state", "-w", str(ws), "append", "a note")
        assert out.returncode == 1 and out.stderr == f"memdir: cannot open {ws / 'memory'}: Permission denied\n"


def test_an_append_after_sudo_memdir_append_names_the_owner(state_dir: Path) -> None:
    """After one ``sudo memdir append`` (memory/ and today's log made by root) every later append of
    the user failed with "Permission denied" alone, naming neither the owner nor the fix."""
    import os

    from unprivileged import give_away, run_cli_as_user, shared_scratch

    if os.geteuid() != 0:
        pytest.skip("needs root to leave files owned by another user")
    with shared_scratch() as root:
        ws = root / "ws"
        ws.mkdir()
        (root / "state").mkdir()
        give_away(root)
        assert _memdir(state_dir, "-w", str(ws), "append", "--date", "2026-05-01", "a note as root").returncode == 0
        log = ws / "memory" / "2026-05-01.md"
        before = log.read_bytes()
        for day, what in (("2026-05-01", "memory/2026-05-01.md"), ("2026-05-02", "memory/")):
            out = run_cli_as_user(root / "state", "-w", str(ws), "append", "--date", day, "a note as the user")
            assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
            assert f"Permission denied ({what} belongs to root (uid 0), not to this user, nobody (uid 65534)" \
                in out.stderr and "chown" in out.stderr, out.stderr
        assert log.read_bytes() == before and os.listdir(ws / "memory") == ["2026-05-01.md"]


def test_an_export_into_a_read_only_folder_names_the_file_not_a_temporary_one(tmp_path: Path, make_workspace,
                                                                             state_dir: Path) -> None:
    """'memdir ltm export --out' into a folder it may not write named the temporary file it could not
    make: "[Errno 13] Permission denied: '/…/.ltm.md.4242-hbsgimf0.tmp'"."""
    import os

    from memdir.atomic_write import replace_file

    folder = tmp_path / "ro"
    folder.mkdir()
    mounted = os.geteuid() == 0  # root writes a chmod a-w folder: it takes a read-only mount
    if mounted and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,ro", "tmpfs", str(folder)],
                                  capture_output=True).returncode != 0:
        pytest.skip("root, and cannot mount a small tmpfs here")
    if not mounted:
        folder.chmod(0o555)
    try:
        with pytest.raises(OSError) as caught:
            replace_file(folder / "ltm.md", b"- a memory\n", mode=0o666)
        assert caught.value.filename == str(folder / "ltm.md") and ".tmp" not in str(caught.value)
    finally:
        if mounted:
            subprocess.run(["umount", str(folder)], capture_output=True)
        else:
            folder.chmod(0o755)
