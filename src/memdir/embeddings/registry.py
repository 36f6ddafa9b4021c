"""Choosing the embedding provider from configuration (R§5.1).

``select_provider`` never raises for a provider that is merely unavailable (missing key, no
model): it returns a selection with ``provider=None`` and the reason, so the index keeps working
in keyword-only mode and says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from memdir.config import MemorySearchConfig
from memdir.embeddings.base import EmbeddingError, EmbeddingProvider


@dataclass
class ProviderSelection:
    provider: EmbeddingProvider | None
    requested: str
    fallback_from: str | None = None
    fallback_reason: str | None = None
    unavailable_reason: str | None = None

    @property
    def mode(self) -> str:
        return "hybrid" if self.provider is not None else "fts-only"


def select_provider(cfg: MemorySearchConfig, env: Mapping[str, str] | None = None) -> ProviderSelection:
    """Build the configured provider; keyword-only (``provider=None``) when none is available."""
    requested = cfg.provider
    if requested in ("none", "fts-only", "off"):
        return ProviderSelection(None, requested, unavailable_reason="embeddings disabled by configuration")
    if requested in ("local", "auto"):
        from memdir.embeddings.local import create_local_provider  # imported on demand: registry stays light

        try:
            return ProviderSelection(create_local_provider(cfg), requested)
        except EmbeddingError as exc:
            return ProviderSelection(None, requested, unavailable_reason=str(exc))
    return ProviderSelection(None, requested, unavailable_reason="No embeddings provider available.")
