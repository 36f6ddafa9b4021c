"""memdir as a typed library: a host's code, checked by ``mypy --strict`` against the package.

memdir ships ``py.typed``, so its annotations are what a host's type checker holds its code to.
One mypy run (about 10 s) checks two small host programs: ``host_ok.py`` uses the public API the
way the README does and must pass; every line of ``host_wrong.py`` marked ``# wrong: <what>`` is
a mistake mypy must report, which it cannot where an annotation leaks ``Any`` or takes
``**kwargs: Any``.  Each test reads its own lines of that one run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("mypy", reason="mypy checks the host programs (pip install -e '.[dev]')")

HOST_OK = '''
from __future__ import annotations

import asyncio
import datetime as dt
from pathlib import Path
from typing import Any

from memdir import Memory
from memdir.aio import AsyncMemory
from memdir.errors import MemdirError
from memdir.ltm import LongTermMemory, MemoryRecord, StoreResult
from memdir.prompt import build_session_context, memory_recall_section
from memdir.sessions import run_session_memory_hook
from memdir.sync import ProgressLabel
from memdir.tools import TOOL_NAMES, ToolResult, call_tool, read_number, read_string


def shown(done: int, total: int, label: ProgressLabel) -> None:
    print(done, total, label.chunks_done)


def readme(ws: Path) -> str:
    with Memory(ws) as mem:
        mem.sync(progress=shown)
        for hit in mem.search("what did we decide about pagination?").results:
            print(f"{hit.score:.3f} {hit.path}:{hit.start_line}-{hit.end_line}")
        path: str = mem.append_daily("- Decided: billing uses Kafka.", date=dt.date(2026, 1, 12))
        mem.append_daily("- and the day after", date="2026-01-13")
        ctx = build_session_context(mem, session_key="agent:main:main", max_chars=20_000)
        result: ToolResult = call_tool(mem, "memory_search", {"query": "billing"})
        print(memory_recall_section(TOOL_NAMES, citations="off"), ctx.text, result.text, path)
        print(mem.get(Path("MEMORY.md")).text, mem.get(Path(ws, "memory", "2026-01-12.md")).text)  # ok: get-path
        return mem.get("MEMORY.md", from_line=1, lines=10).text


def captured(ltm: LongTermMemory) -> list[StoreResult]:
    return ltm.auto_capture([{"role": "user", "content": "I prefer dark mode"}])


def mirrored(ltm: LongTermMemory) -> list[str]:
    return ltm.sync_mirror()


def recalled(ltm: LongTermMemory) -> list[MemoryRecord]:
    return [*ltm.search("theme?", limit=3), *ltm.list(include_superseded=True)]


async def in_asyncio(ws: Path) -> list[str]:
    async with AsyncMemory(ws, agent_id="main", config={"memorySearch": {"provider": "none"}}) as amem:
        await amem.sync(force=True, progress=shown)
        response = await amem.search("which queue?", max_results=3, min_score=0.2, mode="keyword")
        text = (await amem.get("MEMORY.md", from_line=2, lines=5)).text
        status: dict[str, Any] = await amem.status(deep=True)
        await amem.append_daily("- a note", date=dt.date(2026, 1, 12))
        print(text, status, (await amem.call_tool("memory_get", {"path": "MEMORY.md"})).payload)
        return [hit.path for hit in response.results]


def slug_model(prompt: str) -> str | None:  # a chat API's reply content is str | None
    return prompt.split()[0] if prompt else None


def session_ended(ws: Path) -> str | None:
    result = run_session_memory_hook(action="new", session_key="agent:main:main", workspace=ws,
                                     previous_entry=None, slug_llm=slug_model)  # ok: slug-none
    return None if result is None else result.slug


def tool_arguments(args: dict[str, Any]) -> tuple[str, int]:
    query: str = read_string(args, "query", required=True)  # ok: overloads
    limit = read_number(args, "limit", integer=True)
    return query, 5 if limit is None else limit  # ok: overloads


class TeamMemory(Memory):
    def team(self) -> str:
        return "ops"


class TeamAsyncMemory(AsyncMemory):
    def team(self) -> str:
        return "ops"


async def subclassed(ws: Path) -> str:
    with TeamMemory(ws) as mem:
        mine = mem.team()  # ok: subclass-enter
    async with TeamAsyncMemory(ws) as amem:
        return mine + amem.team()  # ok: subclass-enter


try:
    print(readme(Path("~/agent")), asyncio.run(in_asyncio(Path("~/agent"))), session_ended(Path("~/agent")))
except MemdirError as exc:
    print(exc)
'''

HOST_WRONG = '''
from __future__ import annotations

from memdir import Memory
from memdir.aio import AsyncMemory
from memdir.ltm import LongTermMemory
from memdir.tools import call_tool


def ltm_results(ltm: LongTermMemory) -> int:
    count: int = ltm.auto_capture(["I prefer dark mode"])  # wrong: ltm-list
    return ltm.sync_mirror()  # wrong: ltm-list


async def async_calls(amem: AsyncMemory) -> None:
    await amem.search("which queue?", max_result=3)  # wrong: aio-kwargs
    await amem.search("which queue?", mode="semantic")  # wrong: aio-kwargs
    await amem.get("MEMORY.md", from_lines=1)  # wrong: aio-kwargs
    await amem.sync(forced=True)  # wrong: aio-kwargs
    await amem.status(deeply=True)  # wrong: aio-kwargs
    await amem.append_daily("- a note", day="2026-01-12")  # wrong: aio-kwargs
    AsyncMemory("~/agent", agent="main")  # wrong: aio-kwargs


def dates(mem: Memory) -> None:
    mem.append_daily("- a note", date=20260112)  # wrong: append-date


def tool_text(mem: Memory) -> str:
    return str(call_tool(mem, "memory_get", {"path": "MEMORY.md"})[0]["text"])  # wrong: tool-result
'''


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, dict[str, set[int]]]:
    """mypy's output over both programs, and the lines of host_wrong.py marked wrong, by what."""
    where = tmp_path_factory.mktemp("host")
    (where / "host_ok.py").write_text(HOST_OK, encoding="utf-8")
    (where / "host_wrong.py").write_text(HOST_WRONG, encoding="utf-8")
    env = {**os.environ, "MYPYPATH": str(Path(__file__).resolve().parents[1] / "src")}
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-error-summary", "--show-error-codes",
                           "--cache-dir", str(where / ".mypy_cache"), "host_ok.py", "host_wrong.py"],
                          cwd=where, env=env, capture_output=True, text=True, timeout=300)
    assert "host_" in proc.stdout or proc.returncode == 0, proc.stdout + proc.stderr  # mypy itself ran
    marked: dict[str, set[int]] = {}
    for number, line in enumerate(HOST_WRONG.splitlines(), start=1):
        if m := re.search(r"# wrong: (\S+)", line):
            marked.setdefault(m.group(1), set()).add(number)
    return proc.stdout, marked


