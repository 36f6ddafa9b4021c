"""Hostile inputs found by attacking the CLI as an outside tester would: each a real subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env, python_child
from memdir.api import Memory
from memdir.config import load_config
from memdir.memfiles import MemoryFileError

SESSIONS_CFG = {"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                                 "experimental": {"sessionMemory": True}}}


def _msg(text: str, ts: object) -> str:
    return json.dumps({"type": "message", "timestamp": ts, "message": {"role": "user", "content": text}}) + "\n"


def test_a_transcript_with_absurd_timestamps_or_nesting_loses_only_its_bad_lines(make_workspace, run_cli,
                                                                                  state_dir: Path):
    """A timestamp past year 9999 used to abort the whole ``memdir index`` (OverflowError in the
    day of a chunk); a huge integer or a line nested 100k deep skipped the whole transcript."""
    ws = make_workspace({"MEMORY.md": "- plain note\n", "memdir.json": json.dumps(SESSIONS_CFG)})
    sessions = load_config(workspace=ws, state_dir=state_dir).settings.sessions_dir
    sessions.mkdir(parents=True)
    (sessions / "a.jsonl").write_text(_msg("walrus far future", 1e30)
                                      + _msg("walrus year one", "0001-01-01T00:00:00+01:00")
                                      + _msg("walrus year 9999", "9999-12-31T23:59:59-23:59"))
    (sessions / "b.jsonl").write_text(
        '{"type":"message","timestamp":1' + "0" * 400 + ',"message":{"role":"user","content":"walrus bigint"}}\n'
        + "[" * 100_000 + "\n" + _msg("walrus after the deep line", 1_700_000_000_000))
    before = {p.name: p.read_bytes() for p in sessions.iterdir()}
    out = run_cli("-w", str(ws), "index", "--json")
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["skipped"] == [] and report["indexed"] == 3
    found = json.loads(run_cli("-w", str(ws), "search", "walrus", "--json", "--max-results", "20").stdout)
    text = " ".join(r["snippet"] for r in found["results"])
    for words in ("far future", "year one", "year 9999", "bigint", "after the deep line"):
        assert words in text, words
    assert {p.name: p.read_bytes() for p in sessions.iterdir()} == before  # transcripts never written


def test_questions_naming_impossible_dates_are_answered(make_workspace, run_cli):
    """Dates past the calendar's ends in a question ("99999999 days ago", "9999-12-31") used to fail
    the whole search with "date value out of range"; such a date now simply boosts nothing."""
    ws = make_workspace({"memory/2026-01-12.md": "- Billing moved to Kafka.\n", "MEMORY.md": "- Kafka notes\n",
                         "memory/9999-12-31.md": "- Kafka at the end of time\n",
                         "memory/0001-01-01.md": "- Kafka at the dawn of time\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("-w", str(ws), "index", env=env).returncode == 0
    for query in ("Kafka 99999999 days ago", "Kafka on 9999-12-31", "Kafka 9999999999 months ago",
                  "Kafka in December 0000", "Kafka on 0001-01-01, the day before yesterday",
                  "Kafka 9999-12-25 next week", "Kafka 3000000 weeks ago", "Kafka 0001-01-03 last week",
                  "Kafka on December 28", "Kafka on January 2"):
        out = run_cli("-w", str(ws), "search", query, "--json", "--explain", env=env)
        assert out.returncode == 0, (query, out.stderr)
        assert json.loads(out.stdout)["results"], query
    # A real date beside an impossible one still counts.
    out = run_cli("-w", str(ws), "search", "Kafka on 2026-01-12 or 99999999 days ago", "--json", "--explain",
                  env=env)
    assert out.returncode == 0, out.stderr
    assert "2026-01-12" in out.stdout


def test_tool_numbers_too_large_for_a_float_count_as_absent(make_workspace, keyword_config):
    """A JSON integer of 400 digits (valid JSON, and an MCP client may send it) made memory_search
    raise out of the dispatcher that never raises ("int too large to convert to float", an MCP
    error); OpenClaw's JavaScript reads it as Infinity, which counts as absent."""
    from memdir.api import Memory
    from memdir.tools import call_tool

    ws = make_workspace({"MEMORY.md": "Billing uses Kafka because ordering matters.\n"})
    huge = 10**400
    with Memory(ws, config=keyword_config) as mem:
        found = call_tool(mem, "memory_search", {"query": "kafka", "maxResults": huge, "minScore": -huge})
        assert [r["path"] for r in found.payload["results"]] == ["MEMORY.md"]
        got = call_tool(mem, "memory_get", {"path": "MEMORY.md", "from": huge, "lines": -huge})
        assert "error" not in got.payload and got.payload["text"].startswith("Billing uses Kafka")


