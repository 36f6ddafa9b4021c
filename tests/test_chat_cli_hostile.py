"""``memdir chat`` given bad options, a model API that always fails, and a terminal closed with Ctrl-D."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from memdir.chat_cli import chat_main
from memdir.testing.chat_server import FactKeeperModel, ScriptedChatServer


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    folder = tmp_path / "ws"
    folder.mkdir()
    (folder / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}, "userTimezone": "UTC"}))
    return folder


def chat(ws: Path, *args: str) -> int:
    return chat_main(["--model", "m", "--api-key-env", "CHAT_TEST_KEY", "--workspace", str(ws),
                      "--state-dir", str(ws.parent / "state"), *args])


@pytest.mark.parametrize(("args", "says"), [
    (["--base-url", "127.0.0.1:8000/v1"], "must start with http:// or https://"),
    (["--base-url", "ftp://127.0.0.1/v1"], "must start with http:// or https://"),
    (["--base-url", "http://127.0.0.1:9/v1", "--context-window", "-5"], "--context-window must be a positive"),
])
def test_bad_options_are_one_clear_line_before_the_chat_starts(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str],
        says: str) -> None:
    # a URL without http:// failed every turn with httpx's words; a window of -5 was taken
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert chat(ws, *args) == 2
    err = capsys.readouterr().err
    assert says in err and err.count("\n") == 1
    assert not (ws.parent / "state").exists()


def test_a_model_api_that_always_fails_exits_1_even_when_new_worked(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # /new needs no model (the slug falls back to the time): it counted as a turn that got
    # through, and a script learnt nothing of a 500 storm from the exit status
    with ScriptedChatServer(lambda body: {"status": 500, "error": "overloaded"}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n/new\nstill there?\n"))
        assert chat(ws, "--base-url", server.url) == 1
    captured = capsys.readouterr()
    assert captured.err.count("error: chat API returned 500") == 2
    assert "Started a new session." in captured.out


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_ctrl_d_at_the_prompt_ends_the_line(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedChatServer(FactKeeperModel()) as server:
        monkeypatch.setattr(sys, "stdin", Terminal("hello\n"))
        assert chat(ws, "--base-url", server.url) == 0
    assert capsys.readouterr().out.endswith("you> \n")  # the shell's prompt is not glued to ours


ESCAPES = "Rex\x1b[2J\x1b]52;c;cm0gLXJmIH4=\x07\r\x08done"


@pytest.mark.parametrize("terminal", [True, False])
def test_escape_sequences_in_a_reply_never_reach_a_terminal(
        ws: Path, monkeypatch: pytest.MonkeyPatch, terminal: bool) -> None:
    # a reply echoing a note's escape sequences cleared the screen and set the clipboard (OSC 52)
    out = Terminal() if terminal else io.StringIO()
    with ScriptedChatServer(lambda body: {"content": ESCAPES}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("what is the dog called?\n"))
        monkeypatch.setattr(sys, "stdout", out)
        assert chat(ws, "--base-url", server.url) == 0
    printed = out.getvalue()
    if terminal:
        assert "Rex\\x1b[2J\\x1b]52;c;cm0gLXJmIH4=\\x07\\x0d\\x08done" in printed
        assert not any(ch in printed for ch in "\x1b\x07\r\x08")
    else:  # a pipe gets the reply as it came
        assert ESCAPES in printed


def test_bidi_overrides_in_a_reply_are_spelt_out_at_a_terminal(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a reply quoting a note's right-to-left override showed its words in another order than sent
    out = Terminal()
    with ScriptedChatServer(lambda body: {"content": "run \u202etxt.exe\u202c and \u2066x\u2069"}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("what is the file?\n"))
        monkeypatch.setattr(sys, "stdout", out)
        assert chat(ws, "--base-url", server.url) == 0
    printed = out.getvalue()
    assert "run \\u202etxt.exe\\u202c and \\u2066x\\u2069" in printed
    assert not any(ch in printed for ch in "\u202c\u202e\u2066\u2069")


def test_an_html_error_page_is_one_error_line(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    page = b"<html>\n<head><title>500 Internal Server Error</title></head>\n<body>\n<h1>500</h1>\n</body>\n</html>\n"
    with ScriptedChatServer(lambda body: {"raw": page, "rawStatus": 500}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "chat API returned 500: <html> <head><title>500 Internal Server Error" in err


def test_an_unreachable_model_api_is_named_in_the_error(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # httpx's own words were all: "error: [Errno 111] Connection refused"
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert chat(ws, "--base-url", url) == 1
    assert f"error: cannot reach the chat API at {url}: " in capsys.readouterr().err


def test_a_model_api_that_does_not_answer_in_time_is_named_in_the_error(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from helpers import Trickler
    from memdir.agent import ChatClient

    trickler = Trickler(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 9999\r\n\r\n", " ")
    real = ChatClient.__init__
    monkeypatch.setattr(ChatClient, "__init__", lambda self, *a, **kw: real(self, *a, **{**kw, "timeout": 0.5}))
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    try:
        assert chat(ws, "--base-url", trickler.url) == 1
    finally:
        trickler.close()
    assert f"error: the chat API at {trickler.url.rstrip('/')} did not answer within 0.5 s" in capsys.readouterr().err


def test_ctrl_c_during_an_answer_stops_that_turn_not_the_chat(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # at a terminal, Ctrl-C on a slow answer ended the whole chat ("memdir: interrupted")
    from memdir.agent import Agent

    real_send = Agent.send
    pressed = []

    def send(self: Agent, text: str, **kwargs: object) -> str:
        if not pressed:
            pressed.append(text)
            raise KeyboardInterrupt
        return real_send(self, text, **kwargs)

    monkeypatch.setattr(Agent, "send", send)
    with ScriptedChatServer(FactKeeperModel()) as server:
        monkeypatch.setattr(sys, "stdin", Terminal("a slow question\nhello again\n"))
        try:
            assert chat(ws, "--base-url", server.url) == 0
        except KeyboardInterrupt:  # (raised out of a test, it would stop the whole test run)
            pytest.fail("Ctrl-C during an answer ended the chat")
    captured = capsys.readouterr()
    assert "(interrupted)" in captured.err and "Okay, noted. (2 words received)" in captured.out


def test_ctrl_c_in_a_piped_chat_still_ends_it(ws: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from memdir.agent import Agent

    def send(self: Agent, text: str, **kwargs: object) -> str:
        raise KeyboardInterrupt

    monkeypatch.setattr(Agent, "send", send)
    with ScriptedChatServer(FactKeeperModel()) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\nagain\n"))
        with pytest.raises(KeyboardInterrupt):
            chat(ws, "--base-url", server.url)


def test_a_base_url_without_its_v1_gets_a_hint(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    with ScriptedChatServer(FactKeeperModel()) as server:
        url = server.url.removesuffix("/v1")
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", url) == 1
    err = capsys.readouterr().err
    assert "chat API returned 404" in err and f"is {url} the API's base URL?" in err and "ends in /v1" in err


def test_a_refused_api_key_names_the_variable(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CHAT_TEST_KEY", "wrong")
    with ScriptedChatServer(FactKeeperModel(), api_key="right") as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url) == 1
    assert "chat API returned 401" in (err := capsys.readouterr().err) and "check the API key in $CHAT_TEST_KEY" in err
    assert f"the chat API at {server.url} refused the key" in err  # which server: it was not said


class Endless(io.StringIO):
    """Standard input that never ends a line (``< /dev/zero``), then one ordinary line."""

    def __init__(self, size: int, then: str) -> None:
        super().__init__()
        self.left, self.then, self.biggest = size, then, 0

    def readline(self, limit: int = -1) -> str:
        assert limit > 0, "a line must be read with a bound"
        self.biggest = max(self.biggest, limit)
        if self.left:
            n = min(limit, self.left)
            self.left -= n
            return "x" * n + ("\n" if not self.left else "")
        line, self.then = self.then, ""
        return line


def test_an_endless_line_of_input_is_refused_with_memory_bounded(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # ``memdir chat < /dev/zero``: one line read whole took every byte of memory
    from memdir.chat_cli import MAX_MESSAGE_CHARS

    asked: list[str] = []

    def model(body: dict) -> dict:
        asked.append(body["messages"][-1]["content"])
        return {"content": "hi"}

    stdin = Endless(3 * MAX_MESSAGE_CHARS + 7, "hello\n")
    with ScriptedChatServer(model) as server:
        monkeypatch.setattr(sys, "stdin", stdin)
        assert chat(ws, "--base-url", server.url) == 0
    err = capsys.readouterr().err
    assert f"a message over {MAX_MESSAGE_CHARS:,} characters was not sent" in err
    assert asked == ["hello"] and stdin.biggest <= MAX_MESSAGE_CHARS + 1


def test_quitting_before_the_first_index_is_done_is_not_a_warning(
        ws: Path, caplog: pytest.LogCaptureFixture) -> None:
    # ``printf '/quit\n' | memdir chat`` on a new workspace: closing the chat stopped the
    # session-start index, and that printed "WARNING: memory sync at session start failed: ...
    # its Memory is being closed", as if something had gone wrong
    import logging

    from memdir.agent import MemoryIndexBackend
    from memdir.api import Memory

    mem = Memory(ws, state_dir=ws.parent / "state")
    backend = MemoryIndexBackend(mem, timezone="UTC")
    mem.close()  # what the chat does on /quit, here before the background index ran
    with caplog.at_level(logging.WARNING, logger="memdir"):
        backend._warm()
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def test_a_configuration_error_exits_1_as_in_every_other_command(tmp_path: Path, state_dir: Path) -> None:
    """``memdir -w /missing chat`` (or a broken config file) exited 2, the code for bad usage, where
    ``memdir -w /missing search x`` and every other command exit 1 for the same failure."""
    import subprocess

    from helpers import cli_env

    broken = tmp_path / "broken.json"
    broken.write_text("{not json")
    for flags in (["-w", str(tmp_path / "missing")], ["-w", str(tmp_path), "-c", str(broken)]):
        codes = []
        for command in (["chat", "--base-url", "http://127.0.0.1:9/v1"], ["search", "x"]):
            done = subprocess.run([sys.executable, "-m", "memdir", *flags, *command], input="", capture_output=True,
                                  text=True, timeout=60, env=cli_env(state_dir))
            assert "configuration error" in done.stderr and "Traceback" not in done.stderr, done.stderr
            codes.append(done.returncode)
        assert codes == [1, 1], (flags, codes)


CHAT_KEY = "k3y-0f-n0-kn0wn-sh4pe-1414213562"


@pytest.mark.parametrize("step", [
    {"status": 401, "error": f"Incorrect API key provided: {CHAT_KEY}"},
    {"raw": f"<html>proxy error for Bearer {CHAT_KEY}</html>".encode(), "rawStatus": 200},
])
def test_a_server_quoting_the_key_back_never_gets_it_printed(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], step: dict) -> None:
    """A model API quoting the key it was sent ("Incorrect API key provided: …", a proxy's error
    page) had the key printed in the chat's error line, as the server sent it."""
    monkeypatch.setenv("CHAT_TEST_KEY", CHAT_KEY)
    with ScriptedChatServer(lambda body: step) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url) == 1
    err = capsys.readouterr().err
    assert "error: chat API returned" in err and "***" in err
    assert CHAT_KEY not in err and CHAT_KEY[:12] not in err


