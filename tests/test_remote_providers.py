"""Remote embedding providers over real loopback HTTP: wire formats, keys, precedence, selection."""

from __future__ import annotations

import math
import sys
import types
from collections.abc import Iterator

import pytest

from memdir.embeddings.base import FTS_ONLY_PROVIDER_KEY, EmbeddingError, MissingApiKeyError, simple_provider_key
from memdir.embeddings.errors import OfflineError, ProviderUnavailableError
from memdir.embeddings.gemini import create_gemini_provider
from memdir.embeddings.mistral import create_mistral_provider
from memdir.embeddings.ollama import create_ollama_provider
from memdir.embeddings.openai import create_openai_provider
from memdir.embeddings.registry import (
    ProviderSelection,
    create_provider,
    fallback_for,
    select_provider,
)
from memdir.embeddings.remote import max_input_bytes_for
from memdir.embeddings.voyage import create_voyage_provider
from memdir.testing.provider_server import FakeTiming, ProviderServer, fake_vector, make_cfg, unit

EMPTY_ENV: dict[str, str] = {}


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer() as srv:
        yield srv


def approx(a: list[float], b: list[float]) -> bool:
    return len(a) == len(b) and all(
        math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-12) for x, y in zip(a, b, strict=True)
    )


# --- wire formats ------------------------------------------------------------------------------


def test_openai_query_request_shape_and_normalised_vector(server: ProviderServer) -> None:
    p = create_openai_provider(make_cfg("openai", f"{server.url}/v1"), EMPTY_ENV)
    vec = p.embed_query("hello world")
    [req] = server.requests
    assert (req.method, req.path) == ("POST", "/v1/embeddings")
    assert req.headers["authorization"] == "Bearer test-key"
    assert req.headers["content-type"] == "application/json"
    assert req.json == {"model": "text-embedding-3-small", "input": ["hello world"]}
    assert approx(vec, unit(fake_vector("hello world")))
    assert math.isclose(sum(x * x for x in vec), 1.0)
    assert p.dims == 8
    p.close()


def test_openai_batch_orders_by_index_and_sends_custom_headers(server: ProviderServer) -> None:
    cfg = make_cfg("openai", f"{server.url}/v1", headers={"X-Org": "acme"})
    p = create_openai_provider(cfg, EMPTY_ENV)
    texts = ["alpha", "beta", "gamma"]
    vecs = p.embed_batch(texts)
    [req] = server.requests  # server answered in reverse order
    assert req.headers["x-org"] == "acme"
    assert req.json["input"] == texts
    assert all(approx(v, unit(fake_vector(t))) for v, t in zip(vecs, texts, strict=True))


def test_gemini_query_and_documents_use_task_types_and_header_auth(server: ProviderServer) -> None:
    p = create_gemini_provider(make_cfg("gemini", f"{server.url}/v1beta"), EMPTY_ENV)
    q = p.embed_query("what is memdir")
    docs = p.embed_batch(["doc one", "doc two"])
    query_req, docs_req = server.requests
    assert query_req.path == "/v1beta/models/gemini-embedding-001:embedContent"
    assert query_req.headers["x-goog-api-key"] == "test-key"
    assert "authorization" not in query_req.headers
    assert query_req.query == {}  # the key never travels in the URL
    assert query_req.json["taskType"] == "RETRIEVAL_QUERY"
    assert query_req.json["content"] == {"parts": [{"text": "what is memdir"}]}
    assert docs_req.path == "/v1beta/models/gemini-embedding-001:batchEmbedContents"
    assert [r["taskType"] for r in docs_req.json["requests"]] == ["RETRIEVAL_DOCUMENT"] * 2
    assert {r["model"] for r in docs_req.json["requests"]} == {"models/gemini-embedding-001"}
    assert approx(q, unit(fake_vector("what is memdir")))
    assert approx(docs[1], unit(fake_vector("doc two")))


def test_gemini_splits_requests_at_100_items(server: ProviderServer) -> None:
    p = create_gemini_provider(make_cfg("gemini", f"{server.url}/v1beta"), EMPTY_ENV)
    vecs = p.embed_batch([f"t{i}" for i in range(150)])
    assert [len(r.json["requests"]) for r in server.requests] == [100, 50]
    assert len(vecs) == 150


