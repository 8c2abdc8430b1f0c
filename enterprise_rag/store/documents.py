"""Reads of ``rag_documents`` as the owner: lookups by id or source, and stored records.

These serve ingest, delete and evaluation, which act on the store as a whole rather
than for one user, so none of them runs under :func:`~enterprise_rag.store.scoping.read_as`.
"""

from __future__ import annotations

from collections.abc import Sequence

import psycopg

from enterprise_rag.schema.documents import DocumentRecord


def stored_record(conn: psycopg.Connection, document_id: str) -> DocumentRecord | None:
    """The stored row of a document as a record, or None when it is not stored."""
    row = conn.execute(
        "SELECT content_hash, allowed_groups, allowed_users, title, version, status, effective_date,"
        " metadata, source, root FROM rag_documents WHERE document_id = %s",
        (document_id,),
    ).fetchone()
    if row is None:
        return None
    content_hash, groups, users, title, version, status, effective_date, metadata, source, root = row
    return DocumentRecord(
        document_id=document_id, source=source, title=title, version=version, status=status,
        effective_date=effective_date, content_hash=content_hash, allowed_groups=groups, allowed_users=users,
        metadata=metadata, root=root,
    )  # fmt: skip


def document_sources(conn: psycopg.Connection, document_ids: Sequence[str]) -> dict[str, str]:
    """The source each of these document ids is stored under (ids not stored are absent)."""
    return {
        r[0]: r[1]
        for r in conn.execute(
            "SELECT document_id, source FROM rag_documents WHERE document_id = ANY(%s)", (list(document_ids),)
        )
    }


def document_access(conn: psycopg.Connection, document_ids: Sequence[str]) -> dict[str, tuple[list[str], list[str]]]:
    """Who may read each of these stored documents: its (allowed_groups, allowed_users)."""
    return {
        r[0]: (list(r[1]), list(r[2]))
        for r in conn.execute(
            "SELECT document_id, allowed_groups, allowed_users FROM rag_documents WHERE document_id = ANY(%s)",
            (list(document_ids),),
        )
    }


def stored_document_ids(conn: psycopg.Connection, document_ids: Sequence[str]) -> set[str]:
    """Which of these document ids are stored."""
    return {
        r[0]
        for r in conn.execute(
            "SELECT document_id FROM rag_documents WHERE document_id = ANY(%s)", (list(document_ids),)
        )
    }


def document_ids_matching(conn: psycopg.Connection, document_ids: Sequence[str], source: str) -> list[str]:
    """The stored documents with one of these ids or ingested from ``source``."""
    return [
        r[0]
        for r in conn.execute(
            "SELECT document_id FROM rag_documents WHERE document_id = ANY(%s) OR source = %s",
            (list(document_ids), source),
        )
    ]


def documents_under(conn: psycopg.Connection, folder: str) -> dict[str, str]:
    """Source -> document id of the stored documents ingested from files under ``folder`` (an absolute path)."""
    prefix = folder.rstrip("/") + "/"
    return {
        r[0]: r[1]
        for r in conn.execute("SELECT source, document_id FROM rag_documents WHERE starts_with(source, %s)", (prefix,))
    }


def unmatched_labels(conn: psycopg.Connection, labels: Sequence[str], *, by_path: bool) -> set[str]:
    """The labels that name no stored document: by id, or (``by_path``) by id, source or source-path suffix."""
    sql = (
        "SELECT l FROM unnest(%s::text[]) AS l WHERE NOT EXISTS (SELECT 1 FROM rag_documents d WHERE d.document_id = l"
        + (" OR d.source = l OR right(d.source, length(l) + 1) = '/' || l" if by_path else "")
        + ")"
    )
    return {row[0] for row in conn.execute(sql, (list(labels),))}
