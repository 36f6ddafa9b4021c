"""Validated settings remembered between CLI runs, so ``memdir search`` starts without pydantic.

Importing pydantic and building memdir's config models costs more than the whole search a
one-shot ``memdir search`` runs (≈100-200 ms of a 150 ms budget).  The settings are a pure
function of a few inputs: the flags, the ``MEMDIR_*`` environment, ``HOME``, the current folder,
the config file that would be read (path and stat) and memdir's own version.  After a full
:func:`memdir.config.load_config` the CLI stores the settings (fields and derived values) with those
inputs (``<state dir>/cache/settings-<checksum>.json``); the next run with the same inputs reads it
back as a :class:`View`: the same fields, and the values of its properties (paths, the index key)
as :class:`~memdir.config.Settings` computed them.
Anything that changes an input (an edited config file, another env var, a memdir upgrade) is a
miss and goes through pydantic again.  The snapshot is a cache: losing it costs only time, and
a state folder that cannot be written simply means no snapshot.
"""

from __future__ import annotations

import binascii
import contextlib
import copy
import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

SNAPSHOT_VERSION = 1
CONFIG_FILENAMES = ("memdir.toml", "memdir.json", "memdir.json5")
#: Environment variables that can change the resolved settings (``memdir.config.ENV_KEYS`` + the file).
ENV_INPUTS = ("MEMDIR_CONFIG", "MEMDIR_STATE_DIR", "MEMDIR_WORKSPACE", "MEMDIR_AGENT", "MEMDIR_PROVIDER",
              "MEMDIR_MODEL", "MEMDIR_FALLBACK", "MEMDIR_OFFLINE", "MEMDIR_INDEX_PATH", "MEMDIR_CITATIONS",
              "MEMDIR_USER_TIMEZONE", "MEMDIR_STORE_DRIVER", "MEMDIR_DATABASE_URL", "MEMDIR_PG_SCHEMA", "HOME")


#: Every other ``MEMDIR_*`` variable memdir reads (tuning knobs, not settings).
OTHER_ENV = ("MEMDIR_CACHE_DIR", "MEMDIR_QUERY_CACHE_SIZE", "MEMDIR_SAVED_GRAPH", "MEMDIR_PROGRESS_INTERVAL",
             "MEMDIR_MCP_FAST_PATH", "MEMDIR_CHAT_MODEL", "MEMDIR_SQLITE_BINDING", "MEMDIR_NO_SETTINGS_CACHE",
             "MEMDIR_DEBUG")
#: Prefixes of variables the benches and tests read; never a user's setting.
_INTERNAL_ENV = ("MEMDIR_BENCH_", "MEMDIR_TEST_")
_WARNED_ENV: set[str] = set()


def unknown_env_warning(env: Mapping[str, str]) -> str | None:
    """A warning naming ``MEMDIR_*`` variables memdir does not read (once per name and process).
    A misspelt one (``MEMDIR_PROVDER=openai``) was ignored without a word: searches went on with the
    default provider while the user believed they had set another."""
    known = set(ENV_INPUTS) | set(OTHER_ENV)
    unknown = sorted(name for name in env if name.startswith("MEMDIR_") and name not in known
                     and not name.startswith(_INTERNAL_ENV) and name not in _WARNED_ENV)
    if not unknown:
        return None
    import difflib

    _WARNED_ENV.update(unknown)
    parts = []
    for name in unknown:
        close = difflib.get_close_matches(name, sorted(known - {"HOME"}), n=1, cutoff=0.75)
        parts.append(f"{name} (did you mean {close[0]}?)" if close else name)
    return (f"environment variable{'s' if len(parts) > 1 else ''} {', '.join(parts)} "
            f"{'are' if len(parts) > 1 else 'is'} not read by memdir and ignored")


def candidate_count(max_results: int, multiplier: float) -> int:
    """Size of each signal's candidate pool: ``min(200, max(1, floor(maxResults × mult)))`` (R§7.3),
    and never fewer than ``max_results``: ``--max-results 300`` returned 200 results with 300 notes
    matching (R§'s cap; the same pool below 201, as the multiplier is at least 1).  At most
    :data:`MAX_POOL`: SQLite's LIMIT takes no number past 2**63 - 1 (``--max-results 2**63``)."""
    return max(min(max_results, MAX_POOL), min(200, max(1, math.floor(max_results * multiplier))))


