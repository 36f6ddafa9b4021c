"""Configuration keys added for the hook and the flush, and how the agent reads them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from memdir.agent import AgentOptions
from memdir.config import ConfigError, load_config, workspace_index_name
from memdir.sessions.store import SessionStore, message_record
from memdir.sessions.transcript import SessionDeltaTracker


def write_config(tmp_path: Path, data: dict[str, object]) -> Path:
    path = tmp_path / "memdir.json"
    path.write_text(json.dumps(data))
    return path


def test_hook_and_context_keys_resolve(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {
        "hooks": {"sessionMemory": {"enabled": False, "messages": 5, "llmSlug": False}},
        "agents": {"defaults": {"contextTokens": 32000, "userTimezone": "Europe/Lisbon",
                                "compaction": {"reserveTokensFloor": 3000,
                                               "memoryFlush": {"softThresholdTokens": 1000,
                                                               "forceFlushTranscriptBytes": "1mb"}}}},
        "memory": {"citations": "off"},
    })
    s = load_config(config_path=cfg, workspace=tmp_path, env={}).settings
    assert (s.hooks.session_memory.enabled, s.hooks.session_memory.messages, s.hooks.session_memory.llm_slug) == (
        False, 5, False)
    assert s.context_tokens == 32000
    opts = AgentOptions.from_settings(s, keep_recent_turns=7)
    assert (opts.context_window, opts.hook_enabled, opts.hook_messages, opts.llm_slug) == (32000, False, 5, False)
    assert (opts.citations, opts.timezone, opts.keep_recent_turns) == ("off", "Europe/Lisbon", 7)
    assert (opts.flush.reserve_tokens_floor, opts.flush.soft_threshold_tokens,
            opts.flush.force_flush_transcript_bytes) == (3000, 1000, 1024 * 1024)


def test_defaults(tmp_path: Path) -> None:
    s = load_config(workspace=tmp_path, state_dir=tmp_path / "state", env={}).settings
    assert s.context_tokens == 200_000
    assert (s.hooks.session_memory.enabled, s.hooks.session_memory.messages, s.hooks.session_memory.llm_slug) == (
        True, 15, True)
    # no agent id: transcripts are this workspace's own, keyed like its index
    assert s.sessions_dir == (tmp_path / "state").resolve() / "agents" / s.state_key / "sessions"
    assert s.state_key == workspace_index_name(tmp_path) and s.state_key_kind == "workspace"


def test_non_positive_message_count_means_default(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {"hooks": {"session_memory": {"messages": 0}}})
    assert load_config(config_path=cfg, workspace=tmp_path, env={}).settings.hooks.session_memory.messages == 15


def test_unknown_hook_key_is_named(tmp_path: Path) -> None:
    cfg = write_config(tmp_path, {"hooks": {"sessionMemory": {"bogus": 1}}})
    with pytest.raises(ConfigError, match=r"hooks\.sessionMemory\.bogus"):
        load_config(config_path=cfg, workspace=tmp_path, env={})


def test_store_listeners_feed_the_delta_tracker(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    tracker = SessionDeltaTracker(delta_bytes=0, delta_messages=3)
    store.listeners.append(tracker.observe)
    entry = store.open_session("agent:main:main")
    path = store.transcript_path(entry)
    store.append("agent:main:main", message_record("user", "one"))
    assert tracker.dirty == {path}  # deltaBytes 0: any growth counts

    def boom(_: Path) -> None:
        raise RuntimeError("listener bug")

    store.listeners.insert(0, boom)  # a failing listener never breaks the write
    store.append("agent:main:main", message_record("user", "two"))
    assert path.read_text().count('"role":"user"') == 2