def test_gemini_base_url_openai_suffix_is_cut(server: ProviderServer) -> None:
    p = create_gemini_provider(make_cfg("gemini", f"{server.url}/v1beta/openai/"), EMPTY_ENV)
    assert p.base_url == f"{server.url}/v1beta"
    p.embed_query("x")
    assert server.paths() == ["/v1beta/models/gemini-embedding-001:embedContent"]
    default = create_gemini_provider(make_cfg("gemini", None), EMPTY_ENV)
    assert default.base_url == "https://generativelanguage.googleapis.com/v1beta"


def test_voyage_sends_input_type(server: ProviderServer) -> None:
    p = create_voyage_provider(make_cfg("voyage", f"{server.url}/v1"), EMPTY_ENV)
    p.embed_query("q")
    p.embed_batch(["d1", "d2"])
    q, d = server.requests
    assert q.path == d.path == "/v1/embeddings"
    assert q.json == {"model": "voyage-4-large", "input": ["q"], "input_type": "query"}
    assert d.json == {"model": "voyage-4-large", "input": ["d1", "d2"], "input_type": "document"}
    assert q.headers["authorization"] == "Bearer test-key"


def test_mistral_request_shape(server: ProviderServer) -> None:
    p = create_mistral_provider(make_cfg("mistral", f"{server.url}/v1"), EMPTY_ENV)
    vec = p.embed_query("bonjour")
    [req] = server.requests
    assert req.path == "/v1/embeddings"
    assert req.json == {"model": "mistral-embed", "input": ["bonjour"]}
    assert req.headers["authorization"] == "Bearer test-key"
    assert approx(vec, unit(fake_vector("bonjour")))


def test_ollama_native_api_needs_no_key(server: ProviderServer) -> None:
    p = create_ollama_provider(make_cfg("ollama", f"{server.url}/v1", api_key=None), EMPTY_ENV)
    assert p.base_url == server.url  # /v1 (OpenAI-compat path) dropped for the native API
    vecs = p.embed_batch(["a", "b"])
    [req] = server.requests
    assert req.path == "/api/embed"
    assert req.json == {"model": "nomic-embed-text", "input": ["a", "b"]}
    assert "authorization" not in req.headers
    assert approx(vecs[0], unit(fake_vector("a")))


def test_ollama_host_env_forms(server: ProviderServer) -> None:
    cfg = make_cfg("ollama", None, api_key=None)
    p = create_ollama_provider(cfg, {"OLLAMA_HOST": f"127.0.0.1:{server.port}"})
    assert p.base_url == server.url
    p.embed_query("x")
    assert server.paths() == ["/api/embed"]
    assert create_ollama_provider(cfg, {"OLLAMA_HOST": "0.0.0.0"}).base_url == "http://127.0.0.1:11434"
    assert create_ollama_provider(cfg, EMPTY_ENV).base_url == "http://127.0.0.1:11434"


@pytest.mark.parametrize(
    ("provider", "raw", "expected"),
    [
        ("openai", "openai/text-embedding-3-large", "text-embedding-3-large"),
        ("gemini", "models/gemini-embedding-001", "gemini-embedding-001"),
        ("gemini", "google/text-embedding-004", "text-embedding-004"),
        ("gemini", "gemini/models/gemini-embedding-2-preview", "gemini-embedding-2-preview"),
        ("voyage", "voyage/voyage-3", "voyage-3"),
        ("mistral", "mistral/mistral-embed", "mistral-embed"),
        ("ollama", "ollama/mxbai-embed-large", "mxbai-embed-large"),
        ("openai", "", "text-embedding-3-small"),
        ("gemini", "  ", "gemini-embedding-001"),
    ],
)
def test_model_prefixes_are_stripped(provider: str, raw: str, expected: str) -> None:
    p = create_provider(provider, make_cfg(provider, None, model=raw), EMPTY_ENV)
    assert p.model == expected


