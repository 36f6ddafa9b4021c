"""The CLI as a user runs it: a real subprocess, real files, real exit codes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from helpers import SRC  # noqa: F401  (documents where the subprocess imports from)


@pytest.fixture
def ws(make_workspace) -> Path:
    return make_workspace({
        "MEMORY.md": "# Long-term\nThe user prefers PostgreSQL over MySQL.\n",
        "memory/2026-01-12.md": "# 2026-01-12\n- Decided the API uses cursor pagination.\n- Lunch: ramen.\n",
        # filler, so BM25's IDF has a corpus to work with (with two files every term is common)
        **{f"memory/2025-12-{d:02d}.md": f"# 2025-12-{d:02d}\n- Routine standup {d}.\n" for d in range(1, 9)},
    })


def test_index_search_get_status_round_trip(ws: Path, run_cli):
    env = {"MEMDIR_PROVIDER": "none"}
    idx = run_cli("index", "--workspace", str(ws), "--json", env=env)
    assert idx.returncode == 0, idx.stderr
    report = json.loads(idx.stdout)
    assert report["indexed"] == 10 and report["full"] is True

    text = run_cli("search", "cursor pagination", "-w", str(ws), env=env)
    assert text.returncode == 0
    first = text.stdout.splitlines()[0]
    score, loc = first.split(" ", 1)
    assert float(score) > 0 and loc == "memory/2026-01-12.md:1-4"

    js = json.loads(run_cli("search", "--query", "postgresql", "cursor", "--json", "-w", str(ws), env=env).stdout)
    assert js["results"][0]["path"] == "MEMORY.md"  # --query wins over the positional query
    assert js["mode"] == "fts-only" and js["provider"] == "none"

    got = run_cli("get", "memory/2026-01-12.md", "--from", "2", "--lines", "1", "-w", str(ws), env=env)
    assert got.returncode == 0 and got.stdout == "- Decided the API uses cursor pagination.\n"

    st = json.loads(run_cli("status", "--json", "--deep", "-w", str(ws), env=env).stdout)
    assert (st["files"], st["dirty"], st["fts"]["available"]) == (10, False, True)
    # no agent id chosen: the index is the workspace's own, named after it
    assert st["indexKey"] == "workspace" and Path(st["indexPath"]).name.startswith("ws-")
    assert "sqlite" in st and st["embeddingProbe"]["ok"] is False
    plain = run_cli("status", "-w", str(ws), env=env).stdout
    assert "Indexed: 10/10 files" in plain and "Dirty: no" in plain


def test_global_options_before_or_after_the_command(ws: Path, run_cli):
    env = {"MEMDIR_PROVIDER": "none"}
    a = run_cli("--workspace", str(ws), "--agent", "x", "search", "ramen", "--json", env=env)
    b = run_cli("search", "ramen", "--json", "--agent", "x", "--workspace", str(ws), env=env)
    assert a.returncode == b.returncode == 0
    assert json.loads(a.stdout)["results"] == json.loads(b.stdout)["results"] != []


def test_failures_exit_1_with_a_clear_message(ws: Path, run_cli, tmp_path: Path):
    env = {"MEMDIR_PROVIDER": "none"}
    missing = run_cli("search", "-w", str(ws), env=env)
    assert missing.returncode == 2  # bad usage, as the README says
    assert "Missing search query" in missing.stderr
    denied = run_cli("get", "../etc/passwd", "-w", str(ws), env=env)
    assert denied.returncode == 1 and "path not allowed" in denied.stderr
    assert "Traceback" not in denied.stderr
    bad_cfg = run_cli("status", "-w", str(ws), "--config", str(tmp_path / "nope.toml"))
    assert bad_cfg.returncode == 1 and "config file not found" in bad_cfg.stderr
    usage = run_cli("search", "--max-results", "many", "x")
    assert usage.returncode == 2


def test_failures_with_json_print_one_json_error_on_stdout(ws: Path, run_cli, tmp_path: Path):
    """A program that asked for ``--json`` parses stdout even when the command fails."""
    env = {"MEMDIR_PROVIDER": "none"}
    cases = [
        (("search", "-w", str(ws), "--json"), 2, "usage", "Missing search query"),
        (("get", "../etc/passwd", "-w", str(ws), "--json"), 1, "error", "path not allowed"),
        (("status", "-w", str(ws), "--config", str(tmp_path / "nope.toml"), "--json"), 1, "config",
         "config file not found"),
        (("search", "x", "-w", str(tmp_path / "absent"), "--json"), 1, "config", "does not exist"),
    ]
    for argv, code, kind, words in cases:
        out = run_cli(*argv, env=env)
        assert out.returncode == code, (argv, out.stderr)
        got = json.loads(out.stdout)  # exactly one document
        assert got["ok"] is False and got["error"]["kind"] == kind and got["error"]["exitCode"] == code
        assert words in got["error"]["message"] and words in out.stderr  # people still read stderr
    plain = run_cli("get", "../etc/passwd", "-w", str(ws), env=env)
    assert plain.returncode == 1 and plain.stdout == ""  # without --json, stdout stays empty


@pytest.mark.parametrize("argv,words", [
    (("search", "x", "--json", "--bogus"), "unrecognized arguments: --bogus"),
    (("search", "x", "--json", "--files"), "not allowed with argument --json"),
    (("get", "--json"), "required: path"),
    (("migrate", "--json"), "required: --to"),
    (("config", "bogus", "--js"), "invalid choice: 'bogus'"),  # argparse takes a prefix of --json for it
    (("search", "x", "--max-results", "many", "--json"), "expected a whole number, not 'many'"),
])
def test_usage_errors_argparse_finds_print_the_json_failure_too(ws: Path, run_cli, argv, words):
    """README: "a command that fails with --json also prints one object on stdout", kind usage;
    argparse's own errors (unknown option, missing argument) printed nothing there."""
    out = run_cli(*argv, "-w", str(ws))
    assert out.returncode == 2 and words in out.stderr and "usage: memdir" in out.stderr
    got = json.loads(out.stdout)
    assert got == {"ok": False, "error": {"kind": "usage", "message": got["error"]["message"], "exitCode": 2}}
    assert words in got["error"]["message"]
    if "--files" not in argv:
        plain = run_cli(*(a for a in argv if a not in ("--json", "--js")), "-w", str(ws))
        assert plain.returncode == 2 and plain.stdout == ""  # without --json, stdout stays empty


