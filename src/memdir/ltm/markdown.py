"""Long-term memories as Markdown: ``ltm export``, ``ltm import`` and the workspace mirror.

Nothing should live only in a binary store.  One dated bullet per memory, with its category and
id (and importance when it is not the default 0.7)::

    - 2026-01-12 [preference] I prefer dark mode (id: 0b4e7c1e-5d2f-4c1a-9a55-0d4f2f3f6b1e)
    - 2026-01-14 [decision, superseded] We use MySQL (id: …, superseded by: …)

A memory spanning several lines continues on lines indented by two spaces.  :func:`parse`
reads this format back, and also plain bullets a person wrote (``- I like tea``, optionally
``- [preference] …``), so an export restores a store and an edited file can be imported.

**The mirror** (``longTermMemory.mirror``) is this rendering of the *active* memories, kept at
``memory/long-term.md`` so the memory-core index searches it too.  The store is the source of
truth and the mirror is regenerated after every change, as its header says.  memdir remembers
the SHA-256 of what it last wrote; if the file was changed by someone else since, the edited
file is first moved aside to ``<name>.edited-<UTC time>`` (not a ``.md`` file, so it is not
indexed twice) and a warning names it — an edit is never overwritten silently, and
``memdir ltm import <that file>`` applies it to the store.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, time, tzinfo
from pathlib import Path

from memdir.atomic_write import replace_file
from memdir.ltm.store import MemoryRecord
from memdir.timezones import resolve_timezone

DEFAULT_IMPORTANCE = 0.7
TITLE = "# Long-term memory"
MIRROR_MARK = "<!-- memdir:long-term-memory mirror"

_BULLET = re.compile(
    r"^(?:(?P<date>\d{4}-\d{2}-\d{2})\s+)?(?:\[(?P<category>[a-z]+)(?P<superseded>,\s*superseded)?\]\s+)?"
    r"(?P<text>.*?)"
    # The id's leading blanks start only after a non-blank: "\s+" tried at every blank of a run
    # in the text, each scanning to the run's end (a bullet with 40,000 spaces took 3 s to read).
    # The importance's digits are taken whole ("[0-9]*\.?[0-9]+" split a run of digits every way
    # between its two parts: 20,000 digits took 25 s to read, 60,000 five minutes).
    # (An exponent too: what exports before 0.0001 was written without one said, "1e-05".)
    r"(?:(?<!\s)\s+\(id:\s*(?P<id>[0-9a-fA-F-]{36})(?:,\s*importance:\s*"
    r"(?P<importance>(?>[0-9]+(?:\.[0-9]+)?|\.[0-9]+)(?:[eE][-+]?[0-9]{1,3})?))?"
    r"(?:,\s*superseded by:\s*(?P<by>[0-9a-fA-F-]{36}))?\))?$",
    re.DOTALL,
)


@dataclass
class ParsedMemory:
    """One bullet read back from Markdown; absent parts are ``None``."""

    text: str
    category: str | None = None
    id: str | None = None
    date: str | None = None
    importance: float | None = None
    superseded_by: str | None = None
    superseded: bool = False
    line: int = 0
    #: From JSON only (a bullet's date has no time of day): the exact milliseconds, and the source.
    created_at: int | None = None
    superseded_at: int | None = None
    source: str | None = None


def _zone(timezone: str | None) -> tzinfo:
    """The user's zone with its rules: the machine's offset of today (its ``astimezone()``) put a
    summer memory written after midnight on the day before, once the clocks went back."""
    return resolve_timezone(timezone)[0]


def day_of(created_ms: int, timezone: str | None = None) -> str:
    """The memory's day in the user's zone; at the calendar's ends (a bullet dated 0001-01-01
    imported in Tokyo is stored before year 1 in UTC) its UTC day or that end, never an error:
    one such memory made every ``ltm list``, export and mirror fail with "year 0 is out of range"."""
    for zone in (_zone(timezone), UTC):
        try:
            return datetime.fromtimestamp(created_ms / 1000, tz=zone).date().isoformat()
        except (OverflowError, ValueError, OSError):
            continue
    return "0001-01-01" if created_ms < 0 else "9999-12-31"


def ms_of_day(day: str, timezone: str | None = None) -> int:
    """Midnight of ``day`` (``YYYY-MM-DD``) in the user's zone; ``ValueError`` naming the date
    when there is no such day (2026-02-30, 0000-01-01)."""
    try:
        d = datetime.strptime(day, "%Y-%m-%d").date()
    except ValueError as exc:
        raise ValueError(f"invalid date {day!r}: {exc}") from None
    return int(datetime.combine(d, time(0, 0), tzinfo=_zone(timezone)).timestamp() * 1000)


def render_bullet(record: MemoryRecord, timezone: str | None = None) -> str:
    label = record.category + (", superseded" if record.superseded_by else "")
    meta = [f"id: {record.id}"]
    if abs(float(record.importance) - DEFAULT_IMPORTANCE) > 1e-6:
        meta.append(f"importance: {_digits(float(record.importance))}")
    if record.superseded_by:
        meta.append(f"superseded by: {record.superseded_by}")
    lines = record.text.strip().splitlines() or [""]
    body = lines[0] + "".join(f"\n  {line}" if line.strip() else "\n" for line in lines[1:])
    return f"- {day_of(record.created_at, timezone)} [{label}] {body} ({', '.join(meta)})"


def _digits(value: float) -> str:
    """Four significant digits, never in exponent form: an importance below 0.0001 was written
    "importance: 1e-05", which no import read, so the memory came back under a new id, its id and
    importance part of its text, at importance 0.7 (and an older memdir reads only digits)."""
    import numpy as np

    return np.format_float_positional(value, precision=4, unique=False, fractional=False, trim="-")


def render(records: Iterable[MemoryRecord], *, timezone: str | None = None, header: str = "") -> str:
    """The Markdown document: a title, an optional header paragraph, one bullet per memory."""
    parts = [TITLE, ""]
    if header:
        parts += [header, ""]
    bullets = [render_bullet(r, timezone) for r in records]
    parts += bullets or ["_No memories yet._"]
    return "\n".join(parts) + "\n"


def mirror_header(agent_id: str, db_path: Path) -> str:
    return (f"{MIRROR_MARK} of agent \"{agent_id}\" ({db_path}). Generated from the store after every change: "
            "do not edit here (an edited copy is moved aside as <name>.edited-<time>). Change memories with "
            "`memdir ltm store`, `memdir ltm forget` or `memdir ltm import FILE`. -->")


def parse(text: str) -> tuple[list[ParsedMemory], list[int]]:
    """Bullets of a Markdown document, and the numbers of non-empty lines that were not understood.

    Headings, HTML comments, the "no memories" line and blank lines are skipped silently.
    """
    items: list[ParsedMemory] = []
    skipped: list[int] = []
    current: list[str] | None = None
    start = 0
    in_comment = False

    def flush() -> None:
        if current is not None:
            while current and not current[-1]:
                current.pop()  # blank lines after a bullet separate it from what follows
            item = _parse_bullet("\n".join(current), start)
            if item is not None:
                items.append(item)
            else:
                skipped.append(start)

    for no, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if in_comment:
            in_comment = "-->" not in stripped
            continue
        # A bullet's indented continuation first: a memory line "<!-- …" read as a comment, and
        # everything after it, up to a "-->", was dropped (an export restored 1 memory of 4).
        if current is not None and (line.startswith("  ") or line.startswith("\t")) and stripped:
            # Less the two spaces (or tab) export adds, and nothing more: stripped whole, a memory's
            # own indented lines ("Steps:\n  - build") came back flush left, and an export imported
            # into its own store "updated" each such memory to that changed text.
            current.append((line[2:] if line.startswith("  ") else line[1:]).rstrip())
            continue
        if stripped.startswith("<!--"):
            flush()
            current = None
            in_comment = "-->" not in stripped
            continue
        if re.match(r"^[-*+]\s+", line):
            flush()
            current, start = [re.sub(r"^[-*+]\s+", "", line)], no
        elif current is not None and not stripped:
            current.append("")  # kept if the memory goes on: "a\n\nb" came back as "a\nb", an "update"
        else:
            flush()
            current = None
            if stripped and not stripped.startswith("#") and stripped != "_No memories yet._":
                skipped.append(no)
    flush()
    return items, skipped


#: JSON, not Markdown: an object first, or an array opening on one (or empty).  A Markdown file
#: starting with a link ("[notes](x)") is still Markdown.
_JSON_START = re.compile(r"^\s*(?:\{|\[\s*[{\]])")
_BLANKS = re.compile(r"\s*")


def parse_any(text: str) -> tuple[list[ParsedMemory], list[int]]:
    """:func:`parse` for Markdown; for JSON, :func:`parse_json`.  Why: ``ltm list --all --json``
    (the one copy that keeps each memory's time to the millisecond) or a JSONL file given to
    ``ltm import`` was read as Markdown, every line "not understood", and the import said
    "Imported: 0 created", exit 0."""
    return parse_json(text) if _JSON_START.match(text) else parse(text)


def parse_json(text: str) -> tuple[list[ParsedMemory], list[int]]:
    """Memories of a JSON array of objects (``ltm list --json``) or of JSON Lines, one object a
    line, each ``{"text", "id"?, "category"?, "importance"?, "createdAt"?, "supersededBy"?,
    "supersededAt"?, "source"?}`` (a LanceDB row of OpenClaw's has these names; other keys are
    passed over).  Raises :class:`LtmError` naming the line of the first one that is not such an
    object: nothing is imported from a file read in part."""
    from memdir.ltm.store import LtmError

    decoder = json.JSONDecoder()
    found: list[tuple[int, object]] = []
    try:
        if text.lstrip().startswith("["):
            json.loads(text)  # the whole array first: its error's line, before anything is taken
            # then each element with the line it starts on (valid JSON: "[", values, ",", "]")
            at, line, counted = _BLANKS.match(text, text.index("[") + 1).end(), 1, 0
            while text[at] != "]":
                line, counted = line + text.count("\n", counted, at), at
                value, end = decoder.raw_decode(text, at)
                found.append((line, value))
                at = _BLANKS.match(text, end).end()
                if text[at] == ",":
                    at = _BLANKS.match(text, at + 1).end()
        else:
            try:
                found.append((1, json.loads(text)))  # one object, maybe over several lines
            except json.JSONDecodeError:
                for no, row in enumerate(text.splitlines(), 1):
                    if row.strip():
                        found.append((no, json.loads(row)))
    except json.JSONDecodeError as exc:  # (a line of JSON Lines: its own number)
        line_no = exc.lineno if text.lstrip().startswith("[") else no
        raise LtmError(f"line {line_no}: not valid JSON ({exc.msg}); nothing imported") from None
    if len(found) == 1 and isinstance(found[0][1], dict) and {"path", "memories", "text"} <= found[0][1].keys():
        # `ltm export --json`'s object, whose text is the export: it became one memory holding all of them
        exported = found[0][1]["text"]
        if isinstance(exported, str):
            return parse(exported)
    return [_json_memory(value, no) for no, value in found], []


def _json_memory(value: object, line: int) -> ParsedMemory:
    from memdir.ltm.store import UUID_RE, LtmError

    def fail(what: str) -> LtmError:
        return LtmError(f"line {line}: {what}; nothing imported")

    if not isinstance(value, dict):
        raise fail(f"a memory is a JSON object ({{\"text\": …}}), not {type(value).__name__}")
    text = value.get("text")
    if not isinstance(text, str) or not text.strip():
        raise fail('a memory needs its "text", a string')

    def optional(key: str, kind: type | tuple[type, ...]) -> object:
        got = value.get(key)
        if got is not None and (not isinstance(got, kind) or isinstance(got, bool)):
            what = "string" if kind is str else "whole number (milliseconds)" if kind is int else "number"
            raise fail(f'"{key}" is {json.dumps(got)[:40]}, not a {what}')
        return got

    memory_id, by = optional("id", str), optional("supersededBy", str)
    for key, uid in (("id", memory_id), ("supersededBy", by)):
        if uid is not None and not UUID_RE.match(str(uid)):
            raise fail(f'"{key}" {json.dumps(uid)[:50]} is not a memory id (a UUID)')
    importance = optional("importance", (int, float))
    created, at = optional("createdAt", int), optional("supersededAt", int)
    return ParsedMemory(text=text.strip(), category=optional("category", str), id=memory_id,  # type: ignore[arg-type]
                        importance=float(importance) if importance is not None else None,  # type: ignore[arg-type]
                        superseded_by=by, superseded=by is not None, line=line,  # type: ignore[arg-type]
                        created_at=created, superseded_at=at, source=optional("source", str))  # type: ignore[arg-type]


def _parse_bullet(body: str, line: int) -> ParsedMemory | None:
    match = _BULLET.match(body.strip())
    if match is None or not match.group("text").strip():
        return None
    importance = match.group("importance")
    return ParsedMemory(
        text=match.group("text").strip(), category=match.group("category"), id=match.group("id"),
        date=match.group("date"), importance=float(importance) if importance else None,
        superseded_by=match.group("by"), superseded=bool(match.group("superseded")), line=line)


# --- the mirror -----------------------------------------------------------------------------------


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _owner_line(text: str) -> str | None:
    return next((line for line in text.splitlines() if line.startswith(MIRROR_MARK)), None)


def _mirrored_store_exists(owner_line: str) -> bool:
    """Whether the store a mirror's owner line names (``… of agent "x" (<db path>). Generated …``)
    is still there; ``True`` when the line names none.  A workspace moved or renamed gets a new
    store, and its mirror, naming the old one, was refused as another agent's for good.

    Found by position, not a backtracking regex: a long owner line holding many ``" (`` (a
    damaged or hostile mirror) took 0.84 s at 24 KB, 84 s at 240 KB."""
    agent = owner_line.find('of agent "')
    opening = owner_line.find('" (', agent + len('of agent "')) if agent >= 0 else -1
    closing = owner_line.rfind("). Generated from the store")
    if opening < 0 or closing < opening + 3:
        return True
    return os.path.exists(owner_line[opening + 3:closing])


def write_mirror(path: Path, content: str, state_file: Path, *, now: datetime | None = None,
                 applied: str | None = None) -> str | None:
    """Write ``content`` to ``path`` atomically; returns a warning if an edited file was moved aside.

    ``applied`` is the text an ``ltm import`` just applied to the store: a mirror holding that text
    was edited and then imported, so its edits are in the store and it is replaced without a copy
    (it was moved aside with "apply it with `memdir ltm import …`", which had just been done).

    A file that is another store's mirror (another agent sharing the workspace), or a note that
    memdir never wrote and that is no mirror, is left alone.
    """
    warning = None
    state = _read_state(state_file)
    if path.is_symlink() or path.exists():
        if not path.is_symlink() and not path.is_file():
            # a folder was moved aside whole as an "edited" mirror: mirror.path "" or "." named the
            # workspace itself (it became ws.edited-<time> and the mirror took its name), "memory" every note
            what = "a folder" if path.is_dir() else "not a regular file"
            return (f"{path} is {what}, not a long-term memory mirror; not touched: point "
                    "longTermMemory.mirror.path at a file of its own (default memory/long-term.md)")
        try:
            current = path.read_bytes() if not path.is_symlink() else None
        except OSError as exc:
            # nothing says it is ours: a file that cannot be read is left where it is, not moved aside
            return f"{path} cannot be read ({exc.strerror or exc}); the long-term memory mirror was not written"
        data = content.encode("utf-8")
        # (the very bytes about to be written need no copy kept, whatever the record says)
        ours = current is not None and (_sha(current) in state.get(str(path), "").split() or current == data or (
            applied is not None and current.decode("utf-8", "replace").removeprefix("\ufeff") == applied))
        theirs = _owner_line(current.decode("utf-8", "replace")) if current is not None and not ours else None
        if current is not None and not ours and theirs is None and str(path) not in state:
            # Never written here and no mirror at all: a person's own note (MEMORY.md?), not an edit.
            return (f"{path} is a note memdir did not write, not a long-term memory mirror; not overwritten: "
                    "point longTermMemory.mirror.path at a file of its own (default memory/long-term.md)")
        gone = theirs is not None and theirs != _owner_line(content)  # another store's: gone, else refused here
        if gone and _mirrored_store_exists(theirs or ""):
            return (f"{path} is the long-term memory mirror of another store ({theirs[len(MIRROR_MARK):80]}…); "
                    "not overwritten: give each agent its own longTermMemory.mirror.path, e.g. "
                    "memory/long-term-{agentId}.md")
        if not ours:
            stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%SZ")
            aside = path.with_name(f"{path.name}.edited-{stamp}")
            n = 1
            while aside.exists() or aside.is_symlink():
                n += 1
                aside = path.with_name(f"{path.name}.edited-{stamp}-{n}")
            os.replace(path, aside)
            if gone:
                why = "mirrors a store that is no longer there (moved with its workspace, or deleted); that mirror"
            elif str(path) not in state:
                # the record of what memdir wrote is missing or damaged (a zero-filled or truncated
                # mirror-state.json, a state folder restored or copied): an edit cannot be told, and
                # "was changed outside memdir" sent the user looking for an edit nobody made
                why = (f"could not be checked against the mirror memdir last wrote (its record {state_file} is "
                       "missing or damaged); kept in case it was edited, it")
            else:
                why = "was changed outside memdir since it was last generated; the edited file"
            warning = (f"{path} {why} was moved to {aside.name} (apply it with `memdir ltm import {aside}`) and the "
                       "mirror regenerated")
    path.parent.mkdir(parents=True, exist_ok=True)
    data = content.encode("utf-8")
    # Until the new file is in place both it and the one it replaces are ours: a process killed
    # between the two writes left a mirror whose hash was not recorded, moved aside as "edited".
    state[str(path)] = f"{state.get(str(path), '')} {_sha(data)}".strip()
    _write_state(state_file, state)
    replace_file(path, data, mode=0o666)  # a note in the workspace: readable as the user's own notes
    state[str(path)] = _sha(data)
    _write_state(state_file, state)
    return warning


def _read_state(state_file: Path) -> dict[str, str]:
    """The mirror's recorded hashes; ``{}`` when the file is missing, damaged or no regular file
    (a FIFO at its name was opened as a file: every store waited for a writer for ever, holding
    the store's lock, so every other ``ltm`` command of the agent waited too)."""
    from memdir.reading import read_regular

    try:
        data = json.loads(read_regular(state_file, limit=16 << 20).decode("utf-8"))
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_state(state_file: Path, state: dict[str, str]) -> None:
    """Replace the mirror's state file whole (a write that fails, a full disk, leaves no temporary file)."""
    state_file.parent.mkdir(parents=True, exist_ok=True)
    replace_file(state_file, json.dumps(state, indent=2).encode("utf-8"))
