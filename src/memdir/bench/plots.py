"""PNG charts of bench reports, so a reader can look rather than read (needs ``memdir[bench]``).

matplotlib is optional: :func:`require_matplotlib` says how to install it before any long run
starts, instead of failing after the measurements.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

INSTALL_HINT = "plots need matplotlib: pip install 'memdir[bench]' (or pip install matplotlib)"


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailable` with the install hint when matplotlib cannot be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise PlotUnavailable(INSTALL_HINT) from None


def _pyplot() -> Any:
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update({"font.size": 11, "axes.grid": True, "grid.alpha": 0.3, "figure.dpi": 110})
    return plt


def plot_quality(report: dict[str, Any], path: Path, title: str | None = None) -> Path:
    """recall@k (solid) and hit@k (dotted) per system; a run that fell back says so in its label."""
    plt = _pyplot()
    ks = [str(k) for k in report["ks"]]
    xs = [int(k) for k in ks]
    fig, ax = plt.subplots(figsize=(10, 5))
    markers = "osD^vP*X"
    # (a run that scored no question has no figures to draw: it is in the table, said)
    for i, (name, run) in enumerate(r for r in report["runs"].items() if not r[1].get("skipped") and r[1]["queries"]):
        label = name + (f" {run['version']}" if run.get("version") else "")
        if run.get("fallback"):
            label += f"\n(ran {run['ranAsText']})"
        style = "--" if run.get("fallback") else "-"
        line = ax.plot(xs, [run["overall"]["recall"][k] for k in ks], style, marker=markers[i % len(markers)],
                       label=label, linewidth=2, markersize=7, alpha=0.9)[0]
        ax.plot(xs, [run["overall"]["hit"][k] for k in ks], linestyle=":", color=line.get_color(), linewidth=1.5)
    ax.set_xlabel("k (results returned)")
    ax.set_ylabel("recall@k (solid) · hit@k (dotted)")
    ax.set_ylim(0, 1.0)
    ax.set_xticks(xs)
    n = next((r["queries"] for r in report["runs"].values() if r.get("queries")), 0)
    ax.set_title(title or f"Retrieval quality, {Path(report['dataset']).name} ({n} questions)")
    ax.legend(fontsize=9, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_latency(report: dict[str, Any], path: Path) -> Path:
    """Search latency p50 (with p95 as error bar tops) against corpus size, memdir vs baselines."""
    plt = _pyplot()
    sizes = [e["corpus"]["chunks"] for e in report["sizes"]]
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.5), sharey=True)
    for ax, mode in zip(axes, ("keyword", "vector", "hybrid"), strict=True):
        for who, key, style in (("memdir", "memdirSearch", "-o"), ("baseline", "baseline", "--s")):
            p50 = [(e[key].get(mode) or {}).get("p50") for e in report["sizes"]]
            p95 = [(e[key].get(mode) or {}).get("p95") for e in report["sizes"]]
            if any(v is None for v in p50):
                continue
            line = ax.plot(sizes, p50, style, linewidth=2, label=f"{who} p50")[0]
            ax.plot(sizes, p95, style[:-1] + "", color=line.get_color(), alpha=0.35, linewidth=1,
                    label=f"{who} p95")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"{mode} search")
        ax.set_xlabel("chunks in the index")
    axes[0].set_ylabel("latency per query (ms, log)")
    axes[0].legend(fontsize=8)
    fig.suptitle("Search latency vs corpus size (baseline: stdlib FTS5 OR-query / NumPy brute force)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path


def plot_index(report: dict[str, Any], path: Path) -> Path:
    """Indexing throughput against corpus size, memdir vs the plain FTS5 baseline."""
    plt = _pyplot()
    sizes = [e["corpus"]["chunks"] for e in report["sizes"]]
    fig, ax = plt.subplots(figsize=(7, 4.5))
    ax.plot(sizes, [e["memdirIndex"]["chunks"] / e["memdirIndex"]["seconds"] for e in report["sizes"]], "-o",
            linewidth=2, label="memdir, keyword-only")
    ax.plot(sizes, [e["memdirIndexVectors"]["chunks"] / e["memdirIndexVectors"]["seconds"] for e in report["sizes"]],
            "-^", linewidth=2, label="memdir + fixed random vectors")
    ax.plot(sizes, [e["baseline"]["index"]["chunks"] / e["baseline"]["index"]["seconds"] for e in report["sizes"]],
            "--s", linewidth=2, label="baseline: one FTS5 table")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("chunks in the corpus")
    ax.set_ylabel("chunks indexed per second (wall, log)")
    ax.set_title("Indexing throughput")
    ax.legend(fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
    return path
