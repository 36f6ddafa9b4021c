"""Helpers shared by tests (importable, unlike conftest)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from memdir.testing.provider_server import ProviderServer

SRC = Path(__file__).resolve().parents[1] / "src"


def cli_env(state_dir: Path, **extra: str) -> dict[str, str]:
    drop = {"OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY", "VOYAGE_API_KEY", "MISTRAL_API_KEY"}
    env = {k: v for k, v in os.environ.items() if not k.startswith("MEMDIR_") and k not in drop}
    env["PYTHONPATH"] = str(SRC) + os.pathsep + env.get("PYTHONPATH", "")
    env["MEMDIR_STATE_DIR"] = str(state_dir)
    env.update(extra)
    return env


def run_git(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``git -C folder args…`` with no user or system configuration and a fixed author."""
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "a",
           "GIT_AUTHOR_EMAIL": "a@b", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@b"}
    return subprocess.run(["git", "-C", str(folder), *args], capture_output=True, text=True, env=env,
                          stdin=subprocess.DEVNULL, timeout=60)


def python_child(code: str, *args: str, state_dir: Path, timeout: float = 20) -> subprocess.CompletedProcess[str]:
    """``code`` run by a fresh interpreter with ``args`` (memdir importable, its state in
    ``state_dir``), output captured: a hang or a super-linear path fails on ``timeout`` instead of
    holding the suite."""
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout,
                          env=cli_env(state_dir))


class BlockedRun(NamedTuple):
    """A ``memdir`` command held inside its rebuild (:func:`blocked_rebuild`)."""

    proc: subprocess.Popen[str]
    release: threading.Event
    args: tuple[str, ...]


@contextmanager
def blocked_rebuild(tmp_path: Path, make_workspace: Callable[..., Path], run_cli: Callable[..., object],
                    state_dir: Path, *command: str, preexec: Callable[[], None] | None = None,
                    first_build: bool = False) -> Iterator[BlockedRun]:
    """``memdir <command>`` started once the workspace is indexed (``first_build``: before), with
    one note changed and the embedding API holding its answer: yields the process, writing its
    rebuild's (or first build's) temporary database, the event that lets the API answer, and the
    arguments naming the workspace and config (for a command run after it)."""
    ws = make_workspace({"MEMORY.md": "# Home\n\nThe boiler is serviced every May.\n",
                         "memory/2026-03-02.md": "Booked the chimney sweep for Thursday.\n"})
    waiting, release = threading.Event(), threading.Event()
    block = [False]

    def embedder(texts: list[str]) -> list[list[float]]:
        if block[0]:
            waiting.set()
            release.wait(180)
        return [[1.0, *[0.0] * 7] for _ in texts]

    with ProviderServer(api_key="test-key", embedder=embedder) as server:
        cfg = tmp_path / "memdir.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "openai", "remote": {
            "baseUrl": f"{server.url}/v1", "apiKey": "test-key", "maxRetries": 0}}}))
        base = ("--workspace", str(ws), "--config", str(cfg))
        if not first_build:
            run_cli("index", *base, check=True)
        (ws / "memory" / "2026-03-02.md").write_text("Booked the chimney sweep for Friday.\n")  # to embed
        block[0] = True
        proc = subprocess.Popen([sys.executable, "-m", "memdir", *command, *base], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=cli_env(state_dir),
                                preexec_fn=preexec)
        try:
            assert waiting.wait(180), "the rebuild never asked for an embedding"
            assert list(state_dir.rglob("*.tmp-*")), "the rebuild should be writing its temporary database"
            yield BlockedRun(proc, release, base)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()


def deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


@dataclass
class Backend:
    """One store backend under test: SQLite, or PostgreSQL in a schema of its own (see conftest)."""

    driver: str
    url: str = ""
    schema: str = ""

    @property
    def postgres(self) -> bool:
        return self.driver == "postgres"

    def store_config(self) -> dict[str, Any]:
        if not self.postgres:
            return {}
        return {"driver": "postgres", "dsn": self.url, "postgres": {"schema": self.schema}}

    def config(self, base: dict[str, Any] | None = None, **pg: Any) -> dict[str, Any]:
        """``base`` with this backend's store settings (extra ``store.postgres`` keys in ``pg``)."""
        store = self.store_config()
        if pg and self.postgres:
            store["postgres"].update(pg)
        return deep_merge(base or {}, {"memorySearch": {"store": store}} if store else {})

    def env(self) -> dict[str, str]:
        """Environment selecting this backend for a ``memdir`` subprocess."""
        if not self.postgres:
            return {}
        return {"MEMDIR_STORE_DRIVER": "postgres", "MEMDIR_DATABASE_URL": self.url, "MEMDIR_PG_SCHEMA": self.schema}

    def toml(self) -> str:
        """The ``[memorySearch.store]`` tables for a config file."""
        if not self.postgres:
            return ""
        return (f'[memorySearch.store]\ndriver = "postgres"\ndsn = "{self.url}"\n'
                f'[memorySearch.store.postgres]\nschema = "{self.schema}"\n')


