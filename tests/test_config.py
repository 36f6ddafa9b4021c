"""Configuration: R§17 vectors 27-32, file formats, key styles, strictness, origins."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from memdir.config import ConfigError, candidate_count, load_config, mask_dsn_password, parse_byte_size


def ms(**kw):
    return load_config(overrides={"memorySearch": kw}).settings.memory_search


def test_builtin_defaults_are_openclaws():
    """R§1's builtin defaults, leaf by leaf, so a drift from OpenClaw shows up here."""
    s = load_config(env={}).settings
    m = s.memory_search
    q, h, sync, batch = m.query, m.query.hybrid, m.sync, m.remote.batch
    assert (m.enabled, m.provider, m.model, m.fallback, m.sources, m.extra_paths) == (True, "auto", "", "none",
                                                                                       ["memory"], [])
    assert (batch.enabled, batch.wait, batch.concurrency, batch.poll_interval_ms, batch.timeout_minutes) == (
        False, True, 2, 2000, 60)
    assert (m.experimental.session_memory, m.store.driver, m.store.vector.enabled) == (False, "sqlite", True)
    assert (sync.on_session_start, sync.on_search, sync.watch, sync.watch_debounce_ms, sync.interval_minutes) == (
        True, True, True, 1500, 0)
    assert (sync.sessions.delta_bytes, sync.sessions.delta_messages, sync.sessions.post_compaction_force) == (
        100_000, 50, True)
    assert (q.max_results, q.min_score, q.candidates, h.enabled, h.candidate_multiplier) == (6, 0.35, 24, True, 4)
    assert (h.mmr.enabled, h.mmr.lambda_, h.temporal_decay.enabled, h.temporal_decay.half_life_days) == (
        False, 0.7, False, 30)
    assert (m.cache.enabled, m.cache.max_entries) == (True, None)
    assert (s.memory.citations, s.compaction.reserve_tokens_floor) == ("auto", 20_000)
    flush = s.compaction.memory_flush
    assert (flush.enabled, flush.soft_threshold_tokens, s.context_tokens) == (True, 4000, 200_000)
    assert (s.hooks.session_memory.enabled, s.hooks.session_memory.messages) == (True, 15)
    # Deliberate deviations: weights per embedding model (SPEC §5; None: measured for the model, 0.7/0.3
    # for others) and chunks of 200/40 tokens widened to 1600 characters (SPEC §4 says 400/80; chosen by
    # cross-validation, docs/benchmarks.md).
    assert (h.vector_weight, h.text_weight) == (None, None)
    assert (m.chunking.tokens, m.chunking.overlap) == (200, 40)


@pytest.mark.parametrize(
    "vw,tw,expected",
    [(0.5, 0.5, (0.5, 0.5)), (1, 1, (0.5, 0.5)), (0, 0, (0.7, 0.3)), (0.9, 0.3, (0.75, 0.25)),
     (2.0, 0.5, (2 / 3, 1 / 3))],
)
def test_v27_weights_clamped_and_normalised(vw, tw, expected):
    h = ms(query={"hybrid": {"vectorWeight": vw, "textWeight": tw}}).query.hybrid
    assert h.vector_weight == pytest.approx(expected[0], abs=1e-4)
    assert h.text_weight == pytest.approx(expected[1], abs=1e-4)


def test_v28_candidate_pool():
    assert ms().query.candidates == 24
    assert ms(query={"maxResults": 100}).query.candidates == 200
    assert ms(query={"hybrid": {"candidateMultiplier": 50}}).query.hybrid.candidate_multiplier == 20
    assert ms(query={"hybrid": {"candidateMultiplier": 0.5}}).query.hybrid.candidate_multiplier == 1
    assert candidate_count(0, 4) == 1  # R§17 #28; maxResults = 0 itself is now refused (below)


def test_v29_clamps():
    assert ms(chunking={"tokens": 400, "overlap": 500}).chunking.overlap == 399
    assert ms(chunking={"tokens": 1}).chunking.overlap == 0  # tokens = 0 is refused (as zod would)
    assert ms(query={"minScore": 1.7}).query.min_score == 1
    decay = ms(query={"hybrid": {"temporalDecay": {"halfLifeDays": 7.9}}}).query.hybrid.temporal_decay
    assert decay.half_life_days == 7
    assert ms(cache={"maxEntries": 0.5}).cache.max_entries == 1