def test_a_base_url_password_is_not_printed_when_the_server_cannot_be_reached(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """"cannot reach the chat API at http://user:hunter2pw@…" printed the base URL's password."""
    import socket

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert chat(ws, "--base-url", f"http://user:hunter2pw@127.0.0.1:{port}/v1") == 1
    err = capsys.readouterr().err
    assert f"cannot reach the chat API at http://user:***@127.0.0.1:{port}/v1" in err and "hunter2pw" not in err


def test_a_base_url_without_its_scheme_is_refused_without_its_password(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """"the base URL 'user:hunter2pw@127.0.0.1/v1' must start with http://" quoted the password."""
    monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
    assert chat(ws, "--base-url", "user:hunter2pw@127.0.0.1/v1") == 2
    err = capsys.readouterr().err
    assert "the base URL 'user:***@127.0.0.1/v1' must start with http://" in err and "hunter2pw" not in err


@pytest.mark.parametrize("key", [CHAT_KEY + "\r", CHAT_KEY + "\nX-Evil: 1", CHAT_KEY[:10] + "…" + CHAT_KEY[10:]])
def test_a_key_an_http_header_cannot_carry_is_refused_without_showing_it(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], key: str) -> None:
    """A key read with a trailing "\\r" (a Windows .env file) failed every turn as "cannot reach the
    chat API at …: Illegal header value b'Bearer <the key>\\r'", and a non-ASCII one with a bare
    "'ascii' codec can't encode"; it is refused before the chat starts, naming the variable only."""
    monkeypatch.setenv("CHAT_TEST_KEY", key)
    with ScriptedChatServer(FactKeeperModel()) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url) == 2
        assert server.requests == []
    err = capsys.readouterr().err
    assert err == ("memdir chat: the key in $CHAT_TEST_KEY holds a line break, control or non-ASCII character "
                   "(pasted with it?), which an HTTP header cannot carry\n")


