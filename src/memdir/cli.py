"""The ``memdir`` command line: a thin layer over :class:`memdir.api.Memory`.

Imports stay lazy so ``memdir search`` starts fast; global options (``--workspace``,
``--agent``, ``--config``, ``--state-dir``, ``-v``, ``-q``) are accepted before or after the
command.  Exit codes: 0 success, 1 failure (with a one-line reason on stderr), 2 bad usage,
141 when the reader of stdout went away (``memdir search x --json | head``), as a Unix tool
killed by SIGPIPE; stdout stays quiet then.  Shell completion comes from ``argcomplete``
(``memdir completion bash|zsh|fish``), imported only while completing.
"""

from __future__ import annotations

import argparse
import codecs
import io
import json
import logging
import math
import os
import re
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

log = logging.getLogger("memdir.cli")

_GLOBALS: tuple[tuple[str, str | None, str, dict[str, Any]], ...] = (
    ("--workspace", "-w", "workspace folder (default: $MEMDIR_WORKSPACE or the current folder)", {}),
    ("--agent", "-a", "agent id: a named index <stateDir>/memory/<id>.sqlite (default: $MEMDIR_AGENT; "
                      "without one each workspace gets its own index)", {}),
    ("--config", "-c", "config file (TOML, JSON or JSON5; default: memdir.toml/.json/.json5 in the "
                       "workspace, then in the state folder)", {}),
    ("--state-dir", None, "state folder (default: $MEMDIR_STATE_DIR or ~/.memdir)", {}),
    ("--verbose", "-v", "log what memdir does on stderr (-vv: debug, with tracebacks)", {"action": "count"}),
    ("--quiet", "-q", "print only errors on stderr (no notes, warnings or progress)", {"action": "store_true"}),
)
_EXIT_SIGPIPE = 141


class CliError(Exception):
    """A failure to report as one line on stderr with exit code 1."""

    exit_code = 1


class UsageError(CliError):
    """Bad usage (a missing argument argparse cannot see): exit code 2."""

    exit_code = 2


class _UsageExit(SystemExit):
    """argparse's exit for bad usage (code 2), keeping its message for ``--json`` (see :func:`main`)."""

    def __init__(self, message: str):
        super().__init__(2)
        self.message = message


#: A negative number, as a value on the command line (``-5``, ``-0.5``, ``-1e3``).
_NEGATIVE = re.compile(r"-(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?")


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors say what argparse says and exit as it does, with the
    message kept, so a run with ``--json`` can also print it as the failure object on stdout."""

    def _parse_optional(self, arg_string: str) -> Any:
        """A negative number is a value, never an option (unless it is one: ``-0``).

        Why: search's ``-0`` (``--null``) made argparse take every negative number for an option,
        so ``--max-results -5`` said "expected one argument" where ``--max-results=-5`` says what
        is wrong with -5, and ``--min-score -0.5`` was read as ``-0`` given ``.5``."""
        if _NEGATIVE.fullmatch(arg_string) and arg_string not in self._option_string_actions:
            return None
        return super()._parse_optional(arg_string)

    def parse_args(self, args: Any = None, namespace: Any = None) -> Any:  # type: ignore[override]
        """argparse's, with a hint for a query or a note that starts with ``-``: ``memdir search
        --dry-run`` (looking for notes about a flag) or ``memdir append -x`` said only
        "unrecognized arguments: --dry-run"."""
        ns, extras = self.parse_known_args(args, namespace)
        if extras:
            message = f"unrecognized arguments: {' '.join(extras)}"
            command = getattr(ns, "command", None)
            if command == "ltm":
                command = f"ltm {getattr(ns, 'ltm_command', None)}"
            field = {"search": "query", "append": "text", "ltm store": "text", "ltm search": "query"}.get(command or "")
            if (field and getattr(ns, field, None) in (None, [], "") and getattr(ns, "query_opt", None) is None
                    and extras[0].startswith("-")):
                import shlex

                what = "search for text" if field == "query" else "write a note"
                message += (f" (to {what} that starts with '-', put it after '--': memdir {command} -- "
                            f"{shlex.quote(extras[0])}" + (f", or give it as --query={shlex.quote(extras[0])}"
                                                           if command == "search" else "") + ")")
            self.error(message)
        return ns

    def error(self, message: str) -> NoReturn:
        missing = message.rpartition("the following arguments are required: ")[2]
        if message.startswith("the following arguments are required: ") and missing in ("text", "query"):
            # `memdir ltm store -x`: the text was taken for an unknown option, so none was given
            message += f" (if it starts with '-', put it after '--': {self.prog} -- {missing.upper()})"
        self.print_usage(sys.stderr)
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise _UsageExit(message)


def _asks_for_json(argv: Sequence[str]) -> bool:
    """Whether a command line has ``--json`` (or a prefix argparse would take for it) before ``--``;
    also given a value (``--json=1``, which argparse refuses: that failure is JSON too)."""
    for arg in argv:
        if arg == "--":
            return False
        name = arg.split("=", 1)[0]
        if len(name) > 3 and "--json".startswith(name):
            return True
    return False


def _whole(text: str, least: int, unit: str = "") -> int:
    """A whole number of at least ``least``, or the usage error saying what is wrong with ``text``."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number{unit}, not {text!r}") from None
    if value < least:
        raise argparse.ArgumentTypeError(f"must be {least} or more, not {value}")
    return value


def _count(text: str) -> int:
    """A whole number of 1 or more (``--max-results``, ``--from``, ``--lines``): ``0`` or ``-1`` gave
    "No matches." or the whole file instead of an error."""
    return _whole(text, 1)


def _millis(text: str) -> int:
    """A wait in whole milliseconds, 0 or more (``--debounce-ms``): ``-5`` was taken as 0, quietly."""
    return _whole(text, 0, " of milliseconds")


def _port(text: str) -> int:
    """A TCP port, 1 to 65535 (``mcp --port``): ``0`` or ``70000`` exited 1 after the config was
    read, where ``--port abc`` is bad usage (2)."""
    value = _whole(text, 1)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be a port from 1 to 65535, not {value}")
    return value


def _score(text: str) -> float:
    """A score floor from 0 to 1 (``--min-score``): ``inf`` or ``5`` left nothing to return, quietly."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, not {text!r}") from None
    if not 0 <= value <= 1:  # NaN too
        raise argparse.ArgumentTypeError(f"must be a number from 0 to 1, not {text}")
    return value


def _add_globals(parser: argparse.ArgumentParser, *, suppress: bool, only: Sequence[str] | None = None) -> None:
    """The global options (those named in ``only``), so they may also follow the command."""
    group = parser.add_argument_group("global options")
    for long, short, help_text, extra in _GLOBALS:
        if only is not None and long not in only:
            continue
        names = [long, short] if short else [long]
        kwargs: dict[str, Any] = {"help": help_text, "dest": long.lstrip("-").replace("-", "_"), **extra}
        if suppress:
            kwargs["default"] = argparse.SUPPRESS
        elif extra.get("action") == "count":
            kwargs["default"] = 0
        action = group.add_argument(*names, **kwargs)
        if long == "--agent":
            action.completer = _complete_agents  # type: ignore[attr-defined]


def _complete_note_paths(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """``memdir get <Tab>``: the workspace's memory files as ``get`` takes them (relative to
    ``--workspace``, ``$MEMDIR_WORKSPACE`` or the current folder), from a listing of the folder
    alone: no config read, no index opened.  Why: the shell offered the current folder's files,
    which ``get`` refuses unless the workspace is the current folder, and never ``memory/…``
    when it was not."""
    from pathlib import Path

    ws = Path(os.path.expanduser(getattr(parsed_args, "workspace", None) or os.environ.get("MEMDIR_WORKSPACE")
                                 or "."))
    found = [name for name in ("MEMORY.md", "memory.md") if (ws / name).is_file()]
    for root, dirs, files in os.walk(ws / "memory"):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))  # (.trash and the like)
        rel = Path(root).relative_to(ws).as_posix()
        found += [f"{rel}/{f}" for f in sorted(files) if f.endswith(".md") and not f.startswith(".")]
    return [path for path in found if path.startswith(prefix)]


def _complete_agents(prefix: str, parsed_args: argparse.Namespace, **_: Any) -> list[str]:
    """``--agent <Tab>``: the agent ids with an index or state in the state folder (``--state-dir``,
    ``$MEMDIR_STATE_DIR`` or ~/.memdir); a workspace's own (``<folder>-<hash>``) is no agent id.
    Why: the shell offered the current folder's files, which are no agent ids."""
    from pathlib import Path

    state = Path(os.path.expanduser(getattr(parsed_args, "state_dir", None) or os.environ.get("MEMDIR_STATE_DIR")
                                    or "~/.memdir"))  # (config.DEFAULT_STATE_DIR: pydantic is not imported here)
    return [name for name in known_agents(state) if name.startswith(prefix)]


