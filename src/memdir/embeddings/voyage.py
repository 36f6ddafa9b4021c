"""Voyage AI embeddings: the OpenAI-compatible format plus ``input_type``.

Voyage embeds queries and documents differently (``input_type: "query"`` / ``"document"``),
which measurably improves retrieval, so the two calls send different types.
"""

from __future__ import annotations

from typing import Any, ClassVar

from memdir.embeddings.openai import OpenAICompatibleProvider


class VoyageProvider(OpenAICompatibleProvider):
    id: ClassVar[str] = "voyage"
    default_model: ClassVar[str] = "voyage-4-large"
    default_base_url: ClassVar[str] = "https://api.voyageai.com/v1"
    model_prefixes: ClassVar[tuple[str, ...]] = ("voyage/",)
    api_key_env: ClassVar[tuple[str, ...]] = ("VOYAGE_API_KEY",)
    #: Voyage accepts at most 1000 inputs per request.
    max_batch_items: ClassVar[int] = 1000

    def request_body(self, texts: list[str], kind: str) -> dict[str, Any]:
        return {"model": self.model, "input": texts, "input_type": "query" if kind == "query" else "document"}


#: The factory ``registry.REMOTE_PROVIDERS`` names: (cfg, env, *, model, use_remote_endpoint, timing).
create_voyage_provider = VoyageProvider.from_config