@pytest.mark.parametrize("argv,words", [
    (("search", "x", "--max-results=0"), "--max-results: must be 1 or more, not 0"),
    (("search", "x", "--max-results=-3"), "--max-results: must be 1 or more, not -3"),
    (("search", "x", "--min-score", "inf"), "--min-score: must be a number from 0 to 1, not inf"),
    (("search", "x", "--min-score", "nan"), "--min-score: must be a number from 0 to 1, not nan"),
    (("search", "x", "--min-score=-0.5"), "--min-score: must be a number from 0 to 1, not -0.5"),
    # a negative number after a space: search's -0 option made argparse take it for an option
    # ("expected one argument"; -0.5 was read as -0 given ".5")
    (("search", "x", "--max-results", "-5"), "--max-results: must be 1 or more, not -5"),
    (("search", "x", "--max-results", "-1e3"), "--max-results: expected a whole number, not '-1e3'"),
    (("search", "x", "--min-score", "-0.5"), "--min-score: must be a number from 0 to 1, not -0.5"),
    (("get", "MEMORY.md", "--from", "0"), "--from: must be 1 or more, not 0"),
    (("get", "MEMORY.md", "--lines=-1"), "--lines: must be 1 or more, not -1"),
    (("watch", "--debounce-ms", "-5"), "--debounce-ms: must be 0 or more, not -5"),  # was taken as 0
    # exited 1 ("invalid port") after reading the config, where --port abc is bad usage
    (("mcp", "--transport", "http", "--port", "0"), "--port: must be 1 or more, not 0"),
    (("get", " "), "Missing path"),  # exited 1 ("path required"), where `search ""` is bad usage
    # scored every question with nothing returned (recall 0), exit 0
    (("bench", "quality", "nowhere", "--min-score", "7"), "--min-score: must be a number from 0 to 1, not 7"),
    (("mcp", "--transport", "http", "--port", "70000"), "--port: must be a port from 1 to 65535, not 70000"),
])
def test_numbers_that_can_only_be_mistakes_are_bad_usage(ws: Path, run_cli, argv, words):
    """``--max-results 0`` answered "No matches.", ``--min-score inf`` the same, ``--lines -1`` one
    line and ``--from 0`` the whole file: each is now refused as the config file refuses them."""
    out = run_cli(*argv, "-w", str(ws), env={"MEMDIR_PROVIDER": "none"})
    assert out.returncode == 2 and words in out.stderr and out.stdout == "", out.stderr


def test_a_negative_debounce_in_the_config_file_is_refused_as_the_flag_is(ws: Path, run_cli):
    """``watch --debounce-ms -5`` is bad usage, but ``sync.watchDebounceMs = -1`` in memdir.toml was
    taken, quietly, as 0: one setting, two answers.  The file names the key and its range too."""
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n[memorySearch.sync]\nwatchDebounceMs = -1\n')
    out = run_cli("search", "standup", "-w", str(ws))
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "memorySearch.sync.watchDebounceMs = -1 in " in out.stderr and "greater than or equal to 0" in out.stderr
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n[memorySearch.sync]\nwatchDebounceMs = 0\n')
    assert run_cli("search", "standup", "-w", str(ws)).returncode == 0


