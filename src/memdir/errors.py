"""Errors memdir raises on purpose: each message says what went wrong and names the path."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from typing import Any


class MemdirError(RuntimeError):
    """memdir could not do what was asked; the message says why."""


class IndexOwnershipError(MemdirError):
    """The configured index file belongs to another workspace (``owner``, when known)."""

    def __init__(self, message: str, owner: str | None = None):
        super().__init__(message)
        self.owner = owner


class MemoryClosed(MemdirError):
    """The ``Memory`` was closed: a call made afterwards, or a sync that stopped early for it."""


class StoreError(MemdirError):
    """The index cannot be opened or used; the message names the index and the cause."""


class IndexDamaged(StoreError):
    """The index file is damaged (SQLite says so, its metadata is not JSON, a table is gone);
    callers set it aside and rebuild it from the files (``Store.recover``)."""


class IndexFromNewerMemdir(MemdirError):
    """The index was written by a newer memdir than this one (a higher schema or chunker version):
    this process leaves it as it is rather than rebuild it back for itself."""


class StdoutFailed(OSError):
    """A write to the CLI's stdout that failed other than by its reader going away (a full disk,
    ``> /dev/full``, an I/O error): the command's work was done, only its output was lost."""


def folder_identity(path: str) -> str | None:
    """``<boot id>:<device>:<inode>`` of folder ``path`` (``None`` if it cannot be read): the same
    folder by whatever path it is reached on this machine, a bind mount or another container's mount
    of a shared volume included, where that folder's path in the other container may not exist here
    at all.  The kernel's boot id keeps two machines' folders apart (each fresh volume's root has
    the same inode), and a reboot makes the identity stale, never wrongly equal."""
    from memdir.lock import boot_id

    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return f"{boot_id()}:{st.st_dev}:{st.st_ino}"


def owned_by_other(owner: str | None, workspace: str, owner_folder: Callable[[], object] | None = None) -> bool:
    """Whether an index claimed by ``owner`` belongs to another workspace than ``workspace``: not
    when both name the same folder by two paths (a bind mount; a name that differs only by case or
    Unicode form on macOS), which was refused with "give this workspace its own agent id".

    ``owner_folder``: reads the owner's :func:`folder_identity` as the index recorded it.  Why: a
    workspace on a volume shared by two containers, mounted at ``/workspace`` in one and at
    ``/home/u/ws`` in the other, was refused in the second (``/workspace`` is not there to compare),
    with advice to delete the index the first one was using."""
    if not owner or owner == workspace:
        return False
    recorded = owner_folder() if owner_folder is not None else None
    if isinstance(recorded, str) and recorded == folder_identity(workspace):
        return False
    try:
        if os.path.samefile(owner, workspace):
            return False
        # through FUSE (exFAT, FAT) each name of a folder that ignores case has an inode of its own
        from memdir.config import listed_case

        return not os.path.isabs(owner) or listed_case(owner) != listed_case(workspace)
    except (OSError, ValueError):  # the owner is gone (moved, deleted), or not a path
        return True


def _postgres_index(index: str) -> tuple[str, str] | None:
    """``(schema, agent)`` of an index in PostgreSQL, by its location (``postgresql://…/db#schema/agent``)."""
    if not index.startswith("postgresql://"):
        return None
    schema, _, agent = index.rpartition("#")[2].partition("/")
    return (schema, agent) if schema and agent else None


def holds_nothing(store: Any) -> bool:
    """Whether ``store`` is a finished index that holds no file at all (its workspace had no notes)."""
    try:
        return store.read_meta() is not None and not any(f or c for f, c in store.counts_by_source().values())
    except Exception:  # only advice depends on it
        return False


def ownership_message(index: str, owner: str, workspace: str, *, empty: bool = False) -> str:
    # An index in PostgreSQL is no file: "delete postgresql://…/agent" and "index path (store.path)"
    # (a SQLite setting) told its user nothing they could do.
    pg = _postgres_index(index)
    advice = "give this workspace its own agent id (--agent NAME)" + ("" if pg else " or index path (store.path)")
    if os.path.isdir(owner):
        if empty and not pg:
            # `memdir --agent bot index` run in the wrong folder claimed the agent id for a folder
            # without notes, and the advice never said how to take it back
            return (f"index {index} belongs to workspace {owner}, not {workspace}, but holds no notes ({owner} "
                    f"had none when it was indexed): if this is the agent's workspace, delete {index} (memdir "
                    f"builds it again from this workspace's notes); otherwise {advice}")
        return f"index {index} belongs to workspace {owner}, not {workspace}; {advice}"
    # A workspace moved or renamed under the same agent id met only the advice above (`index
    # --force` is refused too): say what to do when the owner is gone.
    if pg:
        schema, agent = pg
        quoted = agent.replace("'", "''")
        start_over = (f"retire it (psql: UPDATE \"{schema}\".indexes SET state = 'retired' WHERE agent = '{quoted}' "
                      "AND state = 'live';) and memdir rebuilds it from the Markdown files, removing its old rows")
    else:
        start_over = f"delete {index} (memdir rebuilds it from the Markdown files)"
    return (f"index {index} belongs to workspace {owner}, not {workspace}, and {owner} no longer exists: if it was "
            f"moved here, {start_over}; otherwise {advice}")


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
