"""Issue 12's stumbles and CLI conventions, each as a user meets them: a real ``memdir`` subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli_env

KW = {"MEMDIR_PROVIDER": "none"}


@pytest.fixture
def notes(make_workspace) -> Path:
    return make_workspace({
        "MEMORY.md": "# Notes\n- We chose PostgreSQL for the ledger.\n- Kafka carries billing events.\n",
        "memory/2026-01-12.md": "- Decided the API uses cursor pagination.\n- PostgreSQL upgrade planned.\n",
        **{f"memory/2025-12-{d:02d}.md": f"- Routine standup {d}.\n" for d in range(1, 7)},
    }, name="notes")


# --- 1. the quick start does not break the next command ------------------------------------------

def test_a_second_workspace_indexes_without_an_agent_id(make_workspace, run_cli, state_dir: Path):
    first = make_workspace({"MEMORY.md": "- Billing uses Kafka.\n"}, name="workspace")
    second = make_workspace({"MEMORY.md": "- My own notes about gardening.\n"}, name="my notes")
    assert run_cli("-w", str(first), "index", env=KW).returncode == 0
    again = run_cli("-w", str(second), "index", env=KW)
    assert again.returncode == 0, again.stderr
    st1 = json.loads(run_cli("-w", str(first), "status", "--json", env=KW).stdout)
    st2 = json.loads(run_cli("-w", str(second), "status", "--json", env=KW).stdout)
    assert st1["indexKey"] == st2["indexKey"] == "workspace" and st1["indexPath"] != st2["indexPath"]
    assert Path(st2["indexPath"]).parent == state_dir / "memory"
    assert Path(st2["indexPath"]).name.startswith("my-notes-")  # readable: the folder's name, slugged
    found = json.loads(run_cli("-w", str(second), "search", "gardening", "--json", env=KW).stdout)
    assert [r["path"] for r in found["results"]] == ["MEMORY.md"]
    assert "this workspace" in run_cli("-w", str(second), "status", env=KW).stdout
    # A chosen agent id keeps OpenClaw's per-agent index: one workspace per agent id.
    assert run_cli("-w", str(first), "--agent", "main", "index", env=KW).returncode == 0
    assert (state_dir / "memory" / "main.sqlite").is_file()
    clash = run_cli("-w", str(second), "index", env={**KW, "MEMDIR_AGENT": "main"})
    assert clash.returncode == 1 and "--agent" in clash.stderr


# --- 2 and 10. chat: its options are visible, and a demo runs offline -----------------------------

def test_chat_help_shows_its_options_defaults_and_environment(run_cli):
    out = run_cli("chat", "--help")
    assert out.returncode == 0
    for text in ("--base-url", "--model", "--api-key-env", "--session", "--context-window", "--demo",
                 "OPENAI_BASE_URL", "MEMDIR_CHAT_MODEL", "OPENAI_API_KEY", "gpt-4o-mini", "--workspace"):
        assert text in out.stdout, text


def test_chat_demo_runs_the_whole_loop_offline(run_cli, tmp_path: Path):
    out = run_cli("chat", "--demo", env={"OPENAI_API_KEY": "", "HOME": str(tmp_path)}, timeout=120)
    assert out.returncode == 0, out.stderr
    text = out.stdout
    assert "[tool] memory_append -> memory/" in text  # the flush wrote a note
    assert "Saved the last" in text  # /new ran the session hook
    assert "From memory: - The billing service publishes its events to Kafka" in text
    assert "From memory: - the staging database password rotates every 90 days." in text
    assert not (tmp_path / ".memdir").exists()  # nothing of the user's is touched


def test_chat_demo_ignores_the_users_memdir_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """The demo promises that nothing of the user's is touched: with ``MEMDIR_INDEX_PATH`` set it
    wrote its index into the user's index file (failing the next demo, whose workspace was not the
    index's owner), and ``MEMDIR_CONFIG``'s extraPaths put the user's notes into its searches."""
    import io

    from memdir.chat_cli import run_demo

    private = tmp_path / "private"
    private.mkdir()
    (private / "notes.md").write_text("- The billing service publishes its events to my private queue.\n")
    config = tmp_path / "user.json"
    config.write_text(json.dumps({"memorySearch": {"extraPaths": [str(private)]}}))
    index = tmp_path / "user-index" / "mine.sqlite"
    monkeypatch.setenv("MEMDIR_CONFIG", str(config))
    monkeypatch.setenv("MEMDIR_INDEX_PATH", str(index))
    out = io.StringIO()
    assert run_demo(out) == 0
    assert "billing service publish its events to?') -> 1 result(s), best: MEMORY.md" in out.getvalue()
    assert not index.parent.exists()