def test_stripped_model_is_what_goes_on_the_wire(server: ProviderServer) -> None:
    p = create_openai_provider(
        make_cfg("openai", f"{server.url}/v1", model="openai/text-embedding-3-large"), {}
    )
    p.embed_query("x")
    assert server.requests[0].json["model"] == "text-embedding-3-large"


# --- provider keys and limits ----------------------------------------------------------------


def test_provider_keys_match_vector_17() -> None:
    assert FTS_ONLY_PROVIDER_KEY == "b2f409223dd1bd19cedee3332de54748a5f323765d4cdcbbb29295199cfde125"
    assert simple_provider_key("none", "fts-only") == FTS_ONLY_PROVIDER_KEY  # the constant is written out
    openai = create_openai_provider(make_cfg("openai", None), EMPTY_ENV)
    assert openai.provider_key == "c03eebd0dbf911b9e937d66411651b4976ddde97fb3a820da68c2176068e449d"
    voyage = create_voyage_provider(make_cfg("voyage", None), EMPTY_ENV)
    assert voyage.provider_key == "f76b05d4400af8e72c62ebb5b848b18ee4c12ac85b3a6a8c28f2ae03f1310aff"


def test_provider_key_ignores_credentials_but_not_endpoint() -> None:
    base = create_openai_provider(make_cfg("openai", None, api_key="k1"), EMPTY_ENV).provider_key
    other_key = create_openai_provider(make_cfg("openai", None, api_key="k2"), EMPTY_ENV).provider_key
    assert base == other_key
    with_auth_header = make_cfg("openai", None, headers={"Authorization": "Bearer x"})
    assert create_openai_provider(with_auth_header, EMPTY_ENV).provider_key == base
    with_header = make_cfg("openai", None, headers={"X-Org": "acme"})
    assert create_openai_provider(with_header, EMPTY_ENV).provider_key != base
    other_base = make_cfg("openai", "http://127.0.0.1:1/v1")
    assert create_openai_provider(other_base, EMPTY_ENV).provider_key != base
    g1 = create_gemini_provider(make_cfg("gemini", None, api_key="k1"), EMPTY_ENV).provider_key
    g2 = create_gemini_provider(make_cfg("gemini", None, api_key="k2"), EMPTY_ENV).provider_key
    assert g1 == g2 != base


def test_max_input_bytes_table() -> None:
    assert create_openai_provider(make_cfg("openai", None), EMPTY_ENV).max_input_bytes == 8000
    assert create_gemini_provider(make_cfg("gemini", None), EMPTY_ENV).max_input_bytes == 2048
    assert max_input_bytes_for("gemini", "gemini-embedding-2-preview") == 8000
    assert max_input_bytes_for("gemini", "some-new-model") == 2048
    assert max_input_bytes_for("gemini", "text-embedding-004") == 2048
    assert max_input_bytes_for("voyage", "voyage-3-lite") == 8000
    assert max_input_bytes_for("mistral", "mistral-embed") == 8000
    assert max_input_bytes_for("local", "anything") == 2048


# --- key and base URL precedence ----------------------------------------------------------------


def test_config_key_beats_env_and_blank_config_key_falls_back_to_env(server: ProviderServer) -> None:
    url = f"{server.url}/v1"
    create_openai_provider(
        make_cfg("openai", url, api_key="test-key"), {"OPENAI_API_KEY": "wrong"}
    ).embed_query("a")
    create_openai_provider(
        make_cfg("openai", url, api_key="   "), {"OPENAI_API_KEY": "test-key"}
    ).embed_query("b")
    create_openai_provider(make_cfg("openai", url, api_key=None), {"OPENAI_API_KEY": "test-key"}).embed_query(
        "c"
    )
    assert [r.headers["authorization"] for r in server.requests] == ["Bearer test-key"] * 3
    with pytest.raises(MissingApiKeyError, match='No API key found for provider "openai"'):
        create_openai_provider(make_cfg("openai", url, api_key=""), {"OPENAI_API_KEY": " "})


