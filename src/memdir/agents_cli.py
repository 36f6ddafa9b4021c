"""``memdir agents`` (``list``) and ``memdir agents forget ID``: see :mod:`memdir.agent_state`.

Exit codes as elsewhere: 0 done, 1 not done (no such agent, in use, refused, not confirmed),
2 bad usage (an id that is no plain name, ``forget`` without ``--yes`` where nothing can ask).
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
from pathlib import Path
from typing import Any

from memdir.cli import CliError, UsageError, _counted, _note, _quiet, for_terminal, json_text


def _size(n: int) -> str:
    """``12 B``, ``4.0 KiB``, ``1.5 MiB``: disk use for a person."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n} {unit}" if unit == "B" else f"{n:,.1f} {unit}"
        n /= 1024  # type: ignore[assignment]
    return f"{n} B"  # pragma: no cover


def _loaded(args: argparse.Namespace, agent_id: str | None) -> Any:
    from memdir.config import load_config

    return load_config(config_path=getattr(args, "config", None), workspace=getattr(args, "workspace", None),
                       agent_id=agent_id, state_dir=getattr(args, "state_dir", None), check_workspace=False)


def _configured_workspace(loaded: Any) -> str | None:
    """The agent's ``agents.list[].workspace``, if its config gives one (not ``-w`` or the env)."""
    origin = str(loaded.origins.get("workspace") or "")
    return str(loaded.settings.workspace_path) if "agents.list[" in origin else None


def _entries(args: argparse.Namespace) -> tuple[Path, list[dict[str, Any]], Any]:
    from memdir.agent_state import agent_keys, describe

    base = _loaded(args, None)
    state = base.settings.state_path
    entries = []
    for key in agent_keys(state, base.settings.memory_search.store.path, base.settings.long_term_memory.db_path):
        loaded = _loaded(args, key)
        entries.append(describe(key, loaded.settings, state, _configured_workspace(loaded)))
    return state, entries, base.settings


def listing(args: argparse.Namespace) -> int:
    from memdir import agent_state

    state, entries, settings = _entries(args)
    notes = []
    if settings.memory_search.store.driver == "postgres":
        notes.append("store.driver is postgres: the indexes in the database are not listed here (memdir status "
                     "--agent ID shows one); the transcripts and long-term memories in the state folder are")
    shared = None
    if agent_state.index_shared(settings) and settings.memory_search.store.driver == "sqlite":
        shared = agent_state.index_facts(Path(settings.index_path))
    if args.json:
        print(json_text({"stateDir": str(state), "agents": entries, "sharedIndex": shared, "notes": notes}, indent=2))
        return 0
    if not entries:
        print(for_terminal(f"No agent has state in {state}."))
    lines: list[str] = []
    if shared is not None:
        lines.append(f"Shared index (memorySearch.store.path, every agent's): {_index_words(shared)}")
    for e in entries:
        head = f"{e['id']} ({e['kind']}"
        if e["orphaned"]:
            head += f"; orphaned: its workspace {e['workspace']} no longer exists"
        lines.append(head + ")")
        lines.append(f"  workspace: {e['workspace'] or 'unknown (no index names it)'}")
        lines.append(f"  index: {_index_words(e['index'])}" + (
            "; SQLite, not used: store.driver is postgres" if e["backend"] == "postgres" and e["index"]["exists"]
            else ""))
        t = e["transcripts"]
        lines.append(f"  transcripts: {_counted(t['files'], 'file')}, {_size(t['bytes'])} in {t['path']}" if t["files"]
                     else "  transcripts: none")
        ltm = e["longTermMemory"]
        lines.append(f"  long-term memory: {_size(ltm['bytes'])} in {ltm['path']}" if ltm["exists"]
                     else f"  long-term memory: unknown ({ltm['error']})" if ltm.get("error")
                     else "  long-term memory: none")
        lines += [f"  left by a forget that was stopped: {p} (memdir agents forget {e['id']} deletes it)"
                  for p in e["interruptedForget"]]
    if lines:
        print(for_terminal("\n".join(lines)))
    for n in notes:
        _note(args, f"note: {n}")
    return 0