def test_v30_sources_gated_by_session_memory_flag():
    assert ms(sources=["memory", "sessions"]).sources == ["memory"]
    assert ms(sources=["sessions"]).sources == ["memory"]
    assert ms(sources=["sessions"], experimental={"sessionMemory": True}).sources == ["sessions"]


def test_v32_store_path_token_and_default(tmp_path: Path):
    s = load_config(agent_id="ops", overrides={"memorySearch": {"store": {"path": "~/idx/{agentId}.db"}}}).settings
    assert s.index_path == Path.home() / "idx" / "ops.db"
    s = load_config(agent_id="ops", state_dir=tmp_path).settings
    assert s.index_path == tmp_path.resolve() / "memory" / "ops.sqlite"


def test_extra_paths_trimmed_deduped_and_tilde_expanded(tmp_path: Path):
    s = load_config(workspace=tmp_path, overrides={"memorySearch": {"extraPaths": [" notes ", "", "notes", "~/x"]}})
    assert s.settings.memory_search.extra_paths == ["notes", "~/x"]
    assert s.settings.extra_paths == [tmp_path.resolve() / "notes", Path.home() / "x"]


@pytest.mark.parametrize("name,text", [
    ("memdir.toml", '[memorySearch.query]\nmaxResults = 9\n[memory]\ncitations = "off"\n'),
    ("memdir.json", json.dumps({"memory_search": {"query": {"max_results": 9}}, "memory": {"citations": "off"}})),
    ("memdir.json5", "{memorySearch: {query: {maxResults: 9,},}, // comment\n memory: {citations: 'off'}}"),
])
def test_config_file_formats_and_key_styles(tmp_path: Path, name: str, text: str):
    (tmp_path / name).write_text(text)
    loaded = load_config(workspace=tmp_path)
    assert loaded.settings.memory_search.query.max_results == 9
    assert loaded.settings.memory.citations == "off"
    assert loaded.origins["memory_search.query.max_results"] == f"file:{tmp_path / name}"


def test_openclaw_agents_defaults_shape_and_per_agent_override(tmp_path: Path):
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"agents": {
        "defaults": {"memorySearch": {"query": {"maxResults": 4}, "extraPaths": ["a"]}},
        "list": [{"id": "ops", "memorySearch": {"query": {"minScore": 0.5}, "extraPaths": ["b"]}}],
    }}))
    main = load_config(config_path=cfg, workspace=tmp_path).settings.memory_search
    assert (main.query.max_results, main.query.min_score, main.extra_paths) == (4, 0.35, ["a"])
    ops = load_config(config_path=cfg, workspace=tmp_path, agent_id="ops").settings.memory_search
    assert (ops.query.max_results, ops.query.min_score, ops.extra_paths) == (4, 0.5, ["a", "b"])


def test_unknown_key_is_rejected_with_its_name(tmp_path: Path):
    cfg = tmp_path / "memdir.toml"
    cfg.write_text("[memorySearch.query]\nmaxResultz = 3\n")
    with pytest.raises(ConfigError, match=r"memorySearch\.query\.maxResultz"):
        load_config(workspace=tmp_path)


def test_openclaws_own_agent_settings_in_an_agents_block_are_passed_over(tmp_path: Path):
    # an `agents` block copied from OpenClaw's config failed on its first non-memory key
    # ("unknown config key 'agents.list[0].model' (did you mean '….memorySearch.model'?)")
    (tmp_path / "memdir.json").write_text(json.dumps({"agents": {
        "defaults": {"model": {"primary": "openai/gpt-5"}, "heartbeat": {"every": "30m"}, "timeFormat": "24",
                     "memorySearch": {"query": {"maxResults": 4}}},
        "list": [{"id": "ops", "default": True, "name": "Ops", "model": "anthropic/claude", "identity": {"emoji": "x"},
                  "memorySearch": {"provider": "none"}}]}}))
    settings = load_config(workspace=tmp_path, agent_id="ops").settings
    assert settings.memory_search.query.max_results == 4 and settings.memory_search.provider == "none"


@pytest.mark.parametrize(("entry", "words"), [
    ({"defaults": {"memorySerch": {}}}, "did you mean 'agents.defaults.memorySearch'"),
    ({"list": [{"id": "ops", "worksapce": "x"}]}, "did you mean 'agents.list[0].workspace'"),
    ({"list": [{"id": "ops", "maxResults": 3}]}, "did you mean 'agents.list[0].memorySearch.query.maxResults'"),
])
def test_a_near_miss_of_memdirs_keys_in_an_agents_block_is_still_refused(tmp_path: Path, entry, words):
    (tmp_path / "memdir.json").write_text(json.dumps({"agents": entry}))
    with pytest.raises(ConfigError, match=re.escape(words)):
        load_config(workspace=tmp_path, agent_id="ops")


