"""A full rebuild keeps what the index held of notes it cannot read at that moment.

An incremental sync already keeps the notes of a folder it cannot list and of a file it cannot
read; ``memdir index --force`` (or a rebuild after a model change) started from nothing and
dropped them, so a transient permission problem made them vanish from search.  Real files made
unreadable with chmod, the CLI (or a script) run as a user that permissions apply to.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from memdir.api import Memory
from unprivileged import NOBODY, give_away, run_cli_as_user, shared_scratch


def _paths(state: Path, cfg: Path, ws: Path, query: str) -> list[str]:
    out = run_cli_as_user(state, "search", query, "--json", "--no-sync", "-w", str(ws), "--config", str(cfg))
    assert out.returncode == 0, out.stderr
    return sorted(r["path"] for r in json.loads(out.stdout)["results"])


def test_a_forced_rebuild_keeps_the_notes_of_unreadable_folders_and_files():
    with shared_scratch() as root:
        ws, team, state = root / "ws", root / "team", root / "state"
        notes = {ws / "memory/a.md": "Alpha: the boiler was serviced in March.\n",
                 ws / "memory/sub/b.md": "The heron report is due on Friday.\n",
                 ws / "memory/c.md": "Gamma: the cat's vet is Dr Okafor.\n",
                 team / "d.md": "The team offsite is in Lisbon.\n"}
        for path, text in notes.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        state.mkdir()
        cfg = root / "memdir.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "extraPaths": [str(team)]}}))
        give_away(root)
        index = ("index", "-w", str(ws), "--config", str(cfg))
        assert run_cli_as_user(state, *index).returncode == 0

        for locked in (ws / "memory/sub", ws / "memory/c.md", team):
            os.chmod(locked, 0)
        try:
            forced = run_cli_as_user(state, *index, "--force", "--json")
            assert forced.returncode == 0, forced.stderr
            report = json.loads(forced.stdout)
            assert report["full"] and report["indexed"] == 1
            assert sorted(s["path"] for s in report["skipped"]) == ["../team", "memory/c.md", "memory/sub"]
            kept = [w for w in report["warnings"] if w.startswith("kept")]
            assert kept == ["kept what the previous index held of 3 file(s) that could not be read now "
                            "(../team/d.md, memory/c.md, memory/sub/b.md): they are indexed anew once readable"]
            assert kept[0] in forced.stderr
            assert _paths(state, cfg, ws, "heron report") == ["memory/sub/b.md"]
            assert _paths(state, cfg, ws, "Okafor") == ["memory/c.md"]
            assert _paths(state, cfg, ws, "Lisbon offsite") == ["../team/d.md"]
            # still unreadable: an incremental sync keeps them too, and drops nothing
            again = json.loads(run_cli_as_user(state, *index, "--json").stdout)
            assert again["removed"] == 0
            assert _paths(state, cfg, ws, "heron report") == ["memory/sub/b.md"]
        finally:
            for locked in (ws / "memory/sub", team):
                os.chmod(locked, 0o755)
            os.chmod(ws / "memory/c.md", 0o644)

        # readable again: the kept files are read anew (the rebuild cleared their stamps), even the
        # one whose edit kept its size and time
        b = ws / "memory/sub/b.md"
        st = b.stat()
        b.write_text("The egret report is due on Friday.\n")
        os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns))
        fixed = json.loads(run_cli_as_user(state, *index, "--json").stdout)
        assert fixed["indexed"] == 3 and fixed["skipped"] == [] and not fixed["warnings"]
        assert _paths(state, cfg, ws, "egret report") == ["memory/sub/b.md"]
        assert _paths(state, cfg, ws, "heron") == []


_REBUILD = textwrap.dedent("""
    import hashlib, json, sys
    from memdir.api import Memory

    class HashProvider:
        id, model, provider_key, max_input_bytes, dims = "hash", "hash-64", "hash-key", 8000, 64
        def _vec(self, text):
            return [(b - 127.5) / 128 for b in hashlib.sha512(text.encode()).digest()[:64]]
        def embed_query(self, text):
            return self._vec(text)
        def embed_batch(self, texts):
            return [self._vec(t) for t in texts]
        def close(self):
            pass

    with Memory(sys.argv[1], provider=HashProvider(), state_dir=sys.argv[2]) as mem:
        report = mem.sync(force=True)
        rows = mem.store.conn.execute("SELECT path, embedding IS NOT NULL FROM chunks ORDER BY path").fetchall()
        top = [h.path for h in mem.search("heron report", sync=False).results]
        print(json.dumps({"rows": rows, "full": report.full, "top": top}))