def _index_words(ix: dict[str, Any]) -> str:
    if not ix["exists"]:
        return "none" + (" (memorySearch.store.path, shared by every agent)" if ix.get("shared") else "")
    parts = []
    if "files" in ix:
        parts.append(f"{_counted(ix['files'], 'file')}, {_counted(ix['chunks'], 'chunk')}")
    parts.append(_size(ix.get("bytes") or 0))
    if ix.get("lastSync"):
        parts.append(f"last written {ix['lastSync'].replace('T', ' ').replace('Z', ' UTC')}")
    words = ", ".join(parts) + f" ({ix['path']}"
    if ix.get("shared"):
        words += "; memorySearch.store.path, shared by every agent"
    if ix.get("symlink"):
        words += f"; a symbolic link to {ix['symlink']}"
    words += ")"
    if ix.get("newerVersion"):
        words += f"; written by a newer memdir ({ix['newerVersion']})"
    if ix.get("error"):
        words += f"; unreadable: {ix['error']}"
    return words


def forget(args: argparse.Namespace) -> int:
    from memdir import agent_state
    from memdir.config import agent_spelling, check_agent_id, did_you_mean

    flag = getattr(args, "agent", None)  # (`memdir --agent ops agents forget`, as other commands take it)
    if args.id is None and flag is None:
        raise UsageError("agents forget: give the agent id (memdir agents lists them)")
    if args.id is not None and flag is not None and args.id != flag:
        raise UsageError(f"agents forget: two agents given, {args.id!r} and --agent {flag!r}: give one")
    args.id = args.id if args.id is not None else flag
    try:
        check_agent_id(args.id)
    except ValueError as exc:
        raise UsageError(f"agents forget: {exc}{_workspace_given(args)}") from None
    base = _loaded(args, None)
    state = base.settings.state_path
    keys = agent_state.agent_keys(state, base.settings.memory_search.store.path,
                                  base.settings.long_term_memory.db_path)
    key = agent_spelling(args.id, state)
    if key not in keys:
        raise CliError(f"no agent {args.id!r} has state in {state}{did_you_mean(args.id, keys)}"
                       + ("" if keys else " (it holds no agent's state)") + ": memdir agents lists them")
    settings = _loaded(args, key).settings
    _refuse_legacy_claim(key, settings, state)
    plan, kept = _plan(args, key, settings, state)
    if settings.memory_search.store.driver == "postgres":
        # its SQLite index, if any, is one this config does not use (left by memdir migrate --to postgres)
        kept.insert(0, "its index in PostgreSQL (store.driver = \"postgres\"), which memdir agents forget does "
                       "not delete")
    if not plan:
        raise CliError(f"agent {key} has no derived state to delete: " + "; ".join(kept))
    report: dict[str, Any] = {"agent": key, "dryRun": bool(args.dry_run),
                              "deleted" if not args.dry_run else "wouldDelete": [str(p) for p in plan],
                              "kept": kept}
    busy = _in_use(key, settings, plan)  # (said before asking, and by a dry run: not after a yes)
    if args.dry_run:
        if busy:
            report["refusedNow"] = busy
        return _say(args, report, f"agent {key}: memdir agents forget would delete", plan, kept)
    if busy:
        raise CliError(busy)
    if not args.yes:
        _confirm(args, key, plan, kept)
    _delete(key, settings, plan)
    return _say(args, report, f"agent {key}: deleted", plan, kept)


def _refuse_legacy_claim(key: str, settings: Any, state: Path) -> None:
    """Agent ``main``'s index is also what tells the workspace that owns it to go on using
    ``agents/main`` and ``ltm/main``, its transcripts and memories from before memdir kept state per
    workspace (:mod:`memdir.state_key`): deleted, that workspace silently started anew under its
    own key, its transcripts no longer searched and its memories no longer recalled."""
    from memdir.config import workspace_index_name
    from memdir.state_key import LEGACY_AGENT_ID, index_owner, legacy_state_dirs, uses_legacy_state

    if key != LEGACY_AGENT_ID:
        return
    index = Path(settings.index_path)
    owner = index_owner(index)
    if not owner or not os.path.isdir(owner):
        return
    own = workspace_index_name(Path(owner))
    if not uses_legacy_state(state, Path(owner), own, index):
        return
    moves = "; ".join(f"mv {p} {p.with_name(own)}" for p in legacy_state_dirs(state) if p.exists())
    raise CliError(f"agent main's index {index} is also what makes workspace {owner} (used without --agent) keep "
                   "its transcripts and long-term memories from before memdir kept them per workspace, under "
                   f"{state / 'agents' / 'main'} and {state / 'ltm' / 'main'}: forgotten, it would stop using them "
                   f"without a word. Nothing was deleted; make them that workspace's own first ({moves}), then "
                   "forget main")


