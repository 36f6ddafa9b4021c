"""Line-based Markdown chunking (R§3), with two deliberate fixes.

A chunk holds whole lines (long lines are cut into segments of at most ``maxChars``) up to
``maxChars = max(32, tokens*4)`` characters, where CJK characters weigh 4 (≈ one token each).
After a chunk is emitted, its last lines are carried into the next one as overlap
(``overlap*4`` characters, at least one line), exactly as OpenClaw does, except:

* **carry cap** — a carried line is never longer than the overlap budget itself, and when the
  carried lines plus the next segment would not fit in ``maxChars`` the oldest carried lines are
  dropped until they do or one is left.  So a chunk never exceeds ``maxChars`` plus one carried
  line; OpenClaw can carry a whole 1600-character segment and emit 3201-character chunks
  (R§17 vector 5, R§18 "overlap carry doubles chunk size").
* **word-end cuts** — a long line's segment ends after a space (one in its second half), else
  never inside a character a reader sees as one; OpenClaw cuts every ``maxChars`` code units, so
  the word there is split between two chunks and no keyword search finds it.

Lengths are counted in code points, not UTF-16 units, so an emoji is one character.
"""

from __future__ import annotations

import hashlib
import itertools
import re
from collections.abc import Callable
from dataclasses import dataclass

from memdir.textutil import character_cut, front_matter_lines, is_cjk, literal_lines, setext_headings, weighted_len


@dataclass(frozen=True, slots=True)
class Chunk:
    start_line: int
    end_line: int
    text: str
    hash: str


