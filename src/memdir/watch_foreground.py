"""``memdir watch``: a :class:`memdir.watch.Watcher` in the foreground, its events as lines.

Apart from :mod:`memdir.watch` because it is the CLI's, not the library's: the API and the
long-running hosts (``memdir mcp``, the agent loop) start a watcher without it.
"""

from __future__ import annotations

import collections
import os
import threading
import time
from collections.abc import Callable
from typing import Any

from memdir.watch import Event, Watcher


def _line(event: Event) -> str | None:
    """One human line for an event (``None``: not worth a line)."""
    kind = event.get("event")
    stamp = time.strftime("%H:%M:%S", time.localtime(event.get("time", time.time())))
    if kind in ("change", "folder"):
        return f"{stamp} {event['change']} {event['path']}" + ("/" if kind == "folder" else "")
    if kind == "sync":
        skipped = _skipped(event.get("skipped") or [])
        what = "full reindex" if event.get("full") else "synced"
        return (f"{stamp} {what} ({event['reason']}): {event['indexed']} indexed, {event['removed']} removed"
                f"{skipped} in {event['seconds']:.2f}s")
    if kind == "error":
        again = f" (trying again in {event['retryInSeconds']:g} s)" if event.get("retryInSeconds") else ""
        return f"{stamp} error: {event['error']}{again}"
    if kind == "start":
        return (f"Watching {event['workspace']} (index {event['indexPath']}; sync {event['debounceMs']} ms after "
                "a change). Ctrl-C stops.")
    return None


def _skipped(skipped: list[dict[str, Any]]) -> str:
    """The files a sync skipped, with why: "1 skipped" alone hid a folder unread for want of file
    descriptors (every note in it left out) as well as a file that is not UTF-8."""
    if not skipped:
        return ""
    first = f"{skipped[0].get('path')}: {skipped[0].get('error')}"
    more = f"; {len(skipped) - 1} more: memdir status lists them" if len(skipped) > 1 else ""
    return f", {len(skipped)} skipped ({first}{more})"


#: Event lines kept for a reader that stopped reading; more are counted and dropped, said once it reads again.
OUTPUT_BACKLOG = 10_000
#: Seconds the closing line waits for a reader that stopped reading before the watch exits without it.
CLOSE_WAIT = 2.0


class _Output:
    """The event lines, written to stdout by a thread of their own.

    Printed by the watcher's sync thread, a reader that stopped reading (a pipe into a consumer
    that froze, ``memdir watch | less`` left at a page) filled the pipe and the next line's write
    blocked the sync: nothing more was indexed, and SIGTERM waited on it for ever.  Lines beyond
    :data:`OUTPUT_BACKLOG` are dropped and counted; the writes go straight to the descriptor, so the
    interpreter's exit never waits on a buffer a blocked write holds.
    """

    def __init__(self, stream: Any, dropped_line: Callable[[int], str]):
        self.fd = stream.fileno()
        # (a name the terminal's encoding cannot write is shown escaped: an error here lost the line)
        self.encoding = stream.encoding or "utf-8"
        self.errors = "backslashreplace" if stream.errors in (None, "strict") else stream.errors
        self.dropped_line = dropped_line
        self.lines: collections.deque[str] = collections.deque()
        self.dropped = 0
        self.busy = False
        self.cond = threading.Condition()
        #: Set when the reader went away (``memdir watch --json | head -3``: EPIPE).
        self.gone = threading.Event()
        #: Called once it went away (the main thread waits for that too).
        self.woken: Callable[[], None] | None = None
        threading.Thread(target=self._run, name="memdir-watch-output", daemon=True).start()

    def put(self, text: str) -> None:
        with self.cond:
            if len(self.lines) >= OUTPUT_BACKLOG:
                self.dropped += 1
                return
            self.lines.append(text)
            self.cond.notify_all()

    def _run(self) -> None:
        while not self.gone.is_set():
            with self.cond:
                while not self.lines:
                    self.cond.wait()
                text = self.lines.popleft()
                dropped, self.dropped = self.dropped, 0
                self.busy = True
            try:
                if dropped:
                    self._write(self.dropped_line(dropped))
                self._write(text)
            except BrokenPipeError:
                self.gone.set()
                if self.woken is not None:
                    self.woken()
            except (OSError, UnicodeError):
                pass  # (a full disk under a redirect: the watch goes on indexing)
            finally:
                with self.cond:
                    self.busy = False
                    self.cond.notify_all()

    def _write(self, text: str) -> None:
        data = (text + "\n").encode(self.encoding, self.errors)
        while data:
            data = data[os.write(self.fd, data):]

    def drain(self, timeout: float) -> bool:
        """Wait up to ``timeout`` seconds for every line to be written; whether they were."""
        end = time.monotonic() + timeout
        with self.cond:
            while (self.lines or self.busy) and not self.gone.is_set():
                left = end - time.monotonic()
                if left <= 0:
                    return False
                self.cond.wait(left)
        return True