def test_an_index_path_on_a_markdown_file_is_refused_and_the_note_kept(make_workspace, run_cli):
    """``MEMDIR_INDEX_PATH`` (or ``store.path``) pointing at MEMORY.md made the self-heal take the
    note for a damaged index: it was moved aside and MEMORY.md became an SQLite file, which was then
    indexed as a note.  A Markdown file is memory, never an index."""
    ws = make_workspace({"MEMORY.md": "# precious notes\n", "memory/2026-01-01.md": "- daily\n"})
    before = {p: p.read_bytes() for p in ws.rglob("*") if p.is_file()}
    env = {"MEMDIR_PROVIDER": "none"}
    for target in (ws / "MEMORY.md", ws / "memory" / "index.md", ws / "memory" / "2026-01-01.MD"):
        for command in (["index"], ["search", "notes"], ["status"]):
            out = run_cli("-w", str(ws), *command, env={**env, "MEMDIR_INDEX_PATH": str(target)})
            assert out.returncode == 1, (target, command, out.stderr)
            assert "memorySearch.store.path" in out.stderr and "MEMDIR_INDEX_PATH" in out.stderr, out.stderr
            assert "Traceback" not in out.stderr
    cfg = ws / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "store": {"path": str(ws / "MEMORY.md")}}}))
    out = run_cli("-w", str(ws), "index")
    assert out.returncode == 1 and str(cfg) in out.stderr, out.stderr
    assert {p: p.read_bytes() for p in ws.rglob("*") if p.is_file() and p != cfg} == before


def test_an_index_path_on_someone_elses_file_is_refused_and_the_file_left_in_place(make_workspace, run_cli,
                                                                                    tmp_path: Path):
    """An index path on a file that is no SQLite database and has no index name (``todo.txt``):
    the self-heal moved it aside as ``.corrupt-*`` and put an index in its place.  It is refused
    now and stays where it was; a damaged file with an index's name still heals."""
    ws = make_workspace({"MEMORY.md": "# notes\n- the kiwi plan\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    todo = tmp_path / "todo.txt"
    todo.write_bytes(b"buy milk\n" * 20)
    for command in (["index"], ["search", "kiwi"]):
        out = run_cli("-w", str(ws), *command, env={**env, "MEMDIR_INDEX_PATH": str(todo)})
        assert out.returncode == 1, (command, out.stdout, out.stderr)
        assert "not an SQLite index" in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert todo.read_bytes() == b"buy milk\n" * 20
    assert not [p for p in tmp_path.iterdir() if ".corrupt-" in p.name]  # (an empty todo.txt.lock is the writer lock)
    damaged = tmp_path / "index.db"
    damaged.write_bytes(b"garbage, not a database " * 200)
    out = run_cli("-w", str(ws), "search", "kiwi", env={**env, "MEMDIR_INDEX_PATH": str(damaged)})
    assert out.returncode == 0 and "kiwi" in out.stdout, out.stderr
    assert damaged.read_bytes().startswith(b"SQLite format 3\x00")
    assert any(p.name.startswith("index.db.corrupt-") for p in tmp_path.iterdir())


def _mirror_config(tmp_path: Path, mirror_path: str) -> Path:
    """A config file: keyword-only search, the long-term memory mirror on at ``mirror_path``."""
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"},
                               "longTermMemory": {"mirror": {"enabled": True, "path": mirror_path}}}))
    return cfg


