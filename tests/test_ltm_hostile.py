"""Long-term memory under hostile conditions: a full disk, a damaged or unwritable embedding
cache, secrets in what would be captured or stored.  Real LanceDB in temp folders; the file
size limit (RLIMIT_FSIZE, a full disk as a process sees it) is set in a subprocess."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from helpers import ReadOnlyFolder, cli_env
from ltm_fakes import AxisProvider
from memdir.config import load_config
from memdir.ltm import LongTermMemory, LtmError, ModelMismatchError
from memdir.ltm.capture import capture_candidates, should_capture
from memdir.tools import call_tool

pytest.importorskip("lancedb")
TESTS = Path(__file__).parent


def make(tmp_path: Path, provider: Any = None, *, cache: bool = True) -> LongTermMemory:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    settings = load_config(workspace=ws, state_dir=tmp_path / "state", agent_id="main",
                           overrides={"memorySearch": {"cache": {"enabled": cache}}}).settings
    return LongTermMemory(settings, provider=provider or AxisProvider())


# The script stores one memory, imports one edited bullet or re-embeds with model axis-2, under a
# file size limit; it prints the outcome as JSON.
WRITE_UNDER_LIMIT = textwrap.dedent("""
    import json, resource, signal, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory
    tmp, limit, action = Path(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    settings = load_config(workspace=tmp / "ws", state_dir=tmp / "state", agent_id="main",
                           overrides={"memorySearch": {"cache": {"enabled": False}}}).settings
    ltm = LongTermMemory(settings, provider=AxisProvider(model="axis-2" if action == "reembed" else "axis-1"))
    ltm.list()  # open the table before the limit
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))
    try:
        if action == "import":
            print(json.dumps({"updated": ltm.import_markdown(sys.argv[5]).updated}))
        elif action == "reembed":
            print(json.dumps({"reembedded": ltm.reembed()}))
        else:
            print(json.dumps({"action": ltm.store("The user keeps bees in the garden", category="fact").action}))
    except Exception as exc:
        print(json.dumps({"error": str(exc)}))
