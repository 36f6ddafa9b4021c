"""A team's PostgreSQL: roles an administrator granted less than ownership, agents side by side."""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.test_cache_refs import HashProvider

from helpers import Backend, pg_query
from memdir.api import Memory

NOTES = {f"memory/plum-{i:02d}.md": f"# Plum {i}\n\nNote {i}: the codeword is plum{i}q.\n" for i in range(12)}


@pytest.fixture
def app_role(pg: Backend, make_workspace, state_dir: Path) -> Iterator[Backend]:
    """A login role granted reads and writes on a schema an administrator created (not its owner)."""
    from psycopg.conninfo import make_conninfo

    with Memory(make_workspace({"MEMORY.md": "admin\n"}, name="admin"), agent_id="admin", config=pg.config(),
                state_dir=state_dir, provider=HashProvider()) as mem:
        mem.sync()  # the administrator's run creates the schema
    role = "memdir_app_" + uuid.uuid4().hex[:8]
    pg_query(pg.url, f"CREATE ROLE {role} LOGIN PASSWORD 'pw'")
    try:
        pg_query(pg.url, f'GRANT USAGE ON SCHEMA "{pg.schema}" TO {role}')
        pg_query(pg.url, f'GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA "{pg.schema}" TO {role}')
        pg_query(pg.url, f'GRANT USAGE ON ALL SEQUENCES IN SCHEMA "{pg.schema}" TO {role}')
        yield Backend("postgres", make_conninfo(pg.url, user=role, password="pw"), pg.schema)
    finally:
        pg_query(pg.url, f"DROP OWNED BY {role}")
        pg_query(pg.url, f"DROP ROLE {role}")


def test_a_role_that_does_not_own_the_tables_indexes_past_the_hnsw_threshold(app_role: Backend, make_workspace,
                                                                            state_dir: Path):
    """Only the owner may CREATE INDEX: the HNSW build raised "must be owner of table vectors" and
    failed every sync (and rebuild) of an agent past ``hnswMinVectors``; now search stays exact."""
    ws = make_workspace(NOTES)
    cfg = app_role.config(hnswMinVectors=5)
    with Memory(ws, agent_id="app", config=cfg, state_dir=state_dir, provider=HashProvider()) as mem:
        assert mem.sync().indexed == 12
        assert mem.sync(force=True).indexed == 12
        assert [r.path for r in mem.search("plum3q", mode="keyword").results] == ["memory/plum-03.md"]
        vector = mem.store.describe()["vector"]
        assert vector["path"] == "exact" and "may not build it" in vector["why"], vector


def test_a_rebuild_by_such_a_role_drops_the_old_generation_the_owner_indexed(pg: Backend, app_role: Backend,
                                                                            make_workspace, state_dir: Path):
    """The old generation's HNSW index (built by the owner) could not be dropped by the team's role,
    and its rows were then kept too: every rebuild left a whole copy of the agent behind."""
    ws = make_workspace(NOTES)
    with Memory(ws, agent_id="app", config=pg.config(hnswMinVectors=5), state_dir=state_dir,
                provider=HashProvider()) as mem:
        mem.sync()
        assert mem.store.describe()["vector"]["path"] == "hnsw"
    with Memory(ws, agent_id="app", config=app_role.config(hnswMinVectors=5), state_dir=state_dir,
                provider=HashProvider()) as mem:
        assert mem.sync(force=True).indexed == 12
    s = pg.schema
    assert pg_query(pg.url, f"SELECT count(*) FROM \"{s}\".indexes WHERE agent = 'app'") == [(1,)]
    assert pg_query(pg.url, f'SELECT count(*) FROM "{s}".chunks c JOIN "{s}".indexes i ON i.id = c.index_id '
                            "WHERE i.agent = 'app'") == [(12,)]
    assert pg_query(pg.url, f'SELECT count(*) FROM "{s}".chunks WHERE index_id NOT IN (SELECT id FROM "{s}".indexes)'
                    ) == [(0,)]


