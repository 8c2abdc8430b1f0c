"""Planner estimates tell a reader nothing about rows it may not read.

PostgreSQL plans with column statistics for leakproof operators (text ``=``, ``<``, ``^@``, ...) even
under row-level security, and ``EXPLAIN`` shows the estimate: a guess at a forbidden value that the
statistics hold gets another row estimate than a wrong one. Here a store of a few thousand leaves is
analysed as its owner, and a signed reader of half of it compares the estimates of right and wrong
guesses at the other half's text, titles, BM25 terms and another user's questions: they must be equal.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pytest

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.traces import TraceStore
from enterprise_rag.store.writer import PreparedDocument, write_documents
from tests.security.wall import estimate
from tests.support.databases import owner_connection

DOCS, LEAVES = 200, 10
SECRET_LINE = "The salary band for grade seven is ninety one thousand euros zebracorn"
SECRET_TITLE = "Compensation review of the executive board"
SECRET_QUESTION = "What is my severance if I resign tomorrow?"
ERIN = Principal("erin", ["eng"])


@dataclass
class Store:
    rag: EnterpriseRAG


@pytest.fixture(scope="module")
def store(server_dsn: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    from tests.support.databases import create_db, drop_db

    name = "estimates_store"
    dsn = create_db(server_dsn, name)
    rag = EnterpriseRAG(data_dir=tmp_path_factory.mktemp("est") / "data", settings=load_settings(None, database={
        "dsn": dsn}))  # fmt: skip
    rng = np.random.default_rng(7)
    docs = []
    for i in range(DOCS):
        forbidden = i % 2 == 1
        doc_id = f"d{i:03d}"
        title = SECRET_TITLE if forbidden and i < 40 else f"Engineering note {i:03d}"
        record = DocumentRecord(
            document_id=doc_id, source=f"est/{doc_id}.md", title=title, version=None, status="current",
            effective_date=None, content_hash=doc_id, allowed_groups=["hr"] if forbidden else ["eng"],
            allowed_users=[],
        )  # fmt: skip
        parent = f"{doc_id}:p"
        doc = PreparedDocument(record=record, chunks=[Chunk(parent, 0, 0, f"parent of {doc_id}", title)])
        for j in range(LEAVES):
            leaf = f"{doc_id}:{j}"
            text = SECRET_LINE if forbidden else f"the antenna {i} points at satellite {j} during pass {i * j}"
            doc.chunks.append(Chunk(leaf, 1, j, text, title, parent_id=parent, is_leaf=True))
            doc.leaf_hashes[leaf] = leaf
            doc.embeddings[leaf] = rng.standard_normal(384)
        docs.append(doc)
    with rag.db.connection() as conn:
        write_documents(conn, docs)
    traces = TraceStore(rag.db)
    for i in range(60):
        asker = Principal("bob" if i % 2 else "erin", ["eng"])
        traces.start(f"t{i}", asker, SECRET_QUESTION if asker.user_id == "bob" else f"question {i}", [])
    with owner_connection(rag) as conn:
        conn.execute("ANALYZE")
    yield Store(rag)
    rag.close()
    drop_db(server_dsn, name)


# (table, column, operator, a value only forbidden rows hold, a value no row holds)
PROBES = [
    ("rag_nodes", "text", "=", SECRET_LINE, "The salary band for grade seven is ninety two thousand euros"),
    ("rag_nodes", "text", "<", "The salary band for grade seven is ninety one thousand euros zebracorn!",
     "The salary band for grade seven is ninety one thousand euros zebracorm"),
    ("rag_documents", "title", "=", SECRET_TITLE, "Compensation review of the supervisory board"),
    ("rag_documents", "title", "<", "Compensation review of the executive board!", "Compensation review of the"),
    ("rag_bm25_terms", "lexeme", "=", "zebracorn", "zebracorm"),
    ("rag_bm25_terms", "lexeme", "^@", "zebrac", "zebrad"),
    ("rag_traces", "question", "=", SECRET_QUESTION, "What is my severance if I resign today?"),
]


@pytest.mark.parametrize(("table", "column", "op", "right", "wrong"), PROBES,
                         ids=[f"{t}.{c} {o}" for t, c, o, _, _ in PROBES])  # fmt: skip
def test_a_right_guess_at_forbidden_text_is_estimated_as_a_wrong_one(
    store: Store, table: str, column: str, op: str, right: str, wrong: str
) -> None:
    with store.rag.db.connection_for(ERIN) as conn:
        assert estimate(conn, table, column, op, right) == estimate(conn, table, column, op, wrong)


def test_no_text_bearing_column_of_a_row_secured_table_keeps_statistics(store: Store) -> None:
    """Every column, also those a later migration adds, but boolean and numeric ones (counts and sizes, which
    the planner needs): no statistics are gathered nor kept."""
    numeric = "(" + ", ".join(f"'{t}'::regtype" for t in ("bool", "int2", "int4", "int8", "float4", "float8")) + ")"
    with owner_connection(store.rag) as conn:
        kept = conn.execute(
            "SELECT c.relname, a.attname FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid"
            " WHERE c.relrowsecurity AND c.relnamespace = current_schema()::regnamespace AND a.attnum > 0"
            f" AND NOT a.attisdropped AND a.attstattarget IS DISTINCT FROM 0 AND a.atttypid NOT IN {numeric}"
        ).fetchall()
        assert kept == []
        stats = conn.execute(
            "SELECT s.tablename, s.attname FROM pg_stats s JOIN pg_class c ON c.relname = s.tablename"
            " JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = s.attname"
            f" WHERE c.relrowsecurity AND s.schemaname = current_schema() AND a.atttypid NOT IN {numeric}"
        ).fetchall()
        assert stats == []
        assert conn.execute("SELECT count(*) FROM pg_stats WHERE tablename = 'rag_nodes' AND attname = 'is_leaf'"
                            ).fetchone() == (1,)  # fmt: skip
