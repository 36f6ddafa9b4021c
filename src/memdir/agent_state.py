"""``memdir agents``: the agents a state folder holds state for, and forgetting one.

An agent's state is keyed by its id (``--agent ops``) or, without one, by its workspace
(``<folder-name>-<hash>``): its index ``memory/<key>.sqlite`` (or ``memorySearch.store.path``)
with the files memdir and SQLite keep beside it, its transcripts ``agents/<key>/sessions`` and
its long-term memory ``ltm/<key>``.  Why a command: an agent whose workspace was deleted kept
its index and long-term memory for ever, and nothing listed them.

Forgetting deletes derived state only: the index and what lies beside it, and the long-term
memory when asked for by name.  Transcripts are never deleted (they cannot be rebuilt), nor
anything a symbolic link points at (the link alone goes).
"""

from __future__ import annotations

import os
import re
import stat
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

#: A workspace's own key (``<folder-name>-<10 hex>``), as opposed to a chosen agent id.
_WORKSPACE_KEY = re.compile(r"-[0-9a-f]{10}$")
#: Files beside an index that belong to it: SQLite's journals, memdir's lock, progress, vector
#: sidecar, a rebuild's temporary database and a damaged index moved aside, each matched whole
#: (agent 'ops.sqlite.tmp-x' has its own index, named after ops's: see atomic_write.temps_of).
_SQLITE_JOURNALS = r"(?:-wal|-shm|-journal)?"
_BESIDE = (
    r"-wal|-shm|-journal",
    r"\.vec8(?:\.tmp-[0-9]+-[0-9A-Za-z]+)?",
    r"\.progress(?:\.[0-9]+\.tmp)?",
    r"\.tmp-[0-9a-f]{12}" + _SQLITE_JOURNALS,
    r"\.corrupt-[0-9]{8}-[0-9]{6}(?:-[0-9]+)?" + _SQLITE_JOURNALS,
)
#: The name a long-term memory folder is given while it is deleted: ``.forgetting-<key>-<12 hex>``.
FORGETTING = ".forgetting-"
_LEFT_ASIDE = re.compile(re.escape(FORGETTING) + r"(.+)-[0-9a-f]{12}$")


def index_folder(store_path: str | None, state: Path) -> tuple[Path, str, str]:
    """Where the agents' indexes are and how they are named: the folder, and what comes before
    and after the key in a name (``memory/``, ``""``, ``".sqlite"`` unless ``memorySearch.store.path``
    names each agent's index elsewhere, with ``{agentId}`` in its file name)."""
    if store_path and "{agentId}" in store_path:
        folder, name = os.path.split(os.path.expanduser(store_path))
        if "{agentId}" not in folder and name.count("{agentId}") == 1:
            before, after = name.split("{agentId}")
            return Path(folder or ".").resolve(), before, after
    return state / "memory", "", ".sqlite"


def ltm_folder(db_path: str | None, state: Path) -> tuple[Path, re.Pattern[str]]:
    """Where the agents' long-term memories are, and a pattern of their folders' names giving the
    key: ``ltm/<key>``, unless ``longTermMemory.dbPath`` keeps each elsewhere (``{agentId}`` in its
    last name)."""
    if db_path and "{agentId}" in db_path:
        from memdir.ltm.settings import resolve_env

        try:
            folder, name = os.path.split(os.path.expanduser(resolve_env(db_path, "dbPath")))
        except Exception:  # (an unset ${VAR}: the agent's own commands say so)
            folder, name = "", ""
        if name.count("{agentId}") == 1 and "{agentId}" not in folder:
            before, after = name.split("{agentId}")
            where = Path(folder) if os.path.isabs(folder) else state / folder
            return where.resolve(), re.compile(re.escape(before) + r"(.+)" + re.escape(after) + r"$")
    return state / "ltm", re.compile(r"(.+)$")