def known_agents(state: Any) -> list[str]:
    """The agent ids with an index or state in the state folder ``state``, sorted, from folder
    listings alone; a workspace's own key (``<folder>-<hash>``) is no agent id."""
    from pathlib import Path

    state = Path(state)
    # (not ltm/.forgetting-<id>-…: what a memdir agents forget that was killed had moved aside)
    names = {p.stem for p in (state / "memory").glob("*.sqlite")} | \
        {p.name for kind in ("agents", "ltm") for p in (state / kind).glob("*")
         if p.is_dir() and not p.name.startswith(".forgetting-")}
    return sorted(n for n in names if not re.search(r"-[0-9a-f]{10}$", n))


def _quiet(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "quiet", False))


def json_text(value: Any, *, indent: int | None = None, default: Callable[[Any], Any] | None = None) -> str:
    """``value`` as JSON for stdout, non-ASCII text as it is where stdout is UTF-8 and can encode
    it; else (a lone surrogate: a byte that is not UTF-8 in a path given on the command line; an
    ASCII stdout: ``PYTHONIOENCODING=ascii``, a C locale with ``PYTHONUTF8=0``; a Latin-1 one:
    ``LC_ALL=de_DE.ISO-8859-1``) all ``\\u`` escapes.
    Why: printed raw it was a codec error, a stray byte no strict JSON reader takes (JSON is
    UTF-8: ``caf\\xe9`` in Latin-1 is not), or, through the backslash escapes of
    :func:`_lossless_streams`, ``"caf\\xe9"``, which is not JSON.
    A float that is not finite is written as the string JSON5 spells it (:func:`_finite`)."""
    try:
        text = json.dumps(value, ensure_ascii=False, indent=indent, default=default, allow_nan=False)
    except ValueError:  # NaN or an infinity somewhere
        value = _finite(value)
        text = json.dumps(value, ensure_ascii=False, indent=indent, default=default)
    try:
        if codecs.lookup(getattr(sys.stdout, "encoding", None) or "utf-8").name != "utf-8":
            raise LookupError("not UTF-8")
        text.encode("utf-8")
    except (UnicodeEncodeError, LookupError):
        return json.dumps(value, indent=indent, default=default)
    return text


def write_document(text: str) -> None:
    """``text`` (a note, an export: a document a pipe or a file keeps) on stdout: at a terminal as
    text, else as UTF-8 whatever the locale.  Why: under an ASCII locale (``LC_ALL=C PYTHONUTF8=0``)
    ``memdir get MEMORY.md > copy.md`` wrote ``caf\\xe9`` (the escapes meant for people), and in a
    Latin-1 one ``ltm export --out - > backup.md`` wrote bytes ``ltm import`` refuses as not UTF-8."""
    stream = sys.stdout
    buffer = getattr(stream, "buffer", None)
    encoding = codecs.lookup(getattr(stream, "encoding", None) or "utf-8").name
    if buffer is None or encoding == "utf-8" or stream.isatty():
        stream.write(text)
        return
    stream.flush()
    buffer.write(text.encode("utf-8", "surrogateescape"))


def _finite(value: Any) -> Any:
    """``value`` with each float that is not finite as ``"Infinity"``, ``"-Infinity"`` or ``"NaN"``.

    Why: ``json`` writes them bare, which is not JSON: ``memdir config show --json`` with
    ``sync.intervalMinutes = inf`` (a setting memdir accepts) printed ``"value": Infinity``, and
    every strict reader (``jq``, JavaScript's ``JSON.parse``) refused the whole document.  The
    strings read back as the same setting (a config file's number may be given as a string)."""
    if isinstance(value, float) and not math.isfinite(value):
        return "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


#: Control characters shown as ``\\xNN`` in text printed for a person: every C0 but tab and newline,
#: DEL and the C1 range; and as ``\\uNNNN`` the bidirectional embeddings, overrides and isolates
#: (U+202A-U+202E, U+2066-U+2069), which make a terminal show text in another order than it is
#: (a note named ``report\u202eexe.md`` shows as ``reportdm.exe``: "Trojan Source").
_CONTROLS = {c: f"\\x{c:02x}" for c in (*range(0x09), *range(0x0B, 0x20), *range(0x7F, 0xA0))} | {
    c: f"\\u{c:04x}" for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A))}


def for_terminal(text: str) -> str:
    """``text`` safe to print at a terminal: its control characters spelt out.

    Why: notes and transcripts hold what was pasted or captured (a tool's coloured output, a
    hostile page); printed raw, an escape sequence in a search snippet could recolour or clear the
    terminal, retitle it, or write to the clipboard (OSC 52).  ``--json`` and a piped ``get`` keep
    the text as it is.  A ``\r`` ending a line (a note saved on Windows) is a line end, not shown:
    every line of such a note ended in ``\x0d``; a lone one is spelt out.  File names are text
    of the same kind (a note synced from elsewhere named with an escape sequence): ``index``,
    ``status``, ``watch`` and the error lines print theirs through this too."""
    return text if text.isprintable() else text.replace("\r\n", "\n").translate(_CONTROLS)


def _note(args: argparse.Namespace, text: str) -> None:
    """A note or warning for a person at a terminal (stderr; silenced by ``-q``), its control
    characters spelt out (:func:`for_terminal`): it may name a file of the workspace."""
    if not _quiet(args):
        print(for_terminal(text), file=sys.stderr)


#: Skipped files named one per line by ``index`` and ``status``; the rest are counted in one line.
SHOWN_SKIPPED = 20


def _first_few(lines: list[str], prefix: str) -> list[str]:
    """The first :data:`SHOWN_SKIPPED` of ``lines``, then one line counting the rest: 5,000 files
    that cannot be indexed (FIFOs, names that are not UTF-8) printed 5,000 warnings at every
    ``memdir index``.  ``--json`` lists them all."""
    if len(lines) <= SHOWN_SKIPPED:
        return lines
    more = len(lines) - SHOWN_SKIPPED
    return [*lines[:SHOWN_SKIPPED], f"{prefix}… and {more:,} more skipped files (all of them: memdir status --json)"]


#: Global options followed by a value (``-w DIR``), for :func:`command_in`.
_GLOBALS_WITH_VALUE = frozenset(
    name for long, short, _help, extra in _GLOBALS if "action" not in extra for name in (long, short) if name
)


