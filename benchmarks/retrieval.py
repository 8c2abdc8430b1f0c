"""Retrieval benchmark on SciFact (300 test queries) plus latency at >= 200k chunks.

One run prints nDCG@10, R@10, R@100 for dense only, full-text only, hybrid
(RRF in SQL), and hybrid + each optional stage, next to the published figures;
then retrieve() latency p50/p95 at the SciFact size and at 200k+ synthetic
chunks, each with a broad and with a selective (1%) ACL.

    .venv/bin/python benchmarks/retrieval.py [--store-dir DIR] [--llm-queries 50] [--rerank-queries 30]
                                             [--latency-chunks 200000] [--skip-latency] [--rerank-only]

``--store-dir`` keeps the ingested SciFact store between runs (ingest takes minutes).
``--rerank-only`` runs just hybrid vs hybrid + local LLM rerank on the first
``--rerank-queries`` queries (the local LLM scores ~30 s per query on 2 cores).
"""

from __future__ import annotations

import argparse
import logging
import os
import random
import statistics
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
from _common import SCIFACT, iter_scifact, temp_data_dir

from enterprise_rag import EnterpriseRAG, Principal
from enterprise_rag.config import load_settings
from enterprise_rag.evaluation import evaluate, load_beir
from enterprise_rag.ingest.pipeline import Ingestor
from enterprise_rag.retrieval.retriever import RetrievalOptions
from enterprise_rag.schema.documents import text_document
from enterprise_rag.store.embedded import start_embedded

PUBLISHED = [
    ("BM25 (BEIR paper)", 0.665, None, None),
    ("BM25 (bm25s, stemmed)", 0.687, 0.819, 0.913),
    ("all-MiniLM-L6-v2 dense (MTEB)", 0.645, 0.783, 0.925),
    ("bge-small-en-v1.5 dense (MTEB)", 0.713, None, None),
    ("BM25 + MiniLM cross-encoder (BEIR)", 0.688, None, None),
]
PUBLIC = Principal("bench", ["public"])


def database(server_dsn: str, name: str, reset: bool = False) -> str:
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        exists = conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone()
        if exists and reset:
            conn.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
        if not exists or reset:
            conn.execute(f'CREATE DATABASE "{name}"')
    return psycopg.conninfo.make_conninfo(server_dsn, dbname=name)


def scifact_rag(server_dsn: str, data_dir: Path, **overrides: Any) -> EnterpriseRAG:
    dsn = database(server_dsn, "scifact")
    rag = EnterpriseRAG(data_dir=data_dir, settings=load_settings(None, database={"dsn": dsn}, **overrides))
    if rag.status()["documents"] < 5183:
        docs = (text_document(f"scifact/{r['_id']}", r["title"], r["text"], {"document_id": r["_id"]})
                for r in iter_scifact())  # fmt: skip
        report = Ingestor(rag.db, rag.providers.embed_model, rag.settings.ingest).ingest_documents(
            docs, allowed_groups=["public"]
        )
        print(f"ingested SciFact: {report.summary()}")
    return rag


def doc_ranking(rag: EnterpriseRAG, options: RetrievalOptions, depth: int = 100):  # type: ignore[no-untyped-def]
    retriever = rag.as_retriever(PUBLIC, top_k=depth * 3, options=options)

    def retrieve(question: str) -> list[str]:
        return [n.node.metadata["document_id"] for n in retriever.retrieve(question)]

    return retrieve


FLAT = RetrievalOptions(mode="hybrid", merge=False, expand_section=False, rerank=False)


