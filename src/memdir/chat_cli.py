"""``memdir chat``: the reference agent loop at a terminal, and ``--demo`` to see it work offline.

The options are defined here with argparse only (no heavy imports), so ``memdir --help`` and
``memdir chat --help`` list them with their defaults and environment variables; the loop itself
(:mod:`memdir.agent`) is imported when a chat starts.

``--demo`` needs no API key and no network: it starts the scripted loopback chat server from
:mod:`memdir.testing.chat_server` (a rule-based stand-in for an LLM that follows memdir's
protocols), gives it a throw-away workspace, and plays a short conversation that shows every
part of the loop: a fact told in chat, the pre-compaction flush writing it to today's log,
``/new`` saving the session with the hook, and later questions answered with ``memory_search``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

DEFAULT_BASE_URL = "https://api.openai.com/v1"
DEFAULT_CHAT_MODEL = "gpt-4o-mini"
#: Longest message a line of input may carry: a line read whole grew without bound (``memdir chat
#: < /dev/zero`` took every byte of memory), and no model's context holds more.
MAX_MESSAGE_CHARS = 1_000_000

CHAT_EPILOG = """\
environment:
  OPENAI_BASE_URL     default for --base-url
  MEMDIR_CHAT_MODEL   default for --model
  OPENAI_API_KEY      the API key (or the variable named by --api-key-env)

