"""Line-based Markdown chunking (R§3), with one deliberate fix.

A chunk holds whole lines (long lines are cut into ``maxChars`` segments) up to
``maxChars = max(32, tokens*4)`` characters, where CJK characters weigh 4 (≈ one token each).
After a chunk is emitted, its last lines are carried into the next one as overlap
(``overlap*4`` characters, at least one line), exactly as OpenClaw does, except:

* **carry cap** — a carried line is never longer than the overlap budget itself, and when the
  carried lines plus the next segment would not fit in ``maxChars`` the oldest carried lines are
  dropped until they do or one is left.  So a chunk never exceeds ``maxChars`` plus one carried
  line; OpenClaw can carry a whole 1600-character segment and emit 3201-character chunks
  (R§17 vector 5, R§18 "overlap carry doubles chunk size").

Lengths are counted in code points, not UTF-16 units, so an emoji is one character.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from memdir.textutil import is_cjk, weighted_len


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
    """Cut one line into slices of at most ``max_chars`` characters and ``max_chars`` weight."""
    if not line:
        return [""]
    out: list[str] = []
    for start in range(0, len(line), max_chars):
        piece = line[start : start + max_chars]
        if weighted_len(piece) <= max_chars:
            out.append(piece)
            continue
        # CJK-heavy slice: cut greedily by weight so each piece weighs at most max_chars.
        current: list[str] = []
        weight = 0
        for ch in piece:
            w = 4 if is_cjk(ch) else 1
            if current and weight + w > max_chars:
                out.append("".join(current))
                current, weight = [], 0
            current.append(ch)
            weight += w
        if current:
            out.append("".join(current))
    return out


def chunk_markdown(content: str, tokens: int = 400, overlap: int = 80) -> list[Chunk]:
    """Split ``content`` into overlapping line-range chunks; always returns at least one chunk."""
    max_chars = max(32, tokens * 4)
    overlap_chars = max(0, overlap * 4)
    chunks: list[Chunk] = []
    buffer: list[tuple[str, int, int]] = []  # (segment, line number, cost)
    size = 0

    def flush() -> None:
        text = "\n".join(seg for seg, _, _ in buffer)
        chunks.append(Chunk(buffer[0][1], buffer[-1][1], text, sha256_text(text)))

    def carry(next_cost: int) -> None:
        nonlocal buffer, size
        if overlap_chars <= 0:
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
        for seg in _segments(line, max_chars, tokens):
            cost = weighted_len(seg) + 1
            if buffer and size + cost > max_chars:
                flush()
                carry(cost)
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