def test_the_long_term_mirror_never_displaces_a_note_it_did_not_write(make_workspace, run_cli, tmp_path: Path):
    """With ``longTermMemory.mirror.path = "MEMORY.md"`` (or a note of one's own already at
    memory/long-term.md), the first ``ltm store`` moved the hand-written note aside to
    ``MEMORY.md.edited-<time>`` (not a .md file, so gone from search) and put the mirror in its place.
    A file memdir never wrote and that is no mirror is left alone, with a warning."""
    pytest.importorskip("lancedb")
    notes = {"MEMORY.md": "# precious notes\n- hand written\n", "memory/long-term.md": "- my own long-term list\n"}
    for mirror_path in ("MEMORY.md", "memory/long-term.md"):
        ws = make_workspace(notes, name=f"ws-{mirror_path.replace('/', '-')}")
        cfg = _mirror_config(tmp_path, mirror_path)
        out = run_cli("ltm", "store", "I prefer dark mode", "-w", str(ws), "-c", str(cfg))
        assert out.returncode == 0, out.stderr
        assert "not overwritten" in out.stderr and mirror_path in out.stderr, out.stderr
        assert {p: (ws / p).read_text() for p in notes} == notes
        assert not list(ws.rglob("*.edited-*"))


def test_the_long_term_mirror_never_moves_a_folder_aside(make_workspace, run_cli, tmp_path: Path):
    """``longTermMemory.mirror.path = ""`` named the workspace folder itself: the first ``ltm store``
    took it for an edited mirror, renamed the whole workspace to ``ws.edited-<time>`` and wrote the
    mirror as a file in its place ("." the same; "memory" moved every daily note out of search).  A
    blank path is a configuration error; a folder is never touched, with a warning."""
    pytest.importorskip("lancedb")
    notes = {"MEMORY.md": "# precious notes\n", "memory/2026-01-12.md": "- daily\n"}
    for mirror_path in ("", "."):
        ws = make_workspace(notes, name=f"ws{len(mirror_path)}{mirror_path.strip('.')}")
        cfg = _mirror_config(tmp_path, mirror_path)
        out = run_cli("ltm", "store", "I prefer dark mode", "-w", str(ws), "-c", str(cfg))
        if mirror_path:
            assert out.returncode == 0 and "is a folder, not a long-term memory mirror" in out.stderr, out.stderr
        else:
            assert out.returncode == 1 and "longTermMemory.mirror.path" in out.stderr, out.stderr
            assert "cannot be blank" in out.stderr
        assert ws.is_dir() and {p: (ws / p).read_text() for p in notes} == notes
        assert not list(tmp_path.rglob("*.edited-*")), mirror_path


def test_an_unknown_long_term_memory_provider_is_named_as_its_setting(make_workspace, run_cli, tmp_path: Path):
    """``longTermMemory.embedding.provider = " "`` failed ``ltm store`` with "unknown embedding
    provider ''" (a typo the same, without a word of the key), where ``memorySearch.provider`` is
    named; it is a configuration error naming ``longTermMemory.embedding.provider`` and its value."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"},
                               "longTermMemory": {"embedding": {"provider": " "}}}))
    out = run_cli("ltm", "store", "I prefer dark mode", "-w", str(ws), "-c", str(cfg))
    assert out.returncode == 1 and "configuration error: longTermMemory.embedding.provider = ' ': unknown" in out.stderr


def test_a_long_term_memory_folder_that_is_a_file_is_named(make_workspace, run_cli, tmp_path: Path):
    """``longTermMemory.dbPath`` on a file (a note) failed every ``ltm`` command with "[Errno 17] File
    exists: '…/MEMORY.md'" after two embedding-cache warnings; it names the setting, and the note is kept."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# precious notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"},
                               "longTermMemory": {"dbPath": str(ws / "MEMORY.md")}}))
    out = run_cli("ltm", "store", "I prefer dark mode", "-w", str(ws), "-c", str(cfg))
    assert out.returncode == 1 and "WARNING" not in out.stderr, out.stderr
    assert f"{ws / 'MEMORY.md'} is a file: point longTermMemory.dbPath at a folder" in out.stderr
    assert (ws / "MEMORY.md").read_text() == "# precious notes\n"


