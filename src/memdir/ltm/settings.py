"""``longTermMemory`` settings made concrete: ``${ENV}`` resolved, paths and the provider config.

Environment variables are resolved when long-term memory is *used*, not when the config file is
read, so a missing ``${OPENAI_API_KEY}`` for long-term memory never breaks ``memdir search``;
using long-term memory without it is an error naming the variable and the key (R§14).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from memdir.config import PROVIDER_IDS, ConfigError, did_you_mean

if TYPE_CHECKING:
    from memdir.config import LongTermMemoryConfig, MemorySearchConfig, Settings

_ENV_REF = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


def resolve_env(value: str, key: str, env: Mapping[str, str] | None = None) -> str:
    """Replace every ``${NAME}`` in ``value``; a variable that is unset or empty is an error."""
    env = os.environ if env is None else env

    def sub(match: re.Match[str]) -> str:
        name = match.group(1)
        found = env.get(name)
        if not found:
            raise ConfigError(f"longTermMemory.{key}: environment variable {name} is not set (used as ${{{name}}})")
        return found

    return _ENV_REF.sub(sub, value)


def ltm_config(settings: Settings) -> LongTermMemoryConfig:
    return settings.long_term_memory


def db_path(settings: Settings, env: Mapping[str, str] | None = None) -> Path:
    """Where the agent's LanceDB folder is: ``dbPath`` (``{agentId}``, ``~``, ``${ENV}``) or the state folder.

    Keyed like the index and the transcripts (``Settings.state_key``): the chosen agent id, else
    the workspace, so two workspaces used without an agent id never share memories.
    """
    configured = ltm_config(settings).db_path
    if not configured:
        return settings.state_path / "ltm" / settings.state_key
    raw = resolve_env(configured, "dbPath", env).replace("{agentId}", settings.state_key)
    path = Path(os.path.expanduser(raw))
    if not path.is_absolute():
        path = settings.state_path / path
    return path.resolve()


def mirror_path(settings: Settings, env: Mapping[str, str] | None = None) -> Path | None:
    mirror = ltm_config(settings).mirror
    if not mirror.enabled:
        return None
    raw = resolve_env(mirror.path, "mirror.path", env).replace("{agentId}", settings.state_key)
    path = Path(os.path.expanduser(raw))
    return path if path.is_absolute() else settings.workspace_path / path


def embedding_overridden(settings: Settings) -> bool:
    """Whether long-term memory asks for another model than memory search uses."""
    emb = ltm_config(settings).embedding
    return any(v is not None for v in (emb.provider, emb.model, emb.api_key, emb.base_url))


def embedding_config(settings: Settings, env: Mapping[str, str] | None = None) -> MemorySearchConfig:
    """``memorySearch`` with ``longTermMemory.embedding`` laid over it (env references resolved)."""
    emb = ltm_config(settings).embedding
    cfg = settings.memory_search.model_copy(deep=True)
    if emb.provider is not None:
        cfg.provider = resolve_env(emb.provider, "embedding.provider", env)
        cfg.fallback = "none"
        name = cfg.provider.strip().lower()
        if name not in PROVIDER_IDS:  # (" " was "unknown embedding provider ''", the key unnamed)
            raise ConfigError(f"longTermMemory.embedding.provider = {cfg.provider!r}: unknown embedding provider"
                              f"{did_you_mean(name, PROVIDER_IDS)} (expected one of {', '.join(PROVIDER_IDS)})")
    if emb.model is not None:
        cfg.model = resolve_env(emb.model, "embedding.model", env)
    if emb.api_key is not None:
        cfg.remote.api_key = resolve_env(emb.api_key, "embedding.apiKey", env)
    if emb.base_url is not None:
        cfg.remote.base_url = resolve_env(emb.base_url, "embedding.baseUrl", env)
    keyword_only = not cfg.enabled or (cfg.provider or "").strip().lower() in ("none", "off", "fts-only")
    if keyword_only and emb.provider is None:
        cfg.provider = "auto"  # memory search may be keyword-only; long-term memory needs vectors
    return cfg
