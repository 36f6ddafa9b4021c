"""Credentials never reach what memdir prints: a base URL's ``user:password@`` and the API key,
against a real loopback server that echoes the request back in its errors, through the real CLI
(``-vv`` logs, ``--json`` documents, ``status``, ``config show``)."""

from __future__ import annotations

import base64
import json
import subprocess
import sys
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from helpers import cli_env

PASSWORD = "hunter2-proxy-pw"
KEY = "k3y-0f-n0-kn0wn-sh4pe-2718281828"


class _Echo(BaseHTTPRequestHandler):
    """Every request answered 400 with its path and headers quoted back, as some proxies do; a
    path ending in ``/redirect`` is sent to another host."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if self.path.endswith("/embeddings") and "redirect" in self.path:
            self.send_response(302)
            self.send_header("Location", "http://elsewhere.invalid/v1/embeddings")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"error": {"message": f"rejected {self.path} {dict(self.headers)}"}}).encode()
        self.send_response(400)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def echo_port() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _leaks(text: str) -> list[str]:
    token = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    return [s for s in (PASSWORD, KEY, token) if s in text]


def _config(tmp_path: Path, port: int, path: str = "/v1") -> Path:
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "fallback": "none", "remote": {
        "baseUrl": f"http://user:{PASSWORD}@127.0.0.1:{port}{path}", "apiKey": KEY, "maxRetries": 0}}}))
    return cfg


def test_a_base_url_password_is_never_printed(tmp_path: Path, make_workspace, run_cli, echo_port: int) -> None:
    """``-vv`` printed httpx's request line with the base URL's password in it; ``config show`` (and
    its ``--json``) printed ``remote.baseUrl`` as written while masking ``apiKey``; a server quoting the
    request's headers back put the Basic token httpx makes of ``user:password`` into the embedding
    error that ``index``, ``search --json`` and ``status`` print."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    base = ("-w", str(ws), "-c", str(_config(tmp_path, echo_port)))
    runs = {args: run_cli(*args, *base) for args in (
        ("index", "--json", "-vv"), ("index", "-v"), ("search", "heron", "--json", "-vv"), ("status", "--deep"),
        ("status", "--json"), ("config", "show"), ("config", "show", "--json"))}
    for args, proc in runs.items():
        assert proc.returncode == 0, (args, proc.stderr)
        assert _leaks(proc.stdout + proc.stderr) == [], (args, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "HTTP Request: POST http://user:***@127.0.0.1:" in runs["index", "--json", "-vv"].stderr
    assert "openai embeddings failed: 400" in runs["status", "--deep"].stdout  # the error is still told
    assert f'"http://user:***@127.0.0.1:{echo_port}/v1"' in runs["config", "show"].stdout


def test_a_refused_redirect_names_the_origin_without_its_password(tmp_path: Path, make_workspace, run_cli,
                                                                  echo_port: int) -> None:
    """The message for a redirect to another host named the configured origin with its
    ``user:password@``, in the warning, the ``--json`` document and ``status``."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    built = run_cli("index", "--json", "-w", str(ws), "-c", str(_config(tmp_path, echo_port, "/redirect/v1")))
    assert built.returncode == 0, built.stderr
    warnings = json.loads(built.stdout)["warnings"]
    assert any("refused (memdir only sends requests to http://user:***@127.0.0.1:" in w for w in warnings), warnings
    assert _leaks(built.stdout + built.stderr) == []


@pytest.mark.parametrize("remote", [
    {"apiKey": [KEY]},  # a key given as a list (TOML "apiKey = [..]"): refused, quoting the key
    {"apiKey": "a", "headers": {"Authorization": ["Bearer " + KEY]}},
    {"apiKey": "a", "baseUrl": f"ftp://user:{PASSWORD}@127.0.0.1/v1"},  # refused base URLs quoted it whole
    {"apiKey": "a", "baseUrl": f"http://user:{PASSWORD}@[::1/v1"},
    {"apiKey": "a", "baseUrl": f"http://user:{PASSWORD}@127.0.0.1:99999/v1"},
    {"apiKey": "a", "baseUrl": f"user:{PASSWORD}@127.0.0.1/v1"},
])
def test_a_refused_setting_never_quotes_its_credential(tmp_path: Path, make_workspace, run_cli, remote) -> None:
    """A credential setting refused by validation, or a base URL refused as unusable, was quoted
    whole in the error every command printed (and in the ``--json`` failure document)."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "fallback": "none", "remote": remote}}))
    runs = {args: run_cli(*args, "-w", str(ws), "-c", str(cfg)) for args in (("index", "--json"), ("config", "show"))}
    for args, proc in runs.items():
        assert _leaks(proc.stdout + proc.stderr) == [], (args, proc.stdout, proc.stderr)
    failed = runs["index", "--json"]
    assert failed.returncode == 1 and json.loads(failed.stdout)["ok"] is False  # still refused, and said why


@pytest.mark.parametrize("name", ["openai", "gemini", "voyage", "mistral", "ollama"])
def test_a_providers_info_and_repr_hold_no_credential(name: str) -> None:
    """``info()`` ("everything status may show, no credentials") gave the base URL with its
    ``user:password@`` as written, and so did the provider's repr."""
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import make_cfg

    provider = create_provider(name, make_cfg(name, f"http://user:{PASSWORD}@127.0.0.1:9/v1", api_key=KEY), {})
    try:
        shown = json.dumps(provider.info()) + repr(provider)
        assert _leaks(shown) == [] and "http://user:***@127.0.0.1:9" in shown  # (ollama drops the /v1)
    finally:
        provider.close()


def test_credential_headers_quoted_back_by_the_server_are_masked(tmp_path: Path, make_workspace, run_cli,
                                                                 echo_port: int) -> None:
    """Only the API key was scrubbed from a server's error: a ``Cookie`` or ``Proxy-Authorization``
    given in ``remote.headers`` (which ``config show`` masks) came back in the warning, ``--json``
    and ``status`` as the server quoted it."""
    cookie, proxy = "session=c00kie-0f-n0-kn0wn-sh4pe", "cHJveHk6czNjcjN0LXByMHh5"
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "fallback": "none", "remote": {
        "baseUrl": f"http://127.0.0.1:{echo_port}/v1", "apiKey": KEY, "maxRetries": 0,
        "headers": {"Cookie": cookie, "Proxy-Authorization": f"Basic {proxy}", "X-Team": "herons"}}}}))
    base = ("-w", str(ws), "-c", str(cfg))
    built, status = run_cli("index", "--json", *base), run_cli("status", "--deep", *base)
    assert built.returncode == status.returncode == 0, built.stderr + status.stderr
    out = built.stdout + built.stderr + status.stdout + status.stderr
    assert "'Cookie': '***'" in built.stdout  # the server's answer is still quoted, masked
    assert [s for s in (cookie, proxy, KEY) if s in out] == []


