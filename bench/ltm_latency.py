#!/usr/bin/env python3
"""Long-term memory latency: store and recall p50/p95 at N memories with the embedded model.

Stores N distinct memories one ``LongTermMemory.store`` call at a time (what ``memory_store``
and auto-capture do: embed, duplicate check, append, compaction every 32 fragments, on a real
LanceDB; supersession is off by default here because the generated texts share templates and
would supersede each other — ``--supersede`` turns it on),
then times ``search`` (``memory_recall``) and ``auto_recall`` for Q queries, cold-cache (each
query text is new, so the embedding is computed).  Timings include embedding.

    python bench/ltm_latency.py                    # 1,000 memories, 200 queries
    python bench/ltm_latency.py --n 1000 --queries 200 --json out.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from memdir.config import load_config
from memdir.ltm import LongTermMemory

os.environ.setdefault("MEMDIR_QUERY_CACHE_SIZE", "0")  # every timed query pays for its own vector

PEOPLE = ["Priya", "Tomás", "Aiko", "Lena", "Omar", "Grace", "Mateo", "Sven", "Noor", "Kwame", "Ines", "Yuki"]
THINGS = ["dark mode", "tabs over spaces", "green tea", "trail running", "jazz piano", "sourdough baking",
          "mechanical keyboards", "the Rust compiler", "morning stand-ups", "vinyl records", "rock climbing",
          "Postgres", "Kafka", "terraform", "chess openings", "watercolour painting", "cycling to work"]
PLACES = ["Lisbon", "Osaka", "Nairobi", "Montréal", "Tromsø", "Valparaíso", "Hanoi", "Kraków", "Perth"]
TEMPLATES = [
    "I prefer {thing} when I work on project {n}",
    "My colleague {person} is the owner of service number {n}",
    "We decided to use {thing} for release {n} of the billing app",
    "{person} lives in {place} and joins the call on day {n}",
    "The staging server {n} runs in {place}",
    "I always review pull request {n} with {person} before lunch",
    "My favourite {thing} shop is on street number {n} in {place}",
    "Remember that invoice {n} goes to {person} in {place}",
]


def memories(count: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    out: list[str] = []
    for n in itertools.count(1):
        text = rng.choice(TEMPLATES).format(thing=rng.choice(THINGS), person=rng.choice(PEOPLE),
                                            place=rng.choice(PLACES), n=n * 7 + rng.randint(0, 6))
        out.append(text)
        if len(out) >= count * 2:
            return out
    return out


def pct(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


def summary(values_ms: list[float]) -> dict[str, float]:
    return {"n": len(values_ms), "p50": round(statistics.median(values_ms), 2), "p95": round(pct(values_ms, 95), 2),
            "mean": round(statistics.fmean(values_ms), 2), "max": round(max(values_ms), 2)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000, help="memories to store (default 1000)")
    ap.add_argument("--queries", type=int, default=200, help="recall queries (default 200)")
    ap.add_argument("--supersede", action="store_true",
                    help="keep supersession on (templated texts then supersede each other: fewer active memories)")
    ap.add_argument("--json", type=Path, help="write the report here")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        ws = Path(tmp) / "ws"
        ws.mkdir()
        settings = load_config(workspace=ws, state_dir=Path(tmp) / "state",
                               overrides={"longTermMemory": {"supersede": args.supersede}}).settings
        with LongTermMemory(settings) as ltm:
            ltm.embedder.provider.embed_batch(["warm up"])  # model load is not a store
            store_ms: list[float] = []
            created_ms: list[float] = []
            created = duplicates = superseded = 0
            pool = iter(memories(args.n))
            t_all = time.perf_counter()
            while created < args.n:
                text = next(pool)
                t0 = time.perf_counter()
                result = ltm.store(text)
                store_ms.append((time.perf_counter() - t0) * 1000)
                if result.action == "created":
                    created_ms.append(store_ms[-1])
                created += result.action == "created"
                duplicates += result.action == "duplicate"
                superseded += len(result.superseded)
                if created and created % 200 == 0 and result.action == "created":
                    print(f"stored {created}/{args.n} (p50 so far {statistics.median(store_ms):.1f} ms)",
                          file=sys.stderr)
            store_total = time.perf_counter() - t_all
            rng = random.Random(11)
            questions = [f"what do you know about {rng.choice(THINGS)} and {rng.choice(PEOPLE)} #{i}"
                         for i in range(args.queries)]
            search_ms, recall_ms = [], []
            for q in questions:
                t0 = time.perf_counter()
                ltm.search(q, limit=5, min_score=0.1)
                search_ms.append((time.perf_counter() - t0) * 1000)
            for q in questions:
                t0 = time.perf_counter()
                ltm.auto_recall(q + " ?")  # a new text: embedded again, not served by the cache
                recall_ms.append((time.perf_counter() - t0) * 1000)
            embed_ms = []
            for q in questions[:50]:
                t0 = time.perf_counter()
                ltm.embedder.provider.embed_query(q + " (embed only)")
                embed_ms.append((time.perf_counter() - t0) * 1000)
            stats = ltm.stats()
            disk = sum(f.stat().st_size for f in ltm.db_path.rglob("*") if f.is_file())

    report = {
        "memories": {"active": stats["total"], "superseded": stats["superseded"], "storeCalls": len(store_ms),
                     "duplicates": duplicates, "supersessions": superseded},
        "model": f"{stats['provider']}/{stats['model']}",
        "storeMs": summary(store_ms), "storeCreatedMs": summary(created_ms), "storeTotalSeconds": round(store_total, 1),
        "searchMs": summary(search_ms), "autoRecallMs": summary(recall_ms), "embedQueryMs": summary(embed_ms),
        "diskBytes": disk,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
                    "load": os.getloadavg()},
    }
    print(json.dumps(report, indent=2))
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
