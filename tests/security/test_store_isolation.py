"""Each store's database is its own: another store's login role cannot connect to it, nobody gets TEMP by
default, the login role has a connection limit, and it cannot hold a lock that hangs a process opening the
store (the migrations' and the provisioning's locks are not advisory locks any session may take)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from enterprise_rag import EnterpriseRAG
from enterprise_rag.config import load_settings
from tests.support.databases import create_db, drop_db

# The advisory lock ids this package took before (migrations, provisioning): a login role could hold them.
OLD_LOCK_KEYS = (7_340_112_001, 7_340_112_002)


@pytest.fixture
def two_stores(server_dsn: str, tmp_path: Path) -> Iterator[tuple[EnterpriseRAG, EnterpriseRAG]]:
    made = []
    for name in ("iso_a", "iso_b"):
        dsn = create_db(server_dsn, name)
        rag = EnterpriseRAG(data_dir=tmp_path / name, settings=load_settings(None, database={"dsn": dsn}))
        rag.status()  # migrated and provisioned
        made.append((name, rag))
    yield made[0][1], made[1][1]
    for name, rag in made:
        rag.close()
        drop_db(server_dsn, name)


def test_a_stores_login_role_cannot_connect_to_another_store(two_stores: tuple[EnterpriseRAG, EnterpriseRAG]) -> None:
    a, b = two_stores
    b_name = psycopg.conninfo.conninfo_to_dict(b.db.dsn())["dbname"]
    into_b = psycopg.conninfo.make_conninfo(a.db.app_dsn(), dbname=b_name)
    with pytest.raises(psycopg.OperationalError, match="permission denied for database"):
        psycopg.connect(into_b, connect_timeout=5).close()
    with psycopg.connect(b.db.app_dsn(), connect_timeout=5) as conn:  # its own login role still connects
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_public_has_no_privilege_on_a_stores_database_and_the_login_role_is_limited(
    two_stores: tuple[EnterpriseRAG, EnterpriseRAG],
) -> None:
    a, _ = two_stores
    with psycopg.connect(a.db.dsn()) as conn:
        public = conn.execute(
            "SELECT privilege_type FROM pg_database, aclexplode(datacl) WHERE datname = current_database()"
            " AND grantee = 0"
        ).fetchall()
        assert public == []
        role = psycopg.conninfo.conninfo_to_dict(a.db.app_dsn())["user"]
        limit = conn.execute("SELECT rolconnlimit FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        assert limit == (a.settings.database.app_connection_limit,)
    with psycopg.connect(a.db.app_dsn()) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("CREATE TEMP TABLE probe (i int)")  # as itself: no TEMP


def test_the_login_role_cannot_hang_a_process_opening_the_store(
    two_stores: tuple[EnterpriseRAG, EnterpriseRAG], tmp_path: Path
) -> None:
    a, _ = two_stores
    with psycopg.connect(a.db.app_dsn(), autocommit=True) as attacker:
        for key in OLD_LOCK_KEYS:
            assert attacker.execute("SELECT pg_try_advisory_lock(%s)", (key,)).fetchone() == (True,)
        opened: list[object] = []
        second = EnterpriseRAG(data_dir=tmp_path / "second", settings=a.settings)  # another process's open
        worker = threading.Thread(target=lambda: opened.append(second.status()), daemon=True)
        worker.start()
        worker.join(timeout=60)
        hung = worker.is_alive()
    worker.join(timeout=60)  # the attacker's session is closed: a hung open would now go on
    second.close()
    assert not hung and opened, "opening the store waited on a lock the login role held"
