"""The permission-scoped retriever: a LlamaIndex ``BaseRetriever`` over our store.

Pipeline per question: optional query transforms -> hybrid search (RRF in SQL,
ACL in both halves) -> auto-merge into parents (ACL re-checked) -> optional
rerank -> top k. Users can plug it into their own query engines.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.llms import LLM
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from enterprise_rag.config import RetrievalSettings
from enterprise_rag.llm.caller import LLMCaller
from enterprise_rag.principal import Principal, require_principal
from enterprise_rag.retrieval.merging import auto_merge, expand_within_section
from enterprise_rag.retrieval.transforms import expand_queries, hypothetical_document, standalone_question
from enterprise_rag.schema.sources import History
from enterprise_rag.store import Database
from enterprise_rag.store.parents import fetch_ancestors
from enterprise_rag.store.search import Hit, Mode, SearchParams, search

logger = logging.getLogger(__name__)

_HIDDEN_FROM_LLM = ["document_id", "level", "pages", "breadcrumb", "status", "version", "similarity"]


@dataclass(frozen=True)
class RetrievalOptions:
    """Which optional stages run. Defaults: hybrid, merge on, rewrite with history, no expansion."""

    mode: Mode = "hybrid"
    merge: bool = True
    rewrite_with_history: bool = True
    multi_query: int = 0  # extra LLM phrasings fused by RRF; 0 = off
    hyde: bool = False
    rerank: bool = True
    expand_section: bool = True


@dataclass
class RetrievalResult:
    nodes: list[NodeWithScore]
    trace: dict[str, Any] = field(default_factory=dict)


def hit_to_node(hit: Hit) -> NodeWithScore:
    meta = dict(hit.metadata)
    if hit.dense_similarity is not None:
        meta["similarity"] = round(hit.dense_similarity, 4)
    node = TextNode(
        id_=hit.node_id,
        text=hit.text,
        metadata=meta,
        excluded_llm_metadata_keys=[k for k in _HIDDEN_FROM_LLM if k in meta],
        excluded_embed_metadata_keys=list(meta),
    )
    return NodeWithScore(node=node, score=hit.score)


def fuse_rankings(rankings: list[list[Hit]], rrf_k: int) -> list[Hit]:
    """Reciprocal rank fusion of several ranked hit lists (multi-query)."""
    best: dict[str, Hit] = {}
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, hit in enumerate(ranking, start=1):
            scores[hit.node_id] = scores.get(hit.node_id, 0.0) + 1.0 / (rrf_k + rank)
            best.setdefault(hit.node_id, hit)
    order = sorted(scores, key=lambda nid: -scores[nid])
    return [replace(best[nid], score=scores[nid]) for nid in order]


class Retriever:
    """The permission-scoped retrieval pipeline, built once per store; who asks, for how many, comes per call.

    Hybrid dense + full-text search fused by RRF with the ACL predicate in both halves,
    parents merged and re-checked, section windows, optional rerank. The answer workflow
    holds one; :class:`PermissionScopedRetriever` adapts it to LlamaIndex for one user.
    ``llm`` builds the model for the optional LLM stages (follow-up rewrite, multi-query,
    HyDE) when a call first needs one.
    """

    def __init__(
        self,
        *,
        db: Database,
        embed_model: BaseEmbedding,
        settings: RetrievalSettings,
        text_search_config: str = "english",
        llm: Callable[[], LLM] | None = None,
        reranker: Any = None,
    ) -> None:
        self._db = db
        self._embed_model = embed_model
        self._settings = settings
        self._text_search_config = text_search_config
        self._llm = llm
        self._reranker = reranker

    def retrieve(
        self,
        question: str,
        principal: Principal,
        *,
        top_k: int | None = None,
        history: History | None = None,
        options: RetrievalOptions | None = None,
    ) -> RetrievalResult:
        """The best ``top_k`` (default ``retrieval.top_k``) passages ``principal`` may read, and what happened
        (queries, hits per stage, timings) for the trace."""
        top_k = top_k or self._settings.top_k
        if top_k < 1:
            raise ValueError("top_k must be at least 1")
        opts = options or RetrievalOptions()
        params = SearchParams.from_settings(
            self._settings, self._text_search_config, candidates=max(self._settings.candidates, top_k)
        )
        trace: dict[str, Any] = {"question": question, "principal": principal.user_id}
        t0 = time.perf_counter()
        needs_llm = bool(history) and opts.rewrite_with_history or opts.multi_query or opts.hyde
        # One attempt per call: retrieval is not held up by retries (a failed follow-up rewrite concatenates).
        caller = LLMCaller({"grader": self._llm()}, max_retries=0) if needs_llm and self._llm is not None else None
        query = question
        if history and opts.rewrite_with_history:
            query, trace["rewrite"] = standalone_question(caller, question, history)
        queries = [query]
        if opts.multi_query and caller is not None:
            queries += expand_queries(caller, query, opts.multi_query)
        trace["queries"] = queries
        embed_texts = list(queries)
        if opts.hyde and caller is not None:
            embed_texts[0] = hypothetical_document(caller, query)
            trace["hyde"] = embed_texts[0]
        vectors: list[Any] = [None] * len(queries)
        if opts.mode != "text":
            vectors = (
                self._embed_model.get_text_embedding_batch(embed_texts)
                if len(embed_texts) > 1
                else [self._embed_model.get_query_embedding(embed_texts[0])]
            )
        with self._db.connection_for(principal) as conn:
            rankings = [
                search(conn, principal, q, v, params, opts.mode) for q, v in zip(queries, vectors, strict=False)
            ]
            hits = rankings[0] if len(rankings) == 1 else fuse_rankings(rankings, params.rrf_k)
            trace["candidates"] = [(h.node_id, round(h.score, 5), h.dense_rank, h.text_rank) for h in hits]
            if opts.merge and hits:
                window = hits[: max(top_k * 3, 10)]
                parents = fetch_ancestors(conn, principal, sorted({h.parent_id for h in window if h.parent_id}))
                hits = (
                    auto_merge(window, parents, self._settings.merge_threshold, self._settings.merge_max_chars)
                    + hits[len(window) :]
                )
                trace["merged"] = [(h.node_id, h.extra.get("merged_from")) for h in hits if h.extra.get("merged_from")]
            if opts.expand_section and hits:
                # Expanding may drop a hit covered by a better one's window; expand a little more than k.
                head = expand_within_section(conn, principal, hits[: top_k * 2], self._settings.section_window_chars)
                hits = head + hits[top_k * 2 :]
                trace["expanded"] = [
                    (h.node_id, h.extra["expanded_with"]) for h in head if h.extra.get("expanded_with")
                ]
        nodes = [hit_to_node(h) for h in hits]
        if opts.rerank and self._reranker is not None and nodes:
            nodes = self._reranker.postprocess_nodes(nodes, query_bundle=QueryBundle(query))
            trace["reranked"] = True
        nodes = nodes[:top_k]
        trace["results"] = [(n.node.node_id, round(n.score or 0.0, 5)) for n in nodes]
        trace["ms"] = round((time.perf_counter() - t0) * 1000, 1)
        return RetrievalResult(nodes=nodes, trace=trace)

    async def aretrieve(
        self,
        question: str,
        principal: Principal,
        *,
        top_k: int | None = None,
        history: History | None = None,
        options: RetrievalOptions | None = None,
    ) -> RetrievalResult:
        """:meth:`retrieve` off the event loop (the store's driver is synchronous)."""
        return await asyncio.to_thread(
            self.retrieve, question, principal, top_k=top_k, history=history, options=options
        )


class PermissionScopedRetriever(BaseRetriever):
    """A LlamaIndex ``BaseRetriever`` for one principal over the store's :class:`Retriever` (cheap to make).

    Build it with :meth:`EnterpriseRAG.as_retriever` and use it wherever LlamaIndex takes a retriever.

    >>> retriever = rag.as_retriever(user=Principal("dana", ["all-staff"]), top_k=5)  # doctest: +SKIP
    >>> nodes = retriever.retrieve("refund window")                                  # doctest: +SKIP
    >>> nodes = await retriever.aretrieve("refund window")                           # doctest: +SKIP
    >>> from llama_index.core.query_engine import RetrieverQueryEngine
    >>> engine = RetrieverQueryEngine.from_args(retriever, llm=my_llm)               # doctest: +SKIP
    """

    def __init__(
        self,
        retriever: Retriever,
        principal: Principal,
        *,
        top_k: int | None = None,
        history: History | None = None,
        options: RetrievalOptions | None = None,
    ) -> None:
        super().__init__()
        if top_k is not None and top_k < 1:
            raise ValueError("top_k must be at least 1")
        self._retriever = retriever
        self._principal = require_principal(principal)
        self._top_k = top_k
        self._history = list(history or [])
        self._options = options

    @property
    def principal(self) -> Principal:
        return self._principal

    def retrieve_with_trace(self, question: str) -> RetrievalResult:
        """Retrieve and say what happened (queries, hits per stage, timings) for the trace."""
        return self._retriever.retrieve(
            question, self._principal, top_k=self._top_k, history=self._history, options=self._options
        )

    def _retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        return self.retrieve_with_trace(query_bundle.query_str).nodes

    async def _aretrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        result = await self._retriever.aretrieve(
            query_bundle.query_str, self._principal, top_k=self._top_k, history=self._history, options=self._options
        )
        return result.nodes
