"""The environments users really run memdir in: a read-only home, odd locales and encodings,
streams that are pipes or closed, interpreter flags.  Each runs the real CLI in a subprocess with
that environment set.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import SRC, cli_env, python_child
from unprivileged import give_away, run_cli_as_user, shared_scratch

KEYWORD = json.dumps({"memorySearch": {"provider": "none"}})


def test_a_state_folder_that_cannot_be_made_or_written_is_named_as_such():
    """With a read-only ``$HOME`` (``~/.memdir`` cannot be made) every command said "its folder …
    was removed while it was being opened (was memdir's state folder deleted?)"; with a state
    folder of another user's, only "unable to open database file".  Both now say what is wrong
    and where to point memdir instead."""
    with shared_scratch() as root:
        ws = root / "ws"
        ws.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        (root / "memdir.json").write_text(KEYWORD)
        give_away(ws)
        (root / "home").mkdir(mode=0o555)  # stays root's: read-only for the user
        (root / "theirs" / "memory").mkdir(parents=True)
        if os.geteuid() != 0:
            os.chmod(root / "home", 0o555)
            os.chmod(root / "theirs" / "memory", 0o555)
        config = ["-w", str(ws), "--config", str(root / "memdir.json")]

        home_state = root / "home" / ".memdir"
        out = run_cli_as_user(home_state, "search", "otter", *config)
        assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
        assert f"cannot create {home_state}: Permission denied" in out.stderr
        assert "--state-dir" in out.stderr and "was removed" not in out.stderr

        out = run_cli_as_user(root / "theirs", "index", *config, "--json")
        assert out.returncode == 1, out.stderr
        error = json.loads(out.stdout)["error"]
        assert f"its folder {root / 'theirs' / 'memory'} is not writable" in error["message"]
        assert "--state-dir" in error["message"]


def test_a_state_folder_or_workspace_that_cannot_be_entered_is_named_with_the_fix():
    """A state folder left by 'sudo memdir index' under root's umask 077 (``~/.memdir`` 0700, root's),
    or one's own folder of mode 000, failed every command with Python's bare "[Errno 13] Permission
    denied: '<folder>/memdir.toml'" (looking for a config file there), naming neither the folder
    nor the fix; a workspace of mode 000 the same."""
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        give_away(root)
        cases = [(state, "state folder", f"this user cannot enter its own folder {state} (mode 0): chmod u+rwx it"),
                 (ws, "workspace", f"this user cannot enter its own folder {ws} (mode 0): chmod u+rwx it")]
        if os.geteuid() == 0:
            cases.append((state, "state folder", f"{state} belongs to root (uid 0) and this user, nobody (uid "
                                                 "65534), cannot enter it: run memdir as that user, or give the "
                                                 "folder to this one (chown -R)"))
        for i, (folder, what, why) in enumerate(cases):
            folder.chmod(0)
            if i == 2:
                os.chown(folder, 0, 0)
                folder.chmod(0o700)
            try:
                out = run_cli_as_user(state, "search", "otter", "-w", str(ws))
            finally:
                folder.chmod(0o755)
                give_away(folder)
            assert out.returncode == 1, out.stderr
            assert out.stderr == f"memdir: configuration error: cannot look for a config file in the {what}: {why}\n"


def test_a_home_that_cannot_be_written_gets_no_onnxruntime_warning():
    """Run as a user whose ``$HOME`` cannot be written (a container's bare uid), every command that
    loaded the embedded model printed onnxruntime's coloured "Failed to persist telemetry device
    ID" warning on stderr: onnxruntime writes a telemetry id under ``~/.cache`` when imported."""
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (ws / "MEMORY.md").write_text("- The otter eats fish.\n")
        give_away(ws)
        give_away(state)
        # run_cli_as_user sets HOME to state's parent: root's folder, which the user cannot write
        out = run_cli_as_user(state, "search", "what does the otter eat?", "-w", str(ws), "--json")
        assert out.returncode == 0, out.stderr
        assert json.loads(out.stdout)["mode"] == "hybrid"  # the embedded model ran
        assert "onnxruntime" not in out.stderr and "\x1b[" not in out.stderr, out.stderr


#: Python with an ASCII file-system and stdio encoding: a C locale with UTF-8 mode turned off.
ASCII_PYTHON = {"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0", "MEMDIR_PROVIDER": "none"}


def test_a_non_ascii_file_name_is_indexed_and_read_when_python_decodes_names_as_ascii(make_workspace, run_cli,
                                                                                      state_dir: Path):
    """Under ``LC_ALL=C PYTHONUTF8=0`` ``memory/projets/café.md`` was skipped as "file name is not
    valid UTF-8" (it is: Python only saw it as surrogate escapes), so its notes were never found,
    and ``get`` of it failed with "'ascii' codec can't encode character"."""
    ws = make_workspace({"MEMORY.md": "- plain\n", "memory/projets/café.md": "- le budget du kiwi est 12 €\n"})
    assert run_cli("-w", str(ws), "status", env={"MEMDIR_PROVIDER": "none"}).returncode == 0  # a UTF-8 Python: fine
    indexed = run_cli("-w", str(ws), "index", "--force", env=ASCII_PYTHON)
    assert indexed.returncode == 0 and "skipped" not in indexed.stderr, indexed.stderr
    found = run_cli("-w", str(ws), "search", "kiwi budget", "--json", env=ASCII_PYTHON)
    assert found.returncode == 0, found.stderr
    (hit,) = json.loads(found.stdout)["results"]
    assert hit["path"] == "memory/projets/café.md" and "12 €" in hit["snippet"]
    # a search that does not index first checks each result's note for edits: "Memory search
    # failed: 'ascii' codec can't encode character '\xe9'"
    unsynced = run_cli("-w", str(ws), "search", "kiwi budget", "--json", "--no-sync", env=ASCII_PYTHON)
    assert unsynced.returncode == 0, unsynced.stderr
    assert [r["path"] for r in json.loads(unsynced.stdout)["results"]] == ["memory/projets/café.md"]
    for null in ((), ("-0",)):  # names for xargs as the OS spells them: memory/caf\xe9.md opened nothing
        listed = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "search", "kiwi budget", "--files",
                                 *null], capture_output=True, env={**cli_env(state_dir), **ASCII_PYTHON}, timeout=60)
        assert listed.stdout == "memory/projets/café.md".encode() + (b"\0" if null else b"\n"), listed.stderr
    got = run_cli("-w", str(ws), "get", "memory/projets/café.md", "--json", env=ASCII_PYTHON)
    assert got.returncode == 0, got.stderr
    assert json.loads(got.stdout) == {"text": "- le budget du kiwi est 12 €\n", "path": "memory/projets/café.md"}


