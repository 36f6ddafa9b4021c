"""The library, tools and ``--json`` contracts as an integrator meets them: odd arguments and odd
states must give a clear answer (a payload, a named error, one JSON document), never a traceback."""

from __future__ import annotations

import copy
import json
import os
import pickle
import re
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from helpers import cli_env
from memdir import Memory
from memdir.config import ConfigError
from memdir.errors import MemdirError
from memdir.tools import call_tool, call_tool_payload, chat_type_from_session_key


def test_a_tool_name_or_session_key_that_is_not_a_string_is_a_payload(make_workspace, keyword_config):
    """A model's tool name 123 raised AttributeError out of call_tool, which never raises; a session
    key 5 failed the search as an "embedding/provider error"."""
    ws = make_workspace({"MEMORY.md": "billing uses Kafka\n"})
    with Memory(ws, config=keyword_config) as mem:
        for name in (123, ["memory_search"], {"name": "memory_get"}):
            result = call_tool(mem, name, {"query": "kafka"})  # type: ignore[arg-type]
            assert result.is_error and result.payload["error"].startswith(f"unknown tool: {name!r}")
        assert call_tool_payload(mem, 7, {})["error"].startswith("unknown tool: 7")  # type: ignore[arg-type]
        found = call_tool(mem, "memory_search", {"query": "kafka"}, session_key=5)  # type: ignore[arg-type]
    assert not found.is_error and found.payload["results"][0]["path"] == "MEMORY.md"
    assert chat_type_from_session_key(b"agent:main:group:g1") == "direct"  # type: ignore[arg-type]


def test_ltm_export_with_json_prints_one_json_document(make_workspace, run_cli):
    """Without --out, ``ltm export --json`` printed the bare Markdown: no JSON reader could parse it."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    done = run_cli("--workspace", str(ws), "ltm", "export", "--json", check=True)
    exported = json.loads(done.stdout)
    assert exported["path"] is None and exported["memories"] == 0
    assert exported["text"].startswith("# Long-term memory\n")


def test_a_memory_opened_on_a_relative_workspace_stays_there_after_chdir(tmp_path: Path, monkeypatch,
                                                                          keyword_config):
    """Relative, the workspace followed the process's cwd while the index stayed the first one's:
    after a chdir a search was refused, and get read and append wrote the other folder's notes."""
    for name in ("a", "b"):
        (tmp_path / name / "ws" / "memory").mkdir(parents=True)
        (tmp_path / name / "ws" / "MEMORY.md").write_text(f"zebra note of {name}\n")
    monkeypatch.chdir(tmp_path / "a")
    with Memory("ws", state_dir="state", config=keyword_config) as mem:
        assert mem.search("zebra").results[0].snippet == "zebra note of a\n"
        monkeypatch.chdir(tmp_path / "b")
        assert mem.workspace == tmp_path / "a" / "ws" and mem.index_path.is_relative_to(tmp_path / "a" / "state")
        assert mem.search("zebra").results[0].snippet == "zebra note of a\n"
        assert mem.get("MEMORY.md").text == "zebra note of a\n"
        rel = mem.append_daily("written after the chdir")
    assert (tmp_path / "a" / "ws" / rel).read_text() == "written after the chdir\n"
    assert os.listdir(tmp_path / "b" / "ws" / "memory") == [] and not (tmp_path / "b" / "state").exists()


def test_a_workspace_given_as_bytes_is_that_folder_and_a_number_is_named(make_workspace, keyword_config):
    """``str(b"/ws")`` made the workspace a folder named "b'/ws'" ("does not exist")."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    with Memory(os.fsencode(ws), config=keyword_config) as mem:
        assert mem.workspace == ws and mem.get("MEMORY.md").text == "kiwi\n"
    with pytest.raises(ConfigError, match=r"^workspace must be a path \(a str or os.PathLike\), not int$"):
        Memory(123, config=keyword_config)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^state dir must be a path .* not list$"):
        Memory(ws, state_dir=["x"], config=keyword_config)  # type: ignore[arg-type]


def test_a_state_dir_that_is_a_file_is_named_not_told_to_run_again(tmp_path: Path, make_workspace, keyword_config):
    """A file where the state folder should be was reported as "its folder was removed while it
    was being opened ...: run the command again", which never helps."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    (tmp_path / "state-file").write_text("not a folder\n")
    with Memory(ws, state_dir=tmp_path / "state-file", config=keyword_config) as mem:
        with pytest.raises(MemdirError, match=r"state-file is not a folder, so the index's folder .* cannot be made"):
            mem.search("kiwi")
        assert mem.get("MEMORY.md").text == "kiwi\n"  # reading notes needs no index
    assert (tmp_path / "state-file").read_text() == "not a folder\n"


