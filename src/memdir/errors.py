"""Errors memdir raises on purpose: each message says what went wrong and names the path."""

from __future__ import annotations

import os
import re


class MemdirError(RuntimeError):
    """memdir could not do what was asked; the message says why."""


class IndexOwnershipError(MemdirError):
    """The configured index file belongs to another workspace."""


class MemoryClosed(MemdirError):
    """The ``Memory`` was closed: a call made afterwards, or a sync that stopped early for it."""


class StoreError(MemdirError):
    """The index cannot be opened or used; the message names the index and the cause."""


class IndexDamaged(StoreError):
    """The index file is damaged (SQLite says so, its metadata is not JSON, a table is gone);
    callers set it aside and rebuild it from the files (``Store.recover``)."""


class StdoutFailed(OSError):
    """A write to the CLI's stdout that failed other than by its reader going away (a full disk,
    ``> /dev/full``, an I/O error): the command's work was done, only its output was lost."""


def owned_by_other(owner: str | None, workspace: str) -> bool:
    """Whether an index claimed by ``owner`` belongs to another workspace than ``workspace``: not
    when both name the same folder by two paths (a bind mount; a name that differs only by case or
    Unicode form on macOS), which was refused with "give this workspace its own agent id"."""
    if not owner or owner == workspace:
        return False
    try:
        return not os.path.samefile(owner, workspace)
    except (OSError, ValueError):  # the owner is gone (moved, deleted), or not a path
        return True


def ownership_message(index: str, owner: str, workspace: str, *, release: str | None = None) -> str:
    """``release``: how to let go of an index that is no file (a PostgreSQL agent's, whose "delete
    postgresql://…#memdir/bot" no one could follow, nor give it an index path)."""
    advice = ("give this workspace its own agent id (--agent NAME)" if release else
              "give this workspace its own agent id (--agent NAME) or index path (store.path)")
    if os.path.isdir(owner):
        return f"index {index} belongs to workspace {owner}, not {workspace}; {advice}"
    # A workspace moved or renamed under the same agent id met only the advice above (`index
    # --force` is refused too): say what to do when the owner is gone.
    return (f"index {index} belongs to workspace {owner}, not {workspace}, and {owner} no longer exists: if it was "
            f"moved here, {release or f'delete {index}'} (memdir rebuilds it from the Markdown files); "
            f"otherwise {advice}")


def store_ownership_message(store: object, owner: str, workspace: str) -> str:
    """:func:`ownership_message` for ``store``, with its own way to let go of it when it has one."""
    release = getattr(store, "release_advice", None)
    return ownership_message(getattr(store, "location", "?"), owner, workspace,
                             release=release() if callable(release) else None)


#: ``, /root/.cargo/registry/.../file.rs:123:45``: where in its Rust source LanceDB raised.
_RUST_LOCATION = re.compile(r",? (?:/|[A-Za-z]:\\)\S*?\.rs:\d+(?::\d+)?")


def without_source_location(text: str) -> str:
    """``text`` without the Rust source locations LanceDB appends to its messages (not for people)."""
    return _RUST_LOCATION.sub("", text)


#: What a :class:`MemoryError` (which carries no message) is said as: "Memory index failed: " and
#: nothing more was all a 25 MB note indexed under a 150 MB memory limit printed.
OUT_OF_MEMORY = "out of memory (is a memory limit, ulimit -v or a container's, too low for this?)"


def say(line: str) -> None:
    """Write ``line`` and its line break to stderr in one write.  Why: ``print(..., file=sys.stderr)``
    writes the text and the line break apart, so two threads saying something at once (an MCP
    server's start-up index and its watcher failing on an unwritable state folder) ran their lines
    together ("…changed files firstmemdir: background index…", then an empty line)."""
    import sys

    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
