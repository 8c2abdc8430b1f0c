"""What row-level security costs the retrieval hot path: the same searches with and without it.

The store: 3,000 documents (``--docs``), each one parent chunk with 10 leaves (30,000 leaves) of words
drawn from a 3,000-word vocabulary, random unit vectors; 99% of the documents readable by
group ``common``, 1% by group ``rare``. Query vectors are fixed random vectors (no embedding
model runs), so the figures are the database path only: ``search()`` (the one hybrid statement)
and ``retrieve()`` (search, parent merging, section windows).

Each path runs alternately as shipped (the package's login role, a signed principal, the reader
role's policies of ``enterprise_rag/sql/0004_row_security.sql`` and ``0007_signed_principal.sql``) and as
the tables' owner with no second wall (the same statements, our own ACL predicates only), so both
see the same load on a shared machine. The owner's reads also come from a connection pool that checks
each connection it hands out, as the package's pool does: the pool's round trip is not the wall's.

    .venv/bin/python benchmarks/rls_latency.py [--store-dir /tmp/erag-rls-bench] [--repeats 60] [--docs 3000]

``--store-dir`` keeps the server and the stores between runs (one database per size, built only when
missing); ``--docs 20000`` is the 200,000-leaf store.
"""

from __future__ import annotations

import argparse
import hashlib
import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import psycopg
from llama_index.core.base.embeddings.base import BaseEmbedding
from pgvector.psycopg import register_vector
from psycopg_pool import ConnectionPool

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.retrieval.retriever import RetrievalOptions
from enterprise_rag.schema.documents import Chunk, DocumentRecord
from enterprise_rag.store import parents as store_parents
from enterprise_rag.store import search as store_search
from enterprise_rag.store.database import Database
from enterprise_rag.store.embedded import start_embedded
from enterprise_rag.store.search import SearchParams, search
from enterprise_rag.store.writer import PreparedDocument, write_documents

LEAVES_PER_DOC, DIM, VOCAB = 10, 384, 3000