class _Counter(logging.Handler):
    """Counts rerank calls that failed and fell back to the fused order."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        self.count += record.getMessage().startswith("rerank call failed")


def rerank_quality(rag: EnterpriseRAG, reranking: EnterpriseRAG, queries: int) -> None:
    """hybrid vs hybrid + local LLM rerank of the fused head, on the same first ``queries`` queries."""
    evalset = load_beir(SCIFACT)
    ids = sorted(evalset.queries)
    subset = evalset.subset(ids[:queries])
    window = reranking.settings.reranker.llm_candidates
    retriever = reranking.as_retriever(PUBLIC, top_k=5, options=replace(FLAT, rerank=True))
    retriever.retrieve(evalset.queries[ids[-1]])  # warm-up: loads the model; a query outside the subset
    failures = _Counter()
    logging.getLogger("enterprise_rag.retrieval.llm_rerank").addHandler(failures)
    runs = [
        (f"hybrid, first {queries} queries", rag, FLAT),
        (f"hybrid + LLM rerank of top {window}, first {queries}", reranking, replace(FLAT, rerank=True)),
    ]
    reports = []
    print(f"\n{'method':48} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'p50 ms':>8} {'mean ms':>8}")
    for name, instance, options in runs:
        report = evaluate(doc_ranking(instance, options), subset, ks=(10, 100), name=name)
        reports.append(report)
        m = report.metrics
        mean_ms = statistics.mean(r.latency_ms for r in report.per_query)
        print(f"{name:48} {m['ndcg@10']:8.3f} {m['recall@10']:7.3f} {m['recall@100']:7.3f} "
              f"{report.latency_p50_ms:8.1f} {mean_ms:8.1f}", flush=True)  # fmt: skip
    base, reranked = ({r.query_id: r.metrics["ndcg@10"] for r in rep.per_query} for rep in reports)
    better = sum(reranked[q] > base[q] + 1e-9 for q in base)
    worse = sum(reranked[q] < base[q] - 1e-9 for q in base)
    base_ms = {r.query_id: r.latency_ms for r in reports[0].per_query}
    added = [r.latency_ms - base_ms[r.query_id] for r in reports[1].per_query]
    same = len(base) - better - worse
    print(f"rerank vs fused order per query (nDCG@10): better {better}, worse {worse}, same {same};"
          f" rerank calls that fell back to the fused order: {failures.count}")  # fmt: skip
    print(f"added latency per query: median {statistics.median(added):.0f} ms, mean {statistics.mean(added):.0f} ms,"
          f" max {max(added):.0f} ms  ({_load()})")  # fmt: skip


def quality(rag: EnterpriseRAG, llm_queries: int) -> None:
    evalset = load_beir(SCIFACT)
    flat = dict(merge=False, expand_section=False)
    runs = {
        "dense only": (RetrievalOptions(mode="dense", **flat), evalset),
        "full-text only": (RetrievalOptions(mode="text", **flat), evalset),
        "hybrid (RRF k=60)": (RetrievalOptions(mode="hybrid", **flat), evalset),
        "hybrid + merge + section window": (RetrievalOptions(mode="hybrid"), evalset),
    }
    subset = evalset.subset(sorted(evalset.queries)[:llm_queries]) if llm_queries else None
    if subset is not None:
        runs[f"hybrid, first {llm_queries} queries"] = (RetrievalOptions(mode="hybrid", **flat), subset)
        runs[f"hybrid + multi-query (3), first {llm_queries}"] = (
            RetrievalOptions(mode="hybrid", multi_query=3, **flat), subset)  # fmt: skip
        runs[f"hybrid + HyDE, first {llm_queries}"] = (RetrievalOptions(mode="hybrid", hyde=True, **flat), subset)
    print(f"\n{'method':48} {'nDCG@10':>8} {'R@10':>7} {'R@100':>7} {'p50 ms':>8}")
    for name, (options, es) in runs.items():
        report = evaluate(doc_ranking(rag, options), es, ks=(10, 100), name=name)
        m = report.metrics
        print(f"{name:48} {m['ndcg@10']:8.3f} {m['recall@10']:7.3f} {m['recall@100']:7.3f} "
              f"{report.latency_p50_ms:8.1f}", flush=True)  # fmt: skip
    print("published (same split):")
    for name, ndcg, r10, r100 in PUBLISHED:
        fmt = lambda v: f"{v:7.3f}" if v is not None else "      -"  # noqa: E731
        print(f"  {name:46} {ndcg:8.3f} {fmt(r10)} {fmt(r100)}")


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} on {os.cpu_count()} cores"


def latency(rag: EnterpriseRAG, principals: dict[str, Principal], questions: list[str], label: str) -> None:
    for name, principal in principals.items():
        retriever = rag.as_retriever(principal, top_k=5)
        retriever.retrieve(questions[0])  # warm-up
        times, counts = [], []
        for q in questions:
            t0 = time.perf_counter()
            nodes = retriever.retrieve(q)
            times.append((time.perf_counter() - t0) * 1000)
            counts.append(len(nodes))
        times.sort()
        p95 = times[int(0.95 * (len(times) - 1))]
        print(f"{label:34} {name:24} p50 {statistics.median(times):7.1f} ms   p95 {p95:7.1f} ms   "
              f"results/query min {min(counts)}   ({_load()})")  # fmt: skip


def make_rare(rag: EnterpriseRAG, share: float) -> int:
    """Give `share` of the documents the extra group 'rare' (a selective ACL); returns leaves visible."""
    with rag.db.connection() as conn:
        conn.execute("UPDATE rag_nodes SET allowed_groups = '{public}' WHERE allowed_groups <> '{public}'")
        conn.execute(
            "UPDATE rag_nodes SET allowed_groups = '{public,rare}' WHERE document_id IN "
            "(SELECT document_id FROM rag_documents ORDER BY md5(document_id) LIMIT "
            "(SELECT ceil(count(*) * %s) FROM rag_documents))",
            (share,),
        )
        conn.execute("ANALYZE rag_nodes")
        row = conn.execute("SELECT count(*) FROM rag_nodes WHERE is_leaf AND 'rare' = ANY(allowed_groups)").fetchone()
    return int(row[0]) if row else 0


SYNTHETIC_DOCS_SQL = """
INSERT INTO rag_documents (document_id, source, content_hash, allowed_groups)
SELECT 'syn-' || d, 'synthetic/' || d, md5(d::text),
       CASE WHEN d %% 100 = 0 THEN '{common,rare}'::text[] ELSE '{common}'::text[] END