def command_in(argv: Sequence[str]) -> str | None:
    """The subcommand ``argv`` names (its first word that is not a global option or its value),
    or ``None`` when there is none or it is not a known command."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg == "--":
            return None
        elif arg.startswith("-"):
            skip = arg in _GLOBALS_WITH_VALUE
        else:
            return arg if arg in COMMANDS else None
    return None


class _Unused(_Parser):
    """Stands in for the subcommands a run does not use (see :func:`build_parser`): takes their
    arguments and keeps none of them."""

    def __init__(self) -> None:  # no -h option, no formatter: nothing to set up
        pass

    def add_argument(self, *args: Any, **kwargs: Any) -> Any:
        return None

    def add_mutually_exclusive_group(self, *args: Any, **kwargs: Any) -> Any:
        return self


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The CLI's parser; with ``only``, that subcommand alone is defined (a ``memdir search``
    does not build the other twelve: 26 parsers and their help were a tenth of its start)."""
    parser = _Parser(
        prog="memdir",
        description="Persistent, searchable memory for AI agents: Markdown files in, hybrid search out.",
    )
    parser.add_argument("--version", action="store_true", help="print the version and exit")
    _add_globals(parser, suppress=False)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        if only is not None and name != only:
            return _Unused()
        p = sub.add_parser(name, help=help_text, description=help_text)
        _add_globals(p, suppress=True)
        return p

    p = cmd("index", "index the workspace (incrementally; --force rebuilds everything)")
    p.add_argument("--force", action="store_true", help="full reindex (unchanged text is not re-embedded)")
    p.add_argument("--json", action="store_true", help="print the sync report as JSON")
    p.add_argument("--no-progress", action="store_true", help="no progress on stderr (bar or lines)")

    p = cmd("search", "search memory")
    p.add_argument("query", nargs="?", help="what to look for")
    p.add_argument("--query", dest="query_opt", help="the query (wins over the positional one)")
    p.add_argument("--max-results", type=_count,
                   help="results to return (default: the configured maxResults, 6 unless set)")
    p.add_argument("--min-score", type=_score,
                   help="drop results scoring below this; a value given here is strict. Default: the configured "
                        "minScore (0.35), below which a strong keyword match or a close vector match may still be "
                        "returned in a spare slot ('rescued', see --explain)")
    p.add_argument("--mode", choices=["hybrid", "keyword", "vector"], default="hybrid",
                   help="hybrid (default: keywords and vectors), keyword (BM25 only: no embedding), "
                        "vector (embeddings only)")
    p.add_argument("--explain", action="store_true",
                   help="show how each result was scored: vector and text scores with their weights, the days "
                        "it is about and whether they match a date in the query, and why a result below the "
                        "floor was rescued")
    out = p.add_mutually_exclusive_group()
    out.add_argument("--json", action="store_true", help="JSON output")
    out.add_argument("--files", action="store_true",
                     help="print only the matching files' paths (workspace-relative, as memdir get takes them), "
                          "one per line, each once, best first: for scripts")
    p.add_argument("-0", "--null", action="store_true",
                   help="with --files: end each path with a NUL byte instead of a newline (xargs -0), as a "
                        "file name may hold a newline")
    p.add_argument("--no-sync", action="store_true", help="do not index changed files first")

    p = cmd("get", "print a memory file or some of its lines")
    path = p.add_argument("path", help="e.g. MEMORY.md or memory/2026-01-12.md")
    if path is not None:  # (None from _Unused: another command's parser)
        path.completer = _complete_note_paths  # type: ignore[attr-defined]
    p.add_argument("--from", dest="from_line", type=_count, help="first line (1-based)")
    p.add_argument("--lines", type=_count, help="number of lines")
    p.add_argument("--json", action="store_true", help="JSON output")

    p = cmd("status", "what is indexed, what is stale, what works")
    p.add_argument("--json", action="store_true", help="JSON output")
    p.add_argument("--deep", action="store_true",
                   help="also probe the embedding provider, read every page of a SQLite index of any size "
                        "(without it: of one up to 512 MB) and show the PostgreSQL server's versions")

    p = cmd("watch", "keep the index in step with the files until Ctrl-C (sync.watchDebounceMs, intervalMinutes)")
    p.add_argument("--json", action="store_true", help="one JSON event per line")
    p.add_argument("--debounce-ms", type=_millis, help="sync this long after the last change (default: config)")

    p = cmd("append", "append a note to today's daily log memory/YYYY-MM-DD.md (append-only, never rewrites)")
    p.add_argument("text", nargs="*", help="the note (several words are joined with spaces); - reads stdin")
    p.add_argument("--date", help="the day's log to append to, YYYY-MM-DD (default: today in userTimezone)")
    p.add_argument("--json", action="store_true", help="print {path, appended} as JSON")

    p = cmd("chat", "chat with an OpenAI-compatible model that uses this workspace as its memory "
                    "(try it offline: memdir chat --demo)")
    if not isinstance(p, _Unused):
        from memdir.chat_cli import CHAT_EPILOG, add_chat_arguments  # argparse only, like bench below

        p.epilog = CHAT_EPILOG
        p.formatter_class = argparse.RawDescriptionHelpFormatter
        add_chat_arguments(p)

    p = cmd("mcp", "serve memory_search / memory_get / memory_append to MCP clients (Claude, Cursor, ...); "
                   "memory_recall / memory_store / memory_forget too with longTermMemory.enabled")
    p.add_argument("--transport", choices=["stdio", "http", "streamable-http"], default="stdio",
                   help="stdio (default; what MCP hosts launch) or http (streamable HTTP on loopback)")
    p.add_argument("--host", default="127.0.0.1", help="HTTP address: 127.0.0.1 (default), ::1 or localhost only")
    p.add_argument("--port", type=_port, default=8765, help="HTTP port (default 8765)")
    p.add_argument("--session-key", help="session key for citation mode auto (agent:<id>:...:group:... → no "
                                         "citations); default: a private session")

    p = cmd("migrate", "copy this agent's index to another store backend (nothing is re-embedded)")
    p.add_argument("--to", required=True, choices=["postgres", "sqlite"],
                   help="target backend; set store.driver to it afterwards")
    p.add_argument("--json", action="store_true", help="print what was copied as JSON")

    p = cmd("agents", "the agents with state in the state folder (workspace, index, disk use); "
                      "agents forget ID deletes one's derived state")
    if not isinstance(p, _Unused):
        p.add_argument("--json", action="store_true", help="JSON output")
        actions = p.add_subparsers(dest="agents_command", metavar="ACTION")
        a = actions.add_parser("list", help="list them (what memdir agents alone does)",
                               description="list the agents with state in the state folder")
        a.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
        _add_globals(a, suppress=True)
        a = actions.add_parser("forget", help="delete an agent's index and what lies beside it (not its transcripts)",
                               description="delete an agent's derived state: its index and the files beside it; "
                                           "its long-term memory too with --ltm. Transcripts and notes are never "
                                           "deleted.")
        a.add_argument("id", nargs="?", help="the agent id, or a workspace's key, as memdir agents lists it "
                                             "(default: the one --agent names)")
        a.add_argument("--ltm", action="store_true",
                       help="also delete its long-term memory (LanceDB), which cannot be rebuilt")
        a.add_argument("-n", "--dry-run", action="store_true", help="list what would be deleted; delete nothing")
        a.add_argument("-y", "--yes", action="store_true",
                       help="do not ask for confirmation (required when stdin is not a terminal)")
        a.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
        _add_globals(a, suppress=True)

    p = cmd("config", "configuration")
    p.add_argument("action", choices=["show"], nargs="?", help="show: every setting, its value and where it came from")
    p.add_argument("--json", action="store_true", help="JSON output")

    p = cmd("ltm", "long-term memory (LanceDB): list, stats, store, search, forget, export, import, "
                   "reembed; needs memdir[lancedb]")
    if not isinstance(p, _Unused):
        from memdir.ltm.cli import configure as configure_ltm  # argparse only: LanceDB loads when ltm runs

        configure_ltm(p, lambda p: _add_globals(p, suppress=True))
    p = cmd("bench", "benchmarks: retrieval quality, speed, side-by-side comparison")
    if not isinstance(p, _Unused):
        from memdir.bench.cli import configure as configure_bench  # argparse only: keeps start-up light

        # -v and -q after the command too (a bench has its own --config, and no workspace or agent)
        configure_bench(p, lambda p: _add_globals(p, suppress=True, only=("--verbose", "--quiet")))

    p = cmd("completion", "print a shell completion script, e.g. eval \"$(memdir completion bash)\"")
    p.add_argument("shell", choices=["bash", "zsh", "fish"], help="the shell to complete in")
    return parser


def _load_config(args: argparse.Namespace) -> Any:
    from memdir.config import load_config

    loaded = load_config(
        config_path=getattr(args, "config", None),
        workspace=getattr(args, "workspace", None),
        agent_id=getattr(args, "agent", None),
        state_dir=getattr(args, "state_dir", None),
    )
    _log_settings(loaded)
    return loaded


def _log_settings(loaded: Any) -> None:
    """``-v``: which workspace, index and config file this run uses (also for settings from a
    snapshot: ``memdir -v search`` said nothing at all, where ``-v index`` named them)."""
    s = loaded.settings
    log.info("workspace %s; index %s (keyed by %s); config file %s", s.workspace_path, s.index_path,
             s.index_key, loaded.config_file or "(none)")


#: ``-q`` given: notices are not errors, and ``-q`` leaves only errors on stderr.
_QUIET_NOTICES = [False]


def _notice(message: str) -> None:
    """Things memdir says once, beside any output: an index healed, a writer waited for.  Not
    with ``-q``: ``memdir -q search`` in a cron job printed 'the index … was damaged …; moved it
    aside … and rebuilding it', and 'waiting for … to finish writing', which are no errors."""
    if _QUIET_NOTICES[0]:
        return
    from memdir.errors import say

    say(f"memdir: {for_terminal(message)}")  # one write: notices come from threads too


#: Whether this run's workspace was chosen (a flag, $MEMDIR_WORKSPACE, the config), once known.
_WORKSPACE_CHOSEN: list[bool] = []


def _memory(args: argparse.Namespace, *, snapshot: bool = False) -> Any:
    """The agent's :class:`~memdir.api.Memory`; with ``snapshot`` its settings may come from the
    last run with the same inputs (:mod:`memdir.settings_cache`), which skips pydantic."""
    mem = _open_memory(args, snapshot=snapshot)
    _WORKSPACE_CHOSEN[:] = ["workspace" in mem.loaded.origins]
    return mem


def _open_memory(args: argparse.Namespace, *, snapshot: bool = False) -> Any:
    from memdir.api import Memory

    if not snapshot or os.environ.get("MEMDIR_NO_SETTINGS_CACHE"):
        return Memory(config=_load_config(args), notice=_notice)
    from memdir import settings_cache

    misspelt = settings_cache.unknown_env_warning(os.environ)  # a snapshot hit skips load_config's
    if misspelt:
        log.warning("%s", misspelt)
    flags = {name: getattr(args, name, None) for name in ("workspace", "state_dir")}
    try:
        key, path = settings_cache.snapshot_key(config_path=getattr(args, "config", None),
                                                agent_id=getattr(args, "agent", None), **flags)
    except FileNotFoundError:  # the current folder was deleted (the key holds os.getcwd()): no snapshot
        return Memory(config=_load_config(args), notice=_notice)
    remembered = settings_cache.load_snapshot(path, key)
    if remembered is not None and remembered.settings.workspace_path.is_dir():  # else load_config says why
        _log_settings(remembered)
        return Memory(config=remembered, notice=_notice)
    loaded = _load_config(args)
    settings_cache.save_snapshot(path, key, loaded)
    return Memory(config=loaded, notice=_notice)


def _terminal_columns(stream: Any) -> int | None:
    """The width the terminal behind ``stream`` says it has (``None``: it does not say)."""
    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return None


