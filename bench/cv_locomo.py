"""Leave-one-conversation-out cross-validation on LoCoMo dev: fusion, date boost, chunk geometry, ablations.

    .venv/bin/python bench/cv_locomo.py ../shared/data/locomo-dev --work-dir /tmp/memdir-cv \
        --out docs/results/cv-locomo-dev.json > docs/results/cv-locomo-dev.md

``--part families`` runs the families (each setting chosen on four conversations, scored on the
fifth; the "chosen by CV" rows pool the held-out answers): fusion (weights x how BM25 is scaled,
or RRF), date boost, chunk geometry (OpenClaw's 400/80 against smaller chunks whose results are
widened to 1600 characters), widening (disjoint, overlapping, none) and fresh-file slots;
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

from memdir.bench.adapters import deep_merge
from memdir.bench.cv import CachedQueries, Variant, format_rows, leave_one_out, load, run_variant, summarise

WEIGHTS = (0.2, 0.3, 0.4, 0.5, 0.6, 0.7)
#: BM25 over the pool's best gives the keyword side more weight: vector weights up to 0.8.
MAX_WEIGHTS = (0.4, 0.5, 0.6, 0.7, 0.8)
BOOSTS = (0.0, 0.25, 0.5, 1.0, 2.0)
#: Chunk sizes (tokens/overlap) searched with results widened to 1600 characters; 400/80 unwidened
#: is OpenClaw's geometry.
GEOMETRIES = ((300, 60), (200, 40), (200, 20), (150, 30))


def weights(vw: float) -> dict[str, Any]:
    return {"memorySearch": {"query": {"hybrid": {"vectorWeight": vw, "textWeight": round(1 - vw, 2)}}}}


def chunking(tokens: int, overlap: int) -> dict[str, Any]:
    return {"memorySearch": {"chunking": {"tokens": tokens, "overlap": overlap}}}


#: Everything issue 10 added, switched off: roughly the search of b23f595 (which is also measured
#: as itself, from its own checkout, in docs/benchmarks.md).
ALL_OFF_TUNING = {"complete": False, "dates": False, "stemming": False, "id_phrases": False,
                  "text_norm": "ratio", "expand_chars": 0}
ALL_OFF_INDEXING = {"windows": False, "sections": False}
ALL_OFF_CONFIG = deep_merge(weights(0.7), chunking(400, 80))
#: What "off" is for a switch that is not a flag.
OFF_VALUES: dict[str, Any] = {"text_norm": "ratio", "expand_chars": 0}
CHANGES: dict[str, tuple[dict[str, Any], dict[str, Any], dict[str, Any]]] = {
    # name: (tuning, indexing, config) that turns the change on over ALL_OFF
    "complete scores": ({"complete": True}, {}, {}),
    "small chunks widened": ({"expand_chars": 1600}, {}, chunking(200, 40)),
    "BM25 over the pool's best": ({"text_norm": "max"}, {}, {}),
    "stemming": ({"stemming": True}, {}, {}),
    "identifier phrases": ({"id_phrases": True}, {}, {}),
    "dates": ({"dates": True}, {}, {}),
    "window embeddings": ({}, {"windows": True}, {}),
    "structure chunking": ({}, {"sections": True}, {}),
}


PARTS = {"families", "ablations"}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("dataset", type=Path)
    ap.add_argument("--work-dir", type=Path, default=Path("/tmp/memdir-cv"))
    ap.add_argument("--out", type=Path)
    ap.add_argument("--limit", type=int)
    ap.add_argument("--part", default="families,ablations")
    args = ap.parse_args()
    parts = {p.strip() for p in args.part.split(",") if p.strip()}
    if not parts or parts - PARTS:  # a typo ran nothing and printed an empty table
        ap.error(f"--part: expected a comma list of {', '.join(sorted(PARTS))}, got {args.part!r}")
    if args.limit is not None and args.limit < 1:
        ap.error(f"--limit: expected at least 1, got {args.limit}")
    try:
        samples = load(args.dataset)
    except ValueError as exc:
        ap.exit(2, f"cv_locomo: {exc}\n")
    if "families" in parts and len(samples) < 2:
        ap.exit(2, f"cv_locomo: --part families chooses each setting on the other conversations: it needs at least "
                   f"two samples, {args.dataset} has {len(samples)}\n")
    from memdir.embeddings.local import LocalEmbeddingProvider

    provider = CachedQueries(LocalEmbeddingProvider())
    say = lambda m: print(m, file=sys.stderr, flush=True)  # noqa: E731
    results: dict[str, list[dict[str, Any]]] = {}
    table: dict[str, dict[str, Any]] = {}

    def run(v: Variant, show: bool = True) -> None:
        if v.name not in results:
            results[v.name] = run_variant(v, samples, args.work_dir, provider, limit=args.limit, progress=say)
        if show:
            table[v.name] = summarise(results[v.name])

    if "families" in parts:
        fusion = []
        for vw in MAX_WEIGHTS:
            run(Variant(f"weighted {vw}/{round(1 - vw, 2)}, BM25/pool max", config=weights(vw)))
            fusion.append(f"weighted {vw}/{round(1 - vw, 2)}, BM25/pool max")
        for vw in WEIGHTS:
            run(Variant(f"weighted {vw}/{round(1 - vw, 2)}, r/(1+r)", config=weights(vw),
                        tuning={"text_norm": "ratio"}))
            fusion.append(f"weighted {vw}/{round(1 - vw, 2)}, r/(1+r)")
        run(Variant("rrf k=60", tuning={"fusion": "rrf"}))
        table["fusion chosen by CV (weights x BM25 scaling, or RRF)"] = leave_one_out(results, [*fusion, "rrf k=60"])
        table["fusion chosen by CV (weights x BM25 scaling)"] = leave_one_out(results, fusion)
        table["fusion chosen by CV (weights, r/(1+r) only)"] = leave_one_out(
            results, [f for f in fusion if f.endswith("r/(1+r)")])
        geometry = ["chunks 400/80 unwidened (OpenClaw)"]
        run(Variant(geometry[0], config=chunking(400, 80), tuning={"expand_chars": 0}))
        for t, o in GEOMETRIES:
            geometry.append(f"chunks {t}/{o} widened to 1600 chars")
            run(Variant(geometry[-1], config={} if (t, o) == (200, 40) else chunking(t, o)))
        table["chunk geometry chosen by CV"] = leave_one_out(results, geometry)
        widening = ["chunks 200/40 widened to 1600 chars", "widened, overlapping results",
                    "chunks 200/40 unwidened"]
        run(Variant(widening[1], tuning={"expand_disjoint": False}))
        run(Variant(widening[2], tuning={"expand_chars": 0}))
        table["widening chosen by CV"] = leave_one_out(results, widening)
        fresh = ["chunks 200/40 widened to 1600 chars"]
        for n in (1, 2):
            fresh.append(f"last {n} slot(s) for unseen files")
            run(Variant(fresh[-1], tuning={"fresh_slots": n}))
        table["fresh-file slots chosen by CV"] = leave_one_out(results, fresh)
        boosts = []
        for b in BOOSTS:
            run(Variant(f"date boost {b}", tuning={"date_boost": b}))
            boosts.append(f"date boost {b}")
        table["date boost chosen by CV"] = leave_one_out(results, boosts)
    if "ablations" in parts:
        for mode in ("keyword", "vector", "hybrid"):
            run(Variant(f"{mode} (defaults)", mode))
        off = Variant("everything off (400/80, 0.7/0.3, r/(1+r), no complete scores/stems/IDs/dates/windows/"
                      "sections/widening)", config=ALL_OFF_CONFIG, tuning=ALL_OFF_TUNING, indexing=ALL_OFF_INDEXING)
        run(off)
        for name, (tun, idx, cfg) in CHANGES.items():
            run(Variant(f"+ {name} alone", config=deep_merge(ALL_OFF_CONFIG, cfg), tuning={**ALL_OFF_TUNING, **tun},
                        indexing={**ALL_OFF_INDEXING, **idx}))
        run(Variant("+ r/(1+r) at 0.3/0.7 alone (the weights CV chose for it)",
                    config=deep_merge(ALL_OFF_CONFIG, weights(0.3)), tuning=ALL_OFF_TUNING, indexing=ALL_OFF_INDEXING))
        run(Variant("defaults with r/(1+r) at 0.3/0.7", config=weights(0.3), tuning={"text_norm": "ratio"}))
        for name, (tun, idx, _cfg) in CHANGES.items():
            neg_t = {k: OFF_VALUES.get(k, False) for k in tun}
            neg_i = {k: False for k in idx}
            neg_c = chunking(400, 80) if name == "small chunks widened" else {}
            run(Variant(f"defaults without {name}", config=neg_c, tuning=neg_t, indexing=neg_i))
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