def _in_use(key: str, settings: Any, plan: list[Path]) -> str | None:
    """Why a forget of ``plan`` would be refused now (a writer, or a process with the state open)."""
    from memdir.lock import FileWriterLock, writer_words

    index = Path(settings.index_path)
    lock = Path(f"{index}.lock")  # (in the plan without the index: a first build's, while it runs)
    if (index in plan or lock in plan) and os.path.isfile(lock) and not os.path.islink(lock):
        holder = FileWriterLock(index).holder()
        if holder is not None:
            return (f"agent {key}'s index is being written by {writer_words(holder)}: nothing was deleted; stop it "
                    "(or let it finish) and try again")
    return _users_words(key, settings, plan)


def _users_words(key: str, settings: Any, plan: list[Path]) -> str | None:
    from memdir import agent_state

    index = Path(settings.index_path)
    ltm = agent_state.ltm_path(settings)[0]
    users = agent_state.users_of([index, Path(f"{index}-wal"), Path(f"{index}-shm")],
                                 [ltm] if ltm is not None and ltm in plan else [])
    if not users:
        return None
    index_users = agent_state.users_of([index, Path(f"{index}-wal"), Path(f"{index}-shm")])
    who = ", ".join(f"pid {u['pid']} ({u['command']})" for u in users[:3])
    why = ("a memdir watch or mcp would build the index again at its next sync" if index_users else
           "it has the long-term memory open, and would go on writing to it")
    return f"agent {key}'s state is in use by {who}: nothing was deleted; stop it first ({why})"


def _workspace_given(args: argparse.Namespace) -> str:
    """For an id given as a workspace's path (``memdir agents forget ~/old-notes``, the natural thing to
    type for a workspace deleted): the keys its state is under, to give instead."""
    from memdir.config import workspace_index_name

    if "/" not in args.id and not args.id.startswith("~"):
        return ""
    try:
        folder = Path(os.path.abspath(os.path.expanduser(args.id)))
        key = workspace_index_name(folder)
        _state, entries, _settings = _entries(args)
    except Exception:  # (a path that cannot be a folder's: the plain refusal says enough)
        return ""
    found = [e["id"] for e in entries if e["id"] == key or e["workspace"] == str(folder)]
    if not found:
        return f". {folder} is a path, not an agent id, and no agent in the state folder has it for workspace"
    return (f". {folder} is a path, not an agent id: its state is under " + ", ".join(repr(f) for f in found)
            + f" (memdir agents forget {found[0]})")


def _plan(args: argparse.Namespace, key: str, settings: Any, state: Path) -> tuple[list[Path], list[str]]:
    """What forgetting ``key`` deletes (index first, its lock last), and what it keeps, in words."""
    from memdir import agent_state
    from memdir.stores.sqlite_health import may_replace

    plan: list[Path] = []
    kept: list[str] = []
    index = Path(settings.index_path)
    lock = Path(f"{index}.lock")
    if agent_state.index_shared(settings):
        kept.append(f"the index {index} (memorySearch.store.path, shared by every agent)")
    else:
        if os.path.isfile(index) and not os.path.islink(index) and not may_replace(index):
            raise CliError(f"{index} is not an SQLite index: memdir will not delete it (nothing was deleted)")
        around = agent_state.beside(index)
        # its journals before it: a log of committed pages left beside no index would be laid over the
        # next index made there (the log is emptied into the index first, see agent_state.checkpoint)
        plan += [p for p in around if p.name in (f"{index.name}-wal", f"{index.name}-journal", f"{index.name}-shm")]
        plan += [index] if os.path.lexists(index) else []
        plan += [p for p in around if p not in plan]
        plan += [lock] if os.path.lexists(lock) and plan else []
        # A folder at one of these names is none of them (memdir and SQLite write files there): what
        # it holds is someone's, and was deleted with it.
        folders = [p for p in plan if os.path.isdir(p) and not os.path.islink(p)]
        kept += [f"{p} (a folder, not a file memdir writes: left as it is)" for p in folders]
        plan = [p for p in plan if p not in folders]
        if plan == [lock]:
            plan = []
    transcripts = state / "agents" / key
    if os.path.lexists(transcripts):
        kept.append(f"its transcripts and session records in {transcripts} (never deleted: they cannot be rebuilt)")
    ltm, why = agent_state.ltm_path(settings)
    if ltm is None:
        if args.ltm:
            raise CliError(f"agent {key}'s long-term memory cannot be found: {why} (nothing was deleted)")
        return plan, kept
    leftovers = agent_state.left_aside(ltm.parent, key)
    if os.path.lexists(ltm) and agent_state.ltm_shared(settings):
        kept.append(f"the long-term memory {ltm} (longTermMemory.dbPath, shared by every agent)")
    elif os.path.lexists(ltm) and not args.ltm:
        kept.append(f"its long-term memory {ltm} (--ltm deletes it too; it cannot be rebuilt)")
    elif os.path.lexists(ltm):
        plan.append(ltm)
    plan += leftovers  # (a forget killed while deleting the long-term memory it had moved aside)
    return plan, kept