def agent_keys(state: Path, store_path: str | None = None, ltm_path: str | None = None) -> list[str]:
    """Every key with state in ``state``: indexes in ``memory/`` (or where ``store_path``, the
    configured ``memorySearch.store.path``, keeps them), folders in ``agents/`` and ``ltm/`` (or
    where ``ltm_path``, ``longTermMemory.dbPath``, keeps them).  Listings alone (nothing opened);
    a name that is not a plain agent id is left out."""
    from memdir.config import check_agent_id

    folder, before, after = index_folder(store_path, state)
    # one index for every agent (store.path without {agentId}) is no agent's: 'team.sqlite' was agent 'team'
    shared = os.path.abspath(os.path.expanduser(store_path)) if store_path and "{agentId}" not in store_path else None
    index_name = re.compile(re.escape(before) + r"(.+)" + re.escape(after) + r"$")
    left_beside = re.compile(re.escape(before) + r"(.+)" + re.escape(after) + r"(?:"
                             + "|".join((*_BESIDE, r"\.lock")) + r")$")
    ltm_where, ltm_name = ltm_folder(ltm_path, state)
    names: set[str] = set()
    for kind, where in (("memory", folder), ("agents", state / "agents"), ("ltm", ltm_where)):
        try:
            entries = list(os.scandir(where))
        except OSError:
            continue
        for entry in entries:
            name = entry.name
            if kind == "memory":
                if _is_dir(entry) and not entry.is_symlink():
                    continue  # (a folder of that name is no index memdir wrote)
                if shared and (entry.path == shared or (entry.path.startswith(shared) and left_beside.match(name))):
                    continue
                if match := index_name.match(name):
                    name = match.group(1)
                elif match := left_beside.match(name):
                    # what a forget (or a crash) left of an index: a vector file can be as large as it
                    name = match.group(1)
                else:
                    continue
            elif name.startswith(FORGETTING):
                match = _LEFT_ASIDE.match(name)  # a forget killed while deleting what it had moved aside
                if not match:
                    continue
                name = match.group(1)
            elif not _is_dir(entry):
                continue
            elif kind == "ltm":
                if not (match := ltm_name.match(name)):
                    continue
                name = match.group(1)
            try:
                check_agent_id(name)
            except ValueError:
                continue
            names.add(name)
    return sorted(names)


def left_aside(folder: Path, key: str) -> list[Path]:
    """The long-term memory folders of ``key`` that a forget moved aside in ``folder`` and was
    killed before it had deleted."""
    try:
        names = os.listdir(folder)
    except OSError:
        return []
    return sorted(folder / n for n in names if (m := _LEFT_ASIDE.match(n)) and m.group(1) == key)


def _is_dir(entry: os.DirEntry[str]) -> bool:
    try:
        return entry.is_dir()  # (a link to a folder too: the agent's state kept on another disk)
    except OSError:
        return False


def _lsize(path: Path) -> int | None:
    """The size of ``path`` itself (a link's own, never its target's); ``None`` if there is none."""
    try:
        return os.lstat(path).st_size
    except OSError:
        return None


def beside(index: Path) -> list[Path]:
    """The files memdir or SQLite keeps beside ``index`` (not the index itself, nor its lock)."""
    from memdir.atomic_write import temps_of

    found: list[Path] = []
    for tail in _BESIDE:
        found += [Path(p) for p in temps_of(str(index), tail)]
    return sorted(found)


def tree_size(folder: Path) -> tuple[int, int]:
    """Files and bytes under ``folder``, links not followed (a link counts as itself)."""
    files = size = 0
    for root, dirs, names in os.walk(folder):
        for name in names + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            try:
                st = os.lstat(os.path.join(root, name))
            except OSError:
                continue
            files += 1
            size += st.st_size
    return files, size


