"""A real PostgreSQL primary and hot standby for the read-replica tests, started from pgserver's binaries.

The standby is a ``pg_basebackup -R`` copy of the primary streaming its WAL over the primary's
Unix socket: exactly what a managed read replica is, on one machine.  Run as root, both servers
run as pgserver's unprivileged ``pgserver`` user (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from helpers import import_pgserver, pg_query


@dataclass
class Pair:
    primary: str
    standby: str

    def wait_for_replay(self, timeout: float = 60.0) -> None:
        """Block until the standby has replayed everything the primary has written so far."""
        (lsn,) = pg_query(self.primary, "SELECT pg_current_wal_lsn()::text")[0]
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if pg_query(self.standby, "SELECT pg_last_wal_replay_lsn() >= %s::pg_lsn", (lsn,))[0][0]:
                return
            time.sleep(0.05)
        raise AssertionError(f"the standby did not replay up to {lsn} within {timeout} s")


@contextmanager
def primary_and_standby() -> Iterator[Pair]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset in CI
        pgserver = import_pgserver()

        root = Path(tempfile.mkdtemp(prefix="memdir-rep-"))
        root.chmod(0o755)  # the servers' own user must reach its data folders
        primary_dir, standby_dir = root / "p", root / "s"
        primary_dir.mkdir()
        server = pgserver.get_server(primary_dir, cleanup_mode=None)
    user = server.system_user
    started: list[Path] = [primary_dir]
    try:
        standby_dir.mkdir(mode=0o700)
        if user is not None:
            import pwd

            pw = pwd.getpwnam(user)
            os.chown(standby_dir, pw.pw_uid, pw.pw_gid)
        primary = server.get_uri()
        pgserver.pg_basebackup(["-D", str(standby_dir), "-R", "-X", "stream", "-d", primary], user=user,
                               timeout=120)
        for copied in (".s.PGSQL.5432.lock", ".handle_pids.json", "log"):  # the primary's, not the standby's
            (standby_dir / copied).unlink(missing_ok=True)
        pgserver.pg_ctl(["-w", "-t", "120", "-o", '-h ""', "-o", f"-k {standby_dir}", "-l",
                         str(standby_dir / "log"), "start"], pgdata=standby_dir, user=user, timeout=150)
        started.append(standby_dir)
        standby = f"postgresql://postgres:@/postgres?host={standby_dir}"
        assert pg_query(standby, "SELECT pg_is_in_recovery()")[0][0] is True
        yield Pair(primary, standby)
    finally:
        for data in reversed(started):
            try:
                pgserver.pg_ctl(["-w", "-m", "immediate", "stop"], pgdata=data, user=user)
            except Exception:
                pass
        shutil.rmtree(root, ignore_errors=True)
