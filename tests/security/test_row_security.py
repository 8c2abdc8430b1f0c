"""Row-level security (enterprise_rag/sql/0004_row_security.sql, 0007_signed_principal.sql): the
second wall holds on its own, and against SQL run in the package's own sessions.

Every query here is deliberately unfiltered (no ACL predicate of ours) and runs as the
package's login role: the policies alone must return exactly the rows a signed principal
may read, and nothing when the principal is unsigned, forged, replayed or widened, or the
session tries another role. Real embedded PostgreSQL; the corpus is written through the real
writer (random vectors: nothing here ranks by similarity).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from psycopg import sql as pgsql

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.errors import StoreError
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.credentials import app_role_name
from enterprise_rag.store.migrate import apply_migrations
from enterprise_rag.store.parents import ANCESTORS_SQL, SIBLINGS_SQL
from enterprise_rag.store.scoping import READER_ROLE, WRITER_ROLE, read_as
from enterprise_rag.store.search import ACL, SearchParams, build_search_sql
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.store.writer import PreparedDocument, write_documents
from tests.security.wall import SHAPES
from tests.support.databases import owner_connection

INJECTION = "zz'] OR 1=1 OR metadata_::jsonb ?| array['y"
# document id -> (allowed_groups, allowed_users)
ACLS: dict[str, tuple[list[str], list[str]]] = {
    "d_staff": (["all-staff"], []),
    "d_eng": (["eng"], []),
    "d_hr_bob": (["hr"], ["bob"]),
    "d_alice": ([], ["alice"]),
    "d_quote": (["O'Brien", '{"a":1}'], []),
    "d_injection": ([INJECTION], []),
    "d_wild": (["%", "_", "50%_off\\path"], ["' OR 1=1 --"]),
    "d_array": (["{eng,hr}", "a,b", '"'], []),
    "d_unicode": (["Grüße-グループ-🙂"], ["ünïcode"]),
    "d_long": (["g" * 1500], []),
}
PRINCIPALS = [
    Principal("erin", ["eng"]),
    Principal("bob", []),
    Principal("alice", ["all-staff", "hr"]),
    Principal("carol", ["O'Brien", INJECTION]),
    Principal("mallory", ["%", "eng,hr"]),
    Principal("' OR 1=1 --", ["{eng,hr}"]),
    Principal("x", ["a,b", '"', "Grüße-グループ-🙂"]),
    Principal("ünïcode", ["g" * 1500]),
    Principal("", []),
    Principal("", ["nobody-has-this"]),
    Principal("alice\x00", ["eng\x00", "\ud800"]),  # unstorable names: match nothing, never error
    Principal("ALICE", ["ENG", " eng", "{eng}", "_", "%%"]),
]
TRACE_OWNERS = ["alice", "bob", "' OR 1=1 --", "", "ünïcode", "ALICE"]


def visible(p: Principal) -> set[str]:
    return {d for d, (groups, users) in ACLS.items() if set(p.groups) & set(groups) or set(p.users) & set(users)}


def visible_traces(p: Principal) -> set[str]:
    return {f"t{i}" for i, owner in enumerate(TRACE_OWNERS) if owner == p.user_id}


@dataclass
class Store:
    rag: EnterpriseRAG
    nodes_of: dict[str, set[str]]
    app_role: str


@pytest.fixture(scope="module")
def store(server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    from tests.support.databases import create_db, drop_db

    name = "rls_store"
    dsn = create_db(server_dsn, name)
    data_dir = tmp_path_factory.mktemp("rls") / "data"
    rag = EnterpriseRAG(data_dir=data_dir, settings=load_settings(None, database={"dsn": dsn}))
    rng = np.random.default_rng(3)
    docs, nodes_of = [], {}
    for doc_id, (groups, users) in ACLS.items():
        record = DocumentRecord(
            document_id=doc_id, source=f"rls/{doc_id}.md", title=doc_id, version=None, status="current",
            effective_date=None, content_hash=doc_id, allowed_groups=groups, allowed_users=users,
        )  # fmt: skip
        parent = f"{doc_id}:p"
        doc = PreparedDocument(record=record, chunks=[Chunk(parent, 0, 0, f"parent of {doc_id}", doc_id)])
        for j in range(3):
            leaf = f"{doc_id}:{j}"
            doc.chunks.append(Chunk(leaf, 1, j, f"policy text {j} of {doc_id}", doc_id, parent_id=parent, is_leaf=True))
            doc.leaf_hashes[leaf] = leaf
            doc.embeddings[leaf] = rng.standard_normal(384)
        nodes_of[doc_id] = {parent} | {f"{doc_id}:{j}" for j in range(3)}
        docs.append(doc)
    with rag.db.connection() as conn:
        write_documents(conn, docs)
    traces = TraceStore(rag.db)
    for i, owner in enumerate(TRACE_OWNERS):
        traces.start(f"t{i}", Principal(owner, ["all-staff"]), f"question {i}", [])
        traces.record_step(f"t{i}", 1, "prepare", {"i": i}, 1.0)
        traces.record_call(f"t{i}", {"key": f"k{i}", "seq": 1, "name": "grade", "role": "grader", "model": "m",
                                      "messages": [], "response": "r", "prompt_tokens": 1, "completion_tokens": 1,
                                      "ms": 1.0})  # fmt: skip
    yield Store(rag, nodes_of, app_role_name(name))
    rag.close()
    drop_db(server_dsn, name)


def _ids(conn: psycopg.Connection, sql: str) -> set[str]:
    return {r[0] for r in conn.execute(sql)}


@pytest.mark.parametrize("p", PRINCIPALS, ids=[f"{p.user_id!r}/{len(p.groups)}" for p in PRINCIPALS])
def test_unfiltered_selects_as_the_reader_return_only_permitted_rows(store: Store, p: Principal) -> None:
    allowed = visible(p)
    with store.rag.db.connection_for(p) as conn:
        assert conn.execute("SELECT current_user, session_user").fetchone() == (READER_ROLE, store.app_role)
        assert _ids(conn, "SELECT document_id FROM rag_documents") == allowed
        assert _ids(conn, "SELECT node_id FROM rag_nodes") == {n for d in allowed for n in store.nodes_of[d]}
        assert _ids(conn, "SELECT DISTINCT document_id FROM rag_nodes WHERE is_leaf") == allowed
        for groups, users in conn.execute("SELECT allowed_groups, allowed_users FROM rag_acl_sets"):
            assert set(groups) & set(p.groups) or set(users) & set(p.users), (groups, users)
        # the BM25 statistics: only the postings and words of leaves the principal may read
        seqs = _ids(conn, "SELECT node_seq FROM rag_nodes WHERE is_leaf")
        assert _ids(conn, "SELECT node_seq FROM rag_bm25_postings") <= seqs
        words = _ids(conn, "SELECT DISTINCT u.lexeme FROM rag_nodes n, unnest(n.tsv) u WHERE n.is_leaf")
        assert _ids(conn, "SELECT lexeme FROM rag_bm25_terms") == words
        assert _ids(conn, "SELECT lexeme FROM rag_bm25_postings") == words
        assert _ids(conn, "SELECT trace_id FROM rag_traces") == visible_traces(p)
        assert _ids(conn, "SELECT trace_id FROM rag_trace_steps") == visible_traces(p)
        assert _ids(conn, "SELECT trace_id FROM rag_llm_calls") == visible_traces(p)


def test_the_principal_list_exercises_both_outcomes() -> None:
    seen = [visible(p) for p in PRINCIPALS]
    assert any(seen) and not all(seen)
    assert any(visible_traces(p) for p in PRINCIPALS) and not all(visible_traces(p) for p in PRINCIPALS)


def test_the_search_statement_with_its_acl_predicates_removed_is_still_scoped(store: Store) -> None:
    """A bug that dropped our predicates from the hot path: RLS alone keeps the result in scope."""
    vec = np.ones(384) / np.sqrt(384)
    for p in PRINCIPALS[:8]:
        allowed = visible(p)
        groups = [g for g in p.groups if "\x00" not in g]
        values = {"groups": groups, "users": p.users, "qvec": vec, "words": ["policy", "text"], "cfg": "english",
                  "n": 100, "rrf_k": 60, "wd": 1.0, "wt": 1.0, "demote": 0.5}  # fmt: skip
        for mode in ("dense", "text", "hybrid"):
            for exact_below in (0, 1_000_000):
                sql = build_search_sql(mode, SearchParams(candidates=100, exact_scan_below=exact_below))
                assert ACL in sql
                unfiltered = sql.replace(ACL, "TRUE")
                with store.rag.db.connection_for(p) as conn:
                    got = {r[1] for r in conn.execute(unfiltered, values, prepare=False)}
                # the control: the same broken statement as the owner returns other people's leaves
                with owner_connection(store.rag) as conn:
                    owner = {r[1] for r in conn.execute(unfiltered, values, prepare=False)}
                assert got <= allowed, (p, mode, exact_below)
                if mode != "text" and exact_below:
                    assert got == allowed
                assert owner - allowed, "the control did not leak: the test would prove nothing"
        every = sorted(set().union(*store.nodes_of.values()))
        for sql in (ANCESTORS_SQL, SIBLINGS_SQL):
            with store.rag.db.connection_for(p) as conn:
                rows = conn.execute(sql.replace(ACL, "TRUE"), {"ids": every, "groups": [], "users": []})
                docs = {str(r[0]).split(":")[0] for r in rows}
            assert docs <= allowed


def test_the_reader_cannot_write_nor_read_the_private_tables(store: Store) -> None:
    p = Principal("alice", ["all-staff"])
    for sql in (
        "DELETE FROM rag_nodes",
        "UPDATE rag_documents SET allowed_groups = '{everyone}'",
        "INSERT INTO rag_traces (trace_id, user_id, question) VALUES ('x', 'alice', 'q')",
        "SELECT * FROM rag_grade_cache",
        "SELECT * FROM rag_meta",
        "SELECT * FROM rag_secrets",
        "SELECT rag_bm25_rebuild()",
        "SELECT pg_read_file('postgresql.auto.conf')",
    ):
        with pytest.raises(psycopg.errors.InsufficientPrivilege), store.rag.db.connection_for(p) as conn:
            conn.execute(sql)
    with store.rag.db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM rag_documents").fetchone() == (len(ACLS),)


def test_a_read_for_a_user_never_nests_in_the_packages_own_transaction(store: Store) -> None:
    """Nested as a savepoint, SQL in the read could roll back to the service transaction around it."""
    with store.rag.db.connection() as conn:
        assert conn.execute("SELECT current_user, rag_signed('service')").fetchone() == (WRITER_ROLE, True)
        with pytest.raises(StoreError, match="transaction of its own"), read_as(conn, Principal("erin", ["eng"])):
            pass
    erin = Principal("erin", ["eng"])
    with store.rag.db.connection_for(erin) as conn:
        with read_as(conn, erin):  # already scoped to the same user: adds nothing
            assert conn.execute("SELECT current_user, rag_principal_groups()").fetchone() == (READER_ROLE, ["eng"])
        with pytest.raises(StoreError), read_as(conn, Principal("bob", [])):
            pass
    with store.rag.db.connection() as conn:  # the pooled connection comes back with nobody's principal
        assert conn.execute("SELECT rag_principal_groups(), rag_signed('principal')").fetchone() == ([], False)


def test_migration_is_recorded_once_and_the_role_cannot_bypass_rls(store: Store) -> None:
    with owner_connection(store.rag) as conn:
        recorded = conn.execute("SELECT count(*) FROM rag_migrations WHERE filename = '0004_row_security.sql'")
        assert recorded.fetchone() == (1,)
        assert apply_migrations(conn, 384) == []
        attributes = "SELECT rolsuper, rolbypassrls, rolcanlogin, rolinherit FROM pg_roles WHERE rolname = %s"
        for role in (READER_ROLE, WRITER_ROLE):
            assert conn.execute(attributes, (role,)).fetchone() == (False, False, False, False), role
        assert conn.execute(attributes, (store.app_role,)).fetchone() == (False, False, True, False)
        owned = "SELECT count(*) FROM pg_class WHERE relowner = (SELECT oid FROM pg_roles WHERE rolname = %s)"
        assert conn.execute(owned, (store.app_role,)).fetchone() == (0,)
        rls = dict(conn.execute(
            "SELECT relname, relrowsecurity FROM pg_class WHERE relkind = 'r' AND relname LIKE 'rag\\_%'"
            " AND relnamespace = current_schema()::regnamespace"
        ).fetchall())  # fmt: skip
        private = {"rag_secrets"}  # no grant to any role: no policy needed
        assert len(rls) == 12 and all(on for name, on in rls.items() if name not in private), rls


_HOSTILE = st.one_of(
    st.sampled_from(["'", '"', "{", "}", ",", "\\", "%", "_", "--", ";", "NULL", '{"a":1}', "a,b", " ", "::"]),
    st.characters(codec="utf-8"),
)
_NAME = st.lists(_HOSTILE, max_size=12).map("".join)


@settings(max_examples=80, deadline=None, database=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(user_id=_NAME, groups=st.lists(_NAME, max_size=5))
def test_hostile_principals_reach_the_policies_exactly_as_given(store: Store, user_id: str, groups: list[str]) -> None:
    """Names travel as bound text[] values: what the policies see is exactly the principal, never SQL."""
    p = Principal(user_id, groups)
    storable = "\x00" not in user_id
    with store.rag.db.connection_for(p) as conn:
        got_groups, got_users = conn.execute("SELECT rag_principal_groups(), rag_principal_user_ids()").fetchone()  # type: ignore[misc]
        docs = _ids(conn, "SELECT document_id FROM rag_documents")
    assert got_groups == [g for g in p.groups if "\x00" not in g]
    assert got_users == ([user_id] if storable else [])
    assert docs == visible(p)


def test_a_non_superuser_owner_is_told_what_to_grant_and_then_runs_with_rls(store: Store, server_dsn: str) -> None:
    """Production shape: an ordinary user owns the database (not a superuser); the package still
    queries only as its own login role."""
    role, db = f"erag_owner_{os.getpid()}", f"rls_app_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as su:
        su.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        su.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(pgsql.Identifier(app_role_name(db))))
        su.execute(f'DROP ROLE IF EXISTS "{role}"')
        su.execute(f"CREATE ROLE \"{role}\" LOGIN PASSWORD 'owner-pw'")
        su.execute(f'CREATE DATABASE "{db}" OWNER "{role}"')
    with psycopg.connect(psycopg.conninfo.make_conninfo(server_dsn, dbname=db), autocommit=True) as su:
        su.execute("CREATE EXTENSION IF NOT EXISTS vector")  # an administrator's step on a managed server
    owner_dsn = psycopg.conninfo.make_conninfo(server_dsn, dbname=db, user=role, password="owner-pw")
    try:
        with psycopg.connect(owner_dsn) as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
            with pytest.raises(StoreError, match=f'GRANT enterprise_rag_reader TO {role}"'):
                apply_migrations(conn, 384)
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(f'GRANT enterprise_rag_reader, enterprise_rag_writer TO "{role}" WITH ADMIN OPTION')
        rag = EnterpriseRAG(data_dir=store.rag.data_dir, settings=load_settings(None, database={"dsn": owner_dsn}))
        with pytest.raises(StoreError, match="CREATEROLE"):
            rag.status()  # migrated; making the login role needs CREATEROLE
        rag.close()
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(f'ALTER ROLE "{role}" CREATEROLE')
        rag = EnterpriseRAG(data_dir=store.rag.data_dir, settings=load_settings(None, database={"dsn": owner_dsn}))
        try:
            rng = np.random.default_rng(5)
            docs = []
            for doc_id in ("d_staff", "d_eng"):
                groups, users = ACLS[doc_id]
                record = DocumentRecord(
                    document_id=doc_id, source=f"app/{doc_id}.md", title=doc_id, version=None, status="current",
                    effective_date=None, content_hash=doc_id, allowed_groups=groups, allowed_users=users,
                )  # fmt: skip
                leaf = Chunk(f"{doc_id}:0", 0, 0, f"policy text of {doc_id}", doc_id, is_leaf=True)
                vectors = {doc_id: rng.standard_normal(384)}
                docs.append(PreparedDocument(record, [leaf], {leaf.chunk_id: doc_id}, vectors))
            with rag.db.connection() as conn:  # writes run as the login role, triggers and all
                write_documents(conn, docs)
                assert conn.execute("SELECT session_user").fetchone() == (app_role_name(db),)
                assert _ids(conn, "SELECT document_id FROM rag_nodes") == {"d_staff", "d_eng"}
                assert conn.execute("SELECT sum(leaves) FROM rag_acl_sets").fetchone() == (2,)
            with rag.db.connection_for(Principal("erin", ["eng"])) as conn:
                assert _ids(conn, "SELECT document_id FROM rag_nodes") == {"d_eng"}
            with rag.db.connection_for(Principal("nobody", [])) as conn:
                assert _ids(conn, "SELECT document_id FROM rag_documents") == set()
        finally:
            rag.close()
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            su.execute(pgsql.SQL("DROP ROLE IF EXISTS {}").format(pgsql.Identifier(app_role_name(db))))
            su.execute(f'REVOKE enterprise_rag_reader, enterprise_rag_writer FROM "{role}"')
            su.execute(f'DROP ROLE IF EXISTS "{role}"')


RLS_TABLES = ("rag_documents", "rag_nodes", "rag_acl_sets", "rag_bm25_terms", "rag_bm25_postings",
              "rag_traces", "rag_trace_steps", "rag_llm_calls", "rag_grade_cache", "rag_meta",
              "rag_migrations")  # fmt: skip
EVERY_TABLE = (*RLS_TABLES, "rag_secrets")


def _rows_or_denied(conn: psycopg.Connection, table: str) -> int | None:
    """Rows ``SELECT * FROM table`` returns (in a savepoint), or None when it is refused."""
    try:
        with conn.transaction():
            return len(conn.execute(f"SELECT * FROM {table}").fetchall())
    except psycopg.errors.InsufficientPrivilege:
        return None


def _app_session(store: Store) -> psycopg.Connection:
    """A session of the package's login role, as SQL injected into one would have it (no signing key)."""
    return psycopg.connect(store.rag.db.app_dsn())