def test_json_on_an_ascii_stdout_is_still_json(make_workspace, run_cli):
    """``--json`` on a stdout that cannot encode a note's text (``PYTHONIOENCODING=ascii``) printed
    ``"caf\\xe9"`` (the CLI's backslash escapes for people), which no JSON reader takes."""
    ws = make_workspace({"MEMORY.md": "- the café kiwi plan 🥝\n"})
    env = {"MEMDIR_PROVIDER": "none", "PYTHONIOENCODING": "ascii"}
    for args in (("search", "kiwi", "--json"), ("get", "MEMORY.md", "--json")):
        out = run_cli("-w", str(ws), *args, env=env)
        assert out.returncode == 0, out.stderr
        assert out.stdout.isascii()
        assert "café kiwi plan 🥝" in json.dumps(json.loads(out.stdout), ensure_ascii=False)


def test_memdir_s_own_punctuation_is_ascii_on_an_ascii_stdout(make_workspace, run_cli):
    """Under ``LC_ALL=C PYTHONUTF8=0`` memdir's own lines came out with backslash escapes meant for
    a note's text: "Indexed: 1/1 files \\xb7 1 chunks", "text 0.961\\xd71.00" (--explain), the
    progress bar's "Indexing memory files\\u2026"; a note's letters still show as escapes."""
    ws = make_workspace({"MEMORY.md": "- the café kiwi plan \u2014 “soon”\n"})
    found = run_cli("-w", str(ws), "search", "kiwi", "--explain", env=ASCII_PYTHON)
    assert "- the caf\\xe9 kiwi plan -- \"soon\"" in found.stdout, found.stdout
    assert "\\x" not in found.stdout.split("[")[-1], found.stdout
    status = run_cli("-w", str(ws), "status", env=ASCII_PYTHON)
    assert status.returncode == 0, status.stderr
    assert "Indexed: 1/1 files - 1 chunks\n" in status.stdout, status.stdout


def test_a_note_piped_by_get_is_its_utf8_text_whatever_the_locale(make_workspace, state_dir: Path):
    """``memdir get MEMORY.md > copy.md`` under ``LC_ALL=C PYTHONUTF8=0`` wrote "caf\\xe9" (the
    escapes meant for people at a terminal), and on a Latin-1 stdout the byte \\xe9: not the note."""
    ws = make_workspace({"MEMORY.md": "- the café kiwi plan — “soon” 🥝\n"})
    for odd in (ASCII_PYTHON, {"MEMDIR_PROVIDER": "none", "PYTHONIOENCODING": "latin-1"}):
        out = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "get", "MEMORY.md"], capture_output=True,
                             env={**cli_env(state_dir), **odd}, timeout=60)
        assert (out.returncode, out.stdout) == (0, (ws / "MEMORY.md").read_bytes()), out.stderr