#: Seconds between the main thread's looks at a watcher stopped by other means than a signal or
#: the reader going away (each of which wakes it at once).
IDLE_CHECK_SECONDS = 5.0


class _Waker:
    """What the main thread of ``memdir watch`` sleeps on until Ctrl-C, SIGTERM or the reader going
    away: a socket the signals write to (:func:`signal.set_wakeup_fd`), so a signal arriving at any
    moment ends the wait at once.

    Why: the main thread slept 0.2 s at a time to look at what a signal handler noted, five
    wake-ups a second for as long as the watch ran, more than the whole watcher costs idle."""

    def __init__(self) -> None:
        import signal
        import socket

        self._reader, self._writer = socket.socketpair()
        for sock in (self._reader, self._writer):
            sock.setblocking(False)
        try:
            self._previous: int | None = signal.set_wakeup_fd(self._writer.fileno(), warn_on_full_buffer=False)
        except ValueError:  # not the main thread (a host running the foreground loop itself): looks only
            self._previous = None

    def wake(self) -> None:
        try:
            self._writer.send(b"\0")
        except OSError:  # (full: a wake-up is already waiting; closed: the watch is over)
            pass

    def wait(self, timeout: float) -> None:
        import select

        if self._previous is None:
            time.sleep(min(timeout, 0.2))
            return
        try:
            ready, _, _ = select.select([self._reader], [], [], timeout)
            if ready:
                self._reader.recv(4096)
        except (OSError, ValueError):
            time.sleep(0.2)

    def close(self) -> None:
        import signal

        if self._previous is not None:
            signal.set_wakeup_fd(self._previous)
        self._reader.close()
        self._writer.close()


def _stop_signals(signal: Any) -> list[int]:
    """The signals that stop the watch: Ctrl-C, SIGTERM, and SIGHUP unless it is ignored.

    Why SIGHUP: a watch left running in a terminal or SSH session that closed was ended on the
    spot, in the middle of a sync (a first build's temporary database left beside the index);
    under ``nohup`` (SIGHUP ignored) it runs on, as its user asked."""
    hangup = getattr(signal, "SIGHUP", None)  # (none on Windows)
    return [signal.SIGINT, signal.SIGTERM, *([hangup] if hangup is not None
                                             and signal.getsignal(hangup) is signal.SIG_DFL else [])]


def run_foreground(memory: Any, *, as_json: bool = False, debounce_ms: int | None = None,
                   quiet: bool = False) -> int:
    """``memdir watch``: sync now, then on every change until Ctrl-C, SIGTERM or SIGHUP (exit 0); ``quiet``
    (``-q``): no closing note on stderr."""
    import signal
    import sys

    from memdir.cli import for_terminal, json_text

    def dropped_line(count: int) -> str:
        note = f"{count} event(s) not shown: the output was not being read"
        if as_json:
            return json_text({"event": "dropped", "time": round(time.time(), 3), "count": count, "why": note})
        return f"{time.strftime('%H:%M:%S')} {note}"

    sys.stdout.flush()
    output = _Output(sys.stdout, dropped_line)
    #: Set when the reader of stdout went away (`memdir watch --json | head -3`): the watcher's
    #: threads swallowed the BrokenPipeError, and the watch ran on, unread, until killed.
    gone = output.gone

    def show(event: Event) -> None:
        text = json_text(event) if as_json else _line(event)
        if text is not None and not as_json:  # (a file's name may hold an escape sequence)
            text = for_terminal(text)
        if text is not None and not gone.is_set():
            output.put(text)

    watcher = Watcher(memory, on_event=show, debounce_ms=debounce_ms, sync_at_start=True)
    show({"event": "start", "time": round(time.time(), 3), "workspace": str(memory.workspace),
          "indexPath": memory.store.location, "debounceMs": int(watcher.debounce * 1000)})  # (a database: its name)
    # Ctrl-C and SIGTERM only note the request: a KeyboardInterrupt raised inside Event.wait can
    # leave the event's own lock held, and stopping would then wait on it forever.
    requested: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: requested.append(signum))
                for sig in _stop_signals(signal)}
    memory.watcher = watcher
    waker = _Waker()
    output.woken = waker.wake
    try:
        watcher.start()
        while not requested and not watcher.stopped and not gone.is_set():
            waker.wait(IDLE_CHECK_SECONDS)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
        memory.watcher = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        waker.close()
    show({"event": "stop", "time": round(time.time(), 3)})
    output.drain(CLOSE_WAIT)  # (a reader that stopped reading does not hold the exit)
    if gone.is_set():
        raise BrokenPipeError  # the CLI exits quietly with 141, as a tool killed by SIGPIPE
    if not as_json and not quiet:
        print("Stopped watching.", file=sys.stderr)
    return 0


__all__ = ["run_foreground"]