def test_the_login_role_reads_nothing_and_cannot_become_anyone_else(store: Store) -> None:
    with _app_session(store) as conn:
        assert conn.execute("SELECT current_user = session_user, rolsuper, rolbypassrls FROM pg_roles"
                            " WHERE rolname = current_user").fetchone() == (True, False, False)  # fmt: skip
        for reset in ("SELECT 1", "RESET ROLE", "SET ROLE NONE"):
            conn.execute(reset)
            assert {t: _rows_or_denied(conn, t) for t in EVERY_TABLE} == dict.fromkeys(EVERY_TABLE), reset
        for other in ("postgres", "pg_read_all_data", "pg_read_server_files", "pg_write_server_files"):
            with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                conn.execute(pgsql.SQL("SET ROLE {}").format(pgsql.Identifier(other)))
        # its own roles, unsigned: no row of any table, no write, no owner function
        for role in (READER_ROLE, WRITER_ROLE):
            with conn.transaction():
                conn.execute(pgsql.SQL("SET LOCAL ROLE {}").format(pgsql.Identifier(role)))
                seen = {t: _rows_or_denied(conn, t) for t in EVERY_TABLE}
                assert all(not n for n in seen.values()), (role, seen)
                if role == WRITER_ROLE:
                    assert conn.execute("DELETE FROM rag_nodes").rowcount == 0
                    assert conn.execute("UPDATE rag_documents SET allowed_groups = '{everyone}'").rowcount == 0
                    with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
                        conn.execute("INSERT INTO rag_traces (trace_id, user_id, question) VALUES ('x', 'a', 'q')")
    with owner_connection(store.rag) as conn:
        assert conn.execute("SELECT count(*) FROM rag_documents").fetchone() == (len(ACLS),)