def _confirm(args: argparse.Namespace, key: str, plan: list[Path], kept: list[str]) -> None:
    stdin = sys.stdin
    if stdin is None or not stdin.isatty() or getattr(args, "json", False):
        raise UsageError(f"agents forget {key}: give --yes to delete without a question (stdin is not a terminal "
                         "to ask on; --dry-run lists what would be deleted)")
    print(for_terminal("\n".join([f"memdir agents forget would delete, for agent {key}:",
                                  *[f"  {p}" for p in plan], *[f"  (kept: {k})" for k in kept]])), file=sys.stderr)
    print("Delete them? [y/N] ", end="", file=sys.stderr, flush=True)
    try:
        answer = stdin.readline()
    except (EOFError, OSError):
        answer = ""
    if answer.strip().lower() not in ("y", "yes"):
        raise CliError("not confirmed: nothing was deleted")


def _delete(key: str, settings: Any, plan: list[Path]) -> None:
    """Delete ``plan`` under the index's writer lock, refusing while another process writes or
    holds the index open; the write-ahead log is folded in first, the lock file goes last."""
    from memdir import agent_state
    from memdir.lock import FileWriterLock, writer_words

    index = Path(settings.index_path)
    lock_path = Path(f"{index}.lock")
    lock = None
    made = not os.path.lexists(lock_path)  # (taking the lock makes its file: deleted with the rest)
    # (a lock file no memdir can take, a link or a folder, excludes no writer: there is none to wait for)
    if (lock_path in plan or index in plan) and not os.path.islink(lock_path) and (
            not os.path.lexists(lock_path) or os.path.isfile(lock_path)):
        lock = FileWriterLock(index)
        if not lock.acquire(0):
            raise CliError(f"agent {key}'s index is being written by {writer_words(lock.holder())}: nothing "
                           "was deleted; stop it (or let it finish) and try again")
    try:
        ltm = agent_state.ltm_path(settings)[0]
        busy = _users_words(key, settings, plan)
        if busy:
            raise CliError(busy)
        if index in plan:
            agent_state.checkpoint(index)
        for path in plan:
            if path == lock_path:
                continue
            if path == ltm and not os.path.islink(ltm):
                # moved aside first: a forget killed in the middle leaves no half database at ltm/<key>
                aside = ltm.with_name(f"{agent_state.FORGETTING}{key}-{secrets.token_hex(6)}")
                os.replace(ltm, aside)
                path = aside
            try:
                agent_state.remove(path)
            except FileNotFoundError:
                pass
        if lock_path in plan or (lock is not None and made):
            try:
                os.unlink(lock_path)
            except FileNotFoundError:
                pass
    finally:
        if lock is not None:
            lock.release()


def _say(args: argparse.Namespace, report: dict[str, Any], title: str, plan: list[Path], kept: list[str]) -> int:
    if getattr(args, "json", False):
        print(json_text(report, indent=2))
        return 0
    if _quiet(args) and not report["dryRun"]:
        return 0
    print(for_terminal("\n".join([f"{title}:", *[f"  {p}" for p in plan], *[f"kept {k}" for k in kept],
                                  *([f"but not now: {report['refusedNow']}"] if report.get("refusedNow") else [])])))
    return 0
