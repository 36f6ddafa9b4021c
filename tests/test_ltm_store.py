"""Long-term memory on a real LanceDB in a temp folder: thresholds, store/duplicate/forget, agents,
supersession, Markdown export/import/mirror, model changes, configuration."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from ltm_fakes import AxisProvider, axis, near
from memdir.config import ConfigError, load_config
from memdir.ltm import LongTermMemory, LtmError, ModelMismatchError
from memdir.ltm.markdown import parse
from memdir.ltm.store import score_from_l2
from memdir.tools import anthropic_tools, call_tool, openai_tools

pytest.importorskip("lancedb")


def make(tmp_path: Path, provider: Any = None, *, agent: str = "main", ltm: dict | None = None,
         workspace: str = "ws") -> LongTermMemory:
    ws = tmp_path / workspace
    ws.mkdir(exist_ok=True)
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id=agent,
                           overrides={"longTermMemory": ltm or {}}).settings
    return LongTermMemory(settings, provider=provider or AxisProvider())


# --- scores (R§17 vector 70) ---------------------------------------------------------------------


def test_vector_70_openclaw_score_mapping() -> None:
    assert score_from_l2(0) == 1.0
    assert score_from_l2(1) == 0.5
    assert round(score_from_l2(2.33), 4) == 0.3003
    assert score_from_l2(0.0526) >= 0.95 > score_from_l2(0.0527)


@pytest.mark.parametrize(("cos", "duplicate"), [(0.96, True), (0.951, True), (0.949, False)])
def test_duplicate_threshold_is_095_cosine(tmp_path: Path, cos: float, duplicate: bool) -> None:
    provider = AxisProvider({"first": axis(0), "second": near(cos)})
    with make(tmp_path, provider, ltm={"supersede": False}) as ltm:
        first = ltm.store("first", category="fact")
        second = ltm.store("second", category="fact")
        assert first.action == "created"
        assert second.action == ("duplicate" if duplicate else "created")
        if duplicate:
            assert second.record.id == first.record.id
        assert len(ltm.list()) == (1 if duplicate else 2)


def test_openclaw_scoring_uses_squared_l2(tmp_path: Path) -> None:
    """With scoring=openclaw, score = 1/(1+d²): cos 0.974 (d² 0.052) is a duplicate, 0.97 is not."""
    provider = AxisProvider({"a": axis(0), "b": near(0.974), "c": near(0.97), "q": near(-0.1, 0, 5)})
    with make(tmp_path, provider, ltm={"scoring": "openclaw", "supersede": False}) as ltm:
        ltm.store("a", category="fact")
        assert ltm.store("b", category="fact").action == "duplicate"
        assert ltm.store("c", category="fact").action == "created"
        # cos -0.1 → d² 2.2 → score 0.3125: above R§14's 0.3 cut-off on this scale, so every memory passes.
        hits = {h.text: h.score for h in ltm.search("q", min_score=0.3)}
        assert set(hits) == {"a", "c"} and round(hits["a"], 4) == round(1 / 3.2, 4)


def test_search_and_auto_recall_apply_min_score(tmp_path: Path) -> None:
    provider = AxisProvider({"likes tea": axis(0), "close question": near(0.5), "far question": near(0.2)})
    with make(tmp_path, provider) as ltm:
        assert ltm.auto_recall("close question") is None  # nothing stored yet: no table, no error
        ltm.store("likes tea", category="preference")
        hits = ltm.search("close question")
        assert [h.text for h in hits] == ["likes tea"] and hits[0].score == pytest.approx(0.5, abs=1e-4)
        assert ltm.search("far question") == []
        assert ltm.search("far question", min_score=0.1)[0].text == "likes tea"
        block = ltm.auto_recall("close question")
        assert block is not None and "1. [preference] likes tea" in block
        assert ltm.auto_recall("far question") is None
        assert ltm.auto_recall("hey") is None  # shorter than 5 characters


def test_auto_recall_returns_top_three(tmp_path: Path) -> None:
    texts = [f"fact {i}" for i in range(5)]
    provider = AxisProvider({t: near(0.9 - 0.1 * i, base=0, other=2 + i) for i, t in enumerate(texts)} |
                            {"the question": axis(0)})
    with make(tmp_path, provider, ltm={"supersede": False}) as ltm:
        for t in texts:
            ltm.store(t, category="fact")
        block = ltm.auto_recall("the question")
        assert block is not None
        assert [line.split("] ")[1] for line in block.splitlines()[2:-1]] == ["fact 0", "fact 1", "fact 2"]


# --- store → duplicate → forget ----------------------------------------------------------------------


def test_store_duplicate_forget_by_id_and_by_query(tmp_path: Path) -> None:
    provider = AxisProvider({"I prefer dark mode": axis(0), "I prefer dark mode.": near(0.99),
                             "dark mode?": near(0.93), "My email is a@b.co": axis(3), "email?": near(0.75, 3, 4)})
    with make(tmp_path, provider) as ltm:
        stored = ltm.store("I prefer dark mode")
        assert stored.action == "created" and stored.record.category == "preference"
        assert uuid.UUID(stored.record.id)
        dup = ltm.store("I prefer dark mode.")
        assert dup.as_dict() == {"action": "duplicate", "existingId": stored.record.id,
                                 "existingText": "I prefer dark mode"}
        email = ltm.store("My email is a@b.co")
        assert email.record.category == "entity"

        # One match above 0.9: deleted.  One match between 0.7 and 0.9: listed, not deleted.
        gone = ltm.forget(query="dark mode?")
        assert gone.action == "deleted" and gone.record.id == stored.record.id
        kept = ltm.forget(query="email?")
        assert kept.action == "candidates" and [c.id for c in kept.candidates] == [email.record.id]
        assert ltm.forget(query="nothing like it").action == "none_matched"

        assert ltm.forget(email.record.id[:8]).action == "deleted"  # the prefix the candidate list shows
        assert ltm.list() == []
        assert ltm.forget(str(uuid.uuid4())).action == "not_found"
        with pytest.raises(LtmError, match="Invalid memory ID format: 1; DROP"):
            ltm.forget("1; DROP")
        with pytest.raises(LtmError, match="Provide query or memoryId"):
            ltm.forget()


def test_bad_input_is_refused_and_nothing_is_written(tmp_path: Path) -> None:
    with make(tmp_path) as ltm:
        for kwargs, message in [({"text": "  "}, "text required"),
                                ({"text": "x", "category": "mood"}, "unknown category"),
                                ({"text": "x", "importance": 3}, "importance must be between 0 and 1")]:
            with pytest.raises(LtmError, match=message):
                ltm.store(**kwargs)
        assert ltm.list() == [] and ltm.stats()["total"] == 0


def test_tools_payloads_and_texts(tmp_path: Path) -> None:
    provider = AxisProvider({"I prefer tea": axis(0), "tea?": near(0.8), "I prefer tea!": near(0.97)})
    with make(tmp_path, provider) as ltm:
        assert call_tool(ltm, "memory_recall", {"query": "tea?"}).text == "No relevant memories found."
        stored = call_tool(ltm, "memory_store", '{"text": "I prefer tea", "importance": "0.9"}')
        assert stored.text == 'Stored: "I prefer tea..."'
        assert stored.payload["action"] == "created" and stored.payload["memory"]["importance"] == 0.9
        dup = call_tool(ltm, "memory_store", {"text": "I prefer tea!"})
        assert dup.text == 'Similar memory already exists: "I prefer tea"'
        assert dup.payload["action"] == "duplicate" and dup.payload["existingId"] == stored.payload["id"]

        recalled = call_tool(ltm, "memory_recall", {"query": "tea?", "limit": 3})
        assert recalled.text == "Found 1 memories:\n\n1. [preference] I prefer tea (80%)"
        assert recalled.payload == {"count": 1, "memories": [{"id": stored.payload["id"], "text": "I prefer tea",
                                                              "category": "preference", "importance": 0.9,
                                                              "score": 0.8}]}
        candidates = call_tool(ltm, "memory_forget", {"query": "tea?"})
        assert candidates.payload["action"] == "candidates"
        assert candidates.text.endswith(f"- [{stored.payload['id'][:8]}] I prefer tea...")
        assert call_tool(ltm, "memory_forget", {}).payload == {"error": "missing_param"}
        assert call_tool(ltm, "memory_forget", {}).text == "Provide query or memoryId."
        assert call_tool(ltm, "memory_forget", {"memoryId": "nope"}).payload == {"error": "invalid_id"}
        assert call_tool(ltm, "memory_store", {"text": "x", "category": "mood"}).payload["error"].startswith(
            "unknown category")
        forgot = call_tool(ltm, "memory_forget", {"memoryId": stored.payload["id"]})
        assert forgot.text == f"Memory {stored.payload['id']} forgotten."
        assert forgot.payload == {"action": "deleted", "id": stored.payload["id"]}


def test_tool_schemas_in_both_shapes() -> None:
    names = ["memory_recall", "memory_store", "memory_forget"]
    oa = openai_tools(names)
    an = anthropic_tools(names)
    assert [t["function"]["name"] for t in oa] == names == [t["name"] for t in an]
    recall = oa[0]["function"]["parameters"]
    assert recall["required"] == ["query"] and set(recall["properties"]) == {"query", "limit"}
    store = an[1]["input_schema"]
    assert store["properties"]["category"]["enum"] == ["preference", "fact", "decision", "entity", "other"]
    assert set(an[2]["input_schema"]["properties"]) == {"query", "memoryId"}
    assert openai_tools() == openai_tools(["memory_search", "memory_get", "memory_append"])  # core default


# --- agents ----------------------------------------------------------------------------------------


def test_two_agents_never_see_each_others_memories(tmp_path: Path) -> None:
    provider = AxisProvider({"alpha secret": axis(0), "beta secret": near(0.99), "secret?": near(0.9)})
    with make(tmp_path, provider, agent="alpha") as a, make(tmp_path, provider, agent="beta") as b:
        assert a.db_path != b.db_path and a.db_path.parent == b.db_path.parent
        a.store("alpha secret", category="fact")
        assert b.store("beta secret", category="fact").action == "created"  # not a duplicate of alpha's
        assert [h.text for h in a.search("secret?")] == ["alpha secret"]
        assert [h.text for h in b.search("secret?")] == ["beta secret"]
        assert [r.text for r in b.list()] == ["beta secret"]


def test_db_path_token_env_and_default(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LTM_ROOT", str(tmp_path / "root"))
    with make(tmp_path, ltm={"dbPath": "${LTM_ROOT}/{agentId}/db"}, agent="ops") as ltm:
        assert ltm.db_path == tmp_path / "root" / "ops" / "db"
        ltm.store("I like trains")
        assert (ltm.db_path / "memories.lance").is_dir()
    with make(tmp_path) as ltm:
        assert ltm.db_path == tmp_path / "state" / "ltm" / "main"  # agent id main, chosen
    monkeypatch.delenv("LTM_ROOT")
    with pytest.raises(ConfigError, match=r"longTermMemory\.dbPath: environment variable LTM_ROOT is not set"):
        make(tmp_path, ltm={"dbPath": "${LTM_ROOT}/x"})


# --- supersession ------------------------------------------------------------------------------------


def test_supersession_keeps_newer_active_and_older_listed_with_all(tmp_path: Path) -> None:
    provider = AxisProvider({"I prefer Y": axis(0), "I now prefer X": near(0.85), "Y is a fact": near(0.85, 0, 2),
                             "I prefer Z": near(0.5, 0, 3)})
    with make(tmp_path, provider) as ltm:
        old = ltm.store("I prefer Y").record
        ltm.store("Y is a fact", category="fact")  # same similarity, other category: untouched
        ltm.store("I prefer Z")  # same category, 0.5: unrelated, untouched
        new = ltm.store("I now prefer X")
        assert [r.id for r in new.superseded] == [old.id]
        active = {r.text for r in ltm.list()}
        assert active == {"Y is a fact", "I prefer Z", "I now prefer X"}
        everything = {r.text: r for r in ltm.list(include_superseded=True)}
        assert everything["I prefer Y"].superseded_by == new.record.id and everything["I prefer Y"].superseded_at
        assert "I prefer Y" not in {h.text for h in ltm.search("I prefer Y", min_score=0.1)}
        assert ltm.stats()["superseded"] == 1


def test_supersession_with_the_embedded_model(tmp_path: Path) -> None:
    """Real MiniLM: a changed preference replaces the old one, an unrelated one stays."""
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / "state").settings
    with LongTermMemory(settings) as ltm:
        ltm.store("I prefer dark mode")
        ltm.store("I prefer tea in the afternoon")
        newer = ltm.store("I now prefer light mode")
        assert [r.text for r in newer.superseded] == ["I prefer dark mode"]
        assert {r.text for r in ltm.list()} == {"I prefer tea in the afternoon", "I now prefer light mode"}
        assert ltm.store("I now prefer light mode.").action == "duplicate"


# --- Markdown --------------------------------------------------------------------------------------


def test_export_import_round_trip(tmp_path: Path) -> None:
    with make(tmp_path, ltm={"supersede": False}) as ltm:
        ltm.store("I prefer tea", importance=0.9)
        ltm.store("Line one\nline two of a memory with & and <b>", category="fact")
        ltm.store("We decided to use Postgres")
        exported = ltm.export(include_superseded=True)
        before = [r.as_dict() for r in ltm.list(include_superseded=True)]
    items, skipped = parse(exported)
    assert skipped == [] and len(items) == 3 and items[1].text == "Line one\nline two of a memory with & and <b>"
    with make(tmp_path, agent="restored") as other:
        report = other.import_markdown(exported)
        assert len(report.created) == 3 and report.duplicates == []
        after = [r.as_dict() for r in other.list(include_superseded=True)]
        strip = ("createdAt", "source")
        assert [{k: v for k, v in d.items() if k not in strip} for d in after] == \
               [{k: v for k, v in d.items() if k not in strip} for d in before]
        assert other.export(include_superseded=True) == exported
        again = other.import_markdown(exported)
        assert (len(again.unchanged), again.created) == (3, [])


def test_import_edits_and_plain_bullets(tmp_path: Path) -> None:
    with make(tmp_path) as ltm:
        rec = ltm.store("I prefer tea").record
        text = ltm.export().replace("I prefer tea", "I prefer green tea")
        text += "- I live in Lisbon\n- [decision] We use Kafka\nsome stray paragraph\n"
        report = ltm.import_markdown(text)
        assert report.updated == [rec.id] and len(report.created) == 2 and report.skipped_lines == [6]
        got = {r.text: r for r in ltm.list()}
        assert set(got) == {"I prefer green tea", "I live in Lisbon", "We use Kafka"}
        assert got["I prefer green tea"].id == rec.id and got["We use Kafka"].category == "decision"
        with pytest.raises(LtmError, match="line 1: unknown category 'mood'"):
            ltm.import_markdown("- [mood] grumpy\n")


def test_imported_dates_at_the_calendars_ends_or_impossible(tmp_path: Path) -> None:
    """A bullet dated 0001-01-01 imported in Tokyo is stored before year 1 in UTC: every list,
    export and mirror then failed with "year 0 is out of range".  An impossible date (2026-02-30)
    failed with "day is out of range for month", naming no line, after the bullets before it were
    stored."""
    ws = tmp_path / "ws"
    ws.mkdir()
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", overrides={
        "userTimezone": "Asia/Tokyo", "longTermMemory": {"mirror": {"enabled": True}}}).settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        with pytest.raises(LtmError, match=r"line 2: invalid date '2026-02-30'"):
            ltm.import_markdown("- 2026-03-01 [fact] The user likes coffee\n- 2026-02-30 [fact] The user likes tea\n")
        assert ltm.list() == []
        ltm.import_markdown("- 0001-01-01 [fact] The user likes green tea\n- 9999-12-31 [fact] The user likes mate\n")
        assert "- 0001-01-01 [fact] The user likes green tea" in ltm.export()
        assert "- 9999-12-31 [fact] The user likes mate" in (ws / "memory" / "long-term.md").read_text()
        assert len(ltm.list()) == 2


def test_mirror_follows_the_store_and_never_clobbers_edits(tmp_path: Path) -> None:
    with make(tmp_path, ltm={"mirror": {"enabled": True}}) as ltm:
        mirror = tmp_path / "ws" / "memory" / "long-term.md"
        first = ltm.store("I prefer tea").record
        text = mirror.read_text()
        assert "Generated from the store after every change" in text and f"(id: {first.id})" in text
        second = ltm.store("My email is me@example.com").record
        assert f"(id: {second.id})" in mirror.read_text()
        ltm.forget(first.id)
        assert "I prefer tea" not in mirror.read_text()

        mirror.write_text(mirror.read_text() + "- I live in Porto\n")  # a person edits the mirror
        result = ltm.store("We decided to use Rust")
        aside = list(mirror.parent.glob("long-term.md.edited-*"))
        assert len(aside) == 1 and "I live in Porto" in aside[0].read_text()
        assert result.warnings and aside[0].name in result.warnings[0]
        assert "We decided to use Rust" in mirror.read_text() and "Porto" not in mirror.read_text()
        report = ltm.import_markdown(aside[0].read_text())  # and the edit can be applied
        assert len(report.created) == 1 and "I live in Porto" in mirror.read_text()


def test_memory_forget_reports_the_mirror_warnings_memory_store_reports(tmp_path: Path) -> None:
    # Before: a forget that moved a hand-edited mirror aside said only "Memory … forgotten.", so an
    # agent (or its user) never learnt where the edit went; memory_store's details carry the warning.
    with make(tmp_path, ltm={"mirror": {"enabled": True}}) as ltm:
        mirror = tmp_path / "ws" / "memory" / "long-term.md"
        kept, gone = ltm.store("I prefer tea").record, ltm.store("We decided to use Rust").record
        mirror.write_text(mirror.read_text() + "- I live in Porto\n")  # a person edits the mirror
        by_id = call_tool(ltm, "memory_forget", {"memoryId": gone.id}).payload
        [aside] = mirror.parent.glob("long-term.md.edited-*")
        assert by_id["action"] == "deleted" and aside.name in by_id["warnings"][0]
        assert "I prefer tea" in mirror.read_text() and f"(id: {kept.id})" in mirror.read_text()
        ltm.store("My email is me@example.com")
        mirror.write_text(mirror.read_text() + "- I live in Lisbon\n")
        by_query = call_tool(ltm, "memory_forget", {"query": "My email is me@example.com"}).payload
        assert by_query["action"] == "deleted" and "warnings" in by_query


def test_agents_sharing_a_workspace_do_not_overwrite_each_others_mirror(tmp_path: Path) -> None:
    with make(tmp_path, agent="a", ltm={"mirror": {"enabled": True}}) as a, \
            make(tmp_path, agent="b", ltm={"mirror": {"enabled": True}}) as b:
        a.store("I prefer tea")
        mirror = tmp_path / "ws" / "memory" / "long-term.md"
        result = b.store("I prefer coffee")
        assert result.action == "created" and "not overwritten" in result.warnings[0]
        assert "I prefer tea" in mirror.read_text() and not list(mirror.parent.glob("*.edited-*"))
    with make(tmp_path, agent="c", ltm={"mirror": {"enabled": True, "path": "memory/long-term-{agentId}.md"}}) as c:
        c.store("I prefer juice")
        assert "I prefer juice" in (tmp_path / "ws" / "memory" / "long-term-c.md").read_text()


# --- models --------------------------------------------------------------------------------------


def test_model_change_is_refused_until_reembedded(tmp_path: Path) -> None:
    with make(tmp_path, AxisProvider(model="axis-1")) as ltm:
        ltm.store("I prefer tea")
    with make(tmp_path, AxisProvider(model="axis-2")) as ltm:
        with pytest.raises(ModelMismatchError, match=r"fake/axis-1.*fake/axis-2.*memdir ltm reembed"):
            ltm.search("tea")
        assert ltm.reembed() == 1
        assert [h.text for h in ltm.search("I prefer tea")] == ["I prefer tea"]
        assert ltm.stats()["model"] == "axis-2"


def test_embedding_cache_avoids_re_embedding(tmp_path: Path) -> None:
    provider = AxisProvider()
    with make(tmp_path, provider) as ltm:
        ltm.store("I prefer tea")
        calls = len(provider.calls)
        ltm.store("I prefer tea")  # duplicate: the vector comes from the cache
        ltm.reembed()
        assert len(provider.calls) == calls
        ltm.search("tea?")
        ltm.search("tea?")
        assert len(provider.calls) == calls + 1


def test_dimensions_setting_is_checked(tmp_path: Path) -> None:
    with make(tmp_path, ltm={"embedding": {"dimensions": 1536}}) as ltm, \
            pytest.raises(LtmError, match="dimensions is 1536 but fake/axis-1 produces 64"):
        ltm.store("I prefer tea")


# --- configuration -----------------------------------------------------------------------------------


def test_config_section_keys_defaults_and_clamps(tmp_path: Path) -> None:
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"longTermMemory": {"autoCapture": True, "captureMaxChars": 50.7,
                                                  "embedding": {"apiKey": "${MISSING_KEY_X}"}}}))
    ltm = load_config(config_path=cfg).settings.long_term_memory
    assert (ltm.auto_capture, ltm.auto_recall, ltm.capture_max_chars, ltm.enabled) == (True, True, 100, False)
    assert ltm.embedding.api_key == "${MISSING_KEY_X}"  # resolved when used, so `memdir search` still works
    assert load_config(overrides={"long_term_memory": {"capture_max_chars": 99999}}).settings \
        .long_term_memory.capture_max_chars == 10_000
    cfg.write_text(json.dumps({"longTermMemory": {"autoCaptur": True}}))
    with pytest.raises(ConfigError, match=r"longTermMemory\.autoCaptur"):
        load_config(config_path=cfg)


def test_missing_env_for_the_embedding_key_is_a_clear_error(tmp_path: Path) -> None:
    from memdir.ltm.settings import embedding_config

    settings = load_config(overrides={"longTermMemory": {"embedding": {
        "provider": "openai", "apiKey": "${LTM_TEST_KEY}", "baseUrl": "http://127.0.0.1:9/v1"}}}).settings
    with pytest.raises(ConfigError, match=r"longTermMemory\.embedding\.apiKey: environment variable LTM_TEST_KEY"):
        embedding_config(settings, env={})
    cfg = embedding_config(settings, env={"LTM_TEST_KEY": "sk-1"})
    assert (cfg.provider, cfg.remote.api_key, cfg.remote.base_url) == ("openai", "sk-1", "http://127.0.0.1:9/v1")


def test_many_single_writes_are_compacted_and_nothing_is_lost(tmp_path: Path) -> None:
    with make(tmp_path, ltm={"supersede": False}) as ltm:
        ids = [ltm.store(f"fact number {i}", category="fact").record.id for i in range(45)]
        ltm.forget(ids[0])
        fragments = ltm.table.table().stats()["fragment_stats"]["num_fragments"]
        assert fragments < 32  # compaction ran (45 adds + 1 delete would leave 46 fragments)
        assert {r.id for r in ltm.list()} == set(ids[1:])
        assert ltm.search("fact number 44", min_score=0.99)[0].id == ids[44]


def test_concurrent_writers_store_one_copy(tmp_path: Path) -> None:
    """Duplicate check and insert happen under one lock, and each writer reads the latest version."""
    from concurrent.futures import ThreadPoolExecutor

    provider = AxisProvider({"I prefer tea": axis(0)})
    writers = [make(tmp_path, provider) for _ in range(4)]
    try:
        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(lambda w: w.store("I prefer tea").action, writers))
        assert sorted(results) == ["created", "duplicate", "duplicate", "duplicate"]
        assert len(writers[0].list()) == 1
    finally:
        for w in writers:
            w.close()


def test_a_table_folder_without_a_committed_version_is_no_table_yet(tmp_path: Path) -> None:
    """LanceDB lists ``memories.lance`` as a table from the moment its folder exists, and opening it
    before its first version is committed fails ("Table 'memories' was not found"): a writer seen
    mid-creation by another (a concurrent-writers test failed so once), or a creator killed in
    between, made every later call fail for good."""
    provider = AxisProvider({"I prefer tea": axis(0), "tea": axis(0)})
    ltm = make(tmp_path, provider)
    folder = ltm.table.path / "memories.lance"
    folder.mkdir(parents=True)  # what a creator leaves before its first commit
    (folder / "_versions").mkdir()
    assert ltm.list() == [] and ltm.search("tea") == [] and ltm.stats()["total"] == 0
    assert ltm.store("I prefer tea").action == "created"
    assert [m.text for m in ltm.list()] == ["I prefer tea"]
    ltm.close()
    again = make(tmp_path, provider)
    assert [m.text for m in again.list()] == ["I prefer tea"]
    again.close()


def test_records_of_two_searches_compare_equal(tmp_path: Path) -> None:
    """A host comparing long-term memories (``hit in earlier``, ``assert before == after``) got
    NumPy's 'The truth value of an array with more than one element is ambiguous': a record's
    vector, two equal arrays, was one of the fields ``==`` compared."""
    with make(tmp_path) as ltm:
        ltm.store("I prefer green tea", category="preference")
        ltm.store("We deploy on Thursdays", category="decision")
        first, again = ltm.search("tea", min_score=0), ltm.search("tea", min_score=0)
        assert first and first[0].vector is not None and first[0].vector is not again[0].vector
        assert first == again and first[0] in again
        assert ltm.list() == ltm.list()
