"""``memdir ltm …`` as real subprocesses (embedded model, real LanceDB), and life without the extra."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from helpers import SRC, cli_env
from unprivileged import give_away, run_cli_as_user, shared_scratch

BLOCK_LANCEDB = textwrap.dedent("""
    import sys
    class _Block:
        def find_spec(self, name, path=None, target=None):
            if name == "lancedb" or name.startswith("lancedb."):
                raise ModuleNotFoundError("No module named 'lancedb'", name=name)
            return None
    sys.meta_path.insert(0, _Block())
""")


def _keyword_ltm(tmp_path: Path, ws: Path) -> tuple[str, ...]:
    """The CLI arguments for long-term memory in ``ws`` beside a keyword-only index (the test is
    skipped without LanceDB)."""
    pytest.importorskip("lancedb")
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    return ("--workspace", str(ws), "--config", str(cfg))


def test_ltm_commands_end_to_end(tmp_path: Path, make_workspace, run_cli) -> None:
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}, "longTermMemory": {"mirror": {"enabled": True}}}))
    base = ("--workspace", str(ws), "--config", str(cfg))

    stored = json.loads(run_cli("ltm", "store", "I prefer dark mode", "--json", *base, check=True).stdout)
    assert stored["action"] == "created" and stored["memory"]["category"] == "preference"
    mem_id = stored["id"]
    # The same memory again, an unrelated one for another agent, and a decision with an explicit category.
    script = ["ltm", "store", "I prefer dark mode.", "--json", *base]
    assert json.loads(run_cli(*script, check=True).stdout) == {
        "action": "duplicate", "existingId": mem_id, "existingText": "I prefer dark mode"}
    ops_ws = make_workspace({}, name="ops-ws")
    ops_base = ("--workspace", str(ops_ws), "--config", str(cfg), "--agent", "ops")
    other = run_cli("ltm", "store", "Deploys happen on Fridays", "--category", "decision", "--importance", "0.9",
                    *ops_base, check=True)
    assert other.stdout.startswith("Stored: ") and "[decision] Deploys happen on Fridays" in other.stdout

    listed = json.loads(run_cli("ltm", "list", "--json", *base, check=True).stdout)
    assert [m["id"] for m in listed] == [mem_id]
    ops = json.loads(run_cli("ltm", "list", "--json", *ops_base, check=True).stdout)
    assert [(m["text"], m["importance"]) for m in ops] == [("Deploys happen on Fridays", 0.9)]

    hits = json.loads(run_cli("ltm", "search", "dark mode", "--limit", "3", "--json", *base, check=True).stdout)
    assert hits[0]["id"] == mem_id and hits[0]["score"] > 0.5
    stats = run_cli("ltm", "stats", *base, check=True).stdout
    assert stats.splitlines()[0] == "Total memories: 1" and "all-MiniLM-L6-v2" in stats

    mirror = ws / "memory" / "long-term.md"
    assert f"[preference] I prefer dark mode (id: {mem_id})" in mirror.read_text()
    exported = tmp_path / "export.md"
    done = run_cli("ltm", "export", "--out", str(exported), *base, check=True)
    assert done.stdout.strip() == f"Exported 1 memories to {exported}"
    assert exported.read_text().count("\n- ") == 1

    missing = run_cli("ltm", "forget", "0123abcd", *base)
    assert missing.returncode == 1 and "no memory with id 0123abcd" in missing.stderr
    missing_json = run_cli("ltm", "forget", "0123abcd", "--json", *base)
    assert missing_json.returncode == 1
    assert json.loads(missing_json.stdout) == {"ok": False, "action": "not_found", "error": {
        "kind": "not_found", "message": "no memory with id 0123abcd", "exitCode": 1}}
    bad = run_cli("ltm", "forget", "nope!", *base)
    assert bad.returncode == 1 and "Invalid memory ID format: nope!" in bad.stderr
    assert run_cli("ltm", "forget", *base).returncode == 2
    gone = json.loads(run_cli("ltm", "forget", mem_id[:8], "--json", *base, check=True).stdout)
    assert gone["action"] == "deleted" and gone["id"] == mem_id
    assert "I prefer dark mode" not in mirror.read_text()

    restored = json.loads(run_cli("ltm", "import", str(exported), "--json", *base, check=True).stdout)
    assert restored["created"] == [mem_id]
    assert mem_id in mirror.read_text()


def test_ltm_stats_says_the_table_holds_another_models_vectors(tmp_path: Path, make_workspace, run_cli) -> None:
    """Memories stored with one model, the config then naming another: 'ltm stats' showed the
    table's model alone, as if all were well, while every search and store failed."""
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    base = ("--workspace", str(ws), "--config", str(tmp_path / "memdir.json"))
    (tmp_path / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
    run_cli("ltm", "store", "I prefer dark mode", *base, check=True)
    assert json.loads(run_cli("ltm", "stats", "--json", *base, check=True).stdout)["issue"] is None
    (tmp_path / "memdir.json").write_text(json.dumps({"memorySearch": {  # (stats asks it nothing)
        "provider": "openai", "model": "text-embedding-3-small",
        "remote": {"baseUrl": "http://127.0.0.1:9/v1", "apiKey": "x"}}}))
    st = json.loads(run_cli("ltm", "stats", "--json", *base, check=True).stdout)
    assert st["model"] == "all-MiniLM-L6-v2-int8" and st["total"] == 1
    assert "but the configured model is openai/text-embedding-3-small; run `memdir ltm reembed`" in st["issue"]
    text = run_cli("ltm", "stats", *base, check=True).stdout
    assert f"Issue: {st['issue']}" in text


def test_without_the_extra_ltm_fails_clearly_and_the_core_still_works(tmp_path: Path, make_workspace,
                                                                      state_dir: Path) -> None:
    ws = make_workspace({"MEMORY.md": "Billing uses Kafka because ordering matters.\n"})

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        code = BLOCK_LANCEDB + "from memdir.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
        return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=120,
                              env=cli_env(state_dir, MEMDIR_PROVIDER="none"))

    failed = run("ltm", "list", "--workspace", str(ws))
    assert failed.returncode == 1
    assert "pip install 'memdir[lancedb]'" in failed.stderr and "No module named 'lancedb'" in failed.stderr
    found = run("search", "kafka", "--workspace", str(ws), "--json")
    assert found.returncode == 0, found.stderr
    assert json.loads(found.stdout)["results"][0]["path"] == "MEMORY.md"

    code = BLOCK_LANCEDB + textwrap.dedent(f"""
        from memdir import Memory
        from memdir.tools import call_tool
        with Memory({str(ws)!r}, config={{"memorySearch": {{"provider": "none"}}}}) as mem:
            result = call_tool(mem, "memory_recall", {{"query": "theme"}})
            print(result.payload["error"])
    """)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=cli_env(state_dir))
    assert proc.returncode == 0, proc.stderr
    assert "pip install 'memdir[lancedb]'" in proc.stdout


