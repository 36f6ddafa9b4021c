"""The embedding layer as a user meets it: custom ONNX models replaced or misconfigured, odd
``local.*`` values, the model cache after a killed process, providers switched between runs."""

from __future__ import annotations

import json
import os
import re
import shutil
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

from helpers import cli_env
from memdir.api import Memory

onnx = pytest.importorskip("onnx")
TOKENIZER = Path(__file__).resolve().parent.parent / "src" / "memdir" / "data" / "minilm" / "tokenizer.json"
NOTES = {"MEMORY.md": "# Notes\n\nCaroline adopted a dog named Biscuit in May.\n\n"
                      "The pottery class meets on Tuesdays.\n"}


def tiny_encoder(folder: Path, *, dims: int = 8, seed: int = 0, vocab: int = 30522) -> Path:
    """A real ONNX text encoder (an embedding lookup: ``input_ids`` → ``last_hidden_state``) with the
    bundled WordPiece tokenizer next to it; ``seed`` picks its weights, as a re-export would; a
    ``vocab`` under the tokenizer's 30522 makes a model that does not match its tokenizer."""
    from onnx import TensorProto, helper, numpy_helper

    folder.mkdir(parents=True, exist_ok=True)
    table = np.random.default_rng(seed).standard_normal((vocab, dims)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "input_ids"], ["last_hidden_state"])], "tiny",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["b", "s"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, ["b", "s", dims])],
        [numpy_helper.from_array(table, "table")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, str(folder / "model.onnx"))
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    return folder


def stored_vectors(mem: Memory) -> dict[str, np.ndarray]:
    with sqlite3.connect(mem.index_path) as conn:
        rows = conn.execute("SELECT text, embedding FROM chunks").fetchall()
    return {text: np.frombuffer(blob, dtype=np.float32) for text, blob in rows}


def test_a_model_re_exported_to_the_same_path_is_re_embedded_not_served_from_the_cache(
    tmp_path: Path, make_workspace: Callable[..., Path]
) -> None:
    """The index and the embedding cache are keyed by the model; a new export at the same path
    (same name, same width) used to keep the old export's vectors, even through ``index --force``,
    and searches compared them with the new model's query vectors."""
    ws = make_workspace(NOTES)
    folder = tiny_encoder(tmp_path / "encoder", seed=1)
    config = {"memorySearch": {"provider": "local", "local": {"modelPath": str(folder)}}}
    first = Memory(ws, state_dir=tmp_path / "state", config=config)
    assert first.sync().embedded > 0
    first.close()

    before = (folder / "model.onnx").stat().st_mtime_ns
    tiny_encoder(folder, seed=2)  # the user exports a retrained model over the old one (same size)
    os.utime(folder / "model.onnx", ns=(before + 10**9, before + 10**9))  # (a second later, on any file system)
    second = Memory(ws, state_dir=tmp_path / "state", config=config)
    found = second.search("dog", sync=False)  # not yet rebuilt: the old vectors must not be compared
    assert found.mode == "fts-only" or any("another version" in w for w in found.warnings), found
    status = second.status()
    assert status["mode"] == "fts-only" and any("another version" in issue for issue in status["issues"])
    report = second.sync()
    assert report.full and report.cache_hits == 0, report
    provider = second.selection.provider
    assert provider is not None
    for text, vector in stored_vectors(second).items():
        fresh = np.asarray(provider.embed_batch([text])[0], dtype=np.float32)
        assert float(vector @ fresh) == pytest.approx(1, abs=1e-5)
    assert second.status()["issues"] == [] and second.status()["mode"] == "hybrid"
    second.close()


@pytest.mark.parametrize("threads", [5000, 10**17])
def test_a_huge_threads_setting_runs_on_the_cpus_there_are(tmp_path: Path, threads: int) -> None:
    """``local.threads = 10**17`` failed every embedding with onnxruntime's multi-line argument
    error (search fell back to keywords); 5000 started 5000 threads."""
    from memdir.config import MemorySearchConfig
    from memdir.embeddings.local import create_local_provider

    folder = tiny_encoder(tmp_path / "encoder")
    cfg = MemorySearchConfig.model_validate(
        {"provider": "local", "local": {"modelPath": str(folder), "threads": threads}})
    provider = create_local_provider(cfg)
    assert len(provider.embed_query("a dog named Biscuit")) == 8
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    assert provider._backend.run.threads == cpus
    assert provider._backend._session.get_session_options().intra_op_num_threads == cpus


