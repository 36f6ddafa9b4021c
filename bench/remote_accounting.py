"""Requests and bytes a remote provider is sent to index a dataset, cold and with a warm cache.

Runs memdir's real OpenAI-compatible provider against the loopback test server (no network):

    python bench/remote_accounting.py ../shared/data/locomo-dev
"""

from __future__ import annotations

import json
import sys
import tempfile
from pathlib import Path

from memdir.api import Memory
from memdir.testing.provider_server import ProviderServer


def main(dataset: str) -> None:
    root = Path(dataset)
    samples = sorted(p for p in root.iterdir() if (p / "workspace").is_dir())
    rows = []
    with ProviderServer(api_key="bench-key", dims=384) as server, tempfile.TemporaryDirectory() as state:
        cfg = {"memorySearch": {"provider": "openai", "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "bench-key"}}}
        for phase, force in (("cold", False), ("warm (index --force)", True)):
            requests = sent = chunks = embedded = 0
            for sample in samples:
                with Memory(sample / "workspace", agent_id=sample.name, state_dir=state, config=cfg) as mem:
                    provider = mem.selection.provider
                    before = dict(provider.stats)
                    report = mem.sync(force=force)
                    after = provider.stats
                    requests += after["requests"] - before.get("requests", 0)
                    sent += after["bytes_sent"] - before.get("bytes_sent", 0)
                    chunks += report.chunks
                    embedded += report.embedded
            rows.append({"phase": phase, "samples": len(samples), "chunks": chunks, "embedded": embedded,
                         "requests": requests, "bytesSent": sent})
    print(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "../shared/data/locomo-dev")
