"""Read-your-writes with a reused listing: before a search, memdir re-stats the files it listed last
time instead of listing every folder again, while no listed folder has changed.  Whatever changes
on disk (an edit in place, a new, removed or renamed file, a new subfolder, a new MEMORY.md, a
folder made unreadable) is still in the very next search: in process, and through a real
``memdir mcp`` subprocess over streamable HTTP.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from mcp import ClientSession
from mcp.client import streamable_http

import memdir.sync
import memdir.workspace
from helpers import cli_env, stop_process
from memdir.api import Memory
from memdir.workspace import discover, restat
from test_mcp import _free_port, _wait_listening

http_client = getattr(streamable_http, "streamable_http_client", None) or streamable_http.streamablehttp_client
NO_WATCH = {"memorySearch": {"provider": "none", "sync": {"watch": False, "onSearch": True}}}


def _paths(mem: Memory, query: str) -> list[str]:
    response = mem.search(query)
    assert not response.stale
    return [r.path for r in response.results]


@pytest.fixture
def listing_reused_at_once(monkeypatch):
    """Folders created a moment ago count as settled (else the reuse would wait RELIST_MARGIN_NS)."""
    monkeypatch.setattr(memdir.workspace, "RELIST_MARGIN_NS", -3600 * 10**9)


def test_every_change_on_disk_is_in_the_next_search(make_workspace, monkeypatch, listing_reused_at_once):
    ws = make_workspace({
        "memory/2026-01-10.md": "Met Priya; cursor-based pagination chosen.\n",
        "memory/team/people.md": "Dana owns the billing service.\n",
    })
    listings = []
    monkeypatch.setattr(memdir.sync, "discover", lambda *a: listings.append(1) or discover(*a))
    mem = Memory(ws, config=NO_WATCH)
    try:
        mem.sync()
        listed = len(listings)
        assert _paths(mem, "pagination") == ["memory/2026-01-10.md"]
        assert _paths(mem, "Dana billing") == ["memory/team/people.md"]
        assert len(listings) == listed  # nothing changed: both searches re-stat'ed the last listing

        # an edit in place (no folder changes): the re-stat sees it
        with open(ws / "memory/team/people.md", "a") as f:
            f.write("Dana moved the wombat ledger to Postgres.\n")
        assert _paths(mem, "wombat ledger") == ["memory/team/people.md"]
        assert len(listings) == listed + 1  # the check re-stat'ed; only the sync it started listed

        def replace_team() -> None:
            (ws / "memory/team").rename(ws / "old-team")
            (ws / "memory/team").mkdir()
            (ws / "memory/team/people.md").write_text("Eve owns the billing service now.\n")

        steps = [
            (lambda: (ws / "memory/2026-01-12.md").write_text("The okapi rollout slipped a week.\n"),
             "okapi rollout", ["memory/2026-01-12.md"]),
            (lambda: (ws / "memory/2026-01-12.md").rename(ws / "memory/2026-01-13.md"),
             "okapi rollout", ["memory/2026-01-13.md"]),
            (lambda: (ws / "memory/2026-01-13.md").unlink(), "okapi rollout", []),
            (lambda: (ws / "memory/team/deep").mkdir() or (ws / "memory/team/deep/x.md").write_text(
                "The narwhal index is rebuilt nightly.\n"), "narwhal index", ["memory/team/deep/x.md"]),
            (lambda: (ws / "memory/team/deep/x.md").write_text("The narwhal index is rebuilt hourly now.\n"),
             "narwhal hourly", ["memory/team/deep/x.md"]),
            (lambda: (ws / "MEMORY.md").write_text("# Long-term\n\nThe capybara budget is frozen.\n"),
             "capybara budget", ["MEMORY.md"]),
            # a folder replaced by another of the same name: new inode
            (replace_team, "owns billing service", ["memory/team/people.md"]),
            (lambda: (ws / "memory/team/people.md").write_text("Eve owns the quokka service now.\n"),
             "quokka", ["memory/team/people.md"]),
        ]
        for change, query, expected in steps:
            change()
            assert _paths(mem, query) == expected, query
        assert _paths(mem, "pagination") == ["memory/2026-01-10.md"]
        assert _paths(mem, "Dana") == []  # the old team folder left memory/
    finally:
        mem.close()


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any folder")
def test_a_folder_made_unreadable_is_listed_again(make_workspace, listing_reused_at_once):
    ws = make_workspace({"memory/a.md": "alpha\n", "memory/sub/b.md": "The heron report is due.\n"})
    mem = Memory(ws, config=NO_WATCH)
    try:
        mem.sync()
        assert _paths(mem, "heron report") == ["memory/sub/b.md"]
        os.chmod(ws / "memory/sub", 0o300)  # no listing; the file itself can still be stat'ed
        try:
            # as a full listing says: the folder is skipped (and what was indexed from it kept)
            assert _paths(mem, "heron report") == ["memory/sub/b.md"]
            assert [s["path"] for s in mem.status()["skipped"]] == ["memory/sub"]
        finally:
            os.chmod(ws / "memory/sub", 0o755)
    finally:
        mem.close()


def test_restat_reuses_only_settled_clean_listings(make_workspace, monkeypatch):
    ws = make_workspace({"memory/a.md": "alpha\n", "memory/sub/b.md": "beta\n"})
    found = discover(ws)
    assert found.folders is not None and [p for p, _ in found.folders] == [
        str(ws), str(ws / "memory"), str(ws / "memory/sub")]
    # Folders changed just before (within RELIST_MARGIN_NS of) the listing: list again, as two
    # changes within one timestamp tick would leave the folder's ctime as it was.
    assert restat(found) is None
    monkeypatch.setattr(memdir.workspace, "RELIST_MARGIN_NS", -3600 * 10**9)
    (ws / "memory/a.md").write_text("alpha, longer now\n")
    again = restat(found)
    assert again is not None and [(f.path, f.size) for f in again] == [("memory/a.md", 18), ("memory/sub/b.md", 5)]
    (ws / "memory/sub/c.md").write_text("gamma\n")
    assert restat(found) is None  # memory/sub changed
    found = discover(ws)
    (ws / "memory/a.md").unlink()
    (ws / "memory/a.md").mkdir()  # not a regular file any more
    assert restat(found) is None
    # Listings with extraPaths, skipped files or issues are never reused, but for symlinks (never
    # followed, named as skipped): one replaced by a file changes its folder.
    assert discover(ws, [ws / "memory/sub"]).folders is None
    (ws / "MEMORY.md").symlink_to(ws / "memory/sub/b.md")
    assert discover(ws).skipped and discover(ws).folders is not None
    os.mkfifo(ws / "memory/pipe.md")  # skipped: not a regular file
    assert discover(ws).skipped and discover(ws).folders is None
    assert discover(make_workspace({}, name="empty")).folders is None  # "no memory files found"


def test_mcp_server_over_http_sees_edits_made_just_before_a_search(make_workspace, tmp_path, state_dir):
    ws = make_workspace({
        "MEMORY.md": "# Long-term\n\nBilling uses Kafka because ordering matters.\n",
        "memory/2026-01-10.md": "Met Priya; cursor-based pagination chosen.\n",
    })
    cfg = tmp_path / "memdir.json"
    cfg.write_text(json.dumps(NO_WATCH))  # no watcher: only the check before each search keeps up
    # Let the folders settle past RELIST_MARGIN_NS, so the server reuses its listings as in real use.
    time.sleep(memdir.workspace.RELIST_MARGIN_NS / 1e9 + 0.2)
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "memdir", "mcp", "--transport", "http", "--port", str(port),
         "--workspace", str(ws), "--config", str(cfg)],
        env=cli_env(state_dir), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )

    async def search(session: ClientSession, query: str) -> list[str]:
        result = await session.call_tool("memory_search", {"query": query})
        payload = json.loads(result.content[0].text)
        assert result.isError is False and "stale" not in payload
        return [r["path"] for r in payload["results"]]

    async def run() -> None:
        async with http_client(f"http://127.0.0.1:{port}/mcp") as (read, write, _), \
                ClientSession(read, write) as session:
            await session.initialize()
            assert await search(session, "Kafka ordering") == ["MEMORY.md"]
            for _ in range(3):  # warm: these take the server's fast path and a reused listing
                assert await search(session, "pagination") == ["memory/2026-01-10.md"]
            with open(ws / "memory/2026-01-10.md", "a") as f:
                f.write("Priya picked the wombat ledger.\n")
            assert await search(session, "wombat ledger") == ["memory/2026-01-10.md"]
            (ws / "memory/2026-01-11.md").write_text("The okapi rollout slipped.\n")
            assert await search(session, "okapi rollout") == ["memory/2026-01-11.md"]
            (ws / "memory/2026-01-11.md").rename(ws / "memory/2026-01-12.md")
            assert await search(session, "okapi rollout") == ["memory/2026-01-12.md"]
            (ws / "memory/2026-01-12.md").unlink()
            assert await search(session, "okapi rollout") == []
            (ws / "MEMORY.md").write_text("# Long-term\n\nBilling moved to Pulsar.\n")
            assert await search(session, "Kafka ordering") == []
            assert await search(session, "Pulsar") == ["MEMORY.md"]

    try:
        _wait_listening(port, proc)
        asyncio.run(asyncio.wait_for(run(), 90))
    finally:
        stop_process(proc)
