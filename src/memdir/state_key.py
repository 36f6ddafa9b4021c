"""Which name an agent's own state lives under when no agent id was chosen.

The index, session transcripts (``agents/<key>/sessions``), long-term memory (``ltm/<key>``)
and ``{agentId}`` in configured paths all follow one key: the chosen agent id (OpenClaw's
per-agent layout, shared by every workspace that names that agent), else the workspace's own
key (``<folder-name>-<hash>``), so two workspaces used without ``--agent`` never share
transcripts or memories.

Before memdir keyed state by workspace, everything used without an agent id went to agent
``main``.  Those transcripts and memories belong to the one workspace that used agent ``main``'s
index (an index records the workspace that owns it, and refused any other), so that workspace,
and only that one, keeps using the ``main`` paths until it has state under its own key; every
other workspace starts its own.  ``memdir status`` says which applies.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: The agent id every workspace used before state was keyed by workspace.
LEGACY_AGENT_ID = "main"
_META_KEY = "memory_index_meta_v1"
_OWNER_KEY = "memdir:owner"


_OWNER_FOLDER_KEY = "memdir:ownerFolder"


def index_owner(index: Path) -> str | None:
    """The workspace an index file says it belongs to (``None``: no file, unreadable, unclaimed).

    Read-only and quick (a one-second busy timeout): this runs while settings are resolved.
    """
    return index_claim(index)[0]


def index_claim(index: Path) -> tuple[str | None, str | None]:
    """:func:`index_owner`, and the identity of its folder the index recorded
    (:func:`memdir.errors.folder_identity`; ``None`` if none)."""
    if not index.is_file():
        return None, None
    from memdir import db

    try:
        conn = db.connect(index, readonly=True, timeout=1.0)
    except Exception:
        return None, None
    try:
        return claim_in(conn)
    finally:
        conn.close()


def claim_in(conn: Any) -> tuple[str | None, str | None]:
    """:func:`index_claim` read through an open connection to the index."""
    try:
        rows = dict(conn.execute("SELECT key, value FROM meta WHERE key IN (?, ?, ?)",
                                 (_META_KEY, _OWNER_KEY, _OWNER_FOLDER_KEY)))
    except Exception:
        return None, None
    try:
        folder = json.loads(rows[_OWNER_FOLDER_KEY]) if _OWNER_FOLDER_KEY in rows else None
    except ValueError:
        folder = None
    for key in (_META_KEY, _OWNER_KEY):
        try:
            value = json.loads(rows[key]) if key in rows else None
        except ValueError:
            continue
        owner = value.get("workspace") if isinstance(value, dict) else value
        if isinstance(owner, str) and owner:
            return owner, folder if isinstance(folder, str) else None
    return None, None


def legacy_state_dirs(state_dir: Path, agent_id: str = LEGACY_AGENT_ID) -> list[Path]:
    """The per-agent folders of ``agent_id``: its sessions and its long-term memory."""
    return [state_dir / "agents" / agent_id, state_dir / "ltm" / agent_id]


def uses_legacy_state(state_dir: Path, workspace: Path, workspace_key: str, legacy_index: Path) -> bool:
    """Whether this workspace, used without an agent id, keeps agent ``main``'s state.

    True only when ``main`` has state, this workspace has none under its own key yet, and
    ``main``'s index (``legacy_index``) names this workspace as its owner.
    """
    if not any(p.exists() for p in legacy_state_dirs(state_dir)):
        return False
    if any(p.exists() for p in legacy_state_dirs(state_dir, workspace_key)):
        return False
    return index_owner(legacy_index) == str(workspace)


def left_behind(state_dir: Path, workspace: Path, own_key: str, index_of: Callable[[str], Path]) -> list[str]:
    """What to say about the state of workspaces that no longer exist, while this one has none of
    its own: a workspace renamed or moved gets a new key (its index is rebuilt from its notes), and
    its transcripts and long-term memories stayed under the old one, unused and unmentioned.

    ``index_of(key)``: the index file of a key (it names the workspace that owns it).  Only keys
    made from their owner's path are considered (an agent id's state is reached with ``--agent``).
    """
    from memdir.config import listed_case, workspace_index_name
    from memdir.errors import folder_identity

    if any(p.exists() for p in legacy_state_dirs(state_dir, own_key)):
        return []
    notes = _unclaimed_main(state_dir, workspace, own_key, index_of(LEGACY_AGENT_ID))
    keys: set[str] = set()
    for kind in ("agents", "ltm"):
        try:
            keys.update(e.name for e in os.scandir(state_dir / kind) if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
    here = None
    for key in sorted(keys - {own_key, LEGACY_AGENT_ID}):
        owner, folder = index_claim(index_of(key))
        if not owner or workspace_index_name(Path(owner)) != key:
            continue
        moves = "; ".join(f"mv {p} {p.with_name(own_key)}" for p in legacy_state_dirs(state_dir, key) if p.exists())
        if os.path.isdir(owner):
            # this folder, named in another case where case is ignored (`-w ~/Notes` for ~/notes):
            # keyed apart before workspaces were keyed by the case their folders list
            if owner != str(workspace) and listed_case(os.path.abspath(owner)) == str(workspace):
                notes.append(f"transcripts and long-term memories of this workspace, given as {owner} (the same "
                             f"folder in another case), are kept under the key {key}: {moves}")
            continue
        if folder is not None and folder == (here := here or folder_identity(str(workspace))):
            # This very folder by another path: moved here, or a volume another container mounts at
            # that path (where it does exist), whose state the mv would take away.
            notes.append(f"transcripts and long-term memories of this folder, kept under the key of its path "
                         f"{owner} ({key}), are not used at {workspace}: if it was moved or renamed from there, "
                         f"{moves}; if it is also used at {owner} (a container or mount that sees it there), give "
                         "both the same agent id (--agent NAME) instead, to share one index and its transcripts")
            continue
        notes.append(f"transcripts and long-term memories of workspace {owner}, which no longer exists, are kept "
                     f"under its old key {key}: if {workspace} was moved or renamed from there, {moves}")
    return notes


def moved_indexes(index: Path, workspace: Path) -> list[Path]:
    """The indexes beside ``index`` (this workspace's, keyed by its path) that this workspace left
    under an earlier path: each claimed by a workspace keyed by its own path, which is this very
    folder (its recorded identity), or which no longer exists and had this folder's name (a
    workspace restored into another home folder or onto another machine, with the state folder).

    Why: a new path is a new key, and the first index there embedded every note again (8 minutes
    for 600 notes with the local model) while the old index, its embedding cache complete, sat in
    the same folder; a first build takes its cached embeddings."""
    from memdir.config import workspace_index_name
    from memdir.errors import folder_identity

    here = str(workspace)
    slug = workspace_index_name(workspace).rsplit("-", 1)[0]
    found: list[Path] = []
    identity: str | None = None
    try:
        names = sorted(os.listdir(index.parent))
    except OSError:
        return []
    for name in names:
        if not name.endswith(".sqlite") or name == index.name:
            continue
        stem = name[:-len(".sqlite")]
        path = index.parent / name
        owner, folder = index_claim(path)
        if not owner or owner == here or workspace_index_name(Path(owner)) != stem:
            continue
        this_folder = folder is not None and folder == (identity := identity or folder_identity(here))
        if this_folder or (stem.rsplit("-", 1)[0] == slug and not os.path.isdir(owner)):
            found.append(path)
    return found


def unclaimed_legacy_state(state_dir: Path, own_key: str, legacy_index: Path) -> list[Path]:
    """Agent ``main``'s state folders when no index claims them and this workspace has no state
    of its own: what memdir from before state was keyed by workspace, but after indexes were
    (11-23), wrote for every workspace used without an agent id.  Its index was the workspace's
    own ``<folder-name>-<hash>.sqlite``, never ``main.sqlite``, so :func:`uses_legacy_state` cannot
    tell whose they are, and an upgraded workspace started empty: its long-term memories and
    transcripts were no longer listed, recalled or searched, and nothing said where they were."""
    if any(p.exists() for p in legacy_state_dirs(state_dir, own_key)) or index_owner(legacy_index):
        return []
    return [p for p in legacy_state_dirs(state_dir) if p.exists()]


def _unclaimed_main(state_dir: Path, workspace: Path, own_key: str, legacy_index: Path) -> list[str]:
    found = unclaimed_legacy_state(state_dir, own_key, legacy_index)
    if not found:
        return []
    moves = "; ".join(f"mv {p} {p.with_name(own_key)}" for p in found)
    return [f"transcripts and long-term memories that memdir kept for every workspace used without --agent, "
            f"before it kept them per workspace, are under {', '.join(str(p) for p in found)} and not used by "
            f"{workspace}: if they are this workspace's, {moves}"]


__all__ = ["LEGACY_AGENT_ID", "claim_in", "index_claim", "index_owner", "left_behind", "legacy_state_dirs",
           "moved_indexes", "unclaimed_legacy_state", "uses_legacy_state"]