FROM generate_series(0, %(docs)s - 1) d
"""
# 10 leaves per document, 60 random words each; 1% of the documents (and so of the leaves) are "rare".
SYNTHETIC_NODES_SQL = """
INSERT INTO rag_nodes (node_id, document_id, parent_id, level, is_leaf, position, text, breadcrumb,
                       content_hash, metadata, embedding, allowed_groups, allowed_users, status)
SELECT 'syn-' || i, 'syn-' || (i / 10), NULL, 0, true, i %% 10,
       (SELECT string_agg(w[1 + floor(random() * array_length(w, 1))::int], ' ')
          FROM generate_series(1, 60 + (i %% 7) * 0) g, (SELECT %(words)s::text[] AS w) v
          WHERE g > i * 0),
       'Synthetic ' || (i / 10), md5(i::text), jsonb_build_object('source', 'synthetic/' || (i / 10)),
       (SELECT array_agg(random() - 0.5)::vector FROM generate_series(1, 384) g WHERE g > i * 0),
       CASE WHEN (i / 10) %% 100 = 0 THEN '{common,rare}'::text[] ELSE '{common}'::text[] END, '{}', 'current'
FROM generate_series(0, %(chunks)s - 1) i
"""


def synthetic_rag(server_dsn: str, data_dir: Path, chunks: int, words: list[str]) -> EnterpriseRAG:
    """A store of ``chunks`` random leaves, bulk-loaded the way a large ingest should be.

    The BM25 trigger is off during the load and the statistics are recounted once after it
    (``rag_bm25_rebuild()``, the migration's backfill); the HNSW index is built after the load.
    The load runs as the tables' owner: the package's own roles may not disable a trigger.
    """
    dsn = database(server_dsn, f"synthetic_{chunks}")
    rag = EnterpriseRAG(data_dir=data_dir, settings=load_settings(None, database={"dsn": dsn}))
    if rag.status()["leaf_nodes"] < chunks:
        t0 = time.perf_counter()
        with psycopg.connect(rag.db.dsn()) as conn:  # the tables' owner: triggers and indexes are its own
            conn.execute("TRUNCATE rag_documents CASCADE")
            conn.execute("SET LOCAL maintenance_work_mem = '2GB'")
            conn.execute("DROP INDEX IF EXISTS rag_nodes_embedding")
            conn.execute("ALTER TABLE rag_nodes DISABLE TRIGGER rag_bm25_insert")
            conn.execute(SYNTHETIC_DOCS_SQL, {"docs": (chunks + 9) // 10})
            conn.execute(SYNTHETIC_NODES_SQL, {"chunks": chunks, "words": words})
            conn.execute("ALTER TABLE rag_nodes ENABLE TRIGGER rag_bm25_insert")
            t1 = time.perf_counter()
            conn.execute("SELECT rag_bm25_rebuild()")
            t2 = time.perf_counter()
            conn.execute("CREATE INDEX rag_nodes_embedding ON rag_nodes USING hnsw (embedding vector_cosine_ops)"
                         " WITH (m = 16, ef_construction = 64)")  # fmt: skip
            t3 = time.perf_counter()
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("VACUUM ANALYZE")
        print(f"built {chunks} synthetic chunks in {time.perf_counter() - t0:.0f} s (rows {t1 - t0:.0f} s,"
              f" BM25 statistics {t2 - t1:.0f} s, HNSW index {t3 - t2:.0f} s)")  # fmt: skip
    return rag


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--store-dir", type=Path, default=None)
    parser.add_argument("--llm-queries", type=int, default=50, help="queries for LLM stages (0 = skip)")
    parser.add_argument("--latency-chunks", type=int, default=200_000)
    parser.add_argument("--rerank-queries", type=int, default=30, help="queries for the LLM rerank stage (0 = skip)")
    parser.add_argument("--skip-quality", action="store_true")
    parser.add_argument("--rerank-only", action="store_true", help="of the quality stages, run only the rerank one")
    parser.add_argument("--skip-latency", action="store_true")
    args = parser.parse_args()
    store_dir = args.store_dir or temp_data_dir("erag-bench-retrieval-")
    store_dir.mkdir(parents=True, exist_ok=True)
    server = start_embedded(store_dir)
    rag = scifact_rag(server, store_dir / "data")
    if not args.skip_quality:
        if not args.rerank_only:
            quality(rag, args.llm_queries)
        if args.rerank_queries:
            reranking = scifact_rag(server, store_dir / "data", reranker={"provider": "llm"})
            rerank_quality(rag, reranking, args.rerank_queries)
    if args.skip_latency:
        return

    questions = [q for q in load_beir(SCIFACT).queries.values()][:100]
    print(f"\nretrieve() latency, top_k=5, {len(questions)} SciFact questions, query embedding included")
    rare = make_rare(rag, 0.01)
    latency(rag, {"broad ACL (all)": PUBLIC, f"selective ACL ({rare} leaves)": Principal("r", ["rare"])},
            questions, f"SciFact ({rag.status()['leaf_nodes']} leaves)")  # fmt: skip
    rng = random.Random(0)
    vocab = sorted({w.lower() for q in questions for w in q.split() if w.isalpha() and len(w) > 3})
    words = vocab + [f"term{i}" for i in range(5000)]
    big = synthetic_rag(server, store_dir / "data", args.latency_chunks, words)
    synthetic_questions = [" ".join(rng.choice(vocab) for _ in range(8)) for _ in range(100)]
    latency(big, {"broad ACL (99%+)": Principal("c", ["common"]), "selective ACL (1%)": Principal("r", ["rare"])},
            synthetic_questions, f"synthetic ({args.latency_chunks} leaves)")  # fmt: skip


if __name__ == "__main__":
    main()