@pytest.mark.parametrize("name,key", [
    # wrote the index (and its lock) to a file named " " in the current folder, here the workspace
    ("MEMDIR_INDEX_PATH", "memorySearch.store.path"),
    # every search failed later, as no configuration error: "unknown embedding provider ''"
    ("MEMDIR_PROVIDER", "memorySearch.provider"),
    ("MEMDIR_FALLBACK", "memorySearch.fallback"),
])
def test_a_blank_setting_from_the_environment_is_a_configuration_error(ws: Path, run_cli, name, key):
    """A variable set to spaces (``"$UNSET "``) is no value: it is refused naming the variable, as
    ``MEMDIR_WORKSPACE=" "`` is, and nothing is written anywhere (an unset or empty one is the default)."""
    before = sorted(p.name for p in ws.iterdir())
    out = run_cli("search", "standup", "-w", str(ws), env={name: " "}, cwd=ws)
    assert out.returncode == 1 and f"{key} from ${name}: cannot be blank" in out.stderr, out.stderr
    assert sorted(p.name for p in ws.iterdir()) == before
    assert run_cli("search", "standup", "-w", str(ws), env={name: "", "MEMDIR_PROVIDER": "none"}).returncode == 0


def test_a_json_integer_too_large_for_a_float_is_clamped_as_the_reference_says(ws: Path, run_cli):
    """``longTermMemory.captureMaxChars`` of 400 digits (valid JSON) failed every command, search
    included, with "int too large to convert to float" and no word of the setting; R§14 floors it
    into 100-10000, as it does 1e300."""
    (ws / "memdir.json").write_text('{"memorySearch": {"provider": "none"}, "longTermMemory": '
                                    '{"captureMaxChars": 1%s}}' % ("0" * 400))
    assert run_cli("search", "standup", "-w", str(ws)).returncode == 0
    shown = json.loads(run_cli("config", "show", "--json", "-w", str(ws), check=True).stdout)["settings"]
    assert {r["key"]: r["value"] for r in shown}["longTermMemory.captureMaxChars"] == 10_000


def test_more_than_200_results_come_back_when_asked_for_and_there(make_workspace, run_cli):
    """``--max-results 250`` with 250 notes matching returned 200: each signal's candidate pool is
    capped at 200 (R§7.3), so any count beyond it was quietly cut.  The pool is at least the count
    asked for (and no larger for 200 or fewer, as before)."""
    ws = make_workspace({f"memory/note-{i}.md": f"# Note {i}\nThe zebra number {i} ran.\n" for i in range(250)})
    env = {"MEMDIR_PROVIDER": "none"}
    for asked, expected in ((250, 250), (2**63, 250), (200, 200), (7, 7)):  # (2**63: past SQLite's LIMIT)
        out = run_cli("search", "zebra", "--max-results", str(asked), "--min-score", "0", "--json", "-w", str(ws),
                      env=env, check=True)
        results = json.loads(out.stdout)["results"]
        assert len(results) == expected and len({r["path"] for r in results}) == expected, asked


def test_json_output_escapes_a_path_argument_that_is_not_utf8(ws: Path, run_cli):
    """A byte that is not UTF-8 in ``memdir get PATH --json`` came back in ``path``: on a strict
    UTF-8 stdout (any locale but C) the command failed with "surrogates not allowed"."""
    out = run_cli("get", "memory/\udcff.md", "--json", "-w", str(ws), env={"PYTHONIOENCODING": "utf-8"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.isascii() and json.loads(out.stdout) == {"text": "", "path": "memory/\udcff.md"}


def test_config_show_json_is_strict_json_with_a_setting_of_infinity(ws: Path, run_cli):
    """``sync.intervalMinutes = inf`` (TOML) is a setting memdir takes, and ``config show --json``
    wrote it as a bare ``Infinity``, which ``jq`` and ``JSON.parse`` refuse: the whole document was
    unreadable.  It is the string JSON5 spells it, which reads back as the same setting."""
    (ws / "memdir.toml").write_text('[memorySearch]\nprovider = "none"\n[memorySearch.sync]\n'
                                    'intervalMinutes = inf\n[memorySearch.remote.batch]\ntimeoutMinutes = inf\n')
    out = run_cli("config", "show", "--json", "-w", str(ws))
    assert out.returncode == 0, out.stderr

    def refuse(constant: str) -> None:
        raise AssertionError(f"not JSON: {constant}")

    values = {s["key"]: s["value"] for s in json.loads(out.stdout, parse_constant=refuse)["settings"]}
    assert values["memorySearch.sync.intervalMinutes"] == "Infinity"
    assert values["memorySearch.remote.batch.timeoutMinutes"] == "Infinity"
    (ws / "memdir.toml").unlink()
    (ws / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none", "sync": {
        "intervalMinutes": values["memorySearch.sync.intervalMinutes"]}}}))
    again = json.loads(run_cli("config", "show", "--json", "-w", str(ws)).stdout, parse_constant=refuse)
    assert {s["key"]: s["value"] for s in again["settings"]}["memorySearch.sync.intervalMinutes"] == "Infinity"