def test_bench_quality_names_the_bad_line_of_a_queries_file(tmp_path: Path, run_cli):
    """A malformed queries.jsonl gave "memdir: Expecting ',' delimiter: line 1 column 24" (which
    file?) or "'list' object has no attribute 'get'"; the error now names the file and line."""
    sample = tmp_path / "ds" / "s1"
    (sample / "workspace" / "memory").mkdir(parents=True)
    (sample / "workspace" / "memory" / "2026-01-01.md").write_text("- Billing uses Kafka.\n")
    good = json.dumps({"id": "q1", "query": "kafka", "relevant": [{"path": "memory/2026-01-01.md", "line": 1}]})
    for bad, why in (('{"id": 1, "query": "kafka"', "not valid JSON"), ("[1, 2]", "not a JSON object"),
                     ('{"id": "q2", "query": null}', "query"),
                     ('{"id": "q3", "query": "kafka", "relevant": [{"path": "memory/2026-01-01.md"}]}', "relevant")):
        (sample / "queries.jsonl").write_text(good + "\n\n" + bad + "\n")
        out = run_cli("bench", "quality", str(tmp_path / "ds"), "--mode", "keyword", env={"MEMDIR_PROVIDER": "none"})
        assert out.returncode == 1, (bad, out.stderr)
        assert f"{sample / 'queries.jsonl'}:3" in out.stderr and why in out.stderr, (bad, out.stderr)
        assert "Traceback" not in out.stderr


def test_an_index_path_on_a_device_is_named(make_workspace, run_cli, tmp_path: Path):
    """``MEMDIR_INDEX_PATH=/dev/null`` failed every command with a bare "disk I/O error"; errors
    name the index file, as for a folder."""
    ws = make_workspace({"MEMORY.md": "- Billing uses Kafka.\n"})
    for command in (["index"], ["search", "kafka"], ["status"]):
        out = run_cli("-w", str(ws), *command, env={"MEMDIR_PROVIDER": "none", "MEMDIR_INDEX_PATH": "/dev/null"})
        assert out.returncode == 1, (command, out.stderr)
        assert "/dev/null" in out.stderr and "not a regular file" in out.stderr, (command, out.stderr)
    assert Path("/dev/null").is_char_device()


def test_a_query_that_is_not_a_string_is_a_type_error(make_workspace, keyword_config):
    """``Memory.search(None)`` raised "'NoneType' object has no attribute 'strip'" from the query
    parser; a wrong type is now a TypeError saying so, as for ``append_daily``."""
    from memdir.api import Memory

    ws = make_workspace({"MEMORY.md": "- Billing uses Kafka.\n"})
    with Memory(ws, config=keyword_config) as mem:
        for query in (None, 123, b"kafka"):
            with pytest.raises(TypeError, match="query must be a string"):
                mem.search(query)  # type: ignore[arg-type]
        assert mem.search("kafka").results


def test_an_agents_section_of_the_wrong_shape_is_a_configuration_error(make_workspace, run_cli, tmp_path: Path):
    """``{"agents": {"list": "nope"}}`` failed searches with "'str' object has no attribute 'get'"."""
    ws = make_workspace({"MEMORY.md": "- Billing uses Kafka.\n"})
    cfg = tmp_path / "memdir.json"
    for agents, where in (({"list": "nope"}, "agents.list"), ([{"defaults": {}}], "agents"),
                          ({"defaults": "x"}, "agents.defaults"), ({"list": [{"id": "main", "memorySearch": 3}]},
                                                                   "memorySearch")):
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}, "agents": agents}))
        out = run_cli("-w", str(ws), "-c", str(cfg), "search", "kafka")
        assert out.returncode == 1, (agents, out.stdout)
        assert out.stderr.startswith("memdir: configuration error:") and where in out.stderr, (agents, out.stderr)
        assert str(cfg) in out.stderr, out.stderr


