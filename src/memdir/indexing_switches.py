"""Indexing choices that are not user settings, switchable for ablations (``memdir bench cv``).

``windows`` embeds every model-window of a chunk (not only its first 256 tokens); ``sections``
chunks curated files by their headings and bullet groups; ``widen_sections`` (read by search)
widens a curated file's result within its section, as a daily log's result is widened;
``widen_sessions`` (read by search too) widens a transcript's result over its neighbouring
messages, the same way.  A module of its own because search reads these too, and must not
import the indexer to do so.
"""

from __future__ import annotations

INDEXING: dict[str, bool] = {"windows": True, "sections": True, "widen_sections": True, "widen_sessions": True}