def index_facts(index: Path) -> dict[str, Any]:
    """What an index holds, read-only: files, chunks, who owns it, which memdir wrote it."""
    import json

    from memdir import db
    from memdir.index_identity import newer_version
    from memdir.state_key import claim_in

    facts: dict[str, Any] = {"path": str(index), "exists": os.path.lexists(index)}
    if not facts["exists"]:
        return facts
    parts = [index, *beside(index), Path(f"{index}.lock")]
    facts["bytes"] = sum(s for p in parts if (s := _lsize(p)) is not None)
    # (the log only while it holds pages: a reader, this listing's too, leaves an empty one behind)
    times = [os.lstat(p).st_mtime for p in (index, Path(f"{index}-wal")) if _lsize(p)]
    facts["lastSync"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(max(times))) if times else None
    if os.path.islink(index):
        facts["symlink"] = os.readlink(index)
    facts["workspace"] = None
    try:
        mode = os.stat(index).st_mode
    except OSError as exc:  # (a link to nothing)
        facts["error"] = f"cannot be read: {exc.strerror or exc}"
        return facts
    if not stat.S_ISREG(mode):  # (opening a FIFO waited for a writer for ever: memdir agents hung)
        from memdir.reading import kind_of

        facts["error"] = f"{kind_of(mode)}, not an index file"
        return facts
    try:
        if os.path.lexists(f"{index}-wal") or os.path.lexists(f"{index}-shm"):
            conn = db.connect(index, readonly=True, timeout=1.0)
        else:
            # No log beside it: nobody has it open, and the file holds it all.  Read as it is, since a
            # read-only open of an index in WAL mode leaves an empty -wal and a 32 KiB -shm behind
            # (a listing of 40 agents made 80 files, and the index's "last written" time now).
            conn = db.binding().connect(db.file_uri(index, "mode=ro&immutable=1"), uri=True, timeout=1.0,
                                        check_same_thread=False, isolation_level=None)
    except Exception as exc:
        facts["error"] = _first_line(exc)
        return facts
    try:
        facts["workspace"] = claim_in(conn)[0]
        facts["files"] = conn.execute("SELECT count(*) FROM files").fetchone()[0]
        facts["chunks"] = conn.execute("SELECT count(*) FROM chunks").fetchone()[0]
        row = conn.execute("SELECT value FROM meta WHERE key = 'memory_index_meta_v1'").fetchone()
        try:
            meta = json.loads(row[0]) if row else None
        except (TypeError, ValueError):  # (said 'unreadable: Expecting property name …' and no more)
            facts["error"] = ("its metadata (memory_index_meta_v1) is not valid JSON: the next sync of the agent "
                              "moves it aside and rebuilds it")
            return facts
        newer = newer_version(meta if isinstance(meta, dict) else None)
        if newer:
            facts["newerVersion"] = newer
    except Exception as exc:
        facts["error"] = _first_line(exc)
    finally:
        conn.close()
    return facts


def _first_line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


def users_of(paths: Sequence[Path], folders: Sequence[Path] = ()) -> list[dict[str, Any]]:
    """The other processes of this machine that have one of ``paths`` (or a file under one of
    ``folders``) open: a ``memdir watch`` or ``memdir mcp`` of the agent keeps its index open between
    syncs, without the writer lock, and would rebuild an index deleted under it at its next sync.
    From ``/proc``; empty where there is none (a process of another user cannot be seen either)."""
    # (by the real path too: /proc names the file a link led to, an index kept on another disk)
    wanted = {form(p) for p in paths for form in (os.path.abspath, os.path.realpath)}
    within = tuple({form(f) + os.sep for f in folders for form in (os.path.abspath, os.path.realpath)})
    found: list[dict[str, Any]] = []
    try:
        pids = [int(n) for n in os.listdir("/proc") if n.isdigit()]
    except OSError:
        return []
    me = os.getpid()
    for pid in pids:
        if pid == me:
            continue
        fd_dir = f"/proc/{pid}/fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        for fd in fds:
            try:
                target = os.readlink(f"{fd_dir}/{fd}")
            except OSError:
                continue
            target = target.removesuffix(" (deleted)")
            if target in wanted or (within and target.startswith(within)):
                found.append({"pid": pid, "command": _command_of(pid)})
                break
    return found