def test_json_on_a_latin1_stdout_is_utf8_json(make_workspace, state_dir: Path):
    """On a Latin-1 stdout (``LC_ALL=de_DE.ISO-8859-1``, ``PYTHONIOENCODING=latin-1``), which can
    encode "café", ``--json`` printed it as the byte ``\\xe9``: JSON is UTF-8, and ``jq`` or
    ``JSON.parse`` of those bytes fail or read "caf\ufffd"."""
    ws = make_workspace({"MEMORY.md": "- the café kiwi plan\n"}, name="notes-été")  # status names it
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", PYTHONIOENCODING="latin-1")
    for args in (("search", "kiwi", "--json"), ("get", "MEMORY.md", "--json"), ("status", "--json")):
        out = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), *args], capture_output=True, env=env,
                             timeout=60)
        assert out.returncode == 0, out.stderr
        assert out.stdout.isascii(), (args, out.stdout)
        json.loads(out.stdout.decode("utf-8"))
    got = json.loads(subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "get", "MEMORY.md", "--json"],
                                    capture_output=True, env=env, timeout=60).stdout.decode("utf-8"))
    assert got["text"] == "- the café kiwi plan\n"


def test_a_library_error_of_several_lines_is_one_line_on_the_cli(make_workspace, run_cli, tmp_path: Path):
    """A hub model that cannot be fetched (here: no hub at the address) failed ``index`` with
    huggingface_hub's message, whose advice ran onto a second line of stderr (and into
    ``--json``'s message)."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    assert run_cli("-w", str(ws), "index").returncode == 0  # vectors of the embedded model
    config = tmp_path / "hub.json"
    config.write_text(json.dumps({"memorySearch": {"local": {"modelPath": "nobody/no-such-model"}}}))
    env = {"HF_ENDPOINT": "http://127.0.0.1:9", "HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "0"}
    out = run_cli("-w", str(ws), "--config", str(config), "index", "--json", env=env)
    assert out.returncode == 1 and "nobody/no-such-model" in out.stderr
    assert out.stderr.count("\n") == 1, out.stderr
    message = json.loads(out.stdout)["error"]["message"]
    assert "\n" not in message and "Hugging Face hub" in message


def test_commands_run_with_stderr_closed(make_workspace, state_dir: Path):
    """``memdir index 2>&-`` (a cron job or daemon started with stderr closed) failed with "Memory
    index failed: 'NoneType' object has no attribute 'isatty'", printed on stdout."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    env = cli_env(state_dir, MEMDIR_PROVIDER="none")
    for argv, closed in ((["index", "--force"], "2>&-"), (["index", "--force"], ">&- 2>&-"),
                         (["search", "otter", "--files"], "2>&-"), (["append", "closed stderr note"], "2>&-")):
        out = subprocess.run(["sh", "-c", f'exec "$0" -m memdir "$@" {closed}', sys.executable, *argv, "-w", str(ws)],
                             capture_output=True, text=True, env=env, timeout=60)
        assert out.returncode == 0 and "NoneType" not in out.stdout, (argv, out.stdout)
    assert "otter" in (ws / "MEMORY.md").read_text()
    assert any("closed stderr note" in p.read_text() for p in (ws / "memory").glob("*.md"))


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_output_to_a_full_device_is_said_as_such_not_as_the_command_failing(make_workspace, state_dir: Path):
    """``memdir index > /dev/full`` (stdout on a full disk) said "Memory index failed: [Errno 28] No
    space left on device" once the index was updated, which reads as the index's disk being full;
    ``--version`` printed a traceback, ``mcp`` "unhandled errors in a TaskGroup", and ``--help``
    exited 0 with nothing written (argparse drops a failed write)."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    env = cli_env(state_dir, MEMDIR_PROVIDER="none")
    init = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "qa", "version": "1"}}}) + "\n"
    for argv, given in ((["index"], ""), (["search", "otter", "--json"], ""), (["status"], ""),
                        (["--version"], ""), (["--help"], ""), (["search", "--help"], ""), (["mcp"], init)):
        with open("/dev/full", "w") as full:
            where = ["-w", str(ws)] if argv[0][0] != "-" else []
            out = subprocess.run([sys.executable, "-m", "memdir", *argv, *where], input=given, stdout=full,
                                 stderr=subprocess.PIPE, text=True, env=env, timeout=60)
        assert (out.returncode, out.stderr) == (1, "memdir: could not write the output to stdout: No space left on "
                                                   "device\n"), argv
    assert subprocess.run([sys.executable, "-m", "memdir", "search", "otter", "--files", "--no-sync", "-w", str(ws)],
                          capture_output=True, text=True, env=env, timeout=60).stdout == "MEMORY.md\n"


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_stderr_on_a_full_device_never_fails_the_command(make_workspace, state_dir: Path):
    """With stderr on a full disk (``2>>memdir.log`` on a full /var), the first warning raised:
    ``memdir index`` exited 1 without its report (its index updated), bad usage exited 1, not 2."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    (ws / "memory").mkdir()
    with open(bytes(ws / "memory") + b"/caf\xe9.md", "w") as note:
        note.write("- A note named in Latin-1.\n")  # a name that is not UTF-8: a warning at each index
    env = cli_env(state_dir, MEMDIR_PROVIDER="none")
    for argv, code, said in ((["index"], 0, "Memory index updated"), (["search", "otter"], 0, "MEMORY.md:1"),
                             (["search"], 2, ""), (["get", "../x.md"], 1, "")):
        with open("/dev/full", "w") as full:
            out = subprocess.run([sys.executable, "-m", "memdir", *argv, "-w", str(ws)], stdout=subprocess.PIPE,
                                 stderr=full, text=True, env=env, timeout=60)
        assert out.returncode == code and said in out.stdout, (argv, out.returncode, out.stdout)


