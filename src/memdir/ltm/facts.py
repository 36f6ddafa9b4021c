"""Whether two near-identical statements still say different things (a correction, not a repeat).

R§14 skips a new memory when an existing one scores ≥ 0.95.  Small embedding models score a
changed number, day or a negation as near-identical: with the default MiniLM, "My phone number
is +420 777 123 456" against "... 465" scores 0.99, "My flight is on Monday" against "Tuesday"
0.97, "I prefer dark mode" against "I do not prefer dark mode" 0.96.  Each correction was
answered "Similar memory already exists" and dropped, and the stale fact kept being recalled.
Such a pair is an update: stored, superseding the older memory (same category).
"""

from __future__ import annotations

import re

_DIGITS = re.compile(r"\d")
_NEGATION = re.compile(
    r"\b(?:not|no|never|none|nobody|nothing|neither|nor|without|cannot|nicht|kein\w*|nie|nikdy)\b|n[’']t\b",
    re.IGNORECASE)
_CALENDAR = re.compile(
    r"\b(?:monday|tuesday|wednesday|thursday|friday|saturday|sunday|january|february|march|april|may|june|"
    r"july|august|september|october|november|december|today|tomorrow|yesterday)\b", re.IGNORECASE)


def _facts(text: str) -> tuple[str, int, tuple[str, ...]]:
    """The parts of a statement an embedding blurs: its digits in order, how many negations, and
    the days and months it names."""
    return ("".join(_DIGITS.findall(text)), len(_NEGATION.findall(text)),
            tuple(sorted(m.lower() for m in _CALENDAR.findall(text))))


def says_something_else(new: str, old: str) -> bool:
    """True when ``new`` changes a number, a day or month, or negates ``old``: not a duplicate."""
    return _facts(new) != _facts(old)


__all__ = ["says_something_else"]