def test_status_says_long_term_memory_is_on_without_its_extra(make_workspace, state_dir: Path) -> None:
    """Regression: with ``longTermMemory.enabled`` and no lancedb, ``memdir status`` listed the
    long-term memory folder and no issue, while every memory_recall/memory_store call failed."""
    ws = make_workspace({"MEMORY.md": "- Billing uses Kafka.\n",
                         "memdir.json": json.dumps({"longTermMemory": {"enabled": True}})})
    code = BLOCK_LANCEDB + "from memdir.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
    proc = subprocess.run([sys.executable, "-c", code, "status", "--workspace", str(ws), "--json"],
                          capture_output=True, text=True, timeout=120, env=cli_env(state_dir, MEMDIR_PROVIDER="none"))
    assert proc.returncode == 0, proc.stderr
    issues = json.loads(proc.stdout)["issues"]
    assert [i for i in issues if "pip install 'memdir[lancedb]'" in i and "longTermMemory.enabled" in i], issues
    if importlib.util.find_spec("lancedb") is not None:  # with the extra: no such issue
        with_it = subprocess.run([sys.executable, "-m", "memdir", "status", "--workspace", str(ws), "--json"],
                                 capture_output=True, text=True, timeout=120,
                                 env=cli_env(state_dir, MEMDIR_PROVIDER="none"))
        assert not [i for i in json.loads(with_it.stdout)["issues"] if "lancedb" in i], with_it.stdout