def test_append_from_a_closed_stdin_is_bad_usage(ws: Path, state_dir: Path):
    """``memdir append - <&-`` said "'NoneType' object has no attribute 'buffer'"."""
    import subprocess
    import sys

    from helpers import cli_env

    out = subprocess.run(["sh", "-c", 'exec "$0" -m memdir append - --json -w "$1" <&-', sys.executable, str(ws)],
                         capture_output=True, text=True, env=cli_env(state_dir), timeout=60)
    assert out.returncode == 2 and "stdin is closed" in out.stderr and "NoneType" not in out.stderr
    assert json.loads(out.stdout)["error"]["kind"] == "usage"


def test_commands_run_with_stdout_closed(ws: Path, state_dir: Path):
    """``memdir status >&-`` failed with "'NoneType' object has no attribute 'closed'" (``search
    --json`` with a traceback): the output now goes nowhere, as with ``>/dev/null``."""
    import subprocess
    import sys

    from helpers import cli_env

    for argv in (["status"], ["search", "pagination", "--json"], ["append", "closed stdout note"]):
        out = subprocess.run(["sh", "-c", 'exec "$0" -m memdir "$@" >&-', sys.executable, *argv, "-w", str(ws)],
                             capture_output=True, text=True, env=cli_env(state_dir, MEMDIR_PROVIDER="none"),
                             timeout=60)
        assert out.returncode == 0 and "NoneType" not in out.stderr and "Traceback" not in out.stderr, out.stderr
    assert any("closed stdout note" in p.read_text() for p in (ws / "memory").glob("*.md"))


@pytest.mark.parametrize("argv,code,words", [
    (("bench", "quality", "{tmp}", "--json"), 1, "no samples in"),
    (("bench", "quality", "{tmp}", "--mode", "bogus", "--json"), 2, "unknown mode 'bogus'"),
    (("ltm", "forget", "--json"), 2, "give a memory id or --query"),
    # a blank id or query ("$ID" left empty) exited 1: "Invalid memory ID format:", "Provide query or memoryId."
    (("ltm", "forget", " ", "--json"), 2, "give a memory id or --query"),
    (("ltm", "forget", "--query", " ", "--json"), 2, "give a memory id or --query"),
    (("ltm", "import", "{tmp}/absent.md", "--json"), 1, "ltm import: cannot read"),
])
def test_bench_and_ltm_failures_print_the_json_failure_too(ws: Path, run_cli, tmp_path: Path, argv, code, words):
    """``bench`` and ``ltm`` printed their own errors and returned a code: with ``--json`` stdout
    stayed empty."""
    out = run_cli("-w", str(ws), *(a.format(tmp=tmp_path) for a in argv), env={"MEMDIR_PROVIDER": "none"})
    assert out.returncode == code and words in out.stderr, out.stderr
    got = json.loads(out.stdout)
    assert got["ok"] is False and got["error"]["exitCode"] == code and words in got["error"]["message"]


def test_no_matches_message(ws: Path, run_cli):
    out = run_cli("search", "xylophone", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"})
    assert out.returncode == 0 and out.stdout.strip() == "No matches."


def test_search_with_memory_search_disabled_says_so(ws: Path, run_cli, tmp_path: Path):
    """``memorySearch.enabled = false``: memory_search answers "disabled" and OpenClaw's CLI prints
    "Memory search disabled."; ``memdir search`` searched anyway and printed hits."""
    cfg = tmp_path / "off.toml"
    cfg.write_text('[memorySearch]\nenabled = false\nprovider = "none"\n')
    out = run_cli("search", "PostgreSQL", "-w", str(ws), "--config", str(cfg))
    assert out.returncode == 1 and out.stdout == ""
    assert out.stderr.strip() == "memdir: memory search is disabled in the configuration (memorySearch.enabled = false)"
    failed = json.loads(run_cli("search", "PostgreSQL", "--json", "-w", str(ws), "--config", str(cfg)).stdout)
    assert failed["ok"] is False and "memorySearch.enabled = false" in failed["error"]["message"]


def test_status_names_issues_for_an_empty_workspace(make_workspace, run_cli):
    empty = make_workspace(name="empty")
    st = json.loads(run_cli("status", "--json", "-w", str(empty), env={"MEMDIR_PROVIDER": "none"}).stdout)
    assert st["indexExists"] is False and any("no memory files found" in i for i in st["issues"])


def test_status_heading_names_the_index_not_agent_main(make_workspace, run_cli):
    """Regression: without an agent id the index is the workspace's own, yet status was headed
    'Memory Search (main)' (the default agent id), read as agent main's index; it names the index
    as 'memdir index' does: the workspace folder, or the agent id chosen."""
    ws = make_workspace({"memory/2026-01-01.md": "- a note\n"}, name="notes")
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("status", "-w", str(ws), env=env).stdout.splitlines()[0] == "Memory Search (notes)"
    assert run_cli("status", "-w", str(ws), "--agent", "ops", env=env).stdout.splitlines()[0] == "Memory Search (ops)"


def test_status_of_a_workspace_never_indexed_creates_no_index_and_counts_its_files(make_workspace, run_cli,
                                                                                    state_dir: Path):
    """``status`` before any index made an empty index file, so the next ``status`` called it
    built ("indexExists": true, no "not built yet"), and said "Dirty: yes (0 changed, 0 removed)"
    with every file still to index."""
    ws = make_workspace({"MEMORY.md": "- one\n", "memory/2026-01-01.md": "- two\n"}, name="fresh")
    env = {"MEMDIR_PROVIDER": "none"}
    for _ in range(2):
        st = json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)
        assert st["indexExists"] is False and st["dirty"] is True
        assert (st["scannedFiles"], st["dirtyCount"]) == (2, 2)
        assert sorted(st["dirtyFiles"]) == ["MEMORY.md", "memory/2026-01-01.md"]
        assert not Path(st["indexPath"]).exists()
    text = run_cli("status", "-w", str(ws), env=env).stdout
    assert "Dirty: yes (never indexed: 2 files to index;" in text and "(not built yet: run memdir index)" in text


