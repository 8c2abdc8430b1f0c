"""What readers produce and what the chunker turns it into."""

from __future__ import annotations

import datetime as dt
import hashlib
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from enterprise_rag.errors import IngestError
from enterprise_rag.principal import storable_name

BlockKind = Literal["paragraph", "heading", "list", "table", "code"]


@dataclass
class Block:
    """One structural unit of a document, in reading order.

    ``heading_path`` holds the headings above the block (outermost first, the
    document title not included). ``page`` is the 1-based PDF page the block
    starts on (None for formats without pages). Lists and tables are one block
    each, so the chunker can keep them whole where they fit.
    """

    text: str
    heading_path: tuple[str, ...] = ()
    page: int | None = None
    kind: BlockKind = "paragraph"


@dataclass
class LoadedDocument:
    """A document as a reader returns it, before chunking.

    ``properties`` holds front-matter (or equivalent) fields as found in the
    file: ``title``, ``version``, ``status``, ``effective_date``,
    ``allowed_groups``, ``allowed_users`` and anything else; validation and
    ACL resolution happen later, in one place.
    """

    source: str
    title: str
    blocks: list[Block]
    content_hash: str
    properties: dict[str, Any] = field(default_factory=dict)
    page_count: int | None = None
    warnings: list[str] = field(default_factory=list)
    root: str = ""  # the folder the file was found under: the folder given to ingest, or the file's own


def inline_heading(depth: int, text: str) -> str:
    """How a chunk spanning several sections writes a heading of its path (``depth`` 0 = outermost) inline."""
    return f"{'#' * (depth + 2)} {text}\n"


_INLINE_HEADING = re.compile(r"(?m)^(#{2,7}) (\S[^\n]*)$")


def heading_path_at(text: str, common: tuple[str, ...], offset: int) -> tuple[str, ...]:
    """The heading path at ``offset`` of a chunk's text whose own path is ``common``: the inline headings
    before it (see :func:`inline_heading`) taken in order, so a passage of a merged parent is placed in
    its own section."""
    path = list(common)
    for match in _INLINE_HEADING.finditer(text, 0, max(offset, 0)):
        depth = len(match.group(1)) - 2
        if depth >= len(common):
            path = [*path[:depth], match.group(2).strip()]
    return tuple(path)


@dataclass
class Chunk:
    """A node of the chunk hierarchy (level 0 = largest). Leaves are embedded and searched.

    ``breadcrumb`` is ``"Title > Heading > Sub-heading"``; it is prepended to the
    text that is embedded and full-text indexed, so a chunk matches words that
    only its headings contain. ``pages`` lists every PDF page the chunk touches.
    """

    chunk_id: str
    level: int
    position: int
    text: str
    breadcrumb: str
    parent_id: str | None = None
    pages: tuple[int, ...] = ()
    is_leaf: bool = False

    @property
    def search_text(self) -> str:
        """What is embedded and indexed: breadcrumb, then text."""
        return f"{self.breadcrumb}\n{self.text}" if self.breadcrumb else self.text


def text_document(source: str, title: str, text: str, properties: dict[str, Any] | None = None) -> LoadedDocument:
    """A document from in-memory text (e.g. a dataset record): paragraphs split on blank lines."""
    paragraphs = [p.strip() for p in re.split(r"\n\s*\n", text) if p.strip()]
    digest = hashlib.sha256(f"{title}\n{text}".encode()).hexdigest()
    return LoadedDocument(
        source=source, title=title, blocks=[Block(p) for p in paragraphs], content_hash=digest,
        properties=dict(properties or {}),
    )  # fmt: skip


STATUSES = ("current", "superseded", "draft", "archived")
MAX_NAME_BYTES = 2048  # each ACL name is a GIN index entry; PostgreSQL caps those near 2.7 kB


def acl_names(value: object, what: str, document: str) -> list[str]:
    """The names of one ACL field (``what``: allowed_groups or allowed_users), validated, sorted, unique.

    Every write path goes through here, so a document's ACL means the same whichever way it
    arrives. ``value`` is None (no names), one name as a string (never split into its characters)
    or a list or tuple of names. Each name must be a non-blank string that PostgreSQL can store
    (see :func:`~enterprise_rag.principal.storable_name`) of at most ``MAX_NAME_BYTES`` bytes in
    UTF-8. Names are kept exactly as given: matching a principal's groups is exact.
    Raises :class:`IngestError` naming ``document`` otherwise.

    >>> acl_names("finance", "allowed_groups", "hr/pay.md")
    ['finance']
    >>> acl_names(["hr", "finance", "hr"], "allowed_groups", "hr/pay.md")
    ['finance', 'hr']
    >>> acl_names(["hr", ""], "allowed_groups", "hr/pay.md")
    Traceback (most recent call last):
    ...
    enterprise_rag.errors.IngestError: hr/pay.md: allowed_groups entries must not be empty or blank
    """
    if value is None:
        return []
    names = [value] if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) for n in names):
        raise IngestError(document, f"{what} must be a name or a list of names (strings), got {value!r:.200}")
    for name in names:
        if not name.strip():
            raise IngestError(document, f"{what} entries must not be empty or blank")
        if not storable_name(name):
            raise IngestError(
                document, f"{what} entry {name!r:.80} cannot be stored (a NUL character or invalid UTF-8)"
            )
        if len(name.encode("utf-8")) > MAX_NAME_BYTES:
            raise IngestError(document, f"{what} entries must be at most {MAX_NAME_BYTES} bytes in UTF-8")
    return sorted(set(names))


@dataclass
class DocumentRecord:
    """One row of ``rag_documents``, validated."""

    document_id: str
    source: str
    title: str
    version: str | None
    status: str
    effective_date: dt.date | None
    content_hash: str
    allowed_groups: list[str]
    allowed_users: list[str]
    metadata: dict[str, Any] = field(default_factory=dict)
    root: str = ""  # the folder it was ingested from ("" for documents that are not files)

    @property
    def relative_source(self) -> str:
        """``source`` relative to ``root`` when it lies under it (what a person reads), else ``source``."""
        prefix = self.root.rstrip("/") + "/"
        return self.source[len(prefix) :] if self.root and self.source.startswith(prefix) else self.source

    def node_metadata(self) -> dict[str, Any]:
        """The metadata every node of this document carries."""
        return {
            **self.metadata,
            "source": self.source,
            "relative_source": self.relative_source,
            "document_id": self.document_id,
            "title": self.title,
            "version": self.version,
            "status": self.status,
            "effective_date": self.effective_date.isoformat() if self.effective_date else None,
        }


def shown_source(metadata: Mapping[str, Any]) -> str:
    """A node's source as a person reads it: relative to the folder it was ingested from (nodes written
    before that was recorded: the full path)."""
    return str(metadata.get("relative_source") or metadata.get("source") or "")


def document_id_for(source: str) -> str:
    """Identity of a document: derived from its source path, stable across re-ingests."""
    return "doc_" + hashlib.sha256(source.encode()).hexdigest()[:24]