def _signed_state(store: Store, p: Principal) -> tuple[str, str, str, str]:
    """The settings of a real signed read for ``p``: what SQL inside that read could copy out."""
    with store.rag.db.connection_for(p) as conn:
        row = conn.execute(
            "SELECT current_setting('enterprise_rag.kind'), current_setting('enterprise_rag.user_id'),"
            " current_setting('enterprise_rag.groups'), current_setting('enterprise_rag.sig')"
        ).fetchone()
    assert row is not None
    return row  # type: ignore[return-value]


def _set_state(conn: psycopg.Connection, role: str, kind: str, user_id: str, groups: str, sig: str) -> None:
    conn.execute(
        "SELECT set_config('role', %s, true), set_config('enterprise_rag.kind', %s, true),"
        " set_config('enterprise_rag.user_id', %s, true), set_config('enterprise_rag.groups', %s, true),"
        " set_config('enterprise_rag.sig', %s, true)",
        (role, kind, user_id, groups, sig),
    )


def test_a_forged_or_replayed_principal_reads_nothing(store: Store) -> None:
    every_group = sorted({g for groups, _ in ACLS.values() for g in groups})
    erin = Principal("erin", ["eng"])
    kind, user_id, groups, sig = _signed_state(store, erin)
    forged_groups = "{" + ",".join(f'"{g}"' for g in ["eng", "hr", "all-staff"]) + "}"
    attempts = {
        "no signature": (READER_ROLE, "principal", "{alice}", forged_groups, ""),
        "random signature": (READER_ROLE, "principal", "{alice}", forged_groups, "ab" * 32),
        "erin's signature, more groups": (READER_ROLE, kind, user_id, forged_groups, sig),
        "erin's signature, another user": (READER_ROLE, kind, "{alice}", groups, sig),
        "erin's signature replayed as is": (READER_ROLE, kind, user_id, groups, sig),
        "erin's signature as the service": (WRITER_ROLE, "service", user_id, groups, sig),
        "not hex": (READER_ROLE, "principal", user_id, groups, "zz" * 32),
    }
    with _app_session(store) as conn:
        for name, state in attempts.items():
            with conn.transaction():
                _set_state(conn, *state)
                seen = {t: _rows_or_denied(conn, t) for t in RLS_TABLES}
                assert all(not n for n in seen.values()), (name, seen)
        assert every_group  # the forged lists above name groups that exist