def test_the_demo_without_a_writable_temporary_folder_says_so(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # in a sandbox whose /tmp, /var/tmp and current folder are read-only, 'memdir chat --demo' (the
    # README's first try) failed with "memdir: [Errno 2] No usable temporary directory found in [...]"
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-such-folder"))
    assert chat_main(["--demo"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("memdir chat --demo: it needs a folder it can write for its scratch workspace") and \
        err.rstrip().endswith("point TMPDIR at one") and err.count("\n") == 1, err


@pytest.mark.parametrize(("status", "error"), [
    (404, {"error": {"message": 'model "llama9" not found, try pulling it first', "type": "api_error"}}),  # Ollama
    (404, {"error": {"message": "The model `llama9` does not exist or you do not have access to it.",
                     "type": "invalid_request_error", "code": "model_not_found"}}),  # OpenAI, Groq
    (404, {"object": "error", "message": "The model `llama9` does not exist.", "type": "NotFoundError",
           "code": 404}),  # vLLM
    (400, {"error": {"message": "llama9 is not a valid model ID", "code": 400}}),  # OpenRouter
])
def test_a_model_the_server_does_not_serve_is_named_with_the_server(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], status: int,
        error: dict[str, Any]) -> None:
    # a 404 for the model was answered "is http://…/v1 the API's base URL? (…/chat/completions was
    # not found; it often ends in /v1)": the URL was right, and the model was never named
    monkeypatch.setenv("CHAT_TEST_KEY", "sk-secret-key-1234567890")
    with ScriptedChatServer(lambda body: {"raw": error, "rawStatus": status}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url, "--model", "llama9") == 1
    err = capsys.readouterr().err
    assert f"the model 'llama9' is not served at {server.url}" in err and "--model" in err
    assert f"{server.url}/models" in err and "ends in /v1" not in err and "sk-secret" not in err


def test_a_key_wanted_and_not_set_is_said_so(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # a local server started with --api-key, the variable not set: 'check the API key in
    # $CHAT_TEST_KEY', a key that was never there, and no word of which server wanted one
    monkeypatch.delenv("CHAT_TEST_KEY", raising=False)
    with ScriptedChatServer(FactKeeperModel(), api_key="right") as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url) == 1
    err = capsys.readouterr().err
    assert "chat API returned 401" in err
    assert f"the chat API at {server.url} wants an API key and none was sent: $CHAT_TEST_KEY is not set" in err


def test_a_reply_of_no_text_is_said_so(ws: Path, monkeypatch: pytest.MonkeyPatch,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    # a reasoning model that spent its tokens thinking (OpenRouter, vLLM and llama.cpp send the
    # thinking as reasoning_content, content empty): the chat printed nothing at all, as for a
    # silent NO_REPLY, and the user was left waiting
    reply = {"choices": [{"index": 0, "finish_reason": "length", "message": {
        "role": "assistant", "content": "", "reasoning_content": "Let me think about the dog. " * 40}}]}
    with ScriptedChatServer(lambda body: {"raw": reply}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("what is my dog called?\n"))
        assert chat(ws, "--base-url", server.url) == 0
    captured = capsys.readouterr()
    assert captured.out == ""
    assert ("memdir chat: the model sent no text, only its reasoning (1,120 characters); it stopped at its "
            "token limit (finish_reason 'length')") in captured.err


def test_a_refusal_sent_beside_no_content_is_shown_and_kept_out_of_memory(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # OpenAI's models say a refusal in message.refusal, content null: the chat printed nothing
    reply = {"choices": [{"index": 0, "finish_reason": "stop", "message": {
        "role": "assistant", "content": None, "refusal": "I'm sorry, I can't help with that."}}]}
    with ScriptedChatServer(lambda body: {"raw": reply}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("help me with this\n/new\n"))
        assert chat(ws, "--base-url", server.url) == 0
    captured = capsys.readouterr()
    assert "memdir chat: the model refused: I'm sorry, I can't help with that." in captured.err
    saved = "".join(p.read_text() for p in (ws / "memory").glob("*.md"))
    assert "user: help me with this" in saved and "sorry" not in saved


def test_an_azure_deployment_that_does_not_exist_is_named(
        ws: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    # Azure OpenAI's 404 for a deployment name it does not have got the hint for a base URL
    # without its /v1, which an Azure base URL never has
    error = {"error": {"code": "DeploymentNotFound", "message": "The API deployment for this resource does not "
                       "exist. If you created the deployment within the last 5 minutes, please wait a moment and "
                       "try again."}}
    with ScriptedChatServer(lambda body: {"raw": error, "rawStatus": 404}) as server:
        monkeypatch.setattr(sys, "stdin", io.StringIO("hello\n"))
        assert chat(ws, "--base-url", server.url + "?api-version=2024-10-21") == 1
    err = capsys.readouterr().err
    assert "ends in /v1" not in err
    assert (f"there is no deployment of that name at {server.url}: the base URL ends in "
            "/openai/deployments/<its name> as the Azure portal lists it") in err