def test_the_stdio_mcp_server_with_stdin_closed_is_bad_usage_in_words(make_workspace, state_dir: Path):
    """``memdir mcp <&-`` said only "memdir: 'NoneType' object has no attribute 'isatty'"."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    out = subprocess.run(["sh", "-c", 'exec "$0" -m memdir mcp "$@" <&-', sys.executable, "-w", str(ws)],
                         capture_output=True, text=True, env=cli_env(state_dir, MEMDIR_PROVIDER="none"), timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr == ("memdir: the MCP server on stdio reads its requests from stdin, and stdin is closed "
                          "(--transport http serves without it)\n")


def test_notes_memdir_writes_get_the_umask_s_permissions(make_workspace, state_dir: Path, tmp_path: Path):
    """In a group-shared workspace (umask 002) ``memory/`` came out 0755 and a new daily log 0644
    (made with those modes, not 0777/0666 less the umask), and the long-term memory mirror 0600
    (a temporary file's mode): the rest of the group could not append, or index the mirror."""
    import stat as st

    from memdir.ltm.markdown import MIRROR_MARK, write_mirror

    def mode(path: Path) -> int:
        return st.S_IMODE(path.stat().st_mode)

    for umask, folder, file in ((0o002, 0o775, 0o664), (0o077, 0o700, 0o600)):
        ws = make_workspace({}, name=f"ws-{umask:o}")
        out = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "append", "a group note"],
                             capture_output=True, text=True, env=cli_env(state_dir, MEMDIR_PROVIDER="none"),
                             timeout=60, preexec_fn=lambda u=umask: os.umask(u))
        assert out.returncode == 0, out.stderr
        (log,) = (ws / "memory").glob("*.md")
        assert (mode(ws / "memory"), mode(log)) == (folder, file)

        old = os.umask(umask)
        try:
            mirror = ws / "memory" / "long-term.md"
            assert write_mirror(mirror, f"{MIRROR_MARK} x -->\n- one\n", tmp_path / f"state-{umask:o}.json") is None
            assert mode(mirror) == file
            mirror.chmod(0o640)  # a mode the user chose is kept when the mirror is regenerated
            assert write_mirror(mirror, f"{MIRROR_MARK} x -->\n- two\n", tmp_path / f"state-{umask:o}.json") is None
            assert mode(mirror) == 0o640 and "- two" in mirror.read_text()
        finally:
            os.umask(old)


PRIVATE_STATE = """
import importlib.util, json, os, stat, sys
from pathlib import Path
from memdir import Memory
from memdir.sessions.store import SessionStore
ws, state = Path(sys.argv[1]), Path(sys.argv[2])
mode = lambda p: oct(stat.S_IMODE(os.stat(p).st_mode))
with Memory(ws, state_dir=state) as mem:
    mem.sync()
    index = mem.index_path
    seen = {"memory/": mode(index.parent), "index": mode(index), "-wal": mode(f"{index}-wal")}
    mem.sync(force=True)  # a rebuild's new database, swapped in
    seen["rebuilt"] = mode(index)
    sessions = SessionStore(mem.settings.sessions_dir)
    sessions.append("agent:main:main", {"type": "message", "message": {"role": "user", "content": "hi"}})
    seen["sessions/"] = mode(sessions.dir)
    if importlib.util.find_spec("lancedb"):
        mem.long_term.store("The vault code is 4411")
        seen["ltm/"] = mode(mem.long_term.db_path)
print(json.dumps(seen))
"""


