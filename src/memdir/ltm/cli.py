"""``memdir ltm …``: thin shells over :class:`memdir.ltm.LongTermMemory` methods of the same name.

``list [--all]``, ``stats``, ``store TEXT [--category --importance]``, ``search QUERY [--limit
--min-score]``, ``forget ID | --query Q``, ``export [--out FILE] [--all]``, ``import FILE``,
``reembed``; each with ``--json`` (the method's return value) and the global ``--agent``.
Exit codes: 0 done, 1 not done (nothing matched, several candidates, an error), 2 bad usage.

Only ``argparse`` is imported at module level: ``memdir --help`` must not load LanceDB.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

# failures the CLI reports (as JSON too with --json), its JSON for stdout, and its argument checks
# (`--limit 0` returned one memory and `--min-score 5` none, quietly, before they were used here)
from memdir.cli import CliError, UsageError, _count, _score, for_terminal, json_text


def configure(parser: argparse.ArgumentParser, add_globals: Callable[[argparse.ArgumentParser], None]) -> None:
    """Add the ``ltm`` subcommands; ``add_globals`` adds ``--agent`` and friends to each."""
    sub = parser.add_subparsers(dest="ltm_command", metavar="ACTION")

    def cmd(name: str, help_text: str) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.add_argument("--json", action="store_true", help="JSON output")
        add_globals(p)
        return p

    p = cmd("list", "list long-term memories, oldest first")
    p.add_argument("--all", action="store_true", help="include memories superseded by newer ones")
    cmd("stats", "how many memories, by category; which model and folder")
    p = cmd("store", "store a memory (skipped if a near-identical one exists)")
    p.add_argument("text", help="the memory, e.g. 'I prefer dark mode'")
    p.add_argument("--category", choices=["preference", "fact", "decision", "entity", "other"],
                   help="default: detected from the text")
    p.add_argument("--importance", type=_score, default=0.7, help="0-1 (default 0.7)")
    p = cmd("search", "find memories similar to a query")
    p.add_argument("query", help="what to look for")
    p.add_argument("--limit", type=_count, default=5, help="results (default 5)")
    p.add_argument("--min-score", type=_score, default=0.3, help="minimum similarity (default 0.3)")
    p = cmd("forget", "delete a memory by id (or its first 8 characters), or by --query")
    p.add_argument("id", nargs="?", help="memory id")
    p.add_argument("--query", help="delete the single strong match for this query, or list candidates")
    p = cmd("export", "write the memories as Markdown (one dated bullet per memory)")
    p.add_argument("--out", type=Path, help="file to write (default, or '-': stdout)")
    p.add_argument("--all", action="store_true", help="include superseded memories")
    p = cmd("import", "store the memories of a Markdown file (an export, an edited mirror, or plain bullets) "
                      "or of JSON (ltm list --json, or one object a line)")
    p.add_argument("file", type=Path, help="Markdown or JSON file; '-' reads stdin")
    cmd("reembed", "re-embed every memory with the configured model (after changing models)")


# A result's warnings (a mirror edited by hand, moved aside) are not printed here: the store logs
# each one as it happens (printed twice before, and -q did not silence the copy), and --json has them.
def _print(data: Any) -> None:
    print(json_text(data, indent=2))


def _line(r: Any, tz: str | None) -> str:
    """One memory per line: a stored line break printed as it was made rows of its own, which
    read as other memories (a forged id, date and category) and broke ``| wc -l``."""
    from memdir.ltm.capture import one_line
    from memdir.ltm.markdown import day_of

    score = f"{r.score:.3f} " if r.score is not None else ""
    flag = f"  (superseded by {r.superseded_by[:8]})" if r.superseded_by else ""
    return f"{score}{r.id[:8]}  {day_of(r.created_at, tz)} [{r.category}] {for_terminal(one_line(r.text))}{flag}"


def check_usage(args: argparse.Namespace) -> None:
    """The usage errors argparse cannot see, raised before the configuration is read or LanceDB
    opened.  Why: checked after, ``ltm forget`` with no id exited 1 (LanceDB missing, or a bad
    config) where it exits 2 with both there, and ``ltm store ""`` / ``ltm search ""`` exited 1
    ("text required") where ``memdir append ""`` and ``memdir search ""`` are bad usage (2)."""
    action = getattr(args, "ltm_command", None)
    if not action:
        raise UsageError("ltm: choose an action: list, stats, store, search, forget, export, import, reembed")
    if action == "forget":
        # a blank one (a script's "$ID" left empty) is none: ' ' exited 1, "Invalid memory ID format:", and
        # --query ' ' exited 1 with the tool's "Provide query or memoryId."
        args.id = (args.id or "").strip() or None
        args.query = (args.query or "").strip() or None
        if bool(args.id) == bool(args.query):
            raise UsageError("ltm forget: give a memory id or --query (one of them)")
    if action == "store" and not args.text.strip():
        raise UsageError("ltm store: give the memory's text, e.g. memdir ltm store 'I prefer dark mode'")
    if action == "search" and not args.query.strip():
        raise UsageError("ltm search: give a query, e.g. memdir ltm search 'which theme do I like?'")
    if action == "import" and str(args.file) == "-" and sys.stdin is None:  # `<&-`
        raise UsageError("ltm import: - reads stdin, and stdin is closed")
    if action == "export" and args.out is not None and str(args.out) != "-" and not _export_may_replace(args.out):
        raise UsageError(f"ltm export: {args.out} exists and is not an earlier export; not "
                         "overwritten: give another --out, or remove it first")


def _export_may_replace(path: Path) -> bool:
    """Whether ``ltm export --out`` may write ``path``: missing, empty, or an earlier export (its
    first line is the export's title).  Why: ``--out MEMORY.md`` replaced a person's curated notes
    with the memories' bullets, without a word."""
    from memdir.ltm.markdown import TITLE

    try:
        with open(path, "rb") as fh:
            head = fh.read(len(TITLE.encode()) + 3)  # (a BOM)
    except FileNotFoundError:
        return True
    except IsADirectoryError:
        return False
    except OSError:
        return True  # the write says why it cannot
    return not head.strip() or head.decode("utf-8", "replace").lstrip("\ufeff").startswith(TITLE)


def run(args: argparse.Namespace, loaded: Any) -> int:
    """Run one ``ltm`` action with the resolved configuration."""
    check_usage(args)
    action = args.ltm_command
    from memdir.ltm.memory import LongTermMemory

    with LongTermMemory(loaded.settings) as ltm:
        return ACTIONS[action](ltm, args)


def _list(ltm: Any, args: argparse.Namespace) -> int:
    records = ltm.list(include_superseded=args.all)
    if args.json:
        _print([r.as_dict() for r in records])
    elif not records:
        print("No memories.")
    else:
        print("\n".join(_line(r, ltm.settings.user_timezone) for r in records))
    return 0


def _stats(ltm: Any, args: argparse.Namespace) -> int:
    st = ltm.stats()
    if args.json:
        _print(st)
        return 0
    print(f"Total memories: {st['total']}")
    print(f"Superseded: {st['superseded']}")
    print("By category: " + ", ".join(f"{k} {v}" for k, v in st["byCategory"].items()))
    print(f"Model: {st['provider'] or '-'}/{st['model'] or '-'} · dims {st['dims'] or '-'} · scoring {st['scoring']}")
    print(f"Store: {st['dbPath']}")
    if st["mirror"]:
        print(f"Mirror: {st['mirror']}")
    if st.get("recovery"):
        from memdir.ltm.heal import recovery_ms

        at = recovery_ms(st["recovery"])
        when = datetime.fromtimestamp(at / 1000, UTC).strftime("%Y-%m-%d %H:%M UTC") if at else "at an unknown time"
        print(f"Recovered {when}: {st['recovery'].get('message')}")
    if st.get("issue"):
        print(f"Issue: {st['issue']}")
    return 0


def _store(ltm: Any, args: argparse.Namespace) -> int:
    result = ltm.store(args.text, importance=args.importance, category=args.category, source="cli")
    if args.json:
        _print(result.as_dict())
    elif result.action == "duplicate":
        print(f'Similar memory already exists: {result.record.id} "{for_terminal(result.record.text)}"')
    else:
        print(f"Stored: {result.record.id} [{result.record.category}] {for_terminal(result.record.text)}")
        for old in result.superseded:
            print(f"Superseded: {old.id} [{old.category}] {for_terminal(old.text)}")
    return 0


def _search(ltm: Any, args: argparse.Namespace) -> int:
    hits = ltm.search(args.query, limit=args.limit, min_score=args.min_score)
    if args.json:
        _print([h.as_dict() for h in hits])
    elif not hits:
        print("No matches.")
    else:
        print("\n".join(_line(h, ltm.settings.user_timezone) for h in hits))
    return 0


def _forget(ltm: Any, args: argparse.Namespace) -> int:
    result = ltm.forget(args.id) if args.id else ltm.forget(query=args.query)
    if args.json:
        out = result.as_dict()
        if result.action != "deleted":  # a failure like any other --json failure, the matches kept
            message = ("several memories match; forget one by id" if result.action == "candidates" else
                       f"no memory with id {args.id}" if result.action == "not_found" else
                       "no matching memories found")
            out = {"ok": False, "error": {"kind": result.action, "message": message, "exitCode": 1}, **out}
        _print(out)
    elif result.action == "deleted":
        print(f"Forgotten: {result.record.id} [{result.record.category}] {for_terminal(result.record.text)}")
    elif result.action == "candidates":
        print("\n".join(_line(c, ltm.settings.user_timezone) for c in result.candidates))
        print("Several memories match; forget one by id.", file=sys.stderr)
    elif result.action == "not_found":
        print(f"memdir ltm forget: no memory with id {args.id}", file=sys.stderr)
    else:
        print("No matching memories found.", file=sys.stderr)
    return 0 if result.action == "deleted" else 1


def _export(ltm: Any, args: argparse.Namespace) -> int:
    text = ltm.export(include_superseded=args.all)
    count = sum(1 for line in text.splitlines() if line.startswith("- "))
    if args.out is None or str(args.out) == "-":  # '-' as import reads it: it wrote a file named '-'
        # with --json stdout is one JSON document: the Markdown went out bare, which no reader parsed
        if args.json:
            _print({"path": None, "memories": count, "text": text})
        else:
            from memdir.cli import write_document

            write_document(text)  # UTF-8 whatever the locale: what `ltm import -` reads back
        return 0
    from memdir.atomic_write import replace_file

    args.out.parent.mkdir(parents=True, exist_ok=True)
    # whole or not at all (a full disk left half an export in place of the last one), and with
    # the permissions of the file it replaces, else a new file's
    replace_file(args.out, text.encode("utf-8"), mode=0o666)
    if args.json:
        _print({"path": str(args.out), "memories": count})
    else:
        print(f"Exported {count} memories to {args.out}")
    return 0


def _import(ltm: Any, args: argparse.Namespace) -> int:
    from memdir.reading import MAX_NOTE_BYTES

    # Bytes, decoded as UTF-8 whatever the locale: under LC_ALL=C PYTHONUTF8=0 stdin's "café" was
    # stored as "caf\ufffd\ufffd", and a byte that is not UTF-8 as U+FFFD, without a word.  At most
    # what a note may hold: `ltm import /dev/zero` read until memory ran out.
    if str(args.file) == "-":  # (stdin closed: a usage error, see check_usage)
        name, data = "stdin", sys.stdin.buffer.read(MAX_NOTE_BYTES + 1)
    else:
        try:
            with open(args.file, "rb") as fh:
                name, data = str(args.file), fh.read(MAX_NOTE_BYTES + 1)
        except OSError as exc:
            raise CliError(f"ltm import: cannot read {args.file}: {exc.strerror or exc}") from None
    if len(data) > MAX_NOTE_BYTES:
        raise CliError(f"ltm import: {name} holds more than {MAX_NOTE_BYTES:,} bytes, the most an import may be; "
                       "nothing was imported")
    from memdir.reading import note_encoding

    # A UTF-16 file by its byte order mark: what Windows PowerShell 5's `memdir ltm export > ltm.md`
    # writes, refused as "not valid UTF-8 (at byte 1)", so an export there did not import back.
    encoding = note_encoding(data)
    try:
        text = data[2:].decode(encoding) if encoding != "utf-8" else data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        where = f"at byte {exc.start + 1 + (2 if encoding != 'utf-8' else 0)}"
        what = "UTF-8" if encoding == "utf-8" else "UTF-16"
        raise CliError(f"ltm import: {name} is not valid {what} ({where}); nothing imported") from None
    progress, close = _import_progress(not args.json and not getattr(args, "quiet", False))
    try:
        report = ltm.import_markdown(text, progress=progress)
    finally:
        close()
    if report.skipped_lines and not (report.created or report.updated or report.unchanged or report.duplicates):
        # (a file of no bullets was "Imported: 0 created, …", exit 0, as if it had worked)
        lines = _numbers(report.skipped_lines)
        raise CliError(f"ltm import: {name} holds no memory memdir can read (lines {lines} not understood): it "
                       "reads Markdown bullets ('- I prefer dark mode', as ltm export writes) or JSON (ltm list "
                       "--json, or one object a line); nothing imported")
    if args.json:
        _print(report.as_dict())
    else:
        # the memories a bullet superseded left search and recall: said, as `ltm store` says them
        superseded = f", {len(report.superseded)} superseded (ltm list --all)" if report.superseded else ""
        print(f"Imported: {len(report.created)} created, {len(report.updated)} updated, "
              f"{len(report.unchanged)} unchanged, {len(report.duplicates)} duplicates{superseded}")
        if report.skipped_lines and not getattr(args, "quiet", False):  # a note, which -q leaves out
            print(f"Lines not understood (not bullets): {_numbers(report.skipped_lines)}", file=sys.stderr)
    return 0


def _numbers(lines: list[int], most: int = 10) -> str:
    """Line numbers for a person: the first few and how many (10,000 of them made one line of 58 KB)."""
    shown = ", ".join(map(str, lines[:most]))
    return shown if len(lines) <= most else f"{shown}, … ({len(lines):,} lines)"


def _import_progress(enabled: bool, action: str = "ltm import"
                     ) -> tuple[Callable[[str, int, int], None] | None, Callable[[], None]]:
    """Progress of a long import (or reembed) on stderr, as ``memdir index`` shows it: a bar a
    stage on a terminal, plain lines elsewhere (none for a quick one).  Why: 10,000 bullets
    embedded by the local model took minutes without a word, and looked hung."""
    if not enabled:
        return None, lambda: None
    from memdir.cli import _terminal_columns

    if not sys.stderr.isatty() or _terminal_columns(sys.stderr) == 0:
        from types import SimpleNamespace

        from memdir.progress import ProgressLines

        lines = ProgressLines(sys.stderr, action=action)
        return (lambda stage, done, total: lines(done, total, SimpleNamespace(  # type: ignore[arg-type]
            unit=f"memories {'embedded' if stage == 'embedding' else 'written'}"))), lambda: None
    from tqdm import tqdm

    bars: dict[str, Any] = {}

    def update(stage: str, done: int, total: int) -> None:
        if stage not in bars:
            for bar in bars.values():
                bar.close()
            bars[stage] = tqdm(total=total, desc=f"{action}: {stage}", unit="memory", file=sys.stderr, leave=False)
        bars[stage].n = done
        bars[stage].refresh()

    def close() -> None:
        for bar in bars.values():
            bar.close()

    return update, close


def _reembed(ltm: Any, args: argparse.Namespace) -> int:
    progress, close = _import_progress(not args.json and not getattr(args, "quiet", False), "ltm reembed")
    try:
        count = ltm.reembed(progress=progress)
    finally:
        close()
    if args.json:
        _print({"reembedded": count})
    else:
        print(f"Re-embedded {count} memories with {ltm.embedder.key[0]}/{ltm.embedder.key[1]}")
    return 0


ACTIONS: dict[str, Callable[[Any, argparse.Namespace], int]] = {
    "list": _list, "stats": _stats, "store": _store, "search": _search, "forget": _forget,
    "export": _export, "import": _import, "reembed": _reembed,
}