def test_migrating_one_agent_to_sqlite_copies_its_cache_entries_not_the_teams(pg: Backend, make_workspace,
                                                                            tmp_path: Path):
    """The shared cache holds every agent's vectors: ``migrate --to sqlite`` of one agent copied all of
    them (read into memory at once) into that agent's file.  Now only its own chunks' entries go."""
    provider = HashProvider()
    mine = make_workspace({"memory/a.md": "Alice keeps the orchid codeword.\n", "MEMORY.md": "alpha\n"}, name="mine")
    theirs = make_workspace({f"memory/b{i}.md": f"Bob's private note {i}.\n" for i in range(5)}, name="theirs")
    with Memory(theirs, agent_id="bob", config=pg.config(), state_dir=tmp_path / "s", provider=provider) as bob:
        bob.sync()
    with Memory(mine, agent_id="alice", config=pg.config(), state_dir=tmp_path / "s", provider=provider) as alice:
        alice.sync()
        assert alice.store.cache_count() == 7  # the team's table
        embedded = provider.embedded
        lite = tmp_path / "lite" / "alice.sqlite"
        cfg = pg.config({"memorySearch": {"store": {"path": str(lite)}}})
    with Memory(mine, agent_id="alice", config=cfg, state_dir=tmp_path / "s", provider=provider) as alice:
        assert alice.migrate("sqlite")["cacheEntries"] == 2
    with Memory(mine, agent_id="alice", config={"memorySearch": {"store": {"path": str(lite)}}},
                state_dir=tmp_path / "s", provider=provider) as back:
        assert back.store.cache_count() == 2
        assert back.sync().indexed == 0 and provider.embedded == embedded
        assert [r.path for r in back.search("orchid", mode="keyword").results] == ["memory/a.md"]


