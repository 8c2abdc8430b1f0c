"""Row-level security (enterprise_rag/sql/0004_row_security.sql): the second wall holds on its own.

Every query here is deliberately unfiltered (no ACL predicate of ours) and runs as
the reader role through :func:`enterprise_rag.store.scoping.read_as`: the policies alone
must return exactly the rows the principal may read, and nothing when no principal
is set. Real embedded PostgreSQL; the corpus is written through the real writer (random
vectors: nothing here ranks by similarity).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.errors import StoreError
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.migrate import apply_migrations
from enterprise_rag.store.parents import ANCESTORS_SQL, SIBLINGS_SQL
from enterprise_rag.store.scoping import READER_ROLE, read_as
from enterprise_rag.store.search import ACL, SearchParams, build_search_sql
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.store.writer import PreparedDocument, write_documents

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
    yield Store(rag, nodes_of)
    rag.close()
    drop_db(server_dsn, name)


def _ids(conn: psycopg.Connection, sql: str) -> set[str]:
    return {r[0] for r in conn.execute(sql)}


@pytest.mark.parametrize("p", PRINCIPALS, ids=[f"{p.user_id!r}/{len(p.groups)}" for p in PRINCIPALS])
def test_unfiltered_selects_as_the_reader_return_only_permitted_rows(store: Store, p: Principal) -> None:
    allowed = visible(p)
    with store.rag.db.connection() as conn, read_as(conn, p):
        assert conn.execute("SELECT current_user").fetchone() == (READER_ROLE,)
        assert _ids(conn, "SELECT document_id FROM rag_documents") == allowed
        assert _ids(conn, "SELECT node_id FROM rag_nodes") == {n for d in allowed for n in store.nodes_of[d]}
        assert _ids(conn, "SELECT DISTINCT document_id FROM rag_nodes WHERE is_leaf") == allowed
        names = set(conn.execute("SELECT kind, name FROM rag_acl_leaf_counts").fetchall())
        assert names <= {("g", g) for g in p.groups} | {("u", u) for u in p.users}
        assert _ids(conn, "SELECT trace_id FROM rag_traces") == visible_traces(p)
        assert _ids(conn, "SELECT trace_id FROM rag_trace_steps") == visible_traces(p)
        assert _ids(conn, "SELECT trace_id FROM rag_llm_calls") == visible_traces(p)


def test_the_principal_list_exercises_both_outcomes() -> None:
    seen = [visible(p) for p in PRINCIPALS]
    assert any(seen) and not all(seen)
    assert any(visible_traces(p) for p in PRINCIPALS) and not all(visible_traces(p) for p in PRINCIPALS)


def test_the_reader_without_a_principal_sees_no_row_at_all(store: Store) -> None:
    with store.rag.db.connection() as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('role', %s, true)", (READER_ROLE,))
            for table in ("rag_documents", "rag_nodes", "rag_acl_leaf_counts", "rag_traces", "rag_trace_steps",
                          "rag_llm_calls"):  # fmt: skip
                assert conn.execute(f"SELECT count(*) FROM {table}").fetchone() == (0,), table
            raise psycopg.Rollback()
        # a principal set earlier in another transaction does not linger
        with read_as(conn, Principal("alice", ["all-staff"])):
            assert conn.execute("SELECT count(*) FROM rag_documents").fetchone() == (2,)
        with conn.transaction():
            conn.execute("SELECT set_config('role', %s, true)", (READER_ROLE,))
            assert conn.execute("SELECT count(*) FROM rag_nodes").fetchone() == (0,)
            raise psycopg.Rollback()
    with store.rag.db.connection() as conn:  # as the owner (no role switch) every row is there
        assert conn.execute("SELECT count(DISTINCT document_id) FROM rag_nodes").fetchone() == (len(ACLS),)


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
                with store.rag.db.connection() as conn:
                    with read_as(conn, p):
                        got = {r[1] for r in conn.execute(unfiltered, values, prepare=False)}
                    # the control: the same broken statement as the owner returns other people's leaves
                    owner = {r[1] for r in conn.execute(unfiltered, values, prepare=False)}
                assert got <= allowed, (p, mode, exact_below)
                if mode != "text" and exact_below:
                    assert got == allowed
                assert owner - allowed, "the control did not leak: the test would prove nothing"
        every = sorted(set().union(*store.nodes_of.values()))
        with store.rag.db.connection() as conn:
            for sql in (ANCESTORS_SQL, SIBLINGS_SQL):
                with read_as(conn, p):
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
        "SELECT rag_bm25_rebuild()",
    ):
        with (
            store.rag.db.connection() as conn,
            pytest.raises(psycopg.errors.InsufficientPrivilege),
            read_as(conn, p),
        ):
            conn.execute(sql)
    with store.rag.db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM rag_documents").fetchone() == (len(ACLS),)


def test_role_and_principal_never_outlive_the_block(store: Store) -> None:
    with store.rag.db.connection() as conn:
        owner = conn.execute("SELECT current_user").fetchone()
        conn.execute("SELECT 1")  # a caller's open transaction: the block is a savepoint inside it
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
        with read_as(conn, Principal("erin", ["eng"])):
            assert conn.execute("SELECT current_user, rag_principal_groups()").fetchone() == (READER_ROLE, ["eng"])
        assert conn.execute("SELECT current_user, rag_principal_groups(), rag_principal_user_ids()").fetchone() == (
            *owner, None, None,
        )  # fmt: skip
        with pytest.raises(psycopg.errors.InsufficientPrivilege), read_as(conn, Principal("erin", ["eng"])):
            conn.execute("DELETE FROM rag_nodes")
        assert conn.execute("SELECT current_user").fetchone() == owner


def test_migration_is_recorded_once_and_the_role_cannot_bypass_rls(store: Store) -> None:
    with store.rag.db.connection() as conn:
        recorded = conn.execute("SELECT count(*) FROM rag_migrations WHERE filename = '0004_row_security.sql'")
        assert recorded.fetchone() == (1,)
        assert apply_migrations(conn, 384) == []
        role = conn.execute(
            "SELECT rolsuper, rolbypassrls, rolcanlogin, rolinherit FROM pg_roles WHERE rolname = %s", (READER_ROLE,)
        ).fetchone()
        assert role == (False, False, False, False)
        rls = dict(conn.execute(
            "SELECT relname, relrowsecurity FROM pg_class WHERE relname IN ('rag_documents', 'rag_nodes',"
            " 'rag_acl_leaf_counts', 'rag_traces', 'rag_trace_steps', 'rag_llm_calls')"
        ).fetchall())  # fmt: skip
        assert rls and all(rls.values()) and len(rls) == 6


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
    with store.rag.db.connection() as conn, read_as(conn, p):
        got_groups, got_users = conn.execute("SELECT rag_principal_groups(), rag_principal_user_ids()").fetchone()  # type: ignore[misc]
        docs = _ids(conn, "SELECT document_id FROM rag_documents")
    assert got_groups == [g for g in p.groups if "\x00" not in g]
    assert got_users == ([user_id] if storable else [])
    assert docs == visible(p)


def test_a_non_superuser_owner_is_told_what_to_grant_and_then_runs_with_rls(store: Store, server_dsn: str) -> None:
    """Production shape: the app connects as an ordinary user owning its database (not a superuser)."""
    role, db = f"erag_app_{os.getpid()}", f"rls_app_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as su:
        su.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        su.execute(f'DROP ROLE IF EXISTS "{role}"')
        su.execute(f'CREATE ROLE "{role}" LOGIN')
        su.execute(f'CREATE DATABASE "{db}" OWNER "{role}"')
    with psycopg.connect(psycopg.conninfo.make_conninfo(server_dsn, dbname=db), autocommit=True) as su:
        su.execute("CREATE EXTENSION IF NOT EXISTS vector")  # an administrator's step on a managed server
    app_dsn = psycopg.conninfo.make_conninfo(server_dsn, dbname=db, user=role)
    try:
        with psycopg.connect(app_dsn) as conn:
            assert conn.execute("SELECT rolsuper FROM pg_roles WHERE rolname = current_user").fetchone() == (False,)
            with pytest.raises(StoreError, match=f'GRANT enterprise_rag_reader TO {role}"'):
                apply_migrations(conn, 384)
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(f'GRANT enterprise_rag_reader TO "{role}"')
        rag = EnterpriseRAG(data_dir=store.rag.data_dir, settings=load_settings(None, database={"dsn": app_dsn}))
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
            with rag.db.connection() as conn:  # writes run as the owner, triggers and all
                write_documents(conn, docs)
                assert _ids(conn, "SELECT document_id FROM rag_nodes") == {"d_staff", "d_eng"}
                assert conn.execute("SELECT leaves FROM rag_bm25_stats").fetchone() == (2,)
            with rag.db.connection() as conn, read_as(conn, Principal("erin", ["eng"])):
                assert _ids(conn, "SELECT document_id FROM rag_nodes") == {"d_eng"}
            with rag.db.connection() as conn, read_as(conn, Principal("nobody", [])):
                assert _ids(conn, "SELECT document_id FROM rag_documents") == set()
        finally:
            rag.close()
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as su:
            su.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
            su.execute(f'DROP ROLE IF EXISTS "{role}"')