def pg_query(url: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run one statement on a fresh connection (tests look at the tables directly)."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        cur = conn.execute(sql, params)
        return cur.fetchall() if cur.description else []


def import_pgserver(otherwise: str = "") -> Any:
    """pgserver, or a skip saying why there is no PostgreSQL to test on: it has wheels for CPython
    3.9-3.12 only (none for 3.13, no sdist), so the dev extra leaves it out there.  ``otherwise``:
    what else the skipped tests can run on, said in the skip."""
    try:
        import pgserver
    except ImportError:
        import pytest

        pytest.skip("no PostgreSQL to test on: pgserver is not installed (its wheels are for Python 3.9-3.12, "
                    f"this is {sys.version_info.major}.{sys.version_info.minor}){otherwise}")
    return pgserver


def stop_process(proc: subprocess.Popen[Any], timeout: float = 15) -> None:
    """Ask a server process to stop (SIGTERM), and kill it if it has not within ``timeout``."""
    proc.terminate()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def settled_warmup(mem: Any, first: str, second: str, timeout: float = 30) -> dict[str, Any]:
    """Search ``mem`` twice (the second search at an index state starts its keyword warm-up),
    wait for the warm-up thread to finish, and return what it says it did (``describe()``)."""
    mem.search(first, sync=False)
    mem.search(second, sync=False)
    warmup = mem.store._warmup
    warmup._thread.join(timeout)
    return dict(warmup.describe())


class Trickler:
    """A raw HTTP server that answers one request with ``head``, then one ``line`` (formatted with
    its number ``n``) every 50 ms for as long as the client listens: httpx's read timeout restarts
    with every byte."""

    def __init__(self, head: bytes, line: str) -> None:
        self.head, self.line = head, line
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.lines_sent = 0
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        conn, _ = self.sock.accept()
        with conn:
            conn.recv(65536)
            try:
                conn.sendall(self.head)
                for n in range(1000):
                    conn.sendall(self.line.format(n=n).encode())
                    self.lines_sent += 1
                    time.sleep(0.05)
            except OSError:  # the client hung up
                pass

    def close(self) -> None:
        self.sock.close()


class ReadOnlyFolder:
    """A folder a test makes read-only midway: a small tmpfs remounted read-only when the tests run
    as root (root writes through a ``chmod a-w`` folder), ``chmod 555`` of the folders named
    otherwise.  Skips the test when root cannot mount one here."""

    def __init__(self, root: Path):
        import pytest

        root.mkdir()
        self.root = root
        self.mounted = os.geteuid() == 0
        if self.mounted and subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "tmpfs", str(root)],
                                           capture_output=True).returncode != 0:
            pytest.skip("root, and cannot mount a small tmpfs here")
        self._locked: list[Path] = []

    def lock(self, *folders: Path) -> None:
        """Read-only from now: the whole mount, or the folder and ``folders`` below it (mode 555)."""
        if self.mounted:
            assert subprocess.run(["mount", "-o", "remount,ro", str(self.root)], capture_output=True).returncode == 0
            return
        self._locked = [self.root, *folders]
        for folder in self._locked:
            folder.chmod(0o555)

    def release(self) -> bool:
        """Writable again (unmounted); ``False`` when the mount was busy: a file left open in it."""
        if self.mounted:
            busy = subprocess.run(["umount", str(self.root)], capture_output=True).returncode != 0
            if busy:
                subprocess.run(["umount", "-l", str(self.root)], capture_output=True)
            return not busy
        for folder in self._locked:
            folder.chmod(0o755)
        return True


def _formatted_image(image: Path, mkfs: str, mounter: str, packages: str) -> None:
    """A 16 MB ``image`` made by ``mkfs``, for a test that mounts it with ``mounter``; skips the test
    unless root has both (Debian: ``packages``)."""
    import shutil

    import pytest

    if os.geteuid() != 0 or not (shutil.which(mkfs) and shutil.which(mounter)):
        pytest.skip(f"needs root with {mkfs} and {mounter} ({packages})")
    with open(image, "wb") as f:
        f.truncate(16 << 20)
    if subprocess.run([mkfs, str(image)], capture_output=True).returncode != 0:
        pytest.skip(f"{mkfs} failed here")


