"""memdir: persistent, searchable memory for AI agents.

Markdown files are the source of truth; a per-agent SQLite index (FTS5 + vectors) is derived
from them.  Start with :class:`memdir.Memory`.
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from memdir.api import Memory

__all__ = ["Memory", "__version__"]


def __getattr__(name: str) -> Any:
    # Lazy, so `memdir --help` and `python -m memdir` do not pay for the whole library.
    if name == "Memory":
        from memdir.api import Memory

        return Memory
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name, obj=sys.modules[__name__])


def __dir__() -> list[str]:
    # The lazy names too: dir(memdir), help(memdir) and a REPL's tab completion never showed Memory.
    return sorted({*globals(), *__all__})
