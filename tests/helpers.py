"""Helpers shared by tests (importable, unlike conftest)."""

from __future__ import annotations

import os
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"


def cli_env(state_dir: Path, **extra: str) -> dict[str, str]:
    drop = {"OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY", "MISTRAL_API_KEY"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_") and k not in drop}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["MEMDIR_STATE_DIR"] = str(state_dir)
    env.update(extra)
    return env
