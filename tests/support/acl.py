"""Helpers shared by the permission tests (tests/test_retrieval_acl.py, tests/security/) and the leak benchmark."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.schema import NodeWithScore, QueryBundle
from pydantic import PrivateAttr


def document_text(key: str, marker: str) -> str:
    """Two sections; the first is long enough to span sibling leaves of one parent."""
    first = (
        f"The {marker} handbook describes the quarterly policy procedure for the {key} team. Every {marker}"
        f" request needs an approval from a manager before the budget deadline, and staff keep a written"
        f" record of each {marker} decision with its reason, its date and the name of the approver."
    )
    second = (
        f"Audits of the {marker} policy happen twice a year. The findings of each {marker} audit go to the"
        f" review board, which publishes a summary for the {key} team and tracks every open action item"
        f" until the owner closes it."
    )
    third = (
        f"Exceptions to the {marker} procedure are rare: the head of the {key} team may grant one in writing,"
        f" for at most ninety days, and every exception is listed in the next quarterly {marker} report"
        f" together with the risk it carries and the date it ends."
    )
    return (
        f"# {marker.title()} handbook\n\n## Overview of {marker}\n\n{first}\n\n{second}\n\n{third}\n\n"
        f"## Details of {marker}\n\n{first}\n\n- first {marker} rule\n- second {marker} rule\n"
    )


class CachedQueryEmbedding(BaseEmbedding):
    """The real local model, with query embeddings memoised (the same questions are asked hundreds of times)."""

    _inner: Any = PrivateAttr()
    _cache: dict[str, list[float]] = PrivateAttr(default_factory=dict)

    def __init__(self, inner: BaseEmbedding) -> None:
        super().__init__(model_name=inner.model_name, embed_batch_size=inner.embed_batch_size)
        self._inner = inner

    def _get_query_embedding(self, query: str) -> list[float]:
        if query not in self._cache:
            self._cache[query] = self._inner.get_query_embedding(query)
        return self._cache[query]

    async def _aget_query_embedding(self, query: str) -> list[float]:
        return self._get_query_embedding(query)

    def _get_text_embedding(self, text: str) -> list[float]:
        return self._inner.get_text_embedding(text)

    def _get_text_embeddings(self, texts: list[str]) -> list[list[float]]:
        return self._inner.get_text_embedding_batch(texts)


class RecordingReranker:
    """A reranker that records what it was given (and reverses it, so its output is observably used)."""

    def __init__(self) -> None:
        self.calls: list[list[NodeWithScore]] = []
        self.queries: list[str] = []

    def postprocess_nodes(
        self, nodes: list[NodeWithScore], query_bundle: QueryBundle | None = None
    ) -> list[NodeWithScore]:
        self.calls.append(list(nodes))
        self.queries.append(query_bundle.query_str if query_bundle else "")
        return list(reversed(nodes))
