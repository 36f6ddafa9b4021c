"""What a user sees while an index is built: plain progress lines when stderr is not a terminal
(a script, CI, an agent's subprocess), and chunk counts that move inside one large file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import memdir.sync
from memdir.api import Memory
from memdir.embeddings.local import LocalEmbeddingProvider
from memdir.progress import read_progress
from memdir.sync import ProgressLabel
from memdir.testing.provider_server import ProviderServer

LINE = re.compile(r"^indexing: [\d,]+/[\d,]+ files(, [\d,]+/[\d,]+ chunks)?, \d+ (s|min \d\d s) elapsed$")


def _many_notes(n: int = 60) -> dict[str, str]:
    """Enough text for several write batches of a keyword-only build (512 chunks each)."""
    para = "- Reviewed the Atlas billing service with Dana; replay and retention came up again.\n" * 40
    return {f"memory/2026-02-{i % 28 + 1:02d}-note{i}.md": f"# Note {i}\n\n" + para * 3 for i in range(n)}


def _big_note(paragraphs: int) -> str:
    """One file of many distinct chunks (each paragraph differs, so every chunk is embedded)."""
    return "\n\n".join(
        f"## Meeting {i}\n\n" + "".join(
            f"- Topic {i}.{j}: the team discussed service {i * 7 + j} and its budget of {i * 13 + j} units; "
            f"Dana took notes on item {j} and followed up about deadline {(i + j) % 31 + 1}.\n" for j in range(6))
        for i in range(paragraphs))


def _progress_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("indexing:")]


@pytest.fixture
def big_workspace(make_workspace, tmp_path: Path) -> Path:
    ws = make_workspace(_many_notes())
    (tmp_path / "kw.json").write_text('{"memorySearch": {"provider": "none"}}')
    return ws


def test_a_non_terminal_stderr_gets_plain_progress_lines(run_cli, big_workspace: Path, tmp_path: Path) -> None:
    proc = run_cli("index", "-w", str(big_workspace), "--config", str(tmp_path / "kw.json"),
                   env={"MEMDIR_PROGRESS_INTERVAL": "0"}, check=True)
    lines = _progress_lines(proc.stderr)
    assert len(lines) >= 3, proc.stderr  # the start, batches in between, the end
    assert all(LINE.match(line) for line in lines), lines
    assert "\r" not in proc.stderr  # lines, not a bar redrawn in place
    assert lines[-1].startswith("indexing: 60/60 files, ")
    done = [int(line.split()[1].split("/")[0]) for line in lines]
    assert done == sorted(done) and done[0] < 60
    chunks = [line.split(", ")[1] for line in lines if "chunks" in line]
    assert chunks and chunks[-1].split("/")[0] == chunks[-1].split("/")[1].split()[0]  # all written at the end
    assert "Memory index updated" in proc.stdout  # the summary is unchanged, on stdout


@pytest.mark.parametrize("flag", ["--quiet", "--json", "--no-progress"])
def test_no_progress_lines_when_asked_for_quiet_output(run_cli, big_workspace: Path, tmp_path: Path,
                                                       flag: str) -> None:
    proc = run_cli("index", "-w", str(big_workspace), "--config", str(tmp_path / "kw.json"), flag,
                   env={"MEMDIR_PROGRESS_INTERVAL": "0"}, check=True)
    assert not _progress_lines(proc.stderr), proc.stderr
    assert "indexing:" not in proc.stdout


def test_a_quick_index_prints_no_progress_line(run_cli, make_workspace, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "# Prefs\n- Prefers PostgreSQL.\n", "memory/2026-01-10.md": "- Kafka.\n"})
    (tmp_path / "kw.json").write_text('{"memorySearch": {"provider": "none"}}')
    proc = run_cli("index", "-w", str(ws), "--config", str(tmp_path / "kw.json"), check=True)
    assert not _progress_lines(proc.stderr), proc.stderr
    assert proc.stderr.strip() == ""


def test_an_unusable_interval_falls_back_to_the_default(run_cli, make_workspace, tmp_path: Path) -> None:
    ws = make_workspace({"MEMORY.md": "# Prefs\n- Prefers PostgreSQL.\n"})
    (tmp_path / "kw.json").write_text('{"memorySearch": {"provider": "none"}}')
    proc = run_cli("index", "-w", str(ws), "--config", str(tmp_path / "kw.json"),
                   env={"MEMDIR_PROGRESS_INTERVAL": "soon"}, check=True)
    assert not _progress_lines(proc.stderr) and "Traceback" not in proc.stderr


def _openai_cfg(server: ProviderServer) -> dict:
    return {"memorySearch": {"provider": "openai", "remote": {"baseUrl": f"{server.url}/v1", "apiKey": "test-key",
                                                              "maxRetries": 0}}}


def _embed_posts(server: ProviderServer) -> int:
    return sum(1 for r in server.requests if r.method == "POST" and r.path.endswith("/embeddings"))


def test_chunk_counts_move_inside_one_large_file(make_workspace, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memdir.sync, "CHUNK_PROGRESS_INTERVAL", 0.0)  # every request the provider makes
    text = _big_note(120)
    seen: list[tuple[int, int, str]] = []
    on_disk: list[dict] = []
    with ProviderServer(api_key="test-key") as server:
        ws = make_workspace({"memory/notes.md": text}, name="with")
        with Memory(ws, config=_openai_cfg(server)) as mem:
            mem.indexer.progress_file.min_interval = 0  # the progress file too, at every count

            def progress(done: int, total: int, label: str) -> None:
                seen.append((done, total, label))
                if done == 0 and getattr(label, "chunks_done", 0):
                    on_disk.append(read_progress(mem.index_path) or {})

            report = mem.sync(progress=progress)
        with_progress = _embed_posts(server)
    assert report.indexed == 1 and report.chunks > 20
    inside = [label for done, total, label in seen if done == 0 and total == 1]
    counts = [label.chunks_done for label in inside if isinstance(label, ProgressLabel) and label.chunks_planned]
    # several distinct counts while the one file is still being written, rising, below the total
    assert len(set(counts)) >= 3, counts
    assert counts == sorted(counts) and 0 < counts[0] < report.chunks
    assert all(label.chunks_planned == report.chunks for label in inside if label.chunks_done)
    assert f"{counts[-1]:,}/{report.chunks:,} chunks" in str(inside[-1])  # the label says it too
    done, total, last = seen[-1]
    assert (done, total) == (1, 1) and last.chunks_done == last.chunks_planned == report.chunks
    # the <index>.progress file carried the chunk counts meanwhile, with no file claimed as done
    assert on_disk and any(p.get("chunksDone") for p in on_disk)
    assert all(p.get("done") == 0 and p.get("chunksPlanned") == report.chunks for p in on_disk)
    # showing progress changes nothing the provider is sent
    with ProviderServer(api_key="test-key") as server:
        ws = make_workspace({"memory/notes.md": text}, name="without")
        with Memory(ws, config=_openai_cfg(server)) as mem:
            plain = mem.sync()
        assert _embed_posts(server) == with_progress and plain.embedded == report.embedded


def test_the_local_model_reports_its_runs_and_embeds_the_same(tmp_path: Path) -> None:
    provider = LocalEmbeddingProvider()
    texts = [f"Note {i}: the team met about service {i * 7} and its budget." * (1 + i % 4) for i in range(40)]
    calls: list[tuple[str, int, int]] = []
    with_progress = provider.embed_batch(texts, progress=lambda *a: calls.append(a))
    assert provider.embed_batch(texts) == with_progress  # the same runs, the same vectors
    counts = [done for _, done, _ in calls]
    assert len(counts) >= 3 and counts == sorted(counts) and counts[-1] == len(texts)
    assert {total for _, _, total in calls} == {len(texts)}


def test_a_hybrid_index_of_one_file_moves_with_the_local_model(make_workspace,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(memdir.sync, "CHUNK_PROGRESS_INTERVAL", 0.0)
    ws = make_workspace({"memory/notes.md": _big_note(25)})
    seen: list[tuple[int, int, str]] = []
    with Memory(ws) as mem:
        report = mem.sync(progress=lambda *a: seen.append(a))
        assert mem.status()["vector"]["vectors"] == report.chunks
    counts = {label.chunks_done for done, _, label in seen if done == 0 and isinstance(label, ProgressLabel)}
    assert len(counts - {0}) >= 2 and 0 < min(counts - {0}) < report.chunks, (counts, report.chunks)
