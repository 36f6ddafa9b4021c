"""Chunking and stemming for a large full rebuild, in a second process beside the index writes.

A keyword-only full build spends about half its CPU in Python turning files into chunks and
the keyword index's ``stems`` column, and the other half in SQLite writing them.  For a large
rebuild :class:`memdir.sync.Indexer` hands the first half to this worker (``python -m
memdir.build_worker``), so a machine's second core works while the first writes: the worker
only computes, the indexing process alone writes the index, so a killed worker or a killed
build leaves exactly what an in-process build would (the shadow database is discarded).

The worker is sent batches of memory files to read (pickled, on stdin) and answers each batch
with one pickled reply on stdout, in order; end of input ends it.  It reads the files itself, so
the indexing process only sends their names and writes what comes back.  :func:`plan` is the
one implementation of a file's chunk plan, used in process as well: both paths write the same
rows.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import os
import pickle
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from memdir.chunking import Chunk, chunk_id, chunk_markdown, chunk_sections, remap_lines
from memdir.dates import line_dates, ms_to_day, span
from memdir.reading import binary_note, decode_note, encrypted_note, read_note
from memdir.textutil import elide_base64_blocks, elide_data_uris, fts_values
from memdir.timezones import resolve_timezone


def plan(content: str, path: str, *, curated: bool, tokens: int, overlap: int,
         timestamps_ms: Sequence[int] | None = None, line_map: list[int] | None = None,
         tz: dt.tzinfo | None = None) -> list[tuple[Chunk, int | None, str | None, str | None]]:
    """A document's chunks with their time (transcripts) and the days they are about.

    Curated files are chunked by their structure, daily logs and transcripts by size (R§3); ``tz``
    (the user's zone) gives the day of a message's time or of a heading's UTC time."""
    chunker = chunk_sections if curated else chunk_markdown
    # an image pasted into a note as a data URI (Typora, Obsidian plugins, an agent's screenshot)
    # was 250 chunks of base64 per 200 KB, a minute of embedding: its payload is left out, as a
    # transcript's is; the line keeps its number (the note is never rewritten, memory_get shows it)
    content = elide_base64_blocks(elide_data_uris(content))  # (and an Excalidraw drawing's base64)
    chunks = [c for c in chunker(content, tokens, overlap) if c.text.strip()]
    days = [ms_to_day(t, tz) for t in timestamps_ms] if timestamps_ms else line_dates(path, content, tz)
    # Most files are about one day (a daily log) or none: then every chunk's span is that day
    # (a span per chunk was a tenth of the Python work of a keyword-only build).
    one_day = bool(days) and days.count(days[0]) == len(days)
    day = days[0].isoformat() if one_day and days[0] is not None else None
    out: list[tuple[Chunk, int | None, str | None, str | None]] = []
    for c in chunks:
        ts = None
        if timestamps_ms:
            ts = max(timestamps_ms[c.start_line - 1 : c.end_line], default=0) or None
        if one_day and 0 < c.start_line <= c.end_line and c.start_line <= len(days):
            first = last = day
        else:
            first, last = span(days[c.start_line - 1 : c.end_line])
        out.append((c, ts, first, last))
    if line_map:
        remapped = remap_lines([c for c, *_ in out], line_map)
        out = [(c, *rest) for c, (_, *rest) in zip(remapped, out, strict=True)]  # type: ignore[misc]
    return out


def _read(abs_path: str, root: str) -> tuple[str, str]:
    """A memory file's text and hash, as :func:`memdir.sync.read_memory_file` reads it."""
    raw = read_note(abs_path, root)
    encrypted = encrypted_note(raw) or binary_note(raw)
    if encrypted is not None:
        raise encrypted
    return decode_note(raw), hashlib.sha256(raw).hexdigest()


def _serve(inp: IO[bytes], out: IO[bytes]) -> None:
    tokens, overlap, model, timezone = pickle.load(inp)
    tz = resolve_timezone(timezone)[0]  # by its name: a zone read from a file cannot be pickled
    out.write(HELLO)  # (see ChunkWorker.reply: the program started is this worker)
    out.flush()
    while True:
        try:
            jobs = pickle.load(inp)
        except EOFError:
            return
        if jobs is None:
            return
        reply: list[tuple[str, list[tuple[Any, ...]]] | None] = []
        for abs_path, root, path, curated in jobs:
            try:
                content, digest = _read(abs_path, root)
            except Exception:  # vanished, unreadable, not a regular file: the indexer finds out itself
                reply.append(None)
                continue
            rows = [(chunk_id("memory", path, c.start_line, c.end_line, c.hash, model),
                     c.start_line, c.end_line, c.text, c.hash, first, last, *fts_values(c.text))
                    for c, _ts, first, last in plan(content, path, curated=curated, tokens=tokens, overlap=overlap,
                                                       tz=tz)]
            reply.append((digest, rows))
        data = pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(len(data).to_bytes(8, "little") + data)  # (sized: the reader never blocks mid-reply)
        out.flush()


#: How many bytes of answers may wait in the pipe for the indexing process to read them.
WORKER_PIPE_BYTES = 1 << 20
#: Seconds a reply is waited for while the worker is stopped (SIGSTOP, a debugger) before the
#: indexing process plans the remaining files itself.
STOPPED_WORKER_WAIT = 3.0
#: What the worker writes first, once it has read its settings.
HELLO = b"memdirW1"
#: Seconds the worker's :data:`HELLO` is waited for before the indexing process plans the files
#: itself (a Python importing memdir takes well under one).
HELLO_WAIT = 10.0


class WorkerStopped(RuntimeError):
    """The worker was stopped while the indexing process waited for its reply."""


class ChunkWorker:
    """The indexing process's end of one worker: :meth:`submit` batches, read :meth:`reply` in order.

    Any failure (no Python to start, a worker that died) surfaces as an exception from
    :meth:`submit` or :meth:`reply`; the caller then plans the remaining files itself."""

    def __init__(self, tokens: int, overlap: int, model: str, timezone: str | None = None):
        if not sys.executable:  # embedded: no interpreter known to be this one (with these stemmers)
            raise RuntimeError("no Python executable to start a worker with")
        if getattr(sys, "frozen", False):  # (PyInstaller, cx_Freeze): sys.executable is the host application
            raise RuntimeError("a frozen application: no Python executable to start a worker with")
        root = str(Path(__file__).resolve().parents[1])  # the directory holding this memdir package
        env = dict(os.environ)
        env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        # cwd=root: ``-m`` puts the working directory first on the path, and a folder named
        # memdir there must not stand in for this package
        self.proc = subprocess.Popen([sys.executable, "-m", "memdir.build_worker"], cwd=root,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     env=env)
        self._widen(self.proc.stdout)
        self._greeted = False
        self.submit((tokens, overlap, model, timezone))

    @staticmethod
    def _widen(pipe: Any) -> None:
        """Let the worker's answers queue up in the pipe (1 MB, Linux) rather than the 64 KB default:
        a reply is ~140 KB, and a worker blocked writing one waited for every write here (the two
        processes then took turns instead of working at once)."""
        try:
            import fcntl

            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, WORKER_PIPE_BYTES)
        except (ImportError, AttributeError, OSError):  # another system, or a lower limit: the default
            pass

    def submit(self, jobs: Any) -> None:
        assert self.proc.stdin is not None
        pickle.dump(jobs, self.proc.stdin, protocol=pickle.HIGHEST_PROTOCOL)
        self.proc.stdin.flush()

    def reply(self) -> list[tuple[str, list[tuple[Any, ...]]] | None]:
        if not self._greeted:
            # sys.executable names the host program, not a Python, where memdir runs inside one
            # (uWSGI, an application bundling its interpreter): started with '-m memdir.build_worker'
            # it ran on without a word and a large build waited for its first reply for ever
            if self._read(len(HELLO), within=HELLO_WAIT) != HELLO:
                raise WorkerStopped(f"{sys.executable} (pid {self.proc.pid}) is not memdir's chunking worker")
            self._greeted = True
        size = int.from_bytes(self._read(8), "little")
        return pickle.loads(self._read(size))

    def _read(self, n: int, within: float | None = None) -> bytes:
        """``n`` bytes of the worker's answers (``within``: seconds they may take at most).  A
        worker stopped (SIGSTOP) held ``memdir index`` in a read for ever without a word, its build
        never finished: one stopped for :data:`STOPPED_WORKER_WAIT` seconds raises
        :class:`WorkerStopped`, and the indexer plans the rest itself (the worker is killed: it only
        computes, nothing is lost)."""
        import select
        import time

        from memdir.lock import is_stopped

        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        parts: list[bytes] = []
        stopped_since: float | None = None
        ends = None if within is None else time.monotonic() + within
        while n > 0:
            if ends is not None and time.monotonic() > ends:
                raise WorkerStopped(f"no answer from the chunking worker (pid {self.proc.pid}) within {within:g} s")
            if not select.select([fd], [], [], 0.5)[0]:
                if not is_stopped(self.proc.pid):
                    stopped_since = None
                    continue
                now = time.monotonic()
                stopped_since = now if stopped_since is None else stopped_since
                if now - stopped_since >= STOPPED_WORKER_WAIT:
                    raise WorkerStopped(f"the chunking worker (pid {self.proc.pid}) is stopped")
                continue
            part = os.read(fd, min(n, WORKER_PIPE_BYTES))
            if not part:
                raise EOFError("the chunking worker ended")
            parts.append(part)
            n -= len(part)
        return b"".join(parts)

    def close(self) -> None:
        """Stop the worker (it is never left running: it only computes, nothing is lost)."""
        if self.proc.poll() is None:
            self.proc.kill()
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                if stream is not None:
                    stream.close()
            except OSError:
                pass
        self.proc.wait()


if __name__ == "__main__":
    _serve(sys.stdin.buffer, sys.stdout.buffer)