def _progress_bar(enabled: bool) -> tuple[Callable[[int, int, str], None] | None, Callable[[], None]]:
    """How ``memdir index`` shows progress on stderr: a bar on a terminal (files, and the chunks
    of a large file as they are embedded), plain lines otherwise (:class:`memdir.progress.ProgressLines`),
    and on a terminal that says it is 0 columns wide: a pseudo-terminal no one sized (``script``
    run from a job or CI to get a terminal, ``ssh -t`` from a script), where tqdm drew nothing at
    all for the whole index."""
    if not enabled:
        return None, lambda: None
    if not sys.stderr.isatty() or _terminal_columns(sys.stderr) == 0:
        from memdir.progress import ProgressLines

        return ProgressLines(sys.stderr), lambda: None
    import time

    from tqdm import tqdm

    bar: dict[str, Any] = {}

    def update(done: int, total: int, label: str) -> None:
        now = time.monotonic()
        if "bar" not in bar:
            bar["bar"] = tqdm(total=total, desc=getattr(label, "text", label), unit="file", file=sys.stderr,
                              leave=False)
        elif done < total and now - bar["shown"] < 0.1:  # chunk counts can come every few ms
            return
        bar["shown"] = now
        b = bar["bar"]
        b.total = total
        b.n = done
        chunks = getattr(label, "chunks_planned", 0)
        if chunks:
            b.set_postfix_str(f"{getattr(label, 'chunks_done', 0):,}/{chunks:,} chunks", refresh=False)
        b.refresh()

    def close() -> None:
        if "bar" in bar:
            bar["bar"].close()

    return update, close


def _index_label(mem: Any) -> str:
    s = mem.settings
    return s.agent_id if s.index_key == "agent" else f"{s.workspace_path.name or s.workspace_path}"


def _no_notes(mem: Any, nothing_indexed: bool) -> str | None:
    """The hint for a workspace without memory files (:func:`memdir.workspace.no_notes_hint`),
    when nothing is indexed and memory files are a source."""
    if not nothing_indexed or "memory" not in mem.settings.memory_search.sources:
        return None
    from memdir.workspace import discover, no_notes_hint

    found = discover(mem.settings.workspace_path, mem.settings.extra_paths)
    if found.files:
        return None  # notes there, none indexed yet (e.g. a search run with --no-sync)
    # what was left out is said with it: a vault linked in as extraPaths (skipped, a symlink) was
    # told only that memdir indexes "what memorySearch.extraPaths lists", which it did list
    left = "".join(f"; skipped {item.path}: {item.error}" for item in found.skipped[:3])
    return no_notes_hint(mem.settings.workspace_path) + left


def _extra_path_issues(mem: Any) -> list[str]:
    """What is wrong with ``memorySearch.extraPaths`` (a folder missing or unreadable): 'memdir
    index' with a misspelt or absent extra folder (the README's example ``~/team-notes``) indexed
    nothing from it without a word; only 'memdir status' named it."""
    if not mem.settings.extra_paths or "memory" not in mem.settings.memory_search.sources:
        return []
    from memdir.workspace import discover

    found = discover(mem.settings.workspace_path, mem.settings.extra_paths)
    return [f"memorySearch.extraPaths: {issue}" for issue in found.issues if issue.startswith("additional memory path")]