def _reported(output: str, name: str) -> set[int]:
    return {int(m.group(1)) for m in re.finditer(rf"^{name}:(\d+): error:", output, flags=re.M)}


def test_the_readme_and_the_public_api_pass_mypy_strict_in_a_host(mypy_run):
    """The README's Python (sync with a progress callback, search, get, append_daily, the session
    context, tools, AsyncMemory, long-term memory) type-checks as a host writes it."""
    output, _ = mypy_run
    assert not _reported(output, "host_ok.py"), output


def test_long_term_memory_methods_after_list_are_typed(mypy_run):
    """Regression: LongTermMemory has a method named ``list``, and the annotations after it
    (``auto_capture -> list[StoreResult]``, ``sync_mirror -> list[str]``) named that method, which
    mypy reads as no type: ``count: int = ltm.auto_capture(...)`` passed mypy --strict."""
    output, marked = mypy_run
    assert marked["ltm-list"] <= _reported(output, "host_wrong.py"), output


def test_async_memory_takes_memorys_parameters_by_name(mypy_run):
    """Regression: AsyncMemory's constructor and calls took ``**kwargs: Any``, so a misspelt
    parameter (``await amem.search(q, max_result=3)``) or a mode that does not exist passed mypy
    and failed only when run; help() showed ``**kwargs``."""
    output, marked = mypy_run
    assert marked["aio-kwargs"] <= _reported(output, "host_wrong.py"), output


def test_async_memory_parameters_are_memorys():
    """The spelt-out parameters of AsyncMemory stay Memory's: names, kinds and defaults."""
    import inspect

    from memdir import Memory
    from memdir.aio import AsyncMemory

    for name in ("__init__", "sync", "search", "get", "status", "append_daily"):
        ours = dict(inspect.signature(getattr(AsyncMemory, name)).parameters)
        theirs = dict(inspect.signature(getattr(Memory, name)).parameters)
        ours.pop("memory", None)
        assert [(p.name, p.kind, p.default, p.annotation) for p in ours.values()] == \
               [(p.name, p.kind, p.default, p.annotation) for p in theirs.values()], name


def test_append_daily_date_is_typed(mypy_run):
    """Regression: ``Memory.append_daily``'s ``date`` was annotated Any (and help() did not say what
    it takes), so ``date=20260112`` passed mypy and raised 'invalid date' when run."""
    output, marked = mypy_run
    assert marked["append-date"] <= _reported(output, "host_wrong.py"), output


