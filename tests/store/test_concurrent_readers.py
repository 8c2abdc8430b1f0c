"""Queries during a large ingest: writes never make a reader wait, and every query finds k hits."""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from enterprise_rag import Principal
from enterprise_rag.config import RetrievalSettings, load_settings
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store.database import Database
from enterprise_rag.store.search import SearchParams, search
from enterprise_rag.store.writer import PreparedDocument, write_documents

K = 10
LEAVES_PER_DOC = 4  # under one parent: five nodes per document
WORDS = ("refund", "travel", "audit", "invoice", "laptop", "pension", "holiday", "contract", "safety", "badge")
READER = Principal("reader", ["staff"])


def _documents(rng: np.random.Generator, first: int, count: int) -> list[PreparedDocument]:
    """``count`` documents of one parent and four leaves; vectors near one of 32 topics, as embeddings cluster."""
    topics = rng.standard_normal((32, 384)).astype(np.float32)
    docs = []
    for d in range(first, first + count):
        doc_id = f"doc-{d}"
        record = DocumentRecord(
            document_id=doc_id, source=f"/corpus/{doc_id}.md", title=f"Document {d}", version=None,
            status="current", effective_date=None, content_hash=f"hash-{d}", allowed_groups=["staff"],
            allowed_users=[], metadata={},
        )  # fmt: skip
        parent = Chunk(f"{doc_id}:p", 0, 0, f"Document {d}", f"Document {d}", is_leaf=False)
        doc = PreparedDocument(record, [parent])
        for j in range(LEAVES_PER_DOC):
            words = " ".join(WORDS[(d + j + i) % len(WORDS)] for i in range(3))
            leaf = Chunk(f"{doc_id}:{j}", 1, j + 1, f"Section {j} of document {d} is about {words}.",
                         f"Document {d}", parent_id=parent.chunk_id, is_leaf=True)  # fmt: skip
            vector = topics[(d + j) % len(topics)] + 0.3 * rng.standard_normal(384).astype(np.float32)
            doc.chunks.append(leaf)
            doc.leaf_hashes[leaf.chunk_id] = f"leaf-{d}-{j}"
            doc.embeddings[f"leaf-{d}-{j}"] = vector / np.linalg.norm(vector)
        docs.append(doc)
    return docs


@pytest.fixture
def db(fresh_dsn: str, tmp_path: Path) -> Iterator[Database]:
    database = Database(load_settings(None, database={"dsn": fresh_dsn}).database, tmp_path, 384)
    yield database
    database.close()


def test_queries_during_a_20k_node_ingest_never_wait_and_always_find_k(db: Database) -> None:
    """A reader queries without pause while 20,000 nodes are written: first one transaction larger
    than the whole store (the write that used to drop the indexes until its commit), then batches of
    the pipeline's size. No query takes a second, every query returns k hits, and the reader sees
    the store grow as batches commit."""
    # The reader starts with the ingest, so its queries span the whole write.
    rng = np.random.default_rng(7)
    with db.connection() as conn:
        write_documents(conn, _documents(rng, 0, 100))  # 500 nodes for the reader to find from the start
    ingest = _documents(rng, 100, 4000)  # 20,000 nodes
    params = SearchParams.from_settings(RetrievalSettings(), "english", candidates=K)
    waits: list[float] = []
    visible: list[int] = []
    failures: list[BaseException] = []
    done = threading.Event()

    def read() -> None:
        query_rng = np.random.default_rng(11)
        try:
            while not done.is_set():
                vector = query_rng.standard_normal(384).astype(np.float32)
                word = WORDS[len(waits) % len(WORDS)]
                t0 = time.perf_counter()
                with db.connection_for(READER) as conn:
                    hits = search(conn, READER, f"which section covers {word}", vector, params, "hybrid")
                    seen = conn.execute("SELECT count(*) FROM rag_documents").fetchone()[0]  # type: ignore[index]
                waits.append(time.perf_counter() - t0)
                visible.append(seen)
                if len(hits) != K:
                    raise AssertionError(f"a query returned {len(hits)} hits, not {K}")
        except BaseException as exc:  # noqa: BLE001 - reported by the test thread
            failures.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    try:
        with db.connection() as conn:
            assert write_documents(conn, ingest[:1200]) == 6000
            for i in range(1200, len(ingest), 100):
                write_documents(conn, ingest[i : i + 100])  # 500 nodes each, as ingest.write_batch_size
    finally:
        done.set()
        reader.join()
    assert not failures, failures[0]
    with db.connection() as conn:
        assert conn.execute("SELECT count(*) FROM rag_nodes").fetchone() == (20_500,)
    assert len(waits) >= 50, f"only {len(waits)} queries ran during the ingest"
    assert max(waits) < 1.0, f"a query waited {max(waits):.2f} s (median {statistics.median(waits):.3f} s)"
    assert visible[0] < max(visible), "the reader did not see the batches commit"
