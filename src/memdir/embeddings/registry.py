"""Choosing the embedding provider from configuration (R§5.1).

``select_provider`` never raises for a provider that is merely unavailable (missing key, no
model, refused by ``offline``): it returns a selection with ``provider=None`` and the reason, so
the index keeps working in keyword-only mode and says why.  Real failures (an unknown provider
name, a malformed base URL) are raised: they are configuration mistakes to fix, not outages.

Order for ``auto``: the embedded local model first (memdir ships one), then openai, gemini,
voyage, mistral - the first that can be built wins.  Ollama is only used when named.

``remote.baseUrl/apiKey/headers`` describe the endpoint of the configured provider (and, in
``auto`` mode, of each candidate, as OpenClaw does); a ``fallback`` provider uses its own
environment variables and defaults, so a key meant for one vendor is never sent to another.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from memdir.embeddings.base import EmbeddingError, EmbeddingProvider, MissingApiKeyError
from memdir.embeddings.errors import ProviderUnavailableError

if TYPE_CHECKING:
    from memdir.config import MemorySearchConfig
    from memdir.embeddings.remote import Timing

#: Providers reached over HTTP, by id → (module, factory name).
REMOTE_PROVIDERS: dict[str, tuple[str, str]] = {
    "openai": ("memdir.embeddings.openai", "create_openai_provider"),
    "gemini": ("memdir.embeddings.gemini", "create_gemini_provider"),
    "voyage": ("memdir.embeddings.voyage", "create_voyage_provider"),
    "mistral": ("memdir.embeddings.mistral", "create_mistral_provider"),
    "ollama": ("memdir.embeddings.ollama", "create_ollama_provider"),
}
KNOWN_PROVIDERS = ("local", *REMOTE_PROVIDERS)
AUTO_ORDER = ("local", "openai", "gemini", "voyage", "mistral")
DISABLED = ("none", "fts-only", "off")
NO_PROVIDER = "No embeddings provider available."
#: R§5.1 runtime fallback: only errors that are about embedding trigger a provider switch.
RUNTIME_FALLBACK_PATTERN = re.compile(r"embedding|embeddings|batch", re.IGNORECASE)


@dataclass
class ProviderSelection:
    provider: EmbeddingProvider | None
    requested: str
    fallback_from: str | None = None
    fallback_reason: str | None = None
    unavailable_reason: str | None = None
    #: ``auto`` candidates passed over before the chosen one, with why (for ``memdir status``).
    skipped: list[str] = field(default_factory=list)

    @property
    def mode(self) -> str:
        return "hybrid" if self.provider is not None else "fts-only"


#: A constructor for one provider id; tests and the CLI may swap these.
ProviderFactory = Callable[..., EmbeddingProvider]


def create_provider(
    name: str,
    cfg: MemorySearchConfig,
    env: Mapping[str, str] | None = None,
    *,
    model: str | None = None,
    use_remote_endpoint: bool = True,
    timing: Timing | None = None,
) -> EmbeddingProvider:
    """Build provider ``name`` or raise (MissingApiKeyError / ProviderUnavailableError / other)."""
    env = os.environ if env is None else env
    name = name.strip().lower()
    if name == "local":
        return _create_local(cfg)
    if name not in REMOTE_PROVIDERS:
        raise EmbeddingError(
            f"unknown embedding provider {name!r} (expected one of: auto, {', '.join(KNOWN_PROVIDERS)}, none)"
        )
    import importlib

    module_name, factory_name = REMOTE_PROVIDERS[name]
    factory = getattr(importlib.import_module(module_name), factory_name)
    provider: EmbeddingProvider = factory(
        cfg, env, model=model, use_remote_endpoint=use_remote_endpoint, timing=timing
    )
    return provider


def _create_local(cfg: MemorySearchConfig) -> EmbeddingProvider:
    """The embedded local model; its absence or failure is "unavailable", never fatal."""
    try:
        from memdir.embeddings.local import create_local_provider  # type: ignore[import-not-found]
    except ImportError as exc:
        raise ProviderUnavailableError(f"local embeddings unavailable: {exc}") from exc
    try:
        provider: EmbeddingProvider = create_local_provider(cfg)
    except ProviderUnavailableError:
        raise
    except Exception as exc:  # a model that fails to load must not take memory search down
        why = str(exc).removeprefix("local embeddings: ")  # (it said "local embeddings" twice)
        raise ProviderUnavailableError(f"local embeddings unavailable: {why}") from exc
    return provider


def _unavailable(exc: BaseException) -> bool:
    return isinstance(exc, (MissingApiKeyError, ProviderUnavailableError))


def select_provider(
    cfg: MemorySearchConfig,
    env: Mapping[str, str] | None = None,
    *,
    timing: Timing | None = None,
) -> ProviderSelection:
    """Build the configured provider; keyword-only (``provider=None``) when none is available."""
    env = os.environ if env is None else env
    requested = (cfg.provider or "auto").strip().lower()
    if requested in DISABLED:
        return ProviderSelection(None, requested, unavailable_reason="embeddings disabled by configuration")
    if requested == "auto":
        return _select_auto(cfg, env, timing)

    try:
        return ProviderSelection(create_provider(requested, cfg, env, timing=timing), requested)
    except Exception as primary_error:
        fallback = (cfg.fallback or "none").strip().lower()
        if fallback in DISABLED or fallback == requested:
            if _unavailable(primary_error):
                return ProviderSelection(None, requested, unavailable_reason=str(primary_error))
            raise
        try:
            provider = _create_fallback(fallback, cfg, env, timing)
        except Exception as fallback_error:
            if _unavailable(primary_error) and _unavailable(fallback_error):
                return ProviderSelection(
                    None,
                    requested,
                    unavailable_reason=f"{primary_error}\n\nFallback to {fallback} failed: {fallback_error}",
                )
            raise
        return ProviderSelection(
            provider, requested, fallback_from=requested, fallback_reason=str(primary_error)
        )


def _select_auto(cfg: MemorySearchConfig, env: Mapping[str, str], timing: Timing | None) -> ProviderSelection:
    reasons: list[str] = []
    for name in AUTO_ORDER:
        try:
            provider = create_provider(name, cfg, env, timing=timing)
        except Exception as exc:
            if _unavailable(exc):
                reasons.append(str(exc))
                continue
            raise
        return ProviderSelection(provider, "auto", skipped=reasons)
    return ProviderSelection(
        None, "auto", unavailable_reason="\n\n".join(reasons) or NO_PROVIDER, skipped=reasons
    )


def _create_fallback(
    name: str, cfg: MemorySearchConfig, env: Mapping[str, str], timing: Timing | None
) -> EmbeddingProvider:
    """A fallback runs its provider's default model against its own endpoint (R§5.1)."""
    return create_provider(name, cfg, env, model="", use_remote_endpoint=False, timing=timing)


def fallback_for(
    selection: ProviderSelection,
    cfg: MemorySearchConfig,
    error: BaseException | str,
    env: Mapping[str, str] | None = None,
    *,
    timing: Timing | None = None,
) -> ProviderSelection | None:
    """The runtime fallback of R§5.1, or ``None`` when it does not apply.

    Applies when ``error`` is about embedding (message matches ``embedding|embeddings|batch``),
    a ``fallback`` is configured and differs from the current provider, and no fallback has
    happened yet.  The caller then closes the old provider, adopts the returned selection and
    runs a forced full reindex (the provider key changed).  A fallback that cannot be built
    returns ``None``: the original error stands.
    """
    if selection.fallback_from is not None:
        return None
    fallback = (cfg.fallback or "none").strip().lower()
    if fallback in DISABLED:
        return None
    current = selection.provider.id if selection.provider is not None else selection.requested
    if fallback == current or not RUNTIME_FALLBACK_PATTERN.search(str(error)):
        return None
    try:
        provider = _create_fallback(fallback, cfg, env if env is not None else os.environ, timing)
    except Exception:
        return None
    return ProviderSelection(provider, selection.requested, fallback_from=current, fallback_reason=str(error))