def test_gemini_key_env_order(server: ProviderServer) -> None:
    url = f"{server.url}/v1beta"
    cfg = make_cfg("gemini", url, api_key=None)
    create_gemini_provider(cfg, {"GOOGLE_API_KEY": "test-key"}).embed_query("a")
    create_gemini_provider(cfg, {"GEMINI_API_KEY": "test-key", "GOOGLE_API_KEY": "wrong"}).embed_query("b")
    assert [r.headers["x-goog-api-key"] for r in server.requests] == ["test-key", "test-key"]
    with pytest.raises(MissingApiKeyError, match='provider "gemini"'):
        create_gemini_provider(cfg, EMPTY_ENV)


@pytest.mark.parametrize(
    ("provider", "env_name"), [("voyage", "VOYAGE_API_KEY"), ("mistral", "MISTRAL_API_KEY")]
)
def test_missing_keys_name_the_env_variable(provider: str, env_name: str) -> None:
    with pytest.raises(MissingApiKeyError, match=env_name):
        create_provider(provider, make_cfg(provider, None, api_key=None), EMPTY_ENV)


def test_base_url_precedence(server: ProviderServer) -> None:
    env = {"OPENAI_BASE_URL": f"{server.url}/v1/"}
    assert create_openai_provider(make_cfg("openai", None), env).base_url == f"{server.url}/v1"
    assert create_openai_provider(make_cfg("openai", "  "), env).base_url == f"{server.url}/v1"
    assert (
        create_openai_provider(make_cfg("openai", "http://127.0.0.1:9/x"), env).base_url
        == "http://127.0.0.1:9/x"
    )
    assert create_openai_provider(make_cfg("openai", None), EMPTY_ENV).base_url == "https://api.openai.com/v1"
    create_openai_provider(make_cfg("openai", None), env).embed_query("via env")
    assert server.paths() == ["/v1/embeddings"]


def test_invalid_base_url_is_an_error_not_unavailability() -> None:
    cfg = make_cfg("openai", "ftp://example.com/v1")
    with pytest.raises(EmbeddingError, match="not an absolute http"):
        create_openai_provider(cfg, EMPTY_ENV)
    with pytest.raises(EmbeddingError, match="not an absolute http"):
        select_provider(cfg, EMPTY_ENV)


def test_api_key_not_in_repr() -> None:
    p = create_openai_provider(make_cfg("openai", None, api_key="sk-secret-value-123"), EMPTY_ENV)
    assert "sk-secret" not in repr(p)


# --- selection ----------------------------------------------------------------------------------


class StubLocal:
    id = "local"
    model = "stub-local"
    provider_key = "stub"
    max_input_bytes = 2048
    dims = 4

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]

    def close(self) -> None:
        pass


def install_local(monkeypatch: pytest.MonkeyPatch, behaviour: str) -> None:
    """Stand in for memdir.embeddings.local (built on another branch): absent, failing or working."""
    if behaviour == "absent":
        monkeypatch.setitem(sys.modules, "memdir.embeddings.local", None)  # import raises ImportError
        return
    module = types.ModuleType("memdir.embeddings.local")

    def create_local_provider(cfg: object) -> StubLocal:
        if behaviour == "failing":
            raise EmbeddingError("model file not found: /nowhere/model.onnx")
        return StubLocal()

    module.create_local_provider = create_local_provider  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "memdir.embeddings.local", module)


def test_auto_without_anything_is_keyword_only_with_reasons(monkeypatch: pytest.MonkeyPatch) -> None:
    install_local(monkeypatch, "absent")
    sel = select_provider(make_cfg("auto", None, api_key=None), EMPTY_ENV)
    assert sel.provider is None and sel.mode == "fts-only"
    reasons = sel.unavailable_reason.split("\n\n")
    assert reasons[0].startswith("local embeddings unavailable")
    assert [r.split('"')[1] for r in reasons[1:]] == ["openai", "gemini", "voyage", "mistral"]


