"""Signals a terminal, a supervisor or a shell sends (SIGHUP, SIGTERM) to every long command, and
where their output goes: each stops as Ctrl-C stops it (a rebuild's temporary database removed, the
writer lock given back), says so, and exits as a shell expects (128 + the signal's number)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from helpers import blocked_rebuild, cli_env
from memdir.testing.chat_server import ScriptedChatServer

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX signals")


def test_a_rebuild_whose_terminal_closed_cleans_up_and_says_so(tmp_path: Path, make_workspace, run_cli,
                                                                state_dir: Path) -> None:
    """SIGHUP (an SSH session or terminal closed under ``memdir index --force``) ended it on the
    spot: its temporary database and progress file stayed beside the index and ``--json`` printed
    nothing.  It stops as on Ctrl-C: exit 129, the temporary database gone, the lock given back."""
    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "index", "--force", "--json") as (proc, go, _):
        proc.send_signal(signal.SIGHUP)
        go.set()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 129, err
    assert "memdir: hung up (the terminal closed)" in err
    assert json.loads(out)["error"] == {"kind": "interrupted", "message": "hung up (the terminal closed)",
                                        "exitCode": 129}
    assert list(state_dir.rglob("*.tmp-*")) == []
    assert list(state_dir.rglob("*.progress")) == []


def test_a_rebuild_under_nohup_runs_on_when_the_terminal_closes(tmp_path: Path, make_workspace, run_cli,
                                                                state_dir: Path) -> None:
    """``nohup memdir index --force &`` asks for the rebuild to outlive the terminal: SIGHUP stays
    ignored, and the rebuild finishes."""
    def as_nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "index", "--force", "--json",
                         preexec=as_nohup) as (proc, go, _):
        proc.send_signal(signal.SIGHUP)
        go.set()
        out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert json.loads(out)["indexed"] == 2
    assert list(state_dir.rglob("*.tmp-*")) == []


def _until_stopped(proc: subprocess.Popen[str], go: threading.Event, sig: int) -> tuple[str, str]:
    proc.send_signal(sig)
    go.set()
    return proc.communicate(timeout=60)


def test_a_watch_whose_terminal_closed_stops_cleanly_mid_build(tmp_path: Path, make_workspace, run_cli,
                                                               state_dir: Path) -> None:
    """``memdir watch`` left in a terminal or SSH session that closed was ended on the spot, in its
    first build (exit -1): the temporary database and progress file stayed beside the index.  It
    stops as on Ctrl-C or SIGTERM, exit 0."""
    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "watch", first_build=True) as (proc, go, _):
        _out, err = _until_stopped(proc, go, signal.SIGHUP)
    assert proc.returncode == 0, err
    assert "Stopped watching." in err and "Traceback" not in err
    assert list(state_dir.rglob("*.tmp-*")) == []
    assert list(state_dir.rglob("*.progress")) == []


def test_a_watch_under_nohup_runs_on_when_the_terminal_closes(tmp_path: Path, make_workspace, run_cli,
                                                              state_dir: Path) -> None:
    def as_nohup() -> None:
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "watch", "--json",
                         preexec=as_nohup, first_build=True) as (proc, go, _):
        proc.send_signal(signal.SIGHUP)
        go.set()
        assert proc.stdout is not None
        while (event := json.loads(proc.stdout.readline()))["event"] != "sync":  # the start's sync, done
            assert event["event"] != "stop"
        assert proc.poll() is None
        out, err = _until_stopped(proc, go, signal.SIGTERM)
    assert proc.returncode == 0, err
    assert json.loads(out.splitlines()[-1])["event"] == "stop"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.parametrize(("sig", "code", "said"), [(signal.SIGTERM, 143, "terminated"),
                                                   (signal.SIGHUP, 129, "hung up (the terminal closed)")],
                         ids=["sigterm", "sighup"])
def test_an_http_mcp_server_stopped_in_its_first_build_cleans_up(tmp_path: Path, make_workspace, run_cli,
                                                                   state_dir: Path, sig: int, code: int,
                                                                   said: str) -> None:
    """SIGTERM, what systemd sends to stop ``memdir mcp --transport http``: uvicorn stopped serving,
    then sent itself SIGTERM again with no handler left, so the process died (exit -15) before its
    Memory was closed, and the start-up build's temporary database stayed beside the index; SIGHUP
    ended it on the spot.  Both stop as Ctrl-C does, the build cut short cleanly."""
    with blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "mcp", "--transport", "http",
                         "--port", str(_free_port()), first_build=True) as (proc, go, _):
        _out, err = _until_stopped(proc, go, sig)
    assert proc.returncode == code, err
    assert f"memdir: {said}" in err and "Traceback" not in err
    assert list(state_dir.rglob("*.tmp-*")) == []
    assert list(state_dir.rglob("*.progress")) == []


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGHUP, 129)], ids=["sigterm", "sighup"])
def test_a_chat_stopped_in_its_first_build_cleans_up(tmp_path: Path, make_workspace, run_cli, state_dir: Path,
                                                     sig: int, code: int) -> None:
    """``memdir chat`` was left out of the CLI's SIGTERM handling as if it had its own, which it
    did not: SIGTERM or SIGHUP ended it on the spot (exit -15, -1), its start-up build's temporary
    database and progress file left beside the index.  It stops as Ctrl-C stops it."""
    with ScriptedChatServer(lambda body: {"content": "ok"}) as chat, \
            blocked_rebuild(tmp_path, make_workspace, run_cli, state_dir, "chat", "--base-url", chat.url,
                            "--model", "m", first_build=True) as (proc, go, _):
        _out, err = _until_stopped(proc, go, sig)
    assert proc.returncode == code, err
    assert "Traceback" not in err
    assert list(state_dir.rglob("*.tmp-*")) == []
    assert list(state_dir.rglob("*.progress")) == []


def test_sigterm_during_a_turn_at_a_terminal_ends_the_chat(make_workspace, state_dir: Path) -> None:
    """At a terminal Ctrl-C stops the turn in progress and the chat goes on; SIGTERM was taken for
    it (the chat printed '(interrupted)' and waited at its prompt), so a chat could not be
    stopped with kill while the model was answering.  SIGTERM ends the chat, exit 143."""
    import os
    import pty

    ws = make_workspace({"MEMORY.md": "# Home\n\nThe boiler is serviced every May.\n",
                         "memdir.json": json.dumps({"memorySearch": {"provider": "none"}})})
    asked, release = threading.Event(), threading.Event()

    def slow(body: dict[str, object]) -> dict[str, object]:
        asked.set()
        release.wait(60)
        return {"content": "It is serviced in May."}

    controller, terminal = pty.openpty()
    try:
        with ScriptedChatServer(slow) as chat:
            proc = subprocess.Popen([sys.executable, "-m", "memdir", "chat", "--base-url", chat.url, "--model", "m",
                                     "-w", str(ws)], stdin=terminal, stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True, env=cli_env(state_dir))
            try:
                os.write(controller, b"when is the boiler serviced?\n")
                assert asked.wait(60), "the chat never asked the model"
                proc.send_signal(signal.SIGTERM)
                try:
                    _out, err = proc.communicate(timeout=30)
                finally:
                    release.set()
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
    finally:
        os.close(controller)
        os.close(terminal)
    assert proc.returncode == 143, err
    assert "memdir: terminated" in err and "(interrupted)" not in err


BIG_NOTE = "".join(f"- line {i}: the boiler is serviced every May\n" for i in range(120_000))  # 5.3 MB


@pytest.fixture
def big_note(make_workspace) -> tuple[str, ...]:
    ws = make_workspace({"memory/big.md": BIG_NOTE,
                         "memdir.json": json.dumps({"memorySearch": {"provider": "none"}})})
    return ("get", "memory/big.md", "-w", str(ws))


def test_unbuffered_output_cut_short_by_a_file_size_limit_is_said(big_note: tuple[str, ...], tmp_path: Path,
                                                                   state_dir: Path) -> None:
    """Under PYTHONUNBUFFERED=1 (many container images set it) Python's text layer ignores a short
    write, the first sign of a disk filling up or a file size limit: ``memdir get big.md > out.md``
    left 1 MiB of the note and exited 0 without a word."""
    import resource

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 20, 1 << 20))

    with (tmp_path / "out.md").open("wb") as out:
        proc = subprocess.run([sys.executable, "-m", "memdir", *big_note], stdout=out, stderr=subprocess.PIPE,
                              text=True, env=cli_env(state_dir, PYTHONUNBUFFERED="1"), preexec_fn=limited,
                              timeout=60)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr == "memdir: could not write the output to stdout: File too large\n"


@pytest.mark.parametrize("unbuffered", ["1", ""], ids=["unbuffered", "buffered"])
def test_a_reader_that_goes_away_mid_note_gives_141(big_note: tuple[str, ...], state_dir: Path,
                                                    unbuffered: str) -> None:
    """``memdir get big.md | head -c 10``: under PYTHONUNBUFFERED=1 the write the reader left
    half-done counted as done, and get exited 0 as if the whole note had been read."""
    proc = subprocess.Popen([sys.executable, "-m", "memdir", *big_note], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env=cli_env(state_dir, PYTHONUNBUFFERED=unbuffered))
    assert proc.stdout is not None and proc.stderr is not None
    try:
        assert proc.stdout.read(10) == b"- line 0: "
        proc.stdout.close()
        err = proc.stderr.read()
        proc.wait(60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 141, err
    assert err == b""


def test_index_on_a_terminal_no_one_sized_shows_progress_lines(make_workspace, state_dir: Path) -> None:
    """A pseudo-terminal no one gave a size (``script`` run from a job or CI to get a terminal,
    ``ssh -t`` from a script) says it is 0 columns wide, where tqdm's bar drew nothing at all for
    the whole index; it gets the plain lines a log gets."""
    import os
    import pty

    ws = make_workspace({f"memory/2026-03-{day:02d}.md": f"Note of day {day}: the boiler.\n" for day in range(1, 9)}
                        | {"memdir.json": json.dumps({"memorySearch": {"provider": "none"}})})
    controller, terminal = pty.openpty()
    try:
        assert os.get_terminal_size(terminal).columns == 0
        proc = subprocess.run([sys.executable, "-m", "memdir", "index", "-w", str(ws)], stdout=subprocess.PIPE,
                              stderr=terminal, text=True, timeout=120,
                              env=cli_env(state_dir, MEMDIR_PROGRESS_INTERVAL="0"))
        os.close(terminal)
        shown = b""
        while True:
            try:
                piece = os.read(controller, 65536)
            except OSError:  # (EIO: no one has the terminal open any more)
                break
            if not piece:
                break
            shown += piece
    finally:
        os.close(controller)
    assert proc.returncode == 0, shown
    assert "indexing: 8/8 files" in shown.decode()


def test_the_stdio_mcp_server_with_stdout_closed_is_bad_usage_in_words(make_workspace, state_dir: Path) -> None:
    """``memdir mcp >&-`` answered every request into nothing (stdout closed is os.devnull to the
    CLI) and exited 0 when its input ended, its client waiting for answers that never came."""
    ws = make_workspace({"MEMORY.md": "- The otter eats fish.\n"})
    initialize = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}})
    out = subprocess.run(["sh", "-c", 'exec "$0" -m memdir mcp "$@" >&-', sys.executable, "-w", str(ws)],
                         input=initialize + "\n", stderr=subprocess.PIPE, text=True,
                         env=cli_env(state_dir, MEMDIR_PROVIDER="none"), timeout=60)
    assert out.returncode == 2, out.stderr
    assert out.stderr == ("memdir: the MCP server on stdio answers on stdout, and stdout is closed "
                          "(--transport http serves without it)\n")
