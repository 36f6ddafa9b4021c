"""Shared fixtures: real temp workspaces, a private state dir, and the CLI as a subprocess."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from helpers import Backend, cli_env, import_pgserver, pg_query


@pytest.fixture(scope="session")
def _session_cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One model cache for the whole run: the integer copy of the default model is built once."""
    return tmp_path_factory.mktemp("memdir-cache")


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _session_cache_dir: Path) -> None:
    """No test may touch the user's ~/.memdir or ~/.cache or pick up their MEMDIR_* variables."""
    provider_env = {"OPENAI_API_KEY", "OPENAI_BASE_URL", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY",
                    "MISTRAL_API_KEY", "OLLAMA_HOST"}
    for key in list(os.environ):
        if key.startswith("MEMDIR_") or key in provider_env:
            monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("MEMDIR_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("MEMDIR_CACHE_DIR", str(_session_cache_dir))


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
            check: bool = False, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "memdir", *args],
            capture_output=True, text=True, timeout=timeout, env={**cli_env(state_dir), **(env or {})}, cwd=cwd,
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"memdir {' '.join(args)} failed ({proc.returncode}):\n{proc.stderr}")
        return proc

    return run


def parse_json(proc: subprocess.CompletedProcess[str]) -> object:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


# -- store backends ---------------------------------------------------------------------------
# Read before the autouse fixture above clears MEMDIR_* for each test.
_TEST_DATABASE_URL = os.environ.get("MEMDIR_TEST_DATABASE_URL", "").strip()


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A real PostgreSQL with pgvector: ``$MEMDIR_TEST_DATABASE_URL``, else one started by pgserver.

    pgserver ships PostgreSQL 16 + pgvector as a wheel; run as root it starts the server as an
    unprivileged ``pgserver`` user of its own (PostgreSQL refuses to run as root).
    """
    if _TEST_DATABASE_URL:
        yield _TEST_DATABASE_URL
        return
    import shutil
    import tempfile
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset in CI
        pgserver = import_pgserver("; set MEMDIR_TEST_DATABASE_URL to a server with pgvector")

        # Outside pytest's 0700 temp tree, which the server's own user could not enter at exit.
        data = Path(tempfile.mkdtemp(prefix="memdir-test-pg-"))
        server = pgserver.get_server(data, cleanup_mode=None)
    try:
        yield server.get_uri()
    finally:
        try:
            pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=server.system_user)
        finally:
            shutil.rmtree(data, ignore_errors=True)


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest) -> Iterator[Backend]:
    """Each conformance test runs once per store backend; PostgreSQL gets a schema of its own."""
    if request.param == "sqlite":
        yield Backend("sqlite")
        return
    url = request.getfixturevalue("pg_url")
    schema = "t_" + uuid.uuid4().hex[:12]
    yield Backend("postgres", url, schema)
    pg_query(url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def pg(pg_url: str) -> Iterator[Backend]:
    """PostgreSQL only, in a schema of its own (dropped afterwards)."""
    schema = "t_" + uuid.uuid4().hex[:12]
    yield Backend("postgres", pg_url, schema)
    pg_query(pg_url, f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


@pytest.fixture
def homeless(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """No ``$HOME`` and no passwd entry (a container run as a bare uid), run from ``tmp_path``."""
    import pwd

    for name in ("HOME", "MEMDIR_CACHE_DIR", "XDG_CACHE_HOME"):
        monkeypatch.delenv(name, raising=False)

    def no_entry(uid: int) -> pwd.struct_passwd:
        raise KeyError(f"getpwuid(): uid not found: {uid}")

    monkeypatch.setattr(pwd, "getpwuid", no_entry)
    monkeypatch.chdir(tmp_path)
