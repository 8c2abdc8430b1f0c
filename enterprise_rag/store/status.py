"""What a store holds and runs on: server and pgvector versions, row counts, migrations applied."""

from __future__ import annotations

from dataclasses import dataclass

import psycopg


@dataclass(frozen=True)
class StoreStatus:
    """A snapshot of the store for humans and health checks."""

    postgres_version: str
    pgvector_version: str
    documents: int
    nodes: int
    leaves: int
    migrations: list[str]


def store_status(conn: psycopg.Connection) -> StoreStatus:
    """Read the versions, the document / node / leaf counts and the applied migrations."""
    pg_version = conn.execute("SELECT version()").fetchone()[0]  # type: ignore[index]
    vector_version = conn.execute("SELECT extversion FROM pg_extension WHERE extname = 'vector'").fetchone()[0]  # type: ignore[index]
    documents, nodes, leaves = conn.execute(
        "SELECT (SELECT count(*) FROM rag_documents), count(*), count(*) FILTER (WHERE is_leaf) FROM rag_nodes"
    ).fetchone()  # type: ignore[misc]
    migrations = [r[0] for r in conn.execute("SELECT filename FROM rag_migrations ORDER BY filename")]
    return StoreStatus(pg_version, vector_version, documents, nodes, leaves, migrations)