def sha256_text(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def chunk_id(source: str, path: str, start_line: int, end_line: int, chunk_hash: str, model: str) -> str:
    """Stable chunk id shared by ``chunks``, ``chunks_fts`` and ``chunks_vec`` (R§4)."""
    return sha256_text(f"{source}:{path}:{start_line}:{end_line}:{chunk_hash}:{model}")


def _segments(line: str, max_chars: int, tokens: int) -> list[str]:
    """Cut one line into slices of at most ``max_chars`` characters and ``max_chars`` weight, each
    as long as that allows, but ending after a space (one in its second half; a word, a path or
    a URL is not cut) and never inside a character a reader sees as one.

    A CJK-heavy slice of ``max_chars`` characters used to be cut by weight on its own, leaving a
    short remainder in the middle of the line: short enough to be carried as overlap, it shared a
    chunk with the line's next slice, and the snippet showed a line break the note does not have.
    A slice cut where the characters ran out split the word there in two: in a paragraph written
    on one long line (as most editors save one), that word was found by no search."""
    if not line:
        return [""]
    out: list[str] = []
    start = 0
    while start < len(line):
        piece = line[start : start + max_chars]
        if weighted_len(piece) > max_chars:  # CJK-heavy: the longest start that weighs at most max_chars
            weight = 0
            for n, ch in enumerate(piece):
                weight += 4 if is_cjk(ch) else 1
                if weight > max_chars:
                    piece = piece[:n]
                    break
        end = start + len(piece)
        if end < len(line) and len(piece) > 1 and not line[end - 1].isspace() and not line[end].isspace():
            space = max(piece.rfind(" "), piece.rfind("\t"))  # inside a word (a path, a URL): cut after a space
            cut = space + 1 if space >= len(piece) // 2 else character_cut(line[start : end + 1], len(piece))
            piece = piece[:cut]
        out.append(piece)
        start += len(piece)
    return out


def chunk_markdown(content: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Split ``content`` into overlapping line-range chunks; always returns at least one chunk."""
    max_chars = max(32, tokens * 4)
    overlap_chars = max(0, overlap * 4)
    chunks: list[Chunk] = []
    buffer: list[tuple[str, int, int]] = []  # (segment, line number, cost)
    size = 0

    def flush() -> None:
        text = "\n".join([seg for seg, _, _ in buffer])
        chunks.append(Chunk(buffer[0][1], buffer[-1][1], text, sha256_text(text)))

    def carry(next_cost: int, next_line: int) -> None:
        nonlocal buffer, size
        if overlap_chars <= 0 or buffer[-1][1] == next_line:
            # nor a piece of the line the next chunk goes on with: the two pieces, put together
            # with a line break between them, made a snippet the note does not have (a long line
            # of URLs with overlap = tokens / 2: "…/a/ve\nry/long/path…"), over maxChars
            buffer, size = [], 0
            return
        kept: list[tuple[str, int, int]] = []
        acc = 0
        for entry in reversed(buffer):
            if entry[2] > overlap_chars + 1:  # never carry a line longer than the overlap itself
                break
            kept.insert(0, entry)
            acc += entry[2]
            if acc >= overlap_chars:
                break
        while len(kept) > 1 and acc + next_cost > max_chars:
            acc -= kept.pop(0)[2]
        buffer, size = kept, acc

    for line_no, line in enumerate(content.split("\n"), start=1):
        # the common line is one segment weighing its length (what _segments and weighted_len say
        # for it, without two calls per line: a third of chunking a daily log)
        plain = len(line) <= max_chars and line.isascii()
        for seg in (line,) if plain else _segments(line, max_chars, tokens):
            cost = (len(seg) if plain else weighted_len(seg)) + 1
            if buffer and size + cost > max_chars:
                flush()
                carry(cost, line_no)
            buffer.append((seg, line_no, cost))
            size += cost
    if buffer:
        flush()
    return chunks


def remap_lines(chunks: list[Chunk], line_map: list[int] | None) -> list[Chunk]:
    """Replace content line numbers by source line numbers (session transcripts, R§8)."""
    if not line_map:
        return chunks

    def at(line: int) -> int:
        return line_map[min(max(line, 1), len(line_map)) - 1]

    return [Chunk(at(c.start_line), at(c.end_line), c.text, c.hash) for c in chunks]


# -- curated files: one chunk per section, bullet groups kept whole -----------------------------

_HEADING = re.compile(r"^#{1,6}\s")
_TOP_ITEM = re.compile(r"^(?:[-*+]|\d+[.)])\s")


def _items(lines: list[str], first: int, fenced: set[int], setext: dict[int, int]) -> list[tuple[int, int]]:
    """Line ranges (1-based, inclusive) of a block's top-level list items, each with its
    indented continuation (nested bullets stay with their parent); code (``fenced``: 0-based
    line numbers of the file) starts none, a heading (``setext``: a Setext one's text line) one."""
    out: list[tuple[int, int]] = []
    for i, line in enumerate(lines):
        if i == 0 or first + i - 1 in setext or (
                (_TOP_ITEM.match(line) or _HEADING.match(line)) and (not fenced or first + i - 1 not in fenced)):
            out.append((first + i, first + i))
        else:
            out[-1] = (out[-1][0], first + i)
    return out


def _blocks(lines: list[str], fenced: set[int], setext: dict[int, int], front: int = 0) -> list[tuple[int, int]]:
    """Sections and, inside them, blank-line-separated blocks (a bullet group, a paragraph):
    a heading starts a block and keeps the section's first block with it; blank lines stay with
    the block above, so the blocks cover the file's lines without gaps (as OpenClaw's ranges do).
    A fenced code block or front matter (``fenced``: its 0-based line numbers) is one block: its
    ``# comment`` lines are no headings and its blank lines part no paragraphs.  A Setext heading
    (``setext``: its text line, 0-based) is a heading with its underline: it was a chunk of its
    own (``Preferences`` and its ``===``), its section's lines a chunk without it.  The ``front``
    lines of front matter (its title, tags, date) keep the note's first heading and block with
    them, as a heading does: alone, a result for the note's title showed its metadata and nothing
    of the note."""
    blocks: list[tuple[int, int]] = []
    start = 1
    heading_only = False
    prev_blank = False
    for n, line in enumerate(lines, start=1):
        blank = not line.strip()
        code = bool(fenced) and n - 1 in fenced and n - 2 in fenced  # inside a fence, past its opening line
        if n == front:  # the front matter's closing fence: what follows goes with it
            new, heading_only = False, True
        elif code:
            new = False
        elif (_HEADING.match(line) or (setext and n - 1 in setext)) and front and start == 1 and heading_only:
            new = False  # the note's first heading, right under its front matter
            front = 0
        elif _HEADING.match(line) or (setext and n - 1 in setext):
            new, heading_only = True, True
        elif setext and n - 2 in setext:  # a Setext heading's underline
            new = False
        elif not blank and prev_blank and not heading_only:
            new = True
        else:
            new = False
            if not blank:
                heading_only = False
        if new and n > start:
            blocks.append((start, n - 1))
            start = n
        prev_blank = blank
    blocks.append((start, len(lines)))
    return blocks


def chunk_sections(content: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Chunks that follow a curated file's structure (``MEMORY.md``): every heading section and
    every bullet group or paragraph in it (blank-line separated) is its own chunk, the heading
    line going with the section's first block.  A block too big for one chunk is cut between
    top-level list items, never inside one (an item bigger than a chunk is cut by
    :func:`chunk_markdown`).  Line numbers are the file's."""
    max_chars = max(32, tokens * 4)
    lines = content.split("\n")
    fenced = literal_lines(content)
    setext = setext_headings(content, fenced)
    chunks: list[Chunk] = []
    front = front_matter_lines(content)

    # Sizes of lines a..b as differences of running totals: summed afresh for each item, a block of
    # 200k bullets took seconds (each item re-measured the whole chunk being gathered).
    totals = [0, *itertools.accumulate(len(x) + 1 if x.isascii() else weighted_len(x) + 1 for x in lines)]

    def size(a: int, b: int) -> int:
        return totals[b] - totals[a - 1]

    def emit(a: int, b: int) -> None:
        text = "\n".join(lines[a - 1 : b])
        if text.strip():
            chunks.append(Chunk(a, b, text, sha256_text(text)))

    for b_start, b_end in _blocks(lines, fenced, setext, front):
        if size(b_start, b_end) <= max_chars:
            emit(b_start, b_end)
            continue
        cur: tuple[int, int] | None = None
        for i_start, i_end in _items(lines[b_start - 1 : b_end], b_start, fenced, setext):
            if size(i_start, i_end) > max_chars:
                if cur:
                    emit(*cur)
                    cur = None
                for c in chunk_markdown("\n".join(lines[i_start - 1 : i_end]), tokens, overlap):
                    if c.text.strip():
                        chunks.append(Chunk(c.start_line + i_start - 1, c.end_line + i_start - 1, c.text, c.hash))
                continue
            if cur and size(cur[0], i_end) > max_chars:
                emit(*cur)
                cur = None
            cur = (cur[0] if cur else i_start, i_end)
        if cur:
            emit(*cur)
    return chunks or [Chunk(1, len(lines), content, sha256_text(content))]


def embedding_windows(text: str, budget: int, count: Callable[[list[str]], list[int]]) -> list[str]:
    """Cut a chunk's text into pieces that each fit the embedding model's window of ``budget``
    tokens (``count`` gives token counts), at line boundaries where possible: so no text of a
    chunk is invisible to the vector side.  Returns ``[text]`` when it fits."""
    if budget <= 0:
        return [text]
    lines = text.split("\n")
    costs = count(lines)
    total = sum(costs)
    if total <= budget:
        return [text]
    # Balanced: n windows of about total/n tokens each, so no window is a noisy scrap of a line or two.
    target = -(-total // -(-total // budget))
    windows: list[str] = []
    cur: list[str] = []
    used = 0
    for line, cost in zip(lines, costs, strict=True):
        if cost > budget:  # one long line: slice it by characters in proportion
            if cur:
                windows.append("\n".join(cur))
                cur, used = [], 0
            parts = -(-cost // budget) + 1
            step = max(1, -(-len(line) // parts))
            windows.extend(line[i : i + step] for i in range(0, len(line), step))
            continue
        if cur and (used + cost > budget or used >= target):
            windows.append("\n".join(cur))
            cur, used = [], 0
        cur.append(line)
        used += cost
    if cur:
        windows.append("\n".join(cur))
    return [w for w in windows if w.strip()] or [text]