# --- 3. a workspace that does not exist ----------------------------------------------------------

@pytest.mark.parametrize("command", [["index"], ["search", "x"], ["status"], ["get", "MEMORY.md"],
                                     ["append", "note"], ["config", "show"]])
def test_missing_workspace_is_an_error_for_every_command(run_cli, state_dir: Path, tmp_path: Path, command):
    missing = tmp_path / "nonexistent"
    out = run_cli("-w", str(missing), *command, env=KW)
    assert out.returncode == 1
    assert f"workspace {missing} does not exist" in out.stderr and "Traceback" not in out.stderr
    assert not missing.exists() and not (state_dir / "memory").exists()


# --- 4. a provider that cannot run is reported where it happens -----------------------------------

def test_index_says_it_builds_keyword_only_and_why(notes: Path, run_cli, tmp_path: Path):
    (tmp_path / "c.toml").write_text('[memorySearch]\nprovider = "openai"\n')
    env = {"MEMDIR_CONFIG": str(tmp_path / "c.toml")}
    text = run_cli("-w", str(notes), "index", env=env)
    assert text.returncode == 0
    lines = [ln for ln in text.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "keyword-only index" in lines[0] and "OPENAI_API_KEY" in lines[0]
    js = run_cli("-w", str(notes), "index", "--force", "--json", env=env)
    report = json.loads(js.stdout)
    assert report["mode"] == "fts-only" and any("keyword-only" in w for w in report["warnings"])
    assert "keyword-only" in js.stderr
    quiet = run_cli("-w", str(notes), "-q", "index", env=env)
    assert quiet.returncode == 0 and quiet.stderr == ""
    chosen = run_cli("-w", str(notes), "index", "--force", env=KW)  # provider = none: nothing to say
    assert chosen.returncode == 0 and chosen.stderr == ""


# --- 5. bad usage exits 2 ------------------------------------------------------------------------

def test_missing_search_query_is_bad_usage(notes: Path, run_cli):
    for args in (["search"], ["search", "   "], ["search", "--query", ""]):
        out = run_cli("-w", str(notes), *args, env=KW)
        assert out.returncode == 2 and "Missing search query" in out.stderr, args


# --- 6. a closed pipe is not an error ------------------------------------------------------------

@pytest.mark.parametrize("args", [["config", "show", "--json"], ["search", "PostgreSQL", "--json"],
                                  ["get", "MEMORY.md"],
                                  ["--version"]])  # (was a traceback and exit 1: printed outside main's try)
def test_reader_going_away_is_quiet(notes: Path, state_dir: Path, args: list[str]):
    env = cli_env(state_dir, **KW)
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "-w", str(notes), *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()  # like `| head` that has already exited: every write gets EPIPE
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 141  # as a Unix tool killed by SIGPIPE (128 + 13)
    assert stderr == ""


def test_pipe_into_head_prints_no_error(notes: Path, state_dir: Path):
    env = cli_env(state_dir, **KW)
    shell = f"{sys.executable} -m memdir -w '{notes}' config show --json | head -n 2"
    out = subprocess.run(["bash", "-c", shell], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.startswith("{") and out.stderr == ""


# --- 7. unknown config keys suggest the right one --------------------------------------------------

def test_unknown_config_key_suggests_a_spelling(notes: Path, run_cli):
    (notes / "memdir.toml").write_text("[memorySearch.query]\nmaxResult = 3\n")
    out = run_cli("-w", str(notes), "status")
    assert out.returncode == 1
    assert "did you mean 'memorySearch.query.maxResults'?" in out.stderr and str(notes / "memdir.toml") in out.stderr


def test_nonsense_config_values_fail_every_command(notes: Path, run_cli):
    (notes / "memdir.toml").write_text("[memorySearch.query]\nmaxResults = 0\n")
    out = run_cli("-w", str(notes), "search", "postgres")
    assert out.returncode == 1 and "maxResults = 0" in out.stderr and "greater than 0" in out.stderr
    bad_agent = run_cli("-w", str(notes), "--agent", "../../escaped", "index", env=KW)
    assert bad_agent.returncode == 1 and "not a plain name" in bad_agent.stderr


# --- conventions: verbosity, completion, modes, paths-only, append ------------------------------------

def test_verbose_and_quiet(notes: Path, run_cli):
    assert run_cli("-w", str(notes), "index", env=KW).returncode == 0
    loud = run_cli("-w", str(notes), "-v", "status", env=KW)
    assert loud.returncode == 0 and "memdir: INFO: memdir.cli: workspace" in loud.stderr
    assert run_cli("-w", str(notes), "status", env=KW).stderr == ""
    (notes / "memory" / "2026-02-01.md").write_text("- new PostgreSQL note\n")
    sync_log = run_cli("-w", str(notes), "search", "PostgreSQL", "-v", env=KW).stderr
    assert "sync (search)" in sync_log
    gone = run_cli("-w", str(notes), "-q", "get", "nope.md", env=KW)
    assert gone.returncode == 1 and gone.stderr.startswith("memdir: ")  # errors still show with -q


def test_verbose_names_the_index_on_every_command(notes: Path, run_cli):
    """Regression: a search's settings come from a snapshot after the first run, and with them
    ``-v`` said nothing at all: 'memdir -v search' could not tell which workspace, index and config
    file it used, as '-v index' and '-v status' do."""
    assert run_cli("-w", str(notes), "index", env=KW).returncode == 0
    for _ in range(2):  # the second run takes the settings from the snapshot the first one saved
        loud = run_cli("-w", str(notes), "-v", "search", "PostgreSQL", "--no-sync", env=KW)
        assert loud.returncode == 0 and "memdir: INFO: memdir.cli: workspace" in loud.stderr, loud.stderr
        assert ".sqlite (keyed by workspace)" in loud.stderr


def test_shell_completion_scripts_and_live_completion(run_cli, state_dir: Path, tmp_path: Path):
    for shell in ("bash", "zsh", "fish"):
        script = run_cli("completion", shell)
        assert script.returncode == 0 and "_ARGCOMPLETE" in script.stdout, shell
    bash = run_cli("completion", "bash").stdout
    assert subprocess.run(["bash", "-n"], input=bash, text=True).returncode == 0
    assert "complete " in bash and " memdir" in bash

    def complete(line: str) -> list[str]:
        out = tmp_path / "completions.txt"
        env = cli_env(state_dir, _ARGCOMPLETE="1", COMP_LINE=line, COMP_POINT=str(len(line)),
                      _ARGCOMPLETE_STDOUT_FILENAME=str(out), _ARGCOMPLETE_IFS="\n")
        proc = subprocess.run([sys.executable, "-m", "memdir"], env=env, capture_output=True, text=True,
                              timeout=60)
        assert proc.returncode == 0, proc.stderr
        return out.read_text().split()

    assert complete("memdir sea") == ["search"]
    assert "--mode" in complete("memdir search --mo")
    assert set(complete("memdir search --mode ")) == {"hybrid", "keyword", "vector"}
    assert "--demo" in complete("memdir chat --de")


def test_search_modes_and_paths_only(notes: Path, run_cli):
    kw = json.loads(run_cli("-w", str(notes), "search", "PostgreSQL", "--mode", "keyword", "--json",
                            env=KW).stdout)
    assert kw["mode"] == "fts-only" and {r["path"] for r in kw["results"]} == {"MEMORY.md", "memory/2026-01-12.md"}
    vec = run_cli("-w", str(notes), "search", "PostgreSQL", "--mode", "vector", env=KW)
    assert vec.returncode == 1 and "vector search needs embeddings" in vec.stderr
    bad = run_cli("-w", str(notes), "search", "x", "--mode", "semantic", env=KW)
    assert bad.returncode == 2
    files = run_cli("-w", str(notes), "search", "PostgreSQL pagination ledger", "--files", env=KW)
    assert files.returncode == 0
    paths = files.stdout.splitlines()
    assert sorted(paths) == ["MEMORY.md", "memory/2026-01-12.md"] and len(set(paths)) == len(paths)
    assert all((notes / p).is_file() for p in paths)
    none = run_cli("-w", str(notes), "search", "xylophone", "--files", env=KW)
    assert none.returncode == 0 and none.stdout == ""
    assert run_cli("-w", str(notes), "search", "x", "--files", "--json", env=KW).returncode == 2


def test_files_with_null_ends_each_path_with_nul_for_names_holding_a_newline(make_workspace, run_cli):
    """``--files`` prints one path per line; a note whose name holds a newline made that ambiguous.
    ``-0`` ends each path with NUL (for ``xargs -0``), and needs ``--files``."""
    ws = make_workspace({"memory/odd\nname.md": "- the walrus budget\n", "memory/plain.md": "- walrus plans\n"})
    out = run_cli("-w", str(ws), "search", "walrus", "--files", "-0", env=KW)
    assert out.returncode == 0, out.stderr
    assert out.stdout.endswith("\0") and sorted(out.stdout.split("\0")[:-1]) == ["memory/odd\nname.md",
                                                                                  "memory/plain.md"]
    lines = run_cli("-w", str(ws), "search", "walrus", "--files", env=KW)
    assert "\0" not in lines.stdout and lines.stdout.endswith("\n")
    bad = run_cli("-w", str(ws), "search", "walrus", "-0", env=KW)
    assert bad.returncode == 2 and "--files" in bad.stderr


def test_vector_mode_with_the_embedded_model(notes: Path, run_cli):
    res = json.loads(run_cli("-w", str(notes), "search", "which database holds the ledger?", "--mode", "vector",
                             "--json", "--min-score", "0").stdout)
    assert res["mode"] == "vector" and res["results"]
    assert all(r.get("explain") is None for r in res["results"])


def test_vector_mode_again_once_the_settings_are_remembered(notes: Path, run_cli, state_dir: Path):
    """A search remembers its settings (``<state>/cache/settings-*.json``); the next run reads them
    back as a read-only view, which ``--mode vector`` once tried to ``model_copy`` (exit 1)."""
    assert run_cli("-w", str(notes), "search", "ledger").returncode == 0
    assert list((state_dir / "cache").glob("settings-*.json"))
    for _ in range(2):
        out = run_cli("-w", str(notes), "search", "which database holds the ledger?", "--mode", "vector",
                      "--json", "--min-score", "0")
        assert out.returncode == 0, out.stderr
        res = json.loads(out.stdout)
        assert res["mode"] == "vector" and res["results"]
    hybrid = json.loads(run_cli("-w", str(notes), "search", "ledger", "--json").stdout)
    assert hybrid["mode"] == "hybrid"  # the shared settings were not switched to vectors only


def test_append_text_stdin_and_json(notes: Path, run_cli, state_dir: Path):
    out = run_cli("-w", str(notes), "append", "Decided:", "billing", "retries", "3", "times", "--date", "2026-03-04",
                  env=KW)
    assert out.returncode == 0 and out.stdout.strip() == "Appended to memory/2026-03-04.md"
    assert (notes / "memory" / "2026-03-04.md").read_text() == "Decided: billing retries 3 times\n"
    piped = subprocess.run([sys.executable, "-m", "memdir", "-w", str(notes), "append", "-", "--json",
                            "--date", "2026-03-04"], input="- second line\n- third line\n", capture_output=True,
                           text=True, env=cli_env(state_dir, **KW), timeout=60)
    assert piped.returncode == 0, piped.stderr
    assert json.loads(piped.stdout) == {"path": "memory/2026-03-04.md", "appended": True}
    assert (notes / "memory" / "2026-03-04.md").read_text() == (
        "Decided: billing retries 3 times\n- second line\n- third line\n")
    found = json.loads(run_cli("-w", str(notes), "search", "billing retries", "--json", env=KW).stdout)
    assert found["results"][0]["path"] == "memory/2026-03-04.md"  # the next search sees it
    assert run_cli("-w", str(notes), "append", env=KW).returncode == 2
    assert run_cli("-w", str(notes), "append", "   ", env=KW).returncode == 2
    bad_date = run_cli("-w", str(notes), "append", "x", "--date", "2026-13-01", env=KW)
    assert bad_date.returncode == 2 and "invalid date" in bad_date.stderr
    today = run_cli("-w", str(notes), "append", "today's note", env=KW)
    assert today.returncode == 0 and today.stdout.startswith("Appended to memory/20")


def test_cli_start_imports_stay_light():
    code = ("import sys; import memdir.cli as c; c.build_parser(); "
            "print(','.join(m for m in ('numpy', 'pydantic', 'argcomplete', 'httpx', 'mcp') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")})
    assert out.returncode == 0 and out.stdout.strip() == "", out.stdout + out.stderr
