"""The README's Quick start, run as written from README.md itself, then the install routes it documents.

Slow (a fresh virtualenv and a real ``pip install``, about a minute); CI runs it too.  The copy of
the checkout is made from ``git ls-files`` so it holds exactly what a fresh clone holds.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"

pytestmark = pytest.mark.slow


def quick_start_blocks(text: str) -> list[str]:
    """The fenced ``bash`` blocks of the README's "## Quick start" section, in order."""
    section = text.split("\n## Quick start\n", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S)]


def clean_env(state: Path) -> dict[str, str]:
    """The user's environment as a newcomer has it: no memdir variables, not inside our test venv."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("MEMDIR_") and k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    ours = str(Path(sys.prefix) / "bin")
    env["PATH"] = os.pathsep.join(p for p in env.get("PATH", "").split(os.pathsep) if p and p != ours)
    env["MEMDIR_STATE_DIR"] = str(state)  # the only change: keep the test away from ~/.memdir
    return env


def fresh_clone(dest: Path) -> Path:
    files = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           capture_output=True, text=True)
    if files.returncode != 0:
        pytest.skip("not a git checkout")
    for rel in filter(None, files.stdout.split("\0")):
        src = ROOT / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    return dest


def test_readme_has_exactly_two_setup_commands():
    blocks = quick_start_blocks(README.read_text(encoding="utf-8"))
    assert len(blocks) == 2, blocks
    install, tests = blocks
    assert "\n" not in install and install.startswith("python3 -m venv .venv && ")
    assert tests == "./scripts/test" and os.access(ROOT / "scripts" / "test", os.X_OK)


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str], subprocess.CompletedProcess]:
    base = tmp_path_factory.mktemp("quickstart")
    clone = fresh_clone(base / "memdir")
    env = clean_env(base / "state")
    command = quick_start_blocks(README.read_text(encoding="utf-8"))[0]
    proc = subprocess.run(["bash", "-c", command], cwd=clone, env=env, capture_output=True, text=True, timeout=900)
    return clone, env, proc


def test_quick_start_as_written_then_a_second_workspace(quick_start, tmp_path: Path):
    clone, env, proc = quick_start
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    assert "Memory index updated" in proc.stdout
    first_hit = next(line for line in proc.stdout.splitlines() if re.match(r"^\d\.\d{3} ", line))
    assert "memory/" in first_hit or "MEMORY.md" in first_hit
    assert "Kafka" in proc.stdout  # the example workspace's answer to the README's question

    # The next thing a newcomer does: their own notes, no --agent.
    notes = tmp_path / "notes"
    (notes / "memory").mkdir(parents=True)
    (notes / "memory" / "2026-02-01.md").write_text("- Decided: the garden shed gets a green roof.\n")
    memdir = str(clone / ".venv" / "bin" / "memdir")
    indexed = subprocess.run([memdir, "--workspace", str(notes), "index"], env=env, capture_output=True,
                             text=True, timeout=300)
    assert indexed.returncode == 0, indexed.stderr
    found = subprocess.run([memdir, "--workspace", str(notes), "search", "what colour is the shed roof?",
                            "--files"], env=env, capture_output=True, text=True, timeout=300)
    assert found.returncode == 0 and found.stdout.splitlines() == ["memory/2026-02-01.md"], found.stderr
    demo = subprocess.run([memdir, "chat", "--demo"], env=env, capture_output=True, text=True, timeout=300)
    assert demo.returncode == 0 and "From memory:" in demo.stdout, demo.stderr


def test_built_wheel_is_complete_and_installs(quick_start, tmp_path: Path):
    """The wheel carries the tokenizer, py.typed and the licence, and runs once installed (no checkout)."""
    clone, env, proc = quick_start
    assert proc.returncode == 0, proc.stderr[-4000:]
    venv_python = str(clone / ".venv" / "bin" / "python")
    dist = tmp_path / "dist"
    built = subprocess.run([venv_python, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(dist), str(clone)],
                           env=env, capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr[-4000:]
    wheel = next(dist.glob("memdir-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    for wanted in ("memdir/data/minilm/tokenizer.json", "memdir/data/minilm/LICENSE-NOTICE.md", "memdir/py.typed",
                   "memdir/testing/chat_server.py"):
        assert wanted in names, wanted
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: MIT" in metadata and "Provides-Extra: agent" not in metadata
    assert "Requires-Dist: argcomplete" in metadata

    # Install it over the editable install of the quick start venv (its dependencies are already there).
    swapped = subprocess.run([venv_python, "-m", "pip", "install", "--quiet", "--no-deps", "--force-reinstall",
                              str(wheel)], env=env, capture_output=True, text=True, timeout=600)
    assert swapped.returncode == 0, swapped.stderr[-4000:]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    where = subprocess.run([venv_python, "-c", "import memdir, sys; print(memdir.__file__)"], cwd=elsewhere,
                           env=env, capture_output=True, text=True)
    assert "site-packages" in where.stdout, where.stdout + where.stderr
    memdir = str(clone / ".venv" / "bin" / "memdir")
    version = subprocess.run([memdir, "--version"], cwd=elsewhere, env=env, capture_output=True, text=True)
    assert version.returncode == 0 and version.stdout.startswith("memdir ")
    ws = tmp_path / "ws"
    (ws / "memory").mkdir(parents=True)
    (ws / "MEMORY.md").write_text("- Billing events go through Kafka.\n")
    searched = subprocess.run([memdir, "-w", str(ws), "search", "which queue carries billing events?", "--json"],
                              cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert searched.returncode == 0 and '"path": "MEMORY.md"' in searched.stdout, searched.stderr
    assert '"mode": "hybrid"' in searched.stdout  # the embedded model loaded from the installed packages

    # uv tool install from the wheel, as the README documents (uv itself comes from PyPI).
    got_uv = subprocess.run([venv_python, "-m", "pip", "install", "--quiet", "uv"], env=env, capture_output=True,
                            text=True, timeout=600)
    if got_uv.returncode != 0:
        pytest.skip(f"uv is not installable here: {got_uv.stderr[-500:]}")
    uv_env = {**env, "UV_TOOL_DIR": str(tmp_path / "uv-tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "uv-bin"),
              "UV_CACHE_DIR": str(tmp_path / "uv-cache"), "UV_NO_PROGRESS": "1"}
    tool = subprocess.run([str(clone / ".venv" / "bin" / "uv"), "tool", "install", str(wheel)], env=uv_env,
                          capture_output=True, text=True, timeout=900)
    assert tool.returncode == 0, tool.stderr[-4000:]
    via_uv = subprocess.run([str(tmp_path / "uv-bin" / "memdir"), "-w", str(ws), "search", "Kafka", "--files"],
                            cwd=elsewhere, env=uv_env, capture_output=True, text=True, timeout=300)
    assert via_uv.returncode == 0 and via_uv.stdout.splitlines() == ["MEMORY.md"], via_uv.stderr
