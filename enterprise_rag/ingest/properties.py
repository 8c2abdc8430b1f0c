"""Turn a reader's raw properties plus ingest arguments into a validated document record.

This is where the fail-closed ACL rule lives: a document with no allowed
group and no allowed user is refused. Arguments win over front-matter.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from typing import Any

from enterprise_rag.errors import IngestError
from enterprise_rag.schema.documents import STATUSES, DocumentRecord, LoadedDocument, acl_names, document_id_for

_RESERVED = {"title", "version", "status", "effective_date", "allowed_groups", "allowed_users", "document_id"}


def _date(value: Any, source: str) -> dt.date | None:
    if value is None or value == "":
        return None
    if isinstance(value, dt.datetime):
        return value.date()
    if isinstance(value, dt.date):
        return value
    try:
        return dt.date.fromisoformat(str(value))
    except ValueError:
        raise IngestError(source, f"effective_date must be a date like 2025-03-01, got {value!r}") from None


def _jsonable(value: Any) -> Any:
    """Front-matter values as JSON-safe data (dates become ISO strings)."""
    if isinstance(value, (dt.date, dt.datetime)):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    return str(value)


def resolve_record(
    doc: LoadedDocument,
    allowed_groups: str | Sequence[str] | None = None,
    allowed_users: str | Sequence[str] | None = None,
    metadata: dict[str, Any] | None = None,
) -> DocumentRecord:
    """Validate properties and resolve the ACL; raise :class:`IngestError` on any problem."""
    props = {**doc.properties, **(metadata or {})}
    source = doc.source
    explicit = allowed_groups is not None or allowed_users is not None
    groups = acl_names(allowed_groups if explicit else props.get("allowed_groups"), "allowed_groups", source)
    users = acl_names(allowed_users if explicit else props.get("allowed_users"), "allowed_users", source)
    if not groups and not users:
        raise IngestError(
            source,
            "no ACL: pass allowed_groups=/allowed_users= (CLI: --groups/--users) or set allowed_groups in "
            "the front-matter; documents without an ACL are refused",
        )
    status = str(props.get("status") or "current").strip().lower()
    if status not in STATUSES:
        raise IngestError(source, f"status must be one of {', '.join(STATUSES)}, got {props.get('status')!r}")
    title = props.get("title") or doc.title
    if not isinstance(title, (str, int, float)):
        raise IngestError(source, f"title must be text, got {title!r}")
    version = props.get("version")
    document_id = props.get("document_id") or document_id_for(source)
    if not isinstance(document_id, str) or not document_id.strip():
        raise IngestError(source, f"document_id must be a non-empty string, got {document_id!r}")
    extra = {k: _jsonable(v) for k, v in props.items() if k not in _RESERVED}
    return DocumentRecord(
        document_id=document_id,
        source=source,
        title=str(title),
        version=str(version) if version is not None else None,
        status=status,
        effective_date=_date(props.get("effective_date"), source),
        content_hash=doc.content_hash,
        allowed_groups=groups,
        allowed_users=users,
        metadata=extra,
        root=doc.root,
    )