def test_a_tool_result_is_a_dict_of_str_keys(mypy_run):
    """Regression: ToolResult subclassed a bare ``dict``, so every key and value of a
    ``call_tool(...)`` was unknown to a host's pyright in strict mode ('Type of "details" is
    unknown' for ``result["details"]``), and mypy took any key: ``result[0]["text"]`` (the first
    content block meant) passed it and raised KeyError: 0 when run."""
    from typing import Any, get_args

    from memdir.tools import ToolResult

    output, marked = mypy_run
    assert marked["tool-result"] <= _reported(output, "host_wrong.py"), output
    (base,) = ToolResult.__orig_bases__  # type: ignore[attr-defined]
    assert get_args(base) == (str, Any)


@pytest.mark.parametrize("module", ["memdir", "memdir.api", "memdir.ltm"])
def test_lazy_exports_are_listed_and_a_misspelt_one_is_named(module: str):
    """Regression: the names these modules load on first use (``Memory``, ``PathError``, the long-term
    memory classes) were missing from ``dir()``, so help(memdir) showed no class at all and a REPL's
    tab completion never offered ``memdir.Memory``; and ``memdir.Memroy`` said 'AttributeError:
    Memroy', without the module or Python's 'Did you mean: 'Memory'?'."""
    import importlib
    import pydoc

    mod = importlib.import_module(module)
    assert set(mod.__all__) <= set(dir(mod))
    shown = pydoc.render_doc(mod, renderer=pydoc.plaintext)
    for name in mod.__all__:
        if isinstance(getattr(mod, name), type):
            assert f"class {name}" in shown, name
    with pytest.raises(AttributeError) as caught:
        mod.Memroy  # noqa: B018 (the attribute access is the test)
    assert str(caught.value) == f"module {module!r} has no attribute 'Memroy'"
    assert caught.value.name == "Memroy" and caught.value.obj is mod


def test_help_describes_every_parameter_of_memory():
    """Regression: help(Memory) said nothing of its constructor's parameters (what ``config`` takes,
    ``provider``, ``notice``), and help(Memory.search) described ``mode`` alone: not what
    ``max_results=None``, ``min_score=None``, ``explain`` or ``sync=None`` do (nor sync's
    ``deadline`` and ``lock_timeout``, get's ``from_line``/``lines``, status's ``deep``, watch's
    ``on_event``, ``debounce_ms``, ``interval_minutes`` and ``sync_at_start``); and
    LongTermMemory's search, store, get, export and constructor left out theirs (``limit``,
    ``min_score``, ``importance``, ``category``, ``source``, ``db_path``, ``clock``...)."""
    import inspect

    from memdir import Memory
    from memdir.ltm import LongTermMemory

    methods = {Memory: ("__init__", "sync", "search", "get", "append_daily", "status", "migrate", "watch",
                        "start_live_sync"),
               LongTermMemory: ("__init__", "search", "list", "get", "store", "forget", "auto_recall", "auto_capture",
                                "export", "import_markdown")}
    for cls, names in methods.items():
        for name in names:
            fn = getattr(cls, name)
            doc = inspect.getdoc(cls if name == "__init__" and fn.__doc__ is None else fn) or ""
            for param in list(inspect.signature(fn).parameters)[1:]:
                assert f"``{param}``" in doc, (cls.__name__, name, param)


def test_help_describes_every_parameter_of_the_readmes_functions():
    """Regression: the functions the README calls said nothing of the parameters it passes:
    call_tool's ``session_key`` (nor ``name``, ``args``), memory_recall_section's ``citations``
    and ``tools``, openai_tools' ``names``, build_session_context's ``session_key`` and ``now``;
    nor did the session hook and the flush contract (``slug_llm``, ``messages``, ``previous_entry``,
    should_flush's ``context_window``, ``entry``, ``settings``)."""
    import inspect

    from memdir.aio import AsyncMemory
    from memdir.prompt import build_session_context, memory_recall_lines, memory_recall_section
    from memdir.sessions import build_flush_plan, run_session_memory_hook, should_flush
    from memdir.tools import anthropic_tools, call_tool, call_tool_payload, openai_tools

    for fn in (call_tool, call_tool_payload, AsyncMemory.call_tool, openai_tools, anthropic_tools,
               memory_recall_section, memory_recall_lines, build_session_context, run_session_memory_hook,
               should_flush, build_flush_plan):
        doc = inspect.getdoc(fn) or ""
        for param in inspect.signature(fn).parameters:
            assert param == "self" or f"``{param}``" in doc, (fn.__qualname__, param)

PUBLIC_MODULES = ["memdir", "memdir.api", "memdir.aio", "memdir.tools", "memdir.prompt", "memdir.ltm",
                  "memdir.ltm.memory", "memdir.ltm.results", "memdir.ltm.store", "memdir.ltm.tools",
                  "memdir.sessions", "memdir.daily", "memdir.errors", "memdir.sync", "memdir.search",
                  "memdir.watch", "memdir.agent", "memdir.embeddings.base"]