def test_the_state_that_holds_the_notes_text_is_private_whatever_the_umask(make_workspace, tmp_path: Path):
    """Under the usual umask 022 the index (the notes' text and embeddings) came out 0644 in a 0755
    ``memory/`` folder, and the long-term memory store likewise: any local user could read notes
    kept in a private workspace, where transcripts and the settings cache were already 0600.  The
    folders memdir makes for its state are 0700 and a new index (its -wal too) 0600, as ssh's."""
    ws = make_workspace({"MEMORY.md": "- The vault code is 4411.\n"})
    out = subprocess.run([sys.executable, "-c", PRIVATE_STATE, str(ws), str(tmp_path / "state")],
                         capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.umask(0o022),
                         env=cli_env(tmp_path / "state", MEMDIR_PROVIDER="none"))
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    assert seen.pop("memory/") == seen.pop("sessions/") == seen.pop("ltm/", "0o700") == "0o700"
    assert seen == {"index": "0o600", "-wal": "0o600", "rebuilt": "0o600"}


def test_watch_sees_a_non_ascii_file_name_when_python_decodes_names_as_ascii(make_workspace, state_dir: Path):
    """Under ``LC_ALL=C PYTHONUTF8=0`` a note added as ``memory/grüße.md`` stopped ``memdir watch``'s
    watcher with "watcher failed: 'ascii' codec can't encode characters" (watchfiles gives names as
    UTF-8 text, which this Python cannot hand to the OS)."""
    import threading

    ws = make_workspace({"memory/a.md": "- Alpha note.\n"})
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "watch", "--json", "--debounce-ms", "100", "-w", str(ws)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=cli_env(state_dir, **ASCII_PYTHON))
    assert proc.stdout is not None
    stuck = threading.Timer(90, proc.kill)  # a watch that never reports fails the test, never hangs it
    stuck.start()
    events: list[dict[str, object]] = []
    try:
        def until(what: str) -> dict[str, object]:
            while True:
                line = proc.stdout.readline()
                assert line, f"watch ended before {what}: {events}"
                events.append(json.loads(line))
                if events[-1]["event"] == what or events[-1]["event"] == "error":
                    return events[-1]

        assert until("sync")["reason"] == "start", events
        (ws / "memory" / "grüße.md").write_text("- the puffin note\n", encoding="utf-8")
        change = until("change")
        assert change == {**change, "event": "change", "change": "added", "path": "memory/grüße.md"}, events
        assert until("sync")["indexed"] == 1, events
        proc.send_signal(2)
        proc.communicate(timeout=60)
    finally:
        stuck.cancel()
        if proc.poll() is None:
            proc.kill()
    assert not [e for e in events if e["event"] == "error"]


def test_a_note_or_query_on_the_command_line_is_utf8_when_python_decodes_it_as_ascii(make_workspace, run_cli):
    """Under ``LC_ALL=C PYTHONUTF8=0`` ``memdir append "café crème"`` was refused as "text is not
    valid UTF-8" (Python gave it as surrogate escapes), and ``search "crème"`` found nothing."""
    ws = make_workspace({"MEMORY.md": "- plain\n", "memory/2026-03-04.md": "- first\n"})
    out = run_cli("-w", str(ws), "append", "le café crème de Zoé", "--date", "2026-03-04", env=ASCII_PYTHON)
    assert out.returncode == 0, out.stderr
    assert (ws / "memory" / "2026-03-04.md").read_text(encoding="utf-8") == "- first\nle café crème de Zoé\n"
    found = run_cli("-w", str(ws), "search", "crème Zoé", "--json", env=ASCII_PYTHON)
    assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["memory/2026-03-04.md"], found.stderr
    bad = run_cli("-w", str(ws), "append", "half \udcff a note", "--date", "2026-03-04", env=ASCII_PYTHON)
    assert bad.returncode == 1 and "not valid UTF-8" in bad.stderr  # a byte that is not UTF-8 is still refused


def _latin1_locale(tmp_path: Path) -> dict[str, str]:
    """The environment of a Latin-1 locale (``de_DE.ISO-8859-1``), compiled into ``tmp_path``."""
    import shutil

    if not shutil.which("localedef"):
        pytest.skip("needs localedef")
    (tmp_path / "locales").mkdir()
    made = subprocess.run(["localedef", "-f", "ISO-8859-1", "-i", "de_DE",
                           str(tmp_path / "locales" / "de_DE.ISO-8859-1")], capture_output=True, text=True, timeout=60)
    env = {"LOCPATH": str(tmp_path / "locales"), "LC_ALL": "de_DE.ISO-8859-1", "PYTHONUTF8": "0"}
    probe = subprocess.run([sys.executable, "-c", "import sys; print(sys.getfilesystemencoding())"],
                           capture_output=True, text=True, env={**os.environ, **env}, timeout=60)
    if made.returncode not in (0, 1) or probe.stdout.strip() != "iso8859-1":  # 1: warnings only
        pytest.skip(f"cannot make a Latin-1 locale here: {made.stderr.strip()[:200]}")
    return env