def test_bad_value_names_the_key(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"memorySearch\.query\.maxResults"):
        load_config(overrides={"memorySearch": {"query": {"maxResults": "lots"}}})
    with pytest.raises(ConfigError, match="citations"):
        load_config(overrides={"memory": {"citations": "sometimes"}})
    # NaN was clamped to 0 (every result passing the floor) without a word; a weight of NaN was refused
    with pytest.raises(ConfigError, match=r"minScore.*NaN"):
        load_config(overrides={"memorySearch": {"query": {"minScore": float("nan")}}})
    cfg = tmp_path / "memdir.toml"
    cfg.write_text("[memorySearch.query]\nminScore = nan\n")
    with pytest.raises(ConfigError, match=r"minScore.*NaN"):
        load_config(workspace=tmp_path)


def test_a_boolean_is_not_a_number(tmp_path: Path):
    # pydantic read `maxResults = true` as 1 and `minScore = true` as 1.0 without a word
    cfg = tmp_path / "memdir.toml"
    cfg.write_text("[memorySearch.query]\nmaxResults = true\n")
    with pytest.raises(ConfigError, match=r"memorySearch\.query\.maxResults.*not true"):
        load_config(workspace=tmp_path)
    with pytest.raises(ConfigError, match=r"vectorWeight.*not false"):
        load_config(overrides={"memorySearch": {"query": {"hybrid": {"vectorWeight": False}}}})
    # a number-or-text setting too: `forceFlushTranscriptBytes = true` was 1 byte, a flush every turn
    cfg.write_text("[compaction.memoryFlush]\nforceFlushTranscriptBytes = true\n")
    with pytest.raises(ConfigError, match=r"compaction\.memoryFlush\.forceFlushTranscriptBytes.*not true"):
        load_config(workspace=tmp_path)
    # booleans stay booleans, and numbers stay numbers
    cfg.write_text("[memorySearch.query]\nmaxResults = 3\n[memorySearch.query.hybrid.mmr]\nenabled = true\n")
    settings = load_config(workspace=tmp_path).settings
    assert settings.memory_search.query.max_results == 3
    assert settings.memory_search.query.hybrid.mmr.enabled is True


def test_missing_and_unparsable_config_files(tmp_path: Path):
    with pytest.raises(ConfigError, match="not found"):
        load_config(config_path=tmp_path / "nope.toml")
    # a folder or a device was "not found" too, though it is there
    with pytest.raises(ConfigError, match="is a directory"):
        load_config(config_path=tmp_path)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_config(config_path="/dev/null")
    bad = tmp_path / "bad.toml"
    bad.write_text("[memorySearch\n")
    with pytest.raises(ConfigError, match="cannot parse"):
        load_config(config_path=bad)
    upper = tmp_path / "memdir.TOML"  # was read as JSON5: "Unexpected '['"
    upper.write_text('[memorySearch]\nprovider = "none"\n')
    assert load_config(config_path=upper).settings.memory_search.provider == "none"
    named = tmp_path / "myconfig"
    named.write_text('[memorySearch]\nprovider = "none"\n')
    with pytest.raises(ConfigError, match=r"myconfig as JSON5 \(the format follows the name: \.toml, \.json or"):
        load_config(config_path=named)


@pytest.mark.parametrize("kind,what", [("dangling", "a symlink to nothing"), ("folder", "a directory"),
                                       ("fifo", "not a regular file")])
