"""Where a long index build shows how far along it is: ``<index>.progress`` (JSON).

The writer updates it after every batch it writes while it holds the index's writer lock and removes
it when done; any process can read it, so a search issued during a first full build can say
"the index is being built: 120/997 files" (and search what is built so far) instead of
hanging.  A file left by a killed writer is ignored: it only counts while the lock is held.
It also carries chunk counts (``chunksDone``/``chunksPlanned``), which move while one large
file is being embedded.

:class:`ProgressLines` is what ``memdir index`` prints on a stderr that is not a terminal.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO


class ProgressFile:
    def __init__(self, index_path: Path, *, workspace: str, min_interval: float = 0.0):
        self.path = Path(str(index_path) + ".progress")
        self.workspace = workspace
        self.min_interval = min_interval
        self._last = 0.0
        self._last_chunks = 0.0
        self._state: dict[str, Any] = {}
        self._swept = False
        #: Called before a batch count is shown: a rebuild's shadow commits, so that a search
        #: reading it finds at least what the file says is done.
        self.before_write: Callable[[], None] | None = None

    def start(self, phase: str, temp: str | None = None, generation: int | None = None) -> None:
        """``temp``: the file a SQLite rebuild writes; ``generation``: the one a database's writes
        (PostgreSQL), which a search during a first build reads as it would that file."""
        self._state = {"pid": os.getpid(), "workspace": self.workspace, "phase": phase, "temp": temp,
                       "done": 0, "total": None, "startedAt": time.time()}
        if generation is not None:
            self._state["generation"] = generation
        if not self._swept:  # once per process (a listing of the state folder): most are short-lived
            self._swept = True
            try:  # an index in PostgreSQL makes no file beside this one: status and searches
                # told a build's pid alone ("listing files" for all of it), never how far it was
                self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            except OSError:
                pass
            self._remove_dead_temps()
        self._write()

    def _remove_dead_temps(self) -> None:
        """Remove the temp files of writers killed while writing progress.

        Why: each is named by its writer's pid, so every ``kill -9`` landing in :meth:`_write`
        left one more ``<index>.progress.<pid>.tmp`` beside the index, for ever.  Called at this
        process's first sync, under the writer lock: no other process writes progress meanwhile."""
        folder, prefix, own = self.path.parent, self.path.name + ".", f"{self.path.name}.{os.getpid()}.tmp"
        try:
            names = os.listdir(folder)
        except OSError:
            return
        for name in names:
            if name != own and name.startswith(prefix) and name.endswith(".tmp") and name[len(prefix):-4].isdigit():
                try:
                    os.unlink(folder / name)
                except OSError:
                    pass

    def update(self, done: int, total: int, chunks: tuple[int, int] | None = None) -> None:
        """Files done (their batch committed), and ``chunks`` ``(done, planned)`` when known."""
        if not self._state:
            return
        # the first batch and the last always show; in between at most every ``min_interval`` s
        now = time.monotonic()
        if self._state.get("done") and done < total and now - self._last < self.min_interval:
            return
        self._last = now
        # the state changes only when written: a chunk count written in between (no commit
        # before it) must not claim files the last commit does not hold
        self._state.update(done=int(done), total=int(total))
        if chunks is not None:
            self._state.update(chunksDone=int(chunks[0]), chunksPlanned=int(chunks[1]))
        self._write(publish=True)

    def update_chunks(self, done: int, planned: int) -> None:
        """Chunks embedded so far inside a batch not yet committed: written without committing
        (``before_write`` is not called), at most every ``min_interval`` s."""
        now = time.monotonic()
        if not self._state or now - max(self._last, self._last_chunks) < self.min_interval:
            return
        self._last_chunks = now
        self._state.update(chunksDone=int(done), chunksPlanned=int(planned))
        self._write(publish=False)

    def _write(self, *, publish: bool = False) -> None:
        if publish and self.before_write is not None and self._state.get("done"):
            self.before_write()
        tmp = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
        try:
            # (not through a symlink planted at that name: it would empty and overwrite its target)
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_NOFOLLOW", 0), 0o644)
            with os.fdopen(fd, "w") as fh:
                fh.write(json.dumps({**self._state, "updatedAt": time.time()}))
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
    from memdir.reading import read_regular

    try:  # (a FIFO at that name waited for a writer for ever)
        data = json.loads(read_regular(str(index_path) + ".progress", limit=1 << 20))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict):
        return None
    # Counts that are no counts (another memdir version's progress file, a damaged one) are left out:
    # `memdir status` failed whole with "memdir: Cannot specify ',' with 's'." while a writer ran.
    return {k: v for k, v in data.items()
            if k not in _COUNTS or (isinstance(v, int) and not isinstance(v, bool) and v >= 0)}