_BARE = re.compile(r"\b(dict|list|tuple|set|frozenset|Callable|Mapping|Sequence|Iterable|Iterator)\b(?!\[)")


def test_no_public_annotation_is_a_bare_generic():
    """Regression: ``MemoryBackend.search -> list[dict]`` and ``get -> dict`` (memdir.agent), like
    ToolResult's bare ``dict`` base, left every key and value unknown to a host's pyright in
    strict mode ('Type of "hits" is partially unknown'); each public annotation says what it holds."""
    import importlib
    import inspect

    bare: list[str] = []
    for module in PUBLIC_MODULES:
        mod = importlib.import_module(module)
        for name in getattr(mod, "__all__", [n for n in vars(mod) if not n.startswith("_")]):
            obj = getattr(mod, name)
            if inspect.isclass(obj) and obj.__module__.startswith("memdir"):
                bare += [f"{module}.{name} base {b}" for b in getattr(obj, "__orig_bases__", obj.__bases__)
                         if b in (dict, list, tuple, set)]
                members = [m.fget if isinstance(m, property) else m for m in vars(obj).values()
                           if callable(m) or isinstance(m, property)]
                fields = {f"{name}.{k}": a for k, a in vars(obj).get("__annotations__", {}).items()}
            elif inspect.isfunction(obj) and obj.__module__.startswith("memdir"):
                members, fields = [obj], {}
            else:
                continue
            for fn in members:
                fields.update({f"{getattr(fn, '__qualname__', fn)} {k}": a
                               for k, a in getattr(fn, "__annotations__", {}).items()})
            bare += [f"{module}: {where}: {a}" for where, a in fields.items()
                     if _BARE.search(str(a)) and "ClassVar" not in str(a)]
    assert not bare, bare


def test_a_hosts_subclass_stays_itself_in_its_with_block(mypy_run):
    """Regression: ``Memory.__enter__`` (and AsyncMemory's ``__aenter__``, LongTermMemory's) were
    annotated to return the base class, so ``with TeamMemory(ws) as mem: mem.team()`` failed mypy
    ('"Memory" has no attribute "team"') in a host that subclasses it; they return ``Self``."""
    output, _ = mypy_run
    lines = {n for n, line in enumerate(HOST_OK.splitlines(), start=1) if "# ok: subclass-enter" in line}
    assert lines and not lines & _reported(output, "host_ok.py"), output


def test_a_slug_model_may_answer_none(mypy_run):
    """Regression: SlugLLM was ``Callable[[str], str]``, so a host's slug model returning what a chat
    API's reply content is, ``str | None``, failed mypy where it was passed to
    run_session_memory_hook (``slug_llm=``), though the hook takes ``None`` as no slug (the time)."""
    output, _ = mypy_run
    lines = {n for n, line in enumerate(HOST_OK.splitlines(), start=1) if "# ok: slug-none" in line}
    assert lines and not lines & _reported(output, "host_ok.py"), output


def test_get_takes_a_path(mypy_run, tmp_path: Path):
    """Regression: ``mem.get(Path("MEMORY.md"))`` (or ``ws / "memory" / day``) raised "path must be
    a string, not PosixPath" and failed mypy, where the rest of the API (the workspace, the session
    hook, append_daily_note) takes ``str | os.PathLike``; a Path reads as its text does."""
    from memdir import Memory

    output, _ = mypy_run
    lines = {n for n, line in enumerate(HOST_OK.splitlines(), start=1) if "# ok: get-path" in line}
    assert lines and not lines & _reported(output, "host_ok.py"), output
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory" / "2026-01-12.md").write_text("- Decided: billing uses Kafka.\n", encoding="utf-8")
    with Memory(ws, config={"memorySearch": {"provider": "none"}}) as mem:
        for path in (Path("memory/2026-01-12.md"), ws / "memory" / "2026-01-12.md"):
            got = mem.get(path, from_line=1, lines=1)
            assert (got.path, got.text) == ("memory/2026-01-12.md", "- Decided: billing uses Kafka.")


def test_the_argument_readers_say_what_their_flags_make_them_return(mypy_run):
    """Regression: ``read_string(args, "query", required=True)`` (a host's own tool reading its
    arguments as memdir's do) was ``str | None`` to mypy though it never returns None, and
    ``read_number(..., integer=True)`` ``float | int | None`` though it returns an int: a host
    wrote ``query or ""`` and casts, as memdir itself did (a ``type: ignore``); overloads say it."""
    output, _ = mypy_run
    lines = {n for n, line in enumerate(HOST_OK.splitlines(), start=1) if "# ok: overloads" in line}
    assert lines and not lines & _reported(output, "host_ok.py"), output