def _command_of(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            words = fh.read().split(b"\0")
    except OSError:
        return "?"
    text = " ".join(" ".join(os.fsdecode(w).split()) for w in words if w)  # (one line: python -c '…' spans many)
    return text[:120] + ("…" if len(text) > 120 else "")


def describe(key: str, settings: Any, state: Path, configured_workspace: str | None = None) -> dict[str, Any]:
    """One agent's entry in ``memdir agents --json``; ``configured_workspace``: its
    ``agents.list[].workspace``, for an agent whose index does not say."""
    index = Path(settings.index_path)
    entry: dict[str, Any] = {"id": key, "kind": "workspace" if _WORKSPACE_KEY.search(key) else "agent",
                             "backend": settings.memory_search.store.driver}
    facts = index_facts(index)
    workspace = facts.pop("workspace", None)
    workspace = workspace or configured_workspace
    entry["workspace"] = workspace
    entry["workspaceExists"] = os.path.isdir(workspace) if workspace else None
    entry["orphaned"] = bool(workspace) and not entry["workspaceExists"]
    facts["shared"] = index_shared(settings)
    entry["index"] = facts
    sessions = state / "agents" / key / "sessions"
    files, size = tree_size(sessions) if os.path.isdir(sessions) else (0, 0)
    entry["transcripts"] = {"path": str(sessions), "files": files, "bytes": size}
    ltm, why = ltm_path(settings)
    if ltm is None:
        entry["longTermMemory"] = {"path": None, "exists": False, "bytes": 0, "error": why}
        entry["interruptedForget"] = []
        return entry
    present = os.path.lexists(ltm)
    entry["longTermMemory"] = {"path": str(ltm), "exists": present,
                               "bytes": tree_size(ltm)[1] if present and not os.path.islink(ltm) else
                               (_lsize(ltm) or 0) if present else 0}
    entry["interruptedForget"] = [str(p) for p in left_aside(ltm.parent, key)]
    return entry


def ltm_path(settings: Any) -> tuple[Path | None, str | None]:
    """The agent's long-term memory folder, or ``None`` and why it cannot be told (a
    ``longTermMemory.dbPath`` naming a ``${VAR}`` unset here: set only for the MCP server, say).
    Why: the error failed the whole listing, where index and status ran."""
    from memdir.ltm.settings import db_path

    try:
        return db_path(settings), None
    except Exception as exc:
        return None, " ".join(str(exc).split())


def index_shared(settings: Any) -> bool:
    """Whether ``memorySearch.store.path`` gives every agent one index (no ``{agentId}`` in it)."""
    configured = settings.memory_search.store.path
    return bool(configured) and "{agentId}" not in configured


def ltm_shared(settings: Any) -> bool:
    configured = settings.long_term_memory.db_path
    return bool(configured) and "{agentId}" not in configured


def remove(path: Path) -> None:
    """Delete ``path`` itself: a link is unlinked (its target is left), a folder removed with what
    it holds, links inside it unlinked and never followed."""
    import shutil

    st = os.lstat(path)
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path)  # (never follows a link inside: see shutil.rmtree.avoids_symlink_attacks)
    else:
        os.unlink(path)


def checkpoint(index: Path) -> None:
    """Fold the index's write-ahead log into it and empty the log, so that no step of the
    deletion leaves a log of committed pages beside no index: SQLite would lay it over the next
    index made at that path (a half index).  Best effort: a damaged file or another memdir's is
    deleted as it is."""
    if os.path.islink(index) or not os.path.isfile(index) or not _lsize(Path(f"{index}-wal")):
        return
    from memdir import db

    try:
        conn = db.binding().connect(str(index), timeout=1.0, isolation_level=None)
    except Exception:
        return
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    except Exception:
        pass
    finally:
        conn.close()


__all__ = ["FORGETTING", "agent_keys", "beside", "checkpoint", "describe", "index_facts", "index_folder",
           "index_shared", "left_aside", "ltm_folder", "ltm_path", "ltm_shared", "remove", "tree_size", "users_of"]