def test_the_settings_repr_holds_no_credential(make_workspace) -> None:
    """A program printing or logging ``Memory(...).settings`` (a dataclass-like repr, as any
    pydantic model's) showed the API keys, credential headers and the database URL's password."""
    from memdir import Memory

    ws = make_workspace({"MEMORY.md": "- a note\n"})
    config = {"memorySearch": {"provider": "none", "remote": {"apiKey": KEY, "headers": {"X-Auth-Token": PASSWORD}},
                               "store": {"dsn": f"postgresql://app:{PASSWORD}@db.example/memdir"}},
              "longTermMemory": {"embedding": {"apiKey": KEY}}}
    with Memory(ws, config=config) as mem:
        shown = repr(mem.settings)
        assert mem.settings.memory_search.remote.api_key == KEY  # (still there for the code that sends it)
    assert "remote=RemoteConfig(" in shown and _leaks(shown) == [], shown


def test_a_key_in_the_base_urls_query_is_never_printed(tmp_path: Path, make_workspace, run_cli,
                                                       echo_port: int) -> None:
    """A base URL written with its key in the query (``…/v1beta?key=…``, as Google's examples do)
    was quoted whole: in the error refusing it (``index``, ``--json``, ``status``), by ``config
    show``; and for ``memdir chat``, which keeps a query, at ``-vv`` in httpx's request lines and
    in the error quoting a server that echoes the request's path."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "gemini", "fallback": "none", "remote": {
        "baseUrl": f"https://generativelanguage.googleapis.com/v1beta?key={KEY}", "apiKey": "a"}}}))
    base = ("-w", str(ws), "-c", str(cfg))
    runs = [run_cli(*args, *base) for args in (("index", "--json"), ("status",), ("config", "show"))]
    chat = subprocess.run([sys.executable, "-m", "memdir", *base, "-vv", "chat", "--base-url",
                           f"http://127.0.0.1:{echo_port}/v1?api-version=1&key={KEY}", "--model", "m"],
                          input="hello\n", capture_output=True, text=True, timeout=120,
                          env=cli_env(tmp_path / "state"))
    for proc in (*runs, chat):
        assert _leaks(proc.stdout + proc.stderr) == [], (proc.args, proc.stdout[-2000:], proc.stderr[-2000:])
    assert "v1beta?key=***' has a query" in runs[0].stdout  # still refused, and said why
    assert '"https://generativelanguage.googleapis.com/v1beta?key=***"' in runs[2].stdout
    assert "/v1/chat/completions?api-version=1&key=*** " in chat.stderr  # httpx's line, the rest kept
    assert "rejected /v1/chat/completions?api-version=1&key=***" in chat.stdout + chat.stderr


def test_a_proxys_password_quoted_back_is_masked_whole(tmp_path: Path, make_workspace, run_cli,
                                                       echo_port: int) -> None:
    """A proxy from ``HTTP_PROXY=http://user:password@…`` that answers with the request it got
    (its headers quoted) put the ``Proxy-Authorization`` httpx made of that password into the
    embedding error (``index --json``) and the chat's, masked by its shape only: the first 6 and
    last 4 characters of the token were kept, part of the user name and the password's end."""
    ws = make_workspace({"MEMORY.md": "The heron nests by the weir.\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "fallback": "none", "remote": {
        "baseUrl": "http://api.example.test/v1", "apiKey": KEY, "maxRetries": 0}}}))
    proxy = {"HTTP_PROXY": f"http://user:{PASSWORD}@127.0.0.1:{echo_port}", "NO_PROXY": ""}
    built = run_cli("-w", str(ws), "-c", str(cfg), "index", "--json", env=proxy)
    chat = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "-c", str(cfg), "chat", "--base-url",
                           "http://api.example.test/v1", "--model", "m"], input="hello\n", capture_output=True,
                          text=True, timeout=120, env=cli_env(tmp_path / "state", **proxy))
    token = base64.b64encode(f"user:{PASSWORD}".encode()).decode()
    for proc in (built, chat):
        out = proc.stdout + proc.stderr
        assert "'Proxy-Authorization': 'Basic ***'" in out, out[-2000:]  # the server's answer still quoted
        assert _leaks(out) == [] and token[:6] not in out and token[-4:] not in out, out[-2000:]
