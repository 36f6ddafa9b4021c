"""Long-term memory on LanceDB: OpenClaw's ``memory-lancedb`` plugin (R§14, SPEC §9), per agent.

Facts, preferences and decisions stored as vectors in one LanceDB table per agent, recalled
into the prompt before a turn (``auto_recall``) and captured from the user's messages after it
(``auto_capture``); the tools ``memory_recall``, ``memory_store`` and ``memory_forget``.  It
needs the optional extra (``pip install 'memdir[lancedb]'``); nothing in the memory core
imports this package, and the core index works unchanged without it.

Fixes to R§18.12: the store is per agent (``<stateDir>/ltm/<agentId>``), not one shared by
all; embeddings come from memdir's providers (local by default, any remote one, custom base
URLs); auto-capture has more triggers; only user text is captured.  Beyond OpenClaw: scores
are cosine similarities (see :mod:`memdir.ltm.store`), a newer memory *supersedes* a close
older one of the same category, and the memories can be exported to, imported from and
mirrored into Markdown (:mod:`memdir.ltm.markdown`).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from memdir.ltm.memory import LongTermMemory
    from memdir.ltm.results import ForgetResult, ImportReport, StoreResult
    from memdir.ltm.store import LtmError, LtmUnavailableError, MemoryRecord, ModelMismatchError

_EXPORTS = {
    "LongTermMemory": "memdir.ltm.memory", "StoreResult": "memdir.ltm.results", "ForgetResult": "memdir.ltm.results",
    "ImportReport": "memdir.ltm.results", "LtmError": "memdir.ltm.store", "LtmUnavailableError": "memdir.ltm.store",
    "MemoryRecord": "memdir.ltm.store", "ModelMismatchError": "memdir.ltm.store",
}
__all__ = ["ForgetResult", "ImportReport", "LongTermMemory", "LtmError", "LtmUnavailableError", "MemoryRecord",
           "ModelMismatchError", "StoreResult"]


def __getattr__(name: str) -> Any:
    # Lazy: `memdir ltm --help` and the tool schemas must not pay for numpy/lancedb.
    if name in _EXPORTS:
        import importlib

        return getattr(importlib.import_module(_EXPORTS[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}", name=name, obj=sys.modules[__name__])


def __dir__() -> list[str]:
    # The lazy names too: dir(), help(memdir.ltm) and tab completion showed none of them.
    return sorted({*globals(), *__all__})