class HashedVectorEmbedding(BaseEmbedding):
    """A deterministic random unit vector per text: no model, so only the database path is timed."""

    def _vector(self, text: str) -> list[float]:
        seed = int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little")
        v = np.random.default_rng(seed).standard_normal(DIM)
        return (v / np.linalg.norm(v)).tolist()  # type: ignore[no-any-return]

    def _get_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._vector(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._vector(text)


def _words(rng: np.random.Generator, n: int) -> list[str]:
    return [f"w{int(i)}x" for i in rng.zipf(1.3, n) % VOCAB]


def build_store(rag: EnterpriseRAG, n_docs: int) -> None:
    rng = np.random.default_rng(7)
    docs: list[PreparedDocument] = []
    for d in range(n_docs):
        group = "rare" if d % 100 == 0 else "common"
        doc_id = f"doc{d:05d}"
        record = DocumentRecord(
            document_id=doc_id, source=f"bench/{d:05d}.md", title=f"Doc {d}", version=None, status="current",
            effective_date=None, content_hash=f"h{d}", allowed_groups=[group], allowed_users=[f"owner{d % 50}"],
        )  # fmt: skip
        parent = f"{doc_id}_p"
        leaves = [" ".join(_words(rng, 40)) for _ in range(LEAVES_PER_DOC)]
        doc = PreparedDocument(record=record, chunks=[Chunk(parent, 0, 0, "\n\n".join(leaves), "Doc")])
        for j, text in enumerate(leaves):
            node_id = f"{doc_id}_{j:02d}"
            doc.chunks.append(Chunk(node_id, 1, j, text, "Doc", parent_id=parent, is_leaf=True))
            doc.leaf_hashes[node_id] = f"{doc_id}l{j}"
            v = rng.standard_normal(DIM)
            doc.embeddings[f"{doc_id}l{j}"] = v / np.linalg.norm(v)
        docs.append(doc)
    for i in range(0, len(docs), 500):
        with rag.db.connection() as conn:
            write_documents(conn, docs[i : i + 500])
    with rag.db.connection() as conn:
        conn.execute("ANALYZE rag_nodes")


@contextmanager
def _no_scope(conn: psycopg.Connection, principal: Principal) -> Iterator[None]:
    """No second wall: a plain transaction of the owner's connection."""
    with conn.transaction():
        yield


def _ab_ms(variants: dict[str, Any], repeats: int) -> dict[str, tuple[float, float]]:
    """p50 and p95 of each variant (name -> fn(i)), alternating call by call."""
    times: dict[str, list[float]] = {name: [] for name in variants}
    for i in range(repeats + 1):
        for name, fn in variants.items():
            t0 = time.perf_counter()
            fn(i)
            if i:  # the first round warms up
                times[name].append((time.perf_counter() - t0) * 1000)
    out = {}
    for name, values in times.items():
        values.sort()
        out[name] = (statistics.median(values), values[int(0.95 * (len(values) - 1))])
    return out


@contextmanager
def _without_the_wall(owners: ConnectionPool) -> Iterator[None]:
    """Reads go to a pooled connection of the owner with no role, principal or policy in the way."""

    @contextmanager
    def connection_for(principal: Principal) -> Iterator[psycopg.Connection]:
        with owners.connection() as owner, owner.transaction():
            yield owner

    with (
        mock.patch.object(store_search, "read_as", _no_scope),
        mock.patch.object(store_parents, "read_as", _no_scope),
        mock.patch.object(Database, "connection_for", lambda self, p: connection_for(p)),
    ):
        yield


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store-dir", type=Path, default=Path("/tmp/erag-rls-bench"))
    parser.add_argument("--repeats", type=int, default=60)
    parser.add_argument("--docs", type=int, default=3000, help="documents of 10 leaves each")
    args = parser.parse_args()
    server = start_embedded(args.store_dir)
    name = "rls_bench" if args.docs == 3000 else f"rls_bench_{args.docs}"  # the 30k store keeps its old name
    with psycopg.connect(server, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')
    dsn = psycopg.conninfo.make_conninfo(server, dbname=name)
    embed = HashedVectorEmbedding(model_name="hashed")
    rag = EnterpriseRAG(data_dir=args.store_dir, settings=load_settings(None, database={"dsn": dsn}), embed_model=embed)
    if rag.status()["leaf_nodes"] < args.docs * LEAVES_PER_DOC:
        t0 = time.perf_counter()
        build_store(rag, args.docs)
        print(f"built in {time.perf_counter() - t0:.0f} s")
    migrations = rag.status()["migrations"]
    print(f"store: {args.docs * LEAVES_PER_DOC} leaves; migrations applied: {', '.join(migrations)}")
    rng = np.random.default_rng(11)
    questions = [" ".join(_words(rng, 6)) for _ in range(args.repeats)]
    vectors = [embed.get_query_embedding(q) for q in questions]
    principals = {"broad (99%)": Principal("u1", ["common"]), "selective (1%)": Principal("u2", ["rare"])}
    owners = ConnectionPool(dsn, min_size=1, max_size=1, open=True, check=ConnectionPool.check_connection,
                            kwargs={"autocommit": True}, configure=register_vector)  # fmt: skip
    print(
        f"{'principal':<16} {'path':<22} {'p50 none':>9} {'p50 wall':>9} {'ratio':>6} {'p95 none':>9} {'p95 wall':>9}"
    )
    for label, principal in principals.items():
        runs: dict[str, Any] = {}
        for mode in ("hybrid", "text", "dense"):
            params = SearchParams(candidates=50)

            def one_search(i: int, mode: Any = mode, params: SearchParams = params, p: Principal = principal) -> None:
                with rag.db.connection_for(p) as conn:
                    search(conn, p, questions[i % len(questions)], vectors[i % len(questions)], params, mode)

            runs[f"search() {mode}"] = one_search
        retriever = rag.as_retriever(principal, top_k=5, options=RetrievalOptions(mode="hybrid"))
        runs["retrieve() hybrid k=5"] = lambda i, r=retriever: r.retrieve(questions[i % len(questions)])
        for path, fn in runs.items():

            def without(i: int, fn: Any = fn) -> None:
                with _without_the_wall(owners):
                    fn(i)

            got = _ab_ms({"wall": fn, "none": without}, args.repeats)
            (n50, n95), (w50, w95) = got["none"], got["wall"]
            print(f"{label:<16} {path:<22} {n50:9.1f} {w50:9.1f} {w50 / n50:6.2f} {n95:9.1f} {w95:9.1f}")
    owners.close()
    rag.close()


if __name__ == "__main__":
    main()
