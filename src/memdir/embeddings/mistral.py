"""Mistral embeddings (``mistral-embed``) over Mistral's OpenAI-compatible ``/embeddings``."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar

from memdir.embeddings.openai import OpenAICompatibleProvider
from memdir.embeddings.remote import Timing

if TYPE_CHECKING:
    from memdir.config import MemorySearchConfig


class MistralProvider(OpenAICompatibleProvider):
    id: ClassVar[str] = "mistral"
    default_model: ClassVar[str] = "mistral-embed"
    default_base_url: ClassVar[str] = "https://api.mistral.ai/v1"
    model_prefixes: ClassVar[tuple[str, ...]] = ("mistral/",)
    api_key_env: ClassVar[tuple[str, ...]] = ("MISTRAL_API_KEY",)
    max_batch_items: ClassVar[int] = 512


def create_mistral_provider(
    cfg: MemorySearchConfig,
    env: Mapping[str, str] | None = None,
    *,
    model: str | None = None,
    use_remote_endpoint: bool = True,
    timing: Timing | None = None,
) -> MistralProvider:
    return MistralProvider.from_config(
        cfg, env, model=model, use_remote_endpoint=use_remote_endpoint, timing=timing
    )