#: The progress file's counts (files, chunks), shown with thousands separators.
_COUNTS = ("done", "total", "chunksDone", "chunksPlanned")


def counts(done: int, total: int, chunks_done: int = 0, chunks_planned: int = 0, unit: str = "files") -> str:
    """``"120/997 files, 3,400/25,000 chunks"`` (the chunks once any are planned)."""
    where = f"{done:,}/{total:,} {unit}"
    return where + (f", {chunks_done:,}/{chunks_planned:,} chunks" if chunks_planned else "")


def describe_progress(p: dict[str, Any], who: str | None = None) -> str:
    """``pid 123, 30/601 files``; ``who`` for the writer when given (``pid 1 in another container …``)."""
    total = p.get("total")
    where = (counts(p.get("done") or 0, total, p.get("chunksDone") or 0, p.get("chunksPlanned") or 0)
             if total else "listing files")
    pid = p.get("pid")
    who = who or (f"pid {pid}" if pid not in (None, "") else None)  # (a lock that does not say who: no "pid ?")
    return f"{who}, {where}" if who else where


#: Seconds between the lines ``memdir index`` prints on a stderr that is not a terminal;
#: the environment variable ``MEMDIR_PROGRESS_INTERVAL`` overrides it (tests set it small).
LINE_INTERVAL = 10.0
#: An index done sooner than this prints no progress line at all (nor sooner, when the interval is).
FIRST_LINE_AFTER = 2.0


def _elapsed(seconds: float) -> str:
    s = int(seconds)
    return f"{s} s" if s < 60 else f"{s // 60} min {s % 60:02d} s"


class ProgressLines:
    """``progress(done, total, label)`` as plain lines for a log, CI or an agent's subprocess.

    A terminal gets a bar; anything else would get nothing until the end of an index that can take
    minutes, or a bar's carriage returns.  So: nothing for a quick index, a first line once it has
    run :data:`FIRST_LINE_AFTER` seconds, then at most one every ``interval`` seconds, and a last
    one when the files are all done (only if a line was printed).  Each call costs a clock read.
    """

    def __init__(self, stream: TextIO, interval: float | None = None, *, action: str = "indexing") -> None:
        if interval is None:
            try:
                interval = float(os.environ.get("MEMDIR_PROGRESS_INTERVAL", LINE_INTERVAL))
            except ValueError:
                interval = LINE_INTERVAL
        self.stream = stream
        self.action = action
        self.interval = max(0.0, interval)
        self.started = time.monotonic()
        self._next = self.started + min(FIRST_LINE_AFTER, self.interval)
        self.printed = 0
        self._shown: tuple[int, int, int, int, str] | None = None

    def __call__(self, done: int, total: int, label: str) -> None:
        now = time.monotonic()
        chunks, chunks_done = getattr(label, "chunks_planned", 0), getattr(label, "chunks_done", 0)
        unit = getattr(label, "unit", "files")  # (migrate counts cache entries first)
        key = (done, total, chunks_done, chunks, unit)
        if total <= 0 or key == self._shown:
            return
        if now < self._next and not (done >= total and self.printed):
            return
        self._next, self._shown = now + self.interval, key
        try:
            line = (f"{self.action}: {counts(done, total, chunks_done, chunks, unit)}, "
                    f"{_elapsed(now - self.started)} elapsed")
            self.stream.write(line + "\n")
            self.stream.flush()
        except (OSError, ValueError):  # stderr's reader went away: the index goes on without lines
            self._next = float("inf")
            return
        self.printed += 1
