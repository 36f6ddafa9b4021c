"""``memdir watch``: a :class:`memdir.watch.Watcher` in the foreground, its events as lines.

Apart from :mod:`memdir.watch` because it is the CLI's, not the library's: the API and the
long-running hosts (``memdir mcp``, the agent loop) start a watcher without it.
"""

from __future__ import annotations

import threading
import time
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


def run_foreground(memory: Any, *, as_json: bool = False, debounce_ms: int | None = None,
                   quiet: bool = False) -> int:
    """``memdir watch``: sync now, then on every change until Ctrl-C or SIGTERM (exit 0); ``quiet``
    (``-q``): no closing note on stderr."""
    import signal
    import sys

    from memdir.cli import for_terminal, json_text

    lock = threading.Lock()
    #: Set when the reader of stdout went away (`memdir watch --json | head -3`): the watcher's
    #: threads swallowed the BrokenPipeError, and the watch ran on, unread, until killed.
    gone = threading.Event()

    def show(event: Event) -> None:
        text = json_text(event) if as_json else _line(event)
        if text is not None and not as_json:  # (a file's name may hold an escape sequence)
            text = for_terminal(text)
        if text is not None and not gone.is_set():
            with lock:
                try:
                    print(text, flush=True)
                except BrokenPipeError:
                    gone.set()

    watcher = Watcher(memory, on_event=show, debounce_ms=debounce_ms, sync_at_start=True)
    show({"event": "start", "time": round(time.time(), 3), "workspace": str(memory.workspace),
          "indexPath": memory.store.location, "debounceMs": int(watcher.debounce * 1000)})  # (a database: its name)
    # Ctrl-C and SIGTERM only note the request: a KeyboardInterrupt raised inside Event.wait can
    # leave the event's own lock held, and stopping would then wait on it forever.
    requested: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: requested.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    memory.watcher = watcher
    try:
        watcher.start()
        while not requested and not watcher.stopped and not gone.is_set():
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        watcher.stop()
        memory.watcher = None
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    show({"event": "stop", "time": round(time.time(), 3)})
    if gone.is_set():
        raise BrokenPipeError  # the CLI exits quietly with 141, as a tool killed by SIGPIPE
    if not as_json and not quiet:
        print("Stopped watching.", file=sys.stderr)
    return 0


__all__ = ["run_foreground"]