def test_status_during_a_first_build_says_it_is_being_built(make_workspace, keyword_config, run_cli):
    """While a first index is built (by another process) status must not say "not built yet: run
    memdir index" beside the Writer line that says it is being built."""
    from memdir import Memory

    ws = make_workspace({f"memory/2026-01-{i + 1:02d}.md": "- a note about the Atlas service\n" * 800
                         for i in range(30)}, name="building")
    seen: list[str] = []
    with Memory(ws, config=keyword_config) as mem:
        mem.indexer.progress_file.min_interval = 0

        def progress(done: int, total: int, label: str) -> None:
            if 0 < done < total and not seen:
                seen.append(run_cli("status", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"}).stdout)

        mem.sync(progress=progress)
    assert seen, "the build had one batch only"
    assert "Store: " in seen[0] and "(being built)" in seen[0] and "run memdir index" not in seen[0], seen[0]
    assert "being built now: see Writer" in seen[0] and "Writer: pid " in seen[0], seen[0]


def test_status_calls_an_index_file_holding_no_index_not_built(make_workspace, keyword_config):
    """An index file with memdir's tables and nothing built in it (a first index killed before it
    published) is no index: status said it existed, and 'memdir index' then said 'no index yet'."""
    from memdir import Memory

    ws = make_workspace({"MEMORY.md": "- one\n"}, name="empty-file")
    with Memory(ws, config=keyword_config) as mem:
        assert mem.store.read_meta() is None  # (opening it makes the file)
        st = mem.status()
        assert Path(st["indexPath"]).exists()
        assert st["indexExists"] is False and st["dirtyCount"] == 1
        mem.sync()
        assert mem.status()["indexExists"] is True


def test_status_counts_every_changed_file_not_only_the_listed_ones(make_workspace, run_cli):
    """``status`` lists the first 50 changed files; it said "50 changed" with 70 waiting."""
    ws = make_workspace({"memory/2026-01-01.md": "- first\n"}, name="many")
    env = {"MEMDIR_PROVIDER": "none"}
    assert run_cli("index", "-w", str(ws), env=env).returncode == 0
    for i in range(70):
        (ws / "memory" / f"note-{i:02d}.md").write_text(f"- note {i}\n")
    (ws / "memory" / "2026-01-01.md").unlink()
    st = json.loads(run_cli("status", "--json", "-w", str(ws), env=env).stdout)
    assert (st["dirtyCount"], len(st["dirtyFiles"]), st["removedCount"]) == (70, 50, 1)
    text = run_cli("status", "-w", str(ws), env=env).stdout
    assert "70 changed, 1 removed" in text, text


def test_search_does_not_import_heavy_modules(ws: Path, run_cli):
    code = ("import sys, runpy; sys.argv=['memdir','--version']; "
            "import memdir.cli as c; c.main(['--version']); "
            "print('MODS:' + ','.join(m for m in ('numpy','pydantic','onnxruntime','tqdm') if m in sys.modules))")
    import subprocess
    import sys

    from helpers import cli_env

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env=cli_env(Path("/nonexistent")))
    assert out.returncode == 0, out.stderr
    assert "MODS:\n" in out.stdout


def test_a_one_shot_search_process_starts_no_blas_thread_pool(ws: Path, run_cli, state_dir: Path):
    """``memdir search`` (the process itself) asks OpenBLAS for one thread unless the user chose a
    number; indexing, and a program calling ``main()`` with its own arguments, are left alone."""
    import subprocess
    import sys

    from helpers import cli_env

    assert run_cli("index", "-w", str(ws), env={"MEMDIR_PROVIDER": "none"}).returncode == 0
    code = ("import io, os, sys, contextlib\nfrom memdir.cli import main\nsys.argv = ['memdir', *sys.argv[1:]]\n"
            "with contextlib.redirect_stdout(io.StringIO()):\n    rc = main()\n"
            "print(rc, os.environ.get('OPENBLAS_NUM_THREADS'))\n")

    def blas(*args: str, **extra: str) -> str:
        env = {k: v for k, v in cli_env(state_dir, MEMDIR_PROVIDER="none", **extra).items()
               if not (k == "OPENBLAS_NUM_THREADS" and "OPENBLAS_NUM_THREADS" not in extra)}
        out = subprocess.run([sys.executable, "-c", code, *args, "-w", str(ws)], capture_output=True, text=True,
                             env=env, timeout=120)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    assert blas("search", "ramen", "--no-sync") == "0 1"
    assert blas("search", "ramen", "--no-sync", OPENBLAS_NUM_THREADS="3") == "0 3"
    assert blas("index") == "0 None"
    called = subprocess.run([sys.executable, "-c", "import io, os, contextlib\nfrom memdir.cli import main\n"
                             "with contextlib.redirect_stdout(io.StringIO()):\n"
                             f"    rc = main(['search', 'ramen', '--no-sync', '-w', {str(ws)!r}])\n"
                             "print(rc, os.environ.get('OPENBLAS_NUM_THREADS'))\n"],
                            capture_output=True, text=True, timeout=120,
                            env={k: v for k, v in cli_env(state_dir, MEMDIR_PROVIDER="none").items()
                                 if k != "OPENBLAS_NUM_THREADS"})
    assert called.stdout.strip() == "0 None", called.stderr


PARSE_SAMPLES = [
    ["search", "where is the car", "--json", "--no-sync"],
    ["-w", "search", "search", "q", "--max-results", "3"],  # a workspace folder named like a command
    ["--workspace=ws", "-v", "-v", "search", "--query", "x", "--mode", "keyword", "-q"],
    ["-c", "cfg.toml", "--state-dir", "st", "index", "--force", "--json"],
    ["get", "MEMORY.md", "--from", "2", "--lines", "5"],
    ["status", "--deep", "-w", "ws"],
    ["append", "one", "two", "--date", "2026-01-02"],
    ["mcp", "--transport", "http", "--port", "9000"],
    ["config", "show", "--json"],
    ["migrate", "--to", "postgres"],
    ["agents", "--json"],
    ["agents", "list", "--json", "-w", "ws"],
    ["agents", "forget", "ops", "--dry-run", "--ltm", "-y"],
    ["ltm", "search", "dark mode", "--limit", "2"],
    ["bench", "speed", "--sizes", "1000"],
    ["chat", "--demo"],
    ["completion", "bash"],
    ["watch", "--debounce-ms", "50"],
    ["--version"],
    [],
]


@pytest.mark.parametrize("argv", PARSE_SAMPLES, ids=lambda a: " ".join(a) or "(none)")
def test_parser_for_one_command_parses_as_the_full_one(argv: list[str]) -> None:
    """``memdir search`` builds only its own subcommand's parser: every command line must still
    parse to what the full parser gives."""
    from memdir.cli import build_parser, command_in

    full = build_parser().parse_args(argv)
    only = command_in(argv)
    assert only == full.command
    assert build_parser(only).parse_args(argv) == full


@pytest.mark.parametrize("argv", [["search", "--bogus"], ["get"], ["mcp", "--transport", "pigeon"],
                                  ["-w", "x", "search", "q", "--max-results", "many"]])
def test_parser_for_one_command_reports_errors_as_the_full_one(argv: list[str], capsys) -> None:
    from memdir.cli import build_parser, command_in

    errors = []
    for parser in (build_parser(), build_parser(command_in(argv))):
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args(argv)
        assert exit_info.value.code == 2
        errors.append(capsys.readouterr().err)
    assert errors[0] == errors[1] and "error:" in errors[0]


def test_help_lists_every_command(run_cli) -> None:
    out = run_cli("--help").stdout
    for name in ("index", "search", "get", "status", "watch", "append", "chat", "mcp", "migrate", "agents",
                 "config", "ltm", "bench", "completion"):
        assert f"\n    {name} " in out, name


def test_get_of_a_missing_file_says_so_on_stderr(ws: Path, run_cli):
    """``memdir get memory/typo.md`` printed nothing and exited 0: a mistyped name looked like an
    empty note.  It still reads as empty (R§10.2; ``--json`` is memory_get's payload), and says so."""
    out = run_cli("get", "memory/typo.md", "-w", str(ws))
    assert (out.returncode, out.stdout) == (0, "")
    assert out.stderr == "memdir: no file memory/typo.md (a missing file reads as empty, as memory_get returns it)\n"
    assert run_cli("get", "memory/typo.md", "-q", "-w", str(ws)).stderr == ""
    js = run_cli("get", "memory/typo.md", "--json", "-w", str(ws))
    assert json.loads(js.stdout) == {"text": "", "path": "memory/typo.md"} and js.stderr == ""
    present = run_cli("get", "MEMORY.md", "-w", str(ws))
    assert present.returncode == 0 and present.stdout and "no file" not in present.stderr


_HOSTILE = "- Build log: \x1b[2J\x1b]52;c;ZWNobyBwd25lZA==\x07 colour \x1b[31mred\x1b[0m \x9b done.\n"


def test_control_characters_of_a_note_are_spelt_out_for_a_person(make_workspace, run_cli, state_dir: Path):
    # Before: a snippet was printed as it is, so a note holding captured terminal output (or a
    # hostile page) could clear the screen, recolour it or write to the clipboard (OSC 52) when
    # searched.  For a person its control characters are spelt out; --json and a piped get keep them.
    ws = make_workspace({"memory/2026-01-12.md": "# build\n" + _HOSTILE, "memory/2026-01-13.md": "# lunch\n- ramen\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    shown = run_cli("search", "build log colour", "-w", str(ws), env=env)
    assert shown.returncode == 0, shown.stderr
    assert "\\x1b[2J\\x1b]52;c;ZWNobyBwd25lZA==\\x07 colour \\x1b[31mred\\x1b[0m \\x9b done." in shown.stdout
    assert not any(c in shown.stdout for c in "\x1b\x07\x9b")

    js = json.loads(run_cli("search", "build log colour", "--json", "-w", str(ws), env=env).stdout)
    assert _HOSTILE.strip() in js["results"][0]["snippet"]  # data for a program: as written
    piped = run_cli("get", "memory/2026-01-12.md", "-w", str(ws), env=env)
    assert piped.stdout == "# build\n" + _HOSTILE  # the note's own text when piped or redirected

    # `get` at a terminal: spelt out (a pseudo-terminal as stdout)
    text = _at_a_terminal(state_dir, "get", "memory/2026-01-12.md", "-w", str(ws), env=env)
    assert "\\x1b]52;c;ZWNobyBwd25lZA==\\x07" in text and "\x1b" not in text and "\x07" not in text


def _at_a_terminal(state_dir: Path, *argv: str, env: dict[str, str]) -> str:
    """What ``memdir argv`` prints with a pseudo-terminal as its stdout."""
    import os
    import pty
    import subprocess
    import sys

    from helpers import cli_env

    leader, follower = pty.openpty()
    try:
        proc = subprocess.run([sys.executable, "-m", "memdir", *argv], stdout=follower, stderr=subprocess.PIPE,
                              timeout=120, env={**cli_env(state_dir), **env})
        assert proc.returncode == 0, proc.stderr
        os.close(follower)
        follower = -1
        out = b""
        while True:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # EIO: the terminal's other end is closed and drained
                break
            if not chunk:
                break
            out += chunk
    finally:
        if follower >= 0:
            os.close(follower)
        os.close(leader)
    return out.decode().replace("\r\n", "\n")


def test_search_files_spells_out_a_name_at_a_terminal_and_pipes_it_as_it_is(make_workspace, run_cli, state_dir):
    """``search --files`` printed a note's name raw at a terminal (an escape sequence in a synced
    note's name cleared it), where every other printed path is spelt out; piped or with ``-0`` the
    names stay as they are, for ``xargs``."""
    name = "memory/evil\x1b[2J.md"
    ws = make_workspace({"MEMORY.md": "- hello\n", name: "- the heron nests by the weir\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    assert _at_a_terminal(state_dir, "search", "heron", "--files", "-w", str(ws), env=env) == \
        "memory/evil\\x1b[2J.md\n"
    assert run_cli("search", "heron", "--files", "-w", str(ws), env=env, check=True).stdout == name + "\n"
    assert run_cli("search", "heron", "--files", "-0", "-w", str(ws), env=env, check=True).stdout == name + "\0"


def test_a_note_saved_on_windows_prints_without_a_control_code_per_line(tmp_path: Path, run_cli):
    """A CRLF note's snippet printed every line ending in ``\\x0d`` (its ``\\r`` spelt out as a
    control character); a ``\\r`` before a newline is a line end.  ``--json`` keeps it."""
    ws = tmp_path / "crlf"
    (ws / "memory").mkdir(parents=True)
    (ws / "memory/n.md").write_bytes(b"# Notes\r\n- the heron nests by the lake\r\n- second line\r\n")
    out = run_cli("-w", str(ws), "search", "heron", check=True).stdout
    assert "\\x0d" not in out and "\r" not in out
    assert "# Notes\n- the heron nests by the lake\n- second line\n" in out
    raw = json.loads(run_cli("-w", str(ws), "search", "heron", "--json", check=True).stdout)
    assert raw["results"][0]["snippet"].startswith("# Notes\r\n- the heron nests by the lake\r\n")


def test_file_names_holding_escape_sequences_are_spelt_out_for_a_person(make_workspace, run_cli):
    """A note synced from elsewhere may be named with an escape sequence: ``memdir index`` and
    ``memdir status`` printed such a name raw (a FIFO's, skipped), retitling and clearing the
    terminal, while ``search`` spelt the same names out; so did an error line quoting a path."""
    import os

    ws = make_workspace({"MEMORY.md": "- hello\n", "memdir.json": json.dumps({"memorySearch": {"provider": "none"}})})
    (ws / "memory").mkdir()
    os.mkfifo(ws / "memory" / "evil\x1b]0;PWNED\x07\x1b[2J.md")
    spelt = "memory/evil\\x1b]0;PWNED\\x07\\x1b[2J.md"
    index = run_cli("index", "-w", str(ws))
    status = run_cli("status", "-w", str(ws))
    refused = run_cli("get", "../evil\x1b[2J.md", "-w", str(ws))
    assert index.returncode == 0 and status.returncode == 0 and refused.returncode == 1
    assert spelt in index.stderr and spelt in status.stdout and "evil\\x1b[2J.md" in refused.stderr
    for text in (index.stderr, status.stdout, refused.stderr):
        assert "\x1b" not in text and "\x07" not in text, text
    listed = json.loads(run_cli("status", "--json", "-w", str(ws)).stdout)["skipped"]  # JSON: the name as it is
    assert [item["path"] for item in listed] == ["memory/evil\x1b]0;PWNED\x07\x1b[2J.md"]


def test_bidi_overrides_in_a_note_or_its_name_are_spelt_out_for_a_person(make_workspace, run_cli):
    """A right-to-left override (U+202E) or isolate in a note's name or text was printed as it is:
    a terminal showed ``memory/invoice\u202efdp.exe.md`` as ``memory/invoicedm.exe.pdf`` and a
    snippet's words in another order than the note's ("Trojan Source").  For a person they are spelt
    out as ``\\u202e``, as control characters are; ``--json`` keeps them."""
    name = "memory/invoice\u202efdp.exe.md"
    ws = make_workspace({"MEMORY.md": "- hello\n", name: "- pay the heron \u2067invoice\u2069 \u202aby\u202c friday\n"})
    env = {"MEMDIR_PROVIDER": "none"}
    found = run_cli("search", "heron", "-w", str(ws), env=env, check=True).stdout
    assert "memory/invoice\\u202efdp.exe.md:1-" in found
    assert "- pay the heron \\u2067invoice\\u2069 \\u202aby\\u202c friday" in found
    status = run_cli("status", "-w", str(ws), env=env, check=True).stdout + \
        run_cli("get", "memory/nowhere\u202e.md", "-w", str(ws), env=env).stderr
    for text in (found, status):
        assert not any(ch in text for ch in "\u202a\u202c\u202e\u2067\u2069"), text
    js = json.loads(run_cli("search", "heron", "--json", "-w", str(ws), env=env, check=True).stdout)
    assert js["results"][0]["path"] == name and "\u2067invoice\u2069" in js["results"][0]["snippet"]


def test_a_logged_warning_spells_out_an_escape_sequence_in_a_folder_name(make_workspace, run_cli):
    """Warnings go through logging, which printed a name raw: a workspace folder named with an
    escape sequence, holding two config files, cleared the terminal when the ignored one was named."""
    ws = make_workspace({"MEMORY.md": "- hello\n", "memdir.toml": "[memorySearch]\nprovider = \"none\"\n",
                         "memdir.json": "{}"}, name="ws\x1b[2J\x1b]0;PWNED\x07")
    status = run_cli("status", "-w", str(ws))
    assert status.returncode == 0, status.stderr
    assert "memdir.json is ignored" in status.stderr and "ws\\x1b[2J\\x1b]0;PWNED\\x07" in status.stderr
    assert "\x1b" not in status.stderr and "\x07" not in status.stderr, status.stderr


def test_config_without_an_action_names_the_one_there_is(run_cli, tmp_path: Path):
    """Regression: 'memdir config' alone failed 'the following arguments are required: action', a
    name its help never shows (it lists {show}); it says which action to choose, as 'memdir ltm' and
    'memdir bench' do, exit 2 (with --json, the usage failure object)."""
    out = run_cli("config", cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.strip() == "memdir: config: choose an action: show (memdir config show)"
    failed = json.loads(run_cli("config", "--json", cwd=tmp_path).stdout)
    assert failed["ok"] is False and failed["error"]["kind"] == "usage"
    assert "memdir config show" in failed["error"]["message"]