def cmd_index(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        progress, close = _progress_bar(not args.no_progress and not args.json and not _quiet(args))
        try:
            report = mem.sync(force=args.force, progress=progress, reason="cli")
        finally:
            close()
        hint = _no_notes(mem, report.scanned == 0 and not report.skipped)
        if hint:
            report.warnings.append(hint)
        report.warnings.extend(_extra_path_issues(mem))
        for w in report.warnings:  # with --json too: on stderr where it happens, and in the report
            _note(args, f"warning: {w}")
        for line in _first_few([f"warning: skipped {item['path']}: {item['error']} (retried on the next sync)"
                                for item in report.skipped], "warning: "):
            _note(args, line)
        if args.json:
            print(json.dumps({"agentId": mem.settings.agent_id, "indexPath": mem.store.location,
                              "indexKey": mem.settings.index_key, "mode": mem.selection.mode,
                              **report.as_dict()}, indent=2))
        else:
            kind = "full reindex" if report.full else "incremental"
            why = report.reason.partition(": ")[2] if report.full else ""
            if why and why not in ("forced", "no index yet"):  # a setting changed: say which, as --json does
                kind += f" ({why})"
            print(f"Memory index updated ({_index_label(mem)}): {kind}, {report.indexed} indexed, "
                  f"{report.unchanged} unchanged, {report.removed} removed, {report.chunks} chunks "
                  f"in {report.seconds:.2f}s")
    return 0


def cmd_search(args: argparse.Namespace) -> int:
    query = args.query_opt if args.query_opt is not None else args.query
    if not query or not query.strip():
        raise UsageError("Missing search query. Provide a positional query or use --query <text>.")
    if args.null and not args.files:
        raise UsageError("-0/--null ends the paths printed by --files: use it with --files")
    with _memory(args, snapshot=True) as mem:
        _refuse_new_agent_here(mem)
        if not mem.settings.memory_search.enabled:  # as memory_search (and OpenClaw's CLI): no search
            from memdir.tools import SEARCH_DISABLED

            raise CliError(SEARCH_DISABLED)
        resp = mem.search(query, max_results=args.max_results, min_score=args.min_score, explain=args.explain,
                          sync=False if args.no_sync else None, mode=args.mode)
        if args.json:
            print(json_text(resp.as_dict(), indent=2))
            return 0
        for w in resp.warnings:
            _note(args, f"note: {w}")
        if resp.fallback:
            _note(args, f"note: {resp.fallback['from']} fallback: {resp.fallback['reason']}")
        if resp.stale:
            # (why: the notes above; --no-sync, a sync cut short, another writer, a read-only index)
            _note(args, "note: the index may be stale: results may not match the files as they are now")
        if args.files:
            end = "\0" if args.null else "\n"
            # at a terminal spelt out as every printed path is (an escape sequence in a synced note's
            # name cleared or retitled it); piped, or with -0, the names as they are, for xargs
            paths = dict.fromkeys(r.path for r in resp.results)
            if sys.stdout.isatty() and not args.null:
                sys.stdout.write("".join(for_terminal(path) + end for path in paths))
                return 0
            # the OS's own bytes for each name: under an ASCII locale (LC_ALL=C PYTHONUTF8=0) the
            # text memory/café.md came out as memory/caf\xe9.md, which xargs could not open
            from memdir.workspace import fs_name

            sys.stdout.flush()
            sys.stdout.buffer.write(b"".join(os.fsencode(fs_name(path)) + end.encode() for path in paths))
            return 0
        if not resp.results:
            print("No matches.")
            try:
                empty = not any(n for n, _ in mem.store.counts_by_source().values())
            except Exception:  # only advice: an index that cannot be counted says its own trouble elsewhere
                empty = False
            hint = _no_notes(mem, empty)
            if hint:
                _note(args, f"note: {hint}")
            return 0
        out = []
        for r in resp.results:
            out.append(f"{r.score:.3f} {for_terminal(r.path)}:{r.start_line}-{r.end_line}")
            out.append(for_terminal(r.snippet))
            if r.explain:
                e = r.explain
                dated = f", dates {e['dates']}" if e.get("dates") else ""
                if "inPeriod" in e:
                    dated += " (in the query's period: x2)" if e["inPeriod"] else " (outside the query's period)"
                rescued = (f", below the {e['floor']} floor but rescued: {e['rescuedBecause']}"
                           if e["rescued"] else "")
                fused = e.get("textFused", e["textScore"])  # the figure textWeight multiplied
                scaled = ("" if round(fused, 3) == round(e["textScore"], 3)
                          else f" (BM25 {e['textScore']:.3f} scaled by the pool's best match)")
                out.append(f"  [vector {e['vectorScore']:.3f}×{e['vectorWeight']:.2f} + text {fused:.3f}"
                           f"×{e['textWeight']:.2f}{scaled}, decay {e['decay']:.3f}, rank before MMR "
                           f"{e['rankBeforeMmr']}, matched {'+'.join(e['matched']) or '-'}{dated}{rescued}]")
            out.append("")
        sys.stdout.write("\n".join(out) + "\n")
    return 0


def _refuse_new_agent_here(mem: Any) -> None:
    """Refuse a search for an agent id that has no index or state yet, run from a current folder
    (no workspace chosen) without memory files: a mistyped ``--agent`` (or one missing from
    ``agents.list``) made that folder the agent's workspace, and the agent's real workspace was
    then refused its own index ('belongs to workspace …'); it answered 'No matches.'."""
    s = mem.settings
    if (s.index_key != "agent" or s.memory_search.store.driver != "sqlite" or "workspace" in mem.loaded.origins
            or "memory" not in s.memory_search.sources or s.index_path.exists()
            or any(p.exists() for p in (s.state_path / "agents" / s.agent_id, s.state_path / "ltm" / s.agent_id))):
        return
    from memdir.workspace import discover

    if discover(s.workspace_path, s.extra_paths).files:
        return
    from memdir.config import did_you_mean

    known = known_agents(s.state_path)
    named = ", ".join(known[:20]) + (f" and {len(known) - 20} more" if len(known) > 20 else "")
    raise CliError(f"agent {s.agent_id!r} has no index yet, and the current folder {s.workspace_path}, its workspace "
                   f"as none was given, holds no memory files: a search would make it the agent's workspace. "
                   f"Give the agent's workspace (--workspace PATH, $MEMDIR_WORKSPACE or agents.list[].workspace), "
                   f"or check the agent id{did_you_mean(s.agent_id, known)}: "
                   + (f"the agents in {s.state_path} are {named}" if known else f"{s.state_path} holds no agent yet"))


def cmd_get(args: argparse.Namespace) -> int:
    from memdir.workspace import PathError

    if not args.path.strip():  # ("path required" exited 1, where `search ""` and `append ""` are bad usage)
        raise UsageError("Missing path. Give a memory file, e.g. memdir get MEMORY.md or memdir get "
                         "memory/2026-01-12.md (as search results name them).")
    with _memory(args) as mem:
        try:
            got = mem.get(args.path, from_line=args.from_line, lines=args.lines)
        except PathError as exc:
            raise CliError(str(exc)) from None
        if args.json:
            print(json_text(got.as_dict(), indent=2))
        else:
            text = for_terminal(got.text) if sys.stdout.isatty() else got.text  # piped: the note's own bytes
            write_document(text + ("" if text.endswith("\n") or not text else "\n"))
            if got.missing and not _quiet(args):
                _notice(f"no file {got.path} (a missing file reads as empty, as memory_get returns it)")
    return 0


def cmd_append(args: argparse.Namespace) -> int:
    text = " ".join(args.text)
    if args.text == ["-"]:
        if sys.stdin is None:  # started with stdin closed (`<&-`): "'NoneType' object has no attribute"
            raise UsageError("- reads the note from stdin, and stdin is closed")
        # bytes that are not UTF-8 are kept as surrogates whatever the locale, so the note is
        # refused with one clear message (memfiles.normalise_entry) rather than a codec error; a
        # byte order mark (Windows tools write one) is not part of the note
        from memdir.reading import MAX_NOTE_BYTES

        # at most what a note may be: `yes | memdir append -` read until memory ran out
        raw = sys.stdin.buffer.read(MAX_NOTE_BYTES + 1)
        if len(raw) > MAX_NOTE_BYTES:
            raise UsageError(f"the note on stdin is larger than {MAX_NOTE_BYTES >> 20} MiB, the most a note may be; "
                             "nothing was appended")
        text = raw.decode("utf-8-sig", "surrogateescape")
    if not text.strip():
        raise UsageError("Nothing to append. Give the note as arguments, or - to read it from stdin.")
    if args.date is not None:
        from memdir.daily import coerce_date

        try:
            coerce_date(args.date)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    with _memory(args) as mem:
        try:
            rel = mem.append_daily(text, date=args.date)
        except (OSError, ValueError) as exc:  # a refused write (symlink, not a file, ...) names the path
            raise CliError(str(exc)) from None
    try:
        print(json.dumps({"path": rel, "appended": True}) if args.json else f"Appended to {rel}", flush=True)
    except BrokenPipeError:
        raise
    except OSError as exc:  # (stdout on a full disk) "No space left on device" alone read as "not appended"
        raise CliError(f"appended to {rel}, but this could not be said on stdout: {exc.strerror or exc} (do not "
                       "append the note again)") from None
    return 0


def cmd_completion(args: argparse.Namespace) -> int:
    try:
        import argcomplete
    except ImportError as exc:  # a core dependency; only a broken install lacks it
        raise CliError(f"shell completion needs argcomplete ({exc}): pip install argcomplete") from None
    sys.stdout.write(argcomplete.shellcode(["memdir"], shell=args.shell))
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    with _memory(args) as mem:
        st = mem.status(deep=args.deep)
        # the index's own name, as index prints it: 'Memory Search (main)' over a workspace's index
        # (no agent id chosen) read as agent main's
        label = _index_label(mem)
    if args.json:
        print(json_text(st, indent=2))
        return 0
    lines = [f"Memory Search ({label})",
             f"Provider: {st['provider']} (requested: {st['requestedProvider']})",
             f"Model: {st['model']}",
             f"Mode: {st['mode']}",
             f"Sources: {', '.join(st['sources'])}"]
    if st["extraPaths"]:
        lines.append(f"Extra paths: {', '.join(st['extraPaths'])}")
    lines += [f"Indexed: {st['files']}/{st['scannedFiles']} files · {st['chunks']} chunks",
              f"Dirty: {'yes' if st['dirty'] else 'no'}{_dirty_words(st)}",
              f"Store: {st['indexPath']}" + ("" if st["indexExists"] else " (being built)"
                                             if st.get("writer") is not None else " (not built yet: run memdir index)"),
              "Index for: " + {"workspace": "this workspace (no agent id chosen; --agent NAME for a named index)",
                               "agent": f"agent {st['agentId']}",
                               "path": "memorySearch.store.path"}.get(st.get("indexKey", ""), "?"),
              f"Workspace: {st['workspace']}",
              f"Agent state: {st['sessionsDir']} (transcripts)"
              + (f", {st['longTermMemoryPath']} (long-term memory)" if st.get("longTermMemoryPath") else "")
              + {"agent": f"; agent {st['agentId']}'s, as in OpenClaw (shared with any workspace run as --agent "
                          f"{st['agentId']})",
                 "workspace": "; this workspace's own",
                 "legacy": "; agent main's from before memdir kept state per workspace (this workspace owned "
                           "main's index, so it keeps them; other workspaces get their own)"}.get(
                  st.get("stateKeyKind", ""), "")]
    if "fts" in st:
        lines.append("By source:")
        for sc in st["sourceCounts"]:
            lines.append(f"  {sc['source']} · {sc['files']} files · {sc['chunks']} chunks")
        fts = st["fts"]
        lines.append(f"FTS: {'ready' if fts['available'] else 'unavailable'} ({fts['tokenizer']})")
        if fts.get("error"):
            lines.append(f"FTS error: {fts['error']}")
        vec = st["vector"]
        lines.append(f"Vector: {vec['path']} · {vec['vectors']} vectors · dims {vec['dims'] or '-'}")
        lines.append(f"Vector path: {vec['why']}")
        cache = st["cache"]
        lines.append(f"Embedding cache: {'enabled' if cache['enabled'] else 'disabled'} ({cache['entries']} entries)"
                     + (f" · cap {cache['maxEntries']}" if cache.get("maxEntries") else ""))
        if st.get("writer") is not None:  # ({} when the lock does not say who holds it)
            w = st["writer"]
            from memdir.lock import pid_words
            from memdir.progress import counts

            far = (f" ({counts(w.get('done') or 0, w['total'], w.get('chunksDone') or 0, w.get('chunksPlanned') or 0)})"
                   if w.get("total") else "")
            if w.get("pid") in (None, ""):
                from memdir.lock import writer_words

                lines.append(f"Writer: {writer_words(w)} holds the writer lock")
            elif w.get("stopped"):  # (it holds the lock, but nothing is indexed until it is resumed)
                from memdir.lock import resume_advice

                lines.append(f"Writer: {pid_words(w)} is stopped (Ctrl-Z or SIGSTOP) while indexing{far}: "
                             f"{resume_advice(w.get('pid'))}")
            else:  # (or "is copying the index to postgres", while memdir migrate runs)
                doing = w["phase"] if str(w.get("phase") or "").startswith("copying") else "indexing"
                lines.append(f"Writer: {pid_words(w)} is {doing}{far}")
    if st.get("readOnly"):
        lines.append(f"Read-only: {st['readOnly']}; searches answer from the index as it is")
    if st.get("recovered"):
        r = st["recovered"]
        aside = (f"moved aside to {r['corruptPath']}" if r.get("corruptPath")
                 else f"dropped its rows (generation {r.get('droppedGeneration')})")
        # (the record stays after the rebuild: "by the next index or search" then read as still to do)
        lines.append(f"Recovered: the index was damaged ({r['problem']}); {aside}; "
                     + ("it has been rebuilt from the Markdown files since" if st["indexExists"] else
                        "rebuilt from the Markdown files by the next index or search"))
    if st.get("watch"):
        wt = st["watch"]
        lines.append(f"Watch: {'sync pending' if wt.get('pending') else 'idle'}"
                     + (f", last error: {wt['lastError']}" if wt.get("lastError") else ""))
    if st.get("fallback"):
        lines.append(f"Fallback: {st['fallback']['from']} ({st['fallback']['reason']})")
    if st.get("providerUnavailableReason"):
        lines.append(f"Embeddings unavailable: {st['providerUnavailableReason']}")
    if args.deep:
        if "postgres" in st:
            pg = st["postgres"]
            lines.append(f"Backend: postgres · {pg['server']} · pgvector {pg['pgvector']} · schema {pg['schema']} "
                         f"(v{pg['schemaVersion']})")
        else:
            lines.append(f"SQLite: {st['sqlite']}")
        probe = st["embeddingProbe"]
        lines.append("Embeddings: " + ("ready" if probe.get("ok") else f"unavailable ({probe.get('error')})"))
    if st.get("skipped"):
        lines.append("Skipped files (retried on every sync):")
        lines += _first_few([f"  {item['path']}: {item['error']}" for item in st["skipped"]], "  ")
    if st["issues"]:
        lines.append("Issues:")
        lines += [f"  {i}" for i in st["issues"]]
    print(for_terminal("\n".join(lines)))  # (file names of the workspace: an escape sequence in one is spelt out)
    return 0


def _dirty_words(st: dict[str, Any]) -> str:
    """What the status's Dirty line adds: what is out of date, and which sync brings it up to date."""
    if not st["dirty"]:
        return ""
    if not st["indexExists"]:
        return (f" (never indexed: {st['dirtyCount']} files to index; "
                + ("being built now: see Writer)" if st.get("writer") is not None else
                   "the next search, memdir index or the watcher does it)"))
    waiting = st.get("waitingCount") or 0
    changed = st["dirtyCount"] - waiting
    if st.get("newerVersion"):
        return (f" ({st['dirtyCount']} changed, {st['removedCount']} removed; not synced by this memdir: a newer one "
                "wrote the index, see Issues)")
    if st.get("rebuildReason"):  # (with files changed too, it said their counts alone, not the rebuild)
        counts = (f"; {st['dirtyCount']} changed, {st['removedCount']} removed"  # (a rebuild reads all)
                  if st["dirtyCount"] or st["removedCount"] else "")
        return (f" (to be rebuilt: {st['rebuildReason']}{counts}; the next search, memdir index or the watcher "
                "does it)")
    parts = []
    if changed or st["removedCount"] or not waiting:
        parts.append(f"{changed} changed, {st['removedCount']} removed; the next search or the watcher syncs them")
    if waiting:
        parts.append(f"{waiting} transcript{'s' * (waiting != 1)} grown less than sync.sessions.deltaBytes / "
                     "deltaMessages, which searches and the watcher wait for: memdir index indexes "
                     + ("them" if waiting != 1 else "it") + " now")
    return f" ({'; '.join(parts)})"


def cmd_migrate(args: argparse.Namespace) -> int:
    progress = None
    if not args.json and not _quiet(args):  # (a large index took minutes without a word)
        from memdir.progress import ProgressLines

        progress = ProgressLines(sys.stderr, action="copying")
    with _memory(args) as mem:
        report = mem.migrate(args.to, progress=progress)
    for w in report.get("warnings") or []:  # with --json too, as index does
        _note(args, f"note: {w}")
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        replaced = report.get("replaced")
        print(f"copied {_counted(report['files'], 'file')}, {_counted(report['chunks'], 'chunk')}, "
              f"{_counted(report['vectors'], 'vector')} and {_counted(report['cacheEntries'], 'cache entry')} "
              f"from {report['from']} to {report['to']} "
              + (f"(replacing the index of {_counted(replaced['files'], 'file')}, "
                 f"{_counted(replaced['chunks'], 'chunk')} it held) " if replaced else "")
              + f"in {report['seconds']:.1f} s; now set store.driver = \"{args.to}\"")
    return 0


def _counted(n: int, noun: str) -> str:
    """``1 file``, ``2 files``, ``1 cache entry``, ``0 cache entries`` ("copied 1 files")."""
    if n == 1:
        return f"1 {noun}"
    return f"{n} {noun[:-1]}ies" if noun.endswith("y") else f"{n} {noun}s"


def _load_log_formatting() -> None:
    """Import what :class:`_RedactingFormatter` needs now, in a server that runs for long: out of
    file descriptors, each log line's import failed and logging printed its own traceback instead
    ("--- Logging error ---", 90,000 lines of them for 100 connections to ``mcp --transport http``)."""
    import memdir.redact  # noqa: F401


def cmd_mcp(args: argparse.Namespace) -> int:
    _load_log_formatting()
    try:
        from memdir.mcp_server import HostNotAllowed, check_loopback_host, serve
    except ImportError as exc:
        raise CliError(f"the MCP server needs the MCP SDK ({exc}): pip install 'mcp>=1.21.1,<2'") from None

    try:
        check_loopback_host(args.host)  # before anything starts: bad usage (2), as --port 70000 is
    except HostNotAllowed as exc:
        raise UsageError(str(exc)) from None
    if args.transport == "stdio" and sys.stdin is None:  # `memdir mcp <&-`: "'NoneType' ... 'isatty'"
        raise UsageError("the MCP server on stdio reads its requests from stdin, and stdin is closed "
                         "(--transport http serves without it)")
    if args.transport == "stdio" and _STDOUT_CLOSED[0]:  # (`>&-`: it answered into nothing, its client waiting)
        raise UsageError("the MCP server on stdio answers on stdout, and stdout is closed "
                         "(--transport http serves without it)")
    from memdir.api import Memory

    loaded = _load_config(args)
    workspace = loaded.settings.workspace_path
    if loaded.origins.get("workspace") is None and workspace.parent == workspace:
        # Claude Desktop (and other hosts) start a server in /: without --workspace in its args it
        # served the root's (empty) memory, every search found nothing and appends went to /memory
        raise UsageError(f"no workspace given, and the current folder is {workspace} (where MCP hosts such as "
                         "Claude Desktop start their servers): add --workspace /path/to/agent-workspace to the "
                         "server's args in the host's config (or set MEMDIR_WORKSPACE)")
    with Memory(config=loaded, notice=_notice) as mem:
        if args.transport == "stdio" and sys.stdin.isatty():
            # Run by hand from the README's list, it waited in silence: say what it is waiting for.
            _note(args, f"memdir MCP server on stdio (workspace {mem.workspace}): an MCP host (Claude, Cursor, ...) "
                        "starts it and talks to it on stdin/stdout; Ctrl-C ends it")
        serve(mem, transport=args.transport, host=args.host, port=args.port, session_key=args.session_key,
              banner=not _quiet(args))
    return 0


def cmd_watch(args: argparse.Namespace) -> int:
    _load_log_formatting()
    from memdir.watch_foreground import run_foreground

    with _memory(args) as mem:
        hint = None if args.json else _no_notes(mem, True)
        if hint:  # watching a folder of ordinary notes saw none of them change, without a word
            _note(args, f"note: {hint}")
        return run_foreground(mem, as_json=args.json, debounce_ms=args.debounce_ms, quiet=_quiet(args))


def cmd_config(args: argparse.Namespace) -> int:
    if args.action is None:  # argparse said "the following arguments are required: action", a name no help shows
        raise UsageError("config: choose an action: show (memdir config show)")
    loaded = _load_config(args)
    rows = loaded.rows()
    if args.json:
        print(json_text({"configFile": str(loaded.config_file) if loaded.config_file else None,
                         "settings": [{"key": k, "value": v, "origin": o} for k, v, o in rows]},
                        indent=2, default=str))
        return 0
    print(f"# config file: {loaded.config_file or '(none found)'}")
    width = max(len(k) for k, _, _ in rows)
    for key, value, origin in rows:
        print(f"{key:<{width}}  {json.dumps(value, default=str)}  [{origin}]")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from memdir.chat_cli import run_chat

    return run_chat(args)


def cmd_ltm(args: argparse.Namespace) -> int:
    from memdir.ltm.cli import check_usage, run

    check_usage(args)  # bad usage is 2 whatever the config or the LanceDB extra
    return run(args, _load_config(args))


def cmd_agents(args: argparse.Namespace) -> int:
    from memdir.agents_cli import forget, listing

    return forget(args) if getattr(args, "agents_command", None) == "forget" else listing(args)


def cmd_bench(args: argparse.Namespace) -> int:
    from memdir.bench.cli import run

    return run(args)


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "agents": cmd_agents,
    "append": cmd_append,
    "bench": cmd_bench,
    "chat": cmd_chat,
    "completion": cmd_completion,
    "index": cmd_index,
    "search": cmd_search,
    "get": cmd_get,
    "status": cmd_status,
    "config": cmd_config,
    "mcp": cmd_mcp,
    "watch": cmd_watch,
    "ltm": cmd_ltm,
    "migrate": cmd_migrate,
}