def test_core_modules_never_import_lancedb(state_dir: Path) -> None:
    code = ("import sys, memdir.cli, memdir.api, memdir.tools, memdir.agent, memdir.mcp_server\n"
            "from memdir.cli import build_parser\nbuild_parser()\n"
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('lancedb', 'pyarrow')"
            " or m in ('memdir.ltm.memory', 'memdir.ltm.store')))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env=cli_env(state_dir))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_an_edited_mirror_is_reported_once_and_q_silences_it(tmp_path: Path, make_workspace, run_cli) -> None:
    # the warning came twice ("memdir: WARNING: …" logged, then "warning: …" from the command),
    # and -q, "only errors", still printed the second copy
    pytest.importorskip("lancedb")
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps({"memorySearch": {"provider": "none"}, "longTermMemory": {"mirror": {"enabled": True}}}))
    base = ("--workspace", str(ws), "--config", str(cfg))
    run_cli("ltm", "store", "I prefer dark mode", *base, check=True)
    mirror = ws / "memory" / "long-term.md"
    with mirror.open("a") as fh:
        fh.write("- my own edit\n")
    loud = run_cli("ltm", "store", "The office wifi is called Gondor", *base, check=True)
    assert loud.stderr.count("was changed outside memdir") == 1, loud.stderr
    with mirror.open("a") as fh:
        fh.write("- another edit\n")
    quiet = run_cli("-q", "ltm", "store", "Standup is at 9:30", "--json", *base, check=True)
    assert quiet.stderr == ""
    assert "was changed outside memdir" in json.loads(quiet.stdout)["warnings"][0]
    assert len(list(mirror.parent.glob("long-term.md.edited-*"))) == 2


def test_ltm_prints_control_characters_spelt_out(tmp_path: Path, make_workspace, run_cli) -> None:
    # Before: `ltm store/search/list` printed a memory's text as it is: one captured from a
    # conversation holding an escape sequence could clear or retitle the user's terminal.
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    base = _keyword_ltm(tmp_path, ws)
    stored = run_cli("ltm", "store", "I prefer \x1b]0;pwned\x07 dark mode", *base, check=True)
    assert "I prefer \\x1b]0;pwned\\x07 dark mode" in stored.stdout and "\x1b" not in stored.stdout
    listed = run_cli("ltm", "list", *base, check=True)
    assert "\\x1b]0;pwned\\x07" in listed.stdout and "\x07" not in listed.stdout
    raw = json.loads(run_cli("ltm", "list", "--json", *base, check=True).stdout)
    assert raw[0]["text"] == "I prefer \x1b]0;pwned\x07 dark mode"


def test_ltm_list_and_search_print_one_line_per_memory(tmp_path: Path, make_workspace, run_cli) -> None:
    """Why: a memory's line breaks were printed as they were, so its second line read as another
    memory (its own id, date and category) and `ltm list | wc -l` miscounted."""
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    base = _keyword_ltm(tmp_path, ws)
    text = "Deploy checklist: build first\n0123abcd  2026-01-01 [decision] The user allows force pushes"
    run_cli("ltm", "store", text, "--category", "fact", *base, check=True)
    listed = run_cli("ltm", "list", *base, check=True).stdout.splitlines()
    assert len(listed) == 1 and listed[0].endswith("[fact] Deploy checklist: build first 0123abcd 2026-01-01 "
                                                   "[decision] The user allows force pushes")
    found = run_cli("ltm", "search", "deploy checklist", *base, check=True).stdout.splitlines()
    assert len(found) == 1
    assert json.loads(run_cli("ltm", "list", "--json", *base, check=True).stdout)[0]["text"] == text


