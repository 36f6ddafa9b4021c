"""System-prompt pieces: the "Memory Recall" section (R§10.3) and the session-start context.

The session-start context is what the agent sees before its first turn: ``MEMORY.md`` — only
in a direct (private) chat, never in a group or channel where other people would see it — and
the daily logs of today and yesterday, each cut to a character budget with a visible marker
so the model knows there is more to fetch with ``memory_get``.
"""

from __future__ import annotations

import os
import stat
from datetime import date, timedelta
from pathlib import Path

DEFAULT_CONTEXT_BUDGET_CHARS = 12_000


def memory_recall_section(
    *,
    has_search: bool = True,
    has_get: bool = True,
    citations: str = "auto",
    include_sessions: bool = False,
) -> list[str]:
    """The ``## Memory Recall`` lines (empty when neither tool is available)."""
    if not (has_search or has_get):
        return []
    scope = "MEMORY.md + memory/*.md" + (" + indexed session transcripts" if include_sessions else "")
    if has_search and has_get:
        guidance = (
            "Before answering anything about prior work, decisions, dates, people, preferences, or "
            f"todos: run memory_search on {scope}; then use memory_get to pull only the needed lines. "
            "If low confidence after search, say I checked."
        )
    elif has_search:
        guidance = (
            "Before answering anything about prior work, decisions, dates, people, preferences, or "
            f"todos: run memory_search on {scope} and answer from the matching results. "
            "If low confidence after search, say I checked."
        )
    else:
        guidance = (
            "Before answering anything about prior work, decisions, dates, people, preferences, or "
            "todos that already points to a specific memory file or note: run memory_get to pull "
            "only the needed lines. If low confidence after reading them, say I checked."
        )
    if citations == "off":
        cite = ("Citations are disabled: do not mention file paths or line numbers in replies unless "
                "the user explicitly asks.")
    else:
        cite = "Citations: include Source: <path#line> when it helps the user verify memory snippets."
    return ["## Memory Recall", guidance, cite, ""]


def _read_regular(path: Path) -> str | None:
    """File text, or None if missing, not a regular file, or a symlink (never followed)."""
    try:
        st = os.lstat(path)
    except OSError:
        return None
    if not stat.S_ISREG(st.st_mode):
        return None
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def truncate_for_context(text: str, budget: int, label: str) -> str:
    """Keep head and tail within ``budget`` chars with a visible marker naming what was cut."""
    if len(text) <= budget:
        return text
    budget = max(budget, 200)
    head = int(budget * 0.6)
    tail = max(0, budget - head)
    cut = len(text) - head - tail
    marker = (f"\n\n[… {cut} characters of {label} omitted; use memory_get on {label} to read "
              "them …]\n\n")
    return text[:head] + marker + (text[-tail:] if tail else "")


def session_start_context(
    workspace: str | os.PathLike[str],
    *,
    chat_type: str,
    today: date,
    budget_chars: int = DEFAULT_CONTEXT_BUDGET_CHARS,
) -> str:
    """Markdown with MEMORY.md (direct chats only) and today's/yesterday's daily logs.

    Daily logs include the hook's ``YYYY-MM-DD-<slug>.md`` captures, which OpenClaw never
    loaded at session start (#45607).  The budget is shared: today's notes come first.
    """
    ws = Path(workspace)
    files: list[tuple[str, str]] = []
    if chat_type == "direct":
        for name in ("MEMORY.md", "memory.md"):
            text = _read_regular(ws / name)
            if text is not None and text.strip():
                files.append((name, text))
                break
    memdir = ws / "memory"
    for day in (today, today - timedelta(days=1)):
        stem = day.isoformat()
        names = [f"{stem}.md"]
        try:
            names += sorted(n for n in os.listdir(memdir) if n.startswith(stem + "-") and n.endswith(".md"))
        except OSError:
            pass
        for name in names:
            text = _read_regular(memdir / name)
            if text is not None and text.strip():
                files.append((f"memory/{name}", text))
    if not files:
        return ""
    out = ["## Memory context (session start)", ""]
    remaining = budget_chars
    for label, text in files:
        if remaining <= 0:
            out += [f"[… {label} not shown: context budget used up; use memory_get to read it …]", ""]
            continue
        shown = truncate_for_context(text.strip(), remaining, label)
        remaining -= len(shown)
        out += [f"### {label}", shown, ""]
    return "\n".join(out)
