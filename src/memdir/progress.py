"""Where a long index build shows how far along it is: ``<index>.progress`` (JSON).

The writer updates it after every batch it writes while it holds the index's writer lock and removes
it when done; any process can read it, so a search issued during a first full build can say
"the index is being built: 120/997 files" (and search what is built so far) instead of
hanging.  A file left by a killed writer is ignored: it only counts while the lock is held.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any


class ProgressFile:
    def __init__(self, index_path: Path, *, workspace: str, min_interval: float = 0.0):
        self.path = Path(str(index_path) + ".progress")
        self.workspace = workspace
        self.min_interval = min_interval
        self._last = 0.0
        self._state: dict[str, Any] = {}
        #: Called before a batch count is shown: a rebuild's shadow commits, so that a search
        #: reading it finds at least what the file says is done.
        self.before_write: Callable[[], None] | None = None

    def start(self, phase: str, temp: str | None = None) -> None:
        self._state = {"pid": os.getpid(), "workspace": self.workspace, "phase": phase, "temp": temp,
                       "done": 0, "total": None, "startedAt": time.time()}
        self._write(force=True)

    def update(self, done: int, total: int) -> None:
        if not self._state:
            return
        first = not self._state.get("done")
        self._state.update(done=int(done), total=int(total))
        # the first batch and the last always show; in between at most every ``min_interval`` s
        self._write(force=first or done >= total)

    def _write(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self._last < self.min_interval:
            return
        self._last = now
        if self.before_write is not None and self._state.get("done"):
            self.before_write()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({**self._state, "updatedAt": time.time()}))
            os.replace(tmp, self.path)
        except OSError:  # a read-only or full state folder: progress is a courtesy
            try:
                tmp.unlink()
            except OSError:
                pass

    def clear(self) -> None:
        self._state = {}
        try:
            self.path.unlink()
        except OSError:
            pass


def read_progress(index_path: Path) -> dict[str, Any] | None:
    """The last progress a writer recorded (callers check the writer lock is still held)."""
    try:
        data = json.loads(Path(str(index_path) + ".progress").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def describe_progress(p: dict[str, Any]) -> str:
    done, total = p.get("done") or 0, p.get("total")
    where = f"{done}/{total} files" if total else "listing files"
    return f"pid {p.get('pid', '?')}, {where}"