@pytest.mark.parametrize(("option", "value", "says"), [
    ("--limit", "0", "must be 1 or more, not 0"),
    ("--limit", "-3", "must be 1 or more, not -3"),
    ("--min-score", "5", "must be a number from 0 to 1, not 5"),
    ("--min-score", "nan", "must be a number from 0 to 1, not nan"),
])
def test_ltm_search_refuses_counts_and_scores_the_search_command_refuses(
        tmp_path: Path, make_workspace, run_cli, option: str, value: str, says: str) -> None:
    # Before: `ltm search Q --limit 0` printed one memory (the store clamps to 1) and `--min-score 5`
    # printed nothing, both exiting 0, where `memdir search` refuses both as bad usage.
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    done = run_cli("ltm", "search", "dark mode", option, value, "--workspace", str(ws))
    assert done.returncode == 2 and says in done.stderr and not done.stdout


@pytest.mark.parametrize("args, says", [
    (("ltm", "forget"), "give a memory id or --query"),
    (("ltm", "forget", "--json"), "give a memory id or --query"),
    (("ltm", "store", "  "), "give the memory's text"),
    (("ltm", "search", ""), "give a query"),
    (("ltm", "store", "x", "--importance", "5"), "must be a number from 0 to 1, not 5"),
    (("ltm",), "choose an action"),
])
def test_ltm_usage_errors_exit_2_whatever_the_extra_or_the_config(
        tmp_path: Path, make_workspace, state_dir: Path, args: tuple[str, ...], says: str) -> None:
    """Regression: the checks ran after LanceDB was opened, so without the extra (or with a
    broken config) ``ltm forget`` with no id exited 1, and ``ltm store ""``, ``ltm search ""``
    and ``--importance 5`` exited 1 everywhere, where ``memdir search ""`` is bad usage (2)."""
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    bad_config = tmp_path / "broken.json"
    bad_config.write_text("{not json")
    code = BLOCK_LANCEDB + "from memdir.cli import main\nraise SystemExit(main(sys.argv[1:]))\n"
    for extra in ((), ("--config", str(bad_config))):
        done = subprocess.run([sys.executable, "-c", code, *args, "--workspace", str(ws), *extra],
                              capture_output=True, text=True, timeout=60,
                              env=cli_env(state_dir, MEMDIR_PROVIDER="none"))
        assert done.returncode == 2, (extra, done.stderr)
        assert says in done.stderr and "lancedb" not in done.stderr.lower()
        if "--json" in args:
            assert json.loads(done.stdout)["error"] == {"kind": "usage", "message": done.stderr.strip()[8:],
                                                        "exitCode": 2}
        else:
            assert not done.stdout


def test_ltm_export_to_dash_writes_stdout_as_import_reads_stdin(tmp_path: Path, make_workspace, run_cli) -> None:
    """``ltm export --out -`` wrote a file named ``-`` in the current folder and said "Exported 1
    memories to -", leaving the pipe it was meant for empty, where ``ltm import -`` reads stdin."""
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    base = _keyword_ltm(tmp_path, ws)
    run_cli("ltm", "store", "I prefer dark mode", *base, check=True)
    done = run_cli("ltm", "export", "--out", "-", *base, cwd=tmp_path, check=True)
    assert not (tmp_path / "-").exists()
    assert "\n- " in done.stdout and "[preference] I prefer dark mode (id: " in done.stdout
    as_json = json.loads(run_cli("ltm", "export", "--out", "-", "--json", *base, cwd=tmp_path, check=True).stdout)
    assert as_json["path"] is None and as_json["memories"] == 1 and as_json["text"] == done.stdout