def test_a_note_typed_in_a_latin1_locale_is_appended_and_searched(make_workspace, state_dir: Path, tmp_path: Path):
    """In a Latin-1 locale the terminal sends "Grüße aus Köln" as Latin-1 bytes, which Python
    decodes right; the CLI then read them again as UTF-8 (meant for ASCII locales), so append
    refused the note as "text is not valid UTF-8" and a search for "Köln" looked for a stray byte."""
    ws = make_workspace({"MEMORY.md": "- Kiwi plan.\n"})
    env = {**cli_env(state_dir, MEMDIR_PROVIDER="none"), **_latin1_locale(tmp_path)}

    def memdir(*args: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable.encode(), b"-m", b"memdir", b"-w", bytes(ws), *args],
                              capture_output=True, env=env, timeout=60)

    done = memdir(b"append", b"--date", b"2026-03-03", "Grüße aus Köln".encode("latin-1"))
    assert done.returncode == 0, done.stderr
    utf8 = memdir(b"append", b"--date", b"2026-03-03", "crème brûlée".encode())  # a UTF-8 terminal's bytes
    assert utf8.returncode == 0, utf8.stderr
    assert (ws / "memory" / "2026-03-03.md").read_text(encoding="utf-8") == "Grüße aus Köln\ncrème brûlée\n"
    found = memdir(b"search", "Köln".encode("latin-1"), b"--files")
    assert found.stdout == b"memory/2026-03-03.md\n", found.stderr


def test_a_workspace_named_beyond_ascii_works_in_a_latin1_locale(make_workspace, state_dir: Path, tmp_path: Path):
    """In a Latin-1 locale Python reads the folder ``notes-été`` (UTF-8 bytes) as 'notes-Ã©tÃ©';
    memdir took that for text and encoded it again, so every command there (or given it as
    --workspace) failed with "workspace /…/notes-Ã\\x83©tÃ\\x83© does not exist", and ``get
    memory/café.md`` said "no file"."""
    ws = make_workspace({"MEMORY.md": "- Kiwi plan.\n", "memory/café.md": "- kiwi café\n"}, name="notes-été")
    env = {**cli_env(state_dir, MEMDIR_PROVIDER="none"), **_latin1_locale(tmp_path)}
    for where in ([], [b"-w", bytes(ws)]):
        found = subprocess.run([sys.executable.encode(), b"-m", b"memdir", *where, b"search", b"kiwi", b"--files"],
                               capture_output=True, env=env, cwd=ws, timeout=60)
        listed = sorted(found.stdout.splitlines())
        assert (found.returncode, listed) == (0, [b"MEMORY.md", "memory/café.md".encode()]), found.stderr
    got = subprocess.run([sys.executable.encode(), b"-m", b"memdir", b"get", "memory/café.md".encode()],
                         capture_output=True, env=env, cwd=ws, timeout=60)
    assert got.stdout == "- kiwi café\n".encode(), got.stderr


def test_extra_paths_with_names_beyond_ascii_or_utf8_are_indexed_or_skipped(make_workspace, run_cli,
                                                                            tmp_path: Path):
    """An extra folder named ``été`` in the config failed every ``index`` under ``LC_ALL=C
    PYTHONUTF8=0`` ("'ascii' codec can't encode") and ``get`` refused its notes as "not allowed";
    one whose name is not UTF-8 (``"bad\\udcff"`` in JSON) failed every index in any locale
    ("surrogates not allowed", hashing the extra paths), where it should be skipped and named."""
    ws = make_workspace({"MEMORY.md": "- plain\n"})
    (tmp_path / "été").mkdir()
    (tmp_path / "été" / "lynx.md").write_text("- the extra lynx note\n")
    bad = os.fsencode(tmp_path) + b"/bad\xff"
    os.mkdir(bad)
    with open(bad + b"/o.md", "w") as fh:
        fh.write("- the ocelot note\n")
    config = tmp_path / "memdir.json"
    config.write_text(json.dumps({"memorySearch": {"provider": "none",
                                                   "extraPaths": [str(tmp_path / "été"), os.fsdecode(bad)]}}))
    for env in (ASCII_PYTHON, {}):
        indexed = run_cli("-w", str(ws), "--config", str(config), "index", "--force", env=env)
        assert indexed.returncode == 0, indexed.stderr
        assert "bad\\xff/o.md: file name is not valid UTF-8" in indexed.stderr
        found = run_cli("-w", str(ws), "--config", str(config), "search", "lynx", "--json", env=env)
        assert [r["path"] for r in json.loads(found.stdout)["results"]] == ["../été/lynx.md"], found.stderr
        got = run_cli("-w", str(ws), "--config", str(config), "get", str(tmp_path / "été" / "lynx.md"), env=env)
        assert got.returncode == 0 and got.stdout == "- the extra lynx note\n", got.stderr