def test_a_dsn_naming_a_service_shows_the_server_it_reached(pg: Backend, make_workspace, state_dir: Path,
                                                          tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Host, user and database from a service file (or ``PG*`` variables) were unknown to the DSN
    parser: status and every message called the server ``postgresql://localhost/``."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(pg.url)
    service = tmp_path / "pg_service.conf"
    service.write_text("[team]\n" + "".join(f"{k}={v}\n" for k, v in parts.items()))
    monkeypatch.setenv("PGSERVICEFILE", str(service))
    ws = make_workspace({"MEMORY.md": "the zebra rollback\n"})
    with Memory(ws, agent_id="svc", config=Backend("postgres", "service=team", pg.schema).config(),
                state_dir=state_dir, provider=HashProvider()) as mem:
        mem.sync()
        location = mem.status()["store"]["location"]
    host = str(parts.get("host") or "localhost")
    assert location.startswith(f"postgresql://{parts.get('user') or ''}") and host in location, location
    assert location.endswith(f"/{parts.get('dbname')}#{pg.schema}/svc"), location


class Hash32(HashProvider):
    """The same provider id and model with narrower vectors: a model changed behind its name."""

    dims = 32

    def _vec(self, text: str) -> list[float]:
        return super()._vec(text)[:32]


def test_a_query_of_another_width_finds_nothing_through_the_hnsw_index(pg: Backend, make_workspace,
                                                                     state_dir: Path):
    """The exact path skips vectors of another width; the HNSW path cast each row to the query's
    width and failed with "expected 32 dimensions, not 64"; now it finds nothing, as the exact path."""
    ws = make_workspace(NOTES)
    with Memory(ws, agent_id="wide", config=pg.config(hnswMinVectors=5), state_dir=state_dir,
                provider=HashProvider()) as mem:
        mem.sync()
        assert mem.store.describe()["vector"]["path"] == "hnsw"
        assert mem.store.vector_search(Hash32()._vec("plum3q"), 5) == []
    with Memory(ws, agent_id="wide", config=pg.config(hnswMinVectors=5), state_dir=state_dir,
                provider=Hash32()) as mem:
        assert [r.path for r in mem.search("plum3q", sync=False).results] == ["memory/plum-03.md"]


def test_a_writer_of_the_same_agent_in_another_database_is_not_this_indexs_writer(pg: Backend, make_workspace,
                                                                                state_dir: Path):
    """Advisory locks are per database but ``pg_locks`` lists every database's: a sync of the same
    schema and agent in a staging database beside production was reported as production's writer
    (status said so, and a first search waited for it), and in one process it held this index's
    lock too (the threads' lock was keyed by schema and agent only)."""
    from psycopg.conninfo import make_conninfo

    ws = make_workspace(NOTES)
    db = "staging_" + uuid.uuid4().hex[:8]
    pg_query(pg.url, f"CREATE DATABASE {db}")
    try:
        staging = Backend("postgres", make_conninfo(pg.url, dbname=db), pg.schema)
        with Memory(ws, agent_id="bot", config=staging.config(), state_dir=state_dir / "s",
                    provider=HashProvider()) as other, \
                Memory(ws, agent_id="bot", config=pg.config(), state_dir=state_dir / "p",
                       provider=HashProvider()) as mem:
            mem.sync()
            lock = other.store.writer_lock()
            assert lock.acquire(5)
            try:
                assert lock.holder() is not None  # seen from its own database
                assert mem.store.writer_lock().holder() is None
                assert mem.status().get("writer") is None
                theirs = mem.store.writer_lock()
                assert theirs.acquire(0), "another database's writer does not hold this index's lock"
                theirs.release()
            finally:
                lock.release()
    finally:
        pg_query(pg.url, f"DROP DATABASE {db} WITH (FORCE)")


def test_changing_the_text_search_configuration_rebuilds_the_stemmed_column(pg: Backend, make_workspace,
                                                                          state_dir: Path):
    """``textSearchConfig`` is not part of the index identity: after switching it, queries were
    stemmed with the new configuration and the stored rows with the old one, so "running" never
    found "runs", and the next sync found nothing to do."""
    ws = make_workspace({"memory/a.md": "The dog runs along the beach every morning.\n",
                         "memory/b.md": "A quiet note about lunch.\n"})
    with Memory(ws, agent_id="cfg", config=pg.config(textSearchConfig="simple"), state_dir=state_dir,
                provider=HashProvider()) as mem:
        mem.sync()
        assert not mem.search("running", mode="keyword", sync=False).results  # no stems with "simple"
    with Memory(ws, agent_id="cfg", config=pg.config(textSearchConfig="english"), state_dir=state_dir,
                provider=HashProvider()) as mem:
        report = mem.sync()
        assert report.full and "textSearchConfig" in report.reason, report
        assert [r.path for r in mem.search("running", mode="keyword", sync=False).results] == ["memory/a.md"]
        assert not mem.sync().full


def test_a_client_encoding_from_the_environment_does_not_refuse_unicode_notes(pg: Backend, make_workspace,
                                                                            state_dir: Path,
                                                                            monkeypatch: pytest.MonkeyPatch):
    """libpq takes ``PGCLIENTENCODING`` from the environment (set on some legacy hosts): with LATIN1,
    a note with an emoji or CJK failed the sync with a bare UnicodeEncodeError."""
    monkeypatch.setenv("PGCLIENTENCODING", "LATIN1")
    ws = make_workspace({"memory/a.md": "Emoji 😀 and 東京 café note\n"})
    with Memory(ws, agent_id="enc", config=pg.config(), state_dir=state_dir, provider=HashProvider()) as mem:
        assert mem.sync().indexed == 1
        assert [r.snippet for r in mem.search("東京", mode="keyword", sync=False).results] == [
            "Emoji 😀 and 東京 café note\n"]


def test_a_database_that_cannot_hold_a_notes_characters_is_named_with_the_note(pg_url: str, make_workspace,
                                                                             run_cli):
    """A LATIN1 database refused a note with an emoji as "… has no equivalent in encoding LATIN1",
    CONTEXT "unnamed portal parameter $9": no note named, no cause, no way out."""
    from psycopg.conninfo import make_conninfo

    db = "latin_" + uuid.uuid4().hex[:8]
    pg_query(pg_url, f"CREATE DATABASE {db} ENCODING 'LATIN1' TEMPLATE template0 LC_COLLATE 'C' LC_CTYPE 'C'")
    try:
        ws = make_workspace({"memory/a.md": "Plain café note\n", "memory/b.md": "Emoji 😀 note\n"})
        env = {"MEMDIR_PROVIDER": "none", **Backend("postgres", make_conninfo(pg_url, dbname=db), "memdir").env()}
        out = run_cli("index", "-w", str(ws), env=env)
        assert out.returncode == 1
        assert "cannot store memory/b.md" in out.stderr and "ENCODING 'UTF8'" in out.stderr, out.stderr
        assert "portal" not in out.stderr
    finally:
        pg_query(pg_url, f"DROP DATABASE {db} WITH (FORCE)")


def test_a_workspace_moved_under_its_agent_id_is_told_how_to_start_over_in_postgresql(pg: Backend, make_workspace,
                                                                                     state_dir: Path):
    """The advice for SQLite ("delete postgresql://…/mover", "or index path (store.path)") named no
    file and a setting PostgreSQL does not read; the statement it gives now lets the moved workspace
    index again, and the old generation's rows go."""
    from memdir.errors import IndexOwnershipError

    ws = make_workspace({"memory/2026-01-01.md": "- the gamma note\n"}, name="before")
    cfg = pg.config({"memorySearch": {"provider": "none"}})
    with Memory(ws, agent_id="mover", config=cfg, state_dir=state_dir) as mem:
        mem.sync()
    # moved by copying (a restore, `cp -r` then `rm`): another folder, so the index is refused (a folder
    # renamed in place keeps its identity and its index)
    moved = Path(shutil.copytree(ws, ws.with_name("after")))
    shutil.rmtree(ws)
    with Memory(moved, agent_id="mover", config=cfg, state_dir=state_dir) as mem:
        with pytest.raises(IndexOwnershipError) as refused:
            mem.sync()
        said = str(refused.value)
        assert "store.path" not in said and "delete postgresql" not in said, said
        pg_query(pg.url, said.split("psql: ")[1].split(";)")[0])
        assert mem.sync().indexed == 1 and mem.search("gamma").results
    assert pg_query(pg.url, f'SELECT count(DISTINCT index_id) FROM "{pg.schema}".chunks')[0][0] == 1