def test_a_config_file_that_is_no_file_is_an_error_not_passed_over(tmp_path: Path, kind: str, what: str):
    """A broken symlink (dotfiles), a folder or a FIFO named memdir.toml was skipped without a word and
    the state folder's config, or none, used instead."""
    import os

    ws, state = tmp_path / "ws", tmp_path / "state"
    ws.mkdir()
    state.mkdir()
    (state / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n')
    found = ws / "memdir.toml"
    {"dangling": lambda: found.symlink_to(tmp_path / "gone.toml"), "folder": found.mkdir,
     "fifo": lambda: os.mkfifo(found)}[kind]()
    with pytest.raises(ConfigError, match=rf"config file {re.escape(str(found))} is {what}: make it a file or remove"):
        load_config(workspace=ws, state_dir=state)


def test_precedence_file_then_env_then_flags(tmp_path: Path):
    (tmp_path / "memdir.toml").write_text('[memorySearch]\nprovider = "openai"\nmodel = "m-file"\n')
    env = {"MEMDIR_PROVIDER": "gemini"}
    loaded = load_config(workspace=tmp_path, env=env, overrides={"memorySearch": {"model": "m-flag"}})
    s = loaded.settings.memory_search
    assert (s.provider, s.model) == ("gemini", "m-flag")
    assert loaded.origins["memory_search.provider"] == "env:MEMDIR_PROVIDER"
    assert loaded.origins["memory_search.model"] == "flag"


def test_env_bool_is_validated():
    with pytest.raises(ConfigError, match="MEMDIR_OFFLINE"):
        load_config(env={"MEMDIR_OFFLINE": "maybe"})
    assert load_config(env={"MEMDIR_OFFLINE": "yes"}).settings.memory_search.offline is True


@pytest.mark.parametrize("value,expected", [
    (None, 2097152), ("2mb", 2097152), ("512kb", 524288), ("1.5m", 1572864), (0, 0), ("abc", 2097152),
    (10**400, 10**400),  # (a JSON integer of 400 digits: OverflowError at every flush check)
])
def test_v62_byte_sizes(value, expected):
    assert parse_byte_size(value, 2097152) == expected


def test_config_show_lists_values_and_origins(tmp_path: Path, run_cli):
    (tmp_path / "memdir.toml").write_text("[memorySearch.chunking]\ntokens = 200\n")
    proc = run_cli("config", "show", "--json", "--workspace", str(tmp_path), env={"MEMDIR_AGENT": "ops"})
    assert proc.returncode == 0, proc.stderr
    rows = {r["key"]: r for r in json.loads(proc.stdout)["settings"]}
    assert rows["memorySearch.chunking.tokens"]["value"] == 200
    assert rows["memorySearch.chunking.tokens"]["origin"].startswith("file:")
    assert rows["agentId"] == {"key": "agentId", "value": "ops", "origin": "env:MEMDIR_AGENT"}
    assert rows["memorySearch.query.minScore"]["origin"] == "default"
    text = run_cli("config", "show", "--workspace", str(tmp_path))
    assert "memorySearch.chunking.tokens" in text.stdout and "[file:" in text.stdout
    bad = tmp_path / "b"
    bad.mkdir()
    (bad / "memdir.json").write_text('{"memorySearch": {"bogus": 1}}')
    proc = run_cli("config", "show", "--workspace", str(bad))
    assert proc.returncode == 1 and "memorySearch.bogus" in proc.stderr


def test_config_show_masks_api_keys_and_credential_headers(tmp_path: Path):
    """``config show`` masked a DSN's password but printed ``remote.apiKey`` and an
    ``Authorization`` header as they are: its output is what people paste into bug reports."""
    (tmp_path / "memdir.toml").write_text(
        '[memorySearch.remote]\napiKey = "sk-secret1"\n'
        'headers = { Authorization = "Bearer sk-secret2", "X-Api-Key" = "sk-secret3", "X-Org" = "acme" }\n'
        '[longTermMemory.embedding]\napiKey = "${OPENAI_API_KEY}"\n')
    loaded = load_config(workspace=tmp_path)
    rows = {key: value for key, value, _origin in loaded.rows()}
    assert "sk-secret" not in json.dumps(rows)
    assert rows["memorySearch.remote.apiKey"] == "***"
    assert rows["memorySearch.remote.headers"] == {"Authorization": "***", "X-Api-Key": "***", "X-Org": "acme"}
    assert rows["longTermMemory.embedding.apiKey"] == "${OPENAI_API_KEY}"  # where the key comes from: no secret
    assert loaded.settings.memory_search.remote.api_key == "sk-secret1"  # only the display is masked


# --- values are checked, not silently changed (issue 11 §4) ------------------------------------

@pytest.mark.parametrize("toml,key,why", [
    ("[memorySearch.query]\nmaxResults = 0", "memorySearch.query.maxResults", "greater than 0"),
    ("[memorySearch.query]\nmaxResults = -3", "memorySearch.query.maxResults", "greater than 0"),
    ("[memorySearch.cache]\nmaxEntries = -1", "memorySearch.cache.maxEntries", "greater than or equal to 0"),
    ("[memorySearch.chunking]\ntokens = 0", "memorySearch.chunking.tokens", "greater than 0"),
    ("[memorySearch.query.hybrid.temporalDecay]\nhalfLifeDays = 0",
     "memorySearch.query.hybrid.temporalDecay.halfLifeDays", "greater than 0"),
    ("[memorySearch.query.hybrid]\nvectorWeight = -0.5", "memorySearch.query.hybrid.vectorWeight", ">= 0"),
    ("[memorySearch.query.hybrid]\ntextWeight = -1", "memorySearch.query.hybrid.textWeight", ">= 0"),
    ("[memorySearch]\nsources = []", "memorySearch.sources", "at least one source"),
    ("[memorySearch.sync]\nsearchBudgetMs = -1", "memorySearch.sync.searchBudgetMs", "greater than or equal to 0"),
    ("[memorySearch.query]\nembedTimeoutMs = 0", "memorySearch.query.embedTimeoutMs", "greater than 0"),
    # beyond ~10^10 s a wait overflows the OS's clock: every query embedding 'failed: timestamp out of range'
    ("[memorySearch.query]\nembedTimeoutMs = 1e14", "memorySearch.query.embedTimeoutMs", "less than or equal to"),
    ("[memorySearch.remote]\ntimeoutSeconds = 1e12", "memorySearch.remote", "a week at most"),
    ("[memorySearch.remote]\nqueryTimeoutSeconds = 700000", "memorySearch.remote", "a week at most"),
    ("[memorySearch.remote.batch]\ntimeoutMinutes = nan", "memorySearch.remote.batch.timeoutMinutes", "greater than 0"),
    ("[longTermMemory.embedding]\ndimensions = -1", "longTermMemory.embedding.dimensions", "greater than 0"),
    ('[memorySearch]\nprovider = "opneai"', "memorySearch.provider", "did you mean 'openai'"),
    ('[memorySearch]\nfallback = "lokal"', "memorySearch.fallback", "did you mean 'local'"),
    # an unknown zone silently meant the machine's (dates a day off); 'Europe' is a folder of zones
    ('userTimezone = "Europe/Berln"', "userTimezone", "did you mean 'Europe/Berlin'"),
    ('userTimezone = "Mars/Olympus_Mons"', "userTimezone", "must be an IANA name"),
    ('[agents.defaults]\nuserTimezone = "Europe"', "userTimezone", "unknown timezone 'Europe'"),
])
def test_nonsense_values_are_rejected_naming_key_and_file(tmp_path: Path, toml: str, key: str, why: str):
    cfg = tmp_path / "memdir.toml"
    cfg.write_text(toml + "\n")
    with pytest.raises(ConfigError) as info:
        load_config(workspace=tmp_path)
    message = str(info.value).replace("greater than or equal to", ">=") if why == ">= 0" else str(info.value)
    assert key in message and str(cfg) in message and why in message


def test_an_unknown_timezone_from_the_environment_names_the_variable(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"userTimezone from \$MEMDIR_USER_TIMEZONE: unknown timezone 'Pacific'"):
        load_config(workspace=tmp_path, env={"MEMDIR_USER_TIMEZONE": "Pacific"})
    known = load_config(workspace=tmp_path, env={"MEMDIR_USER_TIMEZONE": " Pacific/Auckland "}).settings
    assert known.user_timezone == "Pacific/Auckland"  # trimmed: long-term memory's dates read " UTC " as unknown


def test_an_empty_state_dir_or_workspace_is_refused_not_the_current_folder(tmp_path: Path, monkeypatch):
    """``--config "$UNSET"`` read the config file found in the workspace instead; ``--state-dir
    "$UNSET"`` resolved to the current folder (a workspace: the index went into its memory/
    folder); ``stateDir = 5`` in a file failed with "expected str, bytes or os.PathLike"."""
    monkeypatch.chdir(tmp_path)
    for flags in ({"state_dir": ""}, {"workspace": " "}):
        with pytest.raises(ConfigError, match=r"\(given as --(state-dir|workspace)\): cannot be empty"):
            load_config(**flags)
    (tmp_path / "memdir.toml").write_text("[memorySearch]\nprovider = 'none'\n")
    with pytest.raises(ConfigError, match=r"config file \(given as --config\): cannot be empty"):
        load_config(config_path="", workspace=tmp_path)  # (it read the memdir.toml found instead, quietly)
    for value in ('""', "5"):
        (tmp_path / "memdir.toml").write_text(f"stateDir = {value}\n")
        with pytest.raises(ConfigError, match=rf"stateDir.* in {tmp_path / 'memdir.toml'}: (cannot be empty|must be)"):
            load_config(workspace=tmp_path, env={})


@pytest.mark.parametrize("entry", ['workspace = "elsewhere"', "id = 5", 'id = ""'])
def test_an_agents_list_entry_without_an_id_is_refused(tmp_path: Path, entry: str):
    """An ``agents.list`` entry without a string id applied to no agent, without a word."""
    (tmp_path / "memdir.toml").write_text(f"[[agents.list]]\n{entry}\n")
    with pytest.raises(ConfigError, match=r"agents\.list\[0\] in .*memdir\.toml: needs an id"):
        load_config(workspace=tmp_path)


def test_an_agent_configured_twice_in_agents_list_is_refused(tmp_path: Path, run_cli):
    """Two ``agents.list`` entries with one id both applied, the later's values quietly replacing
    the earlier's (``maxResults = 3`` then ``9``: 9, and no word of the 3), as a JSON key given twice
    did before it was refused; it is refused naming both entries."""
    (tmp_path / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n'
                                          '[[agents.list]]\nid = "main"\nmemorySearch.query.maxResults = 3\n'
                                          '[[agents.list]]\nid = "ops"\n'
                                          '[[agents.list]]\nid = "main"\nmemorySearch.query.maxResults = 9\n')
    out = run_cli("search", "x", "--agent", "ops", "-w", str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert "agents.list[2] in " in out.stderr and "agent 'main' is configured twice (also agents.list[0])" in out.stderr


@pytest.mark.parametrize("name,text,why", [
    ("memdir.json", '{"memorySearch": {"provider": "none"}, "memory_search": {"model": "m"}}',
     "memorySearch is set twice in {file} (as 'memorySearch' and 'memory_search'): keep one spelling"),
    ("memdir.toml", "[memorySearch.query]\nmaxResults = 3\nmax_results = 4\n",
     "memorySearch.query.maxResults is set twice in {file}"),
    ("memdir.json", '{"memorySearch": {"provider": "none"}, "memorySearch": {"model": "m"}}',
     "cannot parse config file {file}: key 'memorySearch' appears twice"),
    ("memdir.json5", "{memorySearch: {provider: 'none'}, memorySearch: {model: 'm'}}",
     "cannot parse config file {file}: key 'memorySearch' appears twice"),
])
def test_a_setting_given_twice_is_refused_not_half_dropped(tmp_path: Path, name: str, text: str, why: str):
    """The later of two spellings (or of a JSON key given twice) replaced the earlier section whole:
    ``provider = "none"`` was dropped without a word."""
    (tmp_path / name).write_text(text)
    with pytest.raises(ConfigError) as info:
        load_config(workspace=tmp_path)
    assert why.format(file=tmp_path / name) in str(info.value)


def test_a_bad_header_value_names_the_file(tmp_path: Path):
    """``remote.headers`` is kept whole, so an error inside it found no origin and named no file."""
    (tmp_path / "memdir.toml").write_text("[memorySearch.remote]\nheaders = { X-Org = 1 }\n")
    with pytest.raises(ConfigError) as info:
        load_config(workspace=tmp_path)
    where = tmp_path / "memdir.toml"
    assert str(info.value) == (f"invalid configuration: memorySearch.remote.headers.X-Org = 1 in {where}: "
                               "must be a valid string")


def test_sensible_out_of_range_values_are_still_clamped():
    h = ms(query={"hybrid": {"vectorWeight": 3, "textWeight": 0.5}}).query.hybrid
    assert (h.vector_weight, h.text_weight) == pytest.approx((2 / 3, 1 / 3))
    assert ms(cache={"maxEntries": 0}).cache.max_entries == 1
    assert ms(query={"minScore": -2}).query.min_score == 0
    assert ms(sources=["sessions"]).sources == ["memory"]  # filtered, not empty: R§1's fallback
    # floor(inf) was an OverflowError the CLI printed as "cannot convert float infinity to integer"
    assert ms(query={"hybrid": {"candidateMultiplier": float("inf")}}).query.hybrid.candidate_multiplier == 20
    with pytest.raises(ConfigError, match=r"memorySearch\.query\.hybrid .*: candidateMultiplier must be a number"):
        ms(query={"hybrid": {"candidateMultiplier": float("nan")}})


def test_provider_ids_match_the_registry():
    from memdir.config import PROVIDER_IDS
    from memdir.embeddings.registry import DISABLED, KNOWN_PROVIDERS

    assert set(PROVIDER_IDS) == {"auto", *KNOWN_PROVIDERS, *DISABLED}
    assert ms(provider="OpenAI").provider == "OpenAI"  # names are case-insensitive, as the registry's


def test_unknown_key_suggests_the_closest_spelling(tmp_path: Path):
    cfg = tmp_path / "memdir.toml"
    cfg.write_text("[memorySearch]\nextra_path = ['x']\n")
    with pytest.raises(ConfigError, match=r"did you mean 'memorySearch\.extraPaths'\?") as info:
        load_config(workspace=tmp_path)
    assert str(cfg) in str(info.value)
    with pytest.raises(ConfigError, match=r"unknown config key 'zzz'") as info:
        load_config(overrides={"zzz": 1})
    assert "did you mean" not in str(info.value)


def test_toml_with_a_bom_is_accepted(tmp_path: Path):
    (tmp_path / "memdir.toml").write_bytes(b"\xef\xbb\xbf[memorySearch.query]\nmaxResults = 4\n")
    assert load_config(workspace=tmp_path).settings.memory_search.query.max_results == 4
    (tmp_path / "memdir.toml").unlink()
    (tmp_path / "memdir.json").write_bytes(b'\xef\xbb\xbf{"memorySearch": {"query": {"maxResults": 5}}}')
    assert load_config(workspace=tmp_path).settings.memory_search.query.max_results == 5


@pytest.mark.parametrize("data", [b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", b"maxResults = 1\x00\x00"])
def test_binary_config_names_the_file(tmp_path: Path, data: bytes):
    cfg = tmp_path / "memdir.toml"
    cfg.write_bytes(data)
    with pytest.raises(ConfigError, match="right file") as info:
        load_config(workspace=tmp_path)
    assert str(cfg) in str(info.value)


@pytest.mark.parametrize("agent", ["../../escaped", "a/b", "a\\b", "..", ".", "", " main", "x\ny"])
def test_agent_id_must_be_a_plain_name(tmp_path: Path, agent: str):
    with pytest.raises(ConfigError, match="agent"):
        load_config(agent_id=agent, state_dir=tmp_path)
    env_cfg = tmp_path / "memdir.json"
    env_cfg.write_text(json.dumps({"agentId": agent}))
    with pytest.raises(ConfigError, match=str(env_cfg)):
        load_config(config_path=env_cfg, state_dir=tmp_path)


@pytest.mark.parametrize("agent,why", [("a\udcff", "not valid UTF-8"), ("x" * 201, "too long (201 bytes")])
def test_agent_id_must_name_a_file(tmp_path: Path, agent: str, why: str):
    """A byte that is not UTF-8 (``--agent $'a\\xff'``) or a 300-character id left an empty index
    behind and failed with "surrogates not allowed" / "File name too long"."""
    with pytest.raises(ConfigError, match=rf"agentId \(given as --agent\): agent id .*{re.escape(why)}"):
        load_config(agent_id=agent, state_dir=tmp_path)


@pytest.mark.parametrize("agent", ["main\u200b", "\u202enim", "ma\u00adin", "main\x7f", "main\x85", "\ufeffmain"])
def test_an_agent_id_with_an_invisible_or_control_character_is_refused(tmp_path: Path, agent: str):
    """An id holding a zero-width space, a right-to-left override, a soft hyphen, DEL or a C1
    control made another agent's index, transcripts and long-term memory, named "main" (or
    shown reversed) wherever it was printed; it is refused as a name that is not plain, and
    the message shows the character."""
    with pytest.raises(ConfigError, match=r"is not a plain name") as refused:
        load_config(agent_id=agent, state_dir=tmp_path)
    assert repr(agent)[1:-1] in str(refused.value)


def test_agent_ids_that_are_plain_names_are_fine(tmp_path: Path):
    for agent in ("main", "ops-2", "my_agent", "v1.2", "café", "x" * 200):
        assert load_config(agent_id=agent, state_dir=tmp_path).settings.index_path.name == f"{agent}.sqlite"


def test_missing_workspace_is_an_error(tmp_path: Path):
    with pytest.raises(ConfigError, match=r"workspace .*nope does not exist \(given as --workspace\)"):
        load_config(workspace=tmp_path / "nope")
    (tmp_path / "file.md").write_text("x")
    with pytest.raises(ConfigError, match="is not a folder"):
        load_config(workspace=tmp_path / "file.md")
    with pytest.raises(ConfigError, match=r"from \$MEMDIR_WORKSPACE"):
        load_config(env={"MEMDIR_WORKSPACE": str(tmp_path / "gone")})
    assert load_config(workspace=tmp_path / "nope", check_workspace=False).settings.workspace_path.name == "nope"


def test_a_nul_byte_in_a_path_is_a_configuration_error_naming_the_key(tmp_path: Path, run_cli):
    """JSON's ``"\\u0000"`` passes the file's own NUL check; in extraPaths or store.path it failed
    every command later with a bare "embedded null byte" that named no key (and the API raised a
    plain ValueError)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "MEMORY.md").write_text("- kiwi\n")
    cfg = ws / "memdir.json"
    for section, key in (({"extraPaths": ["notes\u0000x"]}, "memorySearch.extraPaths"),
                         ({"store": {"path": "/tmp/x\u0000.sqlite"}}, "memorySearch.store.path")):
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none", **section}}))
        for command in (["index"], ["search", "kiwi"], ["get", "MEMORY.md"]):
            out = run_cli("-w", str(ws), *command)
            assert out.returncode == 1, (command, out.stdout)
            assert f"{key} in {cfg}: contains a NUL byte" in out.stderr, out.stderr
            assert "Traceback" not in out.stderr
    cfg.unlink()
    with pytest.raises(ConfigError, match="extraPaths: contains a NUL byte"):
        load_config(workspace=ws, overrides={"memorySearch": {"extraPaths": ["a\u0000"]}})
    with pytest.raises(ConfigError, match=r"workspace .* contains a NUL byte"):
        load_config(workspace=f"{ws}\u0000x")


def test_a_home_path_without_a_home_is_refused_not_made_in_the_current_folder(homeless: None, tmp_path: Path):
    """With no home to expand ``~`` to, the default state dir ``~/.memdir`` became a folder named
    ``~`` in whatever directory memdir ran in (and the index with it)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    with pytest.raises(ConfigError, match=r"stateDir = '~/\.memdir'.*MEMDIR_STATE_DIR"):
        load_config(workspace=ws, env={})
    with pytest.raises(ConfigError, match=r"memorySearch\.extraPaths = '~/notes'"):
        load_config(workspace=ws, state_dir=tmp_path / "state", env={},
                    overrides={"memorySearch": {"extraPaths": ["~/notes"]}})
    assert load_config(workspace=ws, state_dir=tmp_path / "state", env={}).settings.state_path == tmp_path / "state"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ws"]


def test_a_path_under_an_unknown_user_says_so(tmp_path: Path, run_cli):
    """``--state-dir '~nosuchuser/x'`` was refused as if the home directory were unknown ($HOME set)."""
    out = run_cli("status", "--state-dir", "~nosuchuser-memdir/x", "-w", str(tmp_path))
    assert out.returncode == 1, out.stderr
    assert "stateDir = '~nosuchuser-memdir/x' (given as --state-dir): '~nosuchuser-memdir' cannot be expanded, " \
           "there is no user 'nosuchuser-memdir'; give a full path" in out.stderr


@pytest.mark.parametrize("dsn,shown", [
    ("postgresql://u:pw1@h/db?sslpassword=pw2&sslmode=require", "postgresql://u:***@h/db?sslpassword=***&sslmode=require"),
    ("host=h password=pw1 sslpassword=pw2 dbname=x", "host=h password=*** sslpassword=*** dbname=x"),
    ("postgresql://u@h/db?password=pw1&sslmode=require", "postgresql://u@h/db?password=***&sslmode=require"),
    ("host=h password='pw1 pw2' dbname=x", "host=h password=*** dbname=x"),
])
def test_config_show_masks_every_password_in_a_dsn(dsn: str, shown: str):
    """libpq's ``sslpassword`` (the client key's passphrase) was printed by ``config show`` as given."""
    assert mask_dsn_password(dsn) == shown


def test_a_second_config_file_beside_the_one_read_is_named(tmp_path: Path):
    """With memdir.toml and memdir.json both in a workspace, the TOML file was read and edits to
    the JSON one changed nothing, without a word: the CLI names the file it ignores."""
    import subprocess
    import sys

    from helpers import cli_env

    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n')
    (ws / "memdir.json").write_text('{"memorySearch": {"provider": "openai"}}')
    proc = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "config", "show", "--json"],
                          env=cli_env(tmp_path / "state"), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr.count(f"{ws / 'memdir.json'} is ignored: memdir.toml is read") == 1
    shown = {row["key"]: row["value"] for row in json.loads(proc.stdout)["settings"]}
    assert shown["memorySearch.provider"] == "none"