def test_sql_inside_a_signed_read_cannot_widen_it(store: Store) -> None:
    erin = Principal("erin", ["eng"])
    allowed = visible(erin)
    hr_and_more = '{"eng","hr","all-staff","O\'Brien"}'
    with store.rag.db.connection_for(erin) as conn:
        assert _ids(conn, "SELECT document_id FROM rag_documents") == allowed
        with conn.transaction():  # more groups, same signature
            conn.execute("SELECT set_config('enterprise_rag.groups', %s, true)", (hr_and_more,))
            assert _ids(conn, "SELECT document_id FROM rag_documents") == set()
            raise psycopg.Rollback()
        with conn.transaction():  # the service's role: its policies want a signed service
            conn.execute("SELECT set_config('role', %s, true)", (WRITER_ROLE,))
            assert {t: _rows_or_denied(conn, t) for t in RLS_TABLES} == dict.fromkeys(RLS_TABLES, 0)
            conn.execute("SELECT set_config('enterprise_rag.kind', 'service', true)")
            assert _ids(conn, "SELECT document_id FROM rag_documents") == set()
            raise psycopg.Rollback()
        with pytest.raises(psycopg.errors.InsufficientPrivilege), conn.transaction():
            conn.execute("SELECT * FROM rag_secrets")
        assert _ids(conn, "SELECT document_id FROM rag_documents") == allowed  # the read itself is intact
        conn.execute("RESET ROLE")  # back to the login role itself: no privilege at all
        assert {t: _rows_or_denied(conn, t) for t in EVERY_TABLE} == dict.fromkeys(EVERY_TABLE)