def test_pickling_or_copying_a_memory_is_refused_in_words(make_workspace, keyword_config):
    """multiprocessing pickles its arguments: a Memory failed with "cannot pickle '_thread.RLock'
    object"; copy.copy made a twin sharing the index connection, which closing either one closed."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    with Memory(ws, config=keyword_config) as mem:
        mem.search("kiwi")
        for copier in (pickle.dumps, copy.copy, copy.deepcopy):
            with pytest.raises(TypeError, match=r"^a Memory cannot be pickled or copied .* make one in each process"):
                copier(mem)
        assert mem.search("kiwi").results[0].path == "MEMORY.md"


def test_get_takes_an_absolute_path_spelled_through_a_symlinked_workspace(tmp_path: Path, keyword_config):
    """The workspace is resolved, so a path spelled as the workspace was given (a symlink to it,
    macOS's /tmp) was "path not allowed"; what is below the workspace is checked as before."""
    real = tmp_path / "real"
    (real / "memory").mkdir(parents=True)
    (real / "MEMORY.md").write_text("kiwi\n")
    (tmp_path / "outside.md").write_text("secret\n")
    (tmp_path / "link").symlink_to(real)
    os.symlink(tmp_path / "outside.md", real / "memory" / "leak.md")
    with Memory(tmp_path / "link", config=keyword_config) as mem:
        assert mem.workspace == real
        for spelled in (f"{tmp_path}/link/MEMORY.md", f"{tmp_path}/link/memory/../MEMORY.md", f"{real}/MEMORY.md"):
            got = mem.get(spelled)
            assert (got.path, got.text) == ("MEMORY.md", "kiwi\n"), spelled
        for refused in (f"{tmp_path}/link/../outside.md", f"{tmp_path}/link/memory/leak.md"):
            payload = call_tool_payload(mem, "memory_get", {"path": refused})
            assert payload["disabled"] is True and "secret" not in json.dumps(payload), refused


def test_json_given_a_value_fails_with_a_json_document(make_workspace, run_cli):
    """``--json=1`` is bad usage (exit 2); with it the failure came on stderr only, stdout empty."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    for flag in ("--json=1", "--js=true"):
        done = run_cli("--workspace", str(ws), "search", "kiwi", flag)
        assert done.returncode == 2
        assert json.loads(done.stdout)["error"] == {"kind": "usage", "exitCode": 2,
                                                    "message": "argument --json: ignored explicit argument "
                                                               f"'{flag.split('=')[1]}'"}


def test_a_writer_lock_freed_just_as_a_sync_looked_is_taken_without_a_notice(make_workspace, keyword_config):
    """Threads sharing one Memory: another thread's sync ended between this sync's first try for
    the writer lock and its look at the holder, which it then reported as "waiting for another
    process (the lock does not say which)"."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    notices: list[str] = []
    with Memory(ws, config=keyword_config, notice=notices.append) as mem:
        mem.sync()
        lock = mem.indexer.lock
        tries: list[float | None] = []
        real_acquire = lock.acquire

        def acquire(timeout: float | None = None) -> bool:
            tries.append(timeout)
            return False if len(tries) == 1 else real_acquire(timeout)  # held at the first try, free since

        lock.acquire = acquire  # type: ignore[method-assign]
        (ws / "MEMORY.md").write_text("kiwi and lime\n")
        assert mem.sync().indexed == 1
    assert tries[:2] == [0, 0] and notices == []


def test_one_tool_name_given_as_a_string_is_that_tool_for_schemas_and_servers(make_workspace, keyword_config):
    """As for the prompt section: openai_tools("memory_search") was refused letter by letter, and
    an MCP server given tools="memory_get" served no tool at all."""
    pytest.importorskip("mcp")
    from memdir.mcp_server import build_server
    from memdir.tools import anthropic_tools, openai_tools

    assert openai_tools("memory_search") == openai_tools(["memory_search"])
    assert [t["name"] for t in anthropic_tools("memory_get")] == ["memory_get"]
    with pytest.raises(ValueError, match=r"^unknown memdir tool\(s\): 5 \(known: memory_search, "):
        openai_tools([5])  # type: ignore[list-item]
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    with Memory(ws, config=keyword_config) as mem:
        assert build_server(mem, tools="memory_get").tool_names == ["memory_get"]  # type: ignore[arg-type]


def test_threads_asking_for_long_term_memory_at_once_share_one_store(make_workspace, keyword_config):
    """Each thread asking for ``mem.long_term`` at the same moment opened its own LanceDB store and
    embedder, and ``close`` closed only the last one."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    cfg = {**keyword_config, "longTermMemory": {"embedding": {"provider": "none"}}}
    opened: list[object] = []
    start = threading.Barrier(6)
    with Memory(ws, config=cfg) as mem:
        def ask() -> None:
            start.wait(10)
            opened.append(mem.long_term)

        threads = [threading.Thread(target=ask) for _ in range(6)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert len(opened) == 6 and len({id(ltm) for ltm in opened}) == 1


def test_async_memory_given_a_memory_and_other_arguments_says_so(make_workspace, keyword_config):
    """``AsyncMemory(other_ws, memory=mem)`` used ``mem`` and dropped the rest without a word."""
    from memdir.aio import AsyncMemory

    ws, other = make_workspace({"MEMORY.md": "kiwi\n"}), make_workspace({}, name="other")
    with Memory(ws, config=keyword_config) as mem:
        for args, kwargs in (((other,), {}), ((), {"config": keyword_config})):
            with pytest.raises(TypeError, match=r"^AsyncMemory takes a Memory \(memory=\) or Memory's arguments"):
                AsyncMemory(*args, memory=mem, **kwargs)
        assert AsyncMemory(memory=mem).memory is mem


def test_search_limits_of_the_wrong_type_are_named(make_workspace, keyword_config):
    """``search(max_results="abc")`` said "invalid literal for int() with base 10: 'abc'" and a
    NumPy NaN floor passed every hit; each now names the argument, as ``get`` does."""
    np = pytest.importorskip("numpy")
    ws = make_workspace({"MEMORY.md": "- the walrus budget\n"})
    with Memory(ws, config=keyword_config) as mem:
        for name, bad in (("max_results", "abc"), ("max_results", [3]), ("max_results", True), ("min_score", "0.1"),
                          ("min_score", {"x": 1})):
            with pytest.raises(TypeError, match=rf"^{name} must be a number, not {type(bad).__name__}$"):
                mem.search("walrus", **{name: bad})
        with pytest.raises(ValueError, match=r"min_score must be a number .*NaN"):
            mem.search("walrus", min_score=np.float32("nan"))
        assert [r.path for r in mem.search("walrus", max_results=np.int64(1), min_score=np.float64(0)).results] == [
            "MEMORY.md"]
        assert mem.get("MEMORY.md", from_line=np.int64(1), lines=np.float32(1.5)).text == "- the walrus budget"


def test_a_workspace_given_beside_resolved_settings_is_refused_not_dropped(make_workspace, tmp_path: Path,
                                                                           monkeypatch):
    """``Memory(ws, config=Settings())`` took the Settings' workspace (the current folder) and
    dropped ``ws`` without a word: searches and appends went to whatever folder Python ran in."""
    from memdir.config import Settings, load_config

    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    monkeypatch.chdir(tmp_path)
    for config in (Settings(), load_config(workspace=tmp_path)):
        for named in ({"workspace": ws}, {"agent_id": "ops"}, {"state_dir": tmp_path / "s"}):
            args = (named.pop("workspace"),) if "workspace" in named else ()
            with pytest.raises(TypeError, match=r"^workspace, agent_id and state_dir are taken from the settings"):
                Memory(*args, config=config, **named)
    with Memory(config=load_config(workspace=ws, overrides={"memorySearch": {"provider": "none"}})) as mem:
        assert mem.workspace == ws and mem.get("MEMORY.md").text == "kiwi\n"
    assert list(tmp_path.glob("memory/*.md")) == []


def test_an_append_whose_confirmation_cannot_be_written_says_the_note_is_in(make_workspace, state_dir):
    """stdout on a full disk: the note was appended, but the command failed with a bare "No space
    left on device", which a script reads as "not appended" and runs again (the note twice)."""
    if not os.path.exists("/dev/full"):
        pytest.skip("needs /dev/full")
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    for extra in ((), ("--json",)):
        with open("/dev/full", "w") as full:
            done = subprocess.run([sys.executable, "-m", "memdir", "-w", str(ws), "append", "the note", *extra],
                                  stdout=full, stderr=subprocess.PIPE, text=True, env=cli_env(state_dir), timeout=60)
        assert done.returncode == 1
        assert re.fullmatch(r"memdir: appended to memory/\d{4}-\d\d-\d\d\.md, but this could not be said on stdout: "
                            r"No space left on device \(do not append the note again\)\n", done.stderr), done.stderr
    (log,) = (ws / "memory").iterdir()
    assert log.read_text() == "the note\nthe note\n"


def test_a_notice_that_is_not_a_function_is_refused_at_once(make_workspace, keyword_config):
    """``Memory(ws, notice=logging.getLogger())`` was taken, and the first thing to say (an index
    healed, a writer waited for) failed that operation with "'Logger' object is not callable"."""
    import logging

    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    with pytest.raises(TypeError, match=r"^notice must be a function taking the message, e.g. logger.warning, "
                                        r"not Logger$"):
        Memory(ws, config=keyword_config, notice=logging.getLogger("x"))  # type: ignore[arg-type]
    told: list[str] = []
    with Memory(ws, config=keyword_config, notice=told.append) as mem:
        assert mem.search("kiwi").results[0].path == "MEMORY.md"


class _Provider:
    """A custom embedding provider with every member memdir reads (dims as a property)."""

    id, model, provider_key, max_input_bytes = "mine", "mine-4", "mine-key", 8000

    @property
    def dims(self) -> int:
        return 4

    def embed_query(self, text: str) -> list[float]:
        return [1.0, 0.0, 0.0, 0.0]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [[1.0, 0.0, 0.0, 0.0] for _ in texts]


def test_a_custom_provider_missing_members_is_named_at_once(make_workspace):
    """A provider without ``max_input_bytes`` was taken, then every sync failed with "'P' object has
    no attribute 'max_input_bytes'" and every search answered stale from an empty index."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})

    class Partial:
        id, model = "partial", "p-1"

        def embed_batch(self, texts: list[str]) -> list[list[float]]:
            return [[1.0] for _ in texts]

    with pytest.raises(TypeError, match=r"^provider lacks provider_key, max_input_bytes, dims, embed_query: an "
                                        r"embedding provider has id, model, "):
        Memory(ws, provider=Partial())
    with Memory(ws, provider=_Provider()) as mem:
        assert mem.sync().indexed == 1 and mem.search("kiwi").results[0].path == "MEMORY.md"


def test_a_relative_store_path_stays_where_it_was_given_after_chdir(tmp_path: Path, make_workspace, monkeypatch):
    """``store.path = "idx/{agentId}.sqlite"`` followed the cwd: after a chdir ``status`` looked for the
    index elsewhere ("indexExists": false, 0 files) while searches used the one opened first."""
    ws = make_workspace({"MEMORY.md": "kiwi\n"})
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
    monkeypatch.chdir(tmp_path / "a")
    config = {"memorySearch": {"provider": "none", "store": {"path": "idx/{agentId}.sqlite"}}}
    with Memory(ws, agent_id="ops", config=config) as mem:
        mem.sync()
        monkeypatch.chdir(tmp_path / "b")
        status = mem.status()
    assert status["indexPath"] == str(tmp_path / "a" / "idx" / "ops.sqlite")
    assert status["indexExists"] is True and status["files"] == 1
    assert not (tmp_path / "b" / "idx").exists()


def test_a_question_of_a_hundred_thousand_words_is_parsed_in_linear_time():
    """Each word was looked up in the list of those kept so far: a 1 MB question (an agent pasting
    a document into memory_search) held a search for five minutes; 60 s here is a wide margin
    over the second it takes now."""
    import random
    import string

    from memdir.query import extract_keywords, keyword_terms

    rng = random.Random(7)
    words = list(dict.fromkeys("".join(rng.choice(string.ascii_lowercase) for _ in range(8)) for _ in range(100_000)))
    question = " ".join(words)
    found: dict[str, list[str]] = {}
    worker = threading.Thread(target=lambda: found.update(keywords=extract_keywords(question),
                                                          terms=keyword_terms(question)), daemon=True)
    worker.start()
    worker.join(60)
    assert not worker.is_alive(), "parsing the question took over a minute"
    assert found["keywords"] == words and found["terms"] == words[:64]


def test_sync_waits_of_nan_or_the_wrong_type_are_named(make_workspace, keyword_config):
    """``sync(lock_timeout=nan)`` waited for another writer as if unbounded; a string failed deep in
    the lock with a TypeError about ``float`` and ``str``."""
    ws = make_workspace({"MEMORY.md": "- the walrus budget\n"})
    with Memory(ws, config=keyword_config) as mem:
        for name, unit in (("lock_timeout", "a number of seconds"), ("deadline", r"a time\.monotonic\(\) value")):
            with pytest.raises(ValueError, match=rf"^{name} must be {unit} or None, not NaN$"):
                mem.sync(**{name: float("nan")})
            with pytest.raises(TypeError, match=rf"^{name} must be {unit} or None, not str$"):
                mem.sync(**{name: "5"})
        assert mem.sync(lock_timeout=5).indexed == 1


def test_every_error_memdir_raises_on_purpose_is_a_memdir_error(make_workspace, keyword_config, tmp_path):
    """A bad setting, a refused ``get`` path and a refused append were ``ValueError``s only, so a
    host catching ``MemdirError`` (as the docstrings invite) let them through."""
    from memdir.errors import MemdirError

    ws = make_workspace({"MEMORY.md": "- kiwi\n"})
    with pytest.raises(MemdirError, match="userTimezone") as bad_setting:
        Memory(ws, config={**keyword_config, "userTimezone": "Mars/Olympus"})
    with Memory(ws, config=keyword_config) as mem:
        with pytest.raises(MemdirError) as outside:
            mem.get("../../etc/passwd")
        with pytest.raises(MemdirError) as refused:
            mem.append_daily("   ")  # nothing to write
    for caught in (bad_setting, outside, refused):
        assert isinstance(caught.value, ValueError)  # what callers caught before stays caught


def test_the_objects_the_readme_hands_out_are_typed_as_what_they_are():
    """py.typed is shipped, and a host's ``def recall(mem) -> str | None: return
    mem.long_term.auto_recall(q)`` failed mypy --strict ('Returning Any from function declared to
    return ...'): long_term (a LongTermMemory) and watch() (a Watcher) were annotated Any."""
    import typing

    import memdir.api
    import memdir.ltm.memory
    import memdir.sync
    import memdir.upkeep
    import memdir.watch

    names = {**vars(memdir.sync), **vars(memdir.api), **vars(memdir.ltm.memory), **vars(memdir.watch)}
    assert typing.get_type_hints(Memory.long_term.fget, globalns=names)["return"] is memdir.ltm.memory.LongTermMemory
    assert typing.get_type_hints(Memory.watch, globalns=names)["return"] is memdir.watch.Watcher
    live = typing.get_type_hints(Memory.start_live_sync, globalns=names)["return"]
    assert live == memdir.watch.Watcher | None


def test_long_term_embedding_lock_and_session_errors_are_memdir_errors(make_workspace, keyword_config, tmp_path):
    """A refused long-term memory call (LtmError), a provider that is down (EmbeddingError), a
    writer lock held past ``lock_timeout`` (LockTimeout) and a damaged sessions.json
    (SessionStoreError) were RuntimeErrors or TimeoutErrors only: each went past a host's
    ``except MemdirError``."""
    from memdir.errors import MemdirError
    from memdir.sessions import SessionStore

    ws = make_workspace({"MEMORY.md": "- kiwi\n", "memory/2026-01-02.md": "- plum\n"})
    down = {"memorySearch": {**keyword_config["memorySearch"], "remote": {"maxRetries": 0}},
            "longTermMemory": {"embedding": {"provider": "openai", "apiKey": "k", "baseUrl": "http://127.0.0.1:9/v1"}}}
    caught: list[BaseException] = []
    with Memory(ws, config=down) as mem:
        for call in (lambda: mem.long_term.store(""), lambda: mem.long_term.store("I prefer green tea")):
            with pytest.raises(MemdirError) as refused:
                call()
            caught.append(refused.value)
        holding, release = threading.Event(), threading.Event()

        def hold(done: int, total: int, label: str) -> None:  # called while the sync holds the lock
            holding.set()
            release.wait(30)

        writer = threading.Thread(target=lambda: mem.sync(progress=hold))
        writer.start()
        try:
            assert holding.wait(30)
            with Memory(ws, config=keyword_config) as other, pytest.raises(MemdirError) as locked:
                other.sync(lock_timeout=0.1)
            caught.append(locked.value)
        finally:
            release.set()
            writer.join(30)
    (tmp_path / "sessions").mkdir()
    (tmp_path / "sessions" / "sessions.json").write_text("{not json")
    with pytest.raises(MemdirError) as damaged:
        SessionStore(tmp_path / "sessions").load()
    caught.append(damaged.value)
    assert [type(e).__name__ for e in caught] == ["LtmError", "RemoteEmbeddingError", "LockTimeout",
                                                  "SessionStoreError"]
    assert isinstance(caught[2], TimeoutError)  # what callers caught before stays caught


def test_a_host_provider_that_never_answers_a_query_does_not_keep_the_process_alive(tmp_path: Path):
    """The search gives up on a query embedding after memorySearch.query.embedTimeoutMs and answers
    with keywords, but the pool thread asking a host's ``provider=`` was joined when the interpreter
    exited: a provider that never answered kept the host from exiting, close() or not."""
    from helpers import python_child

    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "MEMORY.md").write_text("- kiwi orchard\n")
    code = textwrap.dedent("""
        import sys, time
        from memdir import Memory

        class Stuck:
            id, model, provider_key, max_input_bytes, dims = "host", "h-1", "host:h-1", 8000, 2
            hang = False
            def embed_batch(self, texts): return [[1.0, 0.0] for _ in texts]
            def embed_query(self, text):
                while Stuck.hang: time.sleep(1)
                return [1.0, 0.0]

        with Memory(sys.argv[1], provider=Stuck(), config={"memorySearch": {"query": {"embedTimeoutMs": 200}}}) as mem:
            mem.sync()
            Stuck.hang = True
            found = mem.search("kiwi")
        print(found.mode, found.results[0].path)
    """)
    done = python_child(code, str(tmp_path / "ws"), state_dir=tmp_path / "state", timeout=60)  # (before: for ever)
    assert done.returncode == 0 and done.stdout.split() == ["fts-only", "MEMORY.md"], done.stderr


def test_postgres_without_its_extra_is_a_memdir_error(make_workspace, tmp_path: Path):
    """store.driver = "postgres" without the postgres extra raised a bare ImportError, past a host's
    ``except MemdirError`` (long-term memory without its extra is one)."""
    from helpers import python_child

    ws = make_workspace({"MEMORY.md": "- kiwi\n"})
    code = textwrap.dedent("""
        import sys
        sys.modules["psycopg"] = None  # (as where the extra is not installed)
        from memdir import Memory
        from memdir.errors import MemdirError
        try:
            Memory(sys.argv[1], config={"memorySearch": {"store": {"driver": "postgres", "dsn": "postgresql://x@h/db"}}}).search("kiwi")
        except MemdirError as exc:
            print(isinstance(exc, ImportError), exc)
    """)
    done = python_child(code, str(ws), state_dir=tmp_path / "state")
    assert done.stdout.startswith("True PostgreSQL support needs the postgres extra: pip install 'memdir[postgres]'"), (
        done.stdout, done.stderr)