def test_a_session_entry_of_the_wrong_shape_is_named_and_never_rewritten(tmp_path: Path):
    """A hand-edited sessions.json entry (``"updatedAt": "soon"``) or one that is not UTF-8 raised a
    raw pydantic ValidationError / UnicodeDecodeError; both are a SessionStoreError naming the file
    (and the entry), and nothing rewrites the file."""
    from memdir.sessions.store import SessionStore, SessionStoreError

    folder = tmp_path / "sessions"
    folder.mkdir()
    index = folder / "sessions.json"
    for raw, named in ((b'{"agent:main:main": {"sessionId": "abc", "updatedAt": "soon"}}', "agent:main:main"),
                       (b'{"k": {"sessionId": "\xff"}}', "UTF-8")):
        index.write_bytes(raw)
        store = SessionStore(folder)
        with pytest.raises(SessionStoreError, match=str(index)) as err:
            store.load()
        assert named in str(err.value)
        with pytest.raises(SessionStoreError):
            store.open_session("agent:main:other")
        assert index.read_bytes() == raw


def test_a_stream_that_cannot_encode_a_note_gets_escapes_not_an_error(make_workspace, run_cli):
    """``PYTHONIOENCODING=ascii``: search printed "Memory search failed: 'ascii' codec can't
    encode ..." for a note with non-ASCII text.  It answers, with what ASCII cannot show escaped."""
    ws = make_workspace({"MEMORY.md": "# Notes\n- café plan for the kiwi 🥝\n"})
    env = {"MEMDIR_PROVIDER": "none", "PYTHONIOENCODING": "ascii"}
    out = run_cli("-w", str(ws), "search", "kiwi", env=env)
    assert out.returncode == 0, out.stderr
    assert "caf\\xe9 plan for the kiwi \\U0001f95d" in out.stdout
    got = run_cli("-w", str(ws), "get", "MEMORY.md", env=env)  # piped: the note as it is (UTF-8), not escapes
    assert got.returncode == 0 and got.stdout == "# Notes\n- café plan for the kiwi 🥝\n", got.stderr


def test_a_note_that_is_not_utf8_is_refused_in_one_line_and_nothing_is_written(make_workspace, run_cli,
                                                                                 state_dir: Path):
    """``memdir append -`` fed bytes that are not UTF-8 said "'utf-8' codec can't encode characters
    in position 0-1: surrogates not allowed" (or, in another locale, a decode error); the API took a
    lone surrogate to the same codec error.  Now both name the problem; the log is never touched."""
    ws = make_workspace({"MEMORY.md": "- plain note\n", "memory/2026-03-04.md": "- first\n"})
    for lang in ("C.UTF-8", "C"):
        proc = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "append", "-", "--date", "2026-03-04"],
                              input=b"\xff\xfe half a note \x80\n", capture_output=True, timeout=60,
                              env={**cli_env(state_dir), "MEMDIR_PROVIDER": "none", "LC_ALL": lang, "LANG": lang})
        err = proc.stderr.decode()
        assert proc.returncode == 1 and err.count("\n") == 1 and "not valid UTF-8" in err, err
    assert (ws / "memory" / "2026-03-04.md").read_bytes() == b"- first\n"
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        with pytest.raises(MemoryFileError, match="not valid UTF-8"):
            mem.append_daily("lone \ud83d surrogate", date="2026-03-04")
        assert mem.append_daily("caf\u00e9 \U0001f993 fine", date="2026-03-04") == "memory/2026-03-04.md"
    assert (ws / "memory" / "2026-03-04.md").read_text(encoding="utf-8") == "- first\ncaf\u00e9 \U0001f993 fine\n"