def test_a_relative_model_path_is_found_beside_the_config_file_from_any_folder(
    tmp_path: Path, make_workspace: Callable[..., Path], run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """``modelPath = "./models/enc"`` in the workspace's memdir.toml was looked up from the current
    folder: an index built from the workspace, then a search from elsewhere (as an MCP client
    starts the server) found no model and answered with keywords only."""
    ws = make_workspace(NOTES)
    tiny_encoder(ws / "models" / "enc")
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "local"\n'
                                    '[memorySearch.local]\nmodelPath = "./models/enc"\nmodelCacheDir = "hf"\n')
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    found = json.loads(run_cli("-w", str(ws), "search", "--json", "dog", cwd=elsewhere, check=True).stdout)
    assert found["mode"] == "hybrid" and found["model"] == str(ws / "models" / "enc"), found
    from memdir.config import load_config

    local = load_config(workspace=ws).settings.memory_search.local
    assert local.model_cache_dir == str(ws / "hf")
    (ws / "memdir.toml").write_text('[memorySearch.local]\nmodelPath = "sentence-transformers/all-MiniLM-L6-v2"\n')
    assert load_config(workspace=ws).settings.memory_search.local.model_path == "sentence-transformers/all-MiniLM-L6-v2"


def test_status_says_which_chunks_have_no_vector(tmp_path: Path, make_workspace: Callable[..., Path]) -> None:
    """A model that could not run at indexing time (here a damaged tokenizer.json; no onnxruntime,
    an outage) leaves chunks for keywords only, and searches do not retry them: status said
    "Mode: hybrid" with no word of it ("Dirty: no", no issue)."""
    ws = make_workspace(NOTES)
    folder = tiny_encoder(tmp_path / "encoder")
    (folder / "tokenizer.json").write_text("{ not json")
    config = {"memorySearch": {"provider": "local", "local": {"modelPath": str(folder)}}}
    with Memory(ws, state_dir=tmp_path / "state", config=config) as mem:
        report = mem.sync()
        assert report.chunks == 2 and report.embedded == 0, report
        status = mem.status()
        assert status["mode"] == "hybrid" and status["vector"]["vectors"] == 0
        assert [i for i in status["issues"] if i.startswith("2 of 2 chunks have no vector")], status["issues"]
    shutil.copy(TOKENIZER, folder / "tokenizer.json")
    with Memory(ws, state_dir=tmp_path / "state", config=config) as mem:
        mem.sync()
        assert mem.status()["issues"] == []


def test_an_index_built_for_keywords_only_is_said_to_hold_no_vectors(
        tmp_path: Path, make_workspace: Callable[..., Path]) -> None:
    """Built with provider none, then searched with a model: status and every search said "the
    index holds none/fts-only vectors", as if it held vectors of a model named so."""
    ws = make_workspace(NOTES)
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "none"}}) as mem:
        mem.sync()
    config = {"memorySearch": {"provider": "local", "local": {"modelPath": str(tiny_encoder(tmp_path / "enc"))}}}
    with Memory(ws, state_dir=tmp_path / "state", config=config) as mem:
        issues = mem.status()["issues"]
        warnings = mem.search("pottery class").warnings
    for said in (issues, warnings):
        assert [i for i in said if i.startswith("the index holds no vectors, not local/")
                and "built for keywords only" in i], said
        assert not [i for i in said if "none/fts-only" in i], said


