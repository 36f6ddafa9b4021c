"""Reading from where nothing may be written: a real hot standby, and roles that may only read.

Teams scale searches out with read replicas; a replica (or a reporting role) must answer
searches from the index the primary's writers keep, say so when the files have moved on, and
refuse to index with a message that says why — never a raw "cannot execute INSERT in a read-only
transaction".
"""

from __future__ import annotations

import hashlib
import json
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from helpers import Backend, pg_query
from memdir.api import Memory
from memdir.errors import MemdirError
from pgreplica import Pair, primary_and_standby

NOTES = {f"memory/plum-{i:02d}.md": f"# Plum {i}\n\nNote {i}: the codeword is plum{i}q.\n" for i in range(12)}


class HashProvider:
    """Deterministic 16-dim unit vectors from a hash (no model)."""

    id, model, provider_key, max_input_bytes, dims = "hash", "hash-16", "hash", 1 << 20, 16

    def embed_query(self, text: str) -> list[float]:
        v = np.random.default_rng(int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little"))
        x = v.standard_normal(16)
        return (x / np.linalg.norm(x)).tolist()

    def embed_batch(self, texts: list[str]) -> list[list[float]]:
        return [self.embed_query(t) for t in texts]

    def close(self) -> None:
        pass


@pytest.fixture(scope="module")
def pair() -> Iterator[Pair]:
    with primary_and_standby() as p:
        yield p


def env_for(url: str) -> dict[str, str]:
    return {"MEMDIR_PROVIDER": "none", "MEMDIR_STORE_DRIVER": "postgres", "MEMDIR_DATABASE_URL": url,
            "MEMDIR_PG_SCHEMA": "replica_cli"}


def test_searches_answer_from_a_hot_standby_and_indexing_there_is_refused(pair: Pair, make_workspace, run_cli):
    ws = make_workspace(NOTES)
    primary, replica = env_for(pair.primary), env_for(pair.standby)
    run_cli("index", "-w", str(ws), env=primary, check=True)
    pair.wait_for_replay()

    def search(query: str, env: dict[str, str]) -> dict:
        return json.loads(run_cli("search", query, "--json", "-w", str(ws), env=env, check=True).stdout)

    on_primary, on_replica = search("plum3q", primary), search("plum3q", replica)
    assert [r["path"] for r in on_replica["results"]] == ["memory/plum-03.md"]
    assert on_replica["results"] == on_primary["results"]
    assert "stale" not in on_replica and on_replica.get("warnings") == on_primary.get("warnings")  # the files match

    (ws / "memory" / "plum-99.md").write_text("A later note: the codeword is plum99q.\n")
    late = search("plum3q", replica)
    assert [r["path"] for r in late["results"]] == ["memory/plum-03.md"] and late.get("stale") is True
    assert any("read replica (hot standby)" in w for w in late["warnings"]), late["warnings"]
    refused = run_cli("index", "-w", str(ws), env=replica)
    assert refused.returncode == 1 and "cannot be updated: the server is a read replica" in refused.stderr
    assert "Traceback" not in refused.stderr and "read-only transaction" not in refused.stderr
    status = run_cli("status", "-w", str(ws), env=replica, check=True).stdout
    assert "Read-only: the server is a read replica (hot standby)" in status
    assert json.loads(run_cli("status", "--json", "-w", str(ws), env=replica, check=True).stdout)["files"] == 12

    # the primary's writer catches up; the replica follows
    run_cli("index", "-w", str(ws), env=primary, check=True)
    pair.wait_for_replay()
    caught_up = search("plum99q", replica)
    assert [r["path"] for r in caught_up["results"]] == ["memory/plum-99.md"] and "stale" not in caught_up


def test_hybrid_and_vector_search_on_a_replica_equal_the_primary(pair: Pair, make_workspace, tmp_path: Path):
    ws = make_workspace(NOTES)

    def config(url: str) -> dict:
        return {"memorySearch": {"store": {"driver": "postgres", "dsn": url, "postgres": {"schema": "replica_api"}}}}

    with Memory(ws, config=config(pair.primary), state_dir=tmp_path, provider=HashProvider()) as mem:
        assert mem.sync().indexed == 12
        expected = {mode: [(r.path, round(r.score, 5)) for r in mem.search("codeword plum5q", mode=mode).results]
                    for mode in ("hybrid", "vector", "keyword")}
    pair.wait_for_replay()
    with Memory(ws, config=config(pair.standby), state_dir=tmp_path, provider=HashProvider()) as mem:
        assert mem.store.readonly and "hot standby" in (mem.store.readonly_reason or "")
        for mode, want in expected.items():
            got = mem.search("codeword plum5q", mode=mode)
            assert [(r.path, round(r.score, 5)) for r in got.results] == want and not got.stale, mode
        with pytest.raises(MemdirError, match="read replica"):
            mem.sync()
        assert mem.status()["readOnly"] == "the server is a read replica (hot standby)"


@pytest.mark.parametrize("kind", ["select-only", "read-only-transactions"])
def test_a_read_only_role_searches_and_is_told_why_it_cannot_index(kind: str, pg: Backend, make_workspace, run_cli):
    from psycopg.conninfo import make_conninfo

    ws = make_workspace(NOTES)
    run_cli("index", "-w", str(ws), env={"MEMDIR_PROVIDER": "none", **pg.env()}, check=True)
    role = "memdir_ro_" + uuid.uuid4().hex[:8]
    pg_query(pg.url, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    try:
        pg_query(pg.url, f'GRANT USAGE ON SCHEMA "{pg.schema}" TO {role}')
        if kind == "select-only":
            pg_query(pg.url, f'GRANT SELECT ON ALL TABLES IN SCHEMA "{pg.schema}" TO {role}')
            why = f"role {role} may not write memdir's tables"
        else:
            pg_query(pg.url, f'GRANT ALL ON ALL TABLES IN SCHEMA "{pg.schema}" TO {role}')
            pg_query(pg.url, f"ALTER ROLE {role} SET default_transaction_read_only = on")
            why = "transactions are read-only for this role or database"
        env = {"MEMDIR_PROVIDER": "none", **pg.env(), "MEMDIR_DATABASE_URL": make_conninfo(pg.url, user=role,
                                                                                           password="pw")}
        found = json.loads(run_cli("search", "plum7q", "--json", "-w", str(ws), env=env, check=True).stdout)
        assert [r["path"] for r in found["results"]] == ["memory/plum-07.md"] and "stale" not in found
        refused = run_cli("index", "-w", str(ws), env=env)
        assert refused.returncode == 1 and why in refused.stderr, refused.stderr
    finally:
        pg_query(pg.url, f"DROP OWNED BY {role}")
        pg_query(pg.url, f"DROP ROLE {role}")