""")


def test_a_rebuild_keeps_the_vectors_of_an_unreadable_folder_for_the_same_model():
    from test_cache_refs import HashProvider

    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        (ws / "memory/sub").mkdir(parents=True)
        (ws / "memory/a.md").write_text("Alpha: the boiler was serviced in March.\n")
        (ws / "memory/sub/b.md").write_text("The heron report is due on Friday.\n")
        with Memory(ws, provider=HashProvider(), state_dir=state) as mem:
            mem.sync()
        script = root / "rebuild.py"
        script.write_text(_REBUILD)
        give_away(root)
        os.chmod(ws / "memory/sub", 0)
        try:
            cmd = [sys.executable, str(script), str(ws), str(state)]
            if os.geteuid() == 0:
                cmd = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *cmd]
            out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=root,
                                 env={**os.environ, "HOME": str(root)})
        finally:
            os.chmod(ws / "memory/sub", 0o755)
        assert out.returncode == 0, out.stderr
        got = json.loads(out.stdout)
        assert got["full"] and got["rows"] == [["memory/a.md", 1], ["memory/sub/b.md", 1]]
        assert got["top"][0] == "memory/sub/b.md"


class _OtherModel:
    """Another model (another width): a rebuild after switching to it must not keep old vectors."""

    id, model, provider_key, max_input_bytes, dims = "hash", "hash-32", "hash-key", 8000, 32

    def embed_query(self, text: str) -> list[float]:
        return [(b - 127.5) / 128 for b in hashlib.sha256(text.encode()).digest()]

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def close(self) -> None:
        pass


def test_a_rebuild_for_another_model_keeps_unreadable_notes_for_keywords_only(backend, make_workspace,
                                                                              tmp_path: Path, monkeypatch):
    # The read failure is made by hand here (root reads any file; the tests above use chmod):
    # the rows kept are searchable by keywords, their old vectors (another model's, another
    # width) are left out, and the first sync that can read the file embeds it.
    import memdir.sync
    from test_cache_refs import HashProvider

    ws = make_workspace({"memory/a.md": "the quokka ate lunch\n", "memory/b.md": "the heron report is due\n"})
    config = backend.config()
    with Memory(ws, config=config, state_dir=tmp_path, provider=HashProvider()) as mem:
        mem.sync()
    real = memdir.sync.read_memory_file

    def read(entry):
        if entry.path == "memory/b.md":
            raise PermissionError(13, "Permission denied")
        return real(entry)

    monkeypatch.setattr(memdir.sync, "read_memory_file", read)
    with Memory(ws, config=config, state_dir=tmp_path, provider=_OtherModel()) as mem:
        report = mem.sync()
        assert report.full and [w for w in report.warnings if w.startswith("kept")]
        assert [r.path for r in mem.search("heron report", sync=False, mode="keyword").results] == ["memory/b.md"]
        vector = [r.path for r in mem.search("heron report", sync=False, mode="vector", min_score=0).results]
        assert "memory/b.md" not in vector and "memory/a.md" in vector
        monkeypatch.setattr(memdir.sync, "read_memory_file", real)
        assert mem.sync().indexed == 1
        found = mem.search("heron report", sync=False, mode="vector", min_score=0).results
        assert "memory/b.md" in [r.path for r in found]


def test_an_unreadable_sessions_folder_keeps_its_transcripts_and_the_notes_are_indexed():
    # Before: a sessions folder the user could not list failed every sync with one PermissionError
    # (`memdir index` exited 1, and new notes were never indexed); listing it as empty instead
    # would have dropped every indexed transcript.  Now it is named as skipped, its transcripts are
    # kept (by a forced rebuild too), and the memory files are indexed as usual.
    from memdir.config import load_config

    with shared_scratch() as root:
        ws, state = root / "ws", root / "state"
        (ws / "memory").mkdir(parents=True)
        (ws / "memory/a.md").write_text("Alpha: the boiler was serviced in March.\n")
        state.mkdir()
        cfg = root / "memdir.json"
        cfg.write_text(json.dumps({"memorySearch": {"provider": "none", "sources": ["memory", "sessions"],
                                                    "experimental": {"sessionMemory": True}}}))
        sessions = load_config(workspace=ws, state_dir=state, config_path=cfg).settings.sessions_dir
        sessions.mkdir(parents=True)
        (sessions / "s1.jsonl").write_text(json.dumps(
            {"type": "message", "timestamp": 1_700_000_000_000,
             "message": {"role": "user", "content": "The flamingo migration is on Friday."}}) + "\n")
        give_away(root)
        index = ("index", "-w", str(ws), "--config", str(cfg), "--json")
        assert run_cli_as_user(state, *index).returncode == 0
        assert _paths(state, cfg, ws, "flamingo migration") == ["sessions/s1.jsonl"]

        (ws / "memory/b.md").write_text("The heron report is due on Friday.\n")
        give_away(ws)
        os.chmod(sessions, 0)
        try:
            for extra in ((), ("--force",)):
                out = run_cli_as_user(state, *index, *extra)
                assert out.returncode == 0, out.stderr
                report = json.loads(out.stdout)
                assert report["removed"] == 0
                assert report["skipped"] == [{"path": "sessions", "error": "folder not readable: Permission denied"}]
                assert _paths(state, cfg, ws, "flamingo migration") == ["sessions/s1.jsonl"]
                assert _paths(state, cfg, ws, "heron report") == ["memory/b.md"]
        finally:
            os.chmod(sessions, 0o755)
        # listed again: the transcript is indexed anew and nothing is warned about
        again = json.loads(run_cli_as_user(state, *index).stdout)
        assert not again["skipped"] and not again["warnings"]
        assert _paths(state, cfg, ws, "flamingo migration") == ["sessions/s1.jsonl"]