def test_status_says_an_index_with_vectors_is_rebuilt_without_them_when_embeddings_are_off(
        tmp_path: Path, make_workspace: Callable[..., Path]) -> None:
    """Built with a model, then run with provider none: status said "Dirty: no" and nothing
    else, and the next index run rebuilt it, every vector dropped."""
    ws = make_workspace(NOTES)
    config = {"memorySearch": {"provider": "local", "local": {"modelPath": str(tiny_encoder(tmp_path / "enc"))}}}
    with Memory(ws, state_dir=tmp_path / "state", config=config) as mem:
        mem.sync()
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "none"}}) as mem:
        st = mem.status()
        assert st["vector"]["vectors"] == 2 and st["mode"] == "fts-only"
        said = [i for i in st["issues"] if i.startswith("the index holds local/")]
        assert said and "embeddings are off here (provider none)" in said[0]
        assert "rebuilds it without vectors" in said[0]
        report = mem.sync()
        assert report.full and "provider changed" in report.reason  # (what status warned of)
        assert mem.status()["issues"] == []


def test_an_openai_compatible_server_answering_in_base64_is_understood() -> None:
    """Some OpenAI-compatible gateways send ``encoding_format: "base64"`` vectors (float32,
    little-endian) although floats were asked for: every embedding failed ("not a non-empty list
    of numbers").  A string that is not such a vector, or holds NaN, is still refused."""
    import base64

    from memdir.embeddings.errors import RemoteEmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import ProviderServer, Reply, make_cfg, unit

    def encoded(*values: float) -> str:
        return base64.b64encode(np.asarray(values, dtype="<f4").tobytes()).decode()

    with ProviderServer() as server:
        provider = create_provider("openai", make_cfg("openai", server.url))
        server.script("/embeddings", Reply(200, {"object": "list", "data": [
            {"object": "embedding", "index": 1, "embedding": encoded(0, 3, 4)},
            {"object": "embedding", "index": 0, "embedding": encoded(1, 2, 2)}]}))
        assert np.allclose(provider.embed_batch(["a", "b"]), [unit([1, 2, 2]), unit([0, 3, 4])])
        for junk in ("not base64!", base64.b64encode(b"12345").decode(), encoded(1, float("nan"), 2)):
            server.script("/embeddings", Reply(200, {"data": [{"index": 0, "embedding": junk}]}))
            with pytest.raises(RemoteEmbeddingError, match=r"base64|non-finite"):
                provider.embed_batch([f"c {junk}"])


def test_a_query_with_a_lone_surrogate_is_still_embedded(tmp_path: Path, make_workspace: Callable[..., Path]) -> None:
    """JSON may carry ``"\\ud800"`` (an MCP client's query, a transcript line); the tokenizer refused
    such a str with a TypeError, so the query's vector failed and the search fell back to keywords."""
    ws = make_workspace(NOTES)
    with Memory(ws, state_dir=tmp_path / "state", config={"memorySearch": {"provider": "local"}}) as mem:
        mem.sync()
        found = mem.search("puppy \ud800 adopted", mode="vector")
        assert found.mode == "vector" and not found.fallback, found
        assert found.results and found.results[0].path == "MEMORY.md"
        provider = mem.selection.provider
        assert provider.embed_query("dog \udcff walks") == provider.embed_query("dog ? walks")
        assert provider.count_tokens(["dog \ud800 walks"]) == provider.count_tokens(["dog ? walks"])


@pytest.mark.parametrize("name", ["openai", "gemini", "voyage", "mistral", "ollama"])
def test_remote_providers_send_a_lone_surrogate_as_utf8(name: str) -> None:
    """The request body is UTF-8: a lone surrogate raised UnicodeEncodeError before anything was sent,
    failing the query's vector or every text of its batch."""
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import ProviderServer, make_cfg

    with ProviderServer() as server:
        provider = create_provider(name, make_cfg(name, server.url))
        assert provider.embed_query("dog \ud800 walks") == provider.embed_query("dog ? walks")
        assert len(provider.embed_batch(["x \udcff y", "fine"])) == 2
        assert "x ? y" in server.requests[-1].text