def _unmount(root: Path) -> None:
    """``root`` unmounted, lazily when a file is still open in it."""
    if subprocess.run(["umount", str(root)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(root)], capture_output=True)


class CaseInsensitiveFolder:
    """A folder that ignores the case of names, as macOS's APFS, Windows' and a USB drive's exFAT
    do: a small exFAT image mounted by exfat-fuse through a loop device (the kernel here may have
    neither ext4's casefold nor exFAT).  Like any FUSE file system it gives each name its own inode,
    so ``MEMORY.md`` and ``memory.md`` stat as two files.  Skips the test unless root has
    ``mkfs.exfat``, ``mount.exfat-fuse`` and a free loop device (Debian: exfatprogs, exfat-fuse)."""

    def __init__(self, image: Path, root: Path):
        import pytest

        _formatted_image(image, "mkfs.exfat", "mount.exfat-fuse", "exfatprogs, exfat-fuse")
        made = subprocess.run(["losetup", "--find", "--show", str(image)], capture_output=True, text=True)
        if made.returncode != 0:
            pytest.skip(f"no loop device here: {made.stderr.strip()}")
        self.device = made.stdout.strip()
        root.mkdir()
        self.root = root
        if subprocess.run(["mount.exfat-fuse", self.device, str(root)], capture_output=True).returncode != 0:
            subprocess.run(["losetup", "-d", self.device], capture_output=True)
            pytest.skip("cannot mount exFAT through FUSE here")

    def close(self) -> None:
        """Unmounted (lazily when a file is still open in it) and the loop device let go."""
        _unmount(self.root)
        subprocess.run(["losetup", "-d", self.device], capture_output=True)


class FatFolder:
    """A folder on a FAT file system, as on a USB stick or an SD card: no Unix modes (a chmod is
    refused), names without ``:`` ``*`` ``?`` ``"`` ``<`` ``>`` ``|``, 2-second times, case
    ignored.  A small image mounted by fusefat (the kernel here may have no vfat).  Skips the test
    unless root has ``mkfs.vfat`` and ``fusefat`` (Debian: dosfstools, fusefat)."""

    def __init__(self, image: Path, root: Path):
        import pytest

        _formatted_image(image, "mkfs.vfat", "fusefat", "dosfstools, fusefat")
        root.mkdir()
        self.root = root
        if subprocess.run(["fusefat", "-o", "rw+", str(image), str(root)], capture_output=True).returncode != 0:
            pytest.skip("cannot mount FAT through FUSE here")

    def close(self) -> None:
        _unmount(self.root)


class CoarseClockFolder:
    """A folder whose files keep whole-second times, as FAT, exFAT, HFS+ and many network shares
    do: an ext4 of 128-byte inodes (no room for nanoseconds, times end in 2038) in a loop-mounted
    image, holding ``files`` (relative path: text) written ``age`` seconds ago (their ctime, which
    only the image's tools can set), their mtime ``mtime`` when given.  Skips the test unless root
    can make and mount one here."""

    def __init__(self, root: Path, files: dict[str, str], *, mtime: int | None = None, age: int = 3600):
        import shutil

        import pytest

        if os.geteuid() != 0:
            pytest.skip("mounting a whole-second file system needs root")
        source, self.image, self.root = root.with_name(root.name + ".src"), root.with_name(root.name + ".img"), root
        for rel, text in files.items():
            (source / rel).parent.mkdir(parents=True, exist_ok=True)
            (source / rel).write_text(text)
            if mtime is not None:
                os.utime(source / rel, (mtime, mtime))
        with open(self.image, "wb") as fh:
            fh.truncate(8 << 20)
        root.mkdir()
        made = subprocess.run(["mkfs.ext4", "-q", "-F", "-I", "128", "-d", str(source), str(self.image)],
                              capture_output=True)
        ctime = f"@{int(time.time()) - age}"
        for rel in files if made.returncode == 0 else ():
            made = subprocess.run(["debugfs", "-w", "-R", f"set_inode_field /{rel} ctime {ctime}", str(self.image)],
                                  capture_output=True)
        shutil.rmtree(source)
        if made.returncode != 0 or subprocess.run(["mount", "-o", "loop", str(self.image), str(root)],
                                                  capture_output=True).returncode != 0:
            self.image.unlink()
            pytest.skip("cannot make and mount a whole-second file system (mkfs.ext4 -d, debugfs, a loop device)")

    def release(self) -> None:
        _unmount(self.root)
        self.image.unlink()
