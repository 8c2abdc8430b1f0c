"""A LlamaIndex query engine over the answer workflow, for apps built on LlamaIndex.

It runs exactly what :meth:`EnterpriseRAG.query` runs (permission-scoped
retrieval, grading, bounded rewrites, guarded web fallback, cited generation,
citation / support / usefulness checks) and hands the result back in
LlamaIndex's shapes: a :class:`~llama_index.core.base.response.schema.Response`
whose ``source_nodes`` are the passages the answer cites and whose
``metadata`` carries the full JSON payload of the result (``QueryResult.to_dict()``).
"""

from __future__ import annotations

from typing import Any, Protocol

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.base.response.schema import Response
from llama_index.core.callbacks import CallbackManager
from llama_index.core.prompts.mixin import PromptMixinType
from llama_index.core.schema import NodeWithScore, QueryBundle, TextNode

from enterprise_rag.principal import Principal, require_principal
from enterprise_rag.schema.result import QueryResult
from enterprise_rag.schema.sources import History


class Answerer(Protocol):
    """What the engine uses of :class:`~enterprise_rag.EnterpriseRAG`: permission-scoped answers and retrieval."""

    def query(self, question: str, *, user: Principal, history: History | None = None) -> QueryResult: ...

    async def aquery(self, question: str, *, user: Principal, history: History | None = None) -> QueryResult: ...

    def as_retriever(self, user: Principal, *, history: History | None = None) -> BaseRetriever: ...


class PermissionScopedQueryEngine(BaseQueryEngine):
    """A ``BaseQueryEngine`` that answers for one user, cited and checked.

    >>> engine = rag.as_query_engine(user=Principal("dana", ["all-staff"]))  # doctest: +SKIP
    >>> response = engine.query("How long is the refund window?")          # doctest: +SKIP
    >>> str(response), [n.node.metadata["source"] for n in response.source_nodes]  # doctest: +SKIP
    >>> response.metadata["evaluation"]["confidence"]                        # doctest: +SKIP

    ``source_nodes`` hold only cited passages (the text the generator saw),
    each with ``source``, ``page``, ``document_id``, ``label`` and ``kind``
    (``corpus`` or ``web``) in its metadata. ``response.metadata`` is the
    result's JSON payload: ``answer``, ``citations``, ``evaluation``, ``pipeline``,
    ``trace_id``. ``history`` makes every query a follow-up of that
    conversation.
    """

    def __init__(
        self,
        rag: Answerer,
        user: Principal,
        history: History | None = None,
        callback_manager: CallbackManager | None = None,
    ) -> None:
        self._rag = rag
        self._user = require_principal(user)
        self._history = list(history or [])
        super().__init__(callback_manager=callback_manager)

    @property
    def user(self) -> Principal:
        return self._user

    def _get_prompt_modules(self) -> PromptMixinType:
        return {}

    def retrieve(self, query_bundle: QueryBundle) -> list[NodeWithScore]:
        """The passages this user may read for the query (no LLM involved), as ``rag.retrieve`` returns them."""
        return self._rag.as_retriever(self._user, history=self._history).retrieve(query_bundle)

    def _query(self, query_bundle: QueryBundle) -> Response:
        result = self._rag.query(query_bundle.query_str, user=self._user, history=self._history)
        return to_response(result)

    async def _aquery(self, query_bundle: QueryBundle) -> Response:
        result = await self._rag.aquery(query_bundle.query_str, user=self._user, history=self._history)
        return to_response(result)


def to_response(result: QueryResult) -> Response:
    """A LlamaIndex ``Response`` for a :class:`QueryResult`: cited passages as source nodes, payload as metadata."""
    return Response(response=result.answer, source_nodes=cited_nodes(result), metadata=result.to_dict())


def cited_nodes(result: QueryResult) -> list[NodeWithScore]:
    """The sources the answer cites, in citation order, as nodes carrying their metadata."""
    by_label = {s["label"]: s for s in result.sources}
    nodes = []
    for citation in result.citations:
        src = by_label.get(citation.label)
        if src is None:
            continue
        metadata: dict[str, Any] = {
            k: src[k] for k in ("source", "page", "document_id", "title", "breadcrumb", "effective_date", "status")
        }
        metadata.update(label=citation.label, kind=src["kind"], quote=citation.quote)
        node = TextNode(
            id_=src["node_id"] or f"{result.trace_id}:{citation.label}",
            text=src["text"],
            metadata=metadata,
            excluded_embed_metadata_keys=list(metadata),
        )
        nodes.append(NodeWithScore(node=node, score=None))
    return nodes