def test_an_ollama_older_than_0_3_is_asked_through_its_old_api() -> None:
    """Before 0.3.0 Ollama had only ``/api/embeddings`` (one ``prompt``, one ``embedding``):
    every request failed with "404 404 page not found".  A model not pulled (Ollama's own 404)
    is still an error, not a reason to switch."""
    from memdir.embeddings.errors import RemoteEmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import ProviderServer, Reply, fake_vector, make_cfg, unit

    with ProviderServer() as server:
        server.ollama_legacy = True
        provider = create_provider("ollama", make_cfg("ollama", server.url, api_key=None))
        assert np.allclose(provider.embed_batch(["a", "b"]), [unit(fake_vector("a")), unit(fake_vector("b"))])
        assert np.allclose(provider.embed_query("q"), unit(fake_vector("q")))
        assert server.paths() == ["/api/embed", "/api/embeddings", "/api/embeddings", "/api/embeddings"]
        assert [r.json for r in server.requests[1:3]] == [{"model": "nomic-embed-text", "prompt": t} for t in "ab"]

        server.ollama_legacy = False
        fresh = create_provider("ollama", make_cfg("ollama", server.url, api_key=None))
        server.script("/api/embed", Reply(404, {"error": 'model "nomic-embed-text" not found, try pulling it first'}))
        with pytest.raises(RemoteEmbeddingError, match="try pulling it first"):
            fresh.embed_query("z")
        assert not fresh.legacy_api


def test_a_query_is_embedded_between_the_runs_of_a_long_document_call(tmp_path: Path) -> None:
    """The provider held one lock for a whole call: in a long-lived process (the MCP server and its
    watcher) a search waited until an index run had embedded an entire file (64 s behind 600
    chunks of the default model).  Now the query takes the model between two runs."""
    import threading

    from memdir.embeddings.local import LocalEmbeddingProvider

    provider = LocalEmbeddingProvider(str(tiny_encoder(tmp_path / "encoder")), batch_size=1)
    texts = [f"note {i} about the dog named Biscuit" for i in range(6)]
    alone = provider.embed_batch(texts)
    asked: list[list[float]] = []
    answered = threading.Event()

    def ask() -> None:
        asked.append(provider.embed_query("where is Biscuit"))
        answered.set()

    runs: list[bool] = []

    def progress(label: str, done: int, total: int) -> None:
        if not runs:
            threading.Thread(target=ask, daemon=True).start()
            answered.wait(10)  # the document call's next run must not start before the query's
        runs.append(answered.is_set())

    assert provider.embed_batch(texts, progress=progress) == alone  # the same runs, the same vectors
    assert runs == [True] * len(texts)
    assert asked == [provider.embed_batch(["where is Biscuit"])[0]]