""")


def write_under_limit(tmp_path: Path, limit: int, action: str = "store", *markdown: str) -> dict[str, Any]:
    done = subprocess.run([sys.executable, "-c", WRITE_UNDER_LIMIT, str(TESTS), str(tmp_path), str(limit), action,
                           *markdown],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path / "state"))
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_store_cut_short_by_a_full_disk_fails_and_loses_nothing(tmp_path: Path) -> None:
    """LanceDB commits a data file a file size limit cut short, without an error: the store said
    "created", and the next command found the table damaged and that memory gone."""
    with make(tmp_path, cache=False) as ltm:
        before = {ltm.store(f"The user's project number {i} is called P{i}", category="fact").record.id
                  for i in range(3)}
        size = max(p.stat().st_size for p in (ltm.db_path / "memories.lance" / "data").iterdir())
    # Room for most of a data file but not all of it (the writer's last flush is cut short).
    outcome = write_under_limit(tmp_path, size - 500)
    assert "could not be written" in outcome.get("error", ""), outcome
    notices: list[str] = []
    with make(tmp_path, cache=False) as ltm:
        ltm.notice = notices.append
        assert {r.id for r in ltm.list()} == before
        assert ltm.recoveries == [] and notices == []
        assert not list(ltm.db_path.glob("memories.lance.damaged-*"))
        assert ltm.store("The user keeps bees in the garden", category="fact").action == "created"
        assert len(ltm.list()) == 4


def test_an_import_editing_a_memory_on_a_full_disk_keeps_the_memory(tmp_path: Path) -> None:
    """An edited bullet was applied as a delete then an add: when the add failed (or the process
    died between them) the memory was gone.  Now one commit, or nothing."""
    with make(tmp_path, cache=False) as ltm:
        kept = ltm.store("The user's project is called Apollo", category="fact").record
        size = max(p.stat().st_size for p in (ltm.db_path / "memories.lance" / "data").iterdir())
    edited = f"- [fact] The user's project is called Artemis (id: {kept.id})"
    outcome = write_under_limit(tmp_path, size - 500, "import", edited)
    assert "could not be written" in outcome.get("error", ""), outcome
    with make(tmp_path, cache=False) as ltm:
        assert [(r.id, r.text) for r in ltm.list()] == [(kept.id, kept.text)]
        assert ltm.recoveries == []
        report = ltm.import_markdown(edited)
        assert report.updated == [kept.id]
        assert [(r.id, r.text) for r in ltm.list()] == [(kept.id, "The user's project is called Artemis")]


def test_a_reembed_cut_short_by_a_full_disk_keeps_the_old_table(tmp_path: Path) -> None:
    """The overwrite was committed with its data file cut short and ``reembed`` reported success;
    the next command "recovered" the rows of the old model into a table labelled with the new one."""
    texts = [f"The user's project number {i} is called P{i}" for i in range(20)]
    with make(tmp_path, cache=False) as ltm:
        ids = {ltm.store(t, category="fact").record.id for t in texts}
    probe = tmp_path / "probe"
    shutil.copytree(tmp_path / "state", probe / "state")
    with make(probe, AxisProvider(model="axis-2"), cache=False) as ltm:  # how big the rewritten file is
        ltm.reembed()
        size = max(p.stat().st_size for p in (ltm.db_path / "memories.lance" / "data").iterdir())
    outcome = write_under_limit(tmp_path, size - 500, "reembed")
    assert "could not be written" in outcome.get("error", ""), outcome
    with make(tmp_path, cache=False) as ltm:  # still the old model's table, every row of it
        assert {r.id for r in ltm.list()} == ids and ltm.recoveries == []
        assert ltm.table.identity()["model"] == "axis-1"


@pytest.mark.parametrize("damage", ["garbage", "directory"])
def test_a_damaged_or_unopenable_embedding_cache_never_stops_long_term_memory(tmp_path: Path, damage: str) -> None:
    """The cache only saves embedding calls: a garbled cache file (or one that cannot be opened,
    like a read-only folder's) failed every store, search and auto-recall with a SQLite error."""
    provider = AxisProvider()
    with make(tmp_path, provider) as ltm:
        ltm.store("The user prefers green tea", category="preference")
        cache = ltm.db_path / "embedding-cache.sqlite"
    for suffix in ("-wal", "-shm"):
        Path(f"{cache}{suffix}").unlink(missing_ok=True)
    if damage == "garbage":
        cache.write_bytes(os.urandom(8192))
    else:
        cache.unlink()
        cache.mkdir()
    with make(tmp_path, provider) as ltm:
        assert ltm.store("The user lives in Porto", category="fact").action == "created"
        assert [h.text for h in ltm.search("The user lives in Porto", min_score=0.99)] == ["The user lives in Porto"]
        assert ltm.auto_recall("The user prefers green tea") is not None
        assert len(ltm.list()) == 2
    if damage == "garbage":  # the garbled file was replaced by a working cache
        with make(tmp_path, provider) as ltm:
            ltm.search("which city?")
            calls = len(provider.calls)
            ltm.search("which city?")
            assert len(provider.calls) == calls


@pytest.mark.parametrize("damage", ["odd-length", "short", "nan"])
def test_a_damaged_embedding_cache_row_is_embedded_again_not_trusted(tmp_path: Path, damage: str) -> None:
    """A cache row whose bytes changed (a damaged page SQLite cannot see, a hand edit) was taken as
    it was: a length that is no number of floats failed every store and search of that text with
    NumPy's "buffer size must be a multiple of element size", a short one was said to be a model of
    other dimensions ("run ltm reembed"), and NaN made the search "No matches." and the store a
    bare "lance error: … Vector column contains NaN values"."""
    import sqlite3
    import struct

    provider = AxisProvider()
    text = "The user prefers green tea"
    with make(tmp_path, provider) as ltm:
        ltm.store(text, category="preference")
        assert [h.text for h in ltm.search(text)] == [text]  # its query vector is cached too
        cache = ltm.db_path / "embedding-cache.sqlite"
    blob = {"odd-length": b"\x01" * 5, "short": struct.pack("<10f", *[0.3] * 10),
            "nan": struct.pack("<64f", *[float("nan")] * 64)}[damage]
    with sqlite3.connect(cache) as conn:
        assert conn.execute("UPDATE embedding_cache SET embedding = ?", (blob,)).rowcount >= 2
    conn.close()
    with make(tmp_path, provider) as ltm:
        assert [h.text for h in ltm.search(text, min_score=0.99)] == [text]
        assert ltm.store(text, category="preference").action == "duplicate"
        assert len(ltm.list()) == 1
    with sqlite3.connect(cache) as conn:  # the damaged rows were replaced
        assert {n for (n,) in conn.execute("SELECT length(embedding) FROM embedding_cache")} == {64 * 4}
    conn.close()


def test_a_table_that_holds_no_memories_is_refused_and_left_as_it_is(tmp_path: Path) -> None:
    """A ``memories`` table of another program (dbPath naming its LanceDB folder, a folder copied
    over the store) got memdir's columns added, then every command failed with the bare name of a
    column it lacks: "memdir ltm: 'text'"."""
    import lancedb

    folder = tmp_path / "state" / "ltm" / "main"
    lancedb.connect(folder).create_table("memories", data=[{"id": "x", "foo": "bar", "vector": [0.1] * 8}])
    for action in ("list", "store", "search"):
        with make(tmp_path) as ltm, pytest.raises(LtmError) as refused:
            if action == "list":
                ltm.list()
            elif action == "store":
                ltm.store("The user keeps bees", category="fact")
            else:
                ltm.search("bees")
        assert "is not a long-term memory table (its columns: id, foo, vector;" in str(refused.value)
    assert lancedb.connect(folder).open_table("memories").schema.names == ["id", "foo", "vector"]


@pytest.mark.parametrize("planted", ["fifo", "directory", "link"])
def test_an_embedding_cache_that_is_no_file_is_named_once_with_what_to_remove(
        tmp_path: Path, planted: str, caplog: pytest.LogCaptureFixture) -> None:
    """A FIFO or a folder at ``embedding-cache.sqlite`` was warned about twice a command, for ever,
    in SQLite's words: "disk I/O error" (read as a failing disk) or "unable to open database file"."""
    import logging

    with make(tmp_path) as ltm:
        ltm.store("The user prefers green tea", category="preference")
        cache = ltm.db_path / "embedding-cache.sqlite"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{cache}{suffix}").unlink(missing_ok=True)
    outside = tmp_path / "elsewhere.sqlite"  # a link's target: never made nor written
    if planted == "fifo":
        os.mkfifo(cache)
    elif planted == "directory":
        cache.mkdir()
    else:
        cache.symlink_to(outside)
    with caplog.at_level(logging.WARNING, logger="memdir"), make(tmp_path) as ltm:
        assert ltm.store("The user lives in Porto", category="fact").action == "created"
        assert [h.text for h in ltm.search("The user lives in Porto", min_score=0.99)] == ["The user lives in Porto"]
    said = [r.getMessage() for r in caplog.records if "embedding cache" in r.getMessage()]
    kind = {"fifo": "a FIFO", "directory": "a directory", "link": "a symbolic link"}[planted]
    assert len(said) == 1 and f"{cache} is {kind}, not a regular file: remove it" in said[0], said
    assert not outside.exists()


SECRETS = ["Remember my API key is sk-abcdefghijklmnop1234",
           "Remember: OPENAI_API_KEY=sk-proj-abcdefghijklmnopqrstuv",
           "I always use the password: hunter2 for the staging box",
           "my database is postgres://app:s3cretpw@db.internal/x, remember that"]


@pytest.mark.parametrize("text", SECRETS)
def test_auto_capture_never_keeps_a_secret(tmp_path: Path, text: str) -> None:
    assert not should_capture(text)
    assert capture_candidates([{"role": "user", "content": text}]) == []
    with make(tmp_path) as ltm:
        assert ltm.auto_capture([{"role": "user", "content": text}, {"role": "user", "content": "I prefer tea"}]
                                )[0].record.text == "I prefer tea"
        assert [r.text for r in ltm.list()] == ["I prefer tea"]


def test_the_store_tool_masks_secrets(tmp_path: Path) -> None:
    with make(tmp_path) as ltm:
        result = call_tool(ltm, "memory_store", {"text": "The user's OpenAI key is sk-abcdefghijklmnop1234"})
        assert "error" not in result["details"], result
        [memory] = ltm.list()
        assert memory.text == "The user's OpenAI key is sk-abc…1234"


class WideProvider(AxisProvider):
    """Another model: 96-dimensional vectors."""

    @property
    def dims(self) -> int:
        return 96

    def _vec(self, text: str) -> list[float]:
        return [*super()._vec(text), *super()._vec(text + "!")[:32]]


def test_a_damaged_table_after_reembed_refills_the_rows_of_the_old_model_with_new_vectors(tmp_path: Path) -> None:
    """Rows filled in from a version before ``reembed`` carried the old model's vectors: the
    rebuild failed on every command when the widths differed (the store never worked again)."""
    texts = [f"The user's project number {i} is called P{i}" for i in range(3)]
    with make(tmp_path) as ltm:
        for t in texts:
            ltm.store(t, category="fact")
    with make(tmp_path, WideProvider(model="wide")) as ltm:
        assert ltm.reembed() == 3
        rewritten = max((ltm.db_path / "memories.lance" / "data").iterdir(), key=lambda p: p.stat().st_mtime_ns)
    rewritten.write_bytes(os.urandom(100))
    with make(tmp_path, WideProvider(model="wide")) as ltm:
        assert sorted(r.text for r in ltm.list()) == texts
        assert len(ltm.recoveries) == 1 and ltm.table.dims() == 96
        for record in ltm.table.all(with_vectors=True):
            assert record.vector is not None
            assert float(record.vector @ ltm.embedder.documents([record.text])[0]) > 0.999
        assert ltm.store("The user keeps bees", category="fact").action == "created"


def test_unwritable_characters_are_replaced_and_a_huge_memory_is_refused(tmp_path: Path) -> None:
    """A lone surrogate (a JSON "\\ud800" escape, a non-UTF-8 argv) failed with a codec error, a
    NUL went into the Markdown mirror, and a 10 MB memory was recalled into every later prompt."""
    with make(tmp_path) as ltm:
        result = call_tool(ltm, "memory_store", {"text": "The user\x00 likes caf\ud800 au lait"})
        assert "error" not in result["details"], result
        assert [r.text for r in ltm.list()] == ["The user\ufffd likes caf\ufffd au lait"]
        assert ltm.search("caf\udcff", min_score=-1.0)
        captured = ltm.auto_capture([{"role": "user", "content": "I prefer th\ud800 in the morning"}])
        assert [r.action for r in captured] == ["created"]
        huge = call_tool(ltm, "memory_store", {"text": "I prefer " + "x" * 10_000_000})
        assert huge["details"]["error"].startswith("memory too long (10000009 characters, at most 10000)")
        with pytest.raises(LtmError, match="line 2: memory too long"):
            ltm.import_markdown("- I prefer tea\n- I prefer " + "y" * 20_000)
        assert len(ltm.list()) == 2


# A store whose process dies right after the new mirror file is in place (before its hash is noted).
DIE_AFTER_MIRROR = textwrap.dedent("""
    import os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory, markdown
    tmp = Path(sys.argv[2])
    settings = load_config(workspace=tmp / "ws", state_dir=tmp / "state", agent_id="main",
                           overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
    real = markdown.replace_file
    def replace_then_die(path, data, **kwargs):
        real(path, data, **kwargs)
        if Path(path).suffix == ".md":
            os._exit(9)
    markdown.replace_file = replace_then_die
    LongTermMemory(settings, provider=AxisProvider()).store("The user lives in Porto", category="fact")
""")


def test_a_process_killed_while_writing_the_mirror_leaves_no_edited_copy(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main",
                           overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        ltm.store("The user prefers tea", category="preference")
    died = subprocess.run([sys.executable, "-c", DIE_AFTER_MIRROR, str(TESTS), str(tmp_path)],
                          capture_output=True, text=True, timeout=120, env=cli_env(tmp_path / "state"))
    assert died.returncode == 9, died.stderr
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        result = ltm.store("The user keeps bees", category="fact")
        assert result.warnings == []
        mirror = ltm.mirror_path
    assert sorted(p.name for p in mirror.parent.iterdir()) == ["long-term.md"]
    assert all(t in mirror.read_text() for t in ("tea", "Porto", "bees"))


# A store of one memory with the mirror on, in a child (a hang fails on the timeout, not the suite).
STORE_WITH_MIRROR = textwrap.dedent("""
    import json, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[1])
    from ltm_fakes import AxisProvider
    from memdir.config import load_config
    from memdir.ltm import LongTermMemory
    tmp = Path(sys.argv[2])
    settings = load_config(workspace=tmp / "ws", state_dir=tmp / "state", agent_id="main",
                           overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        print(json.dumps(ltm.store(sys.argv[3], category="fact").warnings))
""")


def test_a_fifo_at_the_mirror_state_files_name_does_not_hang_a_store(tmp_path: Path) -> None:
    """``mirror-state.json`` was read with a plain open: a FIFO at its name made every store wait
    for a writer for ever, holding the store's lock, so every other ``ltm`` command waited too."""
    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main",
                           overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        ltm.store("The user keeps bees", category="fact")
        state = ltm.db_path / "mirror-state.json"
    state.unlink()
    os.mkfifo(state)
    second = subprocess.run([sys.executable, "-c", STORE_WITH_MIRROR, str(TESTS), str(tmp_path),
                             "The user lives in Porto"],
                            capture_output=True, text=True, timeout=60, env=cli_env(tmp_path / "state"))
    assert second.returncode == 0, second.stderr
    assert state.is_file()  # replaced by the state it records
    assert all(t in (tmp_path / "ws" / "memory" / "long-term.md").read_text() for t in ("bees", "Porto"))


@pytest.mark.parametrize("damage", ["zero-filled", "truncated", "deleted"])
def test_a_lost_mirror_record_is_not_called_an_edit_of_the_mirror(tmp_path: Path, damage: str) -> None:
    """With ``mirror-state.json`` zero-filled (a crash on ext4/xfs), cut short or gone, the next store
    said the untouched mirror "was changed outside memdir since it was last generated", sending the
    user looking for an edit nobody made; it says the mirror could not be checked, as it is, and
    keeps the copy; a mirror holding what is about to be written is not moved aside at all."""
    (tmp_path / "ws").mkdir()
    settings = load_config(workspace=tmp_path / "ws", state_dir=tmp_path / "state", agent_id="main",
                           overrides={"longTermMemory": {"mirror": {"enabled": True}}}).settings
    with LongTermMemory(settings, provider=AxisProvider()) as ltm:
        ltm.store("The user keeps bees", category="fact")
        state, mirror = ltm.db_path / "mirror-state.json", ltm.mirror_path
        size = state.stat().st_size
        if damage == "zero-filled":
            state.write_bytes(b"\0" * size)
        elif damage == "truncated":
            state.write_bytes(state.read_bytes()[: size // 2])
        else:
            state.unlink()
        assert ltm.sync_mirror() == []  # the same memories: nothing to keep aside
        assert sorted(p.name for p in mirror.parent.iterdir()) == ["long-term.md"]
        (state.write_bytes(b"\0" * state.stat().st_size) if damage == "zero-filled" else state.unlink())
        warnings = ltm.store("The user lives in Porto", category="fact").warnings
    assert len(warnings) == 1 and "could not be checked" in warnings[0] and str(state) in warnings[0]
    assert "changed outside memdir" not in warnings[0]
    assert "bees" in next(mirror.parent.glob("long-term.md.edited-*")).read_text()
    assert all(t in mirror.read_text() for t in ("bees", "Porto"))


def test_a_long_running_store_is_told_when_another_process_reembedded_with_another_model(tmp_path: Path) -> None:
    """A server that had checked the model once then failed every call with LanceDB's "There is
    no vector column in the data" after ``memdir ltm reembed`` with another model elsewhere."""
    with make(tmp_path) as server:
        server.store("The user prefers tea", category="preference")
        assert server.search("The user prefers tea")
        with make(tmp_path, WideProvider(model="wide")) as other:
            assert other.reembed() == 1
        for call in (lambda: server.search("The user prefers tea"),
                     lambda: server.store("The user keeps bees", category="fact")):
            with pytest.raises(ModelMismatchError, match="memdir ltm reembed"):
                call()
        assert [r.text for r in server.list()] == ["The user prefers tea"]


def test_search_limits_and_scores_out_of_range(tmp_path: Path) -> None:
    """A limit past 32 bits failed with "out of range integral type conversion attempted" (or
    "Python int too large"), and a NaN minimum score matched nothing without saying why."""
    with make(tmp_path) as ltm:
        ltm.store("The user prefers tea", category="preference")
        for limit in (2**63 - 1, 10**20, -5, 0):
            assert [h.text for h in ltm.search("The user prefers tea", limit=limit)] == ["The user prefers tea"]
        with pytest.raises(LtmError, match="min score must be a number"):
            ltm.search("tea", min_score=float("nan"))
        # OverflowError "cannot convert float infinity to integer", ValueError for NaN, and TypeError
        # "'>=' not supported between instances of 'float' and 'str'": none named the argument
        for limit in (float("inf"), float("nan"), "3", True):
            with pytest.raises(LtmError, match="limit must be a whole number of memories"):
                ltm.search("tea", limit=limit)
        with pytest.raises(LtmError, match=r"min score must be a number, not '0\.5'"):
            ltm.search("tea", min_score="0.5")



def test_forget_by_a_query_that_is_no_string_is_a_type_error(tmp_path: Path) -> None:
    """Regression: ``ltm.forget(query=123)`` raised "AttributeError: 'int' object has no attribute
    'strip'" from inside, where the README promises a TypeError for an argument of the wrong type."""
    with make(tmp_path) as ltm:
        ltm.store("The user prefers tea", category="preference")
        for query in (123, ["tea"], b"tea"):
            with pytest.raises(TypeError, match=f"query must be a string, not {type(query).__name__}"):
                ltm.forget(query=query)  # type: ignore[arg-type]
        assert [r.text for r in ltm.list()] == ["The user prefers tea"]

def test_a_large_import_compacts_as_it_goes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each bullet was one write (one fragment) and the duplicate check before it searched every
    fragment: an import of 1,000 memories was quadratic (300: 10.7 s, then 4.5 s with compaction
    as it went).  The bullets are now written 1,000 a commit: 70 are one fragment."""
    from memdir.ltm.store import LanceTable

    seen: list[int] = []
    real = LanceTable.maybe_compact

    def counting(self: LanceTable, *args: Any) -> bool:
        seen.append(int(self.table().stats()["fragment_stats"]["num_fragments"]))
        return real(self, *args)

    monkeypatch.setattr(LanceTable, "maybe_compact", counting)
    with make(tmp_path) as ltm:
        report = ltm.import_markdown("\n".join(f"- The user's fact number {i} is F{i}" for i in range(70)))
        assert len(report.created) == 70 and len(ltm.list()) == 70
    assert seen and max(seen) <= 1


def test_rows_with_foreign_ids_can_still_be_written(tmp_path: Path) -> None:
    """The read-back after a write must not refuse ids memdir would not make (a rebuild copies a
    foreign table's rows as they are; a refused id failed the rebuild, and so every command)."""
    import numpy as np

    from memdir.ltm.store import LanceTable, MemoryRecord

    table = LanceTable(tmp_path / "db")
    table.create(4, {"provider": "fake", "model": "m"})
    ids = ["note-1", "0B4E7C1E-5D2F-4C1A-9A55-0D4F2F3F6B1E"]
    table.add([MemoryRecord(id=i, text=f"text {i}", category="fact", importance=0.7, created_at=1,
                            vector=np.array([1, 0, 0, 0], dtype=np.float32)) for i in ids])
    assert sorted(r.id for r in table.all()) == sorted(ids)
    table.close()


@pytest.mark.parametrize("raised", [
    "lance error: Invalid user input: bad filter, /root/.cargo/registry/src/index.crates.io-6f17d22bba15001f/"
    "lance-0.21.0/src/dataset/scanner.rs:1234:22",
    "External error: out of range integral type conversion attempted, "
    "/rustc/90b35a6239c3d8bdabc530a6a0816f7ff89a0aaf/library/core/src/num/mod.rs:123:5",
])
def test_lancedb_errors_reach_people_without_their_rust_source_location(raised: str) -> None:
    # LanceDB appends where in its Rust source it raised; the CLI line and the tool result carried it
    from memdir.errors import without_source_location
    from memdir.ltm.tools import _failure

    assert ".rs:" not in without_source_location(raised) and without_source_location(raised).startswith(
        raised.split(",")[0])
    result = _failure(RuntimeError(raised))
    assert ".rs:" not in json.dumps(result)  # the text and the details
    assert without_source_location("see /notes/file.md:12 for it") == "see /notes/file.md:12 for it"


@pytest.mark.parametrize(("text", "kept"), [
    ("Remember that the wifi password is Sunflower77.", "Remember that the wifi password is ***."),
    ("The user's PIN is 4711, for the door", "The user's PIN is ***, for the door"),
    ("The vault password is stored in 1Password", "The vault password is stored in 1Password"),
])
def test_the_store_tool_masks_a_secret_said_in_prose(tmp_path: Path, text: str, kept: str) -> None:
    """Why: only ``password: x``/``password=x`` were masked; "the wifi password is Sunflower77"
    went into every later prompt and into the indexed mirror as it was."""
    with make(tmp_path) as ltm:
        result = call_tool(ltm, "memory_store", {"text": text})
        assert "error" not in result["details"], result
        assert [m.text for m in ltm.list()] == [kept]


def test_a_store_refused_for_want_of_room_names_the_store(tmp_path: Path) -> None:
    """A write LanceDB refused outright under a file size limit said "lance error: LanceError(IO):
    File too large (os error 27), /root/.cargo/registry/…/structural.rs:258:9": not which store,
    nor what to check."""
    with make(tmp_path, cache=False) as ltm:
        before = {ltm.store("The user's project is called P1", category="fact").record.id}
        store = ltm.db_path
    outcome = write_under_limit(tmp_path, 100)
    assert outcome.get("error", "").startswith(
        f"the long-term memory store {store} could not be written (is the disk full, or a file size limit "
        "reached?): lance error: LanceError(IO): File too large (os error 27)"), outcome
    assert ".rs:" not in outcome["error"]
    with make(tmp_path, cache=False) as ltm:
        assert {r.id for r in ltm.list()} == before


def test_a_mirror_that_could_not_be_written_leaves_no_temporary_file(tmp_path: Path) -> None:
    """The mirror's state file was written to ``mirror-state.json.tmp`` and renamed: a full disk left
    that file behind in the store's folder (and its warning named only the mirror)."""
    script = textwrap.dedent("""
        import resource, sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from ltm_fakes import AxisProvider
        from memdir.config import load_config
        from memdir.ltm import LongTermMemory
        tmp = Path(sys.argv[2])
        (tmp / "ws").mkdir()
        settings = load_config(workspace=tmp / "ws", state_dir=tmp / "state", agent_id="main",
                               overrides={"memorySearch": {"cache": {"enabled": False}},
                                          "longTermMemory": {"mirror": {"enabled": True}}}).settings
        with LongTermMemory(settings, provider=AxisProvider()) as ltm:
            ltm.store("The user keeps bees in the garden", category="fact")
            resource.setrlimit(resource.RLIMIT_FSIZE, (40, resource.RLIM_INFINITY))  # the disk fills up
            warnings = ltm.sync_mirror()
            resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
            print(warnings)
            print(sorted(p.name for p in ltm.db_path.iterdir()))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(TESTS), str(tmp_path)], capture_output=True, text=True,
                         timeout=120, env=cli_env(tmp_path / "state"))
    assert out.returncode == 0, out.stderr
    warnings, names = out.stdout.splitlines()
    assert "File too large" in warnings and "mirror-state.json" in warnings, warnings
    assert names == "['ltm.lock', 'memories.lance', 'mirror-state.json']", names


def test_a_read_only_store_is_searched_without_warnings_about_its_cache(tmp_path: Path,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """A long-term memory store on a read-only mount (or in a read-only state folder) was searched
    with two warnings each time, "embedding cache read failed (unable to open database file)" and
    "… write failed …": the cache cannot be opened where nothing may be written, which is no failure."""
    import numpy as np

    from memdir.ltm.embedder import EmbeddingCache

    folder = ReadOnlyFolder(tmp_path / "ro")
    root = folder.root
    key = ("local", "m", "")
    try:
        cache = EmbeddingCache(root / "embedding-cache.sqlite")
        cache.put(key, {"h1": np.ones(4, dtype=np.float32)})
        cache.close()
        folder.lock()
        caplog.set_level("WARNING", logger="memdir")
        ro = EmbeddingCache(root / "embedding-cache.sqlite")
        for _ in range(2):
            ro.get(key, ["h1", "h2"])
            ro.put(key, {"h2": np.ones(4, dtype=np.float32)})
        ro.close()
        assert [r.getMessage() for r in caplog.records] == []
    finally:
        assert folder.release(), "a file of the cache left open"