def test_chat_with_stdin_closed_says_so(make_workspace, state_dir: Path):
    """``memdir chat <&-`` said only "memdir: 'NoneType' object has no attribute 'isatty'"."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    out = subprocess.run(["sh", "-c", 'exec "$0" -m memdir chat "$@" <&-', sys.executable, "-w", str(ws),
                          "--base-url", "http://127.0.0.1:9/v1", "--model", "m"],
                         capture_output=True, text=True, env=cli_env(state_dir, MEMDIR_PROVIDER="none"), timeout=60)
    assert out.returncode == 2 and out.stdout == "", out.stderr
    assert out.stderr == "memdir chat: the chat reads your messages from stdin, and stdin is closed\n"


def test_ltm_import_reads_utf8_whatever_the_locale_and_refuses_what_is_not(make_workspace, run_cli, tmp_path: Path):
    """``memdir ltm import -`` read stdin in the locale's encoding: under ``LC_ALL=C PYTHONUTF8=0``
    "le café crème" was stored as "le caf\\ufffd\\ufffd cr\\ufffd\\ufffdme", and a byte that is not
    UTF-8 became U+FFFD without a word (``append`` refuses it); with stdin closed it said "'NoneType'
    object has no attribute 'read'"."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    base = ("-w", str(ws), "--config", str(cfg), "ltm")
    env = cli_env(tmp_path / "state", **ASCII_PYTHON)

    def ltm_import(data: bytes) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run([sys.executable, "-m", "memdir", *base, "import", "-"], input=data,
                              capture_output=True, env=env, timeout=120)

    out = ltm_import("- le café crème de Zoé\n".encode())
    assert out.returncode == 0, out.stderr
    bad = ltm_import(b"- half \xff a memory\n")
    assert bad.returncode == 1 and bad.stderr == b"memdir: ltm import: stdin is not valid UTF-8 (at byte 8); " \
                                                 b"nothing imported\n"
    closed = subprocess.run(["sh", "-c", 'exec "$0" -m memdir "$@" <&-', sys.executable, *base, "import", "-"],
                            capture_output=True, text=True, env=env, timeout=120)
    assert closed.returncode == 2 and "stdin is closed" in closed.stderr, closed.stderr
    listed = json.loads(run_cli(*base, "list", "--json", check=True).stdout)
    assert [m["text"] for m in listed] == ["le café crème de Zoé"]


def test_chat_reads_messages_as_utf8_under_an_ascii_locale(make_workspace, state_dir: Path):
    """Under ``LC_ALL=C PYTHONUTF8=0`` a message typed as "le café crème" reached the model (and
    the transcript) as "le caf\\ufffd\\ufffd cr\\ufffd\\ufffdme"."""
    from memdir.testing.chat_server import ScriptedChatServer

    ws = make_workspace({"MEMORY.md": "- plain\n"})
    with ScriptedChatServer(lambda body: {"content": "noted"}) as server:
        out = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "chat", "--base-url", server.url,
                              "--model", "m"], input="le café crème\n".encode(), capture_output=True,
                             env=cli_env(state_dir, **ASCII_PYTHON), timeout=120)
        assert out.returncode == 0 and out.stdout == b"noted\n", out.stderr
        said = [m["content"] for r in server.requests for m in r["body"].get("messages", []) if m["role"] == "user"]
    assert said == ["le café crème"]