def test_the_embedded_server_takes_passwords_on_a_closed_socket(server_dsn: str, server_dir: Path) -> None:
    info = psycopg.conninfo.conninfo_to_dict(server_dsn)
    socket_dir = Path(str(info["host"]))
    assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
    assert stat.S_IMODE((server_dir / "pg-owner.secret").stat().st_mode) == 0o600
    assert "trust" not in (server_dir / "pg" / "pg_hba.conf").read_text()
    without = psycopg.conninfo.make_conninfo(server_dsn, password="")
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(without, connect_timeout=5).close()
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(psycopg.conninfo.make_conninfo(server_dsn, password="guess"), connect_timeout=5).close()


# Each read of a signed principal, with the settings widened by set_config within the one statement in the
# shapes of tests/security/wall.py: after its first row, by the projection of a scan's first row, or before it.
_READS = {
    "rag_documents": "SELECT document_id FROM rag_documents",
    "rag_nodes": "SELECT document_id FROM rag_nodes",
    "rag_acl_sets": "SELECT acl_id FROM rag_acl_sets",
    "rag_bm25_terms": "SELECT lexeme FROM rag_bm25_terms",
    "rag_bm25_postings": "SELECT node_seq FROM rag_bm25_postings",
    "rag_traces": "SELECT trace_id FROM rag_traces",
    "rag_trace_steps": "SELECT trace_id FROM rag_trace_steps",
    "rag_llm_calls": "SELECT trace_id FROM rag_llm_calls",
}


