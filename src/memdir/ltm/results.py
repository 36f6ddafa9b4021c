"""What the long-term memory operations return: plain dataclasses with ``as_dict`` for ``--json``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from memdir.ltm.store import MemoryRecord


@dataclass
class StoreResult:
    """``action`` is ``created`` or ``duplicate``; ``superseded`` lists memories the new one replaced."""

    action: str
    record: MemoryRecord
    superseded: list[MemoryRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.action == "duplicate":
            out.update(existingId=self.record.id, existingText=self.record.text)
        else:
            out.update(id=self.record.id, memory=self.record.as_dict())
        if self.superseded:
            out["superseded"] = [r.as_dict() for r in self.superseded]
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass
class ForgetResult:
    """``deleted`` (with ``record``), ``candidates``, ``not_found`` or ``none_matched``."""

    action: str
    record: MemoryRecord | None = None
    candidates: list[MemoryRecord] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"action": self.action}
        if self.record is not None:
            out.update(id=self.record.id, memory=self.record.as_dict())
        if self.action == "candidates":
            out["candidates"] = [r.as_dict() for r in self.candidates]
        if self.warnings:
            out["warnings"] = list(self.warnings)
        return out


@dataclass
class ImportReport:
    created: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    skipped_lines: list[int] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    #: Memories stored before that a bullet replaced (they leave search and recall, as after ``store``).
    superseded: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {"created": self.created, "updated": self.updated, "unchanged": self.unchanged,
                "duplicates": self.duplicates, "superseded": self.superseded, "skippedLines": self.skipped_lines,
                "warnings": self.warnings}
