"""``${VAR}`` in ``memorySearch.remote.apiKey`` and ``remote.headers``: the variable's value is sent,
as for ``longTermMemory.embedding.apiKey``, never the reference text."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from memdir.embeddings.base import MissingApiKeyError
from memdir.embeddings.registry import create_provider
from memdir.testing.provider_server import ProviderServer, make_cfg


@pytest.fixture
def server() -> Iterator[ProviderServer]:
    with ProviderServer(api_key="sk-from-env") as srv:
        yield srv


def test_an_api_key_reference_sends_the_variables_value(server: ProviderServer) -> None:
    cfg = make_cfg("openai", f"{server.url}/v1", api_key="${TEAM_EMBED_KEY}",
                   headers={"X-Team": "${TEAM_NAME}", "X-Plain": "as-is"})
    p = create_provider("openai", cfg, {"TEAM_EMBED_KEY": "sk-from-env", "TEAM_NAME": "ops"})
    p.embed_query("hello")
    [req] = server.requests
    assert req.headers["authorization"] == "Bearer sk-from-env"
    assert (req.headers["x-team"], req.headers["x-plain"]) == ("ops", "as-is")
    p.close()


@pytest.mark.parametrize("env", [{}, {"TEAM_EMBED_KEY": "  "}])
def test_an_unset_reference_is_a_missing_key_naming_the_variable(env: dict[str, str]) -> None:
    """A missing key (``auto`` passes the provider over, searches use keywords and say why), not
    ``${TEAM_EMBED_KEY}`` sent as the key and refused by the server as invalid."""
    cfg = make_cfg("openai", "http://127.0.0.1:9/v1", api_key="${TEAM_EMBED_KEY}")
    with pytest.raises(MissingApiKeyError, match=r"remote\.apiKey.*TEAM_EMBED_KEY is not set"):
        create_provider("openai", cfg, env)


def test_the_cli_indexes_with_a_key_given_by_reference_in_the_config_file(server: ProviderServer, make_workspace,
                                                                         run_cli) -> None:
    ws = make_workspace({"MEMORY.md": "The staging cluster runs in Frankfurt."})
    (ws / "memdir.toml").write_text(
        '[memorySearch]\nprovider = "openai"\n'
        f'[memorySearch.remote]\nbaseUrl = "{server.url}/v1"\napiKey = "${{TEAM_EMBED_KEY}}"\n')
    proc = run_cli("index", "-w", str(ws), "--json", env={"TEAM_EMBED_KEY": "sk-from-env"}, check=True)
    report = json.loads(proc.stdout)
    assert report.get("mode") != "fts-only" and not report.get("warnings"), report
    assert server.requests and {r.headers["authorization"] for r in server.requests} == {"Bearer sk-from-env"}
    shown = json.loads(run_cli("config", "show", "--json", "-w", str(ws), check=True).stdout)
    assert "${TEAM_EMBED_KEY}" in json.dumps(shown)  # the reference, which is no secret, is what config show says
