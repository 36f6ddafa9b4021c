"""Shared fixtures: real temp workspaces, a private state dir, and the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from helpers import cli_env


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No test may touch the user's ~/.memdir or pick up their MEMDIR_* variables."""
    provider_env = {"OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY",
                    "MISTRAL_API_KEY", "OLLAMA_HOST"}
    for key in list(os.environ):
        if key.startswith("MEMDIR_") or key in provider_env:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMDIR_STATE_DIR", str(tmp_path / "state"))


@pytest.fixture
def state_dir(tmp_path: Path) -> Path:
    return tmp_path / "state"


@pytest.fixture
def make_workspace(tmp_path: Path) -> Callable[..., Path]:
    def make(files: dict[str, str] | None = None, name: str = "ws") -> Path:
        ws = tmp_path / name
        ws.mkdir(parents=True, exist_ok=True)
        for rel, text in (files or {}).items():
            p = ws / rel
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_text(text, encoding="utf-8")
        return ws

    return make


@pytest.fixture
def keyword_config() -> dict[str, object]:
    """Keyword-only settings: no embedding model, so core tests stay fast and deterministic."""
    return {"memorySearch": {"provider": "none"}}


@pytest.fixture
def run_cli(state_dir: Path) -> Callable[..., subprocess.CompletedProcess[str]]:
    def run(*args: str, env: dict[str, str] | None = None, timeout: float = 120,
            check: bool = False) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "memdir", *args],
            capture_output=True, text=True, timeout=timeout, env={**cli_env(state_dir), **(env or {})},
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"memdir {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    return run


def parse_json(proc: subprocess.CompletedProcess[str]) -> object:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)
