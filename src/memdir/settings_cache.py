"""Validated settings remembered between CLI runs, so ``memdir search`` starts without pydantic.

Importing pydantic and building memdir's config models costs more than the whole search a
one-shot ``memdir search`` runs (≈100-200 ms of a 150 ms budget).  The settings are a pure
function of a few inputs: the flags, the ``MEMDIR_*`` environment, ``HOME``, the current folder,
the config file that would be read (path and stat) and memdir's own version.  After a full
:func:`memdir.config.load_config` the CLI stores ``settings.model_dump()`` under a hash of those
inputs (``<state dir>/cache/settings-<hash>.json``); the next run with the same inputs reads it
back as a :class:`SettingsView`, attribute for attribute the same as :class:`~memdir.config.Settings`.
Anything that changes an input (an edited config file, another env var, a memdir upgrade) is a
miss and goes through pydantic again.  The snapshot is a cache: losing it costs only time, and
a state folder that cannot be written simply means no snapshot.
"""

from __future__ import annotations

import hashlib
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
              "MEMDIR_USER_TIMEZONE", "HOME")


def candidate_count(max_results: int, multiplier: float) -> int:
    """Size of each signal's candidate pool: ``min(200, max(1, floor(maxResults × mult)))``."""
    return min(200, max(1, math.floor(max_results * multiplier)))


def resolve_store_path(configured: str | None, agent_id: str, state_dir: Path) -> Path:
    if not configured:
        return state_dir / "memory" / f"{agent_id}.sqlite"
    return Path(os.path.expanduser(configured.replace("{agentId}", agent_id))).resolve()


class View:
    """Read-only attribute access over one section of a settings dump (nested sections are views)."""

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
        try:
            value = self._data[name]
        except KeyError:
            raise AttributeError(name) from None
        if isinstance(value, dict) and name not in self._MAPPINGS:
            value = _SECTIONS.get(name, View)(value)
        cache[name] = value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError("settings loaded from a snapshot are read-only")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._data!r})"


class QueryView(View):
    __slots__ = ()

    @property
    def candidates(self) -> int:
        return candidate_count(self.max_results, self.hybrid.candidate_multiplier)


class RemoteView(View):
    __slots__ = ()

    @property
    def query_timeout(self) -> float:
        return float(self.timeout_seconds or self.query_timeout_seconds)

    @property
    def batch_timeout(self) -> float:
        return float(self.timeout_seconds or self.batch_timeout_seconds)


_SECTIONS: dict[str, type[View]] = {"query": QueryView, "remote": RemoteView}


class SettingsView(View):
    """The same attributes and derived paths as :class:`memdir.config.Settings`."""

    __slots__ = ()

    @property
    def state_path(self) -> Path:
        return Path(os.path.expanduser(self.state_dir)).resolve()

    @property
    def workspace_path(self) -> Path:
        return Path(os.path.expanduser(self.workspace)).resolve()

    @property
    def index_path(self) -> Path:
        return resolve_store_path(self.memory_search.store.path, self.agent_id, self.state_path)

    @property
    def sessions_dir(self) -> Path:
        return self.state_path / "agents" / self.agent_id / "sessions"

    @property
    def extra_paths(self) -> list[Path]:
        out: list[Path] = []
        for raw in self.memory_search.extra_paths:
            p = Path(os.path.expanduser(raw))
            p = p if p.is_absolute() else self.workspace_path / p
            p = Path(os.path.normpath(p))
            if p not in out:
                out.append(p)
        return out


class SnapshotConfig:
    """What :class:`memdir.api.Memory` needs of a loaded config, read from a snapshot."""

    def __init__(self, settings: SettingsView, origins: dict[str, str], config_file: Path | None):
        self.settings = settings
        self.origins = origins
        self.config_file = config_file


# -- keys and files ----------------------------------------------------------------------------

def _stat_sig(path: Path) -> list[Any] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return [str(path), st.st_mtime_ns, st.st_size, st.st_ino]


def snapshot_key(*, config_path: str | None, workspace: str | None, agent_id: str | None,
                 state_dir: str | None, env: Mapping[str, str] | None = None) -> tuple[str, Path]:
    """``(hash of every input load_config reads, the snapshot file)`` for these flags and this process."""
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
    digest = hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:24]
    return digest, sd_hint / "cache" / f"settings-{digest}.json"


def load_snapshot(path: Path, key: str) -> SnapshotConfig | None:
    """The snapshot at ``path`` if it is intact and was written for ``key``; else ``None``."""
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("key") != key or not isinstance(data.get("settings"), dict):
        return None
    cfg = data.get("configFile")
    return SnapshotConfig(SettingsView(data["settings"]), dict(data.get("origins") or {}),
                          Path(cfg) if cfg else None)


def save_snapshot(path: Path, key: str, loaded: Any) -> bool:
    """Write ``loaded`` (a :class:`memdir.config.LoadedConfig`) for ``key``; ``False`` when it cannot."""
    try:
        payload = {"key": key, "settings": loaded.settings.model_dump(mode="json"), "origins": loaded.origins,
                   "configFile": str(loaded.config_file) if loaded.config_file else None}
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump(payload, fh)
        os.replace(tmp, path)
        return True
    except (OSError, TypeError, ValueError):
        return False
