"""Ingest helpers: Markdown documents with front-matter, and a check that the store is consistent."""

from __future__ import annotations

from typing import Any

import psycopg
import yaml


def query_rows(dsn: str, sql: str, params: Any = None) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(sql, params).fetchall()


def assert_consistent(dsn: str) -> None:
    """No document without nodes, no node without a document, no dangling parent, counts agree."""
    assert query_rows(
        dsn, "SELECT d.source FROM rag_documents d WHERE NOT EXISTS"
        " (SELECT 1 FROM rag_nodes n WHERE n.document_id = d.document_id)"
    ) == []  # fmt: skip
    assert query_rows(
        dsn, "SELECT n.node_id FROM rag_nodes n WHERE NOT EXISTS"
        " (SELECT 1 FROM rag_documents d WHERE d.document_id = n.document_id)"
    ) == []  # fmt: skip
    assert query_rows(
        dsn, "SELECT n.node_id FROM rag_nodes n WHERE n.parent_id IS NOT NULL AND NOT EXISTS"
        " (SELECT 1 FROM rag_nodes p WHERE p.node_id = n.parent_id)"
    ) == []  # fmt: skip
    assert query_rows(
        dsn, "SELECT d.source FROM rag_documents d WHERE d.node_count <>"
        " (SELECT count(*) FROM rag_nodes n WHERE n.document_id = d.document_id)"
    ) == []  # fmt: skip


def markdown_doc(title: str, body: str, **front: Any) -> str:
    fm = yaml.safe_dump({"title": title, **front}, sort_keys=False).strip()
    return f"---\n{fm}\n---\n\n{body.strip()}\n"
