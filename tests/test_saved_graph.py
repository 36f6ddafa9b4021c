"""The saved optimised graph of the embedded model (memdir.embeddings.saved_graph), on the real model.

These run the model file as shipped (``local.fusedAttention`` off); the fused copy's own saved graph
is covered in test_fused_model.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from memdir.embeddings import local, saved_graph
from memdir.embeddings.local import LocalEmbeddingProvider as Provider

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "I went to a pottery class yesterday with my kids, it was so much fun!",
    "# Project Falcon\n\n- Move the staging database to the new cluster on **Friday**.\n- Alice owns the runbook.",
    "",
    "München café naïve 🙂 " * 40,
]
KEY = (local.DEFAULT_MODEL_SHA256, onnxruntime.__version__)


@pytest.fixture(autouse=True)
def as_shipped(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(local, "DEFAULT_FUSED_ATTENTION", False)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(folder))
    return folder


def embed(texts: list[str] = TEXTS) -> tuple[np.ndarray, object, str]:
    """Vectors from a fresh provider (a fresh session), what it loaded, and its provider key."""
    with Provider() as provider:
        vectors = np.asarray(provider.embed_batch(texts))
        return vectors, provider._backend.loaded_from, provider.provider_key


def original_vectors(monkeypatch: pytest.MonkeyPatch) -> np.ndarray:
    with monkeypatch.context() as m:
        m.setenv("MEMDIR_SAVED_GRAPH", "0")
        vectors, loaded_from, _ = embed()
    assert not str(loaded_from).startswith(str(saved_graph.cache_dir()))
    return vectors


def graph(cache: Path) -> Path:
    return saved_graph.graph_dir(*KEY, cache)


def test_built_on_first_use_then_loaded_with_identical_vectors(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reference = original_vectors(monkeypatch)
    assert not graph(cache).exists()
    first, first_from, first_key = embed()
    assert Path(str(first_from)).name == "model.onnx" and graph(cache) not in Path(str(first_from)).parents
    assert sorted(p.name for p in graph(cache).iterdir()) == ["meta.json", "model.onnx", "weights.data"]
    assert saved_graph.find(*KEY, cache) is not None
    second, second_from, second_key = embed()
    assert second_from == graph(cache) / "model.onnx"
    assert np.array_equal(first, reference) and np.array_equal(second, reference)
    assert first_key == second_key == local.simple_provider_key("local", local.DEFAULT_MODEL)
    assert [p.name for p in graph(cache).parent.iterdir()] == [graph(cache).name]  # no temp leftovers


@pytest.mark.parametrize("damage", ["truncate", "same_size_flip", "garbage_model", "missing_meta"])
def test_damaged_graph_detected_and_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch, damage: str) -> None:
    reference = original_vectors(monkeypatch)
    embed()
    folder = graph(cache)
    weights, model = folder / "weights.data", folder / "model.onnx"
    if damage == "truncate":
        with weights.open("r+b") as fh:
            fh.truncate(weights.stat().st_size // 2)
    elif damage == "same_size_flip":
        # Same size and mtime: only the probe run can notice.
        st = weights.stat()
        data = bytearray(weights.read_bytes())
        for offset in range(0, len(data), 4096):
            data[offset + 3] ^= 0x40
        weights.write_bytes(bytes(data))
        os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    elif damage == "garbage_model":
        st = model.stat()
        model.write_bytes(b"\xff" * st.st_size)
        os.utime(model, ns=(st.st_atime_ns, st.st_mtime_ns))
    else:
        (folder / "meta.json").unlink()
    vectors, loaded_from, _ = embed()
    assert np.array_equal(vectors, reference)
    assert loaded_from != folder / "model.onnx"  # the original model ran
    assert saved_graph.find(*KEY, cache) is not None  # and the graph was saved again
    again, again_from, _ = embed()
    assert again_from == folder / "model.onnx" and np.array_equal(again, reference)


def test_repeated_probe_mismatches_stop_rebuilding(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    embed()
    for _ in range(saved_graph.MAX_MISMATCHES):
        saved_graph.note_mismatch(*KEY, cache)
    saved_graph.discard(*KEY, cache)
    _, loaded_from, _ = embed()
    assert loaded_from != graph(cache) / "model.onnx"
    assert not graph(cache).exists()


def test_stale_onnxruntime_version_ignored(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    embed()
    meta_file = graph(cache) / "meta.json"
    meta = json.loads(meta_file.read_text())
    meta["ort_version"] = "1.0.0"  # a graph saved by another onnxruntime, under this key
    meta_file.write_text(json.dumps(meta))
    assert saved_graph.find(*KEY, cache) is None
    _, loaded_from, _ = embed()
    assert loaded_from != graph(cache) / "model.onnx"
    assert json.loads(meta_file.read_text())["ort_version"] == onnxruntime.__version__
    # A folder for another version is never looked at.
    assert saved_graph.graph_dir(local.DEFAULT_MODEL_SHA256, "9.9.9", cache) != graph(cache)


def test_unwritable_cache_runs_the_original(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(blocker / "cache"))
    reference = original_vectors(monkeypatch)
    vectors, loaded_from, _ = embed()
    assert np.array_equal(vectors, reference)
    assert loaded_from != saved_graph.graph_dir(*KEY, blocker / "cache") / "model.onnx"
    assert blocker.read_text() == "a file where the cache folder would be"


def test_concurrent_first_runs(cache: Path) -> None:
    script = (
        "import json, sys\n"
        "from memdir.embeddings.local import LocalEmbeddingProvider as P\n"
        "p = P(fused_attention=False); v = p.embed_batch(sys.argv[1:])\n"
        "print(json.dumps(v))\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, *TEXTS[:3]], stdout=subprocess.PIPE,
                              env={**os.environ, "MEMDIR_CACHE_DIR": str(cache)}) for _ in range(3)]
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert len({o for o in outputs}) == 1
    assert [p.name for p in graph(cache).parent.iterdir()] == [graph(cache).name]
    assert saved_graph.find(*KEY, cache) is not None
    vectors, loaded_from, _ = embed(TEXTS[:3])
    assert loaded_from == graph(cache) / "model.onnx"
    assert np.array_equal(vectors, np.asarray(json.loads(outputs[0])))


def test_saving_removes_other_versions_unused_for_a_week(cache: Path) -> None:
    old = saved_graph.graph_dir(local.DEFAULT_MODEL_SHA256, "1.0.0", cache)
    recent = saved_graph.graph_dir(local.DEFAULT_MODEL_SHA256, "1.1.0", cache)
    other_model = saved_graph.graph_dir("0" * 64, "1.0.0", cache)
    for folder in (old, recent, other_model):
        folder.mkdir(parents=True)
        (folder / "meta.json").write_text("{}")
    week_ago = os.stat(old / "meta.json").st_mtime - saved_graph.STALE_AFTER_S - 60
    for folder in (old, other_model):
        os.utime(folder / "meta.json", (week_ago, week_ago))
    embed(TEXTS[:1])
    assert saved_graph.find(*KEY, cache) is not None
    assert not old.exists()
    assert recent.exists() and other_model.exists()
    assert sorted(p.name for p in graph(cache).parent.iterdir()) == sorted(
        [graph(cache).name, recent.name, other_model.name])
    # Loading marks the graph in use.
    meta = graph(cache) / "meta.json"
    os.utime(meta, (week_ago, week_ago))
    _, loaded_from, _ = embed(TEXTS[:1])
    assert loaded_from == graph(cache) / "model.onnx"
    assert meta.stat().st_mtime > week_ago + 3600


def test_discarding_a_graph_another_process_already_removed_leaves_nothing(tmp_path: Path) -> None:
    """The loser of a race to discard a graph used to leave its empty ``.<name>.*.old`` trash
    folder behind (seen as a flaky test_concurrent_first_runs)."""
    gone = tmp_path / "gone"
    saved_graph._remove(gone)
    assert list(tmp_path.iterdir()) == []


def test_what_killed_builders_left_is_removed_by_the_next_build(cache: Path) -> None:
    """A process killed while saving the graph (or the fused copy) left its staging folder (up to
    90 MB) or temporary file in the cache for good: nothing ever looked at them again."""
    import time

    models = graph(cache).parent
    models.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(dead.stdout)
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        killed = models / f".{graph(cache).name}.{dead_pid}.abcd1234.tmp"
        killed.mkdir()
        (killed / "weights.data").write_bytes(b"\0" * 1024)
        killed_file = models / f".minilm-{KEY[0][:32]}-fused-attn-v1.onnx.{dead_pid}.zz9_ab12.tmp"
        killed_file.write_bytes(b"half")
        running = models / f".{graph(cache).name}.{alive.pid}.efgh5678.tmp"
        running.mkdir()
        old_style = models / f".{graph(cache).name}.ijkl9012.tmp"  # no pid in the name: by age
        old_style.mkdir()
        hour_ago = time.time() - saved_graph.LEFTOVER_AFTER_S - 60
        os.utime(old_style, (hour_ago, hour_ago))
        embed(TEXTS[:1])
        assert saved_graph.find(*KEY, cache) is not None
        assert sorted(p.name for p in models.iterdir()) == sorted([graph(cache).name, running.name])
    finally:
        alive.kill()
        alive.wait()


def test_a_graph_being_saved_in_another_container_is_not_removed(tmp_path: Path) -> None:
    """A model cache shared by two containers: the staging folder of a graph being saved in one
    (40-90 MB, written by onnxruntime) was removed by the other, which cannot see the builder's
    pid and took it for a killed one's, and the graph was built for nothing."""
    import shutil

    if os.geteuid() != 0 or not shutil.which("unshare") or subprocess.run(
            ["unshare", "-pf", "--mount-proc", "true"], capture_output=True).returncode != 0:
        pytest.skip("needs root and unshare to make pid namespaces")
    folder = tmp_path / "cache"
    builder = subprocess.Popen(
        [sys.executable, "-c", "import sys; from pathlib import Path; from memdir.embeddings import saved_graph; "
         f"print(saved_graph.start_build(*{KEY!r}, Path(sys.argv[1])), flush=True); sys.stdin.readline()",
         str(folder)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert builder.stdout is not None
        staging = Path(builder.stdout.readline().strip())
        assert staging.is_dir()
        sweep = subprocess.run(["unshare", "-pf", "--mount-proc", sys.executable, "-c",
                                "import sys; from pathlib import Path; from memdir.embeddings import saved_graph; "
                                "saved_graph.remove_leftovers(Path(sys.argv[1]))", str(staging.parent)],
                               capture_output=True, text=True, timeout=60)
        assert sweep.returncode == 0, sweep.stderr
        assert staging.is_dir()
    finally:
        builder.communicate("", timeout=30)
    saved_graph.remove_leftovers(staging.parent)  # its builder gone (and its lock with it): removed
    assert not staging.exists()