def test_an_onnxruntime_that_refuses_this_cpu_is_one_clear_line_and_the_fallback_takes_over(
    tmp_path: Path, make_workspace: Callable[..., Path], run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """An onnxruntime that cannot run here raised a bare RuntimeError from its import: the line
    named neither memdir's model nor a fix (and a message of two lines was printed as two), and as
    it did not mention embeddings the configured ``fallback`` never took over (keywords only)."""
    from memdir.testing.provider_server import ProviderServer

    ws = make_workspace(NOTES)
    shadow = tmp_path / "shadow" / "onnxruntime"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text('raise RuntimeError("this CPU lacks the AVX instructions\\nthis build needs")')
    env = {"PYTHONPATH": f"{shadow.parent}{os.pathsep}{cli_env(tmp_path)['PYTHONPATH']}"}
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "local"\n')
    keywords = run_cli("-w", str(ws), "index", env=env, check=True)
    [line] = [ln for ln in keywords.stderr.splitlines() if ln.strip()]
    assert "local embeddings" in line and "onnxruntime" in line and "pip install onnxruntime" in line, line
    found = json.loads(run_cli("-w", str(ws), "search", "--json", "Biscuit", env=env, check=True).stdout)
    assert found["results"] and found["mode"] == "fts-only"
    searched = run_cli("-w", str(ws), "search", "Biscuit", env=env, check=True)
    assert len([ln for ln in searched.stderr.splitlines() if ln.strip()]) == 1, searched.stderr  # (messages
    # spanning lines, as onnxruntime's and the Hugging Face hub's do, were printed as they came)
    deep = run_cli("-w", str(ws), "status", "--deep", env=env, check=True).stdout
    [probe] = [ln for ln in deep.splitlines() if ln.startswith("Embeddings: unavailable")]
    assert probe.endswith("this build needs). Install it with: pip install onnxruntime tokenizers)"), probe

    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "local"\nfallback = "openai"\n')
    with ProviderServer() as server:
        env |= {"OPENAI_API_KEY": server.api_key, "OPENAI_BASE_URL": server.url}
        run_cli("-w", str(ws), "index", env=env, check=True)
        status = json.loads(run_cli("-w", str(ws), "status", "--json", env=env, check=True).stdout)
    assert status["indexedWith"]["provider"] == "openai" and status["vector"]["vectors"] == status["chunks"] == 2


@pytest.mark.parametrize("hf_weights", [False, True])
def test_a_folder_of_several_onnx_exports_says_to_pick_one(tmp_path: Path, hf_weights: bool) -> None:
    """A Hugging Face repo's ``onnx/`` folder often holds model_quantized.onnx, model_fp16.onnx...
    and no model.onnx: the error said "no tokenizer.json" (it was there) or, beside config.json and
    weights, to install torch."""
    from memdir.embeddings.base import EmbeddingError
    from memdir.embeddings.local import LocalEmbeddingProvider

    folder = tiny_encoder(tmp_path / "repo")
    (folder / "onnx").mkdir()
    (folder / "model.onnx").rename(folder / "onnx" / "model_quantized.onnx")
    shutil.copy(folder / "onnx" / "model_quantized.onnx", folder / "onnx" / "model_fp16.onnx")
    if hf_weights:
        (folder / "config.json").write_text("{}")
        (folder / "model.safetensors").write_bytes(b"")
    with pytest.raises(EmbeddingError, match="several ONNX models") as failed:
        LocalEmbeddingProvider(str(folder))
    assert "onnx/model_fp16.onnx, onnx/model_quantized.onnx" in str(failed.value)
    assert len(LocalEmbeddingProvider(str(folder / "onnx" / "model_fp16.onnx")).embed_query("dog")) == 8


def test_a_404_names_the_url_asked_for_without_credentials() -> None:
    """A base URL given with the endpoint's path (``…/v1/embeddings``) is asked for
    ``…/v1/embeddings/embeddings``: the 404 said "404 page not found" and nothing of where."""
    from memdir.embeddings.errors import RemoteEmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import ProviderServer, Reply, make_cfg

    with ProviderServer() as server:
        server.script("/embeddings", Reply(404, "404 page not found", {"Content-Type": "text/plain"}))
        url = server.url.replace("http://", "http://someone:pa55word@") + "/v1/embeddings"
        provider = create_provider("openai", make_cfg("openai", url))
        with pytest.raises(RemoteEmbeddingError) as failed:
            provider.embed_query("where is Biscuit")
    message = str(failed.value)
    assert f"(POST {server.url}/v1/embeddings/embeddings)" in message and "pa55word" not in message, message


@pytest.mark.parametrize(("url", "why"), [
    ("http://localhost:abc/v1", "is not a valid URL"),
    ("http://localhost:99999/v1", "is not a valid URL"),
    ("http://[::1/v1", "is not a valid URL"),
    ("http://local host/v1", "has a space in its host"),
    ("https://example.com/v1?api-version=2024-02-01", "has a query or fragment"),
])
def test_a_base_url_that_cannot_work_is_refused_when_the_provider_is_made(url: str, why: str) -> None:
    """A bad port or bracket raised a bare ValueError (``memdir index`` failed with "Invalid IPv6
    URL") or httpx.InvalidURL at every request (every chunk keywords-only, "Invalid port: 'abc'");
    a space in the host was retried four times as a DNS failure; a query swallowed the
    ``/embeddings`` appended to it."""
    from memdir.embeddings.base import EmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import make_cfg

    for name in ("openai", "ollama"):
        with pytest.raises(EmbeddingError, match=f"{name} embeddings: base URL .* {re.escape(why)}"):
            create_provider(name, make_cfg(name, url))


def test_a_bad_base_url_is_one_line_on_the_cli(
    make_workspace: Callable[..., Path], run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    ws = make_workspace(NOTES)
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "openai"\n'
                                    '[memorySearch.remote]\nbaseUrl = "http://[::1/v1"\napiKey = "k"\n')
    failed = run_cli("-w", str(ws), "search", "--json", "dog")
    assert failed.returncode == 1
    error = json.loads(failed.stdout)["error"]
    assert error["message"].startswith("openai embeddings: base URL 'http://[::1/v1' is not a valid URL"), error


@pytest.mark.parametrize(("key", "headers", "why"), [
    ("sk-abc\ndef", {}, "the API key holds a line break"),
    ("sk-abc\x00def", {}, "the API key holds a line break"),
    ("sk-abc…", {}, "the API key holds a line break"),
    ("sk-abc", {"X-Org": "a\nb"}, "the value of 'X-Org' holds a line break"),
    ("sk-abc", {"X-Org": "café"}, "the value of 'X-Org' holds a line break"),
    ("sk-abc", {"Bad Name": "x"}, "'Bad Name' is not an HTTP header name"),
])
def test_a_key_or_header_http_cannot_carry_is_refused_without_showing_it(
    key: str, headers: dict[str, str], why: str
) -> None:
    """A key pasted with a line break failed every request as a "connection error", retried four
    times, with the key in the message; a non-ASCII one raised a bare UnicodeEncodeError."""
    from memdir.embeddings.base import EmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import make_cfg

    for name in ("openai", "gemini"):
        with pytest.raises(EmbeddingError, match=re.escape(why)) as failed:
            create_provider(name, make_cfg(name, "http://127.0.0.1:9", api_key=key, headers=headers))
        assert "abc" not in str(failed.value)


@pytest.mark.parametrize("pointer", ["model.onnx", "tokenizer.json"])
def test_a_git_lfs_pointer_in_place_of_the_model_says_so(tmp_path: Path, pointer: str) -> None:
    """A model repository cloned without git-lfs holds small pointer files in place of the weights:
    the error only said "Protobuf parsing failed" (or a JSON error for the tokenizer)."""
    from memdir.embeddings.base import EmbeddingError
    from memdir.embeddings.local import LocalEmbeddingProvider

    folder = tiny_encoder(tmp_path / "clone")
    (folder / pointer).write_text("version https://git-lfs.github.com/spec/v1\n"
                                  "oid sha256:4c2d0a8b7e3f09f1d2c3b4a5968778695a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d\n"
                                  "size 90405214\n")
    with pytest.raises(EmbeddingError, match=f"{pointer} \\(it is a Git LFS pointer.*git lfs pull"):
        LocalEmbeddingProvider(str(folder)).embed_query("dog")


def test_a_model_that_fails_to_run_is_told_once(
    tmp_path: Path, make_workspace: Callable[..., Path], run_cli: Callable[..., subprocess.CompletedProcess[str]]
) -> None:
    """A model whose tokenizer is not its own (token ids beyond its vocabulary) fails every run:
    besides memdir's warning, onnxruntime printed its own coloured log line of the error."""
    ws = make_workspace(NOTES)
    folder = tiny_encoder(tmp_path / "encoder", vocab=1000)
    (ws / "memdir.toml").write_text(f'[memorySearch]\nprovider = "local"\n'
                                    f'[memorySearch.local]\nmodelPath = "{folder}"\n')
    indexed = run_cli("-w", str(ws), "index", check=True)
    [line] = [ln for ln in indexed.stderr.splitlines() if ln.strip()]
    assert line.startswith("warning: embedding failed, 2 chunks indexed for keywords only: local embeddings: "
                           f"the ONNX model {folder / 'model.onnx'} failed to run"), line


def test_without_onnxruntime_a_search_says_why_on_one_line_and_finds_by_keywords(
    tmp_path: Path, make_workspace: Callable[..., Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """``auto`` gives a reason per provider: a search printed them as nine lines of notes (blank
    lines between), the first saying "local embeddings unavailable: local embeddings: ..."."""
    import importlib.util

    find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.partition(".")[0] == "onnxruntime" else find_spec(name, *a))
    with Memory(make_workspace(NOTES), state_dir=tmp_path / "state", config={}) as mem:
        found = mem.search("Biscuit")
    assert found.mode == "fts-only" and found.results
    [warning] = found.warnings
    assert warning.startswith("local embeddings unavailable: the embedded default model needs the Python package "
                              "'onnxruntime'. Install it with: pip install onnxruntime; No API key found"), warning
    assert "\n" not in warning


def test_a_server_answering_a_vector_per_token_is_told_to_pool_them() -> None:
    """llama.cpp's server without pooling answers ``"embedding": [[...], [...]]`` (a vector per
    token): the error only said the embedding was "not a non-empty list of numbers"."""
    from memdir.embeddings.errors import RemoteEmbeddingError
    from memdir.embeddings.registry import create_provider
    from memdir.testing.provider_server import ProviderServer, Reply, make_cfg

    with ProviderServer() as server:
        provider = create_provider("openai", make_cfg("openai", server.url))
        server.script("/embeddings", Reply(200, {"data": [{"index": 0, "embedding": [[0.1, 0.2], [0.3, 0.4]]}]}))
        with pytest.raises(RemoteEmbeddingError, match=r"a vector per token.*--pooling mean"):
            provider.embed_query("dog")


@pytest.mark.parametrize("shape", [(1, 16), (2, 16), (1, None)])
def test_an_export_with_fixed_shapes_runs(tmp_path: Path, shape: tuple[int, int | None]) -> None:
    """An export without dynamic axes takes only its dummy input's shape ([1, 128] say): every run
    of another batch or length failed ("Got invalid dimensions for input: input_ids"), so every
    chunk was indexed for keywords only."""
    from onnx import TensorProto, helper

    from memdir.embeddings.local import LocalEmbeddingProvider

    folder = tiny_encoder(tmp_path / "dynamic")
    dynamic = LocalEmbeddingProvider(str(folder))
    model = onnx.load(str(folder / "model.onnx"))
    fixed = [d if d is not None else "s" for d in shape]
    del model.graph.input[:], model.graph.output[:]
    model.graph.input.append(helper.make_tensor_value_info("input_ids", TensorProto.INT64, fixed))
    model.graph.output.append(helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [*fixed, 8]))
    static = tmp_path / "static"
    static.mkdir()
    onnx.save(model, str(static / "model.onnx"))
    shutil.copy(folder / "tokenizer.json", static)
    provider = LocalEmbeddingProvider(str(static))
    texts = ["dog", "the pottery class meets on Tuesdays with friends", "cat"]
    got = provider.embed_batch(texts)
    assert np.allclose(got, dynamic.embed_batch(texts), atol=1e-6)  # texts within 16 tokens: the same vectors
    assert np.allclose(provider.embed_query("dog"), got[0], atol=1e-6)
    if shape[1] is not None:
        assert provider.max_tokens == 16
        assert len(provider.embed_batch(["word " * 100])[0]) == 8  # cut to the export's length


@pytest.mark.parametrize(("host", "url"), [
    ("ollama.lan", "http://ollama.lan:11434"),
    ("0.0.0.0", "http://127.0.0.1:11434"),
    ("https://ollama.example.com", "https://ollama.example.com"),
    ("http://ollama.lan/", "http://ollama.lan"),
    ("ollama.lan:8080", "http://ollama.lan:8080"),
])
def test_ollama_host_is_read_as_ollama_reads_it(host: str, url: str) -> None:
    """Ollama's own client takes OLLAMA_HOST "https://host" as port 443 (a TLS proxy in front of
    it) and "http://host" as 80; only a bare host means its port 11434.  Every form without a port
    was sent to 11434, so an Ollama behind a proxy could not be reached."""
    from memdir.embeddings.ollama import create_ollama_provider
    from memdir.testing.provider_server import make_cfg

    assert create_ollama_provider(make_cfg("ollama", None, api_key=None), {"OLLAMA_HOST": host}).base_url == url