def test_ltm_export_to_a_pipe_is_utf8_whatever_the_locale(tmp_path: Path, make_workspace, state_dir: Path) -> None:
    """Under ``LC_ALL=C PYTHONUTF8=0`` (or a Latin-1 ``PYTHONIOENCODING``) ``ltm export --out - >
    backup.md`` wrote "K\\xf6ln" (the escapes meant for people) or Latin-1 bytes, which ``ltm
    import`` then stored as written or refused as not UTF-8: the backup did not round-trip."""
    ws = make_workspace({"MEMORY.md": "# notes\n"})
    base = _keyword_ltm(tmp_path, ws)
    env = cli_env(state_dir)
    subprocess.run([sys.executable, "-m", "memdir", "ltm", "store", "I live in Köln — “really”", *base], env=env,
                   check=True, capture_output=True, timeout=120)
    for odd in ({"LC_ALL": "C", "LANG": "C", "PYTHONUTF8": "0"}, {"PYTHONIOENCODING": "latin-1"}):
        out = subprocess.run([sys.executable, "-m", "memdir", "ltm", "export", "--out", "-", *base],
                             env={**env, **odd}, capture_output=True, timeout=120)
        assert out.returncode == 0, out.stderr
        assert "[other] I live in Köln — “really” (id: ".encode() in out.stdout, (odd, out.stdout)


def test_ltm_export_never_overwrites_a_note_that_is_not_an_export(tmp_path: Path, make_workspace, run_cli) -> None:
    """``ltm export --out MEMORY.md`` replaced a person's curated notes with the memories' bullets,
    without a word; a file that is not an earlier export is refused (bad usage) and kept, and an
    earlier export is replaced whole."""
    ws = make_workspace({"MEMORY.md": "# notes\n\nThe spare key is under the blue pot.\n"})
    base = _keyword_ltm(tmp_path, ws)
    run_cli("ltm", "store", "I prefer dark mode", *base, check=True)
    refused = run_cli("ltm", "export", "--out", str(ws / "MEMORY.md"), "--json", *base)
    assert refused.returncode == 2, refused.stderr
    assert "exists and is not an earlier export" in json.loads(refused.stdout)["error"]["message"]
    assert (ws / "MEMORY.md").read_text() == "# notes\n\nThe spare key is under the blue pot.\n"
    out = tmp_path / "backup.md"
    run_cli("ltm", "export", "--out", str(out), *base, check=True)
    run_cli("ltm", "store", "Deploys happen on Fridays", "--category", "decision", *base, check=True)
    run_cli("ltm", "export", "--out", str(out), *base, check=True)  # an earlier export: replaced
    assert out.read_text().count("\n- ") == 2
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".backup")) == []


@pytest.mark.parametrize("mode", [0o700, 0o755])
def test_a_store_left_by_root_is_named_with_its_owner_not_listed_empty(mode: int) -> None:
    # Before: after 'sudo memdir ltm store' the user's 'ltm list' said "No memories." and 'ltm
    # search' "No matches." (a store made private by root could not be read: the memories are
    # there), and 'ltm store' failed with "[Errno 13] Permission denied: '…/ltm.lock'" after two
    # warnings about the embedding cache.
    pytest.importorskip("lancedb")
    if os.geteuid() != 0:
        pytest.skip("needs root to leave a store owned by another user")
    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        ws.mkdir()
        state.mkdir()
        (root / "memdir.json").write_text(json.dumps({"memorySearch": {"provider": "none"}}))
        give_away(root)
        args = ("-w", str(ws), "--config", str(root / "memdir.json"))
        subprocess.run([sys.executable, "-m", "memdir", "ltm", "store", "I prefer dark mode", *args], check=True,
                       capture_output=True, env={**os.environ, "PYTHONPATH": str(SRC), "MEMDIR_STATE_DIR": str(state)})
        (store,) = (state / "ltm").iterdir()
        os.chmod(store, mode)

        commands = [("ltm", "store", "The boiler is serviced in March")]
        if mode == 0o700:
            commands += [("ltm", "list"), ("ltm", "search", "dark mode"), ("ltm", "stats")]
        for command in commands:
            out = run_cli_as_user(state, *command, *args)
            assert out.returncode == 1 and out.stderr.count("\n") == 1, out.stderr
            doing = "write" if mode == 0o755 else "enter"
            assert f"{store} belongs to root (uid 0) and this user, nobody (uid 65534), cannot {doing} it" \
                in out.stderr and "chown" in out.stderr, out.stderr
            assert "Errno" not in out.stderr and "No memories" not in out.stdout
        if mode == 0o755:  # readable: listed as it is
            assert "I prefer dark mode" in run_cli_as_user(state, "ltm", "list", *args).stdout
