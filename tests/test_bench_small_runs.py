"""`bench speed` and `bench backends` at the smallest sizes and odd options: they finish, and leave
nothing behind in the temp folder.

`--queries 1` failed with an IndexError at the cold-start step, after both indexes and the
baselines were built (the cold-start query was the *second* one); `--queries 0` failed on an
empty mean.  `bench backends` without `--work-dir` left its corpora and SQLite indexes in the
temp folder after every run.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from memdir.bench.speed import run_speed


def test_speed_with_one_query_on_a_one_chunk_corpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    report = run_speed([1], embed_subset=0, n_queries=1, budget_s=0.0)
    (entry,) = report["sizes"]
    assert entry["corpus"]["chunks"] >= 1 and entry["memdirSearch"]["keyword"]["n"] == 1
    assert entry["coldStart"]["memdir"]["medianMs"] > 0
    assert not [p.name for p in tmp.iterdir() if p.name.startswith("memdir-speed-")]  # its own temp folder, gone
    with pytest.raises(ValueError, match="n_queries must be at least 1"):
        run_speed([1], embed_subset=0, n_queries=0)


def test_speed_cli_refuses_no_queries(run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    proc = run_cli("bench", "speed", "--sizes", "1", "--queries", "0")
    assert proc.returncode == 2 and "--queries" in proc.stderr and "expected at least 1" in proc.stderr


@pytest.mark.parametrize("argv,words", [
    # a traceback (OverflowError) from the option's parser
    (("speed", "--sizes", "inf"), "bad size 'inf'"),
    (("backends", "--sizes", "1,1e400"), "bad size '1e400'"),
    # ran every query and wrote "budgetSeconds": NaN into the --json report (jq refuses it)
    (("speed", "--sizes", "1", "--budget", "nan"), "--budget: expected a finite number of seconds, 0 or more"),
    (("speed", "--sizes", "1", "--budget", "-1"), "--budget: expected a finite number of seconds, 0 or more"),
    (("backends", "--sizes", "1", "--budget", "inf"), "--budget: expected a finite number of seconds"),
    # ZeroDivisionError after every searcher had run
    (("backends", "--sizes", "1", "--seconds", "0"), "--seconds: expected a finite number of seconds, more than 0"),
    # skipped the step as 0 does, without a word
    (("speed", "--sizes", "1", "--embed-subset", "-1"), "--embed-subset: expected at least 0, got '-1'"),
    (("backends", "--sizes", "1", "--concurrency", "-2"), "--concurrency: expected at least 0, got '-2'"),
])
def test_speed_and_backends_numbers_out_of_range_are_bad_usage(
        run_cli: Callable[..., subprocess.CompletedProcess[str]], argv: tuple[str, ...], words: str) -> None:
    proc = run_cli("bench", *argv, "--json")
    assert proc.returncode == 2 and words in proc.stderr, proc.stderr
    assert json.loads(proc.stdout)["error"]["kind"] == "usage" and "Traceback" not in proc.stderr


def test_backends_without_a_work_dir_cleans_its_temp_folder(
        tmp_path: Path, pg_url: str, run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = run_cli("bench", "backends", "--dsn", pg_url, "--sizes", "1", "--queries", "2", "--budget", "0",
                   "--concurrency", "0", "--json", "--quiet", env={"TMPDIR": str(tmp)}, timeout=300)
    assert proc.returncode == 0, proc.stderr
    report = json.loads(proc.stdout)
    assert report["sizes"]["1"]["sqlite"]["index"]["chunks"] >= 1
    assert report["sizes"]["1"]["postgres"]["index"]["chunks"] >= 1
    assert [p.name for p in tmp.iterdir() if p.name.startswith("memdir-bench-backends-")] == []


def test_compare_with_no_adapter_is_a_usage_error(run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    gate = Path(__file__).parent / "data" / "gate"
    proc = run_cli("bench", "compare", str(gate), "--adapters", " , ")
    assert proc.returncode == 2 and "--adapters: name at least one system" in proc.stderr


def test_backends_without_the_postgres_extra_names_it_before_any_work(tmp_path: Path, state_dir: Path) -> None:
    """Regression: without psycopg the SQLite side was built first, then the run died with a bare
    "No module named 'psycopg'" (minutes lost at 100k chunks, and no word of ``memdir[postgres]``)."""
    import sys

    from helpers import cli_env

    work = tmp_path / "work"
    code = ("import sys; sys.modules['psycopg'] = None; from memdir.cli import main; "
            f"sys.exit(main(['bench', 'backends', '--dsn', 'postgresql://x@127.0.0.1:9/db', '--sizes', '1', "
            f"'--queries', '2', '--budget', '0', '--concurrency', '0', '--work-dir', {str(work)!r}]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                          env=cli_env(state_dir))
    assert proc.returncode == 1, proc.stderr
    assert "pip install 'memdir[postgres]'" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
    assert "sqlite at" not in proc.stderr and not work.exists()  # nothing measured or written first


def test_backends_with_an_unreachable_server_says_so_before_any_work(
        tmp_path: Path, run_cli: Callable[..., subprocess.CompletedProcess[str]]) -> None:
    """Regression: an unreachable server was found only after the SQLite side of the first size ran."""
    import socket

    with socket.socket() as s:  # a loopback port that nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    work = tmp_path / "work"
    proc = run_cli("bench", "backends", "--dsn", f"postgresql://bob:s3cret@127.0.0.1:{port}/db", "--sizes", "1",
                   "--queries", "2", "--budget", "0", "--concurrency", "0", "--work-dir", str(work))
    assert proc.returncode == 1, proc.stderr
    assert f"cannot reach PostgreSQL at postgresql://bob@127.0.0.1:{port}/db" in proc.stderr, proc.stderr
    assert "s3cret" not in proc.stderr and "sqlite at" not in proc.stderr and not work.exists()