def test_a_min_score_of_nan_is_refused_not_read_as_zero(make_workspace, run_cli):
    """``--min-score nan`` (and ``search(min_score=nan)``) clamped to a floor of 0, so every hit
    passed a strict floor, while the same NaN in a config file is refused; now both refuse it."""
    ws = make_workspace({"MEMORY.md": "- the walrus budget\n", "memory/2026-01-02.md": "- walrus plans\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    bad = run_cli("-w", str(ws), "search", "walrus", "--min-score", "nan", env=env)
    # bad usage (exit 2) since the CLI checks --min-score is a number from 0 to 1, as argparse checks a type
    assert bad.returncode == 2 and bad.stdout == ""
    assert "--min-score: must be a number from 0 to 1, not nan" in bad.stderr
    ok = run_cli("-w", str(ws), "search", "walrus", "--min-score", "0", "--files", env=env)
    assert ok.returncode == 0 and sorted(ok.stdout.split()) == ["MEMORY.md", "memory/2026-01-02.md"]
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem, pytest.raises(ValueError, match="NaN"):
        mem.search("walrus", min_score=float("nan"))


def test_a_max_results_that_is_not_finite_is_refused_in_words(make_workspace):
    ws = make_workspace({"MEMORY.md": "- the walrus budget\n"})
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        for bad in (float("nan"), float("inf")):
            with pytest.raises(ValueError, match="max_results must be a whole number"):
                mem.search("walrus", max_results=bad)
        assert [r.path for r in mem.search("walrus", max_results=2.0).results] == ["MEMORY.md"]


def test_get_arguments_of_the_wrong_type_are_named(make_workspace, keyword_config):
    """``Memory.get(123)`` raised "'int' object has no attribute 'strip'" and ``from_line=nan``
    "cannot convert float NaN to integer"; each now names the argument (floats still truncate)."""
    from memdir.api import Memory

    ws = make_workspace({"MEMORY.md": "line 1\nline 2\n"})
    with Memory(ws, config=keyword_config) as mem:
        for path in (123, b"MEMORY.md", None):
            with pytest.raises(TypeError, match="path must be a string"):
                mem.get(path)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="from_line must be a finite number"):
            mem.get("MEMORY.md", from_line=float("nan"))
        for bad in ("2", [1], True):
            with pytest.raises(TypeError, match="lines must be an integer"):
                mem.get("MEMORY.md", lines=bad)  # type: ignore[arg-type]
        assert mem.get("MEMORY.md", from_line=2.9, lines=1).text == "line 2"  # type: ignore[arg-type]


def test_a_question_holding_a_number_of_thousands_of_digits_is_answered(make_workspace, run_cli):
    """Read as an int to tell a year from a number, a run of 4,301 digits or more raised
    "Exceeds the limit (4300 digits) for integer string conversion": the whole search failed."""
    ws = make_workspace({"memory/orders.md": "# Orders\nthe okapi order shipped\n"})
    proc = run_cli("search", "okapi order " + "7" * 5000, "--json", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    found = json.loads(proc.stdout)
    assert [r["path"] for r in found["results"]] == ["memory/orders.md"]


def test_a_long_path_of_combining_marks_is_refused_in_linear_time(tmp_path: Path) -> None:
    """memory_get tries a missing non-ASCII path in its other Unicode forms; a hostile path of
    80,000 alternating combining marks (an MCP request may hold 4 MB) took 17 s to put in NFC and
    NFD, each in the square of its length.  A path longer than any the OS opens names no file in
    any form: it is refused at once.  In a subprocess, so the old behaviour fails on the timeout."""
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- hello\n")
    code = ("import sys\nfrom memdir.api import Memory\nfrom memdir.workspace import PathError\n"
            "with Memory(sys.argv[1], config={'memorySearch': {'provider': 'none'}}) as mem:\n"
            "    try:\n"
            "        mem.get('memory/a' + '\\u0301\\u0316' * 200_000 + '.md')\n"
            "    except PathError as exc:\n"
            "        print('refused:', str(exc)[:32])\n")
    done = python_child(code, str(ws), state_dir=tmp_path / "state", timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("refused: cannot access memory/a"), done.stdout