def test_auto_order_prefers_local_then_openai_gemini_voyage_mistral(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_cfg("auto", None, api_key=None)
    install_local(monkeypatch, "working")
    assert select_provider(cfg, {"OPENAI_API_KEY": "k"}).provider.id == "local"
    install_local(monkeypatch, "failing")
    sel = select_provider(cfg, {"OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k"})
    assert sel.provider.id == "openai" and sel.unavailable_reason is None
    assert "model file not found" in sel.skipped[0]
    assert select_provider(cfg, {"GEMINI_API_KEY": "k", "VOYAGE_API_KEY": "k"}).provider.id == "gemini"
    sel = select_provider(cfg, {"VOYAGE_API_KEY": "k", "MISTRAL_API_KEY": "k"})
    assert sel.provider.id == "voyage" and len(sel.skipped) == 3
    assert select_provider(cfg, {"MISTRAL_API_KEY": "k"}).provider.id == "mistral"


def test_auto_never_picks_ollama(monkeypatch: pytest.MonkeyPatch) -> None:
    install_local(monkeypatch, "absent")
    sel = select_provider(make_cfg("auto", None, api_key=None), {"OLLAMA_HOST": "127.0.0.1:11434"})
    assert sel.provider is None


def test_auto_surfaces_real_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    install_local(monkeypatch, "absent")
    with pytest.raises(EmbeddingError, match="not an absolute http"):
        select_provider(
            make_cfg("auto", None, api_key=None), {"OPENAI_API_KEY": "k", "OPENAI_BASE_URL": "nope"}
        )


def test_explicit_provider_falls_back_with_record(server: ProviderServer) -> None:
    # remote.* describes the primary's endpoint; the fallback uses its own env and default model.
    cfg = make_cfg(
        "openai", f"{server.url}/v1", api_key=None, model="text-embedding-3-large", fallback="gemini"
    )
    sel = select_provider(cfg, {"GEMINI_API_KEY": "g"})
    assert sel.provider.id == "gemini"
    assert sel.fallback_from == "openai"
    assert 'No API key found for provider "openai"' in sel.fallback_reason
    assert sel.provider.model == "gemini-embedding-001"
    assert sel.provider.base_url == "https://generativelanguage.googleapis.com/v1beta"


def test_explicit_provider_and_fallback_both_missing_keys() -> None:
    sel = select_provider(make_cfg("voyage", None, api_key=None, fallback="mistral"), EMPTY_ENV)
    assert sel.provider is None
    assert sel.unavailable_reason.startswith('No API key found for provider "voyage"')
    assert '\n\nFallback to mistral failed: No API key found for provider "mistral"' in sel.unavailable_reason


def test_explicit_provider_without_fallback() -> None:
    sel = select_provider(make_cfg("openai", None, api_key=None), EMPTY_ENV)
    assert sel.provider is None and sel.fallback_from is None
    assert "OPENAI_API_KEY" in sel.unavailable_reason
    sel = select_provider(make_cfg("openai", None, api_key=None, fallback="openai"), EMPTY_ENV)
    assert sel.provider is None and sel.fallback_from is None


def test_disabled_and_unknown_providers() -> None:
    sel = select_provider(make_cfg("none", None), EMPTY_ENV)
    assert sel.provider is None and "disabled" in sel.unavailable_reason
    # The config refuses an unknown name up front (did-you-mean included) ...
    with pytest.raises(ValueError, match="unknown embedding provider 'cohere'"):
        make_cfg("cohere", None)
    # ... and the registry still refuses one that reached it unchecked.
    from memdir.config import MemorySearchConfig

    unchecked = MemorySearchConfig.model_construct(**{**make_cfg("none", None).__dict__, "provider": "cohere"})
    with pytest.raises(EmbeddingError, match="unknown embedding provider 'cohere'"):
        select_provider(unchecked, EMPTY_ENV)


def test_explicit_local_absent_is_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    install_local(monkeypatch, "absent")
    sel = select_provider(make_cfg("local", None), EMPTY_ENV)
    assert sel.provider is None and sel.unavailable_reason.startswith("local embeddings unavailable")


# --- offline ------------------------------------------------------------------------------------


def test_offline_refuses_network_providers(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OfflineError, match=r"memorySearch\.offline = true"):
        create_openai_provider(make_cfg("openai", None, offline=True), EMPTY_ENV)
    sel = select_provider(make_cfg("gemini", None, offline=True), EMPTY_ENV)
    assert sel.provider is None and "offline = true" in sel.unavailable_reason
    install_local(monkeypatch, "working")
    sel = select_provider(make_cfg("openai", None, offline=True, fallback="local"), EMPTY_ENV)
    assert sel.provider.id == "local" and sel.fallback_from == "openai"


def test_offline_auto_uses_only_local(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = {"OPENAI_API_KEY": "k", "GEMINI_API_KEY": "k", "VOYAGE_API_KEY": "k", "MISTRAL_API_KEY": "k"}
    install_local(monkeypatch, "absent")
    sel = select_provider(make_cfg("auto", None, api_key=None, offline=True), keys)
    assert sel.provider is None
    assert sum("offline = true" in r for r in sel.skipped) == 4
    install_local(monkeypatch, "working")
    assert select_provider(make_cfg("auto", None, api_key=None, offline=True), keys).provider.id == "local"


def test_offline_allows_a_server_on_this_machine(server: ProviderServer) -> None:
    p = create_ollama_provider(make_cfg("ollama", server.url, api_key=None, offline=True), EMPTY_ENV)
    p.embed_query("stays on this machine")
    assert server.paths() == ["/api/embed"]
    with pytest.raises(OfflineError):
        create_ollama_provider(make_cfg("ollama", "http://gpu-box.lan:11434", api_key=None, offline=True), {})
    assert issubclass(OfflineError, ProviderUnavailableError)


# --- runtime fallback ---------------------------------------------------------------------------


def test_runtime_fallback_rule(monkeypatch: pytest.MonkeyPatch) -> None:
    install_local(monkeypatch, "working")
    cfg = make_cfg("openai", None, fallback="local")
    sel = select_provider(cfg, EMPTY_ENV)
    assert sel.provider.id == "openai"
    new = fallback_for(sel, cfg, EmbeddingError("openai embeddings failed: 500 boom"), EMPTY_ENV)
    assert isinstance(new, ProviderSelection)
    assert new.provider.id == "local" and new.fallback_from == "openai"
    assert new.fallback_reason == "openai embeddings failed: 500 boom"
    assert fallback_for(sel, cfg, RuntimeError("openai batch job expired"), EMPTY_ENV) is not None
    # only errors about embedding, only once, only to a different provider
    assert fallback_for(sel, cfg, RuntimeError("disk full"), EMPTY_ENV) is None
    assert fallback_for(new, cfg, EmbeddingError("local embeddings failed"), EMPTY_ENV) is None
    assert fallback_for(sel, make_cfg("openai", None), EmbeddingError("embeddings failed"), EMPTY_ENV) is None
    same = make_cfg("openai", None, fallback="openai")
    assert fallback_for(sel, same, EmbeddingError("embeddings failed"), EMPTY_ENV) is None


def test_runtime_fallback_that_cannot_be_built_returns_none(monkeypatch: pytest.MonkeyPatch) -> None:
    cfg = make_cfg("openai", None, fallback="gemini")
    sel = select_provider(cfg, EMPTY_ENV)
    assert fallback_for(sel, cfg, EmbeddingError("openai embeddings failed: 500"), EMPTY_ENV) is None
    new = fallback_for(sel, cfg, EmbeddingError("openai embeddings failed: 500"), {"GEMINI_API_KEY": "g"})
    assert new is not None and new.provider.id == "gemini"


def test_fake_timing_helper_is_deterministic() -> None:
    ft = FakeTiming()
    t = ft.timing()
    t.sleep(1.5)
    assert ft.sleeps == [1.5] and t.clock() == 1001.5 and t.random() == 0.5


@pytest.mark.parametrize("name", ["openai", "gemini", "voyage", "mistral", "ollama"])
def test_every_remote_provider_satisfies_the_interface(name: str) -> None:
    from memdir.embeddings.base import EmbeddingProvider

    p = create_provider(name, make_cfg(name, None), EMPTY_ENV)
    assert isinstance(p, EmbeddingProvider)
    assert p.id == name and p.dims is None and p.max_input_bytes <= 8000
    assert len(p.provider_key) == 64
    p.close()
