"""The README's "Using it" commands and its Python example, run as written against ``~/agent``.

``HOME`` is a temp folder holding a copy of the example workspace as ``~/agent``, so ``~``
and the default state folder ``~/.memdir`` are exercised the way a newcomer meets them.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def _home(tmp_path: Path) -> dict[str, str]:
    home = tmp_path / "home"
    shutil.copytree(ROOT / "examples" / "workspace", home / "agent")
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_")}
    env["HOME"] = str(home)
    env["PYTHONPATH"] = str(ROOT / "src") + os.pathsep + env.get("PYTHONPATH", "")
    return env


def _python_example() -> str:
    section = README.split("\n## Using it\n", 1)[1].split("\n### ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    return block


def test_the_python_example_uses_the_same_index_as_the_cli(tmp_path: Path):
    """Regression: the example passed ``agent_id="main"``, which gave the API another index
    (``main.sqlite``) than ``memdir -w ~/agent`` uses, built and embedded twice, and claimed agent
    ``main`` for that workspace."""
    env = _home(tmp_path)
    cli = subprocess.run([sys.executable, "-m", "memdir", "-w", "~/agent", "index"], env=env, capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    index_dir = Path(env["HOME"]) / ".memdir" / "memory"
    before = sorted(p.name for p in index_dir.glob("*.sqlite"))
    run = subprocess.run([sys.executable, "-c", _python_example()], env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert re.search(r"^\d\.\d{3} memory/2026-01-12\.md:\d+-\d+$", run.stdout, flags=re.M), run.stdout
    assert "# Long-term memory" in run.stdout
    assert sorted(p.name for p in index_dir.glob("*.sqlite")) == before  # no second index


def test_a_folder_of_ordinary_notes_is_not_indexed_without_a_word(tmp_path: Path):
    """Regression: the Quick start's next step, ``memdir --workspace ~/notes index`` on a folder of
    ordinary notes (no MEMORY.md, no memory/), printed "0 indexed" and every search "No matches."
    with nothing saying why; both name the memory files memdir reads and how to add the others."""
    env = _home(tmp_path)
    env["MEMDIR_PROVIDER"] = "none"
    notes = Path(env["HOME"]) / "notes"
    notes.mkdir()
    (notes / "ideas.md").write_text("# Ideas\n- use Kafka for billing\n", encoding="utf-8")

    def memdir(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memdir", "--workspace", "~/notes", *args], env=env,
                              capture_output=True, text=True, timeout=120)

    index = memdir("index")
    assert index.returncode == 0, index.stderr
    assert "no memory files in" in index.stderr and "(ideas.md)" in index.stderr, index.stderr
    assert 'extraPaths = ["."]' in index.stderr
    search = memdir("search", "kafka")
    assert search.returncode == 0 and search.stdout == "No matches.\n"
    assert "no memory files in" in search.stderr and "ideas.md" in search.stderr, search.stderr
    # the fix it names works, and then nothing more is said
    (notes / "memdir.toml").write_text('[memorySearch]\nextraPaths = ["."]\n', encoding="utf-8")
    index = memdir("index")
    assert index.returncode == 0 and "1 indexed" in index.stdout and "no memory files" not in index.stderr
    assert "ideas.md" in memdir("search", "kafka").stdout


def test_watching_a_folder_of_ordinary_notes_says_none_is_memory(tmp_path: Path):
    """Regression: 'memdir --workspace ~/notes watch' on ordinary notes watched nothing and said
    'synced (start): 0 indexed', so edits to ideas.md were never indexed without a word why."""
    env = _home(tmp_path)
    env["MEMDIR_PROVIDER"] = "none"
    notes = Path(env["HOME"]) / "notes"
    notes.mkdir()
    (notes / "ideas.md").write_text("- use Kafka for billing\n", encoding="utf-8")
    proc = subprocess.Popen([sys.executable, "-m", "memdir", "--workspace", "~/notes", "watch"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        started = [proc.stdout.readline() for _ in range(2)]  # "Watching …", "… (start): 0 indexed …"
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=60)
    assert "(start): 0 indexed" in started[1], started
    assert "no memory files in" in err and "ideas.md" in err, err


def test_the_readme_config_example_names_a_missing_extra_folder(tmp_path: Path):
    """Regression: the README's example memdir.toml lists extraPaths = ["~/team-notes"]; with no
    such folder (or a misspelt one) 'memdir index' indexed nothing from it and said nothing, only
    'memdir status' did.  The example is written as given, then the folder made."""
    env = _home(tmp_path)
    section = README.split("\n### Configuration\n", 1)[1].split("\n### ", 1)[0]
    (block,) = re.findall(r"```toml\n(.*?)```", section, flags=re.S)
    agent = Path(env["HOME"]) / "agent"
    (agent / "memdir.toml").write_text(block.replace('provider = "auto"', 'provider = "none"'), encoding="utf-8")

    def index() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "memdir", "-w", "~/agent", "index"], env=env,
                              capture_output=True, text=True, timeout=120)

    first = index()
    assert first.returncode == 0, first.stderr
    assert "extraPaths" in first.stderr and str(Path(env["HOME"]) / "team-notes") in first.stderr, first.stderr
    (Path(env["HOME"]) / "team-notes").mkdir()
    (Path(env["HOME"]) / "team-notes" / "roster.md").write_text("- Dana owns billing\n", encoding="utf-8")
    second = index()
    assert second.returncode == 0 and "1 indexed" in second.stdout and "extraPaths" not in second.stderr


def test_the_long_term_memory_example_runs_as_written(tmp_path: Path):
    """Regression: the long-term memory example called ``ltm.auto_capture(messages)`` with no
    ``messages`` anywhere in it: pasted as written it stored a memory, then stopped on
    "NameError: name 'messages' is not defined"; it captures a turn it gives."""
    pytest.importorskip("lancedb", reason="the long-term memory extra (pip install 'memdir[lancedb]')")
    env = {**_home(tmp_path), "MEMDIR_CACHE_DIR": os.environ["MEMDIR_CACHE_DIR"]}  # the run's model copy
    section = README.split("\n## Long-term memory (LanceDB)\n", 1)[1].split("\n## ", 1)[0]
    (block,) = re.findall(r"```python\n(.*?)```", section, flags=re.S)
    check = "\nprint([r.text for r in Memory('~/agent').long_term.list()])"
    run = subprocess.run([sys.executable, "-c", block + check], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    assert "I prefer dark mode" in run.stdout
