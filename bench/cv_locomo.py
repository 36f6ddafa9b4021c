"""Leave-one-conversation-out cross-validation on LoCoMo dev: fusion per model, date boost, ablations.

    .venv/bin/python bench/cv_locomo.py ../shared/data/locomo-dev --work-dir /tmp/memdir-cv \
        --out docs/results/cv-locomo-dev.json > docs/results/cv-locomo-dev.md

``--part families`` runs the fusion and date-boost families (each setting chosen on four
conversations, scored on the fifth; the "chosen by CV" rows pool the held-out answers);
``--part ablations`` runs the modes at the defaults and one row per change: the change alone on
top of everything off, and the defaults without it.  Indexes stay in ``--work-dir`` (the
embedding cache makes re-runs cheap).  Every search asks for 6 results, as an agent does.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from memdir.bench.cv import CachedQueries, Variant, format_rows, leave_one_out, load, run_variant, summarise

WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
BOOSTS = (0.0, 0.25, 0.5, 1.0, 2.0)


def weights(vw: float) -> dict[str, Any]:
    return {"memorySearch": {"query": {"hybrid": {"vectorWeight": vw, "textWeight": round(1 - vw, 2)}}}}


#: Everything issue 10 added, switched off: roughly the search of b23f595 (which is also measured
#: as itself, from its own checkout, in docs/benchmarks.md).
ALL_OFF_TUNING = {"complete": False, "dates": False, "stemming": False, "id_phrases": False}
ALL_OFF_INDEXING = {"windows": False, "sections": False}
CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (tuning, indexing, config) that turns the change on over ALL_OFF
    "complete scores": ({"complete": True}, {}, {}),
    "stemming": ({"stemming": True}, {}, {}),
    "identifier phrases": ({"id_phrases": True}, {}, {}),
    "dates": ({"dates": True}, {}, {}),
    "window embeddings": ({}, {"windows": True}, {}),
    "structure chunking": ({}, {"sections": True}, {}),
    "CV weights (vs 0.7/0.3)": ({}, {}, {}),
}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/memdir-cv"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--part", default="families,ablations")
    args = ap.parse_args()
    from memdir.embeddings.local import LocalEmbeddingProvider

    provider = CachedQueries(LocalEmbeddingProvider())
    samples = load(args.dataset)
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results: dict[str, list[dict[str, Any]]] = {}
    table: dict[str, dict[str, Any]] = {}

    def run(v: Variant, show: bool = True) -> None:
        if v.name not in results:
            results[v.name] = run_variant(v, samples, args.work_dir, provider, limit=args.limit, progress=say)
        if show:
            table[v.name] = summarise(results[v.name])

    parts = set(args.part.split(","))
    if "families" in parts:
        fusion = []
        for vw in WEIGHTS:
            run(Variant(f"weighted {vw}/{round(1 - vw, 2)}", config=weights(vw)))
            fusion.append(f"weighted {vw}/{round(1 - vw, 2)}")
        run(Variant("rrf k=60", tuning={"fusion": "rrf"}))
        table["fusion chosen by CV (weights or RRF)"] = leave_one_out(results, [*fusion, "rrf k=60"])
        table["fusion chosen by CV (weights only)"] = leave_one_out(results, fusion)
        boosts = []
        for b in BOOSTS:
            run(Variant(f"date boost {b}", tuning={"date_boost": b}))
            boosts.append(f"date boost {b}")
        table["date boost chosen by CV"] = leave_one_out(results, boosts)
    if "ablations" in parts:
        for mode in ("keyword", "vector", "hybrid"):
            run(Variant(f"{mode} (defaults)", mode))
        off = Variant("everything off (0.7/0.3, no complete scores/stems/IDs/dates/windows/sections)",
                      config=weights(0.7), tuning=ALL_OFF_TUNING, indexing=ALL_OFF_INDEXING)
        run(off)
        for name, (tun, idx, cfg) in CHANGES.items():
            on = Variant(f"+ {name} alone", config=cfg or (off.config if name != "CV weights (vs 0.7/0.3)" else {}),
                         tuning={**ALL_OFF_TUNING, **tun}, indexing={**ALL_OFF_INDEXING, **idx})
            run(on)
        for name, (tun, idx, _cfg) in CHANGES.items():
            if name == "CV weights (vs 0.7/0.3)":
                run(Variant("defaults with 0.7/0.3 (OpenClaw weights)", config=weights(0.7)))
                continue
            neg_t = {k: False for k in tun}
            neg_i = {k: False for k in idx}
            run(Variant(f"defaults without {name}", tuning=neg_t, indexing=neg_i))
        run(Variant("vector (defaults) without window embeddings", "vector", indexing={"windows": False}))
        run(Variant("keyword (defaults) without dates", "keyword", tuning={"dates": False}))
        run(Variant("keyword (defaults) without stemming", "keyword", tuning={"stemming": False}))
    print(format_rows(table))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"dataset": str(args.dataset), "runs": table}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
