"""Benchmarks: retrieval quality on a dataset folder and speed on generated corpora."""

from __future__ import annotations

from pathlib import Path


def checkout_root() -> Path | None:
    """The source checkout this package runs from (``<root>/src/memdir``), or ``None`` when memdir is
    installed: there the same parent of a module is ``lib/pythonX.Y``, which the bench tools'
    messages named as the place to install OpenClaw or memsearch into."""
    root = Path(__file__).resolve().parents[2]
    return root.parent if root.name == "src" and (root.parent / "pyproject.toml").is_file() else None
