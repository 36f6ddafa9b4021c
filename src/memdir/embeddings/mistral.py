"""Mistral embeddings (``mistral-embed``) over Mistral's OpenAI-compatible ``/embeddings``."""

from __future__ import annotations

from typing import ClassVar

from memdir.embeddings.openai import OpenAICompatibleProvider


class MistralProvider(OpenAICompatibleProvider):
    id: ClassVar[str] = "mistral"
    default_model: ClassVar[str] = "mistral-embed"
    default_base_url: ClassVar[str] = "https://api.mistral.ai/v1"
    model_prefixes: ClassVar[tuple[str, ...]] = ("mistral/",)
    api_key_env: ClassVar[tuple[str, ...]] = ("MISTRAL_API_KEY",)
    max_batch_items: ClassVar[int] = 512


#: The factory ``registry.REMOTE_PROVIDERS`` names: (cfg, env, *, model, use_remote_endpoint, timing).
create_mistral_provider = MistralProvider.from_config
