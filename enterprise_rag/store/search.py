"""Dense + BM25 full-text search fused by reciprocal rank fusion, in one SQL statement.

The ACL predicate sits in both halves (and again on the joined rows) with bound
parameters; no user-supplied value is ever pasted into SQL. The statement runs as
the row-level-security-bound reader role (:mod:`enterprise_rag.store.scoping`), a
second wall that holds even if a predicate here were wrong.

Each half has two branches and one InitPlan picks which runs, from the leaf counts of the ACL
sets the principal may read (``rag_acl_sets``), without scanning the leaves:

* small scope (the principal may see fewer than ``exact_scan_below`` leaves):
  the dense half ranks the visible leaves by exact distance; the text half joins
  them to the postings of the question's lexemes before scoring.
* broad scope: HNSW with pgvector's iterative scan (a selective ACL still yields
  n rows); BM25 over every leaf holding a question lexeme, then the ACL checked
  leaf by leaf in score order until n pass.

The text half is BM25 (Lucene's IDF, k1, b; title/heading words weighted) from the statistics
that triggers keep exact per ACL set (``enterprise_rag/sql/0013_bm25_per_acl_set.sql``), summed
over the sets the principal may read: which question words are kept, their IDF and the average
length come from its readable corpus only, so documents it cannot read change none of its
text scores or ranks. (The dense half's exact branch is as independent; HNSW's graph, in the
broad branch, holds every leaf, so what an approximate scan finds can shift with them.)
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
import psycopg

from enterprise_rag.config import RetrievalSettings
from enterprise_rag.principal import Principal
from enterprise_rag.store.scoping import acl_values, read_as
from enterprise_rag.text import query_words

Mode = Literal["hybrid", "dense", "text"]
_BROAD_TOP = 8  # broad scope: ACL-check the top n * 8 text hits first (a heap top-N, no full sort)
_WORK_MEM = "64MB"  # per search transaction: the BM25 aggregate and its sort stay in memory
# BM25 scores rounded to 1e-9: a float sum depends on the order it is added in, which differs
# between the two ACL branches; rounded, equal scores tie exactly and the ranking is the same.
_SCORE = "round({} * 1e9::float8) / 1e9::float8"

ACL = "(n.allowed_groups && %(groups)s::text[] OR n.allowed_users && %(users)s::text[])"


@dataclass
class Hit:
    """A leaf chunk found by search, with its fused score and per-side ranks."""

    node_id: str
    document_id: str
    parent_id: str | None
    text: str
    metadata: dict[str, Any]
    score: float
    dense_rank: int | None = None
    text_rank: int | None = None
    dense_similarity: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class SearchParams:
    """What one search statement is built and run with; :meth:`from_settings` takes them from configuration."""

    candidates: int = 50
    rrf_k: int = 60
    dense_weight: float = 1.0
    text_weight: float = 1.0
    superseded: Literal["demote", "exclude", "keep"] = "demote"
    superseded_factor: float = 0.5
    ef_search: int = 100
    exact_scan_below: int = 10000
    text_search_config: str = "english"
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    bm25_title_boost: float = 1.0
    bm25_max_terms: int = 32
    bm25_max_postings: int = 200_000

    @classmethod
    def from_settings(cls, settings: RetrievalSettings, text_search_config: str, *, candidates: int) -> SearchParams:
        """The configured retrieval settings, with ``candidates`` hits per side (callers raise it to their top k)."""
        return cls(
            candidates=candidates,
            rrf_k=settings.rrf_k,
            dense_weight=settings.dense_weight,
            text_weight=settings.text_weight,
            superseded=settings.superseded,
            ef_search=settings.hnsw_ef_search,
            exact_scan_below=settings.exact_scan_below,
            text_search_config=text_search_config,
            bm25_k1=settings.bm25_k1,
            bm25_b=settings.bm25_b,
            bm25_title_boost=settings.bm25_title_boost,
            bm25_max_terms=settings.bm25_max_terms,
            bm25_max_postings=settings.bm25_max_postings,
        )


def _status_filter(params: SearchParams) -> str:
    return " AND n.status <> 'superseded'" if params.superseded == "exclude" else ""


def _scope_sql(params: SearchParams) -> str:
    # The ACL sets the principal may read (enterprise_rag/sql/0013_bm25_per_acl_set.sql): their
    # ids, leaves and total length, the corpus its BM25 statistics come from, and whether its scope
    # is small. Referenced as ``(SELECT small FROM scope)``: an InitPlan, evaluated once, that gates
    # which branch of each half runs (the other branch is planned but never executed).
    return f"""
    scope AS MATERIALIZED (
        SELECT coalesce(array_agg(a.acl_id), '{{}}') AS ids, coalesce(sum(a.leaves), 0) AS leaves,
               coalesce(sum(a.total_length), 0) AS total_length,
               coalesce(sum(a.leaves), 0) < {int(params.exact_scan_below)} AS small
        FROM rag_acl_sets a
        WHERE a.allowed_groups && %(groups)s::text[] OR a.allowed_users && %(users)s::text[]
    )"""


def _dense_sql(params: SearchParams) -> str:
    # Small scope: exact distances over the visible leaves (the "+ 0" keeps the planner off the graph).
    # Otherwise HNSW with iterative scan, so a selective ACL still fills n rows; there our ACL predicate
    # is applied to the scan's rows, outside it: with no statistics on the ACL columns (0012) the planner
    # takes each ACL condition for a 0.5% one, and with two of them on the scan (ours and the policy's)
    # it would rather sort every leaf the ACL index names than walk the graph (200k leaves: 272 instead
    # of 18 ms). The policy's condition stays on the scan and fills the n rows with readable leaves.
    leaves = f"n.is_leaf AND n.embedding IS NOT NULL{_status_filter(params)}"
    where = f"{leaves} AND {ACL}"
    return f"""
    dense AS (
        SELECT node_id, dist, row_number() OVER (ORDER BY dist, node_id) AS rank
        FROM (
            (SELECT n.node_id, n.embedding <=> %(qvec)s::vector AS dist
             FROM rag_nodes n
             WHERE (SELECT small FROM scope) AND {where}
             ORDER BY (n.embedding <=> %(qvec)s::vector) + 0, n.node_id
             LIMIT %(n)s)
            UNION ALL
            (SELECT n.node_id, n.dist
             FROM (SELECT n.node_id, n.embedding <=> %(qvec)s::vector AS dist, n.allowed_groups, n.allowed_users
                   FROM rag_nodes n
                   WHERE NOT (SELECT small FROM scope) AND {leaves}
                   ORDER BY n.embedding <=> %(qvec)s::vector
                   LIMIT %(n)s) n
             WHERE {ACL})
        ) d
    )"""


def _text_sql(params: SearchParams) -> str:
    # BM25 (Lucene's IDF, k1, b) over the postings of the question's highest-IDF (lowest df)
    # lexemes: at most ``bm25_max_terms``, and the commonest are dropped once their postings would
    # pass ``bm25_max_postings`` (the rarest is always kept), which bounds the work per question.
    # A lexeme in the breadcrumb (weight A) counts ``title_boost`` times. Only leaves holding a
    # query lexeme are scored. The ACL: a small scope's leaves are joined to the postings before
    # scoring; for a broad one, the best hits are checked leaf by leaf in score order until n pass
    # (OFFSET 0 keeps that a nested loop that stops early): first among the top n * _BROAD_TOP,
    # and only if too few of those pass, down the whole ranking.
    k1, b, boost = float(params.bm25_k1), float(params.bm25_b), float(params.bm25_title_boost)
    acl_where = f"n.is_leaf AND {ACL}{_status_filter(params)}"
    # Per lexeme: weight = IDF * (k1 + 1); per leaf: norm = k1 * (1 - b + b * length / avgdl) = c0 + c1 * length.
    # Everything float8 (a numeric literal would turn the per-posting arithmetic into slow numeric).
    part = "q.weight * p.tf / (p.tf + q.c0 + q.c1 * p.length)"
    # Per query lexeme, an index-only range scan of its postings. The lexeme is matched as a
    # closed range, not with "=": the planner then has no hash or merge join to reach for (it did,
    # with a scan of all postings, when statistics were missing or off) and can only probe the
    # index once per query lexeme. A fence such as OFFSET 0 would force this too, but doubles the
    # per-posting cost. With no title boost every posting has tf >= 1.
    tf = "(x.tf_a + x.tf_b)::float8" if boost == 1.0 else f"(x.tf_b + {boost!r}::float8 * x.tf_a)"
    postings = (
        f"SELECT x.node_seq, x.length, {tf} AS tf FROM rag_bm25_postings x"
        " WHERE x.lexeme >= q.lexeme AND x.lexeme <= q.lexeme"
    )
    if boost == 0.0:
        postings += " AND x.tf_b > 0"

    def bm25(gate: str) -> str:
        # BM25 of every leaf holding a query lexeme, computed where needed (not materialised: the
        # top-N sort reads it straight from the aggregate); ``gate`` is the InitPlan that allows it.
        return (
            f"SELECT p.node_seq, {_SCORE.format('sum(' + part + ')')} AS score"
            f" FROM qterms q CROSS JOIN LATERAL ({postings}) p"
            f" WHERE {gate} GROUP BY p.node_seq"
        )

    return f"""
    qterms AS MATERIALIZED (
        SELECT lexeme, weight, c0, c1
        FROM (
            SELECT t.lexeme,
                   ln(1.0::float8 + (s.leaves - t.df + 0.5::float8) / (t.df + 0.5::float8)) * {k1 + 1!r}::float8
                       AS weight,
                   {k1 * (1 - b)!r}::float8 AS c0,
                   {k1 * b!r}::float8 * greatest(s.leaves, 1) / greatest(s.total_length, 1) AS c1,
                   row_number() OVER w AS nth,
                   sum(t.df) OVER w AS postings
            FROM (SELECT t.lexeme, sum(t.df) AS df
                  FROM (SELECT DISTINCT u.lexeme
                        FROM unnest(to_tsvector(%(cfg)s::regconfig, array_to_string(%(words)s::text[], ' '))) u) q
                  JOIN rag_bm25_terms t ON t.lexeme = q.lexeme
                  WHERE t.acl_id = ANY((SELECT ids FROM scope)::integer[])
                  GROUP BY t.lexeme) t
            CROSS JOIN scope s
            WHERE t.df > 0
            WINDOW w AS (ORDER BY t.df, t.lexeme ROWS UNBOUNDED PRECEDING)
        ) ranked
        WHERE nth <= {int(params.bm25_max_terms)} AND (nth = 1 OR postings <= {int(params.bm25_max_postings)})
        LIMIT {int(params.bm25_max_terms)}
    ),
    visible AS MATERIALIZED (
        SELECT n.node_seq, n.node_id FROM rag_nodes n WHERE (SELECT small FROM scope) AND {acl_where}
    ),
    scoped AS (  -- OFFSET 0: the postings of the query lexemes first, then the scope (never all postings)
        SELECT v.node_id, p.node_seq, {_SCORE.format("sum(p.part)")} AS score
        FROM (SELECT p.node_seq, {part} AS part FROM qterms q CROSS JOIN LATERAL ({postings}) p
              WHERE (SELECT small FROM scope) OFFSET 0) p
        JOIN visible v ON v.node_seq = p.node_seq
        GROUP BY p.node_seq, v.node_id
    ),
    bm25_top AS MATERIALIZED (
        SELECT node_seq, score FROM ({bm25("NOT (SELECT small FROM scope)")}) b
        ORDER BY score DESC, node_seq LIMIT %(n)s::bigint * {_BROAD_TOP}
    ),
    bm25_first AS MATERIALIZED (
        SELECT x.node_id, b.node_seq, b.score
        FROM bm25_top b
        CROSS JOIN LATERAL (SELECT n.node_id FROM rag_nodes n
                            WHERE n.node_seq = b.node_seq AND {acl_where} OFFSET 0) x
        ORDER BY b.score DESC, b.node_seq
        LIMIT %(n)s
    ),
    bm25_done AS MATERIALIZED (
        SELECT (SELECT count(*) FROM bm25_first) >= %(n)s
               OR (SELECT count(*) FROM bm25_top) < %(n)s::bigint * {_BROAD_TOP} AS done
    ),
    fts AS (
        SELECT node_id, score, row_number() OVER (ORDER BY score DESC, node_seq) AS rank
        FROM (
            (SELECT node_id, node_seq, score FROM scoped ORDER BY score DESC, node_seq LIMIT %(n)s)
            UNION ALL
            SELECT node_id, node_seq, score FROM bm25_first WHERE (SELECT done FROM bm25_done)
            UNION ALL
            (SELECT x.node_id, b.node_seq, b.score
             FROM (SELECT node_seq, score FROM ({bm25("NOT (SELECT done FROM bm25_done)")}) b
                   ORDER BY score DESC, node_seq) b
             CROSS JOIN LATERAL (SELECT n.node_id FROM rag_nodes n
                                 WHERE n.node_seq = b.node_seq AND {acl_where} OFFSET 0) x
             ORDER BY b.score DESC, b.node_seq
             LIMIT %(n)s)
        ) t
    )"""


def build_search_sql(mode: Mode, params: SearchParams) -> str:
    """The whole search statement for ``mode``; every user-supplied value is a bound parameter.

    Numbers from the settings (scope bound, BM25 constants, term bound) are validated numbers
    written into the statement's text.
    """
    parts, sides = [_scope_sql(params)], []
    if mode in ("hybrid", "dense"):
        parts.append(_dense_sql(params))
        sides.append(
            "SELECT node_id, rank, %(wd)s::float8 AS w, rank AS dense_rank, NULL::bigint AS text_rank,"
            " 1 - dist AS sim FROM dense"
        )
    if mode in ("hybrid", "text"):
        parts.append(_text_sql(params))
        sides.append(
            "SELECT node_id, rank, %(wt)s::float8 AS w, NULL::bigint AS dense_rank, rank AS text_rank,"
            " NULL::float8 AS sim FROM fts"
        )
    demote = (
        "CASE WHEN n.status = 'superseded' THEN %(demote)s::float8 ELSE 1.0 END"
        if params.superseded == "demote"
        else "1.0"
    )
    return f"""
    WITH {", ".join(parts)},
    fused AS (
        SELECT node_id, sum(w / (%(rrf_k)s + rank)) AS rrf, min(dense_rank) AS dense_rank,
               min(text_rank) AS text_rank, max(sim) AS sim
        FROM ({" UNION ALL ".join(sides)}) s
        GROUP BY node_id
    )
    SELECT n.node_id, n.document_id, n.parent_id, n.text, n.metadata,
           f.rrf * {demote} AS score, f.dense_rank, f.text_rank, f.sim
    FROM fused f JOIN rag_nodes n ON n.node_id = f.node_id
    WHERE {ACL}
    ORDER BY score DESC, n.node_id
    LIMIT %(n)s"""


def search(
    conn: psycopg.Connection,
    principal: Principal,
    question: str,
    query_vector: np.ndarray | list[float] | None,
    params: SearchParams,
    mode: Mode = "hybrid",
) -> list[Hit]:
    """Run one search for ``principal``; returns up to ``params.candidates`` fused leaf hits."""
    acl = acl_values(principal)
    if not acl["groups"] and not acl["users"]:
        return []
    if mode != "text" and query_vector is None:
        raise ValueError("dense search needs a query vector")
    values = {
        **acl,
        "qvec": np.asarray(query_vector, dtype=np.float32) if query_vector is not None else None,
        "words": query_words(question),
        "cfg": params.text_search_config,
        "n": params.candidates,
        "rrf_k": params.rrf_k,
        "wd": params.dense_weight,
        "wt": params.text_weight,
        "demote": params.superseded_factor,
    }
    with read_as(conn, principal):  # row-level security as the second wall (enterprise_rag/sql/0004_row_security.sql)
        # One statement of settings, local to this transaction: no parallel workers (a gated-off branch
        # would still start them), no JIT (compiling costs more than this query runs), memory for the
        # BM25 aggregate and sort, and for HNSW the iterative scan, so a selective ACL still yields n rows.
        # A broad scope (the count of the scope CTE, read here as well) gets no bitmap scans: the policy's ACL
        # condition, estimated without statistics, would otherwise make a bitmap of the ACL index and a sort
        # of every leaf it names look cheaper than the graph (30k leaves, dense half: 34 instead of 11 ms).
        conn.execute(
            "SELECT set_config('max_parallel_workers_per_gather', '0', true), set_config('jit', 'off', true),"
            " set_config('work_mem', %(work_mem)s, true), set_config('hnsw.iterative_scan', 'relaxed_order', true),"
            " set_config('hnsw.ef_search', %(ef_search)s, true), set_config('enable_bitmapscan',"
            " CASE WHEN coalesce(sum(a.leaves), 0) < %(small)s THEN 'on' ELSE 'off' END, true)"
            " FROM rag_acl_sets a WHERE a.allowed_groups && %(groups)s::text[] OR a.allowed_users && %(users)s::text[]",
            {"work_mem": _WORK_MEM, "ef_search": str(params.ef_search), "small": int(params.exact_scan_below), **acl},
        )
        # Never a server-side prepared statement: a generic plan would ignore how selective this
        # principal's ACL is (measured: 1 s instead of 50 ms at 200k leaves once psycopg prepared it).
        rows = conn.execute(build_search_sql(mode, params), values, prepare=False).fetchall()
    return [
        Hit(
            node_id=r[0],
            document_id=r[1],
            parent_id=r[2],
            text=r[3],
            metadata=r[4],
            score=float(r[5]),
            dense_rank=r[6],
            text_rank=r[7],
            dense_similarity=float(r[8]) if r[8] is not None else None,
        )
        for r in rows
    ]
