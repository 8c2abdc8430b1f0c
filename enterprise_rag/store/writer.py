"""Bulk writes of documents and their chunk nodes.

A batch of documents is written in one transaction: old nodes of each document
are deleted, the document row is upserted, and all new nodes arrive through one
binary ``COPY`` (into a temporary table, then one ``INSERT``: ``COPY`` cannot load a
table under row-level security). Readers see either the old version or the new one,
never both or neither. Stock ``PGVectorStore.add`` inserts row by row; this is the fast path.

The BM25 statistics of the full-text search (``rag_bm25_*``, see
``enterprise_rag/sql/0003_bm25.sql``) follow every node insert, delete and text change through
statement-level triggers, in the same transaction: one trigger run per statement,
so the writer's DELETE and INSERT each cost one run per batch.

Writes never take a lock that readers wait for: every index stays in place and is kept up to date
by the INSERT (row locks and MVCC only), so a query during a large ingest sees the store as of the
last committed batch, at full speed. (An earlier bulk path dropped the indexes inside the write
transaction and rebuilt them at commit; the DROP's exclusive lock held every reader until then.)
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import psycopg

from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.documents import document_access, document_sources

NODE_COLUMNS = (
    "node_id", "document_id", "parent_id", "level", "is_leaf", "position", "text", "breadcrumb",
    "content_hash", "metadata", "embedding", "allowed_groups", "allowed_users", "status",
)  # fmt: skip
# PostgreSQL types of NODE_COLUMNS, for the binary COPY. Vectors travel as float32 bytes, not text,
# through pgvector's adapters (registered on every pooled connection, see store/database.py).
NODE_TYPES = (
    "text", "text", "text", "int2", "bool", "int4", "text", "text",
    "text", "jsonb", "vector", "text[]", "text[]", "text",
)  # fmt: skip

_COLUMNS = ", ".join(NODE_COLUMNS)
_INCOMING_COLUMNS = ", ".join(f"{c} {t}" for c, t in zip(NODE_COLUMNS, NODE_TYPES, strict=True))


@dataclass
class PreparedDocument:
    """A document ready to write: its record, chunks and the embeddings of its leaves."""

    record: DocumentRecord
    chunks: list[Chunk]
    leaf_hashes: dict[str, str] = field(default_factory=dict)  # chunk_id -> content hash of search text
    embeddings: dict[str, np.ndarray] = field(default_factory=dict)  # content hash -> vector


def _node_rows(doc: PreparedDocument) -> Iterable[tuple[object, ...]]:
    rec = doc.record
    base = rec.node_metadata()
    for chunk in doc.chunks:
        meta = {
            **base,
            "page": chunk.pages[0] if chunk.pages else None,
            "pages": list(chunk.pages),
            "breadcrumb": chunk.breadcrumb,
            "level": chunk.level,
        }
        content_hash = doc.leaf_hashes.get(chunk.chunk_id) or ""
        embedding = np.asarray(doc.embeddings[content_hash], dtype=np.float32) if chunk.is_leaf else None
        yield (
            chunk.chunk_id, rec.document_id, chunk.parent_id, chunk.level, chunk.is_leaf, chunk.position,
            chunk.text, chunk.breadcrumb, content_hash, meta, embedding,
            rec.allowed_groups, rec.allowed_users, rec.status,
        )  # fmt: skip


def write_documents(conn: psycopg.Connection, docs: Sequence[PreparedDocument], *, access_change: bool = False) -> int:
    """Replace each document's nodes in one transaction; return the number of nodes written.

    A document whose id belongs to another source raises :class:`IngestError` naming it, and
    nothing of the batch is written. So does one that would change who may read a stored document,
    unless ``access_change`` says the write is a re-ingest of its source (one ACL per document: a
    node cannot bring readers of its own to a document).
    """
    if not docs:
        return 0
    ids = sorted(d.record.document_id for d in docs)
    written = 0
    with conn.transaction():
        # Serialise concurrent ingests of the same document; sorted to avoid deadlocks.
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(id)) FROM unnest(%s::text[]) AS id", (ids,))
        refuse_taken_ids(conn, [d.record for d in docs])
        if not access_change:
            refuse_access_changes(conn, [d.record for d in docs])
        conn.execute("DELETE FROM rag_nodes WHERE document_id = ANY(%s)", (ids,))
        with conn.cursor() as cur:
            cur.executemany(
                "INSERT INTO rag_documents (document_id, source, title, version, status, effective_date,"
                " content_hash, allowed_groups, allowed_users, metadata, node_count, root)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s)"
                " ON CONFLICT (document_id) DO UPDATE SET source = EXCLUDED.source, title = EXCLUDED.title,"
                " version = EXCLUDED.version, status = EXCLUDED.status,"
                " effective_date = EXCLUDED.effective_date, content_hash = EXCLUDED.content_hash,"
                " allowed_groups = EXCLUDED.allowed_groups, allowed_users = EXCLUDED.allowed_users,"
                " metadata = EXCLUDED.metadata, node_count = EXCLUDED.node_count, root = EXCLUDED.root,"
                " updated_at = now()",
                [
                    (
                        d.record.document_id,
                        d.record.source,
                        d.record.title,
                        d.record.version,
                        d.record.status,
                        d.record.effective_date,
                        d.record.content_hash,
                        d.record.allowed_groups,
                        d.record.allowed_users,
                        json.dumps(d.record.metadata),
                        len(d.chunks),
                        d.record.root,
                    )  # fmt: skip
                    for d in docs
                ],
            )
            # COPY cannot load a table under row-level security: the rows land in a temporary table
            # (gone again below, or with the rollback of a failed write), then move in one INSERT,
            # which the writer's policy checks.
            cur.execute(f"CREATE TEMP TABLE rag_nodes_incoming ({_INCOMING_COLUMNS})")
            with cur.copy(f"COPY rag_nodes_incoming ({_COLUMNS}) FROM STDIN (FORMAT BINARY)") as copy:
                copy.set_types(list(NODE_TYPES))
                for doc in docs:
                    for row in _node_rows(doc):
                        copy.write_row(row)
                        written += 1
            cur.execute(f"INSERT INTO rag_nodes ({_COLUMNS}) SELECT {_COLUMNS} FROM rag_nodes_incoming")
            cur.execute("DROP TABLE rag_nodes_incoming")
    return written


def refuse_taken_ids(conn: psycopg.Connection, records: Sequence[DocumentRecord]) -> None:
    """Raise :class:`IngestError` for the first record whose document id belongs to another source.

    Writes upsert by document id, so without this check one document (a front-matter
    ``document_id``, a LlamaIndex ``ref_doc_id``) could replace another's text and ACL. An id
    belongs to the source it is stored under or, among ``records``, to the first that claims it. The
    error does not name the owner: the person ingesting may not be allowed to read it.
    :func:`write_documents` calls it under its advisory locks, so a concurrent write cannot slip in.
    """
    owners = document_sources(conn, [r.document_id for r in records])
    for rec in records:
        owner = owners.setdefault(rec.document_id, rec.source)
        if owner != rec.source:
            raise IngestError(
                rec.source,
                f"document_id {rec.document_id!r} already belongs to another document; a document cannot take"
                " another's id (give it a document_id of its own)",
            )


def refuse_access_changes(conn: psycopg.Connection, records: Sequence[DocumentRecord]) -> None:
    """Raise :class:`IngestError` for the first record that would change who may read its stored document."""
    stored = document_access(conn, [r.document_id for r in records])
    for rec in records:
        old = stored.get(rec.document_id)
        if old is not None and (set(old[0]), set(old[1])) != (set(rec.allowed_groups), set(rec.allowed_users)):
            raise IngestError(
                rec.source,
                f"the write would change who may read document {rec.document_id!r}; change its access with"
                " rag.set_access(...) or by ingesting its source again",
            )


def set_access(conn: psycopg.Connection, document_id: str, groups: Sequence[str], users: Sequence[str]
               ) -> tuple[list[str], list[str]] | None:  # fmt: skip
    """Give a stored document and all its nodes this ACL in one transaction; its ACL before, or None when the
    document is not stored. The BM25 triggers keep the per-name leaf counts."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", (document_id,))
        old = document_access(conn, [document_id]).get(document_id)
        if old is None:
            return None
        conn.execute("UPDATE rag_documents SET allowed_groups = %s, allowed_users = %s, updated_at = now()"
                     " WHERE document_id = %s", (list(groups), list(users), document_id))  # fmt: skip
        conn.execute("UPDATE rag_nodes SET allowed_groups = %s, allowed_users = %s WHERE document_id = %s",
                     (list(groups), list(users), document_id))  # fmt: skip
    return old