class _RedactingFormatter(logging.Formatter):
    """Log lines (and their tracebacks) with secrets masked as transcripts mask them, and control
    characters spelt out (:func:`for_terminal`).

    Why: at ``-vv`` httpx logs each request's URL, and a base URL's ``user:password@`` went to
    stderr (and into bug reports) as it was; other libraries' lines may quote a key too.  And a
    warning naming a file or folder (a config file beside the one read, a session's transcript)
    printed an escape sequence in its name raw, as ``index`` and ``status`` lines no longer do.
    A key in a URL's query (``?key=…``) is masked too (:func:`~memdir.redact.masked_query`)."""

    def format(self, record: logging.LogRecord) -> str:
        from memdir.redact import masked_query, redact_text

        return for_terminal(masked_query(redact_text(super().format(record))))


def _configure_logging(args: argparse.Namespace) -> None:
    """WARNING by default; ``-v`` INFO for memdir; ``-vv`` DEBUG for everything; ``-q`` errors only,
    the libraries' too (the MCP SDK's warnings went on printing under ``-q``)."""
    verbose = int(getattr(args, "verbose", 0) or 0)
    quiet = _quiet(args)
    level = logging.ERROR if quiet else logging.DEBUG if verbose >= 2 else logging.WARNING
    logging.basicConfig(level=level, stream=sys.stderr,
                        format="memdir: %(levelname)s: %(name)s: %(message)s" if verbose else
                        "memdir: %(levelname)s: %(message)s")
    for handler in logging.getLogger().handlers:
        if handler.formatter is not None and not isinstance(handler.formatter, _RedactingFormatter):
            handler.setFormatter(_RedactingFormatter(handler.formatter._fmt))
        if quiet:  # (a library's logger set to WARNING itself, as uvicorn's are, passes the root's level)
            handler.setLevel(logging.ERROR)
    _QUIET_NOTICES[0] = quiet
    own = logging.ERROR if quiet else {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    logging.getLogger("memdir").setLevel(own)
    if not verbose:
        # The pool's own reports of each reconnection attempt ("error connecting in 'memdir-…'", a line
        # per attempt, in the middle of a --json run), and psycopg's of a connection lost mid-sync
        # ("error ignored terminating <psycopg.Pipeline [BAD] at 0x7f…>: the connection is lost"):
        # memdir reports the failure itself, in one line.
        logging.getLogger("psycopg").setLevel(logging.ERROR)


def _stdout_gone() -> int:
    """The reader of stdout went away: say nothing, exit as a tool killed by SIGPIPE would (141)."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so the interpreter's final flush cannot complain
    except (OSError, ValueError):
        pass
    return _EXIT_SIGPIPE


def _flush_stdout() -> None:
    """Flush what a command printed; a stdout already closed has nothing left to flush (the MCP
    SDK closes it when a stdio session ends, which made every session exit 1)."""
    if not sys.stdout.closed:
        sys.stdout.flush()


class _StdoutFile(io.FileIO):
    """Standard output's file, whose failed writes say they were stdout's (:class:`StdoutFailed`).

    Why: ``memdir index > /dev/full`` said "Memory index failed: [Errno 28] No space left on
    device" (the index was updated: only its report could not be written), and search the same,
    which reads as the index's disk being full.  Once a write failed, later ones are dropped:
    the output is incomplete already, and the interpreter's last flush at exit would otherwise
    fail again with "Exception ignored" and exit 120.

    A write is repeated until all of it is written.  Why: under ``PYTHONUNBUFFERED=1`` (set in
    many container images) the text layer writes straight to this file and ignores a short
    write, which is how a write to a disk that fills up mid-way, or to a pipe whose reader went
    away, first ends: ``memdir get big.md > out.md`` on a full disk left 1 MiB of a 5.6 MiB note
    and exited 0 without a word, and ``| head -c 10`` exited 0, not 141."""

    #: The first failed write's error (a write argparse made for --help swallows it).
    failed: OSError | None = None

    def write(self, data: Any) -> int | None:  # type: ignore[override]
        if self.failed:
            return len(data)
        try:
            view, done = memoryview(data).cast("B"), 0
            while done < len(view):
                written = super().write(view[done:])
                if written is None:  # (a stdout left non-blocking by whoever started memdir: wait for room)
                    import select

                    select.select([], [self.fileno()], [])
                    continue
                done += written
            return done
        except BrokenPipeError:
            raise
        except OSError as exc:
            from memdir.errors import StdoutFailed

            _StdoutFile.failed = StdoutFailed(exc.errno, exc.strerror)
            raise _StdoutFile.failed from None


class _StderrFile(io.FileIO):
    """Standard error's file, whose failed writes are dropped: there is nowhere left to say so.

    Why: with stderr on a full disk (``2>>memdir.log`` on a full /var) the first warning raised,
    so ``memdir index`` exited 1 without printing its report, its index updated, and a usage
    error exited 1, not 2."""

    def write(self, data: Any) -> int | None:  # type: ignore[override]
        try:
            return super().write(data)
        except OSError:
            return len(data)


def _tag_stdout_failures() -> None:
    """Put :class:`_StdoutFile` under ``sys.stdout`` and :class:`_StderrFile` under
    ``sys.stderr`` (only the process's own streams: a caller's captured one is left as it is),
    with the same encoding, errors and buffering."""
    for name, original, kind in (("stdout", sys.__stdout__, _StdoutFile), ("stderr", sys.__stderr__, _StderrFile)):
        stream = getattr(sys, name)
        if stream is not original or not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            fd = stream.fileno()
            stream.flush()
            raw = kind(fd, "w", closefd=False)
        except (OSError, ValueError):  # closed, or not a file: nothing to tag
            continue
        # unbuffered as it was (stderr, python -u): progress lines and warnings stay in order
        layer = raw if isinstance(stream.buffer, io.RawIOBase) else io.BufferedWriter(raw)
        setattr(sys, name, io.TextIOWrapper(layer, encoding=stream.encoding, errors=stream.errors,
                                            line_buffering=stream.line_buffering, write_through=stream.write_through))


#: Punctuation memdir's own lines use (and notes often do), as an ASCII terminal can show it.
_ASCII_PUNCTUATION = {"\u2026": "...", "\u00b7": "-", "\u2014": "--", "\u2013": "-", "\u2192": "->",
                      "\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " ", "\u00d7": "x",
                      "\u2264": "<=", "\u2265": ">="}


def _readable_replace(exc: UnicodeError) -> tuple[str, int]:
    """The ``memdir-readable`` codec error handler: :data:`_ASCII_PUNCTUATION` as ASCII, anything
    else as a backslash escape (``caf\\xe9``)."""
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(_ASCII_PUNCTUATION.get(ch) or ch.encode("ascii", "backslashreplace").decode("ascii")
                    for ch in exc.object[exc.start:exc.end]), exc.end


def _lossless_streams() -> None:
    """A note's text never makes a command fail on a terminal or pipe that cannot encode it
    (``PYTHONIOENCODING=ascii``, a C locale on Windows): what it cannot show comes out as
    backslash escapes (``caf\\xe9``) instead of a UnicodeEncodeError, and the punctuation of
    memdir's own lines as ASCII: under ``LC_ALL=C PYTHONUTF8=0`` status said "Indexed: 2/2 files
    \\xb7 2 chunks" and the progress bar "Indexing memory files\\u2026"."""
    for stream in (sys.stdout, sys.stderr):
        encoding = (getattr(stream, "encoding", None) or "").lower().replace("-", "")
        if encoding not in ("utf8", "utf_8") and hasattr(stream, "reconfigure"):
            try:
                codecs.lookup_error("memdir-readable")
            except LookupError:
                codecs.register_error("memdir-readable", _readable_replace)
            try:
                stream.reconfigure(errors="memdir-readable")
            except (ValueError, OSError):  # a closed or detached stream: nothing to change
                pass


def _utf8_arguments(args: argparse.Namespace) -> None:
    """A query or note given on the command line as the UTF-8 text it is, when Python decoded the
    command line as ASCII (a C/POSIX locale with ``PYTHONUTF8=0``): ``memdir append "café"`` was
    refused as "text is not valid UTF-8", and ``search "crème"`` found nothing.  Bytes that are not
    UTF-8 are left as the locale read them: in a Latin-1 locale (``LC_ALL=de_DE.ISO-8859-1``) a
    terminal sends "Grüße" as Latin-1, which Python read right and this made "not valid UTF-8".
    Paths are left as the OS gave them (``memdir.workspace.fs_name``)."""
    if sys.getfilesystemencoding().lower().replace("-", "").replace("_", "") == "utf8":
        return
    from memdir.textutil import has_lone_surrogate

    def text(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        try:
            raw = os.fsencode(value)
        except UnicodeError:  # not from the command line (main(argv) given text): already text
            return value
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            # what the locale could read is kept (Latin-1); what it could not (an ASCII locale)
            # stays a surrogate, refused or matched as a byte that is not UTF-8
            return value if not has_lone_surrogate(value) else raw.decode("utf-8", "surrogateescape")

    for name in ("query", "query_opt", "text"):
        value = getattr(args, name, None)
        setattr(args, name, [text(v) for v in value] if isinstance(value, list) else text(value))


#: Commands that answer once and exit.  Their process starts no BLAS thread pool: starting it costs
#: a fresh hybrid ``memdir search`` 40-50 ms of its ~400 ms (NumPy's import), and the search's one
#: matrix-vector product gives the same bits on one thread.  Long-lived commands (``mcp``,
#: ``watch``, ``chat``) and indexing keep the pool.
ONE_SHOT_COMMANDS = frozenset({"search", "get", "status"})
#: Commands that stop on SIGTERM in their own way (a loop finishing what is in flight).
SIGTERM_OWNERS = frozenset({"watch"})


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, when Ctrl-C's own handling is off (SIGINT ignored: a job started in the background)."""


#: The number of the SIGTERM or SIGHUP that arrived (0: none): the interrupt that follows is its,
#: exit 128 + that number (143, 129), as a shell reports a process that signal ended.
_TERMINATED = [0]
#: How the interruption is said, by the signal's number (SIGTERM 15, SIGHUP 1).
_STOPPED_BY = {15: "terminated", 1: "hung up (the terminal closed)"}
#: Commands that serve until stopped: under ``-q`` their stop by a signal is said by the exit code
#: alone (``memdir -q mcp --transport http`` printed "memdir: terminated" each time systemd stopped it).
SERVER_COMMANDS = frozenset({"mcp", "watch"})


def terminated(exc: BaseException) -> bool:
    """Whether the interrupt ``exc`` is SIGTERM's or SIGHUP's, not Ctrl-C's: it ends the command
    even where Ctrl-C only stops what is in progress (a chat's turn)."""
    return isinstance(exc, Terminated) or bool(_TERMINATED[0])


def _stop_signals(command: str) -> None:
    """SIGTERM and SIGHUP taken as Ctrl-C is (:func:`_terminate_as_interrupt`) by the commands
    that do not handle them in their own way (:data:`SIGTERM_OWNERS`).

    Why SIGHUP: an SSH session or terminal closed under ``memdir index --force`` (or ``memdir
    mcp`` on stdio) ended it on the spot, leaving the rebuild's temporary database and its
    progress file beside the index.  A SIGHUP already ignored (``nohup memdir index &``) stays
    ignored: the command runs on, as its user asked.  ``memdir mcp`` over HTTP too: uvicorn
    takes SIGINT and SIGTERM while it serves, then sends itself the signal again once it has
    stopped, which with no handler of memdir's ended the process (exit -15) before its Memory was
    closed (a start-up build's temporary database left beside the index)."""
    import signal

    if command in SIGTERM_OWNERS:
        return
    signal.signal(signal.SIGTERM, _terminate_as_interrupt)
    hangup = getattr(signal, "SIGHUP", None)  # (none on Windows)
    if hangup is not None and signal.getsignal(hangup) is signal.SIG_DFL:
        signal.signal(hangup, _terminate_as_interrupt)


def _terminate_as_interrupt(signum: int, frame: object) -> None:
    """SIGTERM (``kill``, a supervisor or CI stopping a job) or SIGHUP (the terminal closed) taken
    as Ctrl-C is taken.

    Why: by default it ended the process on the spot (exit -15): a ``memdir index --force``
    stopped so left its 16 MB temporary database beside the index until the next command, and no
    ``--json`` failure was printed; ``memdir mcp`` on stdio, which a host stops with it, the same.
    Ctrl-C's own path is taken (SIGINT raised here): a rebuild's temporary database is removed
    (the embeddings it paid for kept), the writer lock given back, an asyncio server's task
    cancelled as on Ctrl-C (an exception raised into it instead was logged with its traceback),
    and the command exits 143 (129 for SIGHUP)."""
    import signal

    _TERMINATED[0] = int(signum)
    if callable(signal.getsignal(signal.SIGINT)):
        signal.raise_signal(signal.SIGINT)
    else:
        raise Terminated


#: Whether this process was started with stdout closed (``>&-``): it writes to os.devnull then.
_STDOUT_CLOSED = [False]


def main(argv: Sequence[str] | None = None) -> int:
    if sys.stdout is None:  # started with stdout closed (`memdir append x >&-`): every print failed
        _STDOUT_CLOSED[0] = True
        sys.stdout = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115  (output goes nowhere, as >/dev/null)
    if sys.stderr is None:  # stderr closed (`memdir index 2>&-`): index failed on the progress's isatty()
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    _tag_stdout_failures()
    completing = "_ARGCOMPLETE" in os.environ
    parser = build_parser(None if completing else command_in(sys.argv[1:] if argv is None else argv))
    if completing:  # a shell asking for completions (see `memdir completion`)
        import argcomplete

        argcomplete.autocomplete(parser)
    try:
        args = parser.parse_args(argv)
    except _UsageExit as exc:  # argparse said what is wrong on stderr; --json also wants it on stdout
        if _asks_for_json(sys.argv[1:] if argv is None else argv):
            _print_failure("usage", exc.message, 2)
        raise
    except SystemExit as exc:  # --help printed: `memdir --help > /dev/full` exited 0 with nothing written
        if exc.code not in (0, None):
            raise
        try:
            _flush_stdout()
            if _StdoutFile.failed is not None:  # (argparse swallows a failed write)
                raise _StdoutFile.failed
        except BrokenPipeError:
            return _stdout_gone()
        except OSError as failed:
            print(f"memdir: could not write the output to stdout: {failed.strerror or failed}", file=sys.stderr)
            return 1
        raise
    if args.version:  # `memdir --version | true`: a traceback and exit 1 when printed outside main's try
        from memdir import __version__

        try:
            print(f"memdir {__version__}", flush=True)
        except BrokenPipeError:
            return _stdout_gone()
        except OSError as exc:  # `memdir --version > /dev/full`: a traceback
            print(f"memdir: could not write the output to stdout: {exc.strerror or exc}", file=sys.stderr)
            return 1
        return 0
    if not args.command:
        parser.print_help()
        return 2
    _configure_logging(args)
    _lossless_streams()
    _utf8_arguments(args)
    if argv is None and args.command in ONE_SHOT_COMMANDS:  # this process is the command, not a caller's
        os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    if argv is None:  # this process is the command: its signals are its own
        _stop_signals(args.command)
    _WORKSPACE_CHOSEN.clear()  # (known once the command opens its Memory; not a former call's)
    try:
        code = COMMANDS[args.command](args)
        _flush_stdout()  # inside the try: a reader that went away is handled like any other write
        return code
    except BrokenPipeError:
        return _stdout_gone()
    except CliError as exc:
        print(f"memdir: {for_terminal(str(exc))}", file=sys.stderr)
        return _json_failure(args, "usage" if isinstance(exc, UsageError) else "error", str(exc), exc.exit_code)
    except KeyboardInterrupt as exc:
        signum = _TERMINATED[0] or (15 if isinstance(exc, Terminated) else 0)
        said, code = (_STOPPED_BY.get(signum, "terminated"), 128 + signum) if signum else ("interrupted", 130)
        if not (_quiet(args) and args.command in SERVER_COMMANDS):  # (a supervisor stopping a server: no error)
            print(f"memdir: {said}", file=sys.stderr)
        return _json_failure(args, "interrupted", said, code)
    except Exception as exc:  # every other failure: one clear line, exit 1
        from memdir.config import ConfigError

        label = {"index": "Memory index failed", "search": "Memory search failed",
                 "ltm": "memdir ltm"}.get(args.command, "memdir")
        if isinstance(exc, ConfigError):
            label = "memdir: configuration error"
        from memdir.errors import StdoutFailed, without_source_location

        if isinstance(exc, StdoutFailed):  # the command's work is done: only its output was lost
            print(f"memdir: could not write the output to stdout: {exc.strerror or exc}", file=sys.stderr)
            return 1

        # one line: a library's message can run over several (huggingface_hub's advice, pydantic's report)
        message = " ".join(without_source_location(str(exc)).split())
        # OpenSSL failing an allocation (hashlib under a memory limit) says "not able to copy ctx"
        if isinstance(exc, MemoryError) or "not able to copy ctx" in message:
            from memdir.errors import OUT_OF_MEMORY

            message = OUT_OF_MEMORY
        if isinstance(exc, FileNotFoundError) and not exc.filename and _cwd_gone():  # (said no path at all)
            message = ("the current folder no longer exists (was it deleted?): cd to a folder that does, or give "
                       "--workspace as a full path")
        if getattr(exc, "owner", None) and _WORKSPACE_CHOSEN == [False]:
            # `memdir --agent ops search …` from another folder: the advice to give "this workspace"
            # its own agent id is not what its user wants, who forgot the agent's workspace
            message += (". No workspace was given, so the current folder was taken: to use the index's own, add "
                        f"--workspace {exc.owner}")  # type: ignore[attr-defined]
        if ("disk I/O error" in message or "database or disk is full" in message) and "is the disk full" not in message:
            # SQLite says no more than this when it could not write: the usual cause, in words
            message += " (is the disk full, or a file size limit reached?)"
        print(f"{label}: {for_terminal(message)}", file=sys.stderr)
        if os.environ.get("MEMDIR_DEBUG"):
            raise
        log.debug("traceback", exc_info=True)
        return _json_failure(args, "config" if isinstance(exc, ConfigError) else "error", message or label, 1)


def _cwd_gone() -> bool:
    try:
        os.getcwd()
    except FileNotFoundError:
        return True
    return False


def _json_failure(args: argparse.Namespace, kind: str, message: str, code: int) -> int:
    """With ``--json``, a failure is also one JSON object on stdout (``{"ok": false, "error": …}``),
    so a program reading stdout gets a document it can parse, not an empty string; the one-line
    message stays on stderr for people.  Returns ``code``."""
    if getattr(args, "json", False):
        _print_failure(kind, message, code)
    return code


def _print_failure(kind: str, message: str, code: int) -> None:
    """The ``--json`` failure object on stdout."""
    try:
        print(json_text({"ok": False, "error": {"kind": kind, "message": message, "exitCode": code}}))
        _flush_stdout()
    except (BrokenPipeError, OSError, ValueError):  # stdout gone or closed: stderr said it
        pass


if __name__ == "__main__":
    raise SystemExit(main())
