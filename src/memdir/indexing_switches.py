"""Indexing choices that are not user settings, switchable for ablations (``memdir bench cv``).

``windows`` embeds every model-window of a chunk (not only its first 256 tokens); ``sections``
chunks curated files by their headings and bullet groups.  A module of its own because search
reads ``sections`` too, and must not import the indexer to do so.
"""

from __future__ import annotations

INDEXING: dict[str, bool] = {"windows": True, "sections": True}