def delete_documents(conn: psycopg.Connection, document_ids: Sequence[str]) -> int:
    """Delete documents and all their nodes; return documents deleted.

    The nodes go first in one statement (the BM25 statistics trigger then runs once for the
    batch rather than once per document, as it would through the ON DELETE CASCADE).
    """
    ids = sorted(set(document_ids))
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(id)) FROM unnest(%s::text[]) AS id", (ids,))
        conn.execute("DELETE FROM rag_nodes WHERE document_id = ANY(%s)", (ids,))
        cur = conn.execute("DELETE FROM rag_documents WHERE document_id = ANY(%s)", (ids,))
        return cur.rowcount


def existing_embeddings(conn: psycopg.Connection, hashes: Sequence[str]) -> dict[str, np.ndarray]:
    """Embeddings already stored for these leaf content hashes (exact-duplicate chunks are not re-embedded)."""
    if not hashes:
        return {}
    rows = conn.execute(
        "SELECT DISTINCT ON (content_hash) content_hash, embedding FROM rag_nodes"
        " WHERE is_leaf AND content_hash = ANY(%s) AND embedding IS NOT NULL",
        (list(hashes),),
        binary=True,  # the vectors arrive as their float32 bytes, never through decimal text
    ).fetchall()
    return {h: v.to_numpy() for h, v in rows}


def rebuild_bm25_statistics(conn: psycopg.Connection) -> None:
    """Recount the BM25 statistics from ``rag_nodes`` (a repair: the triggers keep them exact)."""
    with conn.transaction():
        conn.execute("SELECT rag_bm25_rebuild()")