@pytest.mark.parametrize("how", list(SHAPES))
def test_settings_changed_within_one_statement_widen_nothing(store: Store, how: str) -> None:
    """The principal is fixed once per statement from what was signed: set_config later in the same statement,
    a subquery run again per row, or a scan's next rows see the signed principal or nothing, never the new one."""
    alice = Principal("alice", ["all-staff", "hr"])
    widened = {"groups": ["all-staff", "eng", "hr"], "users": ["alice", "bob", "", "ALICE"], "rows": 40}  # others' rows
    own = {"rag_documents": visible(alice), "rag_nodes": visible(alice), "rag_traces": visible_traces(alice),
           "rag_trace_steps": visible_traces(alice), "rag_llm_calls": visible_traces(alice)}  # fmt: skip
    with store.rag.db.connection_for(alice) as conn:
        for table in ("rag_acl_sets", "rag_bm25_terms", "rag_bm25_postings"):  # their rows of a plain read
            own[table] = _ids(conn, _READS[table])
        for table, read in _READS.items():
            with conn.transaction():
                seen = {r[0] for r in conn.execute(SHAPES[how].format(read=read), widened)} - {None}
                assert seen <= own[table], (table, sorted(seen - own[table]))
                raise psycopg.Rollback()
        assert _ids(conn, "SELECT document_id FROM rag_documents") == visible(alice)  # the read itself is intact