Type a message per line; /new or /reset starts a new session (the previous one is saved to
memory/YYYY-MM-DD-<slug>.md), /quit or Ctrl-D ends; Ctrl-C stops an answer, or at the prompt
ends. Try it with no key: memdir chat --demo"""


def add_chat_arguments(parser: argparse.ArgumentParser) -> None:
    """The chat options, shared by ``memdir chat`` and :func:`chat_main`."""
    group = parser.add_argument_group("chat options")
    group.add_argument("--base-url", help=f"OpenAI-compatible API base URL (default: $OPENAI_BASE_URL, "
                                          f"else {DEFAULT_BASE_URL})")
    group.add_argument("--model", help=f"chat model (default: $MEMDIR_CHAT_MODEL, else {DEFAULT_CHAT_MODEL})")
    group.add_argument("--api-key-env", default="OPENAI_API_KEY",
                       help="environment variable holding the API key (default: OPENAI_API_KEY); "
                            "not needed for a local server given with --base-url")
    group.add_argument("--session", default="main",
                       help="session key, or the part after agent:<id>: (default: main)")
    group.add_argument("--context-window", type=int, default=None,
                       help="model context window in tokens (default: contextTokens from the config, 200000)")
    group.add_argument("--demo", action="store_true",
                       help="run a scripted conversation offline against a built-in stand-in model in a "
                            "temporary workspace: no API key, no network, nothing of yours is touched")


#: Control characters, and the bidirectional embeddings, overrides and isolates that make a terminal
#: show text in another order than it is (as :func:`memdir.cli.for_terminal` spells them).
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def for_terminal(text: str, stream: Any) -> str:
    """``text`` with control characters shown as ``\\xNN`` when ``stream`` is a terminal: a reply
    (or an API's error page) echoing a note's escape sequences could clear the screen, rewrite
    the lines above or set the clipboard (OSC 52).  Piped output stays as it came."""
    isatty = getattr(stream, "isatty", None)
    if not (callable(isatty) and isatty()):
        return text
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if m.group() < "\u0100" else f"\\u{ord(m.group()):04x}",
                        text)


def describe_failure(exc: BaseException, client: Any, key_env: str = "OPENAI_API_KEY") -> str:
    """A failed turn in words that say where it went wrong: httpx says only "timed out" or
    "[Errno 111] Connection refused", not which server, nor after how long."""
    import httpx

    url = client.shown_url
    if isinstance(exc, httpx.ConnectTimeout):
        from memdir.embeddings.http_client import CONNECT_TIMEOUT

        return (f"could not connect to the chat API at {url} within {min(client.timeout, CONNECT_TIMEOUT):g} s "
                "(is the host down, or a firewall dropping the connection?)")
    if isinstance(exc, httpx.TimeoutException):
        return f"the chat API at {url} did not answer within {client.timeout:g} s ({exc or 'timed out'})"
    if isinstance(exc, httpx.TransportError):
        from memdir.embeddings.http_deadline import certificate_problem, proxy_for

        http = getattr(client, "_http", None)
        via = proxy_for(http, f"{http.base_url}chat/completions") if http is not None else None
        through = f" through the proxy {via} (set by the *_PROXY environment variables)" if via else ""
        return f"cannot reach the chat API at {url}{through}: {certificate_problem(exc) or exc}"
    if "deploymentnotfound" in str(exc).lower():  # Azure OpenAI: the deployment is named in the URL
        return (f"{exc} — there is no deployment of that name at {url}: the base URL ends in "
                "/openai/deployments/<its name> as the Azure portal lists it")
    if _model_unknown(exc):  # before the 404's base-URL hint: the URL was right
        return (f"{exc} — the model {client.model!r} is not served at {url}: --model (or $MEMDIR_CHAT_MODEL) names "
                f"another; {url}/models lists those it serves")
    if getattr(exc, "status", None) == 401 and not os.environ.get(key_env):
        return (f"{exc} — the chat API at {url} wants an API key and none was sent: ${key_env} is not set "
                "(--api-key-env names another variable)")
    if getattr(exc, "status", None) in (401, 403):
        return (f"{exc} — the chat API at {url} refused the key: check the API key in ${key_env} "
                "(--api-key-env names another variable)")
    if getattr(exc, "status", None) == 404:  # the usual cause: a base URL without its /v1
        return f"{exc} — is {url} the API's base URL? ({url}/chat/completions was not found; it often ends in /v1)"
    return str(exc) or type(exc).__name__


#: How servers say the model asked for is not theirs: OpenAI and Groq "The model `x` does not exist",
#: Ollama 'model "x" not found', OpenRouter "x is not a valid model ID", Mistral "Invalid model: x".
_MODEL_UNKNOWN = ("not found", "does not exist", "not a valid model", "invalid model", "unknown model",
                  "no such model", "unable to access model")


def _model_unknown(exc: BaseException) -> bool:
    """Whether a refused request says the model is not served there (a 404 of it read as a wrong base URL)."""
    text = str(exc).lower()
    if "model_not_found" in text or "model_not_available" in text:
        return True
    return getattr(exc, "status", None) in (400, 404) and "model" in text and any(w in text for w in _MODEL_UNKNOWN)


def chat_main(argv: list[str] | None = None) -> int:
    """``memdir chat``: talk to an OpenAI-compatible model with this workspace as its memory."""
    parser = argparse.ArgumentParser(prog="memdir chat", description=chat_main.__doc__, epilog=CHAT_EPILOG,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_chat_arguments(parser)
    for flag in ("--workspace", "--state-dir", "--agent", "--config"):
        parser.add_argument(flag, default=None)
    # ("-q" was refused as an unrecognized argument here, where `memdir chat -q` takes it)
    parser.add_argument("--quiet", "-q", action="store_true", help="print only errors on stderr (no notes)")
    args = parser.parse_args(argv)
    from memdir import cli

    before = cli._QUIET_NOTICES[0]
    cli._QUIET_NOTICES[0] = args.quiet
    try:
        return run_chat(args)
    finally:
        cli._QUIET_NOTICES[0] = before


def run_chat(args: argparse.Namespace) -> int:
    """Run the loop on stdin/stdout with the options in ``args`` (see :func:`add_chat_arguments`)."""
    if getattr(args, "demo", False):
        return run_demo()
    from memdir.agent import Agent, AgentOptions, ChatClient, MemoryIndexBackend
    from memdir.api import Memory
    from memdir.config import ConfigError, load_config
    from memdir.sessions.store import SessionStore, session_key

    base_url = args.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    model = args.model or os.environ.get("MEMDIR_CHAT_MODEL") or DEFAULT_CHAT_MODEL
    # Said before the chat starts, once: a URL without http:// failed every turn with httpx's words,
    # and a window of -5 compacted the conversation at every turn.
    if not base_url.lower().startswith(("http://", "https://")):
        from memdir.redact import shown_url

        print(f"memdir chat: the base URL {shown_url(base_url)!r} must start with http:// or https:// "
              "(e.g. http://127.0.0.1:8000/v1)", file=sys.stderr)
        return 2
    if sys.stdin is None:  # `memdir chat <&-` failed with "'NoneType' object has no attribute 'isatty'"
        print("memdir chat: the chat reads your messages from stdin, and stdin is closed", file=sys.stderr)
        return 2
    if args.context_window is not None and args.context_window <= 0:
        print(f"memdir chat: --context-window must be a positive number of tokens, not {args.context_window}",
              file=sys.stderr)
        return 2
    try:
        loaded = load_config(config_path=getattr(args, "config", None), workspace=getattr(args, "workspace", None),
                             agent_id=getattr(args, "agent", None), state_dir=getattr(args, "state_dir", None))
    except ConfigError as exc:  # a failure (1) as in every other command, not bad usage (it was 2)
        print(f"memdir chat: configuration error: {exc}", file=sys.stderr)
        return 1
    settings = loaded.settings
    api_key = os.environ.get(args.api_key_env) or None
    from memdir.embeddings.remote_config import unsendable

    if api_key is not None and unsendable(api_key):
        # Said here, without the key: every turn failed as "cannot reach the chat API at …: Illegal
        # header value b'Bearer sk-…\r'" (a key read from a Windows file), the key in full.
        print(f"memdir chat: the key in ${args.api_key_env} holds a line break, control or non-ASCII character "
              "(pasted with it?), which an HTTP header cannot carry", file=sys.stderr)
        return 2
    if api_key is None and "api.openai.com" in base_url:
        print(f"memdir chat: set {args.api_key_env} (or pass --base-url for a local server; "
              "memdir chat --demo runs without any key)", file=sys.stderr)
        return 2
    overrides = {"context_window": args.context_window} if args.context_window else {}
    options = AgentOptions.from_settings(settings, **overrides)
    from memdir.cli import _notice  # (left out under -q, as every command's notices; run_chat is the CLI's)

    memory = Memory(config=loaded, notice=_notice)
    long_term = None
    if settings.long_term_memory.enabled:
        try:
            long_term = memory.long_term
        except Exception as exc:  # e.g. the lancedb extra is missing: say so before the chat starts
            print(f"memdir chat: long-term memory: {exc}", file=sys.stderr)
            memory.close()
            return 1  # as `memdir ltm` without the extra: a failure, not bad usage
    client = ChatClient(base_url, model, api_key)
    backend = MemoryIndexBackend(memory, settings.user_timezone)
    backend.start()  # index in the background (sync.onSessionStart) and watch the files (sync.watch)
    agent = Agent(client=client, backend=backend,
                  store=SessionStore(settings.sessions_dir), session_key=session_key(settings.agent_id, args.session),
                  workspace=settings.workspace_path, options=options, long_term=long_term)
    interactive = sys.stdin.isatty()
    _utf8_input()
    turns = failed = 0
    try:
        while True:
            if interactive:
                print("you> ", end="", flush=True)
            line = sys.stdin.readline(MAX_MESSAGE_CHARS + 1)
            if not line:
                if interactive:  # Ctrl-D: the shell's prompt goes on a line of its own
                    print()
                break
            if len(line) > MAX_MESSAGE_CHARS and not line.endswith("\n"):
                if not _skip_rest_of_line():
                    break
                print(f"memdir chat: a message over {MAX_MESSAGE_CHARS:,} characters was not sent", file=sys.stderr)
                continue
            text = line.strip()
            if not text:
                continue
            if text in ("/quit", "/exit"):
                break
            turn = text.lower() not in ("/new", "/reset")  # a command may not ask the model at all
            turns += turn
            try:
                reply = agent.send(text)
            except KeyboardInterrupt as exc:
                from memdir.cli import terminated

                if not interactive or terminated(exc):  # (SIGTERM, SIGHUP: the chat ends, not the turn)
                    raise
                # Ctrl-C on a slow answer stops that turn, not the chat (Ctrl-C at the prompt ends
                # it): the next request answers what the turn left unanswered (wire_messages)
                print("\n(interrupted)", file=sys.stderr, flush=True)
                failed += turn
                continue
            except Exception as exc:  # keep the session alive; the transcript has what happened
                message = f"error: {describe_failure(exc, client, args.api_key_env)}"
                print(for_terminal(message, sys.stderr), file=sys.stderr)
                failed += turn
                continue
            if reply:
                print(for_terminal(reply, sys.stdout), flush=True)
            elif turn and agent.empty_reply:  # not a silent NO_REPLY: nothing printed left the user waiting
                print(for_terminal(f"memdir chat: {agent.empty_reply}", sys.stderr), file=sys.stderr, flush=True)
    finally:
        client.close()
        memory.close()
    # a script piping turns in learns that none got through (a wrong URL, a refused connection)
    return 1 if turns and failed == turns else 0


def _utf8_input() -> None:
    """Read messages as UTF-8 where the locale says ASCII (``LC_ALL=C`` with ``PYTHONUTF8=0``):
    "le café" reached the model, and the transcript, as "le caf\ufffd\ufffd"."""
    import codecs

    encoding = getattr(sys.stdin, "encoding", None) or ""
    try:
        ascii_in = codecs.lookup(encoding).name == "ascii"
    except LookupError:
        return
    if ascii_in and hasattr(sys.stdin, "reconfigure"):
        try:
            sys.stdin.reconfigure(encoding="utf-8", errors="replace")
        except (ValueError, OSError):  # (already read from, or detached): as it is
            pass


def _skip_rest_of_line() -> bool:
    """Read past the rest of an over-long line a piece at a time (memory stays bounded); False at
    the end of the input."""
    while True:
        piece = sys.stdin.readline(MAX_MESSAGE_CHARS)
        if not piece:
            return False
        if piece.endswith("\n"):
            return True


# --- the offline demo ---------------------------------------------------------------------------

DEMO_MEMORY = """\
# Long-term memory

- The billing service publishes its events to Kafka, because ordering per customer matters.
- Priya owns the public API; pagination is cursor-based.
"""

DEMO_SCRIPT = (
    ("say", "Remember that the staging database password rotates every 90 days."),
    ("say", "Remember that the team standup moved to 9:30."),
    ("flush", ""),
    ("say", "/new"),
    ("say", "Which queue does the billing service publish its events to?"),
    ("say", "How often does the staging database password rotate?"),
)


def run_demo(out: Any = None) -> int:
    """Play :data:`DEMO_SCRIPT` against the scripted model; print every step; return 0 on success."""
    from memdir.agent import Agent, AgentOptions, ChatClient, MemoryIndexBackend
    from memdir.api import Memory
    from memdir.config import load_config
    from memdir.sessions.store import SessionStore, session_key
    from memdir.testing.chat_server import FactKeeperModel, ScriptedChatServer

    out = out or sys.stdout

    def say(text: str = "") -> None:
        print(text, file=out, flush=True)

    class ShowingBackend(MemoryIndexBackend):
        """Prints each memory tool call the model makes, so the loop can be followed."""

        def search(self, query: str, max_results: int | None = None,
                   min_score: float | None = None) -> list[dict[str, Any]]:
            hits = super().search(query, max_results=max_results, min_score=min_score)
            top = f", best: {hits[0]['path']}:{hits[0]['startLine']}-{hits[0]['endLine']}" if hits else ""
            say(f"    [tool] memory_search({query!r}) -> {len(hits)} result(s){top}")
            return hits

        def get(self, path: str, from_line: int | None = None, lines: int | None = None) -> dict[str, Any]:
            got = super().get(path, from_line=from_line, lines=lines)
            say(f"    [tool] memory_get({path!r}) -> {len(got['text'].splitlines())} line(s)")
            return got

        def append_daily(self, text: str, day: str | None = None) -> str:
            rel = super().append_daily(text, day)
            say(f"    [tool] memory_append -> {rel}: {' / '.join(text.splitlines())}")
            return rel

    try:
        scratch = tempfile.TemporaryDirectory(prefix="memdir-demo-")
    except OSError as exc:  # a sandbox with no writable temporary folder: "[Errno 2] No usable temporary …"
        print(f"memdir chat --demo: it needs a folder it can write for its scratch workspace, and none of the "
              f"temporary folders can be ({exc.strerror or exc}): point TMPDIR at one", file=sys.stderr)
        return 1
    with scratch as tmp:
        ws, state = Path(tmp) / "workspace", Path(tmp) / "state"
        ws.mkdir()
        (ws / "MEMORY.md").write_text(DEMO_MEMORY, encoding="utf-8")
        say("memdir chat demo: the whole agent loop, offline, against a scripted stand-in model")
        say(f"(temporary workspace {ws}; embeddings off to start instantly; deleted at the end)")
        say()
        # Without the environment: MEMDIR_CONFIG / MEMDIR_INDEX_PATH / MEMDIR_STORE_DRIVER are the
        # user's, and the demo wrote its index into the user's index file (or database) and searched
        # the user's extraPaths.
        demo_config = load_config(workspace=ws, state_dir=state, env={},
                                  overrides={"memorySearch": {"provider": "none"}})
        with ScriptedChatServer(FactKeeperModel()) as server, Memory(config=demo_config) as memory:
            settings = memory.settings
            client = ChatClient(server.url, "memdir-demo")
            agent = Agent(client=client, backend=ShowingBackend(memory, "UTC"),
                          store=SessionStore(settings.sessions_dir),
                          session_key=session_key(settings.agent_id, "demo"), workspace=ws,
                          options=AgentOptions.from_settings(settings, timezone="UTC"))
            try:
                for kind, text in DEMO_SCRIPT:
                    if kind == "flush":
                        say("(context nearly full: the pre-compaction flush asks the model to save durable notes)")
                        agent.run_flush()
                        continue
                    say(f"you> {text}")
                    reply = agent.send(text)
                    say(f"assistant> {reply or '(no reply)'}")
                    say()
            finally:
                client.close()
            files = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*.md"))
            answered = "90 days" in (agent.history[-1].get("content") or "")
        say(f"memory files written: {', '.join(files)}")
        say(f"model calls: {agent.stats.model_calls}, notes appended: {agent.stats.notes_appended}, "
            f"sessions saved by the hook: {len(agent.stats.hook_files)}")
    if not answered:
        print("memdir chat --demo: the last answer did not come from memory", file=sys.stderr)
        return 1
    say("Next: memdir chat --base-url http://127.0.0.1:8000/v1 --model <name>   (any OpenAI-compatible server)")
    return 0


__all__ = ["add_chat_arguments", "chat_main", "run_chat", "run_demo"]
