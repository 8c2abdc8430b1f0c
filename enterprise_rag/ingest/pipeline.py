"""Ingestion: discover -> read -> resolve ACL -> chunk -> embed (deduplicated) -> bulk write.

Files stream through in batches, so memory stays bounded on large folders. A
batch is written by a background thread while the next one is read and embedded
(the write's index upkeep runs in the database server, beside the embedding);
its outcome is booked, and ``progress`` called, on the caller's thread.
A file that fails is reported with its path and reason and never stops the
rest; a batch is written in one transaction, so the store never holds half a
document. A document id belongs to the source first stored under it: a file that
claims another's id (through its front-matter ``document_id``) fails alone, and
re-ingesting a source under its own id updates it.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.utils import get_tokenizer

from enterprise_rag.config import IngestSettings
from enterprise_rag.errors import IngestError
from enterprise_rag.ingest.chunking import build_chunks
from enterprise_rag.ingest.discovery import discover
from enterprise_rag.ingest.properties import resolve_record
from enterprise_rag.ingest.readers import SUPPORTED_SUFFIXES, read_document
from enterprise_rag.schema.documents import DocumentRecord, LoadedDocument
from enterprise_rag.schema.ingest import FailedFile, FileWarning, IngestReport, Progress
from enterprise_rag.store import Database
from enterprise_rag.store.documents import documents_under, stored_document_ids, stored_record
from enterprise_rag.store.writer import (
    PreparedDocument,
    delete_documents,
    existing_embeddings,
    refuse_taken_ids,
    write_documents,
)

logger = logging.getLogger(__name__)


def _count_tokens() -> Callable[[str], int]:
    tokenizer = get_tokenizer()
    return lambda text: len(tokenizer(text))


@dataclass
class _Written:
    """The outcome of one batch's write: (source, "added" | "updated") per document, failures, nodes, seconds."""

    outcomes: list[tuple[str, str]]
    failed: list[tuple[str, str]]
    nodes: int
    seconds: float