def test_a_deleted_current_folder(make_workspace, state_dir: Path, tmp_path: Path):
    """Run from a folder that was deleted (a shell left in a removed checkout), ``search`` failed
    with "[Errno 2] No such file or directory" even with ``-w`` a full path (its settings snapshot
    named the current folder); without ``-w`` that was all it said."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    gone = tmp_path / "gone"
    env = cli_env(state_dir, MEMDIR_PROVIDER="none", PYTHONPATH=str(SRC))  # (no relative entry to resolve)

    def memdir(*args: str) -> subprocess.CompletedProcess[str]:
        # (-c as the memdir script runs it: ``-m`` has Python itself complain that the folder is gone)
        return subprocess.run(["sh", "-c", 'mkdir "$0" && cd "$0" && rmdir "$0" && exec "$@"', str(gone),
                               sys.executable, "-c", "import sys; from memdir.cli import main; sys.exit(main())",
                               *args], capture_output=True, text=True, env=env, timeout=60)

    for args, says in ((("search", "otter", "--files"), "MEMORY.md\n"), (("status", "--json"), '"files": 1,'),
                       (("get", "MEMORY.md"), "otter")):
        out = memdir("-w", str(ws), *args)
        assert out.returncode == 0 and says in out.stdout and "Errno" not in out.stderr, out.stderr
    out = memdir("search", "otter")
    assert out.returncode == 1 and out.stderr == (
        "Memory search failed: the current folder no longer exists (was it deleted?): cd to a folder that does, "
        "or give --workspace as a full path\n")


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_chat_reaches_a_model_on_this_machine_past_a_proxy_setting(monkeypatch: pytest.MonkeyPatch, variable: str):
    """With a proxy in the environment (a company network) every turn of ``memdir chat`` against a
    model served on this machine went to the proxy: "cannot reach the chat API at
    http://127.0.0.1:…: Connection refused", though the server was up."""
    from memdir.agent import ChatClient
    from memdir.testing.chat_server import ScriptedChatServer

    monkeypatch.setenv(variable, "http://127.0.0.1:9")  # nothing listens there
    with ScriptedChatServer(lambda body: {"content": "noted"}) as server:
        client = ChatClient(server.url, "m", timeout=20)
        try:
            reply = client.complete([{"role": "user", "content": "hello"}])
        finally:
            client.close()
    assert reply.content == "noted" and len(server.requests) == 1


def test_a_stale_ca_certificates_setting_is_named(monkeypatch: pytest.MonkeyPatch, make_workspace, tmp_path: Path):
    """``SSL_CERT_FILE`` naming a file that is gone (httpx reads it) failed every remote embedding
    and every chat turn with a bare "[Errno 2] No such file or directory" (or "[Errno 21] Is a
    directory"), naming neither the file nor the variable."""
    from memdir.agent import ChatClient
    from memdir.api import Memory
    from memdir.errors import MemdirError

    stale = str(tmp_path / "gone" / "ca.pem")
    monkeypatch.setenv("SSL_CERT_FILE", stale)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with pytest.raises(MemdirError, match=f"CA certificates for HTTPS from SSL_CERT_FILE={stale}"):
        ChatClient("https://chat.example.invalid/v1", "m")
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    config = {"memorySearch": {"provider": "openai", "fallback": "none",
                               "remote": {"baseUrl": "https://embed.example.invalid/v1", "apiKey": "k"}}}
    with Memory(ws, config=config, state_dir=tmp_path / "state") as mem:
        report = mem.sync()
    assert any(f"SSL_CERT_FILE={stale}" in w for w in report.warnings), report.warnings


def test_a_tz_of_a_whole_day_does_not_stop_append(make_workspace, run_cli):
    """``TZ=UTC+24`` (POSIX allows hours up to 24; glibc clamps larger ones to it) made every
    ``append`` fail with "offset must be a timedelta strictly between -timedelta(hours=24) and
    timedelta(hours=24)": Python cannot hold that offset.  The note now goes to the UTC day."""
    ws = make_workspace({"MEMORY.md": "- plain\n"})
    for tz in ("UTC+24", "UTC+99"):
        out = run_cli("-w", str(ws), "append", f"a note under TZ={tz}", env={"TZ": tz, "MEMDIR_PROVIDER": "none"})
        assert out.returncode == 0 and out.stdout.startswith("Appended to memory/"), out.stderr
    assert "TZ=UTC+99" in "".join(p.read_text() for p in (ws / "memory").glob("*.md"))


NOTICES_FROM_THREADS = """
import sys, threading
sys.setswitchinterval(1e-6)  # a thread switch wherever one may fall
from memdir.cli import _notice
def run(tag):
    for i in range(1500):
        _notice(f"{tag} could not update the index, notice {i}")
threads = [threading.Thread(target=run, args=(t,)) for t in "ABCD"]
for t in threads:
    t.start()
for t in threads:
    t.join()
"""


def test_notices_said_from_threads_at_once_stay_whole_lines(state_dir: Path):
    """An MCP server on an unwritable state folder said two things at start-up from two threads
    (its background index, its watcher), and stderr got "…changed files firstmemdir: background
    index…" and an empty line: a notice's text and its line break were written apart."""
    out = python_child(NOTICES_FROM_THREADS, state_dir=state_dir, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stderr.splitlines()
    assert len(lines) == 6000
    bad = [line for line in lines if not re.fullmatch(r"memdir: [ABCD] could not update the index, notice \d+", line)]
    assert bad == []