#: The largest candidate pool (far more chunks than an index holds).
MAX_POOL = 2**31 - 1


def resolve_store_path(configured: str | None, agent_id: str, state_dir: Path) -> Path:
    if not configured:
        return state_dir / "memory" / f"{agent_id}.sqlite"
    return Path(os.path.expanduser(configured.replace("{agentId}", agent_id))).resolve()


#: Where :func:`save_snapshot` keeps a section's derived values (its ``@property`` results).
PROPS = "__props__"


def _decode(value: Any) -> Any:
    if isinstance(value, dict) and set(value) == {"__path__"}:
        return Path(value["__path__"])
    if isinstance(value, list):
        return [_decode(v) for v in value]
    return value


def _encode(value: Any) -> Any:
    if isinstance(value, Path):
        return {"__path__": str(value)}
    if isinstance(value, (list, tuple)):
        return [_encode(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    raise TypeError(f"cannot remember a {type(value).__name__}")


class View:
    """Read-only attribute access over one section of a settings dump: its fields, nested sections
    (as views) and the values its properties had when the snapshot was written."""

    __slots__ = ("_cache", "_data")

    #: Sections whose values are plain mappings, not sub-sections.
    _MAPPINGS = frozenset({"headers"})

    def __init__(self, data: Mapping[str, Any]):
        object.__setattr__(self, "_data", data)
        object.__setattr__(self, "_cache", {})

    def __getattr__(self, name: str) -> Any:
        cache = self._cache
        if name in cache:
            return cache[name]
        data = self._data
        if name in data and name != PROPS:
            value = data[name]
            if isinstance(value, dict) and name not in self._MAPPINGS:
                value = View(value)
        elif name in data.get(PROPS, {}):
            value = _decode(data[PROPS][name])
        else:
            raise AttributeError(name)
        cache[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings loaded from a snapshot are read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


def with_value(section: Any, path: str, value: Any) -> Any:
    """A copy of ``section`` (a pydantic model or a :class:`View`) with the field at the dotted
    ``path`` set to ``value``; the shared original is left as it is.

    A search in one mode needs settings that differ in one field, and the CLI's settings may be a
    read-only :class:`View` with no ``model_copy``.  A view's remembered property values are kept,
    so ``path`` must not be a field a property is derived from.
    """
    *parents, leaf = path.split(".")
    if isinstance(section, View):
        data = copy.deepcopy(section._data)
        node = data
        for key in parents:
            node = node[key]
        node[leaf] = value
        return View(data)
    out = section.model_copy(deep=True)
    node = out
    for key in parents:
        node = getattr(node, key)
    setattr(node, leaf, value)
    return out


def dump_with_properties(model: Any) -> dict[str, Any]:
    """``model.model_dump()`` plus, for it and every nested model, its properties' current values:
    :class:`View` answers them without the code that computes them (which needs pydantic)."""
    out: dict[str, Any] = {}
    for name in type(model).model_fields:
        value = getattr(model, name)
        out[name] = dump_with_properties(value) if hasattr(type(value), "model_fields") else _plain(value)
    props: dict[str, Any] = {}
    for name in dir(type(model)):
        if name.startswith(("_", "model_")) or not isinstance(getattr(type(model), name, None), property):
            continue
        props[name] = _encode(getattr(model, name))
    out[PROPS] = props
    return out


def _plain(value: Any) -> Any:
    """A field value as JSON (pydantic's ``mode="json"`` for the types settings hold)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(type(value), "model_fields"):
        return dump_with_properties(value)
    return value


class SnapshotConfig:
    """What :class:`memdir.api.Memory` needs of a loaded config, read from a snapshot."""

    def __init__(self, settings: View, origins: dict[str, str], config_file: Path | None):
        self.settings = settings
        self.origins = origins
        self.config_file = config_file


# -- keys and files ----------------------------------------------------------------------------

#: In a key, a file whose times may yet be given to another edit: no snapshot is saved for it.
OPEN_TICK = "open tick"


def _stat_sig(path: Path) -> list[Any] | None:
    """What changes when a file does: its ctime too, which moves with every write even when the
    mtime is set back and the size kept (``cp -p``, ``touch -r``).

    On a file system that keeps whole seconds (FAT, HFS+, network shares) a config file edited
    again within the second, keeping its size, keeps all of these: the snapshot of the first
    version was read back after the edit, and on every run after it, until the file changed
    again.  A file written in a tick that may still be open is marked :data:`OPEN_TICK`."""
    import time

    from memdir.workspace import unsettled

    try:
        st = path.stat()
    except OSError:
        return None
    sig = [str(path), st.st_mtime_ns, st.st_ctime_ns, st.st_size, st.st_ino]
    return [*sig, OPEN_TICK] if unsettled(st, time.time_ns()) else sig


def snapshot_key(*, config_path: str | None, workspace: str | None, agent_id: str | None,
                 state_dir: str | None, env: Mapping[str, str] | None = None) -> tuple[str, Path]:
    """``(every input load_config reads, as JSON text; the snapshot file)`` for these flags and this
    process."""
    env = os.environ if env is None else env
    ws_hint = Path(os.path.expanduser(str(workspace or env.get("MEMDIR_WORKSPACE") or "."))).resolve()
    sd_hint = Path(os.path.expanduser(str(state_dir or env.get("MEMDIR_STATE_DIR") or "~/.memdir")))
    explicit = config_path or env.get("MEMDIR_CONFIG")
    files: list[Any] = []
    if explicit:
        files.append(_stat_sig(Path(os.path.expanduser(str(explicit)))) or str(explicit))
    else:
        for folder in (ws_hint, sd_hint):
            for name in CONFIG_FILENAMES:
                sig = _stat_sig(folder / name)
                if sig is not None:
                    files.append(sig)
    from memdir import __version__

    code = [_stat_sig(Path(__file__).with_name(name)) for name in ("config.py", "settings_cache.py")]
    payload = {
        "v": SNAPSHOT_VERSION, "memdir": __version__, "code": code, "cwd": os.getcwd(),
        "flags": [config_path, workspace, agent_id, state_dir],
        "env": {k: env.get(k) for k in ENV_INPUTS}, "files": files,
    }
    key = json.dumps(payload, sort_keys=True, default=str)
    # A snapshot is used only for an equal key (kept in the file), so a checksum can name the file:
    # a collision costs a reload, never wrong settings, and hashlib would cost every CLI start 2 ms.
    data = key.encode()
    return key, sd_hint / "cache" / f"settings-{binascii.crc32(data):08x}{len(data):04x}.json"


def load_snapshot(path: Path, key: str) -> SnapshotConfig | None:
    """The snapshot at ``path`` if it is intact and was written for ``key``; else ``None``."""
    from memdir.reading import read_regular

    try:  # (a FIFO at that name waited for a writer for ever: every CLI command hung)
        data = json.loads(read_regular(path, limit=None))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("settings"), dict):
        return None
    if not _same_probes(data.get("probes")):
        return None
    cfg = data.get("configFile")
    settings = View(data["settings"])
    if not _same_targets(settings):
        return None
    return SnapshotConfig(settings, dict(data.get("origins") or {}), Path(cfg) if cfg else None)


def _same_probes(probes: Any) -> bool:
    """Whether every path whose existence decided a setting still is (or is not) there: a model
    folder put beside the config file after the snapshot was written (``local.modelPath =
    "models/e5"``) changes no input of the key, and searches kept taking the name for a hub model."""
    if probes is None:
        return True
    try:
        return all(os.path.exists(path) == bool(existed) for path, existed in probes)
    except (TypeError, ValueError):  # a snapshot of another shape
        return False


def _same_targets(settings: View) -> bool:
    """Whether the workspace, state folder and index path given still resolve to the folders the
    snapshot holds: a symlink among them repointed (a ``current`` link to the workspace, a state
    folder moved behind its link) changes no input of the key, and searches kept reading and
    writing the old target (recreating it when it was gone)."""
    try:
        if (Path(os.path.expanduser(settings.workspace)).resolve() != settings.workspace_path
                or Path(os.path.expanduser(settings.state_dir)).resolve() != settings.state_path):
            return False
        store_path = settings.memory_search.store.path
        if store_path and resolve_store_path(store_path, settings.state_key, settings.state_path) != \
                settings.index_path:
            return False
        return _same_state_key(settings)
    except (AttributeError, TypeError, OSError, RuntimeError):  # a snapshot of another shape, a symlink loop
        return False


def _same_state_key(settings: View) -> bool:
    """Whether the workspace still keeps agent ``main``'s state exactly when the snapshot says so.

    Which state is this workspace's depends on folders no input of the key covers
    (:func:`memdir.state_key.uses_legacy_state`): once an upgraded workspace that kept ``main``'s
    state had state of its own (``mv agents/main agents/<key>``), every search still indexed
    ``agents/main/sessions``, dropping the moved transcripts that ``memdir index`` then put back.
    A few ``stat`` calls, and a read of ``main.sqlite``'s owner only while ``main`` has state."""
    if settings.agent_explicit:
        return True
    from memdir.state_key import LEGACY_AGENT_ID, uses_legacy_state

    legacy_index = resolve_store_path(settings.memory_search.store.path, LEGACY_AGENT_ID, settings.state_path)
    legacy = uses_legacy_state(settings.state_path, settings.workspace_path, settings.workspace_key, legacy_index)
    return legacy == (settings.state_key == LEGACY_AGENT_ID)


def save_snapshot(path: Path, key: str, loaded: Any) -> bool:
    """Write ``loaded`` (a :class:`memdir.config.LoadedConfig`) for ``key``; ``False`` when it cannot,
    or when an input file's times may yet be those of another edit (:data:`OPEN_TICK`)."""
    if json.dumps(OPEN_TICK) in key:
        return False
    try:
        payload = {"key": key, "settings": dump_with_properties(loaded.settings), "origins": loaded.origins,
                   "configFile": str(loaded.config_file) if loaded.config_file else None,
                   "probes": list(getattr(loaded, "probes", []))}
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    except (OSError, TypeError, ValueError):
        return False
    tmp: Path | None = None
    try:
        import tempfile

        # the settings hold secrets (remote.apiKey, a DSN's password, perhaps from a 0600 config
        # file or the environment): readable by its owner only (mkstemp's 0600), as the config file
        # should be.  A new file of a name no one can guess: one named by the pid alone was opened
        # through a symlink planted at that name (in a state folder others can write, /tmp/…),
        # which emptied the file it pointed to and wrote the settings' secrets into it.
        fd, name = tempfile.mkstemp(prefix=f"{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent)
        tmp = Path(name)
        with open(fd, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
    except (OSError, TypeError, ValueError):
        # a full disk: each search (a new pid) left one more cut-short temp, pruned only after a save worked
        if tmp is not None:
            with contextlib.suppress(OSError):
                tmp.unlink()
        return False
    _prune(path.parent)
    return True


#: Snapshots kept: one is written per set of inputs (each edit of a config file, each folder memdir
#: runs from), so without a bound the folder only grew.
MAX_SNAPSHOTS = 64


def _prune(folder: Path) -> None:
    """Remove all but the :data:`MAX_SNAPSHOTS` most recently written snapshots (and temporary files
    a killed run left, once they are a minute old); only after a miss, so a search that hits pays nothing."""
    import time  # here: a search that finds its snapshot never gets this far

    try:
        entries = [(e.stat().st_mtime, e.path, e.name.endswith(".tmp")) for e in os.scandir(folder)
                   if e.name.startswith("settings-") and e.is_file(follow_symlinks=False)]
    except OSError:
        return
    snapshots = sorted((e for e in entries if not e[2]), reverse=True)
    old = [p for _, p, _ in snapshots[MAX_SNAPSHOTS:]]
    old += [p for mtime, p, tmp in entries if tmp and mtime < time.time() - 60]
    for name in old:
        try:
            os.unlink(name)
        except OSError:  # another process removed it first
            pass