class Ingestor:
    """Ingests files into the store with one embedding model and one set of chunking settings."""

    def __init__(self, db: Database, embed_model: BaseEmbedding, settings: IngestSettings) -> None:
        self._db = db
        self._embed_model = embed_model
        self._settings = settings
        self._count_tokens = _count_tokens()

    def ingest(
        self,
        paths: Iterable[str | Path],
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
        progress: Progress | None = None,
    ) -> IngestReport:
        """Ingest files and folders; see :meth:`EnterpriseRAG.ingest`."""
        return self.ingest_documents(self._load(paths, set()), allowed_groups, allowed_users, metadata, progress)

    def sync(
        self,
        root: str | Path,
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
        progress: Progress | None = None,
        dry_run: bool = False,
    ) -> IngestReport:
        """Make the store hold exactly the files under ``root``; see :meth:`EnterpriseRAG.sync`."""
        folder = Path(root).expanduser()
        if not folder.is_dir():
            raise IngestError(str(root), "sync needs a folder that exists (nothing was changed)")
        top = str(folder.resolve())
        with self._db.connection() as conn:
            stored = documents_under(conn, top)
        seen: set[str] = set()
        report = self.ingest_documents(
            self._load([folder], seen), allowed_groups, allowed_users, metadata, progress, dry_run=dry_run
        )
        # Gone: stored under the root, not found by this walk, and no longer a file at all (a file the walk
        # does not reach, in a hidden folder say, was ingested on purpose and stays).
        report.deleted = sorted(s for s in stored if s not in seen and not Path(s).is_file())
        if report.deleted and not dry_run:
            with self._db.connection() as conn:
                delete_documents(conn, [stored[s] for s in report.deleted])
            for source in report.deleted:
                if progress:
                    progress(source, "deleted")
        return report

    def _load(self, paths: Iterable[str | Path], seen: set[str]) -> Iterator[LoadedDocument | FailedFile]:
        """The documents under ``paths``, or why each cannot be read; every path found is added to ``seen``."""
        max_bytes = int(self._settings.max_file_mb * 1024 * 1024)
        for found in discover(paths, SUPPORTED_SUFFIXES):
            seen.add(str(found.path))
            if found.reason is not None:
                yield FailedFile(str(found.path), found.reason)
                continue
            try:
                yield replace(read_document(found.path, max_bytes), root=str(found.root or ""))
            except IngestError as exc:
                yield FailedFile(exc.path, exc.reason)
            except Exception as exc:  # a reader bug must not sink the batch
                logger.exception("unexpected error reading %s", found.path)
                yield FailedFile(str(found.path), f"unexpected {type(exc).__name__}: {exc}")

    def ingest_documents(
        self,
        documents: Iterable[LoadedDocument | FailedFile],
        allowed_groups: str | Sequence[str] | None = None,
        allowed_users: str | Sequence[str] | None = None,
        metadata: dict[str, Any] | None = None,
        progress: Progress | None = None,
        dry_run: bool = False,
    ) -> IngestReport:
        """Ingest already loaded documents (e.g. records of a dataset), streaming in batches.

        ``dry_run``: read and compare only; the report lists what would be added and updated."""
        report = IngestReport(dry_run=dry_run)
        started = time.perf_counter()
        documents = iter(documents)
        # Each batch is written on a background thread while the next one is read and embedded.
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="erag-write") as writer:
            pending: list[PreparedDocument] = []
            pending_nodes = 0
            in_flight: Future[_Written] | None = None
            while True:
                t0 = time.perf_counter()
                loaded = next(documents, None)
                if loaded is None:
                    report.seconds_parse += time.perf_counter() - t0
                    break
                try:
                    if isinstance(loaded, FailedFile):
                        raise IngestError(loaded.path, loaded.reason)
                    record = resolve_record(loaded, allowed_groups, allowed_users, metadata)
                    report.warnings += [FileWarning(record.source, message) for message in loaded.warnings]
                    if self._unchanged(record):
                        report.unchanged.append(record.source)
                        if progress:
                            progress(record.source, "unchanged")
                        continue
                    if dry_run:
                        with self._db.connection() as conn:
                            exists = bool(stored_document_ids(conn, [record.document_id]))
                        (report.updated if exists else report.added).append(record.source)
                        continue
                    chunks = build_chunks(
                        loaded, record.document_id, self._settings.chunk_sizes, self._settings.chunk_overlap,
                        self._count_tokens,
                    )  # fmt: skip
                    if not any(c.is_leaf for c in chunks):
                        raise IngestError(record.source, "no text to index after parsing")
                except IngestError as exc:
                    self._fail(report, exc.path, exc.reason, progress)
                    continue
                finally:
                    report.seconds_parse += time.perf_counter() - t0
                pending.append(PreparedDocument(record=record, chunks=chunks))
                pending_nodes += len(chunks)
                if pending_nodes >= self._settings.write_batch_size:
                    in_flight = self._flush(pending, report, progress, writer, in_flight)
                    pending, pending_nodes = [], 0
            if pending:
                in_flight = self._flush(pending, report, progress, writer, in_flight)
            self._book(in_flight, report, progress)
        report.seconds = time.perf_counter() - started
        logger.info("ingest: %s", report.summary())
        return report

    def _fail(self, report: IngestReport, path: str, reason: str, progress: Progress | None) -> None:
        logger.warning("not ingested: %s: %s", path, reason)
        report.failed.append(FailedFile(path, reason))
        if progress:
            progress(path, "failed")

    def _unchanged(self, record: DocumentRecord) -> bool:
        """Whether the store already holds this record exactly (content, ACL and properties).

        Raises :class:`IngestError` when its document id belongs to another source, so that file
        fails before it is chunked and embedded.
        """
        with self._db.connection() as conn:
            refuse_taken_ids(conn, [record])
            return stored_record(conn, record.document_id) == record

    def _flush(
        self,
        docs: list[PreparedDocument],
        report: IngestReport,
        progress: Progress | None,
        writer: ThreadPoolExecutor,
        in_flight: Future[_Written] | None,
    ) -> Future[_Written]:
        """Embed ``docs``, book the write still in flight, then hand ``docs`` to the writer thread."""
        self._embed(docs, report)
        self._book(in_flight, report, progress)
        return writer.submit(self._write, docs)

    def _write(self, docs: list[PreparedDocument]) -> _Written:
        """Write one batch (on the writer thread); a document whose id is taken fails alone."""
        t0 = time.perf_counter()
        failed: list[tuple[str, str]] = []
        nodes = 0
        with self._db.connection() as conn:
            while docs:
                existing = stored_document_ids(conn, [d.record.document_id for d in docs])
                try:
                    nodes = write_documents(conn, docs, access_change=True)  # a re-ingest may set a new ACL
                    break
                except IngestError as exc:  # an id taken since it was checked, or twice in this batch
                    failed.append((exc.path, exc.reason))
                    docs = [d for d in docs if d.record.source != exc.path]
        outcomes = [(d.record.source, "updated" if d.record.document_id in existing else "added") for d in docs]
        return _Written(outcomes, failed, nodes, time.perf_counter() - t0)

    def _book(self, in_flight: Future[_Written] | None, report: IngestReport, progress: Progress | None) -> None:
        """Wait for the write in flight (its error, if any, is raised here) and book its outcome."""
        if in_flight is None:
            return
        written = in_flight.result()
        for path, reason in written.failed:
            self._fail(report, path, reason, progress)
        report.nodes_written += written.nodes
        report.seconds_write += written.seconds
        for source, outcome in written.outcomes:
            (report.updated if outcome == "updated" else report.added).append(source)
            if progress:
                progress(source, outcome)

    def _embed(self, docs: list[PreparedDocument], report: IngestReport) -> None:
        """Embed each distinct leaf text once, reusing vectors already in the store."""
        texts: dict[str, str] = {}
        for doc in docs:
            for chunk in doc.chunks:
                if chunk.is_leaf:
                    digest = hashlib.sha256(chunk.search_text.encode()).hexdigest()
                    doc.leaf_hashes[chunk.chunk_id] = digest
                    texts.setdefault(digest, chunk.search_text)
        t0 = time.perf_counter()
        with self._db.connection() as conn:
            vectors = existing_embeddings(conn, list(texts))
        todo = sorted((h for h in texts if h not in vectors), key=lambda h: len(texts[h]))
        if todo:
            embedded = self._embed_model.get_text_embedding_batch([texts[h] for h in todo])
            vectors.update(zip(todo, (np.asarray(v, dtype=np.float32) for v in embedded), strict=True))
        report.seconds_embed += time.perf_counter() - t0
        report.leaves_embedded += len(todo)
        report.embeddings_reused += sum(1 for doc in docs for c in doc.chunks if c.is_leaf) - len(todo)
        for doc in docs:
            doc.embeddings = {h: vectors[h] for h in doc.leaf_hashes.values()}
